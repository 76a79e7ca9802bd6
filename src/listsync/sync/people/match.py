"""Who is whom in a people plan: each extract person matched to the List person they are, per account.

A person is found by keys: their identity (:func:`~listsync.client.models.person_identity`), then
their e-mail and profile URL, which the service merges people by on add (A16), then their phone
and their name. The List is indexed by (account domain, key) under every key a person is found by
(identity, and a profile URL besides an e-mail), each key naming the first List person with it;
List people sharing a key are duplicates, left alone. Each extract person is given the first of
their candidates that is a duplicate (a conflict) or not claimed by an earlier extract person.
Keys are numbered as integer codes, never joined as text. The same keys, a record at a time
(:func:`person_keys`, :func:`list_domain`), index the people a read back finds.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from listsync.extract.contact_rules import normalize_domain, normalize_profile_url
from listsync.extract.mapping import ACCOUNT_DOMAIN
from listsync.extract.text_rules import NormalizationError
from listsync.sync.forms import Forms, fold_text
from listsync.sync.people.frames import IDENTITY, TEXT, TEXT_ARROW, PersonRecord, field_column

#: Text as a pandas column or as Arrow.
Column: TypeAlias = pd.Series | pa.Array | pa.ChunkedArray


@dataclass
class ExtractPeople:
    """The extract's people as columns: ``carried`` fields, and where each was given (None: everywhere)."""

    frame: pd.DataFrame
    carried: list[str]
    present: dict[str, np.ndarray] | None

    def text(self, name: str, rows: np.ndarray) -> pd.Series:
        """The value of text field ``name`` of the people at ``rows``, where it is carried and
        given, trimmed (indexed from 0)."""
        if name not in self.carried:
            return pd.Series(pd.NA, index=pd.RangeIndex(len(rows)), dtype=TEXT)
        column = self.frame[name].iloc[rows].reset_index(drop=True).astype(TEXT).str.strip()
        column = column.where(column.str.len() > 0)
        return column if self.present is None else column.where(self.present[name][rows])


@dataclass
class Matches:
    """Who is whom (:func:`match_people`), by position in the extract's and the List's frames.

    :ivar found: each extract person's List person (-1: none); a duplicated one is a conflict.
    :ivar duplicated: the List people sharing a key with another of their account, left alone.
    :ivar copies: the extra copies of people the List holds more than once under one identity,
        to remove (asked for by ``repair_in``), and ``copy_numbers``: which copy each is (1: the
        second).
    """

    found: np.ndarray
    duplicated: np.ndarray
    copies: np.ndarray
    copy_numbers: np.ndarray


@dataclass(frozen=True)
class AccountCodes:
    """Both sides' account domains numbered alike, once a plan (:func:`numbered`; -1: none).

    :ivar listed: each List person's account, by position in the List's frame.
    :ivar source: each extract person's account, by position in the extract's frame.
    :ivar count: how many accounts are numbered.
    """

    listed: np.ndarray
    source: np.ndarray
    count: int

    @classmethod
    def of(cls, listed: pd.DataFrame, source: pd.DataFrame) -> AccountCodes:
        """The accounts of a List frame (``domain``) and an extract frame (``account_domain``)."""
        both = numbered([listed["domain"], source[ACCOUNT_DOMAIN]])
        return cls(both[: len(listed)], both[len(listed) :], int(both.max()) + 1 if len(both) else 0)

    def named(self, accounts: np.ndarray) -> np.ndarray:
        """Which List people belong to one of ``accounts`` (codes; -1 names none)."""
        among = np.zeros(self.count + 1, dtype=bool)  # the last slot, that of -1, stays False
        among[accounts[accounts >= 0]] = True
        return among[self.listed]

    def in_source(self) -> np.ndarray:
        """Which List people belong to an account the extract names."""
        return self.named(self.source)

    def source_order(self) -> np.ndarray:
        """The extract's people account by account, the accounts in the order the extract first
        names them, each account's people in extract order (a stable order)."""
        positions = np.arange(len(self.source))
        first = np.empty(self.count + 1, dtype=np.int64)
        first[self.source[::-1]] = positions[::-1]  # the last assignment wins: the first person
        return np.argsort(np.where(self.source >= 0, first[self.source], -1), kind="stable")


def match_people(
    wanted: ExtractPeople,
    listed: pd.DataFrame,
    forms: Forms,
    accounts: AccountCodes,
    *,
    repair_in: np.ndarray | None = None,
) -> Matches:
    """Match the extract's people to the List's (:func:`~listsync.sync.people.frames.list_frame`'s
    frame), as the module says. The codes and indexes built are dropped on return.

    :param forms: the forms the service was seen to keep fields in (:mod:`listsync.sync.forms`):
        profile-URL and name keys are matched in them.
    :param accounts: both sides' accounts numbered (:meth:`AccountCodes.of`).
    :param repair_in: which List people copies may be removed of (a mirror run's delete scope):
        there, people the List holds several times under an identity no merge explains (phone or
        name alone: a lost add leaves such copies) are copies of one person, not duplicates; the
        first copy is matched like anyone. None: no copies are removed.
    """
    return _Matcher(wanted, listed, forms, accounts).match(repair_in)


class _Matcher:
    """One matching: candidates no other extract person has are decided as columns; the few
    shared ones one by one, in extract order."""

    def __init__(
        self, wanted: ExtractPeople, listed: pd.DataFrame, forms: Forms, accounts: AccountCodes
    ) -> None:
        self.wanted, self.source, self.list, self.forms = wanted, wanted.frame, listed, forms
        self.accounts = accounts

    def match(self, repair_in: np.ndarray | None) -> Matches:
        listed, source = self.list, self.source
        identities = arrow_text(listed[IDENTITY])
        email_identity = pc.starts_with(identities, "email:").to_numpy(zero_copy_only=False)
        # Every List person is found by their identity, and one with an e-mail by their profile URL too.
        list_keys = [
            self.fold_keys(identities),
            self.fold_keys(("url:" + list_values(listed, "url_key")).where(email_identity)),
        ]
        codes = _codes(
            self.accounts.listed, list_keys, self.accounts.source, [self.fold_keys(source[IDENTITY])]
        )
        list_codes, source_codes = codes[: 2 * len(listed)], codes[2 * len(listed) :]
        first, duplicated = _index(list_codes, len(listed), int(codes.max()) + 1 if len(codes) else 0)
        copies, numbers = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        if repair_in is not None:
            copies, numbers = self._copies(list_codes[: len(listed)], duplicated, repair_in)
        by_identity = np.where(source_codes >= 0, np.append(first, -1)[source_codes], -1)
        found = self._match(by_identity, _OtherKeys(self, list_keys, email_identity), duplicated)
        return Matches(found, duplicated, copies, numbers)

    @staticmethod
    def _match(by_identity: np.ndarray, others: _OtherKeys, duplicated: np.ndarray) -> np.ndarray:
        """Each extract person's List person (-1: none), as :func:`_find` decides one by one in
        extract order: the first of their candidates that is duplicated or not yet claimed.

        Everyone's first candidate is theirs unless another extract person has it as a candidate
        too: those people, and whoever has one of their candidates first, are decided one by one.
        The keys besides the identity (profile URL, phone, name) are looked up only for the people
        that need them: the unmatched, and those decided one by one."""
        shared_freely = np.append(duplicated, False)  # a duplicated List person is never claimed
        first = by_identity.copy()
        unmatched = np.flatnonzero(first < 0)
        if len(unmatched):
            first[unmatched] = _first_found(others.candidates(unmatched))
        claimable = (first >= 0) & ~shared_freely[first]
        # How many claim each List person (the last count, of "none", stays 0).
        claims = np.bincount(first[claimable], minlength=len(shared_freely))
        contended = claimable & (claims[first] > 1)
        rows = np.flatnonzero(contended)
        every = np.empty((0, 4), dtype=np.int64)
        while len(rows):
            every = np.column_stack([by_identity[rows], others.candidates(rows)])
            wanted = every[(every >= 0) & ~shared_freely[every]]
            grown = contended | (claimable & np.isin(first, wanted))
            if (grown == contended).all():
                break
            contended = grown
            rows = np.flatnonzero(contended)
        matches = np.where(contended, -1, first)
        claimed: set[int] = set()
        for row, candidates in zip(rows.tolist(), every, strict=True):
            matches[row] = _find(candidates, duplicated, claimed)
        return matches

    def _copies(
        self, identity_codes: np.ndarray, duplicated: np.ndarray, repair_in: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The extra copies of people known by phone or name alone within ``repair_in``, and which
        copy each is; every copy is taken out of ``duplicated``, so the first stays and is matched
        like anyone."""
        shared = np.flatnonzero(duplicated & repair_in)  # usually few: only theirs are read
        merged = (list_values(self.list, "email", shared).str.strip().str.len().fillna(0).to_numpy() > 0) | (
            list_values(self.list, "network_profile_url", shared).str.strip().str.len().fillna(0).to_numpy()
            > 0
        )
        copies = shared[~merged]
        if not len(copies):
            return copies, np.empty(0, dtype=np.int64)
        groups = pd.Series(copies).groupby(identity_codes[copies], sort=False)
        number = groups.cumcount().to_numpy()
        order = np.lexsort((number, groups.ngroup().to_numpy()))
        duplicated[copies] = False
        extra = number[order] > 0
        return copies[order][extra], number[order][extra]

    def fold_keys(self, keys: Column) -> Column:
        """Keys in the forms the service was seen to keep their fields in: profile-URL keys in the
        profile URL's, name keys in the names' (:mod:`listsync.sync.forms`); as they are when
        none was learned."""
        url = self.forms.get("network_profile_url", ())
        names = [*self.forms.get("first_name", ()), *self.forms.get("last_name", ())]
        if not url and not names:
            return keys
        folded = arrow_text(keys)
        for prefix, classes in (("url:", url), ("name:", names)):
            if classes:
                folded = pc.if_else(pc.starts_with(folded, prefix), fold_text(folded, classes), folded)
        return folded


class _OtherKeys:
    """The List people an extract person's profile URL, phone and name find (-1: none), looked up
    for the people asked about only; those keys find only List people not known by e-mail alone."""

    def __init__(self, matcher: _Matcher, list_keys: list[Column], email_identity: np.ndarray) -> None:
        self._matcher = matcher
        accounts = matcher.accounts.listed
        by_other = ~email_identity
        positions = np.arange(len(accounts))
        has_url = pc.is_valid(arrow_text(list_keys[1])).to_numpy(zero_copy_only=False)
        self._accounts = np.concatenate([accounts[by_other], accounts[has_url]])
        self._keys = pa.chunked_array(
            [
                *arrow_text(list_keys[0]).filter(by_other).chunks,
                *arrow_text(list_keys[1]).filter(has_url).chunks,
            ],
            TEXT_ARROW,
        )
        self._positions = np.concatenate([positions[by_other], positions[has_url]])

    def candidates(self, rows: np.ndarray) -> np.ndarray:
        """For each extract person at ``rows``: the List people of their profile URL, phone and
        name, in that order (shape ``(len(rows), 3)``)."""
        if not len(rows) or not len(self._keys):
            return np.full((len(rows), 3), -1, dtype=np.int64)
        matcher = self._matcher
        text = {name: matcher.wanted.text(name, rows) for name in _OTHER_KEY_FIELDS}
        keys = [
            "url:" + text["network_profile_url"],
            "phone:" + text["phone_number"],
            "name:" + text["first_name"] + " " + text["last_name"],
        ]
        codes = _codes(
            self._accounts,
            [self._keys],
            np.tile(matcher.accounts.source[rows], 3),
            [matcher.fold_keys(pd.concat(keys, ignore_index=True))],
        )
        listed, found = codes[: len(self._keys)], codes[len(self._keys) :]
        first = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
        given = listed >= 0
        first[listed[given][::-1]] = self._positions[given][::-1]  # the last assignment wins: the first
        return np.where(found >= 0, first[found], -1).reshape(3, len(rows)).T


_OTHER_KEY_FIELDS = ("network_profile_url", "phone_number", "first_name", "last_name")


#: About how many keys are numbered at once by :func:`_codes`: the table Arrow builds to number
#: text holds the distinct values, so numbering every key of a large List at once would take
#: hundreds of MB for an instant (250 MiB at 1,000,000 people). At 200,000 rather than 500,000,
#: the people benchmark peaks 37 MiB lower at 1,000,000 people, in the same time; at 100,000,
#: planning one shard of 3,000,000 people (of 8) takes 30 MiB at most rather than 40.
KEYS_AT_ONCE = 100_000


def _codes(
    list_accounts: np.ndarray,
    list_keys: list[Column],
    source_accounts: np.ndarray,
    source_keys: list[Column],
) -> np.ndarray:
    """One integer per (account, key), equal for equal pairs (-1 where the key is null): the
    List's keys, then the extract's, each list of keys one after the other; ``list_accounts`` and
    ``source_accounts`` are the accounts' codes (:class:`AccountCodes`). The keys of a share of the
    accounts are numbered at a time (about :data:`KEYS_AT_ONCE` keys), and the pairs of numbers
    within that share: equal pairs have equal accounts, so they meet in one share. No text is built."""
    # Each side's accounts repeated for each of its keys.
    domain_codes = np.concatenate([list_accounts] * len(list_keys) + [source_accounts] * len(source_keys))
    keys = pa.chunked_array(
        [chunk for key in [*list_keys, *source_keys] for chunk in arrow_text(key).chunks], TEXT_ARROW
    )
    codes = np.full(len(domain_codes), -1, dtype=np.int32)  # 4 bytes a key: a plan holds millions
    given = pc.is_valid(keys).to_numpy(zero_copy_only=False) if len(keys) else np.empty(0, dtype=bool)
    shares = max(1, -(-int(given.sum()) // KEYS_AT_ONCE))
    share_of = np.where(given, domain_codes % shares, -1)  # the divisions done once
    numbered_so_far = 0
    for share_keys, at in _by_share(keys, share_of, shares):
        key_codes = numbered([share_keys])
        pairs = domain_codes[at].astype(np.int64) * (int(key_codes.max()) + 1) + key_codes
        local = pd.factorize(pairs)[0]
        codes[at] = local + numbered_so_far
        numbered_so_far += int(local.max()) + 1
    return codes


def _by_share(
    keys: pa.ChunkedArray, share_of: np.ndarray, shares: int
) -> Iterator[tuple[pa.ChunkedArray, np.ndarray]]:
    """The keys of each share (``share_of``; -1: none) with their positions, a share at a time.
    Each chunk's positions are sorted by share once, and each share's keys taken out of the chunks
    by their places, so that the keys are gone over once, not once per share (nor once per group of
    shares: at 3,000,000 people, 10 passes over 9,000,000 keys took more than a second)."""
    chunks = []
    start = 0
    for chunk in keys.chunks:
        local = share_of[start : start + len(chunk)]
        # A stable sort of 16-bit numbers is a radix sort: one pass.
        order = np.argsort(local.astype(np.int16) if shares < 2**15 else local, kind="stable")
        bounds = np.searchsorted(local[order], np.arange(shares + 1))
        chunks.append((chunk, start, order, bounds))
        start += len(chunk)
    for share in range(shares):
        taken = [(chunk, at, order[bounds[share] : bounds[share + 1]]) for chunk, at, order, bounds in chunks]
        taken = [(chunk, at, places) for chunk, at, places in taken if len(places)]
        if taken:
            yield (
                pa.chunked_array([chunk.take(pa.array(places)) for chunk, _, places in taken], TEXT_ARROW),
                np.concatenate([places + at for _, at, places in taken]),
            )


def numbered(columns: list[Column]) -> np.ndarray:
    """The values of ``columns``, end to end, numbered in order of first appearance: equal values
    alike, nulls -1 (32-bit)."""
    chunks = [chunk for column in columns for chunk in arrow_text(column).chunks]
    if not chunks or not sum(len(chunk) for chunk in chunks):
        return np.empty(0, dtype=np.int32)
    encoded = pc.dictionary_encode(pa.chunked_array(chunks, TEXT_ARROW))
    return np.concatenate(
        [pc.fill_null(chunk.indices, -1).to_numpy(zero_copy_only=False) for chunk in encoded.chunks]
    ).astype(np.int32, copy=False)


def arrow_text(column: Column) -> pa.ChunkedArray:
    """Text as Arrow chunks, in the type text columns have (no copy where it already is)."""
    array = column if isinstance(column, pa.Array | pa.ChunkedArray) else pa.array(column.astype(TEXT).array)
    if isinstance(array, pa.Array):
        array = pa.chunked_array([array])
    return array.cast(TEXT_ARROW)


def list_values(listed: pd.DataFrame, name: str, positions: np.ndarray | None = None) -> pd.Series:
    """The List's field ``name`` (of the people at ``positions``; default everyone's column):
    nulls where no List person has the field, whose column
    :func:`~listsync.sync.people.frames.list_frame` leaves out."""
    if name not in listed.columns:
        return field_column(name, [None] * (len(listed) if positions is None else len(positions)))
    column = listed[name]
    return column if positions is None else column.iloc[positions].reset_index(drop=True)


def _index(list_codes: np.ndarray, size: int, codes_count: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``codes_count`` codes, the first List person with it (-1: none); and which List
    people share a key with another."""
    positions = np.concatenate([np.arange(size, dtype=np.int32)] * 2)
    given = list_codes >= 0
    codes, positions = list_codes[given], positions[given]
    first = np.full(codes_count, -1, dtype=np.int32)
    first[codes[::-1]] = positions[::-1]  # the last assignment wins: the first List person
    counts = np.bincount(codes, minlength=len(first))
    duplicated = np.zeros(size, dtype=bool)
    duplicated[positions[counts[codes] > 1]] = True
    return first, duplicated


def _first_found(candidates: np.ndarray) -> np.ndarray:
    """Per row, the first candidate found (-1: none)."""
    found = candidates >= 0
    return np.where(found.any(axis=1), candidates[np.arange(len(candidates)), found.argmax(axis=1)], -1)


def _find(candidates: np.ndarray, duplicated: np.ndarray, claimed: set[int]) -> int:
    """The first candidate that is shared by several List people (a conflict) or not claimed yet;
    claim it."""
    for person in candidates:
        if person >= 0 and (duplicated[person] or person not in claimed):
            if not duplicated[person]:
                claimed.add(int(person))
            return int(person)
    return -1


def person_keys(identity: str, fields: Mapping[str, Any]) -> Iterator[str]:
    """The keys a person can be found by: their identity, then e-mail and profile URL (A16)."""
    yield identity
    email = fields.get("email")
    if isinstance(email, str) and email.strip():
        yield f"email:{email.strip().lower()}"
    url = fields.get("network_profile_url")
    if isinstance(url, str) and url.strip():
        yield f"url:{url.strip()}"


def normalised_list_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The identity fields of a List person normalised like the extract's (e-mail case aside:
    identities lower-case it anyway)."""
    url = fields.get("network_profile_url")
    if not (isinstance(url, str) and url):
        return fields
    return {**fields, "network_profile_url": _list_profile_url(url)}


def account_domain_of(record: PersonRecord) -> str | None:
    """The account domain a List person record names, as it names it (None: none)."""
    if isinstance(record, BaseModel):
        value = getattr(record, "account_domain", None)
    else:
        value = record.get("account_domain", record.get("accountDomain"))
    return value if isinstance(value, str) and value else None


#: Account domains :func:`list_domain` remembers: a List gives the people of an account one after
#: the other, and a read back normalises every person's domain (twice, on the service's filter).
DOMAINS_REMEMBERED = 4_096


@functools.lru_cache(maxsize=DOMAINS_REMEMBERED)
def list_domain(value: str | None) -> str:
    """A List person's account domain, normalised like the extract's."""
    if value is None:
        return ""
    try:
        return normalize_domain(value)
    except NormalizationError:
        # A domain our rules reject can still be matched exactly; keep it rather than lose the person.
        return value.strip().lower()


def _list_profile_url(value: str) -> str:
    try:
        return normalize_profile_url(value)
    except NormalizationError:
        return value.strip()
