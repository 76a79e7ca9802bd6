"""The targetable-people sync: diff an extract against a List, then write only the changes.

The flow, which :func:`sync_people` runs end to end::

    people = prepare_people(frames, column_map, rejects)        # normalised, validated, deduplicated
    plan = plan_people_sync(people, client.iter_targetable_people(table_id), mode=...)
    write_plan_file(plan.entries(), plan_path)                  # what will happen, for review
    check_delete_safety(...)                                    # a broken extract never wipes a List
    result = apply_people_plan(plan, client, table_id=...)      # chunked adds, patches, deletes

**Identity.** A person is keyed by account domain + :func:`~listsync.client.models.person_identity`
(e-mail when present, else profile URL, then phone, then first and last name: the order the
service uses for deletes). The List side is normalised the same way as the extract (domains as
bare hosts, e-mails lower-cased, profile URLs canonical), so a List written by other tools still
matches. An extract person whose e-mail or profile URL matches a List person of the same account
is that person even when their primary identities differ (the List copy lacks the e-mail, say):
the service merges such people on add (A16), so planning them as add + delete would be wrong.

**The plan.** Adds: extract people not in the List. Patches: only the fields that differ, found
by the List person's own identity (``match``, A17). A ``None`` in the extract leaves the List's
value alone unless ``overwrite_with_null``; a field the extract does not carry (an unmapped
column) is never touched. Deletes, only with ``mode="mirror"``: List people not in the extract,
within the accounts the extract names (``delete_scope="accounts_in_source"``) or in the whole
List (``"list"``). List people without any identity, and List people of one account sharing an
e-mail, profile URL or identity, are counted and left alone: a write by that key could not tell
them apart.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from listsync.client.models import is_merged_on_add, person_identity, person_match
from listsync.client.writers import (
    ACCOUNTS_PER_REQUEST,
    PEOPLE_PER_REQUEST,
    AccountKeyed,
    WriteReport,
    chunk_by_account,
)
from listsync.sync.normalize import NormalizationError, normalize_domain, normalize_profile_url
from listsync.sync.plan import (
    OpenableFile,
    ProgressLogger,
    SyncFailedError,
    build_summary,
    check_delete_safety,
    prepare_with_rejects,
    wait_for_late_writes,
    write_requested_plan,
)
from listsync.sync.prepare import PERSON_FIELDS, prepare_people

if TYPE_CHECKING:
    import pandas as pd

    from listsync.client.client import ListSyncClient

__all__ = [
    "DeleteScope",
    "PeopleApplyResult",
    "PeoplePlan",
    "PlannedAdd",
    "PlannedDelete",
    "PlannedPatch",
    "SyncMode",
    "apply_people_plan",
    "check_sync_options",
    "chunk_sizes",
    "plan_people_sync",
    "sync_people",
]

log = logging.getLogger(__name__)

SyncMode = Literal["upsert", "mirror"]
DeleteScope = Literal["accounts_in_source", "list"]
SYNC_MODES: tuple[str, ...] = ("upsert", "mirror")
DELETE_SCOPES: tuple[str, ...] = ("accounts_in_source", "list")

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
            desired = _fields(record)
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


def check_sync_options(mode: str, delete_scope: str) -> None:
    """Check ``mode`` and ``delete_scope`` (callers check early, before reading anything).

    :raises ValueError: an unknown mode or delete scope, naming the allowed values.
    """
    if mode not in SYNC_MODES:
        raise ValueError(f"mode must be one of {', '.join(SYNC_MODES)}; got {mode!r}")
    if delete_scope not in DELETE_SCOPES:
        raise ValueError(f"delete_scope must be one of {', '.join(DELETE_SCOPES)}; got {delete_scope!r}")


def _index_list(
    current: Iterable[PersonRecord], plan: PeoplePlan
) -> tuple[dict[str, dict[str, _ListPerson]], list[_ListPerson]]:
    """Index the List's people per account under every key an extract person may match them by."""
    index: dict[str, dict[str, _ListPerson]] = {}
    listed: list[_ListPerson] = []
    domains: dict[str | None, str] = {}  # many people per account: normalise each domain once
    for record in current:
        plan.current_people += 1
        fields = _fields(record)
        raw_domain = _account_domain(record)
        domain = domains.get(raw_domain)
        if domain is None:
            domain = domains[raw_domain] = _list_domain(raw_domain)
        normalised = _normalised_list_fields(fields)
        identity = person_identity(normalised)
        if identity is None:
            plan.list_unidentified += 1
            continue
        people = index.setdefault(domain, {})
        keys = list(_keys(identity, normalised))
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


def _normalised_list_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The identity fields of a List person normalised like the extract's (e-mail case aside:
    identities lower-case it anyway)."""
    url = fields.get("network_profile_url")
    if not (isinstance(url, str) and url):
        return fields
    return {**fields, "network_profile_url": _list_profile_url(url)}


def _keys(identity: str, fields: Mapping[str, Any]) -> Iterator[str]:
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
    for key in [*_keys(identity, fields), *_fallback_keys(fields)]:
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
        elif value != before and _canonical(value) != _canonical(before):
            changes[name] = (before, value)
    return changes


def _canonical(value: Any) -> Any:
    """Compare values as their JSON would: model or dict, key order and ``None`` members aside."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, Mapping):
        return json.dumps({k: v for k, v in value.items() if v is not None}, sort_keys=True, default=str)
    if isinstance(value, list | tuple):
        return tuple(_canonical(item) for item in value)
    return value


def _match_of(fields: Mapping[str, Any]) -> dict[str, Any]:
    return person_match(fields).to_wire()


def _fields(record: PersonRecord) -> dict[str, Any]:
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


def _account_domain(record: PersonRecord) -> str | None:
    if isinstance(record, BaseModel):
        value = getattr(record, "account_domain", None)
    else:
        value = record.get("account_domain", record.get("accountDomain"))
    return value if isinstance(value, str) and value else None


def _list_domain(value: str | None) -> str:
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


# -- applying a plan -----------------------------------------------------------------------------

WRITE_KINDS: tuple[str, ...] = ("add", "patch", "delete")

#: Sends of one people add in all, the first included, while its outcome stays unknown.
MAX_ADD_ATTEMPTS = 3


@dataclass
class PeopleApplyResult:
    """What applying a plan did.

    :ivar failed: ``"<account domain> <identity>"`` → reason, for people not written.
    :ivar unknown: key → ``(kind, reason)`` for writes whose outcome is unknown (no answer, a
        5xx, an unreadable 2xx); :func:`verify_people` settles each by re-reading the List.
    :ivar written: key → kind, for writes the service acknowledged.
    :ivar not_found: patched people the service no longer found (deleted since the List was read);
        the next run adds them again.
    :ivar replaced: patches the service refused for their ``match`` (it matches by e-mail only,
        say) and that were applied as a delete and an add of the whole person.
    :ivar requests: write requests sent, by kind (``add``, ``patch``, ``delete``).
    :ivar isolation_requests: those of ``requests`` spent taking apart requests the service
        refused whole, so that each refused person failed alone.
    :ivar resent: adds of unknown outcome sent again after a re-read found them absent.
    :ivar copies_removed: extra copies of people deleted (``PeoplePlan.repairs``).
    :ivar settle_after: when writes whose answer was lost can no longer land (client's clock).
    """

    added: int = 0
    updated: int = 0
    deleted: int = 0
    not_found: int = 0
    replaced: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    unknown: dict[str, tuple[str, str]] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WRITE_KINDS, 0))
    isolation_requests: int = 0
    resent: int = 0
    copies_removed: int = 0
    settle_after: float | None = None

    def count(self, kind: str, number: int) -> None:
        """Add ``number`` people written by a write of ``kind``."""
        if kind == "add":
            self.added += number
        elif kind == "patch":
            self.updated += number
        else:
            self.deleted += number


def apply_people_plan(
    plan: PeoplePlan,
    client: ListSyncClient,
    *,
    table_id: str,
    chunk_size: int | Mapping[str, int] = PEOPLE_PER_REQUEST,
    max_accounts: int = ACCOUNTS_PER_REQUEST,
    progress: ProgressLogger | None = None,
    page_size: int = 1000,
) -> PeopleApplyResult:
    """Write a plan through the client's chunked writers: adds, then patches, then deletes.

    Adds go first so that a run cut short leaves extra people rather than missing ones. Each
    kind is grouped by account and cut into requests of at most ``chunk_size`` people and
    ``max_accounts`` accounts; a request the service refuses is taken apart until each refused
    person fails alone with the service's reason (see :mod:`listsync.client.writers`), and the
    other chunks are still sent. People of an account row the List does not have fail with the
    service's ``Account not found`` message (A14).

    Patches go by e-mail where the person has one, as the spec shows (§4.5). The spec names
    no other ``match`` key, so one patch by another identity is sent first on its own: when the
    service refuses it for its ``match``, every such patch is applied as a delete by that
    identity (which §4.6 allows) and an add of the whole person, and counted in ``replaced``.

    A request adding a person the service does not merge (no e-mail, no profile URL) is not sent
    again blindly when its answer is lost (see ``ListSyncClient.add_people``); nor is any add the
    service answered with a 5xx. Once such a request can no longer land, its accounts are re-read
    and only the people still absent are sent again (at most :data:`MAX_ADD_ATTEMPTS` sends).
    Extra copies of people the List holds several times (mirror mode) are removed before patches.

    :param chunk_size: people per request, for every kind, or per kind as
        ``{"add": 500, "patch": 500, "delete": 500}`` (kinds left out use the default).
    :param max_accounts: accounts per request.
    :param progress: logs progress as chunks complete (default: every 10 % of the plan).
    :param page_size: people per page when re-reading accounts.
    """
    applier = _PeopleApplier(
        client,
        table_id,
        sizes=chunk_sizes(chunk_size),
        max_accounts=max_accounts,
        progress=progress or ProgressLogger(plan.size, what=f"people sync of {table_id}", logger=log),
        reread=lambda domains: _read_accounts(client, table_id, domains, page_size, plan.current_people)[0],
    )
    applier.write("add", [_add_item(a) for a in plan.adds])
    applier.settle_adds(plan.adds)
    # Copies go before patches: a patch by a shared identity would reach any one of them.
    applier.remove_copies(plan.repairs)
    by_email = [p for p in plan.patches if "email" in p.match]
    others = [p for p in plan.patches if "email" not in p.match]
    applier.patch(by_email)
    if others:
        refused = applier.patch(others[:1])
        if refused:
            applier.replace(refused, counted=True)
            applier.replace(others[1:])
        else:
            applier.replace(applier.patch(others[1:]), counted=True)
    applier.write("delete", [AccountKeyed(_key(d), d.account_domain, d.match) for d in plan.deletes])
    return applier.result


#: A refusal that names the ``match`` of a patch (a key the service does not take).
_MATCH_REFUSED = re.compile(r"-> 400: .*\bmatch\b", re.DOTALL)


class _PeopleApplier:
    """Sends a plan's writes chunk by chunk, recording what each did in a PeopleApplyResult."""

    def __init__(
        self,
        client: ListSyncClient,
        table_id: str,
        *,
        sizes: Mapping[str, int],
        max_accounts: int,
        progress: ProgressLogger,
        reread: Callable[[list[str]], list[Any]],
    ) -> None:
        self.client = client
        self.reread = reread
        self.table_id = table_id
        self.sizes = sizes
        self.max_accounts = max_accounts
        self.progress = progress
        self.result = PeopleApplyResult()
        self._writers: dict[str, Callable[..., WriteReport]] = {
            "add": client.write_people_adds,
            "patch": client.write_people_patches,
            "delete": client.write_people_deletes,
        }

    def write(self, kind: str, items: list[AccountKeyed[Any]], *, advance: bool = True) -> WriteReport:
        """Send ``items`` with the writer of ``kind``; return what it did, also recorded."""
        whole = WriteReport()
        triples = [(item.key, item.account_domain, item) for item in items]
        size = self.sizes[kind]
        # One writer call per request-sized chunk, cut the way the writer itself cuts, so the
        # request count stays minimal and progress can be logged between requests.
        for chunk in chunk_by_account(triples, max_people=size, max_accounts=self.max_accounts):
            batch = [item for _domain, members in chunk for _key_, item in members]
            report = self._writers[kind](
                self.table_id, batch, chunk_size=size, max_accounts=self.max_accounts
            )
            self._record(kind, report)
            whole.merge(report)
            if advance:
                self.progress.advance(len(batch), failed=len(self.result.failed))
        return whole

    def patch(self, patches: list[PlannedPatch]) -> list[PlannedPatch]:
        """Send ``patches``; return those the service refused for their ``match`` (not recorded failed)."""
        items = [
            AccountKeyed(_key(p), p.account_domain, {"match": p.match, "patch": p.patch}) for p in patches
        ]
        report = self.write("patch", items)
        refused = [
            p
            for p in patches
            if "email" not in p.match and _MATCH_REFUSED.search(report.failed.get(_key(p), ""))
        ]
        for p in refused:
            del self.result.failed[_key(p)]
        return refused

    def replace(self, patches: list[PlannedPatch], *, counted: bool = False) -> None:
        """Apply ``patches`` as a delete by the List person's identity and an add of the whole person.

        :param counted: the patches were sent once already, so progress has counted them.
        """
        if not patches:
            return
        log.info(
            "The service refuses patches matched by anything but e-mail: %d people are replaced "
            "(deleted by their identity and added again whole)",
            len(patches),
        )
        deletes = self.write(
            "delete", [AccountKeyed(_key(p), p.account_domain, p.match) for p in patches], advance=not counted
        )
        self.result.deleted -= len(deletes.written)  # a step of the replacement, not a delete of the plan
        gone = set(deletes.written)
        adds = self.write(
            "add",
            [AccountKeyed(_key(p), p.account_domain, _replacement(p)) for p in patches if _key(p) in gone],
            advance=False,
        )
        self.result.added -= len(adds.written)
        self.result.updated += len(adds.written)
        self.result.replaced += len(adds.written)
        for key in adds.written:
            self.result.written[key] = "patch"

    def remove_copies(self, repairs: list[PlannedDelete]) -> None:
        """Delete the extra copies of people the List holds several times (counted apart)."""
        if not repairs:
            return
        log.warning("The List holds %d extra copies of people; one copy of each is kept", len(repairs))
        report = self.write("delete", [AccountKeyed(_key(r), r.account_domain, r.match) for r in repairs])
        self.result.deleted -= len(report.written)
        self.result.copies_removed += len(report.written)

    def settle_adds(self, adds: list[PlannedAdd]) -> None:
        """Re-read the accounts of adds of unknown outcome; send again only the people still absent."""
        by_key = {_key(add): add for add in adds}
        result = self.result
        for _attempt in range(1, MAX_ADD_ATTEMPTS):
            pending = [
                by_key[key] for key, (kind, _) in result.unknown.items() if kind == "add" and key in by_key
            ]
            if not pending:
                return
            wait_for_late_writes(self.client, result.settle_after)
            index = _people_index(self.reread(sorted({add.account_domain for add in pending})))
            absent = []
            for add in pending:
                del result.unknown[_key(add)]
                if _difference(add, index.get(add.account_domain, {})) == NOT_IN_LIST:
                    absent.append(add)
                else:
                    result.added += 1
                    result.written[_key(add)] = "add"
            result.resent += len(absent)
            self.write("add", [_add_item(add) for add in absent], advance=False)

    def _record(self, kind: str, report: WriteReport) -> None:
        result = self.result
        if report.settle_after is not None:
            result.settle_after = max(result.settle_after or report.settle_after, report.settle_after)
        result.requests[kind] += report.requests
        result.isolation_requests += report.isolation_requests
        result.failed.update(report.failed)
        result.unknown.update((key, (kind, reason)) for key, reason in report.outcome_unknown.items())
        result.written.update(dict.fromkeys(report.written, kind))
        if kind == "patch":
            result.not_found += len(report.not_found)
            result.count(kind, len(report.written) - len(report.not_found))
        else:
            # A delete of someone already gone leaves the List as asked: it counts as deleted (A19).
            result.count(kind, len(report.written))


def _add_item(add: PlannedAdd) -> AccountKeyed[dict[str, Any]]:
    return AccountKeyed(_key(add), add.account_domain, add.person)


def _replacement(patch: PlannedPatch) -> dict[str, Any]:
    """The whole person a refused patch stands for: the List's fields with the changes applied."""
    person = {**patch.current, **patch.patch}
    return {name: value for name, value in person.items() if value is not None}


def chunk_sizes(chunk_size: int | Mapping[str, int]) -> dict[str, int]:
    """People per request for each write kind, from one number or a per-kind mapping.

    :raises ValueError: a kind other than add, patch or delete, or a size below 1 or above
        the service's cap (A21).
    """
    if isinstance(chunk_size, Mapping):
        unknown = sorted(set(chunk_size) - set(WRITE_KINDS))
        if unknown:
            raise ValueError(
                f"chunk_size keys must be among {', '.join(WRITE_KINDS)}; got {', '.join(unknown)}"
            )
        sizes = {kind: int(chunk_size.get(kind, PEOPLE_PER_REQUEST)) for kind in WRITE_KINDS}
    else:
        sizes = dict.fromkeys(WRITE_KINDS, int(chunk_size))
    for kind, size in sizes.items():
        if not 1 <= size <= PEOPLE_PER_REQUEST:
            raise ValueError(f"chunk_size for {kind} must be between 1 and {PEOPLE_PER_REQUEST}, got {size}")
    return sizes


def _key(item: PlannedAdd | PlannedPatch | PlannedDelete) -> str:
    copy = f" (copy {item.copy})" if isinstance(item, PlannedDelete) and item.copy else ""
    return f"{item.account_domain} {item.identity}{copy}"


# -- verifying what was written -----------------------------------------------------------------


@dataclass
class PeopleVerification:
    """What re-reading the accounts a plan touched showed.

    :ivar verified: writes the re-read confirms (acknowledged ones, and unknown ones found applied).
    :ivar drift: one reason per acknowledged write the re-read contradicts.
    :ivar filter: how the touched accounts were read: ``"service"`` (the service's account
        filter), ``"client"`` (the whole List, filtered here, because the service ignores the
        filter or too many accounts were touched), or ``None`` (nothing to verify).
    """

    verified: int = 0
    drift: list[str] = field(default_factory=list)
    filter: str | None = None


def verify_people(
    plan: PeoplePlan, result: PeopleApplyResult, client: ListSyncClient, *, table_id: str, page_size: int
) -> PeopleVerification:
    """Re-read the accounts the plan touched and check every write against the plan's intent.

    An acknowledged write the List contradicts is drift. A write of unknown outcome is settled
    here: found applied, it is counted as written; not found, it moves to ``result.failed``. Only
    the touched accounts are read: by the service's account filter when there are fewer of them
    than pages of the whole List, otherwise (or when the service ignores the filter) by one read
    of the whole List.
    """
    settled = result.written.keys() | result.unknown.keys()
    items = [(kind, item) for kind, item in _planned(plan) if _key(item) in settled]
    verification = PeopleVerification()
    if not items:
        return verification
    wait_for_late_writes(client, result.settle_after if result.unknown else None)
    domains = sorted({item.account_domain for _, item in items})
    listed, verification.filter = _read_accounts(client, table_id, domains, page_size, plan.current_people)
    index = _people_index(listed)
    for kind, item in items:
        key = _key(item)
        problem = _difference(item, index.get(item.account_domain, {}))
        if key in result.unknown:
            _written_kind, reason = result.unknown.pop(key)
            if problem is None:
                result.count(kind, 1)
                verification.verified += 1
            else:
                result.failed[key] = f"outcome unknown ({reason}), and the List does not show it applied"
        elif problem is None:
            verification.verified += 1
        else:
            verification.drift.append(f"{kind} of {key}: {problem}")
    return verification


#: List people as read back: account domain → a key they can be found by (:func:`_keys`) → the
#: fields of every person found by it, in List order.
PeopleIndex = dict[str, dict[str, list[dict[str, Any]]]]


def _people_index(listed: Iterable[PersonRecord]) -> PeopleIndex:
    """Index the List's people as read back, to compare with what a plan meant."""
    index: PeopleIndex = {}
    for record in listed:
        fields = _fields(record)
        normalised = _normalised_list_fields(fields)
        identity = person_identity(normalised)
        if identity is not None:
            people = index.setdefault(_list_domain(_account_domain(record)), {})
            for key in _keys(identity, normalised):
                people.setdefault(key, []).append(fields)
    return index


def _planned(plan: PeoplePlan) -> Iterator[tuple[str, PlannedAdd | PlannedPatch | PlannedDelete]]:
    yield from (("add", add) for add in plan.adds)
    yield from (("patch", patch) for patch in plan.patches)
    yield from (("delete", delete) for delete in [*plan.repairs, *plan.deletes])


def _read_accounts(
    client: ListSyncClient, table_id: str, domains: list[str], page_size: int, list_people: int
) -> tuple[list[Any], str]:
    """The people of ``domains``, and how they were read (``"service"`` or ``"client"`` filter)."""
    if len(domains) <= max(1, -(-list_people // page_size)):
        people: list[Any] = []
        for domain in domains:
            if "account_domain" in client.filters_applied_here:
                break
            people += client.iter_targetable_people(table_id, page_size=page_size, account_domain=domain)
        else:
            return people, "client" if "account_domain" in client.filters_applied_here else "service"
    wanted = set(domains)
    everyone = client.iter_targetable_people(table_id, page_size=page_size)
    return [person for person in everyone if _list_domain(_account_domain(person)) in wanted], "client"


NOT_IN_LIST = "not in the List"


def _difference(
    item: PlannedAdd | PlannedPatch | PlannedDelete, people: Mapping[str, list[dict[str, Any]]]
) -> str | None:
    """How the List's people of the item's account differ from what the item meant; None if not."""
    if isinstance(item, PlannedDelete) and item.copy:
        copies = len(people.get(item.identity, []))
        return f"the List still holds {copies} copies" if copies > 1 else None
    if isinstance(item, PlannedDelete):
        keys = list(_keys(item.identity, item.match))
        return "still in the List" if any(key in people for key in keys) else None
    if isinstance(item, PlannedAdd):
        keys, wanted = list(_keys(item.identity, item.person)), item.person
    else:
        after = {**item.current, **item.patch}
        keys = [*_keys(item.identity, item.current), *_keys(person_identity(after) or item.identity, after)]
        wanted = item.patch
    found = next((people[key][0] for key in keys if key in people), None)
    if found is None:
        return NOT_IN_LIST
    for name, value in wanted.items():
        if _canonical(value) != _canonical(found.get(name)):
            return f"{name} is {found.get(name)!r}, expected {value!r}"
    return None


# -- the whole sync ------------------------------------------------------------------------------


def sync_people(
    client: ListSyncClient,
    table_id: str,
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    *,
    mode: SyncMode = "upsert",
    delete_scope: DeleteScope = "accounts_in_source",
    max_delete_fraction: float = 0.1,
    overwrite_with_null: bool = False,
    chunk_size: int | Mapping[str, int] = PEOPLE_PER_REQUEST,
    dry_run: bool = False,
    fail_on_error: bool = True,
    rejects_path: str | os.PathLike[str] | OpenableFile | None = None,
    plan_path: str | os.PathLike[str] | OpenableFile | None = None,
    max_reject_fraction: float = 1.0,
    default_region: str = "US",
    page_size: int = 1000,
) -> dict[str, Any]:
    """Make the List's targetable people match an extract; return the JSON summary.

    Reads and prepares the extract (rejects with reasons), reads the List's people page by page,
    plans (:func:`plan_people_sync`), writes the plan file, checks delete safety, and applies
    the plan (:func:`apply_people_plan`) unless ``dry_run``.

    :param client: the service client.
    :param table_id: the List.
    :param frames: the extract's chunks (``read_extract``).
    :param column_map: extract column → person field or ``account_domain``.
    :param mode: ``"upsert"`` (add and patch) or ``"mirror"`` (also delete people not in the extract).
    :param delete_scope: ``"accounts_in_source"`` or ``"list"`` (see :func:`plan_people_sync`).
    :param max_delete_fraction: the largest share of the List's people one run may delete.
    :param overwrite_with_null: a null in the extract erases the List's value.
    :param chunk_size: people per request, one number or per kind (see :func:`apply_people_plan`).
    :param dry_run: plan and write the plan file, send no write.
    :param fail_on_error: raise :class:`~listsync.sync.plan.SyncFailedError` at the end when any
        person failed or was blocked by duplicate List people (after everything else was
        written; never in a dry run).
    :param rejects_path: where rejected rows go (JSON lines): a local path, or an object with
        ``open()`` such as ``ObjectStoragePath``; None: a temporary file, only when some row was
        rejected.
    :param plan_path: where the plan goes (JSON lines), as ``rejects_path``; None: no plan file,
        except in a dry run (then a temporary file).
    :param max_reject_fraction: fail before writing when more of the extract's rows are rejected.
    :param default_region: region of phone numbers written without ``+``.
    :param page_size: people per page when reading the List.
    :return: the summary: rows ``read``, ``rejected``, ``duplicates``; people ``added``,
        ``updated``, ``deleted``, ``unchanged``, ``failed`` (people not written, including the
        ``conflicts``: extract people whose identity several List people share), ``conflicts``,
        ``not_found``;
        ``planned`` and ``requests`` by kind; ``normalization_version``; ``plan_path`` and
        ``rejects_path``; ``failure_reasons``.
    :raises UnsafeDeleteError: the planned deletes look like a broken extract (nothing written).
    :raises TooManyRejectsError: more than ``max_reject_fraction`` of the rows were rejected.
    :raises SyncFailedError: some people failed and ``fail_on_error``.
    """
    # Bad settings fail before anything is read.
    check_sync_options(mode, delete_scope)
    chunk_sizes(chunk_size)
    prepared, written_rejects = prepare_with_rejects(
        lambda rejects: prepare_people(frames, column_map, rejects=rejects, default_region=default_region),
        rejects_path,
        max_reject_fraction=max_reject_fraction,
        prefix="listsync-people-rejects-",
    )

    plan = plan_people_sync(
        prepared.people,
        client.iter_targetable_people(table_id, page_size=page_size),
        fields=set(column_map.values()),
        mode=mode,
        delete_scope=delete_scope,
        overwrite_with_null=overwrite_with_null,
    )
    log.info(
        "Plan for %s: %d to add, %d to patch, %d to delete, %d extra copies to remove, %d unchanged "
        "(List holds %d people)",
        table_id,
        len(plan.adds),
        len(plan.patches),
        len(plan.deletes),
        len(plan.repairs),
        plan.unchanged,
        plan.current_people,
    )
    if plan.list_duplicates or plan.list_unidentified:
        log.warning(
            "List %s holds %d people sharing an identity on their account and %d without identity; "
            "they are left alone (%d extract people could not be synced because of them)",
            table_id,
            plan.list_duplicates,
            plan.list_unidentified,
            plan.conflicts,
        )
    written_plan = write_requested_plan(
        plan.entries(), plan_path, dry_run=dry_run, prefix="listsync-people-plan-", logger=log
    )
    # Removing extra copies leaves one of each: it is no sign of a broken extract.
    check_delete_safety(
        planned_deletes=len(plan.deletes),
        current_total=plan.current_people,
        source_rows=plan.source_people,
        max_delete_fraction=max_delete_fraction,
    )
    result = PeopleApplyResult()
    verification = PeopleVerification()
    if not dry_run:
        result = apply_people_plan(
            plan, client, table_id=table_id, chunk_size=chunk_size, page_size=page_size
        )
        verification = verify_people(plan, result, client, table_id=table_id, page_size=page_size)

    summary = build_summary(
        {
            **prepared.stats.to_dict(),
            "added": result.added,
            "updated": result.updated,
            "deleted": result.deleted,
            "unchanged": plan.unchanged,
            # Conflicts count as failed too, as rows blocked by a duplicate key do in upsert_rows:
            # those people were not written, so the task fails once everything else is.
            "failed": plan.conflicts + len(result.failed),
            "conflicts": plan.conflicts,
            "not_found": result.not_found,
            "list_people": plan.current_people,
            "list_duplicates": plan.list_duplicates,
            "list_unidentified": plan.list_unidentified,
            "replaced": result.replaced,
            "resent": result.resent,
            "copies_removed": result.copies_removed,
            "verified": verification.verified,
            "drift": len(verification.drift),
        },
        requests=result.requests,
        failure_reasons=[*plan.conflict_reasons, *result.failed.values()],
        drift_reasons=verification.drift,
        isolation_requests=result.isolation_requests,
        verify_filter=verification.filter,
        table_id=table_id,
        mode=mode,
        delete_scope=delete_scope,
        dry_run=dry_run,
        normalization_version=prepared.normalization_version,
        plan_path=written_plan,
        rejects_path=written_rejects,
        planned={
            "add": len(plan.adds),
            "patch": len(plan.patches),
            "delete": len(plan.deletes),
            "remove_copy": len(plan.repairs),
        },
    )
    log.info("People sync summary: %s", json.dumps(summary))
    if (summary["failed"] or summary["drift"]) and fail_on_error and not dry_run:
        raise SyncFailedError(summary)
    return summary
