"""Planning a rows upsert: the List's rows against the extract's, by key; pure, no I/O."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from listsync.sync.digests import digest_text, joined_hashes, key_hashes
from listsync.sync.rows.cells import cell_values_equal, to_cell_value
from listsync.sync.rows.prepare import object_array
from listsync.sync.state import DELETE, LastApplied, Ledger


@dataclass(frozen=True, slots=True)
class CurrentRow:
    """A row of the List as read: its id and each cell's ``value`` by column id.

    ``shown`` holds the cells' ``computedValue`` where it differs from the value (an enum's label
    for its key): what the List shows of a value written in that form.
    """

    row_id: str
    cells: Mapping[str, Any]
    shown: Mapping[str, Any] = field(default_factory=dict, compare=False)


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
    ledger: RowsLedger | None = None

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


@dataclass
class ListRows:
    """A List's rows as read, column by column: ``row_ids[i]`` is row ``i``'s id, ``keys[i]`` its
    key cell normalised like the extract's keys (``None``: it cannot be a key), and
    ``cells[column]`` its cells' ``value`` for the columns read (:class:`ListColumn`).
    """

    row_ids: list[str]
    keys: list[str | None]
    cells: dict[str, ListColumn]

    def __len__(self) -> int:
        return len(self.row_ids)

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[CurrentRow],
        key_column: str,
        columns: Iterable[str],
        normalize_key: Callable[[Any], str | None],
    ) -> ListRows:
        """The ``columns`` of ``rows``, their keys normalised by ``normalize_key``."""
        listed = list(rows)
        cells = {}
        for column in columns:
            cells[column] = ListColumn()
            cells[column].append([row.cells.get(column) for row in listed])
        return cls(
            [row.row_id for row in listed],
            [normalize_key(row.cells.get(key_column)) for row in listed],
            cells,
        )


# How a page of a ListColumn is held.
_TEXT = "text"  # text or empty cells: an Arrow string array
_JSON = "json"  # JSON objects and arrays (or empty): their canonical JSON text, an Arrow string array
_VALUES = "values"  # anything else: the Python values


# Keys sorted: equal texts are equal JSON values, true and 1 told apart. msgspec (ten times the
# json module's speed) refuses keys other than text, writes decimals as the numbers they are sent
# as, and NaN and infinities as null: a text holding null is checked by the json module, which
# refuses them.
_CANONICAL = msgspec.json.Encoder(order="sorted", decimal_format="number")
_FINITE = json.JSONEncoder(allow_nan=False)


def _canonical_json(value: Any) -> bytes:
    text = _CANONICAL.encode(value)
    if b"null" in text:
        _FINITE.encode(value)
    return text


def _json_page(texts: Iterable[bytes | None], size: int) -> pa.Array:
    """Canonical JSON texts as an Arrow string array (UTF-8 checked once, for the whole page)."""
    return pa.array(texts, type=pa.binary(), size=size).cast(pa.string())


class ListColumn:
    """One column of a List's cell values (``None``: empty or absent), held compactly page by
    page as it is read: a page of text as an Arrow string array, a page of JSON objects and
    arrays as their canonical JSON text, other pages as Python values. Compared with the
    extract's values a whole column at a time (:meth:`equal`); Python values are made again
    only for the cells that differ."""

    def __init__(self) -> None:
        self.pages: list[tuple[str, Any]] = []

    def append(self, values: list[Any]) -> None:
        """Add the next page's values."""
        kinds = set(map(type, values))
        kinds.discard(type(None))
        try:
            if kinds <= {str}:
                self.pages.append((_TEXT, pa.array(values, type=pa.string())))
                return
            if kinds <= {dict, list}:
                texts = (None if value is None else _canonical_json(value) for value in values)
                self.pages.append((_JSON, _json_page(texts, len(values))))
                return
        except (UnicodeEncodeError, TypeError, ValueError):  # a lone surrogate, an odd key
            pass
        self.pages.append((_VALUES, values))

    def _form(self) -> str:
        forms = {form for form, data in self.pages if form == _VALUES or data.null_count < len(data)}
        return forms.pop() if len(forms) == 1 else _TEXT if not forms else _VALUES

    def _strings(self, rows: np.ndarray) -> pa.ChunkedArray:
        chunks = pa.chunked_array([data for _, data in self.pages], type=pa.string())
        return chunks.take(pa.array(rows, type=pa.int64()))

    def values(self, rows: np.ndarray) -> np.ndarray:
        """The Python values of the cells of ``rows``."""
        form = self._form()
        if form != _VALUES:
            texts = self._strings(rows).to_pylist()
            if form == _JSON:
                texts = [None if text is None else msgspec.json.decode(text) for text in texts]
            return object_array(texts, len(texts))
        if all(form == _VALUES for form, _ in self.pages):
            every = itertools.chain.from_iterable(data for _, data in self.pages)
            return object_array(every, sum(len(data) for _, data in self.pages))[rows]
        # Pages held in several forms (a List whose column holds text in some rows, numbers in
        # others): each cell from its page.
        starts = np.cumsum([0, *(len(data) for _, data in self.pages)])
        values = []
        for row, page in zip(
            rows.tolist(), (np.searchsorted(starts, rows, side="right") - 1).tolist(), strict=True
        ):
            form, data = self.pages[page]
            value = data[row - starts[page]]
            if form != _VALUES:
                value = value.as_py()
                if form == _JSON and value is not None:
                    value = msgspec.json.decode(value)
            values.append(value)
        return object_array(values, len(values))

    def equal(self, wanted: np.ndarray, rows: np.ndarray, kinds: np.ndarray) -> np.ndarray:
        """:func:`cells_equal` of the extract's values ``wanted`` (of ``kinds``, :func:`_kinds`)
        and the cells of ``rows``."""
        form = self._form()
        if form == _TEXT and np.isin(kinds, (0, 3)).all():
            try:
                texts = pa.array(wanted, type=pa.string())
            except UnicodeEncodeError:  # a lone surrogate: compared as Python values
                return cells_equal(wanted, self.values(rows), kinds)
            return _same_strings(texts, self._strings(rows))
        if form == _JSON:
            # Each text is dropped as soon as Arrow holds it: no column of Python strings at once.
            texts = _json_page(
                (value if value is None else _json_text(value) for value in wanted), len(wanted)
            )
            equal = _same_strings(texts, self._strings(rows))
            # Texts differ for some equal values (1 and 1.0, odd types): those are compared one by one.
            containers = np.flatnonzero(~equal & (kinds == _OTHER_KIND))
            if containers.size:
                equal[containers] = cells_equal(
                    wanted[containers], self.values(rows[containers]), kinds[containers]
                )
            return equal
        return cells_equal(wanted, self.values(rows), kinds)


def _json_text(value: Any) -> bytes:
    """The canonical JSON text of an extract value, or one no JSON text is (for a value that is
    not a JSON object or array, or has no canonical text), so that it compares unequal first."""
    if isinstance(value, (dict, list)):
        try:
            return _canonical_json(value)
        except (TypeError, ValueError):
            pass
    return b"\x00"


def _same_strings(wanted: pa.Array, have: pa.ChunkedArray) -> np.ndarray:
    """Equal text, or both empty."""
    same = pc.fill_null(pc.equal(wanted, have), False)
    both_empty = pc.and_(pc.is_null(wanted), pc.is_null(have))
    return np.asarray(pc.or_(same, both_empty).to_numpy(zero_copy_only=False), dtype=bool)


def plan_rows_upsert(
    desired: pd.DataFrame | Iterable[Mapping[str, Any]],
    current: ListRows | Iterable[CurrentRow],
    *,
    key_column: str,
    delete_missing: bool = False,
    overwrite_with_null: bool = False,
    normalize_key: Callable[[Any], str | None] | None = None,
    last_applied: LastApplied | None = None,
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
        has not shown yet, younger than the visibility window, are not planned again. The plan
        then carries a :class:`RowsLedger`. None: a live diff alone.
    :raises ValueError: a desired row without a key, or two desired rows with the same key.

    The diff is a join on the key and a comparison per column over whole columns; Python
    objects are made only for what is planned (adds, cell updates, removals, duplicate keys).
    """
    partial = not isinstance(desired, pd.DataFrame)
    frame = desired if isinstance(desired, pd.DataFrame) else _rows_frame(desired, key_column)
    if not isinstance(current, ListRows):
        current = ListRows.from_rows(current, key_column, frame.columns, normalize_key or _default_key)
    return _RowsDiff(frame, current, key_column, overwrite_with_null, partial).plan(
        delete_missing, last_applied
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

    def plan(self, delete_missing: bool, last_applied: LastApplied | None = None) -> RowsPlan:
        plan = RowsPlan(key_column=self.key_column, list_rows=len(self.current))
        self.last_applied = last_applied
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
            kinds = _kinds(wanted)
            listed = self.current.cells.get(column)
            skip = np.zeros(len(wanted), dtype=bool)
            if self.partial:
                skip |= np.fromiter((value is _ABSENT for value in wanted), dtype=bool, count=len(wanted))
            if not self.overwrite_with_null:
                skip |= kinds == _NONE_KIND
            compared = np.flatnonzero(~skip)
            if listed is None:
                where = compared[kinds[compared] != _NONE_KIND]
                befores.append(np.full(len(where), None, dtype=object))
            else:
                where = compared[~listed.equal(wanted[compared], list_rows[compared], kinds[compared])]
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
        for index in np.flatnonzero(np.isin(kinds, (_NUMBER_KIND, _OTHER_KIND))).tolist():
            sent[index] = _cell_value_for(self.keys[rows[index]], column, values[index])
        return sent


# Kinds of value compared by Python's equality alone, once kinds match: None, booleans, numbers
# (10 == 10.0) and text. Booleans are not numbers here (JSON: true is not 1).
_NONE_KIND = 0
_NUMBER_KIND = 2
_SIMPLE_KINDS = {type(None): _NONE_KIND, bool: 1, int: _NUMBER_KIND, float: _NUMBER_KIND, str: 3}
_OTHER_KIND = 4


def _kinds(values: np.ndarray) -> np.ndarray:
    kinds = map(_SIMPLE_KINDS.get, map(type, values), itertools.repeat(_OTHER_KIND))
    return np.fromiter(kinds, dtype=np.int8, count=len(values))


def cells_equal(
    desired: np.ndarray, current: np.ndarray, desired_kinds: np.ndarray | None = None
) -> np.ndarray:
    """:func:`cell_values_equal` of each pair, over two object arrays of one length (the kinds of
    ``desired``, when known, given as ``desired_kinds``).

    Pairs of simple values (None, booleans, numbers, text) compare at once: same kind and
    Python-equal. Other pairs (objects, arrays, dates, decimals...) that Python finds equal and
    that print alike are equal; the rest are compared one by one by :func:`cell_values_equal`.
    """
    desired_kinds = _kinds(desired) if desired_kinds is None else desired_kinds
    current_kinds = _kinds(current)
    equal = (desired_kinds == current_kinds) & np.asarray(desired == current, dtype=bool)
    other = np.flatnonzero((desired_kinds == _OTHER_KIND) | (current_kinds == _OTHER_KIND))
    if other.size:
        wanted, have = desired[other], current[other]
        same = equal[other] & np.asarray(_reprs(wanted) == _reprs(have), dtype=bool)
        for index in np.flatnonzero(~same).tolist():
            same[index] = cell_values_equal(wanted[index], have[index])
        equal[other] = same
    return equal


_reprs = np.frompyfunc(repr, 1, 1)


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
