"""Reading a List's people back: the accounts a plan touched, indexed by every key a person is found
by, and how they differ from what a planned write meant."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from listsync.client.models import person_identity
from listsync.extract.contact_rules import normalize_domain
from listsync.extract.mapping import keys_in_shard
from listsync.sync.digests import key_hashes, value_digests
from listsync.sync.fan_out import fan_out
from listsync.sync.forms import fold, fold_text, learn_form
from listsync.sync.people.diff import canonical, person_fields
from listsync.sync.people.frames import IDENTITY, PersonRecord, frame_records, list_batch
from listsync.sync.people.match import account_domain_of, list_domain, normalised_list_fields, person_keys
from listsync.sync.people.plan import PlannedAdd, PlannedDelete, PlannedPatch

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient
    from listsync.extract.options import Shard


#: List people as read back: account domain → a key they can be found by (:func:`person_keys`, made
#: :func:`loose`) → the fields of every person found by it, in List order.
PeopleIndex = dict[str, dict[str, list[dict[str, Any]]]]


def loose(key: str) -> str:
    """A key as a read back looks it up: in lower case, its white space folded, so that a person the
    service keeps in a form of its own (:mod:`listsync.sync.forms`) is found all the same."""
    return fold(key, ("whitespace", "case"))


def people_index(
    listed: Iterable[PersonRecord], wanted: Mapping[str, Collection[str]] | None = None
) -> PeopleIndex:
    """Index the List's people as read back, to compare with what a plan meant.

    :param wanted: account domain → the keys the comparison will look up
        (:func:`looked_up_keys`); only the people found by one of them are kept. None: everyone.
    """
    index: PeopleIndex = {}
    for record in listed:
        person = found_by(record)
        if person is None:
            continue
        domain, fields, keys = person
        if wanted is not None and not any(key in wanted.get(domain, ()) for key in keys):
            continue
        people = index.setdefault(domain, {})
        for key in keys:
            people.setdefault(key, []).append(fields)
    return index


def found_by(record: PersonRecord) -> tuple[str, dict[str, Any], list[str]] | None:
    """A List person as a read back finds them: their account domain (:func:`list_domain`), their
    fields, and the keys they are found by (:func:`loose`); None for a person with no identity."""
    fields = person_fields(record)
    normalised = normalised_list_fields(fields)
    identity = person_identity(normalised)
    if identity is None:
        return None
    return (
        list_domain(account_domain_of(record)),
        fields,
        [loose(key) for key in person_keys(identity, normalised)],
    )


def read_accounts(
    client: ListSyncClient,
    table_id: str,
    domains: list[str],
    page_size: int,
    list_people: int,
    *,
    may_page: bool = True,
) -> tuple[Iterable[Any], str]:
    """The people of ``domains``, and how they were read (``"service"`` or ``"client"`` filter):
    by the service's account filter when there are fewer domains than pages of the whole List
    (of ``list_people``) or paging it is not wanted (``may_page`` false: a shard of a split reads
    its own accounts only), else as the whole List is paged (JSON objects, yielded as they come;
    also when the service ignores the filter)."""
    if not domains:
        return [], "service"
    if not may_page or len(domains) <= max(1, -(-list_people // page_size)):

        def of_account(domain: str) -> list[Any]:
            return list(client.iter_targetable_people(table_id, page_size=page_size, account_domain=domain))

        # The first account alone shows whether the service honours the filter; the others then
        # go several at once.
        people = of_account(domains[0])
        if "account_domain" not in client.filters_applied_here:
            for found in fan_out(of_account, domains[1:], at_once=client.max_in_flight):
                people += found
            return people, "client" if "account_domain" in client.filters_applied_here else "service"
    wanted = set(domains)
    everyone = client.iter_targetable_people_records(table_id, page_size=page_size)
    return (person for person in everyone if list_domain(account_domain_of(person)) in wanted), "client"


#: How many List people :func:`people_in_shard` sorts into shards at a time.
PEOPLE_AT_ONCE = 1_000


def people_in_shard(people: Iterable[PersonRecord], shard: Shard) -> Iterator[PersonRecord]:
    """The List people whose account domain, normalised like the extract's (:func:`list_domain`),
    is in ``shard``. They are sorted :data:`PEOPLE_AT_ONCE` at a time, their domains as one column
    by the extract's own rule (:func:`~listsync.extract.mapping.keys_in_shard`): nothing is kept from
    one batch to the next, where remembering every domain would hold the whole List's (61 MiB at
    600,000 accounts)."""
    people = iter(people)
    while batch := list(itertools.islice(people, PEOPLE_AT_ONCE)):
        domains = pd.Series([account_domain_of(person) for person in batch], dtype=object)
        yield from itertools.compress(batch, keys_in_shard(domains, normalize_domain, shard).tolist())


NOT_IN_LIST = "not in the List"


def looked_up_keys(item: PlannedAdd | PlannedPatch | PlannedDelete) -> list[str]:
    """The keys :func:`read_back` looks the item's person up by (:func:`loose`)."""
    if isinstance(item, PlannedDelete):
        keys = [item.identity] if item.copy else list(person_keys(item.identity, item.match))
    elif isinstance(item, PlannedAdd):
        keys = list(person_keys(item.identity, item.person))
    else:
        after = {**item.current, **item.patch}
        keys = [
            *person_keys(item.identity, item.current),
            *person_keys(person_identity(after) or item.identity, after),
        ]
    return [loose(key) for key in keys]


@dataclass(frozen=True)
class ReadBack:
    """What the List shows of one planned write.

    :ivar status: ``"shown"`` (as written, or in the service's own form of it), ``"not_yet"`` (the
        List still shows what was there before: an add absent, a patched field at its old value, a
        deleted person present; it may show the write later), ``"lost"`` (extra copies removed,
        and the copy meant to stay with them), or ``"drift"`` (anything else).
    :ivar problem: what is not shown, or how the List differs, in words; None when shown.
    :ivar forms: field → the classes of form the service keeps the written value in.
    :ivar found: the List person's fields, when the write is an add or a patch found.
    """

    status: str
    problem: str | None = None
    forms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    found: dict[str, Any] | None = None


def read_back(
    item: PlannedAdd | PlannedPatch | PlannedDelete, people: Mapping[str, list[dict[str, Any]]]
) -> ReadBack:
    """What the List's people of the item's account (:func:`people_index`) show of it."""
    keys = looked_up_keys(item)
    if isinstance(item, PlannedDelete):
        return delete_read_back(item, [len(people.get(key, ())) for key in keys])
    found = next((people[key][0] for key in keys if key in people), None)
    if found is None:
        return not_found(item)
    wanted = _written(item)
    forms: dict[str, tuple[str, ...]] = {}
    old: list[str] = []
    for name, value in wanted.items():
        shown = found.get(name)
        if canonical(value) == canonical(shown):
            continue
        form = learn_form(name, value, shown)
        if form is not None:
            forms[name] = form
        elif isinstance(item, PlannedPatch) and _is_before(item, name, shown):
            old.append(f"{name} is still {shown!r}, expected {value!r}")
        else:
            return ReadBack("drift", f"{name} is {shown!r}, expected {value!r}")
    if old:
        return ReadBack("not_yet", "; ".join(old))
    return ReadBack("shown", forms=forms, found=found)


def delete_read_back(item: PlannedDelete, found: Sequence[int]) -> ReadBack:
    """What the List shows of a delete, from how many of the account's people each of its
    :func:`looked_up_keys` finds."""
    if item.copy:
        copies = found[0]  # a copy is looked up by its identity alone
        if copies > 1:
            return ReadBack("not_yet", f"the List still holds {copies} copies")
        if not copies:
            return ReadBack("lost", "no copy is left of the person meant to keep one")
    elif any(found):
        return ReadBack("not_yet", "still in the List")
    return ReadBack("shown")


def not_found(item: PlannedAdd | PlannedPatch) -> ReadBack:
    """What the List shows of an add or a patch whose person none of its keys finds."""
    return ReadBack("not_yet" if isinstance(item, PlannedAdd) else "drift", NOT_IN_LIST)


def _is_before(patch: PlannedPatch, name: str, shown: Any) -> bool:
    """Whether ``shown`` is the patched field's value before the patch (or its service form)."""
    before = patch.changes[name][0]
    return canonical(before) == canonical(shown) or learn_form(name, before, shown) is not None


def difference(
    item: PlannedAdd | PlannedPatch | PlannedDelete, people: Mapping[str, list[dict[str, Any]]]
) -> str | None:
    """How the List's people of the item's account differ from what the item meant; None if not
    (the service's own form of a written value is no difference)."""
    return read_back(item, people).problem


#: List people sorted against the keys sought at a time (:meth:`SoughtPeople.read`).
SOUGHT_AT_ONCE = 5_000


def compared(values: Mapping[str, Any], names: Sequence[str]) -> int:
    """A hash of the values of ``names`` as :func:`read_back` compares them (:func:`canonical`), by
    their ``repr``: Python's hash of the values themselves is one for ``-1`` and ``-2``, and values
    Python holds equal but writes otherwise (``1``, ``1.0``, ``True``) only differ here, which
    sends their write to the full comparison."""
    return hash(repr([canonical(values.get(name)) for name in names]))


def _written(item: PlannedAdd | PlannedPatch) -> dict[str, Any]:
    """The fields an add or a patch wrote, as :func:`read_back` compares them."""
    return item.person if isinstance(item, PlannedAdd) else item.patch


def _entry_columns(
    domains: list[str], keys: list[str], entries: list[tuple[int, int, int]]
) -> tuple[np.ndarray, ...]:
    """Entries of :class:`SoughtPeople` as columns: the hash of each (domain, key), the write's
    position, its list of fields, and :func:`compared` of what it wrote."""
    hashes = key_hashes(pa.array(domains, pa.string()), pa.array(keys, pa.string()))
    position, place, digest = (
        np.array(column, dtype=dtype)
        for column, dtype in zip(
            zip(*entries, strict=True) if entries else ((), (), ()),
            (np.int32, np.int32, np.int64),
            strict=True,
        )
    )
    return hashes, position, place, digest


class SoughtPeople:
    """The people a plan's writes look for, as 64-bit hashes of (account domain, key), and what one
    read of the List shows of them: how many people each key finds, and of the first, whether it
    shows every field a write wrote as written and the digest of its fields for the next state.

    No List person is held, so that one read serves every write of a night, whatever its size, at
    the cost of a few hashes a write.

    :param writes: ``(position, write)`` in the plan's order.
    :param seen_fields: the fields of the next state's digest of a person shown
        (:func:`~listsync.sync.digests.value_digests`); None: no state is kept.
    """

    def __init__(
        self,
        writes: Iterable[tuple[int, PlannedAdd | PlannedPatch | PlannedDelete]],
        seen_fields: Sequence[str] | None,
    ) -> None:
        self.seen_fields = seen_fields
        #: The account domains of the writes, for the read.
        self.domains: set[str] = set()
        places: dict[tuple[str, ...], int] = {}
        # Gathered as Python values SOUGHT_AT_ONCE entries at a time, held as columns.
        columns: list[tuple[np.ndarray, ...]] = []
        domains: list[str] = []
        keys: list[str] = []
        batch: list[tuple[int, int, int]] = []
        for position, item in writes:
            wrote = None if isinstance(item, PlannedDelete) else _written(item)
            names = () if wrote is None else tuple(wrote)
            place = -1 if wrote is None else places.setdefault(names, len(places))
            digest = 0 if wrote is None else compared(wrote, names)
            self.domains.add(item.account_domain)
            for key in looked_up_keys(item):
                domains.append(item.account_domain)
                keys.append(key)
                batch.append((position, place, digest))
            if len(keys) >= SOUGHT_AT_ONCE:
                columns.append(_entry_columns(domains, keys, batch))
                domains, keys, batch = [], [], []
        columns.append(_entry_columns(domains, keys, batch))
        hashes, positions, field_list, expected = (
            np.concatenate(column) for column in zip(*columns, strict=True)
        )
        del columns
        #: The lists of fields the adds and patches wrote, each once; an entry names one by its place.
        self.field_lists: list[tuple[str, ...]] = list(places)
        self._written_names = sorted(set().union(*self.field_lists))
        #: Per entry (a key of a write, in the plan's order and each write's :func:`looked_up_keys`
        #: order): the write's position, the key's slot, the write's list of fields (-1: a delete)
        #: and :func:`compared` of what it wrote.
        self.position, self.field_list, self.expected = positions, field_list, expected
        self.keys, slot = np.unique(hashes, return_inverse=True)
        del hashes
        self.slot = slot.astype(np.int32)
        del slot  # 8 bytes an entry, let go before the argsort below
        #: Per entry: whether the first person its key finds shows what the write wrote.
        self.as_written_entry = np.zeros(len(self.position), dtype=bool)
        #: Per slot: people found by its key; the state's digest of the first.
        self.found = np.zeros(len(self.keys), dtype=np.int32)
        self.seen = np.zeros(len(self.keys), dtype=np.uint64)
        # The entries of each slot, for the first person a key finds.
        self._by_slot = np.argsort(self.slot, kind="stable").astype(np.int32)
        self._slot_start = np.searchsorted(self.slot[self._by_slot], np.arange(len(self.keys) + 1))

    def writes(self) -> Iterator[tuple[list[int], bool, int]]:
        """Per write, in the plan's order: how many people each of its keys finds, whether the
        first person found (by its first key that finds one) shows what it wrote, and the state's
        digest of that person. Worked out as columns: a night's writes are many."""
        if not len(self.position):
            return
        starts, found, as_written, seen = self._per_write()
        bounds = np.r_[starts, len(self.position)]
        # Made Python values a slice of the writes at a time: a million of each would be 40 MiB.
        for low in range(0, len(starts), SOUGHT_AT_ONCE):
            high = min(low + SOUGHT_AT_ONCE, len(starts))
            offset = int(bounds[low])
            counts = found[offset : bounds[high]].tolist()
            edges = (bounds[low : high + 1] - offset).tolist()
            shown, digests = as_written[low:high].tolist(), seen[low:high].tolist()
            for write, (start, stop) in enumerate(itertools.pairwise(edges)):
                yield counts[start:stop], shown[write], digests[write]

    def as_written(self) -> tuple[np.ndarray, np.ndarray]:
        """The positions of the writes (adds and patches) whose person shows what they wrote, and
        the state's digest of that person: those :meth:`writes` says ``True`` of."""
        if not len(self.position):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
        starts, _found, as_written, seen = self._per_write()
        return self.position[starts][as_written].astype(np.int64), seen[as_written]

    def _per_write(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Where each write's entries start, the people each entry's key finds, and per write
        whether its first person found shows what it wrote, and that person's digest."""
        entries = len(self.position)
        starts = np.flatnonzero(np.r_[True, self.position[1:] != self.position[:-1]])
        found = self.found[self.slot]
        first = np.minimum.reduceat(np.where(found > 0, np.arange(entries), entries), starts)
        anyone = first < entries
        first = np.where(anyone, first, 0)
        return starts, found, self.as_written_entry[first] & anyone, self.seen[self.slot[first]]

    def read(self, listed: Iterable[PersonRecord]) -> None:
        """Count the people ``listed`` (List order) finds by each key sought; compare the first.
        The people are taken as columns :data:`SOUGHT_AT_ONCE` at a time, as the plan reads them."""
        people = iter(listed)
        while batch := list(itertools.islice(people, SOUGHT_AT_ONCE)):
            frame = list_batch(batch)
            del batch
            owner, domains, keys = keys_found_by(frame)
            self._count(frame, owner, key_hashes(domains, keys))

    def _count(self, frame: pd.DataFrame, owner: np.ndarray, hashes: np.ndarray) -> None:
        """Count the people of ``frame`` (a batch, in List order) by the keys sought among theirs
        (``hashes``, each of the person ``owner`` names), and compare each key's first person."""
        if not len(self.keys) or not len(hashes):
            return
        place = np.minimum(np.searchsorted(self.keys, hashes), len(self.keys) - 1)
        hit = self.keys[place] == hashes
        slots, owners = place[hit], owner[hit]
        new = self.found[slots] == 0
        np.add.at(self.found, slots, 1)
        first_slots, first = np.unique(slots[new], return_index=True)
        if not len(first_slots):
            return
        # The first people found, each made a dict of the fields the writes wrote, once.
        people, person_of = np.unique(owners[new][first], return_inverse=True)
        held = frame_records(frame, people, [name for name in self._written_names if name in frame])
        for slot, person in zip(first_slots.tolist(), person_of.tolist(), strict=True):
            fields, digests = held[person], {}
            for entry in self._by_slot[self._slot_start[slot] : self._slot_start[slot + 1]].tolist():
                place_of_fields = int(self.field_list[entry])
                if place_of_fields < 0:
                    continue
                if place_of_fields not in digests:
                    digests[place_of_fields] = compared(fields, self.field_lists[place_of_fields])
                self.as_written_entry[entry] = digests[place_of_fields] == self.expected[entry]
        if self.seen_fields is not None:
            self.seen[first_slots] = value_digests(frame, self.seen_fields, people)[person_of]


def keys_found_by(frame: pd.DataFrame) -> tuple[np.ndarray, pa.ChunkedArray, pa.ChunkedArray]:
    """The keys the people of a List batch (:func:`~listsync.sync.people.frames.list_batch`) are
    found by, as :func:`found_by` gives them, as column operations: per key, the person's row, their
    account domain and the key (:func:`loose`), person after person, each one's keys in
    :func:`person_keys` order."""
    email = frame["email"].str.strip()
    candidates = [
        frame[IDENTITY],
        ("email:" + email).where(email.str.len() > 0),
        "url:" + frame["url_key"],
    ]
    rows = [np.flatnonzero(column.notna().to_numpy()) for column in candidates]
    texts = [
        pa.array(column.iloc[taken].array).cast(pa.string())
        for column, taken in zip(candidates, rows, strict=True)
    ]
    owner = np.concatenate(rows)
    order = np.argsort(owner, kind="stable")
    keys = fold_text(pa.chunked_array(texts, pa.string()), ("whitespace", "case")).take(order)
    owner = owner[order]
    domains = pa.array(frame["domain"].array).cast(pa.string()).take(owner)
    return owner, domains, keys
