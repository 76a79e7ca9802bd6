"""The people sync's steps of the one sync flow (:mod:`listsync.sync.job`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from listsync.client.paging import ReadWatch
from listsync.client.writers import (
    PEOPLE_PER_REQUEST,
)
from listsync.extract.mapping import PrepareStats
from listsync.progress import PROGRESS
from listsync.sync.forms import DELETE_REACH
from listsync.sync.job import DeleteCounts, JobFiles, ListSyncJob, PlannedExtract
from listsync.sync.memory import PEOPLE_COSTS, MemoryGuard, RowCosts, give_back_freed_memory
from listsync.sync.people.apply import PeopleApplyResult, apply_people_plan, chunk_sizes
from listsync.sync.people.diff import plan_people_sync
from listsync.sync.people.frames import ListPeople, PersonRecord, list_frame
from listsync.sync.people.outcomes import people_outcomes
from listsync.sync.people.plan import PeopleLedger, PeoplePlan
from listsync.sync.people.prepare import PreparedPeople, prepare_people
from listsync.sync.people.read import NOT_IN_LIST, difference, people_in_shard, people_index, read_accounts
from listsync.sync.people.split import PartFolder, PeoplePart, load_part
from listsync.sync.people.verify import SHOWN, UNCONFIRMED, PeopleVerification, verify_people
from listsync.sync.settings import DeleteScope, SyncMode, SyncSettings, check_sync_options
from listsync.sync.state import ADD, DELETE, PATCH, UNSEEN, Ledger, StateEntries
from listsync.sync.steady import ReadAhead, SteadyRead, read_steadily
from listsync.sync.steps import build_summary
from listsync.sync.summary import PeopleSummary

if TYPE_CHECKING:
    import pandas as pd

    from listsync.client.client import ListSyncClient
    from listsync.extract.rejects import Rejects
    from listsync.sync.forms import Forms

log = logging.getLogger(__name__)


def sync_people(
    client: ListSyncClient,
    table_id: str,
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    *,
    mode: SyncMode = "upsert",
    delete_scope: DeleteScope = "accounts_in_source",
    chunk_size: int | Mapping[str, int] = PEOPLE_PER_REQUEST,
    default_region: str = "US",
    page_size: int = 1000,
    settings: SyncSettings = SyncSettings(),
    parts_path: PartFolder | None = None,
) -> dict[str, Any]:
    """Make the List's targetable people match an extract; return the JSON summary.

    Reads and prepares the extract (rejects with reasons), reads the List's people page by page,
    plans (:func:`plan_people_sync`), writes the plan file, checks delete safety, and applies
    the plan (:func:`apply_people_plan`) unless ``settings.dry_run``.

    :param client: the service client.
    :param table_id: the List.
    :param frames: the extract's chunks (``read_extract``).
    :param column_map: extract column → person field or ``account_domain``.
    :param mode: ``"upsert"`` (add and patch), ``"mirror"`` (also delete people not in the
        extract), ``"update_only"`` (patch, add no one) or ``"insert_only"`` (add, patch no one).
    :param delete_scope: ``"accounts_in_source"`` or ``"list"`` (see :func:`plan_people_sync`).
    :param chunk_size: people per request, one number or per kind (see :func:`apply_people_plan`).
    :param default_region: region of phone numbers written without ``+``.
    :param page_size: people per page when reading the List.
    :param settings: what the people sync shares with the rows upsert: delete and reject limits,
        null overwrites, the dry run, the failure policy, the plan and rejects files, the shard
        (by normalised account domain), the memory limit and the state
        (:class:`~listsync.sync.settings.SyncSettings`).
    :param parts_path: the folder of a split (:func:`~listsync.sync.people.split.split_people`):
        the shard (``settings.shard``, required) takes its extract people and its snapshot of the
        List from its part there instead of ``frames`` and a read of the whole List, re-reads the
        accounts it writes in before it writes, and takes the List's lease (that of an unsharded
        sync) rather than its shard's.
    :return: the summary, :class:`~listsync.sync.summary.PeopleSummary` as JSON.
    :raises UnsafeDeleteError: the planned deletes look like a broken extract (nothing written).
    :raises TooManyRejectsError: more than ``max_reject_fraction`` of the rows were rejected.
    :raises SyncFailedError: some people failed and ``fail_on_error``.
    :raises MemoryLimitError: the sync would take more than ``max_memory``; nothing was written.
    :raises SplitError: ``parts_path`` holds no split of this List, mapping and number of shards.
    """
    # Bad settings fail before anything is read.
    check_sync_options(mode, delete_scope)
    chunk_sizes(chunk_size)
    if parts_path is not None and settings.shard is None:
        raise ValueError('parts_path names the parts of a split: give the shard ("i/n") to sync')
    job = _PeopleSync(
        client=client,
        table_id=table_id,
        frames=frames,
        column_map=column_map,
        settings=settings,
        mode=mode,
        delete_scope=delete_scope,
        chunk_size=chunk_size,
        default_region=default_region,
        page_size=page_size,
        parts_path=parts_path,
    )
    return job.run()


_PeopleOutcome = tuple[PeopleApplyResult, PeopleVerification]


@dataclass(kw_only=True)
class _PeopleSync(ListSyncJob[PreparedPeople, PeoplePlan, _PeopleOutcome]):
    """The people sync's steps of the one sync flow (:class:`~listsync.sync.job.ListSyncJob`)."""

    noun = "people"
    title = "People sync"
    log = log

    mode: SyncMode
    delete_scope: DeleteScope
    chunk_size: int | Mapping[str, int]
    default_region: str
    page_size: int
    parts_path: PartFolder | None = None
    #: The shard's part of a split (None: the extract and the List are read).
    part: PeoplePart | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.parts_path is not None and self.shard is not None:
            self.part = load_part(self.parts_path, self.shard, self.table_id, self.state_mapping())

    def lease_shard(self) -> str | None:
        # A shard of a split writes from a snapshot of the List: one writer of the whole List at a
        # time, the unsharded sync and every shard of every split alike.
        return None if self.part is not None else super().lease_shard()

    def memory_costs(self) -> RowCosts:
        return PEOPLE_COSTS

    def prepare(self, rejects: Rejects, memory: MemoryGuard) -> PreparedPeople:
        if self.part is not None:
            frame = self.part.people()
            memory.count_extract(len(frame))
            stats = PrepareStats(read=len(frame), passed=len(frame))
            return PreparedPeople(frame, stats, self.part.manifest.normalization_version)
        return prepare_people(
            self.frames,
            self.column_map,
            rejects=rejects,
            default_region=self.default_region,
            shard=self.shard,
            on_chunk=memory.count_extract,
        )

    def read_list(self, memory: MemoryGuard, stop: threading.Event) -> SteadyRead[ListPeople]:
        if self.part is not None:
            return self._snapshot(memory)

        def read(watch: ReadWatch) -> ListPeople:
            memory.forget_list()
            records = self.client.iter_targetable_people_records(
                self.table_id, page_size=self.page_size, watch=watch
            )
            people = records if self.shard is None else people_in_shard(records, self.shard)
            return list_frame(memory.count_list(ReadAhead.items(people, stop)))

        return read_steadily(read, sleep=self.client.sleep, what=f"the people of {self.table_id}")

    def plan(
        self, prepared: PreparedPeople, listed: SteadyRead[ListPeople], memory: MemoryGuard
    ) -> PeoplePlan:
        plan = self._planned(prepared, listed)
        del listed  # the List's columns: a shard plans again from a snapshot made afresh
        if self.part is not None:
            written = sorted(
                {
                    item.account_domain
                    for kind in (plan.adds, plan.patches, plan.deletes, plan.repairs)
                    for item in kind
                }
            )
            if written:
                del plan  # let go before the plan made again
                plan = self._rechecked(prepared, memory, written)
        if plan.ledger is not None and len(plan.ledger.absent_adds):
            plan.drop_adds(self._settle_absent(plan, plan.ledger, confirmed=plan.steady_read))
        log.info(
            "Plan for %s: %d to add, %d to patch, %d to delete, %d extra copies to remove, %d unchanged "
            "(List holds %d people)",
            self.table_id,
            len(plan.adds),
            len(plan.patches),
            len(plan.deletes),
            len(plan.repairs),
            plan.unchanged,
            plan.current_people,
            extra=PROGRESS,
        )
        if plan.list_duplicates or plan.list_unidentified:
            log.warning(
                "List %s holds %d people sharing an identity on their account and %d without identity; "
                "they are left alone (%d extract people could not be synced because of them)",
                self.table_id,
                plan.list_duplicates,
                plan.list_unidentified,
                plan.conflicts,
            )
        return plan

    def _planned(self, prepared: PreparedPeople, listed: SteadyRead[ListPeople]) -> PeoplePlan:
        """The plan of ``prepared`` against the List's people ``listed``."""
        give_back_freed_memory()
        plan = plan_people_sync(
            prepared.frame,
            listed.value,
            fields=set(self.column_map.values()),
            # A torn read may miss people who are there: none is deleted for it.
            mode=self.mode if listed.steady or self.mode != "mirror" else "upsert",
            delete_scope=self.delete_scope,
            overwrite_with_null=self.settings.overwrite_with_null,
            last_applied=self.last_applied,
        )
        plan.rereads, plan.steady_read, plan.torn_reasons = listed.rereads, listed.steady, listed.problems
        if self.part is not None:
            plan.may_page_list = False
        return plan

    def _snapshot(
        self, memory: MemoryGuard, fresh: Iterable[PersonRecord] = (), afresh: Collection[str] = ()
    ) -> SteadyRead[ListPeople]:
        """The shard's List people as its part holds them, but those of the accounts ``afresh``
        (normalised domains), which are ``fresh`` instead; as steady as the split's read was."""
        assert self.part is not None
        manifest = self.part.manifest
        memory.forget_list()
        people = self.part.list_people(memory, fresh, afresh)
        return SteadyRead(people, manifest.steady, manifest.rereads, list(manifest.torn_reasons))

    def _rechecked(self, prepared: PreparedPeople, memory: MemoryGuard, written: list[str]) -> PeoplePlan:
        """The plan made again once the accounts the plan writes in (``written``) are read afresh:
        the part is a snapshot taken before the shards took turns, and others may have changed the
        List since. Only those accounts are read, by the service's account filter
        (:func:`read_accounts`); the others are not written."""
        assert self.part is not None
        fresh, how = read_accounts(
            self.client,
            self.table_id,
            written,
            self.page_size,
            self.part.manifest.list_people,
            may_page=False,
        )
        read = 0

        def people() -> Iterator[Any]:  # taken as they come, counted for the log line
            nonlocal read
            for person in fresh:
                read += 1
                yield person

        plan = self._planned(prepared, self._snapshot(memory, people(), written))
        log.info(
            "Read the %d accounts shard %s writes in afresh (%s filter, %d people) and planned "
            "again: the part's snapshot of the List was read at %s",
            len(written),
            self.shard,
            how,
            read,
            datetime.fromtimestamp(self.part.manifest.read_at, timezone.utc).isoformat(timespec="seconds"),
        )
        plan.rechecked = len(written)
        return plan

    def _settle_absent(self, plan: PeoplePlan, ledger: PeopleLedger, *, confirmed: bool) -> np.ndarray:
        """Read the accounts of the people the state says were applied and seen, whom the List
        read did not show, afresh: the places among the plan's adds of those present after all
        (all of them when the List read was not steady: no one is re-added from it)."""
        absent = [plan.adds[place] for place in ledger.absent_adds.tolist()]
        if not confirmed:
            log.warning(
                "%d people the last run saw in %s are missing from a read that was not steady: "
                "they are not added again tonight",
                len(absent),
                self.table_id,
            )
            return ledger.settle_absent(np.ones(len(absent), dtype=bool), confirmed=False)
        domains = sorted({add.account_domain for add in absent})
        people, _how = read_accounts(
            self.client,
            self.table_id,
            domains,
            self.page_size,
            plan.current_people,
            may_page=plan.may_page_list,
        )
        index = people_index(people)
        present = np.array(
            [difference(add, index.get(add.account_domain, {})) != NOT_IN_LIST for add in absent], dtype=bool
        )
        if present.any():
            log.info(
                "%d of %d people missing from the read of %s are there after all: not added again",
                int(present.sum()),
                len(absent),
                self.table_id,
            )
        return ledger.settle_absent(present)

    def plan_entries(self, plan: PeoplePlan) -> Iterator[dict[str, Any]]:
        return plan.entries()

    def write_count(self, plan: PeoplePlan) -> int:
        return plan.size

    def delete_counts(self, prepared: PreparedPeople, plan: PeoplePlan) -> DeleteCounts:
        # Removing extra copies leaves one of each: it is no sign of a broken extract.
        return DeleteCounts(len(plan.deletes), plan.current_people, plan.source_people)

    def apply(self, plan: PeoplePlan) -> _PeopleOutcome:
        client, table_id, page_size = self.client, self.table_id, self.page_size
        result = apply_people_plan(
            plan,
            client,
            table_id=table_id,
            chunk_size=self.chunk_size,
            page_size=page_size,
            verify_timeout=self.settings.verify_timeout,
        )
        verification = verify_people(
            plan,
            result,
            client,
            table_id=table_id,
            page_size=page_size,
            verify_timeout=self.settings.verify_timeout,
        )
        return result, verification

    def state_mapping(self) -> Mapping[str, Any]:
        return {"column_map": dict(self.column_map), "default_region": self.default_region}

    def state_entries(self, plan: PeoplePlan, outcome: _PeopleOutcome) -> tuple[list[StateEntries], Forms]:
        result, verification = outcome
        forms = verification.forms
        if result.delete_reach is not None:
            forms = {**forms, DELETE_REACH: [result.delete_reach]}
        ledger = plan.ledger
        if ledger is None:
            return [], forms
        now = self.client.clock()
        shown, seen = verification.outcome, verification.seen
        entries = ledger.final()
        start = 0
        for keys, sent, kind in (
            (ledger.add_keys, ledger.add_sent, ADD),
            (ledger.patch_keys, ledger.patch_sent, PATCH),
        ):
            outcome_of = shown[start : start + len(keys)]
            done, waiting = outcome_of == SHOWN, outcome_of == UNCONFIRMED
            entries.append(StateEntries.of(keys[done], sent[done], seen[start : start + len(keys)][done]))
            entries.append(StateEntries.of(keys[waiting], sent[waiting], UNSEEN, now, kind))
            start += len(keys)
        start += len(plan.repairs)
        waiting = shown[start : start + len(ledger.delete_keys)] == UNCONFIRMED
        entries.append(StateEntries.of(ledger.delete_keys[waiting], 0, UNSEEN, now, DELETE))
        return entries, forms

    def outcome_lines(
        self, plan: PeoplePlan, outcome: _PeopleOutcome, *, numbered: bool
    ) -> Iterator[dict[str, Any]]:
        result, verification = outcome
        return people_outcomes(
            plan, result, verification, numbered=numbered, verify_timeout=self.settings.verify_timeout
        )

    def nothing_applied(self) -> _PeopleOutcome:
        return PeopleApplyResult(), PeopleVerification()

    def summary(
        self, extract: PlannedExtract, plan: PeoplePlan, outcome: _PeopleOutcome, files: JobFiles
    ) -> PeopleSummary:
        result, verification = outcome
        return build_summary(
            PeopleSummary,
            **extract.stats.to_dict(),
            added=result.added,
            updated=result.updated,
            deleted=result.deleted,
            unchanged=plan.unchanged,
            # Conflicts count as failed too, as rows blocked by a duplicate key do in upsert_rows:
            # those people were not written, so the task fails once everything else is.
            failed=plan.conflicts + plan.deletes_held + len(result.failed),
            conflicts=plan.conflicts,
            deletes_held=plan.deletes_held,
            not_found=result.not_found,
            not_added=plan.not_added,
            not_updated=plan.not_updated,
            list_people=plan.current_people,
            rechecked=plan.rechecked,
            list_duplicates=plan.list_duplicates,
            list_unidentified=plan.list_unidentified,
            replaced=result.replaced,
            resent=result.resent,
            copies_removed=verification.copies_removed,
            lost=len(verification.lost),
            verified=verification.verified,
            drift=len(verification.drift),
            service_forms=verification.service_forms,
            unconfirmed=verification.unconfirmed,
            **Ledger.counts(plan.ledger),
            rereads=plan.rereads,
            requests=result.requests,
            failure_reasons=[*(held.reason for held in plan.held), *result.failed.values()],
            drift_reasons=verification.drift.values(),
            isolation_requests=result.isolation_requests,
            verify_filter=verification.filter,
            table_id=self.table_id,
            shard=None if self.shard is None else str(self.shard),
            mode=self.mode,
            delete_scope=self.delete_scope,
            dry_run=self.settings.dry_run,
            normalization_version=extract.normalization_version,
            plan_path=files.plan_path,
            rejects_path=files.rejects_path,
            state=files.state,
            unconfirmed_reasons=verification.unconfirmed_reasons,
            steady_read=plan.steady_read,
            torn_reasons=plan.torn_reasons,
            planned={
                "add": len(plan.adds),
                "patch": len(plan.patches),
                "delete": len(plan.deletes),
                "remove_copy": len(plan.repairs),
            },
        )
