"""Rejected rows: kept with their row number, original values and every reason.

A :class:`Rejects` collects the rows an extract could not pass on. With a ``path`` it writes
them as JSON lines as they arrive (memory stays bounded however many there are), one object per
row::

    {"row": 7, "reasons": ["email 'jane@': has nothing after the @"], "original": {"Email": "jane@", ...}}

Without a path it keeps them in memory (:attr:`Rejects.records`), which suits tests and small
extracts. Either way it counts them by kind of reason (:attr:`Rejects.by_reason`,
:func:`reason_kind`), for the summary and the run's report. The file is created (empty) when the
collector is, so an empty file means "nothing rejected", and it is rewritten, not appended to, by
a retried task.

:meth:`Rejects.check_fraction` enforces the task's ``max_reject_fraction`` with
:class:`TooManyRejectsError`.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from listsync.errors import ListSyncError
from listsync.extract.text_rules import NormalizationError
from listsync.extract.value_rules import to_json_value
from listsync.files import json_line

__all__ = ["MAX_REASON_KINDS", "Rejects", "TooManyRejectsError", "duplicate_reason", "reason_kind"]

#: The kinds of reason a :class:`Rejects` counts one by one; rarer ones past these are counted
#: together under :data:`OTHER_REASONS`, so that an extract of a million different mistakes
#: does not keep a million counters.
MAX_REASON_KINDS = 200
OTHER_REASONS = "other reasons"
# What a reason's message says of one row: a quoted value, a parenthesised list.
_ROW_VALUES = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\([^()]*\)")


class TooManyRejectsError(ListSyncError, ValueError):
    """More rows were rejected than ``max_reject_fraction`` allows; the message has the counts."""

    def __init__(
        self,
        rejected: int,
        total_read: int,
        max_reject_fraction: float,
        path: Path | None,
        parameter: str = "max_reject_fraction",
    ) -> None:
        where = f"; the rejected rows and their reasons are in {path}" if path is not None else ""
        super().__init__(
            f"{rejected} of {total_read} rows rejected ({rejected / total_read:.2%}), more than "
            f"{parameter}={max_reject_fraction} allows{where}"
        )
        self.rejected = rejected
        self.total_read = total_read
        self.max_reject_fraction = max_reject_fraction
        self.path = path


def duplicate_reason(clashes_with: int, key: str) -> str:
    """The reason given to a row that repeats the key of row ``clashes_with`` with other values."""
    return (
        f"duplicate of row {clashes_with}: same {key} but different values "
        f"(row {clashes_with}, the first in the extract, is kept)"
    )


def reason_kind(reason: str) -> str:
    """``reason`` without what it says of its row, so that rows rejected for the same rule count
    together: after the field it names (``email (column 'Email')``), quoted values and
    parenthesised lists become ``…`` (one for several in a row); a number in the field part too
    (``duplicate of row …``)."""
    field, colon, message = reason.partition(": ")
    if not colon:
        field, message = "", reason
    field = re.sub(r"\d+", "…", field)
    return field + colon + re.sub(r"…(?: …)+", "…", _ROW_VALUES.sub("…", message))


def _json_original(original: Mapping[Any, Any]) -> dict[str, Any]:
    record = {}
    for key, value in original.items():
        try:
            record[str(key)] = to_json_value(value)
        except NormalizationError:  # bytes, infinities: keep what a person can read
            record[str(key)] = repr(value)
    return record


class Rejects:
    """Collects rejected rows; writes them as JSON lines to ``path`` when one is given.

    Use as a context manager (or call :meth:`close`) so the file is complete on disk.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path: Path | None = Path(path) if path is not None else None
        self.count = 0
        #: Rejected rows by kind of reason (:func:`reason_kind`), a row counted once per kind.
        self.by_reason: Counter[str] = Counter()
        self.records: list[dict[str, Any]] = []
        """The rejected rows, when there is no ``path``."""
        self._file: IO[str] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8")

    def add(self, row_number: int, original: Mapping[Any, Any], reasons: Sequence[str]) -> None:
        """Record row ``row_number`` (1-based, as in the extract) as rejected for ``reasons``."""
        if not reasons:
            raise ValueError(f"row {row_number} is rejected without a reason; give at least one")
        record = {"row": int(row_number), "reasons": list(reasons), "original": _json_original(original)}
        self.count += 1
        for kind in dict.fromkeys(map(reason_kind, reasons)):
            known = kind in self.by_reason or len(self.by_reason) < MAX_REASON_KINDS
            self.by_reason[kind if known else OTHER_REASONS] += 1
        if self._file is not None:
            self._file.write(json_line(record))
        else:
            self.records.append(record)

    def add_duplicate(
        self, row_number: int, original: Mapping[Any, Any], clashes_with: int, key: str
    ) -> None:
        """Reject a row whose ``key`` repeats row ``clashes_with`` with different values.

        ``key`` names the key and its value: ``"account domain and identity (acme.com, email:a@acme.com)"``.
        """
        self.add(row_number, original, [duplicate_reason(clashes_with, key)])

    def check_fraction(
        self, total_read: int, max_reject_fraction: float, *, parameter: str = "max_reject_fraction"
    ) -> None:
        """Raise :class:`TooManyRejectsError` if over ``max_reject_fraction`` of the rows were rejected.

        ``total_read`` is the number of rows read; ``max_reject_fraction`` is between 0 (no reject
        allowed) and 1 (any number allowed).
        The file is flushed first, so it is complete when the error is read.
        """
        if not 0 <= max_reject_fraction <= 1:
            raise ValueError(f"{parameter} must be between 0 and 1, got {max_reject_fraction}")
        self.flush()
        if total_read and self.count / total_read > max_reject_fraction:
            raise TooManyRejectsError(self.count, total_read, max_reject_fraction, self.path, parameter)

    def flush(self) -> None:
        """Push written rejects to disk."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Finish the file; further :meth:`add` calls fail."""
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> Rejects:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
