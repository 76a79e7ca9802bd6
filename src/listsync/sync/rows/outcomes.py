"""The rows upsert's lines of the outcomes file (:mod:`listsync.sync.outcomes`): the rows whose
write did not end as planned, in plan order (the plan file's: additions, updated rows, deletes,
then the keys several List rows hold)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from listsync.sync.outcomes import outcome_line
from listsync.sync.rows.apply import ApplyOutcome
from listsync.sync.rows.plan import RowsPlan
from listsync.sync.rows.verify import RowsVerification


def rows_outcomes(
    plan: RowsPlan,
    applied: ApplyOutcome,
    verification: RowsVerification,
    *,
    numbered: bool,
    verify_timeout: float,
) -> Iterator[dict[str, Any]]:
    """The outcomes file's lines of a rows upsert: one per row and write (an update failed in
    several cells is one line, with the first cell's reason). A failed delete of an extra copy a
    lost add left is not in the plan: it comes last, without a key.

    :param numbered: a plan file was written: each line names its write's line in it.
    """
    # (kind, key) → reason; a delete's failure is keyed by its row id.
    failures: dict[tuple[str, str], str] = {}
    for kind, key, reason in applied.failures:
        failures.setdefault((kind, key), reason)
    if not (failures or verification.drift or verification.unconfirmed or plan.blocked_by_duplicates):
        return

    def line_of(number: int) -> int | None:
        return number if numbered else None

    def outcome(kind: str, key: str, row_id: str | None, number: int) -> Iterator[dict[str, Any]]:
        record = {"key": key, "row_id": row_id}
        reason = failures.pop((kind, row_id if kind == "delete" and row_id else key), None)
        if reason is not None:
            yield outcome_line("failed", kind, record, line_of(number), reason)
        elif (kind, key) in verification.drift:
            problem = verification.drift[kind, key].removeprefix(f"{kind} of {key!r}: ")
            gone = kind == "update" and problem.endswith("is not in the List")
            yield outcome_line("not_found" if gone else "drifted", kind, record, line_of(number), problem)
        elif verification.unconfirmed.get(key) == kind:
            message = f"not shown by the List after {verify_timeout:g} s"
            yield outcome_line("unconfirmed", kind, record, line_of(number), message)

    for number, addition in enumerate(plan.additions, 1):
        yield from outcome("add", addition.key, applied.row_ids.get(addition.key), number)
    # The plan file holds an update a row, in the order of the row's first change.
    updated: dict[str, str] = {}
    for change in plan.changes:
        updated.setdefault(change.row_id, change.key)
    first = len(plan.additions) + 1
    for number, (row_id, key) in enumerate(updated.items(), first):
        yield from outcome("update", key, row_id, number)
    first += len(updated)
    del updated
    for number, removal in enumerate(plan.removals, first):
        yield from outcome("delete", removal.key, removal.row_id, number)
    first += len(plan.removals)
    for number, duplicate in enumerate(plan.duplicate_keys, first):
        if duplicate.in_extract:
            record = {"key": duplicate.key, "row_id": None}
            yield outcome_line("refused", "write", record, line_of(number), duplicate.reason)
    for (kind, key), reason in failures.items():
        yield outcome_line("failed", kind, {"key": None, "row_id": key}, None, reason)
