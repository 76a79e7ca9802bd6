"""Rate-limit bookkeeping: the service's hints, and a per-signal budget per window.

The service limits each signal to a number of events per window (spec §8: Event 100/min,
Metric 1,000/min, State 30/min) and reports ``X-RateLimit-Limit``, ``X-RateLimit-Remaining`` and
``X-RateLimit-Reset`` (ISO 8601; an epoch number is tolerated). A 429 may also carry
``Retry-After`` (seconds, or an HTTP date). All times here are epoch seconds from the injected
clock, so a fake clock drives every decision in tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

SIGNAL_TYPE_LIMITS: dict[str, int] = {"Event": 100, "Metric": 1000, "State": 30}
"""Events per window for each signal type (spec §8), keyed by the spec's type names."""

WINDOW_SECONDS = 60.0
"""Length of the service's rate-limit window (spec §8: "per minute")."""


def parse_timestamp(value: str) -> float | None:
    """Epoch seconds from an ISO 8601 string or an epoch number; ``None`` when unreadable."""
    text = value.strip()
    if not text:
        return None
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        # Epoch milliseconds are 13 digits; seconds stay below 1e11 for the next three millennia.
        return number / 1000.0 if number > 1e11 else number
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def parse_retry_after(value: str, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta seconds or an HTTP date)."""
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True)
class RateLimitInfo:
    """The ``X-RateLimit-*`` headers of one response.

    For a batch the service aggregates over the batch's signals (spec §8 rule 4): ``limit`` is
    the highest limit and ``remaining`` the lowest remaining, so they describe a single signal
    only when the batch held one signal.
    """

    limit: int | None
    remaining: int | None
    reset_at: float | None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> RateLimitInfo | None:
        """Read the headers; ``None`` when the response carries none of them."""
        lowered = {key.lower(): value for key, value in headers.items()}
        raw_limit = lowered.get("x-ratelimit-limit")
        raw_remaining = lowered.get("x-ratelimit-remaining")
        raw_reset = lowered.get("x-ratelimit-reset")
        if raw_limit is None and raw_remaining is None and raw_reset is None:
            return None
        return cls(
            limit=_parse_int(raw_limit),
            remaining=_parse_int(raw_remaining),
            reset_at=parse_timestamp(raw_reset) if raw_reset is not None else None,
        )


def _parse_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value.strip()))
    except ValueError:
        return None


class SignalBudget:
    """What one signal may still send in its current window, learned from the service.

    The spec says "per minute" and gives each window's end in ``X-RateLimit-Reset``, not how
    windows are placed: aligned to the clock, or opened by a signal's first event (A5). So a
    window's end is never guessed from the clock: it is read from an answer that describes this
    signal alone (a single-signal batch, a 429, a ``rate_limited`` entry). Until then the window
    is unknown (:attr:`window_known` is false), and the sender gives the signal a batch of its own
    so that the answer's headers describe it. An answer without headers leaves a cautious end:
    one window after the first event sent in it.

    The budget starts from the signal's known limit (or a cautious guess when the type is
    unknown) and is corrected by what the service says.
    """

    def __init__(self, limit: int | None, *, window_seconds: float = WINDOW_SECONDS) -> None:
        self.limit = limit
        self.known = limit is not None
        self.window_seconds = window_seconds
        self.used = 0
        self.window_end: float | None = None
        # When the first event of the current, not yet described window was sent.
        self.opened_at: float | None = None
        # The service's own word that the signal is over its limit until then.
        self.exhausted_until: float | None = None

    def window_known(self, now: float) -> bool:
        """Whether the current window's end is known from the service."""
        self._roll(now)
        return self.window_end is not None

    def available(self, now: float) -> int:
        """How many events may be sent now without exceeding the window."""
        self._roll(now)
        if self.exhausted_until is not None and now < self.exhausted_until:
            return 0
        # Unknown type: one event probes the limit; the response headers then tell the rest.
        limit = self.limit if self.limit is not None else 1
        return max(0, limit - self.used)

    def next_open(self, now: float) -> float:
        """Epoch time at which :meth:`available` becomes positive again."""
        if self.exhausted_until is not None and now < self.exhausted_until:
            return self.exhausted_until
        self._roll(now)
        if self.window_end is not None:
            return self.window_end
        if self.opened_at is not None and self.used:
            return self.opened_at + self.window_seconds
        return now

    def spend(self, count: int, now: float) -> None:
        """Record ``count`` events sent now."""
        self._roll(now)
        if self.window_end is None and self.opened_at is None:
            self.opened_at = now
        self.used += count

    def refund(self, count: int) -> None:
        """Give back budget for events the service refused without counting (``rate_limited``)."""
        self.used = max(0, self.used - count)

    def observe(self, info: RateLimitInfo, now: float) -> None:
        """Learn from headers that describe this signal alone (a single-signal response)."""
        if info.limit is not None and not self.known:
            # A limit below one would leave the signal waiting forever.
            self.limit = max(1, info.limit)
            self.known = True
        if info.reset_at is not None and info.reset_at <= now:
            # The window the answer describes has ended already (the answer came at its very end,
            # or the reset is rounded down): a new one has begun, with its whole budget.
            self.window_end, self.opened_at, self.used = None, None, 0
            return
        if info.reset_at is not None:
            self.window_end = info.reset_at
            self.opened_at = None
        if info.remaining is not None and self.limit is not None:
            # The answer to the last request sent: the service's count is the current one.
            self.used = max(0, self.limit - info.remaining)

    def exhaust(self, until: float | None, now: float) -> None:
        """The service said this signal is over its limit; wait until its window ends.

        ``until`` is the service's reset (of this signal, or of a batch it shared); the later of
        it and the window end known for this signal wins, and a window end known from neither
        is taken as one window from now.
        """
        self._roll(now)
        ends = [end for end in (until, self.window_end) if end is not None and end > now]
        end = max(ends) if ends else now + self.window_seconds
        self.exhausted_until = end
        self.window_end = end
        self.opened_at = None
        if self.limit is not None:
            self.used = self.limit

    def _roll(self, now: float) -> None:
        end = self.window_end
        if end is None and self.opened_at is not None:
            end = self.opened_at + self.window_seconds
        if end is not None and now >= end:
            self.window_end = None
            self.opened_at = None
            self.used = 0
        if self.exhausted_until is not None and now >= self.exhausted_until:
            self.exhausted_until = None
