"""A List's rows as the rows planner holds them: read into columns (:class:`ListRows`), each
column's cells held compactly page by page and compared with the extract's values a whole column
at a time (:class:`ListColumn`); or, row by row, as :class:`CurrentRow` objects."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from listsync.sync.forms import fold, fold_text
from listsync.sync.rows.cells import NONE_KIND, OTHER_KIND, TEXT_KIND, cells_equal
from listsync.sync.rows.prepare import object_array


@dataclass(frozen=True, slots=True)
class CurrentRow:
    """A row of the List as read: its id and each cell's ``value`` by column id.

    ``shown`` holds the cells' ``computedValue`` where it differs from the value (an enum's label
    for its key): what the List shows of a value written in that form.
    """

    row_id: str
    cells: Mapping[str, Any]
    shown: Mapping[str, Any] = field(default_factory=dict, compare=False)


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

    def equal(
        self, wanted: np.ndarray, rows: np.ndarray, kinds: np.ndarray, classes: Sequence[str] = ()
    ) -> np.ndarray:
        """:func:`~listsync.sync.rows.cells.cells_equal` of the extract's values ``wanted`` (of ``kinds``,
        :func:`~listsync.sync.rows.cells.value_kinds`)
        and the cells of ``rows``; text on both sides in the form ``classes`` make of it (the
        forms the service was seen to keep the column in, :mod:`listsync.sync.forms`)."""
        form = self._form()
        if form == _TEXT and np.isin(kinds, (NONE_KIND, TEXT_KIND)).all():
            try:
                texts = pa.array(wanted, type=pa.string())
            except UnicodeEncodeError:  # a lone surrogate: compared as Python values
                return cells_equal(_folded(wanted, classes), _folded(self.values(rows), classes), kinds)
            have = self._strings(rows)
            if classes:
                texts, have = fold_text(texts, classes), fold_text(have, classes)
            return _same_strings(texts, have)
        if form == _JSON:
            # Each text is dropped as soon as Arrow holds it: no column of Python strings at once.
            texts = _json_page(
                (value if value is None else _json_text(value) for value in wanted), len(wanted)
            )
            equal = _same_strings(texts, self._strings(rows))
            # Texts differ for some equal values (1 and 1.0, odd types): those are compared one by one.
            containers = np.flatnonzero(~equal & (kinds == OTHER_KIND))
            if containers.size:
                equal[containers] = cells_equal(
                    wanted[containers], self.values(rows[containers]), kinds[containers]
                )
            return equal
        return cells_equal(_folded(wanted, classes), _folded(self.values(rows), classes), kinds)


def _folded(values: np.ndarray, classes: Sequence[str]) -> np.ndarray:
    """The text among ``values`` in the form ``classes`` make of it; the rest as it is."""
    if not classes:
        return values
    return object_array(
        (fold(value, classes) if isinstance(value, str) else value for value in values), len(values)
    )


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
