"""Reading a List's people back: the accounts a plan touched, indexed by every key a person is found
by, and how they differ from what a planned write meant."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from listsync.client.models import person_identity
from listsync.sync.normalize import normalize_domain
from listsync.sync.people.plan import (
    PersonRecord,
    PlannedAdd,
    PlannedDelete,
    PlannedPatch,
    account_domain_of,
    canonical,
    list_domain,
    normalised_list_fields,
    person_fields,
    person_keys,
)
from listsync.sync.prepare import keys_in_shard

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient
    from listsync.sync.options import Shard


#: List people as read back: account domain → a key they can be found by (:func:`person_keys`) → the
#: fields of every person found by it, in List order.
PeopleIndex = dict[str, dict[str, list[dict[str, Any]]]]


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
        keys = list(person_keys(identity, normalised))
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
    if len(domains) <= max(1, -(-list_people // page_size)):
        people: list[Any] = []
        for domain in domains:
            if "account_domain" in client.filters_applied_here:
                break
            people += client.iter_targetable_people(table_id, page_size=page_size, account_domain=domain)
        else:
            return people, "client" if "account_domain" in client.filters_applied_here else "service"
    wanted = set(domains)
    everyone = client.iter_targetable_people_records(table_id, page_size=page_size)
    return (person for person in everyone if list_domain(account_domain_of(person)) in wanted), "client"


#: How many List people :func:`people_in_shard` sorts into shards at a time.
PEOPLE_AT_ONCE = 1_000


def people_in_shard(people: Iterable[PersonRecord], shard: Shard) -> Iterator[PersonRecord]:
    """The List people whose account domain, normalised like the extract's (:func:`list_domain`),
    is in ``shard``. They are sorted :data:`PEOPLE_AT_ONCE` at a time, their domains as one column
    by the extract's own rule (:func:`~listsync.sync.prepare.keys_in_shard`): nothing is kept from
    one batch to the next, where remembering every domain would hold the whole List's (61 MiB at
    600,000 accounts)."""
    people = iter(people)
    while batch := list(itertools.islice(people, PEOPLE_AT_ONCE)):
        domains = pd.Series([account_domain_of(person) for person in batch], dtype=object)
        yield from itertools.compress(batch, keys_in_shard(domains, normalize_domain, shard).tolist())


NOT_IN_LIST = "not in the List"


def looked_up_keys(item: PlannedAdd | PlannedPatch | PlannedDelete) -> list[str]:
    """The keys :func:`difference` looks the item's person up by."""
    if isinstance(item, PlannedDelete):
        return [item.identity] if item.copy else list(person_keys(item.identity, item.match))
    if isinstance(item, PlannedAdd):
        return list(person_keys(item.identity, item.person))
    after = {**item.current, **item.patch}
    return [
        *person_keys(item.identity, item.current),
        *person_keys(person_identity(after) or item.identity, after),
    ]


def difference(
    item: PlannedAdd | PlannedPatch | PlannedDelete, people: Mapping[str, list[dict[str, Any]]]
) -> str | None:
    """How the List's people of the item's account differ from what the item meant; None if not."""
    keys = looked_up_keys(item)
    if isinstance(item, PlannedDelete) and item.copy:
        copies = len(people.get(item.identity, []))
        return f"the List still holds {copies} copies" if copies > 1 else None
    if isinstance(item, PlannedDelete):
        return "still in the List" if any(key in people for key in keys) else None
    wanted = item.person if isinstance(item, PlannedAdd) else item.patch
    found = next((people[key][0] for key in keys if key in people), None)
    if found is None:
        return NOT_IN_LIST
    for name, value in wanted.items():
        if canonical(value) != canonical(found.get(name)):
            return f"{name} is {found.get(name)!r}, expected {value!r}"
    return None
