"""How many requests a client has at the service at once, adapting to how the service copes.

At network distance every round trip costs 50-300 ms, so a job keeps several requests in flight
(its List pages, its write chunks, its read backs). :class:`InFlightLimit` bounds them: at most
``limit`` requests at once, ``limit`` starting at the ceiling the user set (``max_in_flight``).
It adapts as TCP does (additive increase, multiplicative decrease): a 429, a 5xx or a request
without an answer halves the limit (never below one); ``limit`` answers in a row raise it by one,
back up to the ceiling. A ``Retry-After`` (or the reset of an exhausted window) the service sends
with a 429 pauses every new request until then, not only the one refused. Waits go through the
client's injected clock and sleep, so tests drive them without waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from listsync.client.errors import OutcomeUnknownError, RateLimitedError, ServerError

__all__ = ["MAX_IN_FLIGHT", "InFlightLimit", "check_max_in_flight"]

#: Requests at once by default: see docs/assumptions.md A35 for the measurement behind it.
MAX_IN_FLIGHT = 8
#: The most a user may ask for: past it a service is hammered rather than used.
MAX_IN_FLIGHT_CEILING = 64
#: How often a paused or full limit looks again (seconds, on the client's clock).
_POLL = 0.05


def check_max_in_flight(max_in_flight: int) -> int:
    """:raises ValueError: ``max_in_flight`` is not a whole number from 1 to 64."""
    if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
        raise ValueError(f"max_in_flight must be a whole number from 1 to 64, got {max_in_flight!r}")
    if not 1 <= max_in_flight <= MAX_IN_FLIGHT_CEILING:
        raise ValueError(f"max_in_flight must be from 1 to {MAX_IN_FLIGHT_CEILING}, got {max_in_flight}")
    return max_in_flight


class InFlightLimit:
    """At most :attr:`limit` requests at once; see the module docstring for how it adapts.

    :param ceiling: the most requests at once (``max_in_flight``).
    :param clock: epoch seconds, the client's.
    :param sleep: the client's sleep, for a pause the service asked for.
    """

    def __init__(self, ceiling: int, *, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.ceiling = self.limit = check_max_in_flight(ceiling)
        self.clock = clock
        self.sleep = sleep
        #: Times the limit was halved, for the logs and the tests.
        self.decreases = 0
        self._busy = 0
        self._answered = 0
        self._paused_until = 0.0
        self._lock = threading.Condition()

    def resize(self, ceiling: int) -> None:
        """Allow ``ceiling`` requests at once from now on (the limit starts again there)."""
        with self._lock:
            self.ceiling = self.limit = check_max_in_flight(ceiling)
            self._lock.notify_all()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the requests in flight for the ``with`` block; its outcome adapts the limit."""
        self._wait_for_pause()
        with self._lock:
            while self._busy >= self.limit:
                self._lock.wait(_POLL)
            self._busy += 1
        try:
            yield
        except BaseException as error:
            self._settle(error)
            raise
        self._settle(None)

    def _wait_for_pause(self) -> None:
        while (wait := self._paused_until - self.clock()) > 0:
            self.sleep(min(wait, 1.0))

    def _settle(self, error: BaseException | None) -> None:
        with self._lock:
            self._busy -= 1
            if error is None:
                self._answered += 1
                if self._answered >= self.limit and self.limit < self.ceiling:
                    self.limit += 1
                    self._answered = 0
            elif isinstance(error, (RateLimitedError, ServerError, OutcomeUnknownError)):
                self.limit = max(1, self.limit // 2)
                self._answered = 0
                self.decreases += 1
                if isinstance(error, RateLimitedError):
                    now = self.clock()
                    wait = error.wait_seconds(now)
                    if wait is not None:
                        self._paused_until = max(self._paused_until, now + wait)
            self._lock.notify_all()
