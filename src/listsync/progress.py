"""Progress lines for long work: at most one log line every ten seconds, whatever the loop's pace.

The loops that can run for minutes (reading an extract, paging a List, waiting for a rate-limit
window) call a :class:`Progress` on every turn; it logs only when its last line is ``every``
seconds old, so a long run says where it is every ten seconds and a short one says nothing more.
A wait is slept through :meth:`Progress.sleep`, in steps that end when a line is due, so a long
wait is not silent either. The clock is injected, so tests drive it without waiting.

A progress line is a log record marked with :data:`PROGRESS` (``extra=PROGRESS``), which
:func:`is_progress` recognises: the command line shows those while a run works, and hides the
other records below WARNING unless asked (``-v``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import monotonic

__all__ = ["PROGRESS", "PROGRESS_SECONDS", "Progress", "is_progress"]

PROGRESS_SECONDS = 10.0
"""How often long work logs a progress line, in seconds."""

#: The ``extra`` of a log record that tells how far long work has come.
PROGRESS = {"listsync_progress": True}


def is_progress(record: logging.LogRecord) -> bool:
    """Whether ``record`` is a progress line (logged with ``extra=PROGRESS``)."""
    return getattr(record, "listsync_progress", False) is True


class Progress:
    """Logs ``message % args`` on ``logger`` at most once every ``every`` seconds.

    :param logger: the logger of the module doing the work, so the line says where it comes from.
    :param message: a ``%``-format string; :meth:`sleep` adds the seconds left as its last argument.
    :param every: the shortest time between two lines, in seconds.
    :param clock: returns seconds (default: :func:`time.monotonic`); the first line is due
        ``every`` seconds after the object is made.
    """

    def __init__(
        self,
        logger: logging.Logger,
        message: str,
        *,
        every: float = PROGRESS_SECONDS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if every <= 0:
            raise ValueError(f"every must be more than 0 seconds, got {every}")
        self.logger = logger
        self.message = message
        self.every = every
        self._clock = clock if clock is not None else monotonic
        self._last = self._clock()

    def __call__(self, *args: object) -> bool:
        """Log the message with ``args`` if a line is due; return whether it logged."""
        now = self._clock()
        if now - self._last < self.every:
            return False
        self._last = now
        self.logger.info(self.message, *args, extra=PROGRESS)
        return True

    def sleep(self, seconds: float, sleep: Callable[[float], None], *args: object) -> None:
        """Sleep ``seconds`` through ``sleep``, logging the message with ``args`` and the seconds
        still to wait whenever a line is due (``sleep`` should advance the clock, as a real sleep
        does)."""
        left = seconds
        while left > 0:
            self(*args, left)
            # Wake when the next line is due, or at the end of the wait if that comes first.
            step = min(left, max(0.0, self._last + self.every - self._clock()))
            sleep(step)
            left -= step
