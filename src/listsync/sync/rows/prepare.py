"""Preparing an extract for a rows upsert, a column at a time (the engine of ``prepare_rows``).

Each chunk is normalised column by column: a value passes through NumPy and Arrow operations
over the whole column, and only values of rarer types (timestamps, decimals, JSON objects...)
take the per-value rule. Python objects are made for the rows rejected (their reasons and
original values) and for the rows whose key repeats one already seen (compared to the first),
never for every row. The rules are those of :func:`listsync.sync.rows.prepare.prepare_rows`, which
documents them.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from listsync.extract.contact_rules import normalize_domain
from listsync.extract.mapping import (
    PrepareStats,
    Rule,
    check_rows_column_map,
    column_values,
    iter_shard_chunks,
    strict_value,
    writable,
)
from listsync.extract.normalize import NORMALIZATION_VERSION, PYTHON_WHITESPACE, normalize_column
from listsync.extract.options import Shard
from listsync.extract.read_ahead import made_ahead
from listsync.extract.rejects import Rejects
from listsync.extract.text_rules import NormalizationError, is_missing, normalize_text, text_problems
from listsync.extract.value_rules import MAX_JSON_DEPTH, parse_json, to_json_value
from listsync.sync.memory import kept_objects_frozen

__all__ = ["PreparedRows", "object_array", "prepare_row_columns", "prepare_rows"]


def object_array(values: Iterable[Any], count: int) -> np.ndarray:
    """``values`` as a 1-D object array of ``count`` items (lists and dicts stay items, never
    become a dimension as ``np.array`` would make them)."""
    return np.fromiter(values, dtype=object, count=count)


def prepare_row_columns(
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    key_column: str,
    *,
    rejects: Rejects,
    key_kind: Literal["domain", "text"],
    json_columns: Collection[str],
    shard: Shard | None,
    on_chunk: Callable[[int], None] | None,
) -> PreparedRows:
    """:func:`~listsync.sync.rows.prepare.prepare_rows`, column by column (see there)."""
    if key_kind not in ("domain", "text"):
        raise ValueError(f"key_kind must be 'domain' or 'text', got {key_kind!r}")
    check_rows_column_map(column_map, key_column, json_columns)
    key_id = column_map[key_column]
    rules: dict[str, Rule] = {column_id: to_json_value for column_id in column_map.values()}
    rules.update({column_map[column]: parse_json for column in json_columns})
    rules[key_id] = normalize_domain if key_kind == "domain" else normalize_text
    survivors = _Survivors(column_map, key_column, rejects)
    stats = survivors.stats
    sharded = PrepareStats()  # the rows of other shards, counted by the thread that reads
    chunks = (
        (frame, numbers, survivors.cells(frame, numbers, problems, rules))
        for frame, numbers, problems in iter_shard_chunks(
            frames, column_map, sharded, shard=shard, shard_column=key_column, shard_rule=rules[key_id]
        )
    )
    with kept_objects_frozen() as settle:
        for frame, numbers, (cells, reasons) in made_ahead(chunks, name="listsync-extract"):
            stats.read += len(frame)
            if on_chunk is not None:
                on_chunk(len(frame))
            survivors.add_chunk(frame, numbers, cells, reasons)
            settle()  # the rows kept: not looked at again by each full collection
    stats.add(sharded)
    return PreparedRows(survivors.frame(), key_id, stats)


class _Survivors:
    """The rows passed so far, one per key, chunk by chunk; rejects and duplicates accounted."""

    def __init__(self, column_map: Mapping[str, str], key_column: str, rejects: Rejects) -> None:
        self.column_map = column_map
        self.key_column = key_column
        self.key_id = column_map[key_column]
        self.rejects = rejects
        self.stats = PrepareStats()
        self.chunks: list[pd.DataFrame] = []
        self.chunk_starts: list[int] = []
        self.row_numbers: list[np.ndarray] = []
        # Each key passed -> its index among the rows passed (across chunks).
        self.seen: dict[str, int] = {}

    def cells(
        self, frame: pd.DataFrame, numbers: np.ndarray, problems: Mapping[int, str], rules: Mapping[str, Rule]
    ) -> tuple[dict[str, np.ndarray], dict[int, list[str]]]:
        """A chunk's cells by List column id, and the reasons to reject each row that has any.
        Changes nothing here: chunks are made ready in a thread of their own (``made_ahead``)."""
        cells: dict[str, np.ndarray] = {}
        reasons: dict[int, list[str]] = {}
        key_failed: Collection[int] = ()
        for column, target in self.column_map.items():
            values, errors = column_cells(column_values(frame, column), rules[target])
            cells[target] = values
            if target == self.key_id:
                key_failed = errors.keys()
            for position, error in sorted(errors.items()):
                reasons.setdefault(position, []).append(f"{target} (column {column!r}): {error}")
        for position in np.flatnonzero(pd.isna(cells[self.key_id])).tolist():
            if position not in key_failed:
                reasons.setdefault(position, []).append(
                    f"{self.key_id} (column {self.key_column!r}): the key is empty"
                )
        if problems:
            # A row the file holds malformed has that one reason: its values may sit in the wrong
            # columns.
            for position, number in enumerate(numbers.tolist()):
                if number in problems:
                    reasons[position] = [problems[number]]
        return cells, reasons

    def add_chunk(
        self,
        frame: pd.DataFrame,
        numbers: np.ndarray,
        cells: Mapping[str, np.ndarray],
        reasons: Mapping[int, list[str]],
    ) -> None:
        """Reject the chunk's rows with reasons (:meth:`cells`) and keep the first of each key."""
        for position in sorted(reasons):
            self.rejects.add(int(numbers[position]), _original(frame, position), reasons[position])
        self.stats.rejected += len(reasons)
        passing = np.ones(len(frame), dtype=bool)
        passing[list(reasons)] = False
        self._keep_first(frame, numbers, cells, np.flatnonzero(passing))

    def _keep_first(
        self, frame: pd.DataFrame, numbers: np.ndarray, cells: Mapping[str, np.ndarray], positions: np.ndarray
    ) -> None:
        """Keep the rows at ``positions`` whose key is new; collapse or reject the others."""
        keys = cells[self.key_id][positions]
        seen = self.seen
        repeated = pd.Series(keys, dtype=object).duplicated(keep=False).to_numpy()
        if seen:
            repeated = repeated | np.fromiter(map(seen.__contains__, keys), dtype=bool, count=len(keys))
        dropped: list[int] = []
        firsts: dict[str, int] = {}  # key -> position in this chunk, for keys new in it
        for index in np.flatnonzero(repeated).tolist():
            key = keys[index]
            position = int(positions[index])
            if key in seen:
                first_number, first_cells = self._passed_row(seen[key])
            elif key in firsts:
                first = firsts[key]
                first_number = int(numbers[first])
                first_cells = {target: values[first] for target, values in cells.items()}
            else:
                firsts[key] = position
                continue
            dropped.append(index)
            row_cells = {target: values[position] for target, values in cells.items()}
            if strict_value(row_cells) == strict_value(first_cells):
                self.stats.duplicates += 1
            else:
                self.rejects.add_duplicate(
                    int(numbers[position]),
                    _original(frame, position),
                    first_number,
                    f"key {self.key_column!r} ({key})",
                )
                self.stats.rejected += 1
        kept = np.delete(positions, dropped)
        start = len(seen)
        every = len(kept) == len(frame)  # no row rejected or dropped: the cells as they are
        chunk = pd.DataFrame(
            {target: values if every else values[kept] for target, values in cells.items()}, dtype=object
        )
        seen.update(zip(chunk[self.key_id].tolist(), range(start, start + len(chunk)), strict=True))
        self.chunks.append(chunk)
        self.chunk_starts.append(start)
        self.row_numbers.append(numbers[kept])
        self.stats.passed += len(chunk)

    def _passed_row(self, index: int) -> tuple[int, dict[str, Any]]:
        """The row number and cells of the ``index``-th row passed."""
        chunk = bisect.bisect_right(self.chunk_starts, index) - 1
        offset = index - self.chunk_starts[chunk]
        frame = self.chunks[chunk]
        return int(self.row_numbers[chunk][offset]), {
            target: frame[target].iat[offset] for target in frame.columns
        }

    def frame(self) -> pd.DataFrame:
        """Every row passed, in extract order, one object column per List column id."""
        if not self.chunks:
            return pd.DataFrame(
                {target: object_array((), 0) for target in self.column_map.values()}, dtype=object
            )
        if len(self.chunks) == 1:
            return self.chunks[0]
        return pd.concat(self.chunks, ignore_index=True)


def _original(frame: pd.DataFrame, position: int) -> dict[str, Any]:
    """Every column of the extract row at ``position`` as read, for its reject record."""
    return {str(name): writable(frame[name].iat[position]) for name in frame.columns}


# --- a column's cells ------------------------------------------------------------------------

# Types whose values to_json_value returns as they are.
_AS_THEY_ARE = (bool, int, type(None))


def column_cells(series: pd.Series, rule: Rule) -> tuple[np.ndarray, dict[int, str]]:
    """``rule`` on each value of ``series``: the outputs by position (``None`` for missing or
    rejected values) and the reason of each position rejected.

    For :func:`~listsync.extract.value_rules.to_json_value`, the rule of most columns, values are
    taken by type over the whole column: text is checked with Arrow (kept as it is unless blank,
    which is missing), booleans and integers kept, floats checked with NumPy, dates formatted;
    values of other types take the rule one by one. Other rules go to
    :func:`~listsync.extract.normalize.normalize_column`.
    """
    if rule is not to_json_value:
        result = normalize_column(series, rule)
        return object_array(result.values, len(result.values)), result.errors
    raw = series.tolist()
    values = object_array(raw, len(raw))
    errors: dict[int, str] = {}
    if not raw:
        return values, errors
    types = pd.Series(object_array(map(type, raw), len(raw)), dtype=object)
    codes, distinct = pd.factorize(types)
    for code, kind in enumerate(distinct):
        positions = np.flatnonzero(codes == code)
        if kind in _AS_THEY_ARE:
            continue
        if kind is str:
            _text_cells(values, positions, errors)
        elif kind is float:
            _float_cells(values, positions, errors)
        elif kind is dt.date:
            # Each date formatted once, its rows sharing the text.
            days, distinct = pd.factorize(values[positions])
            texts = object_array((day.isoformat() for day in distinct), len(distinct))
            values[positions] = texts[days]
        elif kind is dict or kind is list:
            # Kept as they are when made of JSON's own types (what JSON columns and most typed
            # sources hold); the rule would only copy them.
            plain = np.fromiter((_plain_json(value, 0) for value in values[positions]), bool, len(positions))
            _rule_cells(values, positions[~plain], errors)
        else:
            _rule_cells(values, positions, errors)
    return values, errors


def _text_cells(values: np.ndarray, positions: np.ndarray, errors: dict[int, str]) -> None:
    """Text: kept as it is; blank text is missing; text no JSON body may hold is rejected."""
    texts = values[positions].tolist()
    try:
        text = pa.array(texts, type=pa.string())
    except UnicodeEncodeError:  # a lone surrogate, which Arrow's UTF-8 cannot hold
        _rule_cells(values, positions, errors)
        return
    trimmed = pc.utf8_trim(text, characters=PYTHON_WHITESPACE)
    blank = pc.equal(pc.binary_length(trimmed), 0).to_numpy(zero_copy_only=False)
    values[positions[blank]] = None
    for index, problem in text_problems(text, trimmed).items():
        if not blank[index]:
            errors[int(positions[index])] = problem
            values[positions[index]] = None


def _float_cells(values: np.ndarray, positions: np.ndarray, errors: dict[int, str]) -> None:
    """Floats: NaN is missing, infinities are rejected, the rest kept."""
    numbers = values[positions].astype(np.float64)
    values[positions[np.isnan(numbers)]] = None
    for index in np.flatnonzero(np.isinf(numbers)).tolist():
        position = int(positions[index])
        errors[position] = f"{values[position]!r} is not a finite number"
        values[position] = None


def _rule_cells(values: np.ndarray, positions: np.ndarray, errors: dict[int, str]) -> None:
    """Values of other types: :func:`~listsync.extract.value_rules.to_json_value` on each."""
    for position in positions.tolist():
        value = values[position]
        if is_missing(value):
            values[position] = None
            continue
        try:
            values[position] = to_json_value(value)
        except NormalizationError as exc:
            errors[position] = str(exc)
            values[position] = None


def _plain_json(value: dict[Any, Any] | list[Any], depth: int) -> bool:
    """Whether ``value`` is made of JSON's own types only, as :func:`to_json_value` would return
    it: text keys, ASCII text (other text is checked by the rule), finite floats, no nesting
    deeper than :data:`~listsync.extract.value_rules.MAX_JSON_DEPTH`."""
    if depth >= MAX_JSON_DEPTH:
        return False
    if type(value) is dict:
        if not all(type(key) is str and key.isascii() for key in value):
            return False
        items: Iterable[Any] = value.values()
    else:
        items = value
    for item in items:
        kind = type(item)
        if kind is str:
            if not item.isascii():
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif kind is dict or kind is list:
            if not _plain_json(item, depth + 1):
                return False
        elif not (kind is int or kind is bool or item is None):
            return False
    return True


@dataclass
class PreparedRows:
    """Rows ready to diff, one per key, in extract order of first appearance.

    ``frame`` holds one object column per List column id (the key's included) of JSON-safe
    values, ``None`` for a missing value; the key column holds each row's key.
    """

    frame: pd.DataFrame
    key_column_id: str
    stats: PrepareStats
    normalization_version: str = NORMALIZATION_VERSION

    @property
    def rows(self) -> dict[str, dict[str, Any]]:
        """``rows[key] = {column id: value}``, built from ``frame`` on each call (the planner
        works on ``frame``; this is for reading a small extract)."""
        records: list[dict[str, Any]] = self.frame.to_dict("records")  # type: ignore[assignment]
        return {cells[self.key_column_id]: cells for cells in records}


def prepare_rows(
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    key_column: str,
    *,
    rejects: Rejects,
    key_kind: Literal["domain", "text"] = "domain",
    json_columns: Collection[str] = (),
    shard: Shard | None = None,
    on_chunk: Callable[[int], None] | None = None,
) -> PreparedRows:
    """Map an extract's rows to List cells, one row per key.

    :param frames: chunks from :func:`~listsync.extract.sources.read_extract`.
    :param column_map: extract column → List column id.
    :param key_column: the extract column (mapped in ``column_map``) whose value identifies a row.
    :param rejects: where rejected rows go.
    :param key_kind: ``"domain"``: the key is normalised as a domain (``https://www.Acme.com/``
        → ``acme.com``); ``"text"``: trimmed text.
    :param json_columns: extract columns whose text holds JSON (objects, arrays, numbers...);
        their values are parsed. Values from JSON/jsonb/Parquet struct columns need no mark.
    :param shard: keep only the rows of this shard's keys (see :func:`iter_mapped_rows`); the
        others are counted in ``other_shards``.
    :param on_chunk: given each chunk's row count (of the shard) as it is read (see
        :func:`iter_mapped_rows`).
    :raises ColumnMappingError: a mapped column is missing from the extract, the key column
        or a JSON column is not mapped, or two columns map to one column id.

    Values become JSON-safe: text stays text exactly as read (a CSV holds only text; typed
    sources keep numbers and booleans), integral decimals become ints and others floats, dates
    and timestamps ISO 8601 strings; a missing value is ``None`` (JSON null). A row is rejected
    when its key is empty or fails its rule, or a value cannot be sent (bad JSON, binary,
    infinite), with every reason. Rows with the same key: the first is kept, later identical
    ones are duplicates, later different ones are rejected naming the first.

    The work is done a column at a time over each chunk
    (:func:`listsync.sync.rows.prepare.prepare_row_columns`), not a row at a time.
    """
    return prepare_row_columns(
        frames,
        column_map,
        key_column,
        rejects=rejects,
        key_kind=key_kind,
        json_columns=json_columns,
        shard=shard,
        on_chunk=on_chunk,
    )
