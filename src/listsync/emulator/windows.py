"""Per-signal fixed-length rate windows (assumptions A5–A7) and the X-RateLimit-* headers.

Each event counts one request against its own signal. Two limiters, chosen by the profile's
``windows`` knob (:data:`LIMITERS`): :class:`FixedWindowLimiter` aligns windows to multiples of
``window_seconds`` since the Unix epoch (A5), so every signal's window resets at the same instants;
:class:`FirstEventWindowLimiter` opens a signal's window at its first event after the previous
one ended.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from listsync.emulator.profiles import ResetFormat, WindowKind


@dataclass(frozen=True)
class Window:
    """The current window of one signal: its limit, what is left, and when it resets."""

    limit: int
    remaining: int
    reset_at: float


class FixedWindowLimiter:
    """Counts events per signal in its current window, aligned to the epoch (A5); ``clock``
    returns epoch seconds."""

    def __init__(self, window_seconds: float, clock: Callable[[], float]) -> None:
        self.window_seconds = window_seconds
        self._clock = clock
        # signal id -> (window start, events counted in that window)
        self._counts: dict[str, tuple[float, int]] = {}

    def now(self) -> float:
        return self._clock()

    def _window_start(self, signal_id: str, now: float) -> float:
        """The start of the signal's window at ``now`` (the same for every signal here)."""
        return math.floor(now / self.window_seconds) * self.window_seconds

    def used(self, signal_id: str, now: float) -> int:
        start = self._window_start(signal_id, now)
        counted_start, count = self._counts.get(signal_id, (start, 0))
        return count if counted_start == start else 0

    def window(self, signal_id: str, limit: int, now: float) -> Window:
        start = self._window_start(signal_id, now)
        return Window(limit, max(limit - self.used(signal_id, now), 0), start + self.window_seconds)

    def take(self, signal_id: str, count: int, now: float) -> None:
        """Count ``count`` accepted events against the signal's current window."""
        start = self._window_start(signal_id, now)
        self._counts[signal_id] = (start, self.used(signal_id, now) + count)

    def reset(self) -> None:
        self._counts.clear()


class FirstEventWindowLimiter(FixedWindowLimiter):
    """Windows of ``window_seconds`` that each signal opens with its first event after its previous
    window ended; until then :meth:`window` describes the one an event would open ``now``."""

    def _window_start(self, signal_id: str, now: float) -> float:
        counted = self._counts.get(signal_id)
        if counted is not None and now < counted[0] + self.window_seconds:
            return counted[0]
        return now


LIMITERS: dict[WindowKind, type[FixedWindowLimiter]] = {
    "aligned": FixedWindowLimiter,
    "first_event": FirstEventWindowLimiter,
}


def rate_limit_headers(
    window: Window, now: float, *, limited: bool, reset_format: ResetFormat
) -> dict[str, str]:
    """The X-RateLimit-* headers (A6); a limited answer also carries ``Retry-After``."""
    headers = {
        "X-RateLimit-Limit": str(window.limit),
        "X-RateLimit-Remaining": str(window.remaining),
        "X-RateLimit-Reset": reset_header(window.reset_at, reset_format),
    }
    if limited:
        headers["Retry-After"] = str(max(math.ceil(window.reset_at - now), 1))
    return headers


def reset_header(epoch_seconds: float, reset_format: ResetFormat) -> str:
    """``X-RateLimit-Reset``: ISO 8601 (A6) or whole epoch seconds, rounded up so a client that
    waits until then never retries early."""
    return iso_utc(epoch_seconds) if reset_format == "iso" else str(math.ceil(epoch_seconds))


def iso_utc(epoch_seconds: float) -> str:
    """``2026-11-21T06:12:00.000Z``: ISO 8601 UTC with milliseconds."""
    moment = datetime.fromtimestamp(epoch_seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
