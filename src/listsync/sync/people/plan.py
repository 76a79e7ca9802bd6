"""Planning a people sync: the extract's people against the List's, by account domain and identity;
pure, no I/O."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from listsync.client.models import is_merged_on_add, person_identity, person_match
from listsync.sync.normalize import NormalizationError, normalize_domain, normalize_profile_url
from listsync.sync.options import DeleteScope, SyncMode, check_sync_options
from listsync.sync.prepare import PERSON_FIELDS

if TYPE_CHECKING:
    pass


#: What a source person or a List person may be: a mapping with ``account_domain`` and person
#: fields, or a model with those attributes (``ListedPerson``, ``Person``).
PersonRecord = Mapping[str, Any] | BaseModel


@dataclass(frozen=True)
class PlannedAdd:
    """A person to add to an account row; ``person`` holds the fields to send (no ``None``)."""

    account_domain: str
    identity: str
    person: dict[str, Any]


@dataclass(frozen=True)
class PlannedPatch:
    """Changed fields of a List person: ``changes`` maps field → ``(before, after)``.

    ``match`` is the List person's identity (A17): their e-mail when they have one. ``current``
    holds the List person's fields as read, so a service that refuses the match can be given the
    person again whole (delete + add, see :func:`apply_people_plan`).
    """

    account_domain: str
    identity: str
    match: dict[str, Any]
    changes: dict[str, tuple[Any, Any]]
    current: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def patch(self) -> dict[str, Any]:
        """The fields to send, with their new values (``None`` only under ``overwrite_with_null``)."""
        return {name: after for name, (_before, after) in self.changes.items()}


@dataclass(frozen=True)
class PlannedDelete:
    """A List person to remove, found by their identity (§4.6).

    ``copy`` is 0 for a person the extract no longer holds, and ``n`` for the ``n``-th extra copy
    of a person the List holds several times (a repair: one copy stays).
    """

    account_domain: str
    identity: str
    match: dict[str, Any]
    copy: int = 0


@dataclass
class PeoplePlan:
    """What a people sync will write, and the counts a summary needs.

    :ivar source_people: people the extract holds (after rejects and duplicates).
    :ivar current_people: people the List holds now.
    :ivar unchanged: extract people already in the List as they are.
    :ivar list_unidentified: List people with no identity, left alone.
    :ivar list_duplicates: List people sharing an e-mail, profile URL or identity with another on
        the same account, left alone: a write by that key could not say which of them it means.
    :ivar conflicts: extract people not written because their identity is one of those shared
        by several List people (remove the duplicates from the List to sync them).
    :ivar conflict_reasons: one reason per conflict, naming the person, for the summary's
        ``failure_reasons``.
    :ivar repairs: in mirror mode, the extra copies of people the List holds more than once under
        one identity (a lost add of someone known only by phone or name leaves such copies): one
        copy of each is kept, these are deleted.
    """

    adds: list[PlannedAdd] = field(default_factory=list)
    patches: list[PlannedPatch] = field(default_factory=list)
    deletes: list[PlannedDelete] = field(default_factory=list)
    repairs: list[PlannedDelete] = field(default_factory=list)
    unchanged: int = 0
    source_people: int = 0
    current_people: int = 0
    list_unidentified: int = 0
    list_duplicates: int = 0
    conflicts: int = 0
    conflict_reasons: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        """The number of writes the plan holds (people to add, patch and delete, copies to remove)."""
        return len(self.adds) + len(self.patches) + len(self.deletes) + len(self.repairs)

    def entries(self) -> Iterator[dict[str, Any]]:
        """The plan as plan-file entries (see ``listsync.sync.plan.write_plan_file``)."""
        for add in self.adds:
            yield {
                "action": "add",
                "account_domain": add.account_domain,
                "identity": add.identity,
                "changes": {name: {"before": None, "after": value} for name, value in add.person.items()},
            }
        for patch in self.patches:
            yield {
                "action": "patch",
                "account_domain": patch.account_domain,
                "identity": patch.identity,
                "match": patch.match,
                "changes": {
                    name: {"before": before, "after": after}
                    for name, (before, after) in patch.changes.items()
                },
            }
        for delete in [*self.repairs, *self.deletes]:
            yield {
                "action": "remove_copy" if delete.copy else "delete",
                "account_domain": delete.account_domain,
                "identity": delete.identity,
                "match": delete.match,
            }


@dataclass
class _ListPerson:
    account_domain: str
    identity: str
    fields: dict[str, Any]  # as the List holds them: matches and comparisons use these
    claimed: bool = False  # matched by an extract person already
    duplicated: bool = False  # another List person on the account has the same identity


def plan_people_sync(
    source: Mapping[str, Mapping[str, PersonRecord]],
    current: Iterable[PersonRecord],
    *,
    fields: Collection[str] | None = None,
    mode: SyncMode = "upsert",
    delete_scope: DeleteScope = "accounts_in_source",
    overwrite_with_null: bool = False,
) -> PeoplePlan:
    """Diff the extract's people against the List's, by account domain and identity.

    Pure: no I/O, so a plan can be built and inspected in a test or a dry run.

    :param source: the extract's people as ``prepare_people`` gives them
        (``PreparedPeople.people``): account domain → identity → person (a ``Person`` or a
        mapping of person fields), normalised and deduplicated.
    :param current: the List's people as read back (``ListedPerson`` or mappings of the same
        shape, with ``account_domain``).
    :param fields: the person fields the extract carries (the targets of its column map); a
        field listed here but absent from a person is a null in the extract. None: the fields
        each person holds.
    :param mode: ``"upsert"`` adds and patches; ``"mirror"`` also deletes.
    :param delete_scope: in mirror mode, delete only within the extract's accounts
        (``"accounts_in_source"``) or anywhere in the List (``"list"``).
    :param overwrite_with_null: a null in the extract erases the List's value.
    :raises ValueError: an unknown ``mode`` or ``delete_scope``.
    """
    check_sync_options(mode, delete_scope)
    carried = [name for name in PERSON_FIELDS if name in fields] if fields is not None else None

    plan = PeoplePlan()
    index, listed = _index_list(current, plan)
    if mode == "mirror":
        plan.repairs = _repairs(listed, lambda domain: delete_scope == "list" or domain in source)
        plan.list_duplicates = sum(person.duplicated for person in listed)
    for domain, people in source.items():
        accounts_people = index.get(domain)
        for identity, record in people.items():
            plan.source_people += 1
            desired = person_fields(record)
            if carried is not None:
                desired = {name: desired.get(name) for name in carried}
            match = _find(accounts_people, identity, desired)
            if match is None:
                person = {name: value for name, value in desired.items() if value is not None}
                plan.adds.append(PlannedAdd(domain, identity, person))
            elif match.duplicated:
                plan.conflicts += 1
                plan.conflict_reasons.append(
                    f"{identity} on account {domain} matches several List people; remove the duplicates"
                )
            else:
                match.claimed = True
                changes = _changes(desired, match.fields, overwrite_with_null)
                if changes:
                    plan.patches.append(
                        PlannedPatch(domain, match.identity, _match_of(match.fields), changes, match.fields)
                    )
                else:
                    plan.unchanged += 1

    if mode == "mirror":
        plan.deletes = [
            PlannedDelete(person.account_domain, person.identity, _match_of(person.fields))
            for person in listed
            if not (person.claimed or person.duplicated)
            and (delete_scope == "list" or person.account_domain in source)
        ]
    return plan


def _repairs(listed: list[_ListPerson], in_scope: Callable[[str], bool]) -> list[PlannedDelete]:
    """Deletes of the extra copies of people the List holds several times under one identity.

    Only people known by phone or name alone are repaired: the service does not merge them on add
    (§4.4), so a lost add leaves such copies, and their identity is all that tells them apart.
    The first copy is kept, and matched, patched or deleted like any List person; a delete by the
    identity removes one of the others each. People sharing an e-mail or profile URL stay
    ``duplicated`` and are left alone: the service merges those, so copies of them come from
    elsewhere, and which of them a write by that key would reach is the service's choice.
    """
    groups: dict[tuple[str, str], list[_ListPerson]] = {}
    for person in listed:
        if person.duplicated and in_scope(person.account_domain) and not is_merged_on_add(person.fields):
            groups.setdefault((person.account_domain, person.identity), []).append(person)
    repairs = []
    for (domain, identity), copies in groups.items():
        if len(copies) < 2:
            continue
        for number, copy in enumerate(copies):
            copy.duplicated = False
            if number:
                copy.claimed = True  # removed here, not by the mirror deletes
                repairs.append(PlannedDelete(domain, identity, _match_of(copy.fields), copy=number))
    return repairs


def _index_list(
    current: Iterable[PersonRecord], plan: PeoplePlan
) -> tuple[dict[str, dict[str, _ListPerson]], list[_ListPerson]]:
    """Index the List's people per account under every key an extract person may match them by."""
    index: dict[str, dict[str, _ListPerson]] = {}
    listed: list[_ListPerson] = []
    domains: dict[str | None, str] = {}  # many people per account: normalise each domain once
    for record in current:
        plan.current_people += 1
        fields = person_fields(record)
        raw_domain = account_domain_of(record)
        domain = domains.get(raw_domain)
        if domain is None:
            domain = domains[raw_domain] = list_domain(raw_domain)
        normalised = normalised_list_fields(fields)
        identity = person_identity(normalised)
        if identity is None:
            plan.list_unidentified += 1
            continue
        people = index.setdefault(domain, {})
        keys = list(person_keys(identity, normalised))
        clashes = [other for key in keys if (other := people.get(key)) is not None]
        person = _ListPerson(domain, identity, fields, duplicated=bool(clashes))
        listed.append(person)
        for key in keys:
            people.setdefault(key, person)
        for other in clashes:
            # A write by a shared e-mail, profile URL or identity would reach every copy, and
            # which copy the service picks is unknown: none of them is patched or deleted.
            other.duplicated = True
    plan.list_duplicates = sum(person.duplicated for person in listed)
    return index, listed


def normalised_list_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The identity fields of a List person normalised like the extract's (e-mail case aside:
    identities lower-case it anyway)."""
    url = fields.get("network_profile_url")
    if not (isinstance(url, str) and url):
        return fields
    return {**fields, "network_profile_url": _list_profile_url(url)}


def person_keys(identity: str, fields: Mapping[str, Any]) -> Iterator[str]:
    """The keys a person can be found by: their identity, then e-mail and profile URL (A16)."""
    yield identity
    email = fields.get("email")
    if isinstance(email, str) and email.strip():
        yield f"email:{email.strip().lower()}"
    url = fields.get("network_profile_url")
    if isinstance(url, str) and url.strip():
        yield f"url:{url.strip()}"


def _find(
    people: dict[str, _ListPerson] | None, identity: str, fields: Mapping[str, Any]
) -> _ListPerson | None:
    """The List person an extract person is: by identity, e-mail or profile URL (A16), else a List
    person known only by this person's phone or name (who has since gained an e-mail, say)."""
    if not people:
        return None
    for key in [*person_keys(identity, fields), *_fallback_keys(fields)]:
        person = people.get(key)
        if person is not None and (person.duplicated or not person.claimed):
            return person
    return None


def _fallback_keys(fields: Mapping[str, Any]) -> Iterator[str]:
    """The phone and name identities of ``fields``: a List person is indexed under one of them only
    when it is their identity, i.e. they have no e-mail and no profile URL to be found by."""
    phone = person_identity({"phone_number": fields.get("phone_number")})
    name = person_identity({"first_name": fields.get("first_name"), "last_name": fields.get("last_name")})
    yield from (key for key in (phone, name) if key is not None)


def _changes(
    desired: Mapping[str, Any], current: Mapping[str, Any], overwrite_with_null: bool
) -> dict[str, tuple[Any, Any]]:
    changes: dict[str, tuple[Any, Any]] = {}
    for name, value in desired.items():
        before = current.get(name)
        if value is None:
            if overwrite_with_null and before is not None:
                changes[name] = (before, None)
        elif value != before and canonical(value) != canonical(before):
            changes[name] = (before, value)
    return changes


def canonical(value: Any) -> Any:
    """Compare values as their JSON would: model or dict, key order and ``None`` members aside."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, Mapping):
        return json.dumps({k: v for k, v in value.items() if v is not None}, sort_keys=True, default=str)
    if isinstance(value, list | tuple):
        return tuple(canonical(item) for item in value)
    return value


def _match_of(fields: Mapping[str, Any]) -> dict[str, Any]:
    return person_match(fields).to_wire()


def person_fields(record: PersonRecord) -> dict[str, Any]:
    """The person fields a record carries; absent fields stay absent (they are not in the extract)."""
    if isinstance(record, BaseModel):
        # Read the instance dict once: attribute access per field dominates a 100k-person plan.
        values, present = vars(record), record.model_fields_set
        data = {name: values[name] for name in PERSON_FIELDS if name in present}
    else:
        data = {name: record[name] for name in PERSON_FIELDS if name in record}
    paths = data.get("connection_paths")
    if paths:
        data["connection_paths"] = [_wire(path) for path in paths]
    return data


def _wire(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def account_domain_of(record: PersonRecord) -> str | None:
    if isinstance(record, BaseModel):
        value = getattr(record, "account_domain", None)
    else:
        value = record.get("account_domain", record.get("accountDomain"))
    return value if isinstance(value, str) and value else None


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


def item_key(item: PlannedAdd | PlannedPatch | PlannedDelete) -> str:
    copy = f" (copy {item.copy})" if isinstance(item, PlannedDelete) and item.copy else ""
    return f"{item.account_domain} {item.identity}{copy}"
