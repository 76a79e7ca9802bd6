"""Fakes for the client tests: a clock that advances only when slept on, and a fake event service.

The fake service implements the event endpoints as docs/assumptions.md decides (A4-A7): fixed
windows aligned to the epoch, each event counting against its own signal, partial limiting as
``rate_limited`` with status 200, full limiting as 429, rate-limit headers on every answer.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx
import pytest

from listsync.client import ListSyncClient

START = 1_800_000_000.0  # a multiple of 60: window 0 starts here
API_KEY = "sk_live_SECRET_abc123"


def iso(epoch: float) -> str:
    return (
        datetime.fromtimestamp(epoch, tz=timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


@dataclass
class BatchCall:
    """One batch request the fake service received."""

    time: float
    window: int
    sent: Counter[str]
    accepted: Counter[str]
    references: list[str]
    status: int


@dataclass
class FakeEventService:
    """POST /v1/events/batch with per-signal fixed windows (A5-A7)."""

    clock: Any
    limits: dict[str, int]
    window_seconds: float = 60.0
    send_headers: bool = True
    calls: list[BatchCall] = field(default_factory=list)
    used: Counter[tuple[str, int]] = field(default_factory=Counter)
    ingested: list[str] = field(default_factory=list)  # references, in ingestion order
    reference_in_rate_limited: bool = True
    fail_next: list[Callable[[httpx.Request], httpx.Response]] = field(default_factory=list)

    def window(self) -> int:
        return math.floor(self.clock() / self.window_seconds)

    def reset_at(self) -> float:
        return (self.window() + 1) * self.window_seconds

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.fail_next:
            return self.fail_next.pop(0)(request)
        assert request.url.path == "/v1/events/batch", request.url.path
        events = json.loads(request.content)["events"]
        slugs = list(dict.fromkeys(event["signal"] for event in events))
        unknown = [slug for slug in slugs if slug not in self.limits]
        if unknown:
            return self._reply(
                404, {"success": False, "error": f"Signals not found: {', '.join(unknown)}"}, slugs
            )
        window = self.window()
        acks, limited = [], []
        pending_use: Counter[str] = Counter()
        for event in events:
            slug = event["signal"]
            if self.used[(slug, window)] + pending_use[slug] < self.limits[slug]:
                pending_use[slug] += 1
                acks.append(
                    {
                        "id": f"evt-{len(self.ingested) + len(acks)}",
                        "signal_id": f"sig_{slug}",
                        "schema_version": None,
                        "status": "pending",
                        "reference": event.get("reference"),
                    }
                )
            else:
                entry = {"signal_id": f"sig_{slug}"}
                if self.reference_in_rate_limited and event.get("reference"):
                    entry["reference"] = event["reference"]
                limited.append(entry)
        call = BatchCall(
            self.clock(),
            window,
            Counter(e["signal"] for e in events),
            pending_use,
            [e.get("reference") for e in events],
            200,
        )
        self.calls.append(call)
        if not acks:
            call.status = 429
            return self._reply(
                429,
                {"success": False, "error": "Rate limit exceeded for all events in batch"},
                slugs,
                retry=True,
            )
        for slug, count in pending_use.items():
            self.used[(slug, window)] += count
        self.ingested.extend(ack["reference"] for ack in acks)
        body: dict[str, Any] = {"success": True, "data": acks}
        if limited:
            body["rate_limited"] = limited
        return self._reply(200, body, slugs)

    def _reply(
        self, status: int, body: dict[str, Any], slugs: list[str], retry: bool = False
    ) -> httpx.Response:
        headers = {}
        known = [slug for slug in slugs if slug in self.limits]
        if self.send_headers and known:
            window = self.window()
            headers = {
                "X-RateLimit-Limit": str(max(self.limits[s] for s in known)),
                "X-RateLimit-Remaining": str(min(self.limits[s] - self.used[(s, window)] for s in known)),
                "X-RateLimit-Reset": iso(self.reset_at()),
            }
            if retry:
                headers["Retry-After"] = str(math.ceil(self.reset_at() - self.clock()))
        return httpx.Response(status, json=body, headers=headers)


@pytest.fixture
def clock(fake_clock: Any) -> Any:
    """The suite's fake clock (``fake_clock``), under the name these tests use."""
    return fake_clock


@pytest.fixture
def make_client(clock: Any) -> Callable[..., ListSyncClient]:
    """Build a client on a MockTransport handler, the fake clock and no jitter."""

    def build(handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any) -> ListSyncClient:
        kwargs.setdefault("user_id", "usr_123")
        return ListSyncClient(
            "https://api.example.com",
            API_KEY,
            transport=httpx.MockTransport(handler),
            clock=clock,
            sleep=clock.sleep,
            rand=lambda: 0.0,
            **kwargs,
        )

    return build


@pytest.fixture
def event_service(clock: Any) -> Callable[..., FakeEventService]:
    def build(limits: dict[str, int], **kwargs: Any) -> FakeEventService:
        return FakeEventService(clock, limits, **kwargs)

    return build
