"""The memory guard of the List syncs: fail early, with what to do, rather than run out of memory.

A List sync holds every prepared extract row and every List person or row it reads as columns,
and then the writes it planned, made objects a slice at a time as they are sent, with what the
read back and the next state need of each. :class:`MemoryGuard` counts the rows as they are read
(extract chunks as they are prepared, List pages as they come) and, once the plan is made and
before anything is sent, its writes; it estimates the peak from per-item costs measured on this
code and raises :class:`MemoryLimitError` as soon as the estimate passes ``max_memory``, before the
next chunk or page is read or the first write is sent. A sharded run counts only its shard's
items: sharding is the way to fit a big List on small workers.

The estimate is the larger of two peaks: reading and planning (every extract row and List item
as columns) and sending (every planned write, made an object in its turn, with what the next
state and the read back keep of each; the extract is let go by then). The costs are measured on
fill, change and quiet nights of CRM-like people (benchmarks/people_job.py;
benchmarks/RESULTS.md), to keep the estimate well inside the 1.5 times the guard is held to.
That bound is what ``max_memory="auto"`` rests on: it allows three quarters of the worker's
memory, so a run whose real peak is below half of it is never refused.

===========================  =======================================================  ===========
per item                     measured                                                 counted
===========================  =======================================================  ===========
people sync, extract row     (623 - 180 MiB) / 2.09 million rows read on a quiet      250 bytes
people sync, List person     night of 1,000,000: about 222 bytes either
people sync, planned write   fill night of 990,054 adds: 519 MiB at the end of the     350 bytes
                             apply (359 bytes a write), and 698 MiB at the end of
people sync, read back       the read back (190 bytes a write more)                   200 bytes
rows upsert, extract row     503 (3 columns), 797 (10)                                420 + 50 a column
rows upsert, List row        388 (3 columns), 598 (10)                                330 + 35 a column
rows upsert, planned write   fill night of 98,937 row adds of 10 columns, a peak      350 a column
                             of 509 MiB: 3,490 bytes a write
===========================  =======================================================  ===========

The rows figures are of the columnar upsert (prepared rows in one frame, the List's cells held
compactly as read), measured on the data of benchmarks/rows_upsert.py between 100,000 and
200,000 rows. Each run of benchmarks/people_job.py prints the guard's estimate beside the peak.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from listsync.errors import ListSyncError
from listsync.extract.options import Shard
from listsync.sync.settings import format_bytes

__all__ = [
    "BASE_MEMORY",
    "PEOPLE_COSTS",
    "READ_BACK_AT_ONCE",
    "MemoryGuard",
    "MemoryLimitError",
    "RowCosts",
    "collected_sparingly",
    "give_back_freed_memory",
    "kept_objects_frozen",
    "rows_costs",
    "use_returning_allocator",
]

T = TypeVar("T")

#: People writes read back in full at a time (:func:`~listsync.sync.people.verify.verify_people`),
#: those the List shows other than written: their accounts' people are held for one slice only (a
#: fill night of 1,000,000 people held every person it added at once: 1,620 MiB at its peak).
READ_BACK_AT_ONCE = 250_000

#: What a sync process holds before its first row (interpreter, pandas, the client): 180 MiB.
BASE_MEMORY = 180 * 1024**2


class MemoryLimitError(ListSyncError, ValueError):
    """A sync would need more memory than ``max_memory``; the message says how to split it."""


@dataclass(frozen=True)
class RowCosts:
    """What one item takes at a sync's peak, in bytes: an extract row (of the run's shard), one
    List person or row (``list_noun`` names them in messages), one planned write, and what the
    read back holds of each write besides."""

    extract: int
    listed: int
    written: int
    list_noun: str
    read_back: int = 0


#: The people sync's costs.
PEOPLE_COSTS = RowCosts(
    extract=250,
    listed=250,
    written=350,
    list_noun="List people",
    read_back=200,
)


def rows_costs(columns: int) -> RowCosts:
    """The rows upsert's costs with ``columns`` mapped columns (the key included)."""
    return RowCosts(
        extract=420 + 50 * columns, listed=330 + 35 * columns, written=350 * columns, list_noun="List rows"
    )


class MemoryGuard:
    """Counts a sync's rows as they are read and fails when their estimated peak passes ``limit``.

    :param limit: ``max_memory`` in bytes (:func:`~listsync.sync.settings.parse_max_memory`);
        None: count, never fail.
    :param costs: the job's per-row costs.
    :param what: the sync, for the message ("the people sync of tbl_x").
    :param shard: the run's shard, for the advice.
    """

    def __init__(self, limit: int | None, costs: RowCosts, *, what: str, shard: Shard | None) -> None:
        self.limit = limit
        self.costs = costs
        self.what = what
        self.shard = shard
        self.extract_rows = 0
        self.list_rows = 0
        self.planned_writes = 0

    def estimate(self) -> int:
        """The peak the items counted so far need, in bytes: that of reading and planning (the
        extract and the List as columns) or that of sending (the writes made objects, with what
        the read back and the next state keep of each), whichever is higher; the extract is let
        go before the first write."""
        costs, writes = self.costs, self.planned_writes
        reading = self.extract_rows * costs.extract + self.list_rows * costs.listed
        return BASE_MEMORY + max(reading, writes * (costs.written + costs.read_back))

    def count_extract(self, rows: int) -> None:
        """Count ``rows`` extract rows of the run's shard, read and about to be prepared.

        :raises MemoryLimitError: the estimate passes the limit.
        """
        self.extract_rows += rows
        self._check()

    def count_planned(self, writes: int) -> None:
        """Count the ``writes`` a plan holds, before the first is sent.

        :raises MemoryLimitError: the estimate passes the limit.
        """
        self.planned_writes += writes
        self._check()

    def forget_list(self) -> None:
        """Forget the List items counted so far: the List is read again from the start."""
        self.list_rows = 0

    def count_listed(self, items: int) -> None:
        """Count ``items`` List people or rows of the run's shard, read at once.

        :raises MemoryLimitError: the estimate passes the limit.
        """
        self.list_rows += items
        self._check()

    def count_list(self, items: Iterable[T]) -> Iterator[T]:
        """``items`` (List people or rows of the run's shard, as read), counted as they go by.

        :raises MemoryLimitError: the estimate passes the limit, before the next item is read.
        """
        if self.limit is None:
            yield from items
            return
        room, costs = self.limit - BASE_MEMORY, self.costs
        for item in items:
            self.list_rows += 1
            # Against the extract rows counted so far, at each item: the extract is read meanwhile
            # (the List is read while it is prepared).
            if self.list_rows * costs.listed > room - self.extract_rows * costs.extract:
                self._check()
            yield item

    def _check(self) -> None:
        if self.limit is None or self.estimate() <= self.limit:
            return
        rows = f"{self.extract_rows:,} extract rows and {self.list_rows:,} {self.costs.list_noun}"
        if self.planned_writes:
            rows = f"{rows} read, and {self.planned_writes:,} planned writes"
        else:
            rows = f"{rows} so far"
        need = f"{self.what} would need about {format_bytes(self.estimate())} for {rows}"
        limit = f"max_memory={format_bytes(self.limit)}"
        if self.limit <= BASE_MEMORY:
            raise MemoryLimitError(
                f"{need}, more than {limit}, below the {format_bytes(BASE_MEMORY)} a sync takes "
                "before its first row: raise max_memory"
            )
        count = 1 if self.shard is None else self.shard.count
        tasks = max(2, count * math.ceil((self.estimate() - BASE_MEMORY) / (self.limit - BASE_MEMORY)))
        further = " further" if self.shard is not None else ""
        raise MemoryLimitError(
            f'{need}, more than {limit}: split it{further} with shard="i/n" (about 1/n each, e.g. '
            f'shard over {tasks} tasks or more: shard="0/{tasks}" to "{tasks - 1}/{tasks}") '
            "or raise max_memory"
        )


#: Under glibc, each allocation of this size or more gets pages of its own, given back to the
#: system when it is freed (``M_MMAP_THRESHOLD``, glibc's starting value, kept fixed).
MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's malloc.h


def use_returning_allocator() -> None:
    """Make the memory a sync frees go back to the system, so that its peak is what it holds.

    A sync builds, joins and drops columns a chunk at a time. Glibc serves large blocks from pages
    of their own only until one is freed, then raises that threshold and serves them from a heap
    that keeps freed pages; Arrow's mimalloc and jemalloc pools keep freed pages too, split among
    blocks of other sizes. Here the threshold is fixed at :data:`MMAP_THRESHOLD` and Arrow allocates
    through the C library (its system pool). Measured on the people benchmark (benchmarks/RESULTS.md),
    a peak of 800 MiB at 1,000,000 people and 1,818 MiB at 3,000,000, against 964 and 1,963 MiB with
    jemalloc (and 1,090 MiB with mimalloc at 1,000,000), for about 2 s more reading and planning at
    1,000,000 (fresh pages are mapped for each block).

    Where the threshold cannot be fixed (a C library without ``mallopt``), Arrow's jemalloc pool is
    chosen instead. ``ARROW_DEFAULT_MEMORY_POOL`` and ``MALLOC_MMAP_THRESHOLD_``, when set, are left
    to decide.
    """
    fixed = "MALLOC_MMAP_THRESHOLD_" in os.environ or _fix_mmap_threshold()
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.system_memory_pool() if fixed else pa.jemalloc_memory_pool())
    except NotImplementedError:  # an Arrow build without jemalloc: its default pool stays
        return


def give_back_freed_memory() -> None:
    """Give the C library's free pages back to the system, between a sync's steps.

    Blocks under :data:`MMAP_THRESHOLD` come from the C library's heap, and reading an extract
    or a List frees many of them between blocks still held; glibc keeps those pages until
    ``malloc_trim`` returns them. Larger blocks are served from the heap's free space too while
    it has some, touching its pages again: planning copies a field's values for the pairs it
    compares, field after field. On a shard of 3,000,000 people (one of 8), calling this after
    the extract is prepared and after the List is read lowers the peak from 480 to 434 MiB, and
    after matching and after each field compared, from 359 to 346 MiB (with the other changes
    of benchmarks/RESULTS.md between). Elsewhere than glibc it does nothing.
    """
    trim = _libc_function("malloc_trim")
    if trim is not None:
        trim(0)


def _fix_mmap_threshold() -> bool:
    """Fix glibc's ``M_MMAP_THRESHOLD`` at :data:`MMAP_THRESHOLD`; whether the C library took it."""
    mallopt = _libc_function("mallopt")
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


@functools.cache
def _libc_function(name: str) -> Any:
    """The C library's function ``name``; None where there is none (not glibc, no C library).
    Looked up once: ``find_library`` runs ``ldconfig``."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None


@contextlib.contextmanager
def kept_objects_frozen() -> Iterator[Callable[[], None]]:
    """Within, the function given (``settle``) moves every object alive to where Python's cycle
    collector no longer looks (``gc.freeze``); on leaving, they are handed back, unless something
    else had frozen objects before.

    Each full collection looks at every object that may be part of a cycle; a preparation that
    keeps hundreds of thousands of values (dicts, lists) would be looked at again and again as it
    grows. Settled after each chunk, they are not: 500,000 rows with a JSON column prepared in
    3.3-3.9 s instead of 4.0-4.3 s. Objects freed while frozen are freed as ever (by their
    reference counts); only cycles among them wait for the hand-back.
    """
    frozen_before = gc.get_freeze_count()
    try:
        yield gc.freeze
    finally:
        if not frozen_before:
            gc.unfreeze()


#: The allocations between two collections of the youngest generation while a sync runs (CPython
#: collects it every 700): see :func:`collected_sparingly`.
SYNC_YOUNG_COLLECTION = 10_000


@contextlib.contextmanager
def collected_sparingly() -> Iterator[None]:
    """Within, Python's cycle collector runs its young collections every
    :data:`SYNC_YOUNG_COLLECTION` allocations rather than every 700; on leaving, the threshold is
    put back, unless something within set another.

    A sync makes and drops an object per request, page and write, most living longer than 700
    allocations: they reach the oldest generation, whose full collections look at all the sync
    holds, more often the more it holds. On the fill night of 3,000,000 people the collector took
    20.0 s of 133.5 s in 335 full collections (4.7 s at 1,000,000); with this and the plan frozen
    once made (:func:`kept_objects_frozen`), 0.4 s in 19, and 6.2 s in all its collections rather
    than 26 s (benchmarks/RESULTS.md). Objects freed by their reference counts, nearly all, are
    freed as ever.
    """
    before = gc.get_threshold()
    raised = (max(before[0], SYNC_YOUNG_COLLECTION), *before[1:])
    gc.set_threshold(*raised)
    try:
        yield
    finally:
        if gc.get_threshold() == raised:
            gc.set_threshold(*before)
