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
import pyarrow.compute as pc

from listsync.client.models import person_identity
from listsync.extract.contact_rules import normalize_domain
from listsync.extract.mapping import ACCOUNT_DOMAIN, keys_in_shard
from listsync.sync.digests import hash_order, key_hashes, sought, text_hashes, value_digests
from listsync.sync.fan_out import fan_out
from listsync.sync.forms import fold, fold_text, learn_form
from listsync.sync.people.diff import canonical, person_fields
from listsync.sync.people.frames import (
    BATCH,
    IDENTITY,
    OBJECT_FIELDS,
    TEXT,
    PersonRecord,
    identities,
    list_batch,
)
from listsync.sync.people.match import account_domain_of, list_domain, normalised_list_fields, person_keys
from listsync.sync.people.plan import COPY, NEW, PATCHED, PlannedAdd, PlannedDelete, PlannedPatch

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
        once(person_keys(identity, normalised)),
    )


def read_accounts(
    client: ListSyncClient,
    table_id: str,
    domains: list[str],
    page_size: int,
    list_people: int,
    *,
    may_page: bool = True,
    sorted_by_reader: bool = False,
) -> tuple[Iterable[Any], str]:
    """The people of ``domains``, yielded as they come, and how they were read (``"service"`` or
    ``"client"`` filter): by the service's account filter when there are fewer domains than pages
    of the whole List (of ``list_people``) or paging it is not wanted (``may_page`` false: a shard
    of a split reads its own accounts only), else as the whole List is paged (also when the
    service ignores the filter); as the JSON objects the service sent. Only the accounts being
    read are held, however many the domains (a shard of 375,000 people held every one it wrote
    in: 1 GB at its peak).

    :param sorted_by_reader: the reader tells the people of ``domains`` from the others itself
        (:class:`SoughtPeople`, a batch of :data:`~listsync.sync.people.frames.BATCH` at a time): a
        whole List paged is yielded as it is, rather than each person's account domain normalised
        and looked up here, and the pages of the next batch are read while one is worked on."""
    if not domains:
        return [], "service"
    if not may_page or len(domains) <= max(1, -(-list_people // page_size)):

        def of_account(domain: str) -> list[Any]:
            read = client.iter_targetable_people_records
            return list(read(table_id, page_size=page_size, account_domain=domain))

        # The first account alone shows whether the service honours the filter (then the client
        # keeps to it); the others then go several at once.
        first = of_account(domains[0])
        if "account_domain" not in client.filters_applied_here:

            def accounts() -> Iterator[Any]:
                yield from first
                for found in fan_out(of_account, domains[1:], at_once=client.max_in_flight):
                    yield from found

            return accounts(), "service"
    if sorted_by_reader:
        # Such a reader takes a batch of people at a time: the pages of the next are read meanwhile.
        ahead = -(-BATCH // page_size)
        return client.iter_targetable_people_records(
            table_id, page_size=page_size, pages_ahead=ahead
        ), "client"
    everyone = client.iter_targetable_people_records(table_id, page_size=page_size)
    wanted = set(domains)
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
    return once(keys)


def once(keys: Iterable[str]) -> list[str]:
    """``keys`` as :func:`loose` makes them, each once, in order: a person's identity is also their
    e-mail key (or, without an e-mail, their profile URL's)."""
    return list(dict.fromkeys(loose(key) for key in keys))


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


#: A delete's list of fields in :class:`SoughtPeople`: of a person the extract no longer holds, or of
#: an extra copy of one (shown when one copy is left, as :func:`delete_read_back` says).
DELETED, COPY_REMOVED = -1, -2
#: Writes made Python values at a time (:meth:`SoughtPeople.writes`).
SOUGHT_AT_ONCE = 5_000
#: Planned writes taken as columns at a time (:class:`SoughtPeople`): what a slice's keys and
#: digests take while they are made is let go before the next.
COLUMNS_AT_ONCE = 100_000


@dataclass(frozen=True)
class TakenWrites:
    """Planned writes of one kind taken as the columns they are made of (:attr:`PlannedWrites.frame`).

    :ivar kind: ``"add"``, ``"patch"`` or ``"delete"``.
    :ivar rows: the rows of ``frame`` sought, in order.
    :ivar offset: the plan position of the frame's first row.
    """

    kind: str
    frame: pd.DataFrame
    rows: np.ndarray
    offset: int = 0


def _written(item: PlannedAdd | PlannedPatch) -> dict[str, Any]:
    """The fields an add or a patch wrote, as :func:`read_back` compares them."""
    return item.person if isinstance(item, PlannedAdd) else item.patch


class SoughtPeople:
    """The people a plan's writes look for, as 64-bit hashes of (account domain, key), and what one
    read of the List shows of them: how many people each key finds, and of the first, whether it
    shows every field a write wrote as written and the digest of its fields for the next state;
    a delete of a person (not of an extra copy) is shown when none of its keys finds anyone.

    No List person is held, so that one read serves every write of a night, whatever its size, at
    the cost of a few hashes a write. What a write wrote and what its person shows are compared
    as :func:`~listsync.sync.digests.value_digests` of the fields it wrote: a person whose digest
    differs (in a form of the service's own, or drifted) is read back in full to say how.

    :param taken: the writes sought, of each kind as the columns they are made of, in the plan's
        order. (Made objects again to be hashed, the patches and deletes took 1.5-2.1 s of the
        12-14 s read back of a 1,000,000-person change night; as columns, 0.4-0.6 s.)
    :param seen_fields: the fields of the next state's digest of a person shown
        (:func:`~listsync.sync.digests.value_digests`); None: no state is kept.
    """

    def __init__(self, taken: Sequence[TakenWrites], seen_fields: Sequence[str] | None) -> None:
        self.seen_fields = seen_fields
        places: dict[tuple[str, ...], int] = {}
        #: The account domains of the writes, for the read.
        self.domains: set[str] = set()
        columns = [
            self._taken(part, part.rows[start : start + COLUMNS_AT_ONCE], places)
            for part in taken
            for start in range(0, len(part.rows), COLUMNS_AT_ONCE)
        ]
        columns.append(tuple(np.zeros(0, dtype=kind) for kind in (np.uint64, np.int32, np.int32, np.uint64)))
        hashes, positions, field_list, expected = (
            np.concatenate(column) for column in zip(*columns, strict=True)
        )
        del columns
        #: The lists of fields the adds and patches wrote, each once; an entry names one by its place.
        self.field_lists: list[tuple[str, ...]] = list(places)
        #: Per entry (a key of a write, in the plan's order and each write's :func:`looked_up_keys`
        #: order): the write's position, the key's slot, the write's list of fields (:data:`DELETED`,
        #: :data:`COPY_REMOVED`: a delete) and the digest of what it wrote, of that list.
        self.position, self.field_list, self.expected = positions, field_list, expected
        # The entries by key: a slot per key, sorted; the entries of each slot, for the first
        # person its key finds.
        order = hash_order(hashes)
        hashes = hashes[order]
        first = np.ones(len(hashes), dtype=bool)
        np.not_equal(hashes[1:], hashes[:-1], out=first[1:])
        self.keys = hashes[first]
        del hashes
        self.slot = np.empty(len(order), dtype=np.int32)
        self.slot[order] = np.cumsum(first) - 1
        self._by_slot = order.astype(np.int32)
        del order
        self._slot_start = np.append(np.flatnonzero(first), len(first))
        #: Per entry: whether the first person its key finds shows what the write wrote.
        self.as_written_entry = np.zeros(len(self.position), dtype=bool)
        #: Per slot: people found by its key; the state's digest of the first.
        self.found = np.zeros(len(self.keys), dtype=np.int32)
        self.seen = np.zeros(len(self.keys), dtype=np.uint64)

    def _taken(
        self, part: TakenWrites, rows: np.ndarray, places: dict[tuple[str, ...], int]
    ) -> tuple[np.ndarray, ...]:
        """The entries of the writes at ``rows`` of ``part.frame``, as columns: what
        :func:`looked_up_keys` gives each, and what it wrote and its digest (a delete: nothing)."""
        first = int(rows[0])
        if int(rows[-1]) - first + 1 == len(rows):  # all of a span: the first round's, mostly
            writes = part.frame.iloc[first : first + len(rows)].reset_index(drop=True)
        else:
            writes = part.frame.take(rows).reset_index(drop=True)
        domains = writes[ACCOUNT_DOMAIN]
        self.domains.update(pc.unique(pa.array(domains.array).cast(pa.string())).to_pylist())
        if part.kind == "delete":
            candidates, copy = _deleted_keys(writes)
            place = np.where(copy, COPY_REMOVED, DELETED).astype(np.int32)
            digest = np.full(len(writes), text_hashes([""])[0], dtype=np.uint64)  # nothing written
        else:
            candidates, values, wrote = (_patched if part.kind == "patch" else _added)(writes)
            place, digest = _digests(values, wrote, places)
        owner, domains, keys = _owned_keys(candidates, domains)
        positions = (part.offset + rows[owner]).astype(np.int32)
        return key_hashes(domains, keys), positions, place[owner], digest[owner]

    def writes(self) -> Iterator[tuple[list[int], bool, int]]:
        """Per write, in the plan's order: how many people each of its keys finds, whether the List
        shows it (an add or a patch: the first person found, by its first key that finds one,
        shows what it wrote; a delete of a person: no one is found), and the state's digest of the
        person found (0: none). Worked out as columns: a night's writes are many."""
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

    def shown(self) -> tuple[np.ndarray, np.ndarray]:
        """The positions of the writes the List shows, and the state's digest of their person:
        those :meth:`writes` says ``True`` of."""
        if not len(self.position):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
        starts, _found, as_written, seen = self._per_write()
        return self.position[starts][as_written].astype(np.int64), seen[as_written]

    def _per_write(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Where each write's entries start, the people each entry's key finds, and per write
        whether the List shows it (:meth:`writes`) and the digest of the person found."""
        entries = len(self.position)
        starts = np.flatnonzero(np.r_[True, self.position[1:] != self.position[:-1]])
        found = self.found[self.slot]
        first = np.minimum.reduceat(np.where(found > 0, np.arange(entries), entries), starts)
        anyone = first < entries
        first = np.where(anyone, first, 0)
        shown = np.where(anyone, self.as_written_entry[first], self.field_list[starts] == DELETED)
        return starts, found, shown, np.where(anyone, self.seen[self.slot[first]], 0)

    def read(self, listed: Iterable[PersonRecord]) -> None:
        """Count the people ``listed`` (List order) finds by each key sought; compare the first.
        The people are taken as columns :data:`~listsync.sync.people.frames.BATCH` at a time, as the
        plan reads them. They need not be of the accounts written only: those of another account
        are passed over before they are made columns (a change night writes to accounts that hold
        four fifths of a CRM-like List), and would find no key sought, each hashed with its
        account domain."""
        people = iter(listed)
        while batch := list(itertools.islice(people, BATCH)):
            frame = list_batch(batch, self.domains)
            del batch
            owner, domains, keys = keys_found_by(frame)
            self._count(frame, owner, key_hashes(domains, keys))

    def _count(self, frame: pd.DataFrame, owner: np.ndarray, hashes: np.ndarray) -> None:
        """Count the people of ``frame`` (a batch, in List order) by the keys sought among theirs
        (``hashes``, each of the person ``owner`` names), and compare each key's first person."""
        if not len(self.keys) or not len(hashes):
            return
        place = np.minimum(sought(self.keys, hashes), len(self.keys) - 1)
        hit = self.keys[place] == hashes
        slots, owners = place[hit], owner[hit]
        new = self.found[slots] == 0
        np.add.at(self.found, slots, 1)
        first_slots, first = np.unique(slots[new], return_index=True)
        if not len(first_slots):
            return
        person = owners[new][first]  # the frame's row of each slot's first person
        # Every entry of those slots, beside its person; compared a list of fields at a time.
        starts, stops = self._slot_start[first_slots], self._slot_start[first_slots + 1]
        counts = stops - starts
        within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        entries = self._by_slot[np.repeat(starts, counts) + within]
        rows, lists = np.repeat(person, counts), self.field_list[entries]
        for place_of_fields in np.unique(lists[lists >= 0]).tolist():
            chosen = lists == place_of_fields
            shown = value_digests(frame, self.field_lists[place_of_fields], rows[chosen])
            self.as_written_entry[entries[chosen]] = shown == self.expected[entries[chosen]]
        if self.seen_fields is not None:
            self.seen[first_slots] = value_digests(frame, self.seen_fields, person)


def _added(adds: pd.DataFrame) -> tuple[list[pd.Series], pd.DataFrame, dict[str, np.ndarray]]:
    """Of planned adds as columns (:class:`TakenWrites`): the columns of the keys each is looked up
    by (:func:`looked_up_keys`: its identity, e-mail and profile URL), the values it writes, and
    which of them it writes (field → a row's value is not null)."""
    names = [name for name in adds.columns if name not in (ACCOUNT_DOMAIN, IDENTITY)]
    wrote = {name: adds[name].notna().to_numpy() for name in names}
    return [adds[IDENTITY].astype(TEXT), *_contact_keys(adds)], adds, wrote


def _patched(patches: pd.DataFrame) -> tuple[list[pd.Series], pd.DataFrame, dict[str, np.ndarray]]:
    """:func:`_added` of planned patches as columns: looked up by the List person's keys as read,
    then as the patch makes them; the new values of the fields some patch writes, and which."""
    names = [name.removeprefix(NEW) for name in patches.columns if name.startswith(NEW)]
    wrote = {name: patches[PATCHED + name].to_numpy() for name in names}
    values = pd.DataFrame({name: patches[NEW + name] for name in names})
    after = patches.assign(
        **{
            name: values[name].where(wrote[name], patches.get(name))
            for name in names
            if name not in OBJECT_FIELDS
        }
    )
    identity = patches[IDENTITY].astype(TEXT)
    again = identities(after).fillna(identity)
    return [identity, *_contact_keys(patches), again, *_contact_keys(after)], values, wrote


def _deleted_keys(deletes: pd.DataFrame) -> tuple[list[pd.Series], np.ndarray]:
    """Of planned deletes as columns: the columns of the keys each is looked up by (an extra copy
    by its identity alone; a person also by the e-mail or profile URL their identity is, the
    ``match`` of :func:`~listsync.sync.people.diff._match_of`), and which are copies."""
    identity = deletes[IDENTITY].astype(TEXT)
    copy = (deletes[COPY] > 0).to_numpy()
    email, url = _contact_keys(deletes)
    kinds = pa.array(identity.array)
    email_id, url_id = (
        pc.starts_with(kinds, prefix).to_numpy(zero_copy_only=False) & ~copy for prefix in ("email:", "url:")
    )
    return [identity, email.where(email_id), url.where(url_id)], copy


def _contact_keys(people: pd.DataFrame) -> list[pd.Series]:
    """The e-mail and profile URL keys of :func:`person_keys`, as columns: null where a person has
    no such field (trimmed), or the frame no such column."""
    keys = []
    for prefix, name in (("email:", "email"), ("url:", "network_profile_url")):
        text = people[name].astype(TEXT).str.strip() if name in people.columns else None
        keys.append(
            pd.Series(None, index=people.index, dtype=TEXT)
            if text is None
            else prefix + text.where(text.str.len() > 0)
        )
    return keys


def _digests(
    values: pd.DataFrame, wrote: Mapping[str, np.ndarray], places: dict[tuple[str, ...], int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per write (a row of ``values``): the place of the list of fields it wrote (``wrote``: field
    → whether each row writes it) in ``places``, and the digest of what it wrote."""
    names = list(wrote)
    written = np.zeros(len(values), dtype=np.uint64)
    for bit, name in enumerate(names):
        written |= wrote[name].astype(np.uint64) << np.uint64(bit)
    patterns, pattern_of = np.unique(written, return_inverse=True)
    place = np.empty(len(values), dtype=np.int32)
    digest = np.empty(len(values), dtype=np.uint64)
    for number, pattern in enumerate(patterns.tolist()):
        fields = tuple(sorted(name for bit, name in enumerate(names) if pattern >> bit & 1))
        chosen = np.flatnonzero(pattern_of == number)
        place[chosen] = places.setdefault(fields, len(places))
        digest[chosen] = value_digests(values, fields, chosen)
    return place, digest


def keys_found_by(frame: pd.DataFrame) -> tuple[np.ndarray, pa.ChunkedArray, pa.ChunkedArray]:
    """The keys the people of a List batch (:func:`~listsync.sync.people.frames.list_batch`) are
    found by, as :func:`found_by` gives them, as column operations: per key, the person's row, their
    account domain and the key (:func:`loose`), person after person, each one's keys in
    :func:`person_keys` order, each once (:func:`once`)."""
    email, _url = _contact_keys(frame)
    return _owned_keys([frame[IDENTITY], email, "url:" + frame["url_key"]], frame["domain"])


def _owned_keys(
    candidates: list[pd.Series], domains: pd.Series
) -> tuple[np.ndarray, pa.ChunkedArray, pa.ChunkedArray]:
    """Per key that is there among the ``candidates`` (columns of keys, a row a person, in the
    order a person's keys come): the person's row, their domain and the key (:func:`loose`),
    person after person."""
    rows = [np.flatnonzero(column.notna().to_numpy()) for column in candidates]
    texts = [
        pa.array(column.iloc[taken].array).cast(pa.string())
        for column, taken in zip(candidates, rows, strict=True)
    ]
    owner = np.concatenate(rows)
    order = np.argsort(owner, kind="stable")
    keys = fold_text(pa.chunked_array(texts, pa.string()), ("whitespace", "case")).take(order)
    owner = owner[order]
    # Each key of a person once (:func:`once`): a key equal to one before it of the same person,
    # fewer than ``candidates`` places back, goes.
    repeated = np.zeros(len(owner), dtype=bool)
    for back in range(1, min(len(candidates), len(owner))):
        same = pc.equal(keys[back:], keys[:-back]).to_numpy(zero_copy_only=False)
        repeated[back:] |= (owner[back:] == owner[:-back]) & same
    if repeated.any():
        owner, keys = owner[~repeated], keys.filter(pa.array(~repeated))
    return owner, pa.array(domains.array).cast(pa.string()).take(owner), keys
