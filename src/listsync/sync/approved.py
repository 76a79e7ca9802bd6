"""Applying a reviewed plan exactly as it was reviewed.

A dry run writes its plan file; a person reviews it (the deletes of a CRM clean-up, say) and
approves; the run that applies it is given the file as ``approved_plan``. That run reads the
extract and the List again and plans as usual, then, before any write, holds its plan to the
file, line for line (the lines as :func:`~listsync.files.write_json_lines` writes them):

- every line equal: the plan is the one approved, and it is applied. Its deletes were reviewed,
  so ``max_delete_fraction`` does not stop them;
- any line different, missing or extra: the extract or the List changed since the review in a way
  that changes what would be written (a plan's lines hold the List's values each patch replaces
  and each person or row each delete removes), and :class:`PlanChangedError` says where; nothing is
  written. A change of the List the plan does not touch leaves it as approved;
- a file older than ``max_plan_age`` (its modification time): :class:`StalePlanError`; a review
  that old is done again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any

from listsync.errors import ListSyncError
from listsync.files import json_line

if TYPE_CHECKING:
    from listsync.files import OpenableFile

__all__ = ["PlanChangedError", "StalePlanError", "check_approved_plan"]

#: The most characters of a differing line a message quotes.
QUOTED = 300


class PlanChangedError(ListSyncError, ValueError):
    """The plan made now is not the plan approved; nothing was written."""


class StalePlanError(ListSyncError, ValueError):
    """The approved plan is older than ``max_plan_age``; nothing was written."""


def check_approved_plan(
    entries: Iterable[Mapping[str, Any]],
    approved: str | os.PathLike[str] | OpenableFile,
    *,
    max_age: float,
    now: float | None = None,
) -> int:
    """Hold the plan made now (``entries``, in the order they are applied) to the approved plan
    file; return its number of lines.

    :param now: the time to age the file against (default: the system's clock).
    :raises StalePlanError: the file was written more than ``max_age`` seconds ago.
    :raises PlanChangedError: a line differs, or one plan has lines the other has not.
    :raises FileNotFoundError: there is no such file.
    """
    age = (time.time() if now is None else now) - _modified(approved)
    if age > max_age:
        raise StalePlanError(
            f"the approved plan {approved} was written {age / 3600:.1f} hours ago, more than max_plan_age "
            f"({max_age / 3600:g} hours): run the dry run again and review its plan"
        )
    count = 0
    for number, (wanted, made) in enumerate(zip_longest(_lines(approved), map(json_line, entries)), start=1):
        if wanted != made:
            raise PlanChangedError(
                f"the plan made now differs from the approved plan {approved} at line {number}: approved "
                f"{_quoted(wanted)}, now {_quoted(made)}. The extract or the List changed since the "
                "review; nothing was written. Run the dry run again and review its plan."
            )
        count += 1
    return count


def _lines(path: str | os.PathLike[str] | OpenableFile) -> Iterator[str]:
    if isinstance(path, str | os.PathLike):
        with Path(path).open(encoding="utf-8") as handle:
            yield from handle
    else:
        with path.open("r") as handle:
            yield from handle


def _modified(path: str | os.PathLike[str] | OpenableFile) -> float:
    """The file's modification time (seconds since the epoch)."""
    if isinstance(path, str | os.PathLike):
        return Path(path).stat().st_mtime
    stat = getattr(path, "stat", None)
    modified = getattr(stat(), "st_mtime", None) if stat is not None else None
    if modified is None:
        raise ValueError(f"the store of {path} gives no modification time, which max_plan_age needs")
    return float(modified)


def _quoted(line: str | None) -> str:
    if line is None:
        return "nothing (the plan ends before)"
    text = line.rstrip("\n")
    return text if len(text) <= QUOTED else text[:QUOTED] + "..."
