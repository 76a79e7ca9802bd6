"""An extract's chunks made in a thread of their own, one chunk ahead of the work on them.

Reading and normalising a chunk is mostly Arrow's and the CSV parser's work, done without the
interpreter's lock, so on a second core it overlaps deciding the chunk before (measured on the
people benchmark, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["made_ahead"]

T = TypeVar("T")

# The end of the items. Not StopIteration: its traceback would hold the last item until collected.
_END: Any = object()


def made_ahead(items: Iterator[T], *, name: str) -> Iterator[T]:
    """The items of ``items`` in their order, each made in a thread named ``name`` while the caller
    works on the one before; an error making an item is raised where that item would have come.

    ``items`` is advanced, and closed when the caller stops early, in that thread alone, so that
    what it opened there (a database cursor) is used by one thread only, and in the caller's
    context variables (a task's logging context: its lines say which task they come from). At
    most one item is made ahead: the memory of one more chunk.
    """
    context = contextvars.copy_context()

    def make() -> Any:
        return next(items, _END)

    with ThreadPoolExecutor(1, thread_name_prefix=name) as maker:
        coming = maker.submit(context.run, make)
        try:
            while (item := coming.result()) is not _END:
                coming = maker.submit(context.run, make)
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                maker.submit(context.run, close).result()  # after the item being made, if any
