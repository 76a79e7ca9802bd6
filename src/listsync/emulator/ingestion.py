"""Signal ingestion: POST /v1/events and POST /v1/events/batch (spec §4.1, §4.2, §7, §8).

Checks run in the order of assumption A4, each over the whole request before the next, so nothing
is counted against a rate limit unless the whole request is valid. The profile decides the format
of ``X-RateLimit-Reset`` and whether ``rate_limited`` entries carry ``reference``.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from listsync.emulator.config import EmulatorConfig, SignalConfig
from listsync.emulator.stats import Stats
from listsync.emulator.store import ApiError, EmulatorState
from listsync.emulator.windows import FixedWindowLimiter, Window, iso_utc, rate_limit_headers

MAX_BATCH = 100


@dataclass(frozen=True)
class Ingested:
    """A successful answer: its body and its rate-limit headers."""

    body: dict[str, Any]
    headers: dict[str, str]


# Version 4 and the RFC 4122 variant, set on 128 random bits (what uuid.uuid4 does, without the
# cost of building a UUID object per event, which dominated batch ingestion).
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


def _uuid4(rng: random.Random) -> str:
    digits = f"{(rng.getrandbits(128) & _UUID4_CLEAR) | _UUID4_SET:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def _is_text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _required_fields_problem(event: object) -> str | None:
    if not isinstance(event, dict) or not _is_text(event.get("signal")):
        return "signal is required"
    identity = event.get("identity")
    if not (isinstance(identity, dict) and _is_text(identity.get("type")) and _is_text(identity.get("id"))):
        return "identity.type and identity.id are required"
    if event.get("data") is not None and not isinstance(event["data"], dict):
        return "data must be an object"
    return None


def _timestamp_problem(event: dict[str, Any]) -> str | None:
    timestamp = event.get("timestamp")
    if timestamp is None:
        return None
    if isinstance(timestamp, str):
        try:
            # Python 3.10's fromisoformat does not read a trailing Z.
            datetime.fromisoformat(timestamp[:-1] + "+00:00" if timestamp.endswith("Z") else timestamp)
        except ValueError:
            pass
        else:
            return None
    return "timestamp must be an ISO 8601 string"


def _schema_version(signal: SignalConfig, event: dict[str, Any]) -> int | None:
    """The schema version an event uses (``latest`` when absent or null), or raise a 400."""
    requested = event.get("version")
    if requested is None or requested == "latest":
        return max(signal.schema_versions) if signal.schema_versions else None
    # 2.0 names version 2; 1.5 names no version.
    whole = (
        isinstance(requested, (int, float))
        and not isinstance(requested, bool)
        and float(requested).is_integer()
    )
    if whole and int(requested) in signal.schema_versions:
        return int(requested)
    shown = int(requested) if whole else requested
    raise ApiError(400, f"Schema version {shown} not found for signal {signal.slug}")


def _limited_entry(event: dict[str, Any], signal: SignalConfig, *, with_reference: bool) -> dict[str, Any]:
    """A ``rate_limited`` entry (spec §2.5); ``with_reference``: carry the event's reference (A7)."""
    entry: dict[str, Any] = {"signal_id": signal.id}
    if with_reference and event.get("reference") is not None:
        entry["reference"] = event["reference"]
    return entry


class SignalIngestion:
    """Validates, rate-limits and records events against an :class:`EmulatorState`."""

    def __init__(
        self,
        config: EmulatorConfig,
        state: EmulatorState,
        limiter: FixedWindowLimiter,
        stats: Stats,
        rng: random.Random,
    ) -> None:
        self._signals = {s.slug: s for s in config.signals if s.active}
        self._limits = config.rate_limits
        self._dialect = config.dialect
        self._state = state
        self._limiter = limiter
        self._stats = stats
        self._rng = rng

    def _check(
        self, events: list[Any], *, batch: bool
    ) -> list[tuple[dict[str, Any], SignalConfig, int | None]]:
        """Run the A4 checks, each over every event before the next; return each event with its
        signal and schema version."""

        def fail(status: int, index: int, message: str) -> ApiError:
            return ApiError(status, f"events[{index}]: {message}" if batch else message)

        for index, event in enumerate(events):
            if (problem := _required_fields_problem(event)) is not None:
                raise fail(400, index, problem)
        for index, event in enumerate(events):
            if (problem := _timestamp_problem(event)) is not None:
                raise fail(400, index, problem)
        unknown = list(dict.fromkeys(e["signal"] for e in events if e["signal"] not in self._signals))
        if unknown:
            if batch:
                raise ApiError(404, f"Signals not found: {', '.join(unknown)}")
            raise ApiError(404, f"Signal not found: {unknown[0]}")
        checked = []
        for index, event in enumerate(events):
            signal = self._signals[event["signal"]]
            try:
                checked.append((event, signal, _schema_version(signal, event)))
            except ApiError as exc:
                raise fail(400, index, exc.message) from None
        for index, (event, signal, _) in enumerate(checked):
            data = event.get("data") or {}
            missing = [key for key in signal.required_data_keys if key not in data]
            if missing:
                message = f"Missing required data keys for signal {signal.slug}: {', '.join(missing)}"
                raise fail(400, index, message)
        return checked

    def _record(
        self, event: dict[str, Any], signal: SignalConfig, schema_version: int | None, received_at: str
    ) -> dict[str, Any]:
        """Store an accepted event; return its acknowledgement. ``received_at`` is ISO 8601."""
        ack: dict[str, Any] = {
            "id": _uuid4(self._rng),
            "signal_id": signal.id,
            "schema_version": schema_version,
            "status": "pending",
        }
        if event.get("reference") is not None:
            ack["reference"] = event["reference"]
        stored = ack.copy()
        stored["signal"] = signal.slug
        stored["identity"] = event["identity"]
        stored["data"] = event.get("data")
        stored["timestamp"] = event.get("timestamp") or received_at
        stored["received_at"] = received_at
        self._state.events.append(stored)
        return ack

    def _window(self, signal: SignalConfig, now: float) -> Window:
        return self._limiter.window(signal.id, self._limits[signal.type], now)

    def ingest_one(self, body: object) -> Ingested:
        """POST /v1/events: one event; 429 ``Rate limit exceeded`` when its signal is spent."""
        if not isinstance(body, dict):
            raise ApiError(400, "Invalid JSON body")
        ((_, signal, schema_version),) = self._check([body], batch=False)
        now = self._limiter.now()
        window = self._window(signal, now)
        if window.remaining == 0:
            self._stats.events_rate_limited[signal.slug] += 1
            raise ApiError(429, "Rate limit exceeded", self._headers(window, now, limited=True))
        self._limiter.take(signal.id, 1, now)
        ack = self._record(body, signal, schema_version, iso_utc(now))
        self._stats.events_accepted[signal.slug] += 1
        headers = self._headers(self._window(signal, now), now, limited=False)
        return Ingested({"success": True, "data": ack}, headers)

    def ingest_batch(self, body: object) -> Ingested:
        """POST /v1/events/batch: events in request order, each accepted while its signal has budget.

        Some limited: 200 with ``rate_limited``; all limited: 429 and nothing is recorded (A7).
        Headers: the highest limit, the lowest remaining after the batch, the next reset (§8.4).
        """
        if not isinstance(body, dict):
            raise ApiError(400, "Invalid JSON body")
        events = body.get("events")
        if not isinstance(events, list) or not events:
            raise ApiError(400, "events array is required and must not be empty")
        if len(events) > MAX_BATCH:
            raise ApiError(400, f"Maximum {MAX_BATCH} events per batch")
        checked = self._check(events, batch=True)
        now = self._limiter.now()
        distinct = {signal.id: signal for _, signal, _ in checked}
        budget = {sid: self._window(s, now).remaining for sid, s in distinct.items()}
        accepted = []
        limited = []
        for item in checked:
            signal = item[1]
            if budget[signal.id] > 0:
                budget[signal.id] -= 1
                accepted.append(item)
            else:
                limited.append(item)
        self._stats.events_rate_limited.update(s.slug for _, s, _ in limited)
        if not accepted:
            raise ApiError(
                429,
                "Rate limit exceeded for all events in batch",
                self._batch_headers(list(distinct.values()), now, limited=True),
            )
        for sid, count in Counter(s.id for _, s, _ in accepted).items():
            self._limiter.take(sid, count, now)
        self._stats.events_accepted.update(s.slug for _, s, _ in accepted)
        received_at = iso_utc(now)
        acks = [self._record(event, signal, version, received_at) for event, signal, version in accepted]
        result: dict[str, Any] = {"success": True, "data": acks}
        if limited:
            with_reference = self._dialect.rate_limited_reference
            result["rate_limited"] = [
                _limited_entry(e, s, with_reference=with_reference) for e, s, _ in limited
            ]
        return Ingested(result, self._batch_headers(list(distinct.values()), now, limited=False))

    def _batch_headers(self, signals: list[SignalConfig], now: float, *, limited: bool) -> dict[str, str]:
        windows = [self._window(s, now) for s in signals]
        combined = Window(
            limit=max(w.limit for w in windows),
            remaining=min(w.remaining for w in windows),
            reset_at=min(w.reset_at for w in windows),
        )
        return self._headers(combined, now, limited=limited)

    def _headers(self, window: Window, now: float, *, limited: bool) -> dict[str, str]:
        return rate_limit_headers(window, now, limited=limited, reset_format=self._dialect.reset_format)
