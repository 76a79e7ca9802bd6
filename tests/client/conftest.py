"""Fakes for the client tests: ``make_client`` builds a client on a MockTransport handler, and
``event_service`` serves the event endpoints with the emulator and records each batch sent to it.

The emulator plays the event endpoints as docs/assumptions.md decides (A4-A7): fixed windows
aligned to the epoch, each event counting against its own signal, partial limiting as
``rate_limited`` with status 200, full limiting as 429, rate-limit headers on every answer. It runs
on the test's fake clock, so a wait for a window takes no real time.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from listsync.client import ListSyncClient
from listsync.emulator import EmulatorConfig, SignalConfig

from ..support import FakeClock, LiveEmulator

API_KEY = "sk_live_SECRET_abc123"


@dataclass
class BatchCall:
    """One batch request the emulator answered."""

    time: float
    window: int
    sent: Counter[str]
    accepted: Counter[str]
    references: list[str]
    status: int


class EventService:
    """The emulator serving one signal per slug of ``limits``, each allowed that many events a window.

    ``handler`` is a MockTransport handler that forwards a request to it and records it in ``calls``
    (a test may change the answer on its way back); ``ingested`` lists the references of the events
    the emulator holds, in ingestion order.
    """

    def __init__(self, emulator: LiveEmulator, limits: dict[str, int], http: httpx.Client, clock: FakeClock):
        self.emulator = emulator
        self.limits = limits
        self.calls: list[BatchCall] = []
        self._http = http
        self._clock = clock
        self._slugs = {signal.id: signal.slug for signal in emulator.config.signals}

    @property
    def ingested(self) -> list[str]:
        return [event.get("reference") for event in self.emulator.state.events]

    def handler(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/events/batch", request.url.path
        sent = json.loads(request.content)["events"]
        now = self._clock()
        url = self.emulator.url + request.url.path
        answer = self._http.send(
            httpx.Request(request.method, url, headers=request.headers, content=request.content)
        )
        acks = answer.json()["data"] if answer.status_code == 200 else []
        self.calls.append(
            BatchCall(
                now,
                math.floor(now / self.emulator.config.window_seconds),
                Counter(event["signal"] for event in sent),
                Counter(self._slugs[ack["signal_id"]] for ack in acks),
                [event.get("reference") for event in sent],
                answer.status_code,
            )
        )
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    def spend(self, *slugs: str) -> None:
        """Use up the current window of each of ``slugs``, as another sender of them would."""
        for slug in slugs:
            spent = [
                {
                    "signal": slug,
                    "identity": {"type": "account", "id": "elsewhere"},
                    "reference": f"other:{i}",
                }
                for i in range(self.limits[slug])
            ]
            self._http.post(
                f"{self.emulator.url}/v1/events/batch",
                json={"events": spent},
                headers={"Authorization": f"Bearer {API_KEY}"},
            ).raise_for_status()


def events_config(limits: dict[str, int]) -> EmulatorConfig:
    """A tenant (key :data:`API_KEY`) with a signal ``sig_<slug>`` per slug of ``limits``, each
    allowed its number of events a window. The emulator sets a limit per signal type, so each
    distinct limit is given a type of its own (the client is told types of its own, or none)."""
    types = dict(zip(sorted(set(limits.values())), ("Event", "Metric", "State"), strict=False))
    return EmulatorConfig(
        secret_keys=[API_KEY],
        signals=[
            SignalConfig(slug=slug, id=f"sig_{slug}", type=types[limit]) for slug, limit in limits.items()
        ],
        rate_limits={signal_type: limit for limit, signal_type in types.items()},
    )


@pytest.fixture
def make_client(fake_clock: FakeClock) -> Callable[..., ListSyncClient]:
    """Build a client on a MockTransport handler, the fake clock and no jitter."""

    def build(handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any) -> ListSyncClient:
        kwargs.setdefault("user_id", "usr_123")
        return ListSyncClient(
            "https://api.example.com",
            API_KEY,
            transport=httpx.MockTransport(handler),
            clock=fake_clock,
            sleep=fake_clock.sleep,
            rand=lambda: 0.0,
            **kwargs,
        )

    return build


@pytest.fixture
def event_service(
    live_emulator: Callable[..., LiveEmulator], fake_clock: FakeClock
) -> Iterator[Callable[..., EventService]]:
    """Serves the emulator for ``limits`` (slug -> events a window) on the fake clock:
    ``event_service(limits, **dialect_overrides)``."""
    with httpx.Client() as http:

        def serve(limits: dict[str, int], **dialect_overrides: Any) -> EventService:
            emulator = live_emulator(events_config(limits), dialect_overrides=dialect_overrides)
            return EventService(emulator, limits, http, fake_clock)

        yield serve
