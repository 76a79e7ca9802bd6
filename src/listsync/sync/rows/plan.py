"""Planning a rows upsert: the List's rows against the extract's, by key; pure, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from listsync.sync.rows.cells import cell_values_equal, to_cell_value


@dataclass(frozen=True)
class CurrentRow:
    """A row of the List as read: its id and each cell's ``value`` by column id.

    ``shown`` holds the cells' ``computedValue`` where it differs from the value (an enum's label
    for its key): what the List shows of a value written in that form.
    """

    row_id: str
    cells: Mapping[str, Any]
    shown: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class RowAddition:
    """A key missing from the List: its cells as JSON values, ready for POST rows."""

    key: str
    cells: dict[str, Any]


@dataclass(frozen=True)
class CellChange:
    """One cell to update: ``before`` is the List's value, ``after`` the JSON value to send."""

    key: str
    row_id: str
    column_id: str
    before: Any
    after: Any


@dataclass(frozen=True)
class RowRemoval:
    """A List row whose key is not in the extract (planned only with ``delete_missing``)."""

    key: str
    row_id: str


@dataclass(frozen=True)
class DuplicateKey:
    """A key held by several rows of the List; ``in_extract`` says whether an extract row was blocked."""

    key: str
    row_ids: tuple[str, ...]
    in_extract: bool


@dataclass
class RowsPlan:
    """What an upsert would do, and the counts its summary needs.

    ``unchanged`` counts extract rows whose cells all match; ``list_rows`` counts the rows read
    from the List (the denominator of the delete safety check).
    """

    key_column: str
    list_rows: int
    additions: list[RowAddition] = field(default_factory=list)
    changes: list[CellChange] = field(default_factory=list)
    removals: list[RowRemoval] = field(default_factory=list)
    duplicate_keys: list[DuplicateKey] = field(default_factory=list)
    unchanged: int = 0

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


def plan_rows_upsert(
    desired: Iterable[Mapping[str, Any]],
    current: Iterable[CurrentRow],
    *,
    key_column: str,
    delete_missing: bool = False,
    overwrite_with_null: bool = False,
    normalize_key: Callable[[Any], str | None] | None = None,
) -> RowsPlan:
    """Diff the prepared extract rows against the List's current rows.

    :param desired: extract rows as ``{column id: value}``, already prepared (mapped, normalised,
        one row per key). Values may be Python types (``Decimal``, ``date``, ``datetime``, dicts,
        lists); they are converted with :func:`to_cell_value` for sending.
    :param current: the List's rows, with the cells' ``value`` (see :class:`CurrentRow`).
    :param key_column: the List column id whose value identifies a row.
    :param delete_missing: plan a removal for each List row whose key is not in ``desired``.
    :param overwrite_with_null: a null in ``desired`` clears the List's cell; otherwise a null
        leaves the cell as it is.
    :param normalize_key: turns a key cell of the List into the form ``desired`` uses (for a
        domain key, the domain normaliser), so ``Acme.com`` in the List matches ``acme.com``;
        ``None`` (the result) means the cell cannot be a key. Defaults to ``str``. When the
        normalised key differs from the List's cell, the cell is updated like any other.
    :raises ValueError: a desired row without a key, or two desired rows with the same key.
    """
    to_key = normalize_key or _default_key
    rows_by_key: dict[str, list[CurrentRow]] = {}
    list_rows = 0
    for row in current:
        list_rows += 1
        key = to_key(row.cells.get(key_column))
        if key is not None:
            rows_by_key.setdefault(key, []).append(row)

    plan = RowsPlan(key_column=key_column, list_rows=list_rows)
    seen: set[str] = set()
    for position, cells in enumerate(desired):
        key = cells.get(key_column)
        if key is None or key == "":
            raise ValueError(
                f"extract row {position} has no value for the key column {key_column!r}; "
                "prepare the rows (prepare_rows rejects rows without a key) before planning"
            )
        key = str(key)
        if key in seen:
            raise ValueError(
                f"key {key!r} appears twice in the extract; prepare the rows (prepare_rows keeps "
                "one row per key) before planning"
            )
        seen.add(key)
        matches = rows_by_key.get(key)
        if not matches:
            plan.additions.append(RowAddition(key, _cells_to_add(cells, key)))
        elif len(matches) > 1:
            plan.duplicate_keys.append(DuplicateKey(key, tuple(r.row_id for r in matches), True))
        else:
            changes = _changed_cells(key, cells, matches[0], overwrite_with_null)
            if changes:
                plan.changes.extend(changes)
            else:
                plan.unchanged += 1

    for key, rows in rows_by_key.items():
        if key in seen:
            continue
        if len(rows) > 1:
            plan.duplicate_keys.append(DuplicateKey(key, tuple(r.row_id for r in rows), False))
        # Every row holding a key the extract lacks is missing, duplicates included: removing
        # them all is what was asked, not a guess between them.
        if delete_missing:
            plan.removals.extend(RowRemoval(key, row.row_id) for row in rows)
    return plan


def _default_key(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _cells_to_add(cells: Mapping[str, Any], key: str) -> dict[str, Any]:
    # A new row has nothing to overwrite: a null cell is simply not sent.
    return {
        column: _cell_value_for(key, column, value) for column, value in cells.items() if value is not None
    }


def _changed_cells(
    key: str, cells: Mapping[str, Any], row: CurrentRow, overwrite_with_null: bool
) -> list[CellChange]:
    changes = []
    for column, value in cells.items():
        if value is None and not overwrite_with_null:
            continue
        before = row.cells.get(column)
        if not cell_values_equal(value, before):
            changes.append(CellChange(key, row.row_id, column, before, _cell_value_for(key, column, value)))
    return changes


def _cell_value_for(key: str, column: str, value: Any) -> Any:
    try:
        return to_cell_value(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"row {key!r}, column {column!r}: {exc}") from exc


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
