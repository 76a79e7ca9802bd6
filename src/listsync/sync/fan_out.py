"""Requests in flight together, their results taken in order.

A job at network distance waits on each round trip (50-300 ms to a hosted API), so its write
chunks and read backs go several at once: :func:`fan_out` runs ``work`` on up to ``at_once``
items at a time in threads and yields the results in the items' order, so the caller records
them, logs progress and decides what comes next in one thread, exactly as it would one at a time.
The client's own limit (:class:`~listsync.client.in_flight.InFlightLimit`) narrows what is really
in flight when the service pushes back; ``at_once`` is the client's ``max_in_flight``.

Order between kinds of writes (adds before patches before deletes; a copy's delete before a
patch by the same identity, A30; rows' adds before their cell updates) is kept by the callers,
which fan out one kind at a time: writes fanned out together touch different people or rows.
"""

from __future__ import annotations

import contextvars
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["fan_out"]

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


#: Items handed to the threads ahead of the one whose result is awaited, per thread: a slow item
#: holds back the results after it, not the work, until the threads are that far ahead of it.
AHEAD = 2


def fan_out(work: Callable[[ItemT], ResultT], items: Iterable[ItemT], *, at_once: int) -> Iterator[ResultT]:
    """``work(item)`` for every item, up to ``at_once`` running at a time, the results yielded in
    the items' order as each is ready. A thread that is done starts the next item at once, even
    while an earlier one is still running (up to :data:`AHEAD` times ``at_once`` items started and
    not yielded). An exception of ``work`` is raised at its item's turn; the items not started
    by then are not started. ``at_once`` of 1 runs them one by one here."""
    if at_once <= 1:
        yield from map(work, items)
        return
    queue = iter(items)
    running: deque[Future[ResultT]] = deque()
    with ThreadPoolExecutor(at_once, thread_name_prefix="listsync-requests") as pool:

        def start(item: ItemT) -> None:
            # Each thread runs in a copy of the caller's context (its logging context included).
            running.append(pool.submit(contextvars.copy_context().run, work, item))

        try:
            for item in itertools.islice(queue, AHEAD * at_once):
                start(item)
            while running:
                result = running.popleft().result()
                for item in itertools.islice(queue, 1):
                    start(item)
                yield result
        finally:
            for future in running:
                future.cancel()
