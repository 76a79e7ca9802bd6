"""Applying a people plan: adds, copies removed, patches and deletes, chunked by account; adds whose
answer was lost are re-read before they are sent again."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from listsync.client.write_items import AccountKeyed, WriteReport
from listsync.client.writers import (
    ACCOUNTS_PER_REQUEST,
    PEOPLE_PER_REQUEST,
    chunk_by_account,
    write_people_adds,
    write_people_deletes,
    write_people_patches,
)
from listsync.sync.fan_out import fan_out
from listsync.sync.people.plan import PeoplePlan, PlannedAdd, PlannedDelete, PlannedPatch, item_key
from listsync.sync.people.read import NOT_IN_LIST, difference, loose, people_index, read_accounts
from listsync.sync.settings import PEOPLE_WRITE_KINDS as WRITE_KINDS
from listsync.sync.settings import people_chunk_sizes as chunk_sizes
from listsync.sync.steps import ProgressLogger, read_back_rounds, wait_for_late_writes

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient

log = logging.getLogger(__name__)


#: Sends of one people add in all, the first included, while its outcome stays unknown.
MAX_ADD_ATTEMPTS = 3
#: Planned adds made objects and sent at a time.
ADDS_AT_ONCE = 50_000


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
    :ivar delete_reach: how far the service's deletes by phone or name reach (``one``, ``all``),
        as the plan knew it or removing copies learned it; None while unknown.
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
    delete_reach: str | None = None
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
    verify_timeout: float = 0.0,
) -> PeopleApplyResult:
    """Write a plan through the client's chunked writers: adds, then patches, then deletes.

    Adds go first so that a run cut short leaves extra people rather than missing ones. Each
    kind is grouped by account and cut into requests of at most ``chunk_size`` people and
    ``max_accounts`` accounts; a request the service refuses is taken apart until each refused
    person fails alone with the service's reason (see :mod:`listsync.client.isolation`), and the
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
    Extra copies of people the List holds several times (mirror mode) are removed before patches,
    as far as the service's deletes by phone or name reach (``plan.delete_reach``; A38): one
    copy a delete, or, where a delete reaches every copy, the identity deleted and one copy added
    again, each step read back (waiting up to ``verify_timeout`` for the List to show it). Not
    known yet, the first delete of a copy is sent alone and read back, and teaches it
    (``result.delete_reach``).

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
        reread=lambda domains: read_accounts(
            client, table_id, domains, page_size, plan.current_people, may_page=plan.may_page_list
        )[0],
        verify_timeout=verify_timeout,
    )
    applier.result.delete_reach = plan.delete_reach
    # Adds are made objects a slice at a time (a fill night plans one for every person); the plan
    # holds them account by account, so a slice splits at most one account's people in two.
    for start in range(0, len(plan.adds), ADDS_AT_ONCE):
        applier.write("add", [_add_item(a) for a in plan.adds[start : start + ADDS_AT_ONCE]])
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
    applier.write("delete", [AccountKeyed(item_key(d), d.account_domain, d.match) for d in plan.deletes])
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
        reread: Callable[[list[str]], Iterable[Any]],
        verify_timeout: float = 0.0,
    ) -> None:
        self.client = client
        self.reread = reread
        self.verify_timeout = verify_timeout
        self.table_id = table_id
        self.sizes = sizes
        self.max_accounts = max_accounts
        self.progress = progress
        self.result = PeopleApplyResult()
        self._writers: dict[str, Callable[..., WriteReport]] = {
            "add": write_people_adds,
            "patch": write_people_patches,
            "delete": write_people_deletes,
        }

    def write(self, kind: str, items: list[AccountKeyed[Any]], *, advance: bool = True) -> WriteReport:
        """Send ``items`` with the writer of ``kind``; return what it did, also recorded."""
        whole = WriteReport()
        triples = [(item.key, item.account_domain, item) for item in items]
        size = self.sizes[kind]
        writer = self._writers[kind]
        # One writer call per request-sized chunk, cut the way the writer itself cuts, so the
        # request count stays minimal and progress can be logged between requests; the chunks of
        # one kind touch different people, so several are in flight at once.
        batches = [
            [item for _domain, members in chunk for _key_, item in members]
            for chunk in chunk_by_account(triples, max_people=size, max_accounts=self.max_accounts)
        ]
        reports = fan_out(
            lambda batch: writer(
                self.client, self.table_id, batch, chunk_size=size, max_accounts=self.max_accounts
            ),
            batches,
            at_once=self.client.max_in_flight,
        )
        for batch, report in zip(batches, reports, strict=True):
            self._record(kind, report)
            whole.merge(report)
            if advance:
                self.progress.advance(len(batch), failed=len(self.result.failed))
        return whole

    def patch(self, patches: list[PlannedPatch]) -> list[PlannedPatch]:
        """Send ``patches``; return those the service refused for their ``match`` (not recorded failed)."""
        items = [
            AccountKeyed(item_key(p), p.account_domain, {"match": p.match, "patch": p.patch}) for p in patches
        ]
        report = self.write("patch", items)
        refused = [
            p
            for p in patches
            if "email" not in p.match and _MATCH_REFUSED.search(report.failed.get(item_key(p), ""))
        ]
        for p in refused:
            del self.result.failed[item_key(p)]
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
            "delete",
            [AccountKeyed(item_key(p), p.account_domain, p.match) for p in patches],
            advance=not counted,
        )
        self.result.deleted -= len(deletes.written)  # a step of the replacement, not a delete of the plan
        gone = set(deletes.written)
        adds = self.write(
            "add",
            [
                AccountKeyed(item_key(p), p.account_domain, _replacement(p))
                for p in patches
                if item_key(p) in gone
            ],
            advance=False,
        )
        self.result.added -= len(adds.written)
        self.result.updated += len(adds.written)
        self.result.replaced += len(adds.written)
        for key in adds.written:
            self.result.written[key] = "patch"

    def remove_copies(self, repairs: Sequence[PlannedDelete]) -> None:
        """Remove the extra copies of people the List holds several times, as far as the
        service's deletes reach (see :func:`apply_people_plan`); the copies the List shows removed
        are counted by the read back."""
        if not repairs:
            return
        log.warning("The List holds %d extra copies of people; one copy of each is kept", len(repairs))
        groups: dict[tuple[str, str], list[PlannedDelete]] = {}
        for repair in repairs:
            groups.setdefault((repair.account_domain, repair.identity), []).append(repair)
        people = list(groups.values())
        if self.result.delete_reach is None:
            first = people[0]
            self._delete_copies(first[:1])
            left = self._copies_left([first], none_left=False)[0]
            if left == 0:
                self.result.delete_reach = "all"
                self._as_one(first)
                self._add_one_copy([first])
            elif left == len(first):
                self.result.delete_reach = "one"
                self._delete_copies(first[1:])
            else:
                # Not shown within the read back's time: the rest is left to the next run.
                log.warning("The delete of a copy is not shown yet: how far deletes reach stays unknown")
                return
            log.info(
                "A delete by phone or name reaches %s person(s) of the account", self.result.delete_reach
            )
            people = people[1:]
        if self.result.delete_reach == "one":
            self._delete_copies([repair for group in people for repair in group])
        elif people:
            self._delete_copies([group[0] for group in people])
            for group in people:
                self._as_one(group)
            self._copies_left(people, none_left=True)
            self._add_one_copy(people)

    def _delete_copies(self, repairs: Sequence[PlannedDelete]) -> None:
        report = self.write("delete", [AccountKeyed(item_key(r), r.account_domain, r.match) for r in repairs])
        self.result.deleted -= len(report.written)  # a repair, not a delete of the plan

    def _as_one(self, group: list[PlannedDelete]) -> None:
        """One delete of a person's identity removed every copy: the group's other copies are
        read back as its first is, counted removed only if the List shows one copy left."""
        first = item_key(group[0])
        if first in self.result.written:
            self.result.written.update(dict.fromkeys(map(item_key, group[1:]), "delete"))

    def _copies_left(self, people: list[list[PlannedDelete]], *, none_left: bool) -> list[int]:
        """How many copies of each person (a group of their extra copies) the List holds, read
        back until it shows none (``none_left``: all were deleted) or, after one copy's delete,
        one fewer or none, or until ``verify_timeout`` passes."""
        counts = [len(group) + 1 for group in people]
        domains = sorted({group[0].account_domain for group in people})

        def waiting() -> bool:
            done = [{0} if none_left else {0, len(group)} for group in people]
            return any(count not in wanted for count, wanted in zip(counts, done, strict=True))

        for _round in read_back_rounds(self.client, self.verify_timeout, waiting, "copies removed"):
            index = people_index(self.reread(domains))
            counts = [len(index.get(g[0].account_domain, {}).get(loose(g[0].identity), [])) for g in people]
        return counts

    def _add_one_copy(self, people: list[list[PlannedDelete]]) -> None:
        """Add one copy again of each person whose copies a delete removed together."""
        report = self.write(
            "add",
            [AccountKeyed(item_key(group[0]), group[0].account_domain, group[0].person) for group in people],
            advance=False,
        )
        self.result.added -= len(report.written)  # a repair, not an add of the plan

    def settle_adds(self, adds: Iterable[PlannedAdd]) -> None:
        """Re-read the accounts of adds of unknown outcome; send again only the people still absent."""
        result = self.result
        if not any(kind == "add" for kind, _ in result.unknown.values()):
            return
        unknown = {key for key, (kind, _) in result.unknown.items() if kind == "add"}
        by_key = {key: add for add in adds if (key := item_key(add)) in unknown}
        for _attempt in range(1, MAX_ADD_ATTEMPTS):
            pending = [
                by_key[key] for key, (kind, _) in result.unknown.items() if kind == "add" and key in by_key
            ]
            if not pending:
                return
            wait_for_late_writes(self.client, result.settle_after)
            index = people_index(self.reread(sorted({add.account_domain for add in pending})))
            absent = []
            for add in pending:
                del result.unknown[item_key(add)]
                if difference(add, index.get(add.account_domain, {})) == NOT_IN_LIST:
                    absent.append(add)
                else:
                    result.added += 1
                    result.written[item_key(add)] = "add"
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
    return AccountKeyed(item_key(add), add.account_domain, add.person)


def _replacement(patch: PlannedPatch) -> dict[str, Any]:
    """The whole person a refused patch stands for: the List's fields with the changes applied."""
    person = {**patch.current, **patch.patch}
    return {name: value for name, value in person.items() if value is not None}
