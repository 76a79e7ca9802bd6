"""The plan of a rows upsert: the additions, cell changes and removals it holds, the duplicate keys
it leaves alone, the ledger the next state is made from, and its plan-file entries.

:func:`~listsync.sync.rows.diff.plan_rows_upsert` makes a plan; the apply, the read back and the
plan file take it from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from listsync.sync.state import Ledger


@dataclass(frozen=True, slots=True)
class RowAddition:
    """A key missing from the List: its cells as JSON values, ready for POST rows."""

    key: str
    cells: dict[str, Any]


@dataclass(slots=True)  # not frozen: one is made per cell to write, and frozen ones cost twice as much
class CellChange:
    """One cell to update: ``before`` is the List's value, ``after`` the JSON value to send."""

    key: str
    row_id: str
    column_id: str
    before: Any
    after: Any


@dataclass(frozen=True, slots=True)
class RowRemoval:
    """A List row whose key is not in the extract (planned only with ``delete_missing``)."""

    key: str
    row_id: str


@dataclass(frozen=True, slots=True)
class DuplicateKey:
    """A key held by several rows of the List; ``in_extract`` says whether an extract row was blocked."""

    key: str
    row_ids: tuple[str, ...]
    in_extract: bool

    @property
    def reason(self) -> str:
        """Why an extract row of the key was not written."""
        return f"key {self.key!r} is held by {len(self.row_ids)} List rows; remove the duplicates"


@dataclass
class RowsPlan:
    """What an upsert would do, and the counts its summary needs.

    ``unchanged`` counts extract rows whose cells all match; ``list_rows`` counts the rows read
    from the List (the denominator of the delete safety check); ``not_added`` the rows a
    ``update_only`` upsert left out, ``not_updated`` the rows an ``insert_only`` one left as they
    are.
    """

    key_column: str
    list_rows: int
    additions: list[RowAddition] = field(default_factory=list)
    changes: list[CellChange] = field(default_factory=list)
    removals: list[RowRemoval] = field(default_factory=list)
    duplicate_keys: list[DuplicateKey] = field(default_factory=list)
    unchanged: int = 0
    not_added: int = 0
    not_updated: int = 0
    ledger: RowsLedger | None = None
    #: How the List was read: reads again of a torn read, and whether the read planned from was
    #: steady (:mod:`listsync.sync.steady`); what tore it when it was not.
    rereads: int = 0
    steady_read: bool = True
    torn_reasons: list[str] = field(default_factory=list)

    def drop_additions(self, places: np.ndarray) -> None:
        """Plan no addition at ``places`` (among :attr:`additions`), nor keep it in the ledger."""
        if not len(places):
            return
        dropped = set(places.tolist())
        self.additions = [addition for place, addition in enumerate(self.additions) if place not in dropped]
        if self.ledger is not None:
            self.ledger.add_keys = np.delete(self.ledger.add_keys, places)
            self.ledger.add_sent = np.delete(self.ledger.add_sent, places)

    @property
    def changed_rows(self) -> int:
        """The number of List rows with at least one cell to update."""
        return len({change.row_id for change in self.changes})

    @property
    def blocked_by_duplicates(self) -> int:
        """The number of extract rows not written because their key has several rows in the List."""
        return sum(1 for duplicate in self.duplicate_keys if duplicate.in_extract)

    @property
    def has_writes(self) -> bool:
        """Whether applying the plan sends any write request."""
        return bool(self.additions or self.changes or self.removals)


@dataclass
class RowsLedger(Ledger):
    """What the next state needs of a rows plan (:mod:`listsync.sync.state`), besides what every
    :class:`~listsync.sync.state.Ledger` holds: the columns the digests are made of, the key hash
    and digest of each row to add (in the plan's order) and of each row to update (by key), and
    the key hash of each row to delete."""

    columns: list[str] = field(default_factory=list)
    add_keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    add_sent: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    updates: dict[str, tuple[int, int]] = field(default_factory=dict)
    delete_keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))


def plan_entries(plan: RowsPlan) -> Iterator[dict[str, Any]]:
    """The plan as plan-file entries, in the order it is applied.

    ``{"action": "add", "key", "cells"}``, ``{"action": "update", "key", "row_id", "changes":
    {column: {"before", "after"}}}`` (one per row), ``{"action": "delete", "key", "row_id"}``, and
    ``{"action": "duplicate_key_in_list", "key", "row_ids", "in_extract"}`` for what is left alone.
    """
    for addition in plan.additions:
        yield {"action": "add", "key": addition.key, "cells": addition.cells}
    by_row: dict[str, dict[str, Any]] = {}
    for change in plan.changes:
        entry = by_row.setdefault(
            change.row_id, {"action": "update", "key": change.key, "row_id": change.row_id, "changes": {}}
        )
        entry["changes"][change.column_id] = {"before": change.before, "after": change.after}
    yield from by_row.values()
    for removal in plan.removals:
        yield {"action": "delete", "key": removal.key, "row_id": removal.row_id}
    for duplicate in plan.duplicate_keys:
        yield {
            "action": "duplicate_key_in_list",
            "key": duplicate.key,
            "row_ids": list(duplicate.row_ids),
            "in_extract": duplicate.in_extract,
        }
