"""Reading back the rows a plan touched, and checking every write against what the plan meant."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from listsync.sync.rows.apply import ApplyOutcome
from listsync.sync.rows.cells import cell_values_equal
from listsync.sync.rows.plan import CellChange, CurrentRow, RowsPlan
from listsync.sync.rows.read import ROWS_PAGE_SIZE, current_row, read_current_rows

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient


#: Row ids asked for in one GET rows (``rowIds=``), short enough for any URL limit.
ROW_IDS_PER_READ = 100


@dataclass
class RowsVerification:
    """What re-reading the rows a plan touched showed.

    :ivar verified: writes the re-read confirms (acknowledged ones, and unknown ones found applied).
    :ivar drift: one line per acknowledged write the re-read contradicts.
    :ivar requests: GET rows requests the re-read took.
    """

    verified: int = 0
    drift: list[str] = field(default_factory=list)
    requests: int = 0


def verify_rows(
    plan: RowsPlan,
    outcome: ApplyOutcome,
    client: ListSyncClient,
    table_id: str,
    normalize_key: Callable[[Any], str | None],
) -> RowsVerification:
    """Re-read the rows the plan touched and check every write against the plan's intent.

    Rows whose ids are known are read by id (``rowIds=``, the documented mode); added rows whose
    ids the service did not return are found by key, one GET each, or, when there are more of
    them than pages of the List, by one read of the List. An acknowledged write the List
    contradicts is drift; a write of unknown outcome is settled: found applied, it is counted as
    written, else it fails with its reason. An added key the List holds twice is drift too.
    """
    verification = RowsVerification()
    key_column = plan.key_column
    added = {key: outcome.row_ids.get(key) for key in outcome.rows_added}
    unknown_changes, outcome.unknown_changes = outcome.unknown_changes, []
    unknown_removals, outcome.unknown_removals = outcome.unknown_removals, []
    ids = {row_id for row_id in added.values() if row_id}
    ids.update(change.row_id for change in [*outcome.written_changes, *(c for c, _ in unknown_changes)])
    ids.update(removal.row_id for removal in [*outcome.written_removals, *(r for r, _ in unknown_removals)])
    if not ids and not added:
        return verification
    rows, verification.requests = _rows_by_id(client, table_id, sorted(ids))
    by_key: dict[str, list[CurrentRow]] = {}
    unplaced = [key for key, row_id in added.items() if not row_id]
    if len(unplaced) > max(1, -(-plan.list_rows // ROWS_PAGE_SIZE)):
        everything, reads = read_current_rows(client, table_id, key_column)
        verification.requests += reads
        keyed = (row for row in everything if row.row_id not in rows)
        for row in [*rows.values(), *keyed]:
            by_key.setdefault(normalize_key(row.cells.get(key_column)) or "", []).append(row)
    else:
        for row in rows.values():
            by_key.setdefault(normalize_key(row.cells.get(key_column)) or "", []).append(row)
        for key in unplaced:
            verification.requests += 1
            found = client.get_rows(table_id, column_id=key_column, operator="eq", query=key).rows
            by_key[key] = [
                current_row(row)
                for row in found
                if normalize_key(current_row(row).cells.get(key_column)) == key
            ]

    def check(problem: str | None, what: str) -> None:
        if problem is None:
            verification.verified += 1
        else:
            verification.drift.append(f"{what}: {problem}")

    additions = {addition.key: addition for addition in plan.additions}
    for key, row_id in added.items():
        holders = [rows[row_id]] if row_id and row_id in rows else by_key.get(key, [])
        if len(by_key.get(key, [])) > 1:
            check(f"the List holds the key in {len(by_key[key])} rows", f"add of {key!r}")
        elif not holders:
            check("not in the List", f"add of {key!r}")
        else:
            check(_cells_differ(additions[key].cells, holders[0]), f"add of {key!r}")
    for change in outcome.written_changes:
        check(_change_differs(change, rows), f"update of {change.key!r}")
    for removal in outcome.written_removals:
        check("still in the List" if removal.row_id in rows else None, f"delete of {removal.key!r}")
    for change, reason in unknown_changes:
        if _change_differs(change, rows) is None:
            verification.verified += 1
            outcome.cells_updated += 1
            outcome.written_changes.append(change)
        else:
            outcome.failures.append(
                ("update", change.key, f"outcome unknown ({reason}), and the List does not show it applied")
            )
    for removal, reason in unknown_removals:
        if removal.row_id in rows:
            outcome.failures.append(
                ("delete", removal.row_id, f"outcome unknown ({reason}), and the row is still in the List")
            )
        else:
            verification.verified += 1
            outcome.rows_deleted += 1
            outcome.written_removals.append(removal)
    outcome.count_updated_rows()
    return verification


def _rows_by_id(
    client: ListSyncClient, table_id: str, row_ids: Sequence[str]
) -> tuple[dict[str, CurrentRow], int]:
    """The rows of ``row_ids`` that exist, by id, and the GET requests it took.

    Ids not answered are asked again (a service may cap the answer) until an answer brings none.
    """
    found: dict[str, CurrentRow] = {}
    requests = 0
    for start in range(0, len(row_ids), ROW_IDS_PER_READ):
        pending = list(row_ids[start : start + ROW_IDS_PER_READ])
        while pending:
            requests += 1
            answered = [row for row in client.get_rows(table_id, row_ids=pending).rows if row.id in pending]
            found.update((row.id, current_row(row)) for row in answered)
            if not answered:
                break
            pending = [row_id for row_id in pending if row_id not in found]
    return found, requests


def _cells_differ(wanted: Mapping[str, Any], row: CurrentRow) -> str | None:
    """How the row's cells differ from ``wanted``; a value the List stores in another form and shows
    as written (an enum label stored as its key) is no difference."""
    for column, value in wanted.items():
        current = row.cells.get(column)
        if not (cell_values_equal(value, current) or cell_values_equal(value, row.shown.get(column))):
            return f"column {column!r} is {current!r}, expected {value!r}"
    return None


def _change_differs(change: CellChange, rows: Mapping[str, CurrentRow]) -> str | None:
    row = rows.get(change.row_id)
    if row is None:
        return f"row {change.row_id} is not in the List"
    return _cells_differ({change.column_id: change.after}, row)
