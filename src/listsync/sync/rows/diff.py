"""Planning a rows upsert: the List's rows against the extract's, by key, into the additions, cell
changes and removals of a :class:`~listsync.sync.rows.plan.RowsPlan`; pure, no I/O."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from listsync.sync.digests import digest_text, joined_hashes, key_hashes
from listsync.sync.forms import Forms
from listsync.sync.rows.cells import NONE_KIND, NUMBER_KIND, OTHER_KIND, to_cell_value, value_kinds
from listsync.sync.rows.list_rows import CurrentRow, ListColumn, ListRows
from listsync.sync.rows.plan import CellChange, DuplicateKey, RowAddition, RowRemoval, RowsLedger, RowsPlan
from listsync.sync.rows.prepare import object_array
from listsync.sync.settings import RowsMode, adds_allowed, check_rows_mode, updates_allowed
from listsync.sync.state import DELETE, LastApplied


def plan_rows_upsert(
    desired: pd.DataFrame | Iterable[Mapping[str, Any]],
    current: ListRows | Iterable[CurrentRow],
    *,
    key_column: str,
    delete_missing: bool = False,
    overwrite_with_null: bool = False,
    normalize_key: Callable[[Any], str | None] | None = None,
    last_applied: LastApplied | None = None,
    mode: RowsMode = "upsert",
) -> RowsPlan:
    """Diff the prepared extract rows against the List's current rows.

    :param desired: extract rows, already prepared (mapped, normalised, one row per key): the
        ``frame`` of :class:`~listsync.sync.rows.prepare.PreparedRows` (one column per List column
        id), or rows as ``{column id: value}`` (a column a row lacks is left alone). Values may
        be Python types (``Decimal``, ``date``, ``datetime``, dicts, lists); they are converted
        with :func:`to_cell_value` for sending.
    :param current: the List's rows, with the cells' ``value``: as :class:`ListRows`
        (:func:`~listsync.sync.rows.read.read_list_rows`, keys already normalised), or as
        :class:`CurrentRow` objects.
    :param key_column: the List column id whose value identifies a row.
    :param delete_missing: plan a removal for each List row whose key is not in ``desired``.
    :param overwrite_with_null: a null in ``desired`` clears the List's cell; otherwise a null
        leaves the cell as it is.
    :param normalize_key: for :class:`CurrentRow` objects, turns a key cell of the List into the
        form ``desired`` uses (for a domain key, the domain normaliser), so ``Acme.com`` in the
        List matches ``acme.com``; ``None`` (the result) means the cell cannot be a key.
        Defaults to ``str``. When the normalised key differs from the List's cell, the cell is
        updated like any other.
    :param last_applied: the upsert's state, for a three-way diff (as for people,
        :func:`~listsync.sync.people.plan.plan_people_sync`): a row whose extract cells are the
        ones last sent and whose List cells are the ones seen after is unchanged; writes the List
        has not shown yet, younger than the visibility window, are not planned again; text
        cells are compared in the forms the service was seen to keep their column in
        (:mod:`listsync.sync.forms`). The plan then carries a :class:`RowsLedger`. None: a live
        diff alone.
    :param mode: ``"upsert"`` adds and updates; ``"update_only"`` adds no row (those it would add
        are counted in ``not_added``); ``"insert_only"`` updates no cell (the rows it would update
        are counted in ``not_updated``). ``delete_missing`` goes with ``"upsert"`` alone.
    :raises ValueError: a desired row without a key, two desired rows with the same key, an
        unknown mode, or ``delete_missing`` with a mode other than ``"upsert"``.

    The diff is a join on the key and a comparison per column over whole columns; Python
    objects are made only for what is planned (adds, cell updates, removals, duplicate keys).
    """
    check_rows_mode(mode, delete_missing)
    partial = not isinstance(desired, pd.DataFrame)
    frame = desired if isinstance(desired, pd.DataFrame) else _rows_frame(desired, key_column)
    if not isinstance(current, ListRows):
        current = ListRows.from_rows(current, key_column, frame.columns, normalize_key or _default_key)
    return _RowsDiff(frame, current, key_column, overwrite_with_null, partial).plan(
        delete_missing, last_applied, mode
    )


# A column a desired row does not have: never compared, never sent.
_ABSENT = object()


def _rows_frame(rows: Iterable[Mapping[str, Any]], key_column: str) -> pd.DataFrame:
    listed = list(rows)
    columns = dict.fromkeys([key_column, *(column for cells in listed for column in cells)])
    return pd.DataFrame(
        {
            column: object_array((cells.get(column, _ABSENT) for cells in listed), len(listed))
            for column in columns
        },
        dtype=object,
    )


def _cells_of(values: np.ndarray, start: int, stop: int) -> np.ndarray:
    return values[start:stop]


def _listed_cells_of(column: ListColumn, rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    return column.values(rows[start:stop])


def _default_key(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


class _RowsDiff:
    """One diff of desired rows (a frame) against a List's rows (columns), by key."""

    def __init__(
        self,
        desired: pd.DataFrame,
        current: ListRows,
        key_column: str,
        overwrite_with_null: bool,
        partial: bool,
    ) -> None:
        """``partial``: rows of ``desired`` may lack columns (cells holding ``_ABSENT``)."""
        self.columns = [str(column) for column in desired.columns]
        # Whole columns as object arrays: a frame's cell-by-cell access costs far more.
        self.desired = {column: desired[column].to_numpy(dtype=object) for column in self.columns}
        self.rows = len(desired)
        self.partial = partial
        self.current = current
        self.key_column = key_column
        self.overwrite_with_null = overwrite_with_null
        self.keys = self._desired_keys()
        # The List's keys: each distinct one (in order of first appearance) and how many rows hold it.
        codes, distinct = pd.factorize(pd.Series(current.keys, dtype=object), use_na_sentinel=True)
        self.list_codes = codes
        self.list_keys = pd.Index(distinct, dtype=object)
        self.list_counts = np.bincount(codes[codes >= 0], minlength=len(distinct))
        keyed = np.flatnonzero(codes >= 0)
        self.first_row = np.full(len(distinct), -1, dtype=np.int64)
        self.first_row[codes[keyed][::-1]] = keyed[::-1]

    def _desired_keys(self) -> list[str]:
        column = self.desired.get(self.key_column)
        values = [] if column is None else column.tolist()
        missing = next(
            (i for i, key in enumerate(values) if key is None or key is _ABSENT or key == ""), None
        )
        if column is None and self.rows:
            missing = 0
        keys = [str(key) for key in values]
        repeated = np.flatnonzero(pd.Series(keys, dtype=object).duplicated().to_numpy())
        if missing is not None and (not repeated.size or missing < repeated[0]):
            raise ValueError(
                f"extract row {missing} has no value for the key column {self.key_column!r}; "
                "prepare the rows (prepare_rows rejects rows without a key) before planning"
            )
        if repeated.size:
            raise ValueError(
                f"key {keys[repeated[0]]!r} appears twice in the extract; prepare the rows "
                "(prepare_rows keeps one row per key) before planning"
            )
        return keys

    def plan(self, delete_missing: bool, last_applied: LastApplied | None, mode: RowsMode) -> RowsPlan:
        plan = RowsPlan(key_column=self.key_column, list_rows=len(self.current))
        self.last_applied = last_applied
        # The forms the service was seen to keep each column's text in: no change in themselves.
        self.forms: Forms = {} if last_applied is None else last_applied.forms
        if last_applied is not None:
            plan.ledger = self.ledger = RowsLedger(columns=self.columns)
            self.key_hashes = key_hashes(pd.Series(self.keys, dtype=object))
            self.sent = row_digests(
                self.rows, [functools.partial(_cells_of, values) for values in self.desired.values()]
            )
        found = self.list_keys.get_indexer(pd.Index(self.keys, dtype=object))
        held = np.zeros(len(found), dtype=np.int64)
        held[found >= 0] = self.list_counts[found[found >= 0]]
        added = np.flatnonzero(held == 0)
        if not adds_allowed(mode):
            plan.not_added, added = len(added), added[:0]
        if last_applied is not None and self.ledger is not None:
            added = added[last_applied.adds(self.key_hashes[added], self.ledger)]
            self.ledger.add_keys, self.ledger.add_sent = self.key_hashes[added], self.sent[added]
        for position in added.tolist():
            key = self.keys[position]
            plan.additions.append(RowAddition(key, self._cells_to_add(position, key)))
        for position in np.flatnonzero(held > 1).tolist():
            plan.duplicate_keys.append(
                DuplicateKey(self.keys[position], self._row_ids(found[position]), True)
            )
        matched = np.flatnonzero(held == 1)
        listed = self.first_row[found[matched]]
        if last_applied is None:
            plan.changes = self._changes(matched, listed)
            plan.unchanged = len(matched) - len({change.key for change in plan.changes})
        else:
            plan.changes, plan.unchanged = self._three_way(matched, listed)
        if not updates_allowed(mode):
            plan.not_updated, plan.changes = plan.changed_rows, []
            if self.last_applied is not None:
                self.ledger.updates = {}

        missing = np.ones(len(self.list_keys), dtype=bool)
        missing[found[found >= 0]] = False
        for code in np.flatnonzero(missing & (self.list_counts > 1)).tolist():
            plan.duplicate_keys.append(DuplicateKey(str(self.list_keys[code]), self._row_ids(code), False))
        if delete_missing:
            # Every row holding a key the extract lacks is missing, duplicates included: removing
            # them all is what was asked, not a guess between them.
            keyed = np.flatnonzero(self.list_codes >= 0)
            rows = keyed[missing[self.list_codes[keyed]]]
            rows = rows[np.argsort(self.list_codes[rows], kind="stable")]
            plan.removals = [
                RowRemoval(str(self.list_keys[self.list_codes[row]]), self.current.row_ids[row])
                for row in rows.tolist()
            ]
            if last_applied is not None and self.ledger is not None:
                # Not those an earlier run deleted that the List still shows, within the window.
                keys = key_hashes(pd.Series([removal.key for removal in plan.removals], dtype=object))
                kept = ~last_applied.hold(keys, DELETE, self.ledger)
                plan.removals = list(itertools.compress(plan.removals, kept.tolist()))
                self.ledger.delete_keys = keys[kept]
        return plan

    def _three_way(self, matched: np.ndarray, listed: np.ndarray) -> tuple[list[CellChange], int]:
        """The cell updates of the rows matched one to one, weighing the state (see
        :func:`plan_rows_upsert`), and how many of them are unchanged. Rows in step are not
        compared cell by cell; the rows to update go to the ledger."""
        last, ledger = self.last_applied, self.ledger
        assert last is not None and ledger is not None
        keys, sent = self.key_hashes[matched], self.sent[matched]
        columns = self.current.cells
        seen = row_digests(
            len(matched),
            [
                functools.partial(_listed_cells_of, columns[column], listed) if column in columns else None
                for column in self.columns
            ],
        )
        compared = np.flatnonzero(~last.in_step(keys, sent, seen))
        changes = self._changes(matched[compared], listed[compared])
        differs = np.zeros(len(matched), dtype=bool)
        differs[compared] = pd.Index(
            [self.keys[row] for row in matched[compared].tolist()], dtype=object
        ).isin(list({change.key for change in changes}))
        differs, held, _keys, _sent = last.changes(
            differs, ledger, lambda start, stop: (keys[start:stop], sent[start:stop], seen[start:stop])
        )
        if held.any():
            waiting = {self.keys[row] for row in matched[held].tolist()}
            changes = [change for change in changes if change.key not in waiting]
        ledger.updates = {
            self.keys[row]: (int(key), int(digest))
            for row, key, digest in zip(
                matched[differs].tolist(), keys[differs].tolist(), sent[differs].tolist(), strict=True
            )
        }
        return changes, int((~differs & ~held).sum())

    def _row_ids(self, code: int) -> tuple[str, ...]:
        return tuple(self.current.row_ids[row] for row in np.flatnonzero(self.list_codes == code).tolist())

    def _cells_to_add(self, position: int, key: str) -> dict[str, Any]:
        # A new row has nothing to overwrite: a null cell is simply not sent.
        cells = {}
        for column, values in self.desired.items():
            value = values[position]
            if value is not None and value is not _ABSENT:
                cells[column] = _cell_value_for(key, column, value)
        return cells

    def _changes(self, desired_rows: np.ndarray, list_rows: np.ndarray) -> list[CellChange]:
        """The cell updates of the rows matched one to one, in extract order then column order."""
        found_rows: list[np.ndarray] = []
        found_columns: list[np.ndarray] = []
        befores: list[np.ndarray] = []
        afters: list[np.ndarray] = []
        columns = self.columns
        for index, column in enumerate(columns):
            wanted = self.desired[column][desired_rows]
            kinds = value_kinds(wanted)
            listed = self.current.cells.get(column)
            skip = np.zeros(len(wanted), dtype=bool)
            if self.partial:
                skip |= np.fromiter((value is _ABSENT for value in wanted), dtype=bool, count=len(wanted))
            if not self.overwrite_with_null:
                skip |= kinds == NONE_KIND
            compared = np.flatnonzero(~skip)
            if listed is None:
                where = compared[kinds[compared] != NONE_KIND]
                befores.append(np.full(len(where), None, dtype=object))
            else:
                where = compared[
                    ~listed.equal(
                        wanted[compared], list_rows[compared], kinds[compared], self.forms.get(column, ())
                    )
                ]
                befores.append(listed.values(list_rows[where]))
            found_rows.append(where)
            found_columns.append(np.full(len(where), index))
            afters.append(self._sent(column, wanted[where], kinds[where], desired_rows[where]))
        rows = np.concatenate(found_rows)
        order = np.lexsort((np.concatenate(found_columns), rows))
        rows = rows[order]
        column_of = np.concatenate(found_columns)[order]
        before = np.concatenate(befores)[order] if befores else np.empty(0, dtype=object)
        after = np.concatenate(afters)[order] if afters else np.empty(0, dtype=object)
        keys, row_ids = self.keys, self.current.row_ids
        return [
            CellChange(keys[desired], row_ids[listed], columns[column_index], old, new)
            for desired, listed, column_index, old, new in zip(
                desired_rows[rows].tolist(),
                list_rows[rows].tolist(),
                column_of.tolist(),
                before.tolist(),
                after.tolist(),
                strict=True,
            )
        ]

    def _sent(self, column: str, values: np.ndarray, kinds: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``values`` (of ``kinds``, extract rows ``rows``) as the JSON values sent: None, booleans
        and text are sent as they are, numbers and the rest as :func:`to_cell_value` makes them."""
        sent = values.copy()
        for index in np.flatnonzero(np.isin(kinds, (NUMBER_KIND, OTHER_KIND))).tolist():
            sent[index] = _cell_value_for(self.keys[rows[index]], column, values[index])
        return sent


def _cell_value_for(key: str, column: str, value: Any) -> Any:
    try:
        return to_cell_value(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"row {key!r}, column {column!r}: {exc}") from exc


def row_digests(
    size: int, columns: Sequence[Callable[[int, int], Sequence[Any] | np.ndarray] | None]
) -> np.ndarray:
    """A digest of each of ``size`` rows' cells, the way
    :func:`~listsync.sync.state.value_digests` digests people: ``columns`` give, column by column,
    the cells of the rows from ``start`` to ``stop`` (None: a column the rows do not have), asked
    for a slice at a time (:func:`~listsync.sync.state.joined_hashes`)."""

    def parts(start: int, stop: int) -> list[pa.Array | pa.ChunkedArray]:
        return [
            pa.array([""] * (stop - start), pa.string())
            if cells is None
            else pa.array(
                [digest_text(None if value is _ABSENT else value) for value in cells(start, stop)],
                pa.string(),
            )
            for cells in columns
        ]

    return joined_hashes(size, parts)
