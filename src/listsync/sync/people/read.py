"""Reading a List's people back: the accounts a plan touched, indexed by every key a person is found
by, and how they differ from what a planned write meant."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from listsync.client.models import person_identity
from listsync.extract.contact_rules import normalize_domain
from listsync.extract.mapping import keys_in_shard
from listsync.sync.fan_out import fan_out
from listsync.sync.forms import fold, learn_form
from listsync.sync.people.diff import canonical, person_fields
from listsync.sync.people.frames import PersonRecord
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
        fields = person_fields(record)
        normalised = normalised_list_fields(fields)
        identity = person_identity(normalised)
        if identity is None:
            continue
        domain = list_domain(account_domain_of(record))
        keys = [loose(key) for key in person_keys(identity, normalised)]
        if wanted is not None and not any(key in wanted.get(domain, ()) for key in keys):
            continue
        people = index.setdefault(domain, {})
        for key in keys:
            people.setdefault(key, []).append(fields)
    return index


def read_accounts(
    client: ListSyncClient, table_id: str, domains: list[str], page_size: int, list_people: int
) -> tuple[Iterable[Any], str]:
    """The people of ``domains``, and how they were read (``"service"`` or ``"client"`` filter):
    by the service's account filter when there are fewer domains than pages of the whole List,
    else as the whole List is paged (JSON objects, yielded as they come)."""
    if not domains:
        return [], "service"
    if len(domains) <= max(1, -(-list_people // page_size)):

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
        copies = len(people.get(loose(item.identity), [])) if item.copy else 0
        if copies > 1:
            return ReadBack("not_yet", f"the List still holds {copies} copies")
        if item.copy and not copies:
            return ReadBack("lost", "no copy is left of the person meant to keep one")
        if not item.copy and any(key in people for key in keys):
            return ReadBack("not_yet", "still in the List")
        return ReadBack("shown")
    found = next((people[key][0] for key in keys if key in people), None)
    if found is None:
        return ReadBack("not_yet" if isinstance(item, PlannedAdd) else "drift", NOT_IN_LIST)
    wanted = item.person if isinstance(item, PlannedAdd) else item.patch
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
