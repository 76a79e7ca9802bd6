"""Per-signal fixed-window rate limiting (assumptions A5–A7).

Windows are aligned to multiples of ``window_seconds`` since the Unix epoch, so every signal's
window resets at the same instants and ``X-RateLimit-Reset`` is predictable. Each event counts one
request against its own signal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone


@dataclass(frozen=True)
class Window:
    """The current window of one signal: its limit, what is left, and when it resets."""

    limit: int
    remaining: int
    reset_at: float


class FixedWindowLimiter:
    """Counts events per signal in the current fixed window; ``clock`` returns epoch seconds."""

    def __init__(self, window_seconds: float, clock: Callable[[], float]) -> None:
        self.window_seconds = window_seconds
        self._clock = clock
        # signal id -> (window start, events counted in that window)
        self._counts: dict[str, tuple[float, int]] = {}

    def now(self) -> float:
        return self._clock()

    def _window_start(self, now: float) -> float:
        return math.floor(now / self.window_seconds) * self.window_seconds

    def used(self, signal_id: str, now: float) -> int:
        start = self._window_start(now)
        counted_start, count = self._counts.get(signal_id, (start, 0))
        return count if counted_start == start else 0

    def window(self, signal_id: str, limit: int, now: float) -> Window:
        start = self._window_start(now)
        return Window(limit, max(limit - self.used(signal_id, now), 0), start + self.window_seconds)

    def take(self, signal_id: str, count: int, now: float) -> None:
        """Count ``count`` accepted events against the signal's current window."""
        start = self._window_start(now)
        self._counts[signal_id] = (start, self.used(signal_id, now) + count)

    def reset(self) -> None:
        self._counts.clear()


def rate_limit_headers(window: Window, now: float, *, limited: bool) -> dict[str, str]:
    """The X-RateLimit-* headers (A6); a limited answer also carries ``Retry-After``."""
    headers = {
        "X-RateLimit-Limit": str(window.limit),
        "X-RateLimit-Remaining": str(window.remaining),
        "X-RateLimit-Reset": iso_utc(window.reset_at),
    }
    if limited:
        headers["Retry-After"] = str(max(math.ceil(window.reset_at - now), 1))
    return headers


def iso_utc(epoch_seconds: float) -> str:
    """``2026-11-21T06:12:00.000Z``: ISO 8601 UTC with milliseconds."""
    moment = datetime.fromtimestamp(epoch_seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
