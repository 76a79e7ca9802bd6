"""Preparing the people of an extract as columns, a chunk at a time
(:func:`~listsync.sync.people.prepare.prepare_people`).

Most rows are decided as column operations: every field passed its rule, the person has an
account domain, a first name and an identity, and no other row so far has their (account domain,
identity) or (account domain, profile URL). The rest, usually few, go one by one in extract order
through the same checks a row always had: the client's ``Person`` model for the reasons, and the
duplicate and profile URL rules against the rows kept before them.

Keys already kept are remembered by a 64-bit hash, with the row's position among the kept rows;
a hash that matches is checked against the kept row's own domain and identity, so a collision
never merges two people.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from listsync.client.errors import InvalidRecordError
from listsync.client.models import Person, person_identity, validate_person
from listsync.extract.contact_rules import (
    check_region,
    normalize_domain,
    normalize_email,
    normalize_phone,
    normalize_profile_url,
)
from listsync.extract.mapping import (
    ACCOUNT_DOMAIN,
    PERSON_FIELDS,
    MappedChunk,
    MappedRow,
    PrepareStats,
    Rule,
    check_people_column_map,
    iter_mapped_chunks,
    reject_row,
    strict_value,
    violation_reasons,
)
from listsync.extract.normalize import NORMALIZATION_VERSION
from listsync.extract.options import Shard
from listsync.extract.read_ahead import made_ahead
from listsync.extract.rejects import Rejects
from listsync.extract.text_rules import text_bytes
from listsync.extract.value_rules import normalize_personas, parse_bool, parse_connection_paths
from listsync.sync.people.frames import (
    IDENTITY,
    OBJECT_FIELDS,
    TEXT,
    field_column,
    frame_records,
    identities,
    stacked,
    text_column,
    wire,
)

__all__ = ["PeoplePreparer", "PreparedPeople", "person_rules", "prepare_people"]

ROW = "row"
#: Rows of the extract's people kept in one part at least (:meth:`PeoplePreparer._join_recent_parts`).
PART_ROWS = 50_000
_E164 = r"\+[1-9][0-9]{1,14}"
#: Kept rows: (account domain, identity or profile URL) → (row number, position among kept rows).
Key = tuple[str, str]


class PeoplePreparer:
    """Takes the extract's chunks (:meth:`take`) and gives the people kept, as one frame."""

    def __init__(self, column_map: Mapping[str, str], rejects: Rejects) -> None:
        self.stats = PrepareStats()
        self._rejects = rejects
        self._fields = [name for name in PERSON_FIELDS if name in column_map.values()]
        self._domain_column = next(
            column for column, target in column_map.items() if target == ACCOUNT_DOMAIN
        )
        self._parts: list[pd.DataFrame] = []
        self._starts: list[int] = []
        #: Parts before this one hold PART_ROWS rows or more each.
        self._joined = 0
        self._kept = 0
        # Both indexes hash with one hasher, whose tables go when this preparer does.
        self._hasher = _Hasher()
        self._identities = _KeyIndex(IDENTITY, self._hasher)
        self._urls = _KeyIndex("network_profile_url", self._hasher)

    def take(self, chunk: MappedChunk) -> None:
        """Decide every row of ``chunk``: kept, rejected or a duplicate."""
        self.stats.read += len(chunk.numbers)
        values = {target: result.data for target, result in chunk.results.items()}
        people = pd.DataFrame({name: field_column(name, values[name]) for name in self._fields})
        people.insert(0, ACCOUNT_DOMAIN, text_column(values[ACCOUNT_DOMAIN]))
        people.insert(1, IDENTITY, identities(people))
        people.insert(2, ROW, np.asarray(chunk.numbers, dtype=np.int64))
        simple = (
            ~chunk.faulty() & people[[ACCOUNT_DOMAIN, IDENTITY, "first_name"]].notna().all(axis=1).to_numpy()
        )
        for name in OBJECT_FIELDS.intersection(self._fields) - {"target"}:
            simple &= people[name].isna().to_numpy()
        if "phone_number" in self._fields:
            simple &= people["phone_number"].str.fullmatch(_E164).fillna(True).to_numpy(dtype=bool)
        candidate = simple.copy()
        for position in np.flatnonzero(~simple).tolist():
            candidate[position] = self._validate(chunk.row(position), people, position)
        domains = self._hasher.string_hashes(people[ACCOUNT_DOMAIN])  # hashed once for both keys
        hashes = {
            index: index.hashes(domains, people)
            for index in (self._identities, self._urls)
            if index.field in people
        }
        kept = self._deduplicate(chunk, people, np.flatnonzero(candidate), hashes)
        part = people.iloc[kept].reset_index(drop=True)
        self._starts.append(self._kept)
        self._parts.append(part)
        for index, key_hashes in hashes.items():
            index.add(key_hashes[kept], part, self._kept)
        self._kept += len(part)
        self.stats.passed += len(part)
        self._join_recent_parts()

    def _join_recent_parts(self) -> None:
        """Join the parts kept since the last join into one once they hold :data:`PART_ROWS` rows:
        the chunks of a shard keep few rows each, and columns that small would stay in the C
        library's heap, among what every chunk takes for a moment, until the extract is read."""
        recent = self._parts[self._joined :]
        if len(recent) > 1 and sum(len(part) for part in recent) >= PART_ROWS:
            self._parts[self._joined :] = [stacked(recent, list(recent[0].columns))]
            del self._starts[self._joined + 1 :]
        if sum(len(part) for part in self._parts[self._joined :]) >= PART_ROWS:
            self._joined = len(self._parts)

    def frame(self) -> pd.DataFrame:
        """The people kept, in extract order: their parts' columns put end to end (:func:`stacked`)."""
        names = [ACCOUNT_DOMAIN, IDENTITY, *self._fields]
        if not self._parts:
            return pd.DataFrame({name: field_column(name, []) for name in names})
        parts, self._parts = self._parts, []
        return stacked(parts, names)

    def _validate(self, row: MappedRow, people: pd.DataFrame, position: int) -> bool:
        """Check a row the columns could not pass on their own; reject it, or write the values its
        ``Person`` holds into ``people`` and return True."""
        reasons = list(row.reasons)
        domain = row.values.pop(ACCOUNT_DOMAIN, None)
        if domain is None and ACCOUNT_DOMAIN not in row.failed:
            reasons.append(
                f"account_domain (column {self._domain_column!r}) is empty; every person needs an account"
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
            reject_row(row, reasons, self._rejects, self.stats)
            return False
        for name in OBJECT_FIELDS.intersection(self._fields):
            people.at[position, name] = wire(getattr(person, name))
        return True

    def _deduplicate(
        self,
        chunk: MappedChunk,
        people: pd.DataFrame,
        candidates: np.ndarray,
        hashes: dict[_KeyIndex, np.ndarray],
    ) -> np.ndarray:
        """The candidates kept: those whose keys no other row has go as a column; the others one
        by one, first row first (duplicates collapsed, clashes rejected naming the row kept)."""
        involved = np.zeros(len(candidates), dtype=bool)
        for index, key_hashes in hashes.items():
            involved |= index.involved(key_hashes[candidates], people[index.field].iloc[candidates])
        keep = ~involved
        local_identities: dict[Key, int] = {}
        local_urls: dict[Key, int] = {}
        for offset in np.flatnonzero(involved):
            position = int(candidates[offset])
            keep[offset] = self._decide(chunk, people, position, local_identities, local_urls)
        return candidates[keep]

    def _decide(
        self,
        chunk: MappedChunk,
        people: pd.DataFrame,
        position: int,
        local_identities: dict[Key, int],
        local_urls: dict[Key, int],
    ) -> bool:
        record = _record(people, position)
        domain, identity = record.pop(ACCOUNT_DOMAIN), record.pop(IDENTITY)
        del record[ROW]
        url = record.get("network_profile_url")
        if url is not None:
            owner = self._owner(people, (domain, url), local_urls, self._urls)
            if owner is not None and owner[IDENTITY] != identity:
                # The service merges people of one account sharing a profile URL (A16): sending both
                # would make one overwrite the other, run after run.
                self._reject(chunk, position, owner[ROW], f"account domain and profile URL ({domain}, {url})")
                return False
        first = self._owner(people, (domain, identity), local_identities, self._identities)
        if first is None:
            local_identities[domain, identity] = position
            if url is not None:
                local_urls.setdefault((domain, url), position)
            return True
        first_number = first.pop(ROW)
        first.pop(ACCOUNT_DOMAIN)
        first.pop(IDENTITY)
        if strict_value(first) == strict_value(record):
            self.stats.duplicates += 1
        else:
            self._reject(chunk, position, first_number, f"account domain and identity ({domain}, {identity})")
        return False

    def _owner(
        self, people: pd.DataFrame, key: Key, local: dict[Key, int], index: _KeyIndex
    ) -> dict[str, Any] | None:
        """The kept row with ``key``: one of this chunk's (``local``) or of an earlier one."""
        position = local.get(key)
        if position is not None:
            return _record(people, position)
        kept = index.find(key, self._row_at)
        return None if kept is None else self._row_at(kept)

    def _row_at(self, kept: int) -> dict[str, Any]:
        part = bisect.bisect_right(self._starts, kept) - 1
        return _record(self._parts[part], kept - self._starts[part])

    def _reject(self, chunk: MappedChunk, position: int, first_number: int, key: str) -> None:
        row = chunk.row(position)
        self._rejects.add_duplicate(row.row_number, row.original, int(first_number), key)
        self.stats.rejected += 1


def _record(frame: pd.DataFrame, position: int) -> dict[str, Any]:
    return frame_records(frame, [position])[0]


class _KeyIndex:
    """Keys of kept rows by 64-bit hash → position among kept rows, in sorted runs (merged as they
    grow, so a lookup searches a few); the rare key whose hash another key already has is kept whole."""

    def __init__(self, field: str, hasher: _Hasher) -> None:
        self.field = field
        self._hasher = hasher
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []
        self._whole: dict[Key, int] = {}

    def hashes(self, domains: np.ndarray, people: pd.DataFrame) -> np.ndarray:
        """The hash of every row's key: its account domain (``domains``, their string hashes) and
        :attr:`field`."""
        return self._hasher.key_hashes(domains, people[self.field])

    def involved(self, hashes: np.ndarray, values: pd.Series) -> np.ndarray:
        """Which keys a kept row may have, or another of these has (a null value: no key)."""
        given = values.notna().to_numpy(dtype=bool)
        shared = pd.Series(hashes[given]).duplicated(keep=False).to_numpy() | (
            self._lookup(hashes[given]) >= 0
        )
        involved = np.zeros(len(hashes), dtype=bool)
        involved[given] = shared | bool(self._whole)
        return involved

    def add(self, hashes: np.ndarray, kept: pd.DataFrame, start: int) -> None:
        """Remember the keys of the rows ``kept`` (those with one), at positions from ``start``."""
        given = kept[self.field].notna().to_numpy(dtype=bool)
        hashes, positions = hashes[given], np.flatnonzero(given) + start
        taken = (self._lookup(hashes) >= 0) | pd.Series(hashes).duplicated().to_numpy()
        for offset in np.flatnonzero(taken).tolist():  # another key has this hash: kept whole
            row = kept.iloc[positions[offset] - start]
            self._whole.setdefault((str(row[ACCOUNT_DOMAIN]), str(row[self.field])), int(positions[offset]))
        if taken.all():
            return
        order = np.argsort(hashes[~taken], kind="stable")
        self._runs.append((hashes[~taken][order], positions[~taken][order]))
        while len(self._runs) > 1 and len(self._runs[-1][0]) * 2 >= len(self._runs[-2][0]):
            (newer, newer_at), (older, older_at) = self._runs.pop(), self._runs.pop()
            merged = np.concatenate([older, newer])
            order = np.argsort(merged, kind="stable")
            self._runs.append((merged[order], np.concatenate([older_at, newer_at])[order]))

    def find(self, key: Key, row_at: Callable[[int], dict[str, Any]]) -> int | None:
        """The position of the kept row with ``key``, None if no row kept has it."""
        position = self._whole.get(key)
        if position is not None:
            return position
        domain = self._hasher.string_hashes(pd.Series([key[0]]))
        found = int(self._lookup(self._hasher.key_hashes(domain, pd.Series([key[1]])))[0])
        if found < 0:
            return None
        kept = row_at(found)
        return found if (kept[ACCOUNT_DOMAIN], kept.get(self.field)) == key else None

    def _lookup(self, hashes: np.ndarray) -> np.ndarray:
        """The position stored under each hash (-1: none). The hashes are looked up in their own
        order (sorted, a search starts where the one before ended: three times faster)."""
        order = np.argsort(hashes)
        wanted = hashes[order]
        found = np.full(len(hashes), -1, dtype=np.int64)
        for run, at in self._runs:
            index = np.minimum(np.searchsorted(run, wanted), len(run) - 1)
            hit = run[index] == wanted
            found[hit] = at[index[hit]]
        positions = np.empty_like(found)
        positions[order] = found
        return positions


_MULTIPLIER = np.uint64(0x100000001B3)
_INVERSE = np.uint64(pow(0x100000001B3, -1, 2**64))


class _Hasher:
    """64-bit polynomial hashes of text, computed over Arrow text a column at a time. The powers
    of the base it needs (8 bytes each per byte of a chunk's text, both ways: 16 MiB for a chunk
    of 1 MB) are kept from chunk to chunk, and go with the hasher once the extract is prepared."""

    def __init__(self) -> None:
        self._powers = np.ones(0, dtype=np.uint64)
        self._inverses = np.ones(0, dtype=np.uint64)

    def key_hashes(self, domains: np.ndarray, values: pd.Series) -> np.ndarray:
        """A 64-bit hash of each (domain, value) pair, from the domains' :meth:`string_hashes`."""
        return _mix(domains * _MULTIPLIER + self.string_hashes(values))

    def string_hashes(self, values: pd.Series) -> np.ndarray:
        """A 64-bit hash of each text value (nulls hash like ""), mixed with its length."""
        text = pa.array(values.astype(TEXT), type=pa.string())
        text = (text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text).fill_null("")
        offsets = np.frombuffer(text.buffers()[1], dtype=np.int32)[text.offset : text.offset + len(text) + 1]
        span = text_bytes(text)
        starts, ends = offsets[:-1] - offsets[0], offsets[1:] - offsets[0]
        powers, inverses = self._tables(len(span) + 1)
        with np.errstate(over="ignore"):
            prefix = np.zeros(len(span) + 1, dtype=np.uint64)
            np.cumsum(span * powers[1 : len(span) + 1], out=prefix[1:])  # sum of byte * P^(i+1)
            hashes = (prefix[ends] - prefix[starts]) * inverses[starts]  # as if each text began at 0
            return _mix(hashes ^ (ends - starts).astype(np.uint64))

    def _tables(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``P^i`` and ``P^-i`` for i below ``count`` at least (mod 2^64)."""
        if len(self._powers) < count:
            size = max(count, 2 * len(self._powers), 1 << 16)
            tables = []
            for base in (_MULTIPLIER, _INVERSE):
                steps = np.full(size, base, dtype=np.uint64)
                steps[0] = 1
                with np.errstate(over="ignore"):
                    tables.append(np.cumprod(steps))  # base^0, base^1, ...
            self._powers, self._inverses = tables
        return self._powers, self._inverses


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads every input bit over the hash."""
    with np.errstate(over="ignore"):
        values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return values ^ (values >> np.uint64(31))


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

    :param frames: chunks from :func:`~listsync.extract.sources.read_extract`.
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
