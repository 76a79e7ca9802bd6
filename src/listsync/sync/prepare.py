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
        stats.passed += 1                                            # or Deduplicator.offer(...)

- :func:`check_column_map` fails at once, listing the extract's columns, when the map names a
  column the extract lacks (:func:`iter_mapped_rows` calls it on the first chunk);
  :func:`check_people_column_map`, :func:`rows_key_column` and :func:`check_rows_column_map`
  check a map against its job before anything is read (the command line and the jobs share them);
- :func:`iter_mapped_rows` numbers rows across chunks, applies one rule per mapped field with
  :func:`~listsync.sync.normalize.normalize_column`, and yields :class:`MappedRow` objects; a
  row the file holds malformed (a CSV row with a field too many or too few) comes with that
  reason alone;
- :func:`violation_reasons` turns a client ``InvalidRecordError`` into reasons naming columns;
- :class:`Deduplicator` keeps the first row per key and accounts for the others.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import numpy as np
import pandas as pd
from pydantic import BaseModel

from listsync.client.errors import InvalidRecordError, ListSyncError
from listsync.client.models import Person, person_identity, validate_person
from listsync.sync.normalize import (
    NORMALIZATION_VERSION,
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
    parse_json,
    to_json_value,
)
from listsync.sync.options import Shard
from listsync.sync.rejects import Rejects
from listsync.sync.sources import ROW_NUMBER, ROW_PROBLEMS

__all__ = [
    "ACCOUNT_DOMAIN",
    "PERSON_FIELDS",
    "ColumnMappingError",
    "Deduplicator",
    "MappedRow",
    "PrepareStats",
    "PreparedPeople",
    "PreparedRows",
    "Rule",
    "check_column_map",
    "check_people_column_map",
    "check_rows_column_map",
    "iter_mapped_rows",
    "prepare_people",
    "prepare_rows",
    "reject_row",
    "rows_key_column",
    "violation_reasons",
]

Rule = Callable[[Any], Any]
"""A normalisation rule: one raw value in, the normalised value out, or ``NormalizationError``."""
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

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
        return {name: _writable(values[self._position]) for name, values in self._chunk.columns.items()}


def _writable(value: Any) -> Any:
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
    columns = {target: column for column, target in column_map.items()}
    next_number = 1
    checked = False
    for whole in frames:
        if not checked:
            check_column_map(column_map, whole.columns)
            checked = True
        problems: Mapping[int, str] = whole.attrs.get(ROW_PROBLEMS) or {}
        numbers = (
            whole.index.tolist()
            if whole.index.name == ROW_NUMBER
            else list(range(next_number, next_number + len(whole)))
        )
        next_number += len(whole)
        frame = whole
        if shard is not None:
            # Sorted out before the other columns are normalised: this task's work is its shard's.
            column = columns[shard_field]
            kept = _in_shard(_column(whole, column), rules.get(shard_field, normalize_text), shard)
            others = len(whole) - int(kept.sum())
            stats.read += others
            stats.other_shards += others
            frame = whole[kept]
            numbers = [number for number, keep in zip(numbers, kept, strict=True) if keep]
        if on_chunk is not None:
            on_chunk(len(frame))
        chunk = _Chunk(frame)
        results = {
            target: normalize_column(_column(frame, column), rules.get(target, normalize_text))
            for column, target in column_map.items()
        }
        for position, row_number in enumerate(numbers):
            stats.read += 1
            problem = problems.get(row_number)
            if problem is not None:
                # Its values may sit in the wrong columns: the one reason is the row's shape.
                yield MappedRow(int(row_number), {}, [problem], set(results), columns, chunk, position)
                continue
            values: dict[str, Any] = {}
            reasons: list[str] = []
            failed: set[str] = set()
            for target, result in results.items():
                error = result.errors.get(position)
                if error is not None:
                    reasons.append(f"{target} (column {columns[target]!r}): {error}")
                    failed.add(target)
                elif result.values[position] is not None:
                    values[target] = result.values[position]
            yield MappedRow(int(row_number), values, reasons, failed, columns, chunk, position)


def _column(frame: pd.DataFrame, column: str) -> pd.Series:
    """``frame[column]``; missing values when a later chunk lacks the column."""
    if column in frame.columns:
        return frame[column]
    return pd.Series([None] * len(frame), index=frame.index, dtype=object)


def _in_shard(series: pd.Series, rule: Rule, shard: Shard) -> np.ndarray:
    """Which values of ``series`` are in ``shard``, normalised by ``rule`` (else their text trimmed
    and lower-cased); each distinct value is hashed once."""
    normalised = pd.Series(normalize_column(series, rule).values, index=series.index, dtype=object)
    text = series.astype(object).where(series.notna(), "").astype(str).str.strip().str.lower()
    keys = normalised.where(normalised.notna(), text)
    codes, distinct = pd.factorize(keys)
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


class Deduplicator(Generic[K, V]):
    """Keeps one value per key: the first row in extract order.

    A later row with the same key and an equal value (equal as JSON: ``True`` is not ``1``) is a
    duplicate (collapsed, counted in ``stats.duplicates``); with a different value it is rejected
    with a reason naming the row it clashes with. The first row wins, so the outcome never
    depends on chunk size or timing.
    ``key_name`` says what the key is in those reasons (e.g. ``"account domain and identity"``).
    """

    def __init__(self, rejects: Rejects, stats: PrepareStats, key_name: str) -> None:
        self._rejects = rejects
        self._stats = stats
        self._key_name = key_name
        self._kept: dict[K, tuple[int, V]] = {}

    def offer(self, row: MappedRow, key: K, value: V, describe_key: str) -> None:
        """Pass, collapse or reject ``row`` whose record is ``value`` under ``key``.

        ``describe_key`` is the key as a person reads it, quoted in a clash's reason.
        """
        kept = self._kept.get(key)
        if kept is None:
            self._kept[key] = (row.row_number, value)
            self._stats.passed += 1
        elif _strict(kept[1]) == _strict(value):
            self._stats.duplicates += 1
        else:
            self._rejects.add_duplicate(
                row.row_number, row.original, kept[0], f"{self._key_name} ({describe_key})"
            )
            self._stats.rejected += 1

    def kept(self) -> dict[K, V]:
        """The surviving value of each key, in extract order of first appearance."""
        return {key: value for key, (_, value) in self._kept.items()}


def _strict(value: Any) -> Any:
    """``value`` in a form whose equality is JSON's: ``True`` is not ``1`` (Python says it is),
    while ``10`` and ``10.0`` stay one number and key order still does not matter."""
    if isinstance(value, BaseModel):
        return type(value), _strict(value.model_dump())
    if isinstance(value, bool):
        return bool, value
    if isinstance(value, Mapping):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(item) for item in value]
    return value


# --- people --------------------------------------------------------------------------------


@dataclass
class PreparedPeople:
    """People ready to diff: ``people[account_domain][identity]`` (identity from ``person_identity``)."""

    people: dict[str, dict[str, Person]]
    stats: PrepareStats
    normalization_version: str = NORMALIZATION_VERSION


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
    """
    check_region(default_region)
    check_people_column_map(column_map)
    stats = PrepareStats()
    survivors: Deduplicator[tuple[str, str], Person] = Deduplicator(
        rejects, stats, "account domain and identity"
    )
    domain_column = next(column for column, target in column_map.items() if target == ACCOUNT_DOMAIN)
    # (account domain, profile URL) -> (row number, identity) of the first person passed with it.
    profile_urls: dict[tuple[str, str], tuple[int, str]] = {}
    rules = person_rules(default_region)
    for row in iter_mapped_rows(
        frames, column_map, rules, stats, shard=shard, shard_field=ACCOUNT_DOMAIN, on_chunk=on_chunk
    ):
        reasons = list(row.reasons)
        domain = row.values.pop(ACCOUNT_DOMAIN, None)
        if domain is None and ACCOUNT_DOMAIN not in row.failed:
            reasons.append(
                f"account_domain (column {domain_column!r}) is empty; every person needs an account"
            )
        person: Person | None = None
        try:
            person = validate_person(row.values)
        except InvalidRecordError as error:
            reasons.extend(violation_reasons(error, row))
        identity = person_identity(person) if person is not None else None
        if person is not None and identity is None:
            reasons.append(
                "person has no identity: give an email, a profile URL, a phone number or a last name"
            )
        if reasons or person is None or domain is None or identity is None:
            reject_row(row, reasons, rejects, stats)
            continue
        url = person.network_profile_url
        owner = profile_urls.get((domain, url)) if url else None
        if owner is not None and owner[1] != identity:
            # The service merges people of one account sharing a profile URL (A16): sending both
            # would make one overwrite the other, run after run.
            rejects.add_duplicate(
                row.row_number, row.original, owner[0], f"account domain and profile URL ({domain}, {url})"
            )
            stats.rejected += 1
            continue
        passed = stats.passed
        survivors.offer(row, (domain, identity), person, f"{domain}, {identity}")
        if url and stats.passed > passed:
            profile_urls.setdefault((domain, url), (row.row_number, identity))
    people: dict[str, dict[str, Person]] = {}
    for (domain, identity), person in survivors.kept().items():
        people.setdefault(domain, {})[identity] = person
    return PreparedPeople(people, stats)


# --- rows ----------------------------------------------------------------------------------


@dataclass
class PreparedRows:
    """Rows ready to diff: ``rows[key] = {column id: JSON-safe value}``, the key cell included."""

    rows: dict[str, dict[str, Any]]
    key_column_id: str
    stats: PrepareStats
    normalization_version: str = NORMALIZATION_VERSION


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
    infinite). Rows with the same key: the first is kept, later identical ones are duplicates,
    later different ones are rejected naming the first.
    """
    if key_kind not in ("domain", "text"):
        raise ValueError(f"key_kind must be 'domain' or 'text', got {key_kind!r}")
    check_rows_column_map(column_map, key_column, json_columns)
    key_id = column_map[key_column]
    rules: dict[str, Rule] = {column_id: to_json_value for column_id in column_map.values()}
    rules.update({column_map[column]: parse_json for column in json_columns})
    rules[key_id] = normalize_domain if key_kind == "domain" else normalize_text
    stats = PrepareStats()
    survivors: Deduplicator[str, dict[str, Any]] = Deduplicator(rejects, stats, f"key {key_column!r}")
    for row in iter_mapped_rows(
        frames, column_map, rules, stats, shard=shard, shard_field=key_id, on_chunk=on_chunk
    ):
        reasons = list(row.reasons)
        key = row.values.get(key_id)
        if key is None and key_id not in row.failed:
            reasons.append(f"{key_id} (column {key_column!r}): the key is empty")
        if reasons or key is None:
            reject_row(row, reasons, rejects, stats)
            continue
        cells = {column_id: row.values.get(column_id) for column_id in column_map.values()}
        survivors.offer(row, key, cells, key)
    return PreparedRows(survivors.kept(), key_id, stats)
