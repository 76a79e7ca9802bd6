"""Applying a rows plan: row adds, cell updates and row deletes, chunked; adds whose answer was lost are
re-read before they are sent again."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from listsync.client.models import CellUpdate, RowAdd
from listsync.client.write_items import Keyed, WriteReport
from listsync.client.writers import write_cell_updates, write_row_adds, write_row_deletes
from listsync.errors import ListSyncError
from listsync.sync.fan_out import fan_out
from listsync.sync.rows.plan import CellChange, RowAddition, RowRemoval, RowsPlan
from listsync.sync.settings import ADD_ROWS, DELETE_ROWS, UPDATE_CELLS
from listsync.sync.settings import rows_chunk_sizes as chunk_sizes
from listsync.sync.steps import ProgressLogger, wait_for_late_writes

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient

_log = logging.getLogger(__name__)


#: Re-reads of row adds of unknown outcome, counted in summaries beside the write kinds
#: (:data:`~listsync.sync.settings.ADD_ROWS`, ``UPDATE_CELLS``, ``DELETE_ROWS``).
GET_ROWS = "get_rows"

#: Sends of one row add in all, the first included, while its outcome stays unknown; then it fails.
MAX_ADD_ATTEMPTS = 3


@dataclass
class ApplyOutcome:
    """What applying a plan did.

    :ivar rows_added: keys whose row now exists (``row_ids`` has the id when it is known).
    :ivar failures: one entry per item not applied: ``(kind, key, reason)``, ``kind`` being
        ``add``, ``update`` or ``delete``; an update failure names the key once per cell.
    :ivar requests: requests sent by kind (:data:`ADD_ROWS`, :data:`UPDATE_CELLS`,
        :data:`DELETE_ROWS`, and :data:`GET_ROWS` for re-reads of row adds of unknown outcome).
    :ivar resent_rows: rows sent again after a re-read found them absent.
    :ivar written_changes: cell updates the service acknowledged.
    :ivar written_removals: row deletes the service acknowledged (or found already done).
    :ivar unknown_changes: cell updates whose outcome is unknown, with the reason (settled by
        :func:`verify_rows`).
    :ivar unknown_removals: row deletes whose outcome is unknown, likewise.
    :ivar isolation_requests: write requests spent taking apart requests the service refused
        whole, so that each refused row or cell failed alone.
    :ivar copies_removed: extra rows that adds of unknown outcome turned out to have left (the
        request landed more than once), deleted down to one per key.
    """

    rows_added: list[str] = field(default_factory=list)
    row_ids: dict[str, str] = field(default_factory=dict)
    cells_updated: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    resent_rows: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    written_changes: list[CellChange] = field(default_factory=list)
    written_removals: list[RowRemoval] = field(default_factory=list)
    unknown_changes: list[tuple[CellChange, str]] = field(default_factory=list)
    unknown_removals: list[tuple[RowRemoval, str]] = field(default_factory=list)
    isolation_requests: int = 0
    copies_removed: int = 0
    requests: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((ADD_ROWS, UPDATE_CELLS, DELETE_ROWS, GET_ROWS), 0)
    )

    def failed_keys(self, kind: str) -> set[str]:
        """The keys (row ids for deletes) of ``kind`` that failed."""
        return {key for failed_kind, key, _ in self.failures if failed_kind == kind}

    def count_updated_rows(self) -> None:
        """Set ``rows_updated``: rows whose every planned cell update is known written."""
        unsettled = self.failed_keys("update") | {change.key for change, _ in self.unknown_changes}
        self.rows_updated = len({c.row_id for c in self.written_changes if c.key not in unsettled})


def apply_rows_plan(
    plan: RowsPlan,
    client: ListSyncClient,
    table_id: str,
    *,
    chunk_size: int | Mapping[str, int] | None = None,
    progress: ProgressLogger | None = None,
) -> ApplyOutcome:
    """Send a plan's writes: row adds, then cell updates, then row deletes (last, so a run that
    stops midway has removed nothing it was about to replace).

    A failing chunk never stops the rest; every item not applied is in ``outcome.failures``
    with its reason. Row adds whose request may have been applied are re-read by key and only
    the absent ones are sent again (at most :data:`MAX_ADD_ATTEMPTS` sends in all).

    :param chunk_size: items per request: a number for every kind, or a mapping by kind
        (:data:`ADD_ROWS`, :data:`UPDATE_CELLS`, :data:`DELETE_ROWS`); defaults to the A21 caps.
    :param progress: advanced after each request's items; by default, one that logs every 10 %.
    """
    sizes = chunk_sizes(chunk_size)
    tracker = progress or ProgressLogger(
        len(plan.additions) + len(plan.changes) + len(plan.removals), what=f"rows upsert into {table_id}"
    )
    applier = _Applier(client, table_id, plan.key_column, tracker)
    applier.add_rows(plan.additions, sizes[ADD_ROWS])
    applier.update_cells(plan.changes, sizes[UPDATE_CELLS])
    applier.delete_rows(plan.removals, sizes[DELETE_ROWS])
    return applier.outcome


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    # One writer call per request-sized batch, so progress is logged as requests complete.
    for start in range(0, len(items), size):
        yield items[start : start + size]


class _Applier:
    """Sends one plan's writes through the client's chunked writers, recording an ApplyOutcome."""

    def __init__(
        self, client: ListSyncClient, table_id: str, key_column: str, progress: ProgressLogger
    ) -> None:
        self.client = client
        self.table_id = table_id
        self.key_column = key_column
        self.progress = progress
        self.outcome = ApplyOutcome()

    def add_rows(self, additions: Sequence[RowAddition], size: int) -> None:
        outcome = self.outcome
        batches = list(_batches(additions, size))
        # First sends several at once; the rare resends after a lost answer go one by one.
        firsts = fan_out(
            functools.partial(self._send_adds, size=size), batches, at_once=self.client.max_in_flight
        )
        for batch, first in zip(batches, firsts, strict=True):
            pending: list[RowAddition] = list(batch)
            report = first
            for attempt in range(1, MAX_ADD_ATTEMPTS + 1):
                if attempt > 1:
                    report = self._send_adds(pending, size=size)
                    outcome.resent_rows += len(pending)
                outcome.requests[ADD_ROWS] += report.requests
                outcome.isolation_requests += report.isolation_requests
                outcome.rows_added.extend(report.written)
                outcome.row_ids.update(report.row_ids)
                outcome.failures.extend(("add", key, reason) for key, reason in report.failed.items())
                if not report.outcome_unknown:
                    break
                wait_for_late_writes(self.client, report.settle_after)
                pending = self._absent_after_reread(pending, report.outcome_unknown)
                if not pending:
                    break
                if attempt == MAX_ADD_ATTEMPTS:
                    outcome.failures.extend(
                        (
                            "add",
                            row.key,
                            f"outcome unknown after {attempt} sends: {report.outcome_unknown[row.key]}",
                        )
                        for row in pending
                    )
            self.progress.advance(len(batch), failed=len(outcome.failures))

    def _send_adds(self, rows: Sequence[RowAddition], *, size: int) -> WriteReport:
        return write_row_adds(
            self.client,
            self.table_id,
            [Keyed(row.key, RowAdd(cells=row.cells)) for row in rows],
            chunk_size=size,
        )

    def _absent_after_reread(
        self, sent: Sequence[RowAddition], unknown: Mapping[str, str]
    ) -> list[RowAddition]:
        """Re-read each row add of unknown outcome by its key; record those found as added and
        return those absent, the only ones safe to send again."""
        absent = []
        for row in sent:
            if row.key not in unknown:
                continue
            self.outcome.requests[GET_ROWS] += 1
            try:
                found = self.client.get_rows(
                    self.table_id, column_id=self.key_column, operator="eq", query=row.key
                ).rows
            except ListSyncError as exc:
                # Neither present nor absent is known: sending again could duplicate the row.
                self.outcome.failures.append(
                    ("add", row.key, f"outcome unknown ({unknown[row.key]}) and the re-read failed: {exc}")
                )
                continue
            if found:
                self.outcome.rows_added.append(row.key)
                self.outcome.row_ids[row.key] = found[0].id
                self._delete_copies(row.key, [copy.id for copy in found[1:]])
            else:
                absent.append(row)
        return absent

    def _delete_copies(self, key: str, row_ids: list[str]) -> None:
        """Delete the extra rows a lost add left for ``key`` (a List with unique keys refuses
        them, so any found here are on a List without): the first is kept."""
        if not row_ids:
            return
        _log.warning(
            "Key %r was added %d times by sends whose answers were lost; keeping one", key, len(row_ids) + 1
        )
        report = write_row_deletes(self.client, self.table_id, [Keyed(row_id, row_id) for row_id in row_ids])
        self.outcome.requests[DELETE_ROWS] += report.requests
        self.outcome.copies_removed += len(report.written)
        self.outcome.failures.extend(
            ("delete", row_id, f"a second copy of {key!r} a lost add left: {reason}")
            for row_id, reason in {**report.failed, **report.outcome_unknown}.items()
        )

    def update_cells(self, changes: Sequence[CellChange], size: int) -> None:
        outcome = self.outcome
        starts = range(0, len(changes), size)

        def send(start: int) -> WriteReport:
            # Writer keys are positions in ``changes``: a row key alone would not name the cell.
            items = [
                Keyed(str(start + offset), CellUpdate(rowId=c.row_id, columnId=c.column_id, value=c.after))
                for offset, c in enumerate(changes[start : start + size])
            ]
            return write_cell_updates(self.client, self.table_id, items, chunk_size=size)

        for start, report in zip(
            starts, fan_out(send, starts, at_once=self.client.max_in_flight), strict=True
        ):
            batch = changes[start : start + size]
            outcome.requests[UPDATE_CELLS] += report.requests
            outcome.isolation_requests += report.isolation_requests
            outcome.cells_updated += len(report.written)
            outcome.written_changes.extend(changes[int(position)] for position in report.written)
            outcome.unknown_changes.extend(
                (changes[int(position)], reason) for position, reason in report.outcome_unknown.items()
            )
            for position, reason in report.failed.items():
                change = changes[int(position)]
                outcome.failures.append(("update", change.key, f"column {change.column_id!r}: {reason}"))
            self.progress.advance(len(batch), failed=len(outcome.failures))
        outcome.count_updated_rows()

    def delete_rows(self, removals: Sequence[RowRemoval], size: int) -> None:
        outcome = self.outcome
        batches = list(_batches(removals, size))

        def send(batch: Sequence[RowRemoval]) -> WriteReport:
            return write_row_deletes(
                self.client, self.table_id, [Keyed(row.row_id, row.row_id) for row in batch], chunk_size=size
            )

        for batch, report in zip(
            batches, fan_out(send, batches, at_once=self.client.max_in_flight), strict=True
        ):
            by_id = {row.row_id: row for row in batch}
            outcome.requests[DELETE_ROWS] += report.requests
            outcome.isolation_requests += report.isolation_requests
            outcome.rows_deleted += len(report.written)
            outcome.written_removals.extend(by_id[row_id] for row_id in report.written)
            outcome.unknown_removals.extend(
                (by_id[row_id], reason) for row_id, reason in report.outcome_unknown.items()
            )
            outcome.failures.extend(("delete", row_id, reason) for row_id, reason in report.failed.items())
            self.progress.advance(len(batch), failed=len(outcome.failures))
