"""From extract chunks to records the service accepts: map, normalise, validate, deduplicate, account.

Two jobs are built here, :func:`prepare_people` and :func:`prepare_rows`. Every row read ends up
in exactly one place, so ``read == passed + rejected + duplicates + other_shards``
(:class:`PrepareStats`):

- passed: normalised, valid, and the first row with its key;
- rejected: recorded in :class:`~listsync.sync.rejects.Rejects` with its row number, original
  values and every reason (normalisation, validation, or a clash with an earlier row);
- duplicates: identical, after normalisation, to a row already passed, so collapsed into it;
- other_shards: in a sharded sync (:class:`~listsync.sync.options.Shard`), a row whose account
  domain or key belongs to another shard, left to that shard's run.

The pieces are public so another job (``prepare_events`` in ``sync/events.py``) follows the same
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
  :func:`~listsync.sync.normalize.normalize_column`, and yields :class:`MappedRow` objects; a
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
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel

from listsync.client.errors import InvalidRecordError, ListSyncError
from listsync.client.models import Person
from listsync.sync.ahead import made_ahead
from listsync.sync.normalize import (
    NORMALIZATION_VERSION,
    ColumnResult,
    check_region,
    normalize_column,
    normalize_domain,
    normalize_email,
    normalize_personas,
    normalize_phone,
    normalize_profile_url,
    normalize_text,
    parse_bool,
    parse_connection_paths,
)
from listsync.sync.options import Shard
from listsync.sync.rejects import Rejects
from listsync.sync.sources import ROW_NUMBER, ROW_PROBLEMS

__all__ = [
    "ACCOUNT_DOMAIN",
    "PERSON_FIELDS",
    "ColumnMappingError",
    "MappedChunk",
    "MappedRow",
    "PrepareStats",
    "PreparedPeople",
    "PreparedRows",
    "Rule",
    "check_column_map",
    "check_people_column_map",
    "check_rows_column_map",
    "column_values",
    "iter_mapped_chunks",
    "iter_mapped_rows",
    "iter_shard_chunks",
    "keys_in_shard",
    "prepare_people",
    "prepare_rows",
    "reject_row",
    "rows_key_column",
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
        return {name: writable(values[self._position]) for name, values in self._chunk.columns.items()}


def writable(value: Any) -> Any:
    """``value`` as a rejects file can hold it: a lone surrogate written as its escape."""
    if isinstance(value, str) and not value.isascii():
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


class _Chunk:
    """One extract chunk, whose columns become Python lists the first time a row needs them."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame

    @functools.cached_property
    def columns(self) -> dict[str, list[Any]]:
        return {str(name): self._frame[name].tolist() for name in self._frame.columns}


@dataclass
class MappedChunk:
    """One extract chunk after normalisation, as columns (:func:`iter_mapped_chunks`).

    ``numbers`` are the row numbers of its rows (of the shard), ``results`` each mapped field's
    :class:`~listsync.sync.normalize.ColumnResult` by position, ``problems`` the rows the file
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
            elif result.values[position] is not None:
                values[target] = result.values[position]
        return MappedRow(int(row_number), values, reasons, failed, self.columns, self.chunk, position)

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

    :param frames: chunks from :func:`~listsync.sync.sources.read_extract` (row numbers are
        taken from their index); other DataFrames are numbered by position from 1.
    :param column_map: extract column → field name.
    :param rules: field → rule (see :mod:`listsync.sync.normalize`); fields without a rule are
        trimmed text (:func:`~listsync.sync.normalize.normalize_text`).
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
    :func:`~listsync.sync.sources.read_extract`) comes with that reason only, every field failed.
    """
    for chunk in iter_mapped_chunks(
        frames, column_map, rules, stats, shard=shard, shard_field=shard_field, on_chunk=on_chunk
    ):
        for position in range(len(chunk.numbers)):
            stats.read += 1
            yield chunk.row(position)


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
    keys = normalize_column(series, rule).values
    absent = series.isna().to_numpy()
    for position in [position for position, key in enumerate(keys) if key is None]:
        keys[position] = "" if absent[position] else str(series.iat[position]).strip().lower()
    codes, distinct = pd.factorize(pd.Series(keys, dtype=object))
    held = np.fromiter((shard.holds(str(key)) for key in distinct), dtype=bool, count=len(distinct))
    return held[codes]


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


# --- people --------------------------------------------------------------------------------


@dataclass
class PreparedPeople:
    """People ready to diff, as columns (:mod:`listsync.sync.people.frames`): ``frame`` holds
    ``account_domain``, ``identity`` (``person_identity``) and the mapped person fields, one row a
    person, in extract order."""

    frame: pd.DataFrame
    stats: PrepareStats
    normalization_version: str = NORMALIZATION_VERSION

    @functools.cached_property
    def people(self) -> dict[str, dict[str, Person]]:
        """The people as models, ``people[account_domain][identity]`` (built when asked for)."""
        from listsync.sync.people.frames import IDENTITY, frame_records

        people: dict[str, dict[str, Person]] = {}
        for record in frame_records(self.frame):
            domain, identity = record.pop(ACCOUNT_DOMAIN), record.pop(IDENTITY)
            people.setdefault(domain, {})[identity] = Person.model_validate(record)
        return people


def person_rules(default_region: str) -> dict[str, Rule]:
    """The rule of each people field (fields not listed are trimmed text)."""
    return {
        ACCOUNT_DOMAIN: normalize_domain,
        "email": normalize_email,
        "phone_number": functools.partial(normalize_phone, default_region=check_region(default_region)),
        "network_profile_url": normalize_profile_url,
        "personas": normalize_personas,
        "connection_paths": parse_connection_paths,
        "target": parse_bool,
    }


def prepare_people(
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    *,
    rejects: Rejects,
    default_region: str = "US",
    shard: Shard | None = None,
    on_chunk: Callable[[int], None] | None = None,
) -> PreparedPeople:
    """Map, normalise, validate and deduplicate the people of an extract.

    :param frames: chunks from :func:`~listsync.sync.sources.read_extract`.
    :param column_map: extract column → person field (spec §2.1: ``first_name``, ``email``,
        ``phone_number``, ``network_profile_url``, ``personas`` (comma list or JSON array),
        ``connection_paths`` (JSON array), ``target`` (yes/no, true/false, 1/0...), ...) or
        ``account_domain``. ``account_domain`` and ``first_name`` must be mapped.
    :param rejects: where rejected rows go.
    :param default_region: region of phone numbers written without ``+`` (ISO 3166 code).
    :param shard: keep only the people of this shard's account domains (see
        :func:`iter_mapped_rows`); the others are counted in ``other_shards``.
    :param on_chunk: given each chunk's row count (of the shard) as it is read (see
        :func:`iter_mapped_rows`).
    :raises ColumnMappingError: a mapped column is not in the extract, a field is unknown,
        mapped twice, or a required field is not mapped.

    A row is rejected when a field fails its rule, the person breaks the client's ``Person``
    model, the account domain is empty, or the person has no identity (no email, profile URL,
    phone or first and last name). Rows with the same account domain and identity: the first
    in the extract is kept; later identical ones are duplicates; later different ones are
    rejected naming the first. A row whose profile URL belongs to a person of the same account
    with another identity is rejected too, naming that person's row: the service would merge
    the two (A16).

    The work is done a chunk at a time as column operations; a row that needs more (a field
    that failed its rule, a list-valued field, a key an earlier row has) is checked on its own
    with the client's model and the rules above, in extract order.
    """
    from listsync.sync.people.prepare import PeoplePreparer

    check_region(default_region)
    check_people_column_map(column_map)
    preparer = PeoplePreparer(column_map, rejects)
    sharded = PrepareStats()  # the rows of other shards, counted by the thread that reads
    chunks = iter_mapped_chunks(
        frames,
        column_map,
        person_rules(default_region),
        sharded,
        shard=shard,
        shard_field=ACCOUNT_DOMAIN,
        on_chunk=on_chunk,
    )
    for chunk in made_ahead(chunks, name="listsync-extract"):
        preparer.take(chunk)
    preparer.stats.add(sharded)
    return PreparedPeople(preparer.frame(), preparer.stats)


# --- rows ----------------------------------------------------------------------------------


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

    :param frames: chunks from :func:`~listsync.sync.sources.read_extract`.
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
    # Imported here: the rows package imports this module.
    from listsync.sync.rows.prepare import prepare_row_columns

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
