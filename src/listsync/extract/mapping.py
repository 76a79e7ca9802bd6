"""From extract chunks to records the service accepts: map, normalise, validate, deduplicate, account.

Two jobs are built here, :func:`prepare_people` and :func:`prepare_rows`. Every row read ends up
in exactly one place, so ``read == passed + rejected + duplicates + other_shards``
(:class:`PrepareStats`):

- passed: normalised, valid, and the first row with its key;
- rejected: recorded in :class:`~listsync.extract.rejects.Rejects` with its row number, original
  values and every reason (normalisation, validation, or a clash with an earlier row);
- duplicates: identical, after normalisation, to a row already passed, so collapsed into it;
- other_shards: in a sharded sync (:class:`~listsync.sync.settings.Shard`), a row whose account
  domain or key belongs to another shard, left to that shard's run.

The pieces are public so another job (``prepare_events`` in ``signals/ingest.py``) follows the same
rules without copying them::

    stats = PrepareStats()
    for row in iter_mapped_rows(frames, column_map, rules, stats):   # checks the map, numbers rows
        if row.reasons:
            reject_row(row, row.reasons, rejects, stats)             # keeps the accounting right
            continue
        ...build and validate the record...
        stats.passed += 1

- :func:`check_column_map` fails at once, listing the extract's columns, when the map names a
  column the extract lacks (:func:`iter_mapped_rows` calls it on the first chunk);
  :func:`check_people_column_map`, :func:`rows_key_column` and :func:`check_rows_column_map`
  check a map against its job before anything is read (the command line and the jobs share them);
- :func:`iter_mapped_rows` numbers rows across chunks, applies one rule per mapped field with
  :func:`~listsync.extract.normalize.normalize_column`, and yields :class:`MappedRow` objects; a
  row the file holds malformed (a CSV row with a field too many or too few) comes with that
  reason alone. :func:`iter_mapped_chunks` gives the same a chunk at a time as columns
  (:class:`MappedChunk`), and :func:`iter_shard_chunks` the chunks alone, numbered and sharded,
  for jobs that prepare their rows as column operations (people, rows);
- :func:`violation_reasons` turns a client ``InvalidRecordError`` into reasons naming columns;
- :func:`strict_value` compares records as JSON does, for the rule that a repeated key with other
  values is a clash.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel

from listsync.client.errors import InvalidRecordError
from listsync.client.models import Person
from listsync.errors import ListSyncError
from listsync.extract.csv_reader import ARROW_TEXT
from listsync.extract.normalize import ColumnResult, normalize_column
from listsync.extract.options import Shard, shard_number
from listsync.extract.rejects import Rejects
from listsync.extract.sources import ROW_NUMBER, ROW_PROBLEMS
from listsync.extract.text_rules import normalize_text

__all__ = [
    "ACCOUNT_DOMAIN",
    "PERSON_FIELDS",
    "ColumnMappingError",
    "MappedChunk",
    "MappedRow",
    "PrepareStats",
    "Rule",
    "check_column_map",
    "check_people_column_map",
    "check_rows_column_map",
    "column_values",
    "iter_mapped_chunks",
    "iter_mapped_rows",
    "iter_shard_chunks",
    "keys_in_shard",
    "reject_row",
    "rows_key_column",
    "shard_numbers",
    "strict_value",
    "violation_reasons",
    "writable",
]

Rule = Callable[[Any], Any]
"""A normalisation rule: one raw value in, the normalised value out, or ``NormalizationError``."""

ACCOUNT_DOMAIN = "account_domain"
"""The people field that is not a person field: the domain of the account row."""

PERSON_FIELDS = tuple(Person.model_fields)
"""The person fields of spec §2.1 a column may be mapped to (besides :data:`ACCOUNT_DOMAIN`)."""


class ColumnMappingError(ListSyncError, ValueError):
    """The column map does not fit the extract (or the job); the message lists what would."""


def _names(names: Iterable[Any]) -> str:
    return ", ".join(repr(str(name)) for name in names)


def check_column_map(column_map: Mapping[str, str], columns: Iterable[Any]) -> None:
    """Fail with :class:`ColumnMappingError` if ``column_map`` names a column not in ``columns``.

    The message names the missing columns and lists every column the extract has.
    """
    available = [str(column) for column in columns]
    missing = [column for column in column_map if column not in available]
    if missing:
        raise ColumnMappingError(
            f"column_map names {len(missing)} column(s) the extract does not have: {_names(missing)}; "
            f"the extract has: {_names(available)}"
        )


def check_people_column_map(column_map: Mapping[str, str]) -> None:
    """Check a people column map: known fields only, one column each, ``account_domain`` and
    ``first_name`` mapped.

    :raises ColumnMappingError: naming the fields at fault and the fields there are.
    """
    _check_targets(column_map, (*PERSON_FIELDS, ACCOUNT_DOMAIN), (ACCOUNT_DOMAIN, "first_name"))


def rows_key_column(column_map: Mapping[str, str], key_column_id: str) -> str:
    """The extract column a rows column map maps to the List's key column ``key_column_id``.

    :raises ColumnMappingError: no column, or more than one, is mapped to it.
    """
    sources = [column for column, target in column_map.items() if target == key_column_id]
    if len(sources) != 1:
        raise ColumnMappingError(
            f"column_map must map exactly one extract column to the key column {key_column_id!r}; "
            f"it maps {len(sources)}: {dict(column_map)!r}"
        )
    return sources[0]


def check_rows_column_map(
    column_map: Mapping[str, str], key_column: str, json_columns: Collection[str] = ()
) -> None:
    """Check a rows column map: the key column (an extract column) and the JSON columns mapped,
    one column per List column id.

    :raises ColumnMappingError: naming the columns at fault.
    """
    unmapped = [column for column in (key_column, *json_columns) if column not in column_map]
    if unmapped:
        raise ColumnMappingError(
            f"key_column and json_columns must be mapped in column_map; not mapped: {_names(unmapped)}"
        )
    _check_targets(column_map, column_map.values(), ())


def _check_targets(
    column_map: Mapping[str, str], allowed: Collection[str], required: Collection[str]
) -> None:
    unknown = [target for target in column_map.values() if target not in allowed]
    if unknown:
        raise ColumnMappingError(
            f"column_map maps to unknown field(s) {_names(unknown)}; use {_names(allowed)}"
        )
    targets = list(column_map.values())
    repeated = sorted({target for target in targets if targets.count(target) > 1})
    if repeated:
        raise ColumnMappingError(
            f"column_map maps several columns to {_names(repeated)}; map one column each"
        )
    absent = [target for target in required if target not in targets]
    if absent:
        raise ColumnMappingError(f"column_map maps no column to {_names(absent)}, which every record needs")


@dataclass
class PrepareStats:
    """Where the rows of an extract went; ``read == passed + rejected + duplicates + other_shards``."""

    read: int = 0
    passed: int = 0
    rejected: int = 0
    duplicates: int = 0
    other_shards: int = 0

    def to_dict(self) -> dict[str, int]:
        """The counts as a JSON-ready dict (for task summaries)."""
        return dataclasses.asdict(self)

    def add(self, other: PrepareStats) -> None:
        """Count the rows ``other`` counted too."""
        for name, count in other.to_dict().items():
            setattr(self, name, getattr(self, name) + count)


@dataclass
class MappedRow:
    """One extract row after normalisation.

    ``values`` maps each mapped field to its normalised value, for fields that are present and
    passed their rule; ``reasons`` says why any field failed (those fields are in ``failed``).
    ``columns`` maps each field back to its extract column, for messages.
    """

    row_number: int
    values: dict[str, Any]
    reasons: list[str]
    failed: set[str]
    columns: Mapping[str, str]
    _chunk: _Chunk = field(repr=False)
    _position: int = field(repr=False)

    @functools.cached_property
    def original(self) -> dict[str, Any]:
        """Every column of the extract row as read (built only when asked for, e.g. on reject);
        a lone surrogate, which no file can hold as text, is written as its escape (``\\ud800``)."""
        return self._chunk.row(self._position)


def writable(value: Any) -> Any:
    """``value`` as a rejects file can hold it: a lone surrogate written as its escape."""
    if isinstance(value, str) and not value.isascii():
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


class _Chunk:
    """One extract chunk, whose rows become Python values when asked for: object columns are made
    lists, Arrow text (a CSV chunk as Arrow's parser read it) is read a value at a time."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame

    @functools.cached_property
    def _columns(self) -> dict[str, list[Any] | pa.Array | pa.ChunkedArray]:
        return {
            str(name): pa.array(column.array) if column.dtype == ARROW_TEXT else column.tolist()
            for name, column in self._frame.items()
        }

    def row(self, position: int) -> dict[str, Any]:
        """The row at ``position``, every column, as :func:`writable` values (a missing one None)."""
        return {
            name: writable(values[position] if isinstance(values, list) else values[position].as_py())
            for name, values in self._columns.items()
        }


@dataclass
class MappedChunk:
    """One extract chunk after normalisation, as columns (:func:`iter_mapped_chunks`).

    ``numbers`` are the row numbers of its rows (of the shard), ``results`` each mapped field's
    :class:`~listsync.extract.normalize.ColumnResult` by position, ``problems`` the rows the file
    holds malformed (row number → reason), and ``columns`` maps each field to its extract column.
    """

    numbers: list[int]
    results: dict[str, ColumnResult]
    problems: Mapping[int, str]
    columns: Mapping[str, str]
    chunk: _Chunk = field(repr=False)

    def row(self, position: int) -> MappedRow:
        """The row at ``position`` as a :class:`MappedRow`: its fields, and the reasons any failed."""
        row_number = self.numbers[position]
        problem = self.problems.get(row_number)
        if problem is not None:
            # Its values may sit in the wrong columns: the one reason is the row's shape.
            return MappedRow(
                int(row_number), {}, [problem], set(self.results), self.columns, self.chunk, position
            )
        values: dict[str, Any] = {}
        reasons: list[str] = []
        failed: set[str] = set()
        for target, result in self.results.items():
            error = result.errors.get(position)
            if error is not None:
                reasons.append(f"{target} (column {self.columns[target]!r}): {error}")
                failed.add(target)
            elif (value := result.value(position)) is not None:
                values[target] = value
        return MappedRow(int(row_number), values, reasons, failed, self.columns, self.chunk, position)

    def rows(self) -> Iterator[MappedRow]:
        """Every row in order (:meth:`row`), each field's values made Python values once."""
        results = {target: result.in_python() for target, result in self.results.items()}
        whole = dataclasses.replace(self, results=results)
        for position in range(len(self.numbers)):
            yield whole.row(position)

    def faulty(self) -> np.ndarray:
        """Which rows have a field that failed its rule, or are malformed in the file."""
        faulty = np.zeros(len(self.numbers), dtype=bool)
        for result in self.results.values():
            faulty[list(result.errors)] = True
        if self.problems:
            faulty |= np.isin(np.asarray(self.numbers), list(self.problems))
        return faulty


def iter_mapped_rows(
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    rules: Mapping[str, Rule],
    stats: PrepareStats,
    *,
    shard: Shard | None = None,
    shard_field: str = "",
    on_chunk: Callable[[int], None] | None = None,
) -> Iterator[MappedRow]:
    """Yield every row of ``frames`` with its mapped fields normalised; count each in ``stats.read``.

    :param frames: chunks from :func:`~listsync.extract.sources.read_extract` (row numbers are
        taken from their index); other DataFrames are numbered by position from 1.
    :param column_map: extract column → field name.
    :param rules: field → rule (see :mod:`listsync.extract.normalize`); fields without a rule are
        trimmed text (:func:`~listsync.extract.text_rules.normalize_text`).
    :param shard: yield only the rows of this shard, counting the others in ``stats.other_shards``
        (and ``stats.read``). A row belongs to the shard of its ``shard_field`` normalised; when
        that field is missing or fails its rule, of its text trimmed and lower-cased, so that
        exactly one shard rejects it.
    :param shard_field: the field (a target of ``column_map``) that places a row in a shard.
    :param on_chunk: called with the number of rows of each chunk (of the shard) before they are
        normalised, e.g. :meth:`~listsync.sync.memory.MemoryGuard.count_extract`.
    :raises ColumnMappingError: on the first chunk, when a mapped column is missing. A later
        chunk without a mapped column (JSON lines whose records all omit a key) reads it as
        missing values.

    A row whose chunk names it in ``frame.attrs[ROW_PROBLEMS]`` (see
    :func:`~listsync.extract.sources.read_extract`) comes with that reason only, every field failed.
    """
    for chunk in iter_mapped_chunks(
        frames, column_map, rules, stats, shard=shard, shard_field=shard_field, on_chunk=on_chunk
    ):
        for row in chunk.rows():
            stats.read += 1
            yield row


def iter_mapped_chunks(
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    rules: Mapping[str, Rule],
    stats: PrepareStats,
    *,
    shard: Shard | None = None,
    shard_field: str = "",
    on_chunk: Callable[[int], None] | None = None,
) -> Iterator[MappedChunk]:
    """:func:`iter_mapped_rows` a chunk at a time, as columns, for jobs that prepare rows as
    column operations; the rows of other shards are counted in ``stats``, the chunk's own rows are
    the caller's to count in ``stats.read``."""
    columns = {target: column for column, target in column_map.items()}
    shard_rule = rules.get(shard_field, normalize_text)
    for frame, numbers, problems in iter_shard_chunks(
        frames, column_map, stats, shard=shard, shard_column=columns.get(shard_field), shard_rule=shard_rule
    ):
        if on_chunk is not None:
            on_chunk(len(frame))
        results = {
            target: normalize_column(column_values(frame, column), rules.get(target, normalize_text))
            for column, target in column_map.items()
        }
        yield MappedChunk(numbers.tolist(), results, problems, columns, _Chunk(frame))


def iter_shard_chunks(
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    stats: PrepareStats,
    *,
    shard: Shard | None = None,
    shard_column: str | None = None,
    shard_rule: Rule = normalize_text,
) -> Iterator[tuple[pd.DataFrame, np.ndarray, Mapping[int, str]]]:
    """Each chunk's rows of ``shard`` (all without one), their row numbers, and the rows the file
    holds malformed (row number → reason, ``frame.attrs[ROW_PROBLEMS]``); the rows of other shards
    are counted in ``stats.read`` and ``stats.other_shards``, the rest are the caller's to count.

    :param shard_column: the extract column that places a row in a shard, normalised by
        ``shard_rule`` (see :func:`iter_mapped_rows`).
    :raises ColumnMappingError: on the first chunk, when a mapped column is missing.
    """
    next_number = 1
    checked = False
    for whole in frames:
        if not checked:
            check_column_map(column_map, whole.columns)
            checked = True
        problems: Mapping[int, str] = whole.attrs.get(ROW_PROBLEMS) or {}
        numbers = (
            np.asarray(whole.index, dtype=np.int64)
            if whole.index.name == ROW_NUMBER
            else np.arange(next_number, next_number + len(whole), dtype=np.int64)
        )
        next_number += len(whole)
        frame = whole
        if shard is not None and shard_column is not None:
            # Sorted out before the other columns are normalised: this task's work is its shard's.
            kept = keys_in_shard(column_values(whole, shard_column), shard_rule, shard)
            others = len(whole) - int(kept.sum())
            stats.read += others
            stats.other_shards += others
            frame = whole[kept]
            numbers = numbers[kept]
        yield frame, numbers, problems


def column_values(frame: pd.DataFrame, column: str) -> pd.Series:
    """``frame[column]``; missing values when a later chunk lacks the column."""
    if column in frame.columns:
        return frame[column]
    return pd.Series([None] * len(frame), index=frame.index, dtype=object)


def keys_in_shard(series: pd.Series, rule: Rule, shard: Shard) -> np.ndarray:
    """Which values of ``series`` are in ``shard``, normalised by ``rule`` (else their text trimmed
    and lower-cased); each distinct value is hashed once."""
    return shard_numbers(series, rule, shard.count) == shard.index


def shard_numbers(series: pd.Series, rule: Rule, count: int) -> np.ndarray:
    """The shard, of ``count``, of each value of ``series`` normalised by ``rule`` (else its text
    trimmed and lower-cased), as :func:`keys_in_shard` places it; each distinct value is hashed once."""
    keys = normalize_column(series, rule).values
    absent = series.isna().to_numpy()
    for position in [position for position, key in enumerate(keys) if key is None]:
        keys[position] = "" if absent[position] else str(series.iat[position]).strip().lower()
    codes, distinct = pd.factorize(pd.Series(keys, dtype=object))
    numbers = np.fromiter(
        (shard_number(str(key), count) for key in distinct), dtype=np.int64, count=len(distinct)
    )
    return numbers[codes]


def violation_reasons(error: InvalidRecordError, row: MappedRow) -> list[str]:
    """Reasons from a client model's violations, naming the column of each field.

    Violations of fields that already failed normalisation are left out: the field is absent
    from the record only because of that failure, which is already a reason.
    """
    reasons = []
    for name, message in error.violations:
        target = name.split(".", 1)[0]
        if target in row.failed:
            continue
        column = row.columns.get(target)
        reasons.append(f"{name} (column {column!r}): {message}" if column else f"{name}: {message}")
    return reasons


def reject_row(row: MappedRow, reasons: list[str], rejects: Rejects, stats: PrepareStats) -> None:
    """Record ``row`` as rejected for ``reasons`` and count it."""
    rejects.add(row.row_number, row.original, reasons)
    stats.rejected += 1


def strict_value(value: Any) -> Any:
    """``value`` in a form whose equality is JSON's: ``True`` is not ``1`` (Python says it is),
    while ``10`` and ``10.0`` stay one number and key order still does not matter."""
    if isinstance(value, BaseModel):
        return type(value), strict_value(value.model_dump())
    if isinstance(value, bool):
        return bool, value
    if isinstance(value, Mapping):
        return {key: strict_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_value(item) for item in value]
    return value
