"""Upsert of warehouse rows into a List: changed cells only.

The service has no row upsert, so one is built from its four row operations::

    current = read_current_rows(client, table_id, key_column)       # GET rows, paged
    plan = plan_rows_upsert(desired, current, key_column="domain")  # pure: no I/O
    outcome = apply_rows_plan(plan, client, table_id)                # POST rows, PATCH cells, DELETE rows

A row is identified by the value of its ``key_column`` cell. The plan holds:

- additions: keys that are not in the List, sent as POST rows (cells that are null are left out);
- changes: one cell update per cell whose value differs, sent as PATCH cells chunked across rows;
- removals: rows whose key is not in the extract, only with ``delete_missing=True``;
- duplicate keys: keys held by more than one row of the List. Those rows are reported and left
  alone (which of them is "the" row would be a guess); extract rows with such a key are counted
  as failed, so a person removes the duplicates.

Values compare canonically (:func:`cell_values_equal`): numbers by value (``10 == 10.0``), strings
exactly, booleans only to booleans, dates and timestamps as ISO 8601 (instants compared in UTC),
objects and arrays element by element with the same rules, i.e. as canonical JSON. The List side
is always a cell's ``value``, never its ``computedValue``. A null in the extract leaves the List's
cell alone unless ``overwrite_with_null=True``.

Row adds are not idempotent: when a POST rows chunk fails in a way that may have reached the
server, :func:`apply_rows_plan` re-reads that chunk's keys and re-sends only the rows still
absent, so a retry never creates a duplicate row.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

__all__ = [
    "CellChange",
    "CurrentRow",
    "DuplicateKey",
    "RowAddition",
    "RowRemoval",
    "RowsPlan",
    "cell_values_equal",
    "plan_rows_upsert",
    "to_cell_value",
]


@dataclass(frozen=True)
class CurrentRow:
    """A row of the List as read: its id and each cell's ``value`` by column id."""

    row_id: str
    cells: Mapping[str, Any]


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


def to_cell_value(value: Any) -> Any:
    """Convert an extract value to the JSON value sent in a cell.

    ``Decimal`` and other numbers become ``int`` when integral (``Decimal("10.00")`` → ``10``),
    else ``float``; dates become ``YYYY-MM-DD``; timestamps become ISO 8601 in UTC with a ``Z``
    (naive ones are taken as UTC); mappings and sequences are converted element by element.

    :raises ValueError: a number that JSON cannot carry (NaN, infinity).
    :raises TypeError: a value of a type that has no JSON form.
    """
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Number):
        return _json_number(value)
    if isinstance(value, dt.datetime):
        return _as_utc(value).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): to_cell_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_cell_value(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars (bool_, int64, float64) unwrap to Python ones
        return to_cell_value(value.item())
    raise TypeError(f"a {type(value).__name__} value has no JSON form")


def _json_number(value: Any) -> int | float:
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a finite number")
        return int(value) if value == value.to_integral_value() else float(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{number} is not a finite number")
    return number


def cell_values_equal(desired: Any, current: Any) -> bool:
    """Whether the List already holds ``desired`` (an extract value) in a cell whose value is ``current``.

    ``current`` is the cell's JSON ``value`` as read (``None`` for an empty or absent cell).
    Numbers compare by the value that would be sent (``10 == 10.0``, ``Decimal("1.50") == 1.5``);
    strings exactly; booleans only to booleans; a ``date`` to a ``YYYY-MM-DD`` string, a
    ``datetime`` to any ISO 8601 string of the same instant; mappings and sequences element by
    element, key order ignored.
    """
    if desired is None or current is None:
        return desired is None and current is None
    if isinstance(desired, dt.datetime):
        return isinstance(current, str) and _parse_instant(current) == _as_utc(desired)
    if isinstance(desired, dt.date):
        return isinstance(current, str) and current == desired.isoformat()
    if isinstance(desired, bool) or isinstance(current, bool):
        return isinstance(desired, bool) and isinstance(current, bool) and desired == current
    if isinstance(desired, numbers.Number):
        return isinstance(current, numbers.Number) and _json_number(desired) == current
    if isinstance(desired, str):
        return isinstance(current, str) and desired == current
    if isinstance(desired, Mapping):
        return (
            isinstance(current, Mapping)
            and {str(k) for k in desired} == set(current)
            and all(cell_values_equal(v, current[str(k)]) for k, v in desired.items())
        )
    if isinstance(desired, (list, tuple)):
        return (
            isinstance(current, Sequence)
            and not isinstance(current, str)
            and len(desired) == len(current)
            and all(cell_values_equal(d, c) for d, c in zip(desired, current, strict=True))
        )
    if hasattr(desired, "item"):
        return cell_values_equal(desired.item(), current)
    raise TypeError(f"a {type(desired).__name__} value has no JSON form")


def _as_utc(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def _parse_instant(text: str) -> dt.datetime | None:
    # fromisoformat before Python 3.11 does not read a trailing "Z".
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        parsed = dt.datetime.fromisoformat(candidate)
    except ValueError:
        return None
    return _as_utc(parsed)
