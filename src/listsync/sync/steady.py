"""Reading a List that other people may be changing: a paged read whose pages do not join is read
again, a bounded number of times, until one is steady (docs/assumptions.md A40).

The service pages a List by offset (§4.3): an item removed or added before the page a read has
reached shifts every later one, so the read skips some and sees others twice, and a diff taking it
as the List would re-add the skipped people and delete nobody it should. A
:class:`~listsync.client.paging.ReadWatch` notes such a torn read; :func:`read_steadily` reads
again after a pause, up to :data:`MAX_REREADS` times, and says whether the read it returns is
steady. A sync plans no delete and no re-add from a read that never was.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from listsync.client.paging import ReadWatch

__all__ = ["MAX_REREADS", "REREAD_PAUSE", "ReadAhead", "ReadCancelledError", "SteadyRead", "read_steadily"]

log = logging.getLogger(__name__)

T = TypeVar("T")
ItemT = TypeVar("ItemT")

#: Reads again of a torn read, at most, before the run makes do with an unsteady one (A40).
MAX_REREADS = 3
#: Seconds before the first read again; doubled before each next one (2, 4, 8: 14 s in all).
REREAD_PAUSE = 2.0


@dataclass
class SteadyRead(Generic[T]):
    """What :func:`read_steadily` read: the last read's ``value``, whether it was ``steady``, the
    ``rereads`` it took, and what tore the last one (``problems``, empty when steady)."""

    value: T
    steady: bool = True
    rereads: int = 0
    problems: list[str] = field(default_factory=list)


def read_steadily(
    read: Callable[[ReadWatch], T],
    *,
    sleep: Callable[[float], None],
    what: str,
    max_rereads: int = MAX_REREADS,
    pause: float = REREAD_PAUSE,
) -> SteadyRead[T]:
    """``read(watch)`` until its watch notes no torn page, or it was read again ``max_rereads``
    times; pauses ``pause`` seconds before the first read again, doubling. Each read starts
    afresh: ``read`` must give up what an earlier one held (a memory guard's count...)."""
    rereads = 0
    while True:
        watch = ReadWatch()
        value = read(watch)
        if watch.steady:
            if rereads:
                log.info("The read of %s was steady after %d reads again", what, rereads)
            return SteadyRead(value, True, rereads)
        if rereads >= max_rereads:
            log.warning(
                "The read of %s was still torn after %d reads again (%s): the List is changing under "
                "the sync; no delete and no re-add is planned from it",
                what,
                rereads,
                "; ".join(watch.problems),
            )
            return SteadyRead(value, False, rereads, watch.problems)
        delay = pause * 2**rereads
        log.warning(
            "The read of %s was torn (%s): reading it again in %g s", what, "; ".join(watch.problems), delay
        )
        sleep(delay)
        rereads += 1


#: Seconds a cancelled :class:`ReadAhead` is waited for: the pages in flight of a service that
#: answers (a round trip or two), not the retries of one that does not.
CANCEL_WAIT = 2.0


class ReadCancelledError(Exception):
    """A :class:`ReadAhead` was cancelled: its reader stops at the next item."""


class ReadAhead(Generic[T]):
    """A read of a List made in a thread of its own while the caller does other work (prepares the
    extract): ``read(stop)`` runs at once, and :meth:`result` waits for what it gives.

    Reading a large List is mostly waiting for the service; preparing an extract is mostly work
    here, so the two overlap. :meth:`cancel` (the caller failed) tells the reader to stop at its
    next item (:meth:`items`) and waits up to :data:`CANCEL_WAIT` seconds for it to have stopped,
    so that the pages it has asked for are answered before the caller closes the client; a read
    still retrying an unreachable service is not waited for. What it read is let go.
    """

    def __init__(self, read: Callable[[threading.Event], T], *, what: str) -> None:
        self._stop = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = read(self._stop)
            except ReadCancelledError:
                pass
            except BaseException as exc:  # handed to the caller by result()
                self._error = exc

        # The thread runs in a copy of the caller's context (its logging context included).
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(run,), name=f"read {what}", daemon=True)
        self._thread.start()

    def result(self) -> T:
        """What the read gave, once it has (handed over: not kept here); its error, raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        value, self._value = self._value, None
        return value  # type: ignore[return-value]

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join(CANCEL_WAIT)

    @staticmethod
    def items(items: Iterable[ItemT], stop: threading.Event) -> Iterator[ItemT]:
        """``items`` until ``stop`` is set, then :class:`ReadCancelledError`."""
        for item in items:
            if stop.is_set():
                raise ReadCancelledError
            yield item
