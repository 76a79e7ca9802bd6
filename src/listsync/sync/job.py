"""The one flow of a List sync, which the people sync and the rows upsert both run.

::

    take the lease of the List's job and shard  # one writing run at a time (listsync.sync.lease);
                                            # a dry run takes none, and says who held it
    prepare the extract (rejects written, max_reject_fraction enforced)
    read the List and plan                  # pure planning once the List is read
                                            # (both counted by the memory guard, max_memory;
                                            # what each read freed goes back to the system;
                                            # the extract's rows let go once planned; the
                                            # plan kept from the cycle collector's sight)
    hold the plan to an approved one        # given one: the plan reviewed, or nothing written
    write the plan file                     # for review; always in a dry run
    check delete safety                     # a broken extract never wipes a List (an approved
                                            # plan's deletes were reviewed instead)
    apply, then read back what was touched  # not in a dry run; waits for late writes
    keep the state                          # what was applied and seen (listsync.sync.state)
    write the outcomes file                 # each write that did not end as planned
    summary                                 # logged, returned, raised with when something failed
    write the report                        # one HTML page (listsync.sync.report); one that
                                            # cannot be written is a warning, nothing more
    give the lease up                       # also when the run failed

The sync's state is read before anything else (one made for another List, shard or mapping is
refused before the extract is read), planned against (a three-way diff), and replaced once the
writes are read back; a dry run leaves it as it was.

A job (:class:`ListSyncJob`) supplies the steps that differ: how its extract is prepared, how the
List is read and planned, what the plan file holds, how a plan is applied and verified, and what
its summary counts. Everything else, the order above included, lives here once.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from listsync.errors import warn_aside
from listsync.extract.mapping import PrepareStats
from listsync.extract.options import Shard, parse_shard
from listsync.sync.approved import check_approved_plan
from listsync.sync.lease import Lease, LeaseLocation, lease_name, peek, this_process
from listsync.sync.memory import (
    MemoryGuard,
    RowCosts,
    collected_sparingly,
    give_back_freed_memory,
    kept_objects_frozen,
    use_returning_allocator,
)
from listsync.sync.outcomes import write_outcomes
from listsync.sync.report import PlanSample, report_target, write_report
from listsync.sync.settings import SyncSettings, parse_max_memory
from listsync.sync.state import (
    LastApplied,
    StateEntries,
    StateScope,
    StateStore,
    load_state,
    save_state,
    state_store,
)
from listsync.sync.steady import ReadAhead
from listsync.sync.steps import (
    MAX_FAILURE_REASONS,
    SyncFailedError,
    check_delete_safety,
    prepare_with_rejects,
    write_requested_plan,
)
from listsync.sync.summary import ListSyncSummary

if TYPE_CHECKING:
    import pandas as pd

    from listsync.client.client import ListSyncClient
    from listsync.extract.rejects import Rejects
    from listsync.sync.forms import Forms

__all__ = ["DeleteCounts", "JobFiles", "ListSyncJob", "PlannedExtract"]


class _Prepared(Protocol):
    """A prepared extract (``PreparedPeople``, ``PreparedRows``): its rows, and what became of them."""

    @property
    def stats(self) -> PrepareStats: ...  # pragma: no cover - protocol

    @property
    def normalization_version(self) -> str: ...  # pragma: no cover - protocol


PreparedT = TypeVar("PreparedT", bound=_Prepared)
PlanT = TypeVar("PlanT")
OutcomeT = TypeVar("OutcomeT")


@dataclass(frozen=True)
class DeleteCounts:
    """What delete safety weighs (see :func:`~listsync.sync.steps.check_delete_safety`)."""

    planned: int
    current_total: int
    source_rows: int


@dataclass(frozen=True)
class PlannedExtract:
    """What the summary tells of an extract once it is planned: where its rows went, and the rules
    they were normalised by. The rows themselves are let go (see :meth:`ListSyncJob.run`)."""

    stats: PrepareStats
    normalization_version: str


@dataclass(frozen=True)
class JobFiles:
    """Where a run wrote its plan and its rejects, and where its state is kept (None: nowhere),
    for the summary."""

    plan_path: str | None
    rejects_path: str | None
    state: str | None = None


@dataclass(kw_only=True)
class ListSyncJob(ABC, Generic[PreparedT, PlanT, OutcomeT]):
    """One sync of an extract into a List; :meth:`run` goes through the steps in order.

    :param client: the service client.
    :param table_id: the List.
    :param frames: the extract's chunks (``read_extract``).
    :param column_map: extract column → what it fills in the List.
    :param settings: the settings both List syncs share (:class:`~listsync.sync.settings.SyncSettings`).
    """

    #: What the job writes ("people", "rows"): names its temporary files and its messages.
    noun: ClassVar[str]
    #: The job's name in its log lines ("People sync").
    title: ClassVar[str]
    #: The job's logger.
    log: ClassVar[logging.Logger]

    client: ListSyncClient
    table_id: str
    frames: Iterable[pd.DataFrame]
    column_map: Mapping[str, str]
    settings: SyncSettings
    #: The run's shard, ``settings.shard`` parsed (None: the whole List).
    shard: Shard | None = field(init=False)
    #: The state the plan weighs (set by :meth:`run`; None: no state is kept).
    last_applied: LastApplied | None = None

    def __post_init__(self) -> None:
        self.shard = parse_shard(self.settings.shard)

    def lease_shard(self) -> str | None:
        """The shard the run's lease is named after (None: the whole List's lease): its own."""
        return None if self.shard is None else str(self.shard)

    @abstractmethod
    def memory_costs(self) -> RowCosts:
        """What an extract row and a List item take at the peak (see :mod:`listsync.sync.memory`)."""

    @abstractmethod
    def prepare(self, rejects: Rejects, memory: MemoryGuard) -> PreparedT:
        """Read and prepare the extract, giving every rejected row to ``rejects`` and the rows
        of each chunk to ``memory.count_extract`` as they are read."""

    def read_list(self, memory: MemoryGuard, stop: threading.Event) -> Any:
        """Read the List, its items through ``memory.count_list``, while the extract is prepared:
        in a thread of its own (:class:`~listsync.sync.steady.ReadAhead`), which stops at the next
        item once ``stop`` is set (:meth:`ReadAhead.items`). What it gives is :meth:`plan`'s
        ``listed``. None (this default): :meth:`plan` reads the List itself."""
        return None

    @abstractmethod
    def plan(self, prepared: PreparedT, listed: Any, memory: MemoryGuard) -> PlanT:
        """Plan the writes that make the List match ``prepared``, from the List as
        :meth:`read_list` read it (``listed``), or read here, its items through
        ``memory.count_list``; log the plan."""

    @abstractmethod
    def plan_entries(self, plan: PlanT) -> Iterable[Mapping[str, Any]]:
        """The plan as plan-file entries, in the order they will be applied."""

    @abstractmethod
    def write_count(self, plan: PlanT) -> int:
        """The writes the plan holds (items added, changed or deleted), for the memory guard."""

    @abstractmethod
    def delete_counts(self, prepared: PreparedT, plan: PlanT) -> DeleteCounts:
        """What the plan deletes, against what the List holds and the extract gave."""

    @abstractmethod
    def apply(self, plan: PlanT) -> OutcomeT:
        """Send the plan's writes, then read back what they touched."""

    @abstractmethod
    def state_mapping(self) -> Mapping[str, Any]:
        """What decides the values written besides the extract (the column map...): a state made
        under another is refused."""

    @abstractmethod
    def state_entries(self, plan: PlanT, outcome: OutcomeT) -> tuple[list[StateEntries], Forms]:
        """The entries of the next state and the forms the read back learned."""

    @abstractmethod
    def outcome_lines(self, plan: PlanT, outcome: OutcomeT, *, numbered: bool) -> Iterable[dict[str, Any]]:
        """The lines of the outcomes file (:mod:`listsync.sync.outcomes`), in plan order;
        ``numbered``: a plan file was written, whose lines they name."""

    @abstractmethod
    def nothing_applied(self) -> OutcomeT:
        """The outcome of a dry run: nothing written, nothing read back."""

    @abstractmethod
    def summary(
        self, extract: PlannedExtract, plan: PlanT, outcome: OutcomeT, files: JobFiles
    ) -> ListSyncSummary:
        """The job's summary (``build_summary``)."""

    def run(self) -> dict[str, Any]:
        """Run the job; return its summary.

        :raises TooManyRejectsError: more than ``max_reject_fraction`` of the rows were rejected.
        :raises UnsafeDeleteError: the deletes look like a broken extract; nothing was written.
        :raises SyncFailedError: something failed or drifted and ``fail_on_error`` is set.
        :raises MemoryLimitError: the rows read would take more than ``max_memory``.
        :raises StateMismatchError: the state kept was made for another List, shard or mapping.
        :raises PlanChangedError: the plan is not the ``approved_plan``; nothing was written.
        :raises StalePlanError: the ``approved_plan`` is older than ``max_plan_age``.
        :raises LeaseHeldError: another run of this List, job and shard held its lease for
            ``lock_timeout`` seconds; nothing was read or written.
        :raises LeaseLostError: the lease lapsed or was taken over while the run worked; the run
            stopped before its next step.
        """
        settings = self.settings
        scope = StateScope(
            self.noun, self.table_id, None if self.shard is None else str(self.shard), self.state_mapping()
        )
        store = state_store(settings.state_path)
        where = settings.lease_location if settings.lease_location is not None else store
        name = lease_name(scope.job, scope.table_id, self.lease_shard())
        leases = where.lease(name) if isinstance(where, LeaseLocation) else None
        what = f"the {self.title.lower()} of {self.table_id}" + (
            f", shard {scope.shard}" if scope.shard else ""
        )
        if leases is None:
            self.log.warning(
                "No lease is taken for %s (no state, nor a lease_location): another run of it may "
                "write the List at the same time",
                what,
            )
        elif settings.dry_run:
            # A dry run writes nothing, so it holds nobody back; it says whom it read beside.
            return self._run(scope, store, None, held_by=peek(leases))
        else:
            with Lease(
                leases,
                settings.lease_holder or this_process(),
                timeout=settings.lock_timeout,
                expiry=settings.lease_expiry,
                what=what,
            ) as lease:
                return self._run(scope, store, lease)
        return self._run(scope, store, None)

    def _run(
        self, scope: StateScope, store: StateStore | None, lease: Lease | None, *, held_by: str | None = None
    ) -> dict[str, Any]:
        """The steps of :meth:`run`, under the lease when one is held (``lease``); ``held_by``:
        the holder of the lease while a dry run read. The cycle collector looks at the plan no
        more once it is made, and collects young objects sparingly meanwhile."""
        with collected_sparingly(), kept_objects_frozen() as settle:
            return self._steps(scope, store, lease, settle, held_by=held_by)

    def _steps(
        self,
        scope: StateScope,
        store: StateStore | None,
        lease: Lease | None,
        settle: Callable[[], None],
        *,
        held_by: str | None,
    ) -> dict[str, Any]:
        settings = self.settings
        started = datetime.now(timezone.utc)
        state = load_state(store, scope, fresh=settings.fresh_state)
        if store is not None:
            self.last_applied = LastApplied(state, self.client.clock(), settings.visibility_window)
        use_returning_allocator()
        memory = MemoryGuard(
            parse_max_memory(settings.max_memory),
            self.memory_costs(),
            what=f"the {self.title.lower()} of {self.table_id}",
            shard=self.shard,
        )
        listing = ReadAhead(
            functools.partial(self.read_list, memory), what=f"the {self.noun} of {self.table_id}"
        )
        try:
            prepared, rejects_path, reject_reasons = prepare_with_rejects(
                functools.partial(self.prepare, memory=memory),
                settings.rejects_path,
                max_reject_fraction=settings.max_reject_fraction,
                prefix=f"listsync-{self.noun}-rejects-",
            )
        except BaseException:
            listing.cancel()
            raise
        give_back_freed_memory()
        plan = self.plan(prepared, listing.result(), memory)
        if not settings.dry_run:  # the writes are made objects and sent only in a real run
            memory.count_planned(self.write_count(plan))
        # The plan's ledger holds what the next state needs of the last one: only its forms are kept.
        forms_kept = {} if self.last_applied is None else self.last_applied.forms
        self.last_applied = None
        deletes = self.delete_counts(prepared, plan)
        extract = PlannedExtract(prepared.stats, prepared.normalization_version)
        # The plan holds what its writes need: the extract's rows, as large as the List's, are
        # not kept through the apply and the read back.
        del prepared
        give_back_freed_memory()
        settle()  # the plan lives to the end of the run
        if settings.approved_plan is not None:
            # Before the plan file is written, which may be the approved file itself.
            lines = check_approved_plan(
                self.plan_entries(plan), settings.approved_plan, max_age=settings.max_plan_age
            )
            self.log.info(
                "The plan is the approved plan %s (%d lines): applying it", settings.approved_plan, lines
            )
        sample = PlanSample()
        plan_path = write_requested_plan(
            sample.through(self.plan_entries(plan)),
            settings.plan_path,
            dry_run=settings.dry_run,
            prefix=f"listsync-{self.noun}-plan-",
            logger=self.log,
        )
        if settings.approved_plan is None:
            # An approved plan's deletes were reviewed: it was held to the review instead.
            check_delete_safety(
                planned_deletes=deletes.planned,
                current_total=deletes.current_total,
                source_rows=deletes.source_rows,
                max_delete_fraction=settings.max_delete_fraction,
                noun=self.noun,
            )
        if lease is not None:
            lease.check()
        outcome = self.nothing_applied() if settings.dry_run else self.apply(plan)
        if not settings.dry_run:
            if lease is not None:
                lease.check()
            entries, forms = self.state_entries(plan, outcome)
            save_state(store, scope, entries, [forms_kept, forms], clock=self.client.clock)
        outcomes = write_outcomes(
            self.outcome_lines(plan, outcome, numbered=plan_path is not None),
            settings.outcomes_path,
            prefix=f"listsync-{self.noun}-outcomes-",
        )
        if outcomes.lines:
            self.log.info("%d writes did not end as planned: see %s", outcomes.lines, outcomes.path)
        where = None if store is None else store.where(scope)
        made = self.summary(extract, plan, outcome, JobFiles(plan_path, rejects_path, where))
        made.outcomes_path = outcomes.path
        made.failed_curable, made.failed_permanent = outcomes.curable, outcomes.permanent
        made.permanent_reasons = dict(outcomes.permanent_reasons.most_common(MAX_FAILURE_REASONS))
        made.curable_reasons = dict(outcomes.curable_reasons.most_common(MAX_FAILURE_REASONS))
        made.lease_wait_seconds = 0.0 if lease is None else round(lease.waited, 1)
        made.lease_waited_for = None if lease is None else lease.waited_for
        made.lease_held_by = held_by
        made.reject_reasons = dict(reject_reasons.most_common(MAX_FAILURE_REASONS))
        report = report_target(settings.report_path, settings.plan_path, plan_path)
        if report is not None:
            if plan_path is None:  # no plan file took the sample on its way
                sample.take(self.plan_entries(plan))
            # Read back where it was written: a local path, or the object-storage file given.
            given = settings.outcomes_path
            stored = outcomes.path is not None and not isinstance(given, str | os.PathLike | None)
            self._report(report, made, sample, started, given if stored else outcomes.path)
        # XCom and the command line take the summary as JSON, as readers of earlier versions did.
        summary = made.model_dump(mode="json")
        self.log.info("%s summary: %s", self.title, json.dumps(summary))
        if (made.failed or made.drift) and settings.fail_on_error and not settings.dry_run:
            raise SyncFailedError(summary)
        return summary

    def _report(
        self, target: Any, made: ListSyncSummary, sample: PlanSample, started: datetime, outcomes: Any
    ) -> None:
        """Write the run's report to ``target``, the first records of the ``outcomes`` file on it,
        and name it in the summary ``made``; one that cannot be written is one warning line, and
        the summary names none."""
        made.report_path = str(target)
        finished = datetime.now(timezone.utc)
        try:
            written = write_report(
                target, made, sample, started=started, finished=finished, outcomes=outcomes
            )
        except Exception as error:  # the run's work is done: its report's failure changes nothing
            made.report_path = None
            warn_aside(self.log, f"The run's report was not written to {target}", error)
        else:
            self.log.info("Report written to %s", written)
