"""The rows upsert's steps of the one sync flow (:mod:`listsync.sync.job`)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from listsync.client.paging import ReadWatch
from listsync.extract.mapping import rows_key_column
from listsync.progress import PROGRESS
from listsync.sync.job import DeleteCounts, JobFiles, ListSyncJob, PlannedExtract
from listsync.sync.memory import MemoryGuard, RowCosts, give_back_freed_memory, rows_costs
from listsync.sync.rows.apply import (
    ADD_ROWS,
    DELETE_ROWS,
    GET_ROWS,
    UPDATE_CELLS,
    ApplyOutcome,
    apply_rows_plan,
    chunk_sizes,
)
from listsync.sync.rows.diff import plan_rows_upsert
from listsync.sync.rows.list_rows import ListRows
from listsync.sync.rows.outcomes import rows_outcomes
from listsync.sync.rows.plan import RowsLedger, RowsPlan, plan_entries
from listsync.sync.rows.prepare import PreparedRows, prepare_rows
from listsync.sync.rows.read import list_key_normalizer, read_list_rows
from listsync.sync.rows.verify import RowsVerification, verify_rows
from listsync.sync.settings import RowsMode, SyncSettings, check_rows_mode
from listsync.sync.state import ADD, DELETE, PATCH, UNSEEN, Ledger, StateEntries
from listsync.sync.steady import read_steadily
from listsync.sync.steps import build_summary
from listsync.sync.summary import RowsSummary

if TYPE_CHECKING:
    import pandas as pd

    from listsync.client.client import ListSyncClient
    from listsync.extract.rejects import Rejects
    from listsync.sync.forms import Forms

_log = logging.getLogger(__name__)


def upsert_rows(
    client: ListSyncClient,
    table_id: str,
    frames: Iterable[pd.DataFrame],
    *,
    key_column: str,
    column_map: Mapping[str, str],
    key_kind: Literal["domain", "text"] = "domain",
    json_columns: Collection[str] = (),
    delete_missing: bool = False,
    chunk_size: int | Mapping[str, int] | None = None,
    mode: RowsMode = "upsert",
    settings: SyncSettings = SyncSettings(),
) -> dict[str, Any]:
    """Make the List's rows match the extract, writing only what differs; return the JSON summary.

    :param client: the service client (its ``user_id`` is sent with every request).
    :param table_id: the List.
    :param frames: the extract, in chunks (``read_extract``).
    :param key_column: the List column id that identifies a row (e.g. ``domain``); exactly one
        extract column must be mapped to it.
    :param column_map: extract column → List column id. Only mapped columns are compared and
        written; other List columns are left alone.
    :param key_kind: ``"domain"`` normalises the key as a domain on both sides, ``"text"`` trims it.
    :param json_columns: extract columns whose text holds JSON to parse (jsonb needs no mark).
    :param delete_missing: delete List rows whose key is not in the extract.
    :param chunk_size: items per request, one number or a mapping by kind (see :func:`chunk_sizes`).
    :param mode: ``"upsert"`` (add and update), ``"update_only"`` (update the rows the List holds,
        add none) or ``"insert_only"`` (add the rows the List lacks, update none);
        ``delete_missing`` goes with ``"upsert"`` alone.
    :param settings: what the rows upsert shares with the people sync: delete and reject limits,
        null overwrites, the dry run, the failure policy, the plan and rejects files, the shard
        (by normalised key), the memory limit and the state
        (:class:`~listsync.sync.settings.SyncSettings`).
    :return: the summary, :class:`~listsync.sync.summary.RowsSummary` as JSON. A dry run writes
        nothing, so its write counts are 0 and ``planned`` tells what a run would do.
    :raises ColumnMappingError: the map does not fit the extract, or does not map one column to
        ``key_column``.
    :raises TooManyRejectsError: more than ``max_reject_fraction`` of the rows were rejected.
    :raises UnsafeDeleteError: the deletes look like a broken extract; nothing was written.
    :raises SyncFailedError: rows failed and ``fail_on_error`` is set; the rest was written.
    :raises MemoryLimitError: the upsert would take more than ``max_memory``; nothing was written.
    """
    sizes = chunk_sizes(chunk_size)  # a bad setting fails before anything is read
    check_rows_mode(mode, delete_missing)
    source_key = rows_key_column(column_map, key_column)
    job = _RowsUpsert(
        client=client,
        table_id=table_id,
        frames=frames,
        column_map=column_map,
        settings=settings,
        key_column=key_column,
        source_key=source_key,
        key_kind=key_kind,
        json_columns=json_columns,
        delete_missing=delete_missing,
        chunk_sizes=sizes,
        mode=mode,
    )
    return job.run()


_RowsOutcome = tuple[ApplyOutcome, RowsVerification]
#: The state's kinds of write as the read back names them.
_WRITE_KINDS = {ADD: "add", PATCH: "update", DELETE: "delete"}


@dataclass(kw_only=True)
class _RowsUpsert(ListSyncJob[PreparedRows, RowsPlan, _RowsOutcome]):
    """The rows upsert's steps of the one sync flow (:class:`~listsync.sync.job.ListSyncJob`)."""

    noun = "rows"
    title = "Rows upsert"
    log = _log

    key_column: str
    source_key: str
    key_kind: Literal["domain", "text"]
    json_columns: Collection[str]
    delete_missing: bool
    chunk_sizes: dict[str, int]
    mode: RowsMode
    #: GET rows requests the read of the List took (set by :meth:`plan`).
    read_requests: int = field(default=0, init=False)

    def memory_costs(self) -> RowCosts:
        return rows_costs(len(self.column_map))

    def prepare(self, rejects: Rejects, memory: MemoryGuard) -> PreparedRows:
        return prepare_rows(
            self.frames,
            self.column_map,
            self.source_key,
            rejects=rejects,
            key_kind=self.key_kind,
            json_columns=self.json_columns,
            shard=self.shard,
            on_chunk=memory.count_extract,
        )

    def plan(self, prepared: PreparedRows, listed: None, memory: MemoryGuard) -> RowsPlan:
        # The List is read here: which of its columns depends on the extract's (read_list is None).
        columns = list(prepared.frame.columns)

        def read(watch: ReadWatch) -> ListRows:
            memory.forget_list()
            current, requests = read_list_rows(
                self.client,
                self.table_id,
                self.key_column,
                columns,
                key_kind=self.key_kind,
                shard=self.shard,
                counted=memory.count_list,
                watch=watch,
            )
            self.read_requests += requests
            return current

        rows = read_steadily(read, sleep=self.client.sleep, what=f"the rows of {self.table_id}")
        give_back_freed_memory()
        plan = plan_rows_upsert(
            prepared.frame,
            rows.value,
            key_column=self.key_column,
            # A torn read may miss rows that are there: none is deleted for it.
            delete_missing=self.delete_missing and rows.steady,
            overwrite_with_null=self.settings.overwrite_with_null,
            last_applied=self.last_applied,
            mode=self.mode,
        )
        plan.rereads, plan.steady_read, plan.torn_reasons = rows.rereads, rows.steady, rows.problems
        if plan.ledger is not None and len(plan.ledger.absent_adds):
            plan.drop_additions(self._settle_absent(plan, plan.ledger, confirmed=rows.steady))
        _log.info(
            "Plan for %s: %d rows to add, %d cells to update on %d rows, %d rows to delete, %d unchanged "
            "(List holds %d keyed rows)",
            self.table_id,
            len(plan.additions),
            len(plan.changes),
            plan.changed_rows,
            len(plan.removals),
            plan.unchanged,
            plan.list_rows,
            extra=PROGRESS,
        )
        if plan.duplicate_keys:
            _log.warning(
                "List %s holds %d keys in more than one row; those rows are left alone (%d extract rows "
                "could not be written because of them). The plan file lists their row ids.",
                self.table_id,
                len(plan.duplicate_keys),
                plan.blocked_by_duplicates,
            )
        return plan

    def _settle_absent(self, plan: RowsPlan, ledger: RowsLedger, *, confirmed: bool) -> np.ndarray:
        """Read the List's keys afresh for the rows the state says were applied and seen, which
        the List read did not show: the places among the plan's additions of those present after
        all (all of them when the List read was not steady: no row is re-added from it)."""
        absent = [plan.additions[place].key for place in ledger.absent_adds.tolist()]
        if not confirmed:
            _log.warning(
                "%d rows the last run saw in %s are missing from a read that was not steady: "
                "they are not added again tonight",
                len(absent),
                self.table_id,
            )
            return ledger.settle_absent(np.ones(len(absent), dtype=bool), confirmed=False)

        def read(watch: ReadWatch) -> set[str | None]:
            keys, requests = read_list_rows(
                self.client, self.table_id, self.key_column, [], key_kind=self.key_kind, watch=watch
            )
            self.read_requests += requests
            return set(keys.keys)

        again = read_steadily(read, sleep=self.client.sleep, what=f"the keys of {self.table_id}")
        plan.rereads += again.rereads
        present = np.array([key in again.value for key in absent], dtype=bool)
        if present.any():
            _log.info(
                "%d of %d rows missing from the read of %s are there after all: not added again",
                int(present.sum()),
                len(absent),
                self.table_id,
            )
        return ledger.settle_absent(present, confirmed=again.steady)

    def plan_entries(self, plan: RowsPlan) -> Iterator[dict[str, Any]]:
        return plan_entries(plan)

    def write_count(self, plan: RowsPlan) -> int:
        return len(plan.additions) + len(plan.changes) + len(plan.removals)

    def delete_counts(self, prepared: PreparedRows, plan: RowsPlan) -> DeleteCounts:
        return DeleteCounts(len(plan.removals), plan.list_rows, prepared.stats.passed)

    def apply(self, plan: RowsPlan) -> _RowsOutcome:
        outcome = apply_rows_plan(plan, self.client, self.table_id, chunk_size=self.chunk_sizes)
        normalize_key = list_key_normalizer(self.key_kind)
        verification = verify_rows(
            plan,
            outcome,
            self.client,
            self.table_id,
            normalize_key,
            verify_timeout=self.settings.verify_timeout,
        )
        return outcome, verification

    def state_mapping(self) -> Mapping[str, Any]:
        return {
            "column_map": dict(self.column_map),
            "key_column": self.key_column,
            "key_kind": self.key_kind,
            "json_columns": sorted(self.json_columns),
        }

    def state_entries(self, plan: RowsPlan, outcome: _RowsOutcome) -> tuple[list[StateEntries], Forms]:
        _applied, verification = outcome
        ledger = plan.ledger
        if ledger is None:
            return [], {}
        now = self.client.clock()
        # (row key, key hash, digest sent, kind of write) of every row written.
        written = [
            *(
                (add.key, key, sent, ADD)
                for add, key, sent in zip(
                    plan.additions, ledger.add_keys.tolist(), ledger.add_sent.tolist(), strict=True
                )
            ),
            *((text, key, sent, PATCH) for text, (key, sent) in ledger.updates.items()),
            *(
                (removal.key, key, 0, DELETE)
                for removal, key in zip(plan.removals, ledger.delete_keys.tolist(), strict=True)
            ),
        ]
        shown = [
            (key, sent, verification.seen[text], 0, 0)
            for text, key, sent, kind in written
            if kind != DELETE and text in verification.seen
        ]
        waiting = [
            (key, sent, UNSEEN, now, kind)
            for text, key, sent, kind in written
            if verification.unconfirmed.get(text) == _WRITE_KINDS[kind]
        ]
        return (
            [*ledger.final(), StateEntries.listed(shown), StateEntries.listed(waiting)],
            verification.forms,
        )

    def outcome_lines(
        self, plan: RowsPlan, outcome: _RowsOutcome, *, numbered: bool
    ) -> Iterator[dict[str, Any]]:
        applied, verification = outcome
        return rows_outcomes(
            plan, applied, verification, numbered=numbered, verify_timeout=self.settings.verify_timeout
        )

    def nothing_applied(self) -> _RowsOutcome:
        return ApplyOutcome(), RowsVerification()

    def summary(
        self, extract: PlannedExtract, plan: RowsPlan, outcome: _RowsOutcome, files: JobFiles
    ) -> RowsSummary:
        applied, verification = outcome
        reasons = [duplicate.reason for duplicate in plan.duplicate_keys if duplicate.in_extract]
        reasons.extend(f"{kind}: {reason}" for kind, _, reason in applied.failures)
        failed_rows = applied.failed_keys("add") | applied.failed_keys("update")
        return build_summary(
            RowsSummary,
            **extract.stats.to_dict(),
            added=len(applied.rows_added),
            updated=applied.rows_updated,
            cells_updated=applied.cells_updated,
            deleted=applied.rows_deleted,
            unchanged=plan.unchanged,
            not_added=plan.not_added,
            not_updated=plan.not_updated,
            failed=plan.blocked_by_duplicates + len(failed_rows) + len(applied.failed_keys("delete")),
            duplicate_keys_in_list=len(plan.duplicate_keys),
            resent=applied.resent_rows,
            copies_removed=applied.copies_removed,
            list_rows=plan.list_rows,
            verified=verification.verified,
            drift=len(verification.drift),
            service_forms=verification.service_forms,
            unconfirmed=len(verification.unconfirmed),
            **Ledger.counts(plan.ledger),
            rereads=plan.rereads,
            requests={kind: applied.requests[kind] for kind in (ADD_ROWS, UPDATE_CELLS, DELETE_ROWS)},
            failure_reasons=reasons,
            drift_reasons=verification.drift.values(),
            isolation_requests=applied.isolation_requests,
            table_id=self.table_id,
            shard=None if self.shard is None else str(self.shard),
            key_column=self.key_column,
            mode=self.mode,
            delete_missing=self.delete_missing,
            dry_run=self.settings.dry_run,
            normalization_version=extract.normalization_version,
            plan_path=files.plan_path,
            rejects_path=files.rejects_path,
            state=files.state,
            unconfirmed_reasons=verification.unconfirmed_reasons,
            steady_read=plan.steady_read,
            torn_reasons=plan.torn_reasons,
            planned={
                "add_rows": len(plan.additions),
                "update_cells": len(plan.changes),
                "update_rows": plan.changed_rows,
                "delete_rows": len(plan.removals),
            },
            read_requests=self.read_requests + applied.requests[GET_ROWS] + verification.requests,
        )
