"""Reading back the rows a plan touched, and checking every write against what the plan meant."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from listsync.sync.fan_out import fan_out
from listsync.sync.forms import learn_cell_form, merged_forms
from listsync.sync.rows.apply import ApplyOutcome
from listsync.sync.rows.cells import cell_values_equal
from listsync.sync.rows.diff import row_digests
from listsync.sync.rows.list_rows import CurrentRow
from listsync.sync.rows.plan import CellChange, RowRemoval, RowsPlan
from listsync.sync.rows.read import ROWS_PAGE_SIZE, current_row, read_current_rows
from listsync.sync.steps import MAX_FAILURE_REASONS, read_back_rounds

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient


_log = logging.getLogger(__name__)

#: Row ids asked for in one GET rows (``rowIds=``), short enough for any URL limit.
ROW_IDS_PER_READ = 100


@dataclass
class RowsVerification:
    """What re-reading the rows a plan touched showed.

    :ivar verified: writes the re-read confirms (acknowledged ones, and unknown ones found applied).
    :ivar drift: ``(kind, key)`` → a line, per acknowledged write the re-read contradicts.
    :ivar requests: GET rows requests the re-read took.
    :ivar unconfirmed: acknowledged writes the List did not show within the verify timeout, by
        key (row key; a deleted row's key) → kind (``add``, ``update``, ``delete``).
    :ivar unconfirmed_reasons: what was not shown, one line each (the first few).
    :ivar seen: key → the digest of the row's cells as shown, for rows added or updated whose
        every write the List shows (:func:`~listsync.sync.rows.diff.row_digests`).
    :ivar service_forms: writes the List shows in a form of its own: text in a learned class of
        form, a number in another notation, an enum label as its key.
    :ivar forms: column → the classes of form learned from them (:mod:`listsync.sync.forms`).
    """

    verified: int = 0
    drift: dict[tuple[str, str], str] = field(default_factory=dict)
    requests: int = 0
    unconfirmed: dict[str, str] = field(default_factory=dict)
    unconfirmed_reasons: list[str] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    service_forms: int = 0
    forms: dict[str, list[str]] = field(default_factory=dict)


def verify_rows(
    plan: RowsPlan,
    outcome: ApplyOutcome,
    client: ListSyncClient,
    table_id: str,
    normalize_key: Callable[[Any], str | None],
    *,
    verify_timeout: float = 0.0,
) -> RowsVerification:
    """Re-read the rows the plan touched and check every write against the plan's intent.

    Rows whose ids are known are read by id (``rowIds=``, the documented mode); added rows whose
    ids the service did not return are found by key, one GET each, or, when there are more of
    them than pages of the List, by one read of the List. A write the List does not show yet (a
    row absent, a cell at its old value, a deleted row present) is read again, with growing
    pauses, until it shows or ``verify_timeout`` seconds have passed; then an acknowledged one is
    ``unconfirmed``. A written value shown in the service's own form counts in
    ``service_forms``, and a text cell's form is learned for its column. An acknowledged write
    the List contradicts otherwise is drift; a write of unknown outcome is settled: found
    applied, it is counted as written, else it fails with its reason. An added key the List
    holds twice is drift too.
    """
    verification = RowsVerification()
    unknown_changes, outcome.unknown_changes = outcome.unknown_changes, []
    unknown_removals, outcome.unknown_removals = outcome.unknown_removals, []
    read = _ReadBack(plan, outcome, client, table_id, normalize_key=normalize_key, verification=verification)
    read.adds = {key: outcome.row_ids.get(key) for key in outcome.rows_added}
    read.changes = [(change, None) for change in outcome.written_changes] + list(unknown_changes)
    read.removals = [(removal, None) for removal in outcome.written_removals] + list(unknown_removals)
    outcome.written_changes, outcome.written_removals = [], []
    if not (read.adds or read.changes or read.removals):
        return verification
    for _round in read_back_rounds(client, verify_timeout, read.waiting, "rows writes"):
        read.round()
    read.give_up(verify_timeout)
    verification.forms = merged_forms(*read.learned)
    outcome.count_updated_rows()
    if plan.ledger is not None:
        read.digest_shown(plan.ledger.columns)
    return verification


class _ReadBack:
    """The writes a rows read back still waits for, and one round of reading them."""

    def __init__(
        self,
        plan: RowsPlan,
        outcome: ApplyOutcome,
        client: ListSyncClient,
        table_id: str,
        *,
        normalize_key: Callable[[Any], str | None],
        verification: RowsVerification,
    ) -> None:
        self.plan, self.outcome, self.client, self.table_id = plan, outcome, client, table_id
        self.normalize_key, self.verification = normalize_key, verification
        self.additions = {addition.key: addition for addition in plan.additions}
        #: Added keys not shown yet → their row id when known.
        self.adds: dict[str, str | None] = {}
        #: Cell updates and row deletes not shown yet, with the reason their outcome is unknown
        #: (None: acknowledged).
        self.changes: list[tuple[CellChange, str | None]] = []
        self.removals: list[tuple[RowRemoval, str | None]] = []
        #: What is not shown yet, by write.
        self.problems: dict[tuple[str, str], str] = {}
        #: Rows shown, by key, and the keys whose update the List does not show.
        self.shown: dict[str, CurrentRow] = {}
        self.unshown: set[str] = set()
        #: The forms each write shown in the service's own form taught.
        self.learned: list[dict[str, tuple[str, ...]]] = []

    def waiting(self) -> bool:
        return bool(self.adds or self.changes or self.removals)

    def round(self) -> None:
        ids = {row_id for row_id in self.adds.values() if row_id}
        ids.update(change.row_id for change, _ in self.changes)
        ids.update(removal.row_id for removal, _ in self.removals)
        rows, requests = _rows_by_id(self.client, self.table_id, sorted(ids))
        self.verification.requests += requests
        by_key = self._added_rows(rows)
        self._check_adds(rows, by_key)
        self._check_changes(rows)
        self._check_removals(rows)

    def _added_rows(self, rows: dict[str, CurrentRow]) -> dict[str, list[CurrentRow]]:
        """The rows holding each added key: those read by id, and those found by key."""
        key_column, normalize_key = self.plan.key_column, self.normalize_key
        by_key: dict[str, list[CurrentRow]] = {}
        unplaced = [key for key, row_id in self.adds.items() if not row_id]
        if len(unplaced) > max(1, -(-self.plan.list_rows // ROWS_PAGE_SIZE)):
            sought = self.adds.keys()  # every added key: one the List holds twice is drift
            keyed, reads = read_current_rows(
                self.client,
                self.table_id,
                key_column,
                keep=lambda row: (
                    row.row_id not in rows and (normalize_key(row.cells.get(key_column)) or "") in sought
                ),
            )
            self.verification.requests += reads
            for row in [*rows.values(), *keyed]:
                by_key.setdefault(normalize_key(row.cells.get(key_column)) or "", []).append(row)
            return by_key
        for row in rows.values():
            by_key.setdefault(normalize_key(row.cells.get(key_column)) or "", []).append(row)
        for key in unplaced:
            self.verification.requests += 1
            found = self.client.get_rows(self.table_id, column_id=key_column, operator="eq", query=key).rows
            by_key[key] = [
                current_row(row)
                for row in found
                if normalize_key(current_row(row).cells.get(key_column)) == key
            ]
        return by_key

    def _check_adds(self, rows: dict[str, CurrentRow], by_key: dict[str, list[CurrentRow]]) -> None:
        for key, row_id in list(self.adds.items()):
            holders = [rows[row_id]] if row_id and row_id in rows else by_key.get(key, [])
            if not holders:
                self.problems["add", key] = "not in the List"
                continue
            del self.adds[key]
            if len(by_key.get(key, [])) > 1:
                self._check(f"the List holds the key in {len(by_key[key])} rows", "add", key)
                continue
            shown = _shown(self.additions[key].cells, holders[0])
            self._check(shown.problem, "add", key)
            if shown.problem is None:
                self._learn(shown)
                self.shown[key] = holders[0]

    def _check_changes(self, rows: Mapping[str, CurrentRow]) -> None:
        waiting = []
        for change, reason in self.changes:
            row = rows.get(change.row_id)
            shown = (
                _Shown(f"row {change.row_id} is not in the List")
                if row is None
                else _shown({change.column_id: change.after}, row)
            )
            problem = shown.problem
            if (
                problem is not None
                and row is not None
                and _shown({change.column_id: change.before}, row).problem is None
            ):
                self.problems["update", change.key] = (
                    f"column {change.column_id!r} is still {change.before!r}"
                )
                waiting.append((change, reason))
                continue
            if reason is None:
                self._check(problem, "update", change.key)
                self.outcome.written_changes.append(change)
            elif problem is None:
                self.verification.verified += 1
                self.outcome.cells_updated += 1
                self.outcome.written_changes.append(change)
            else:
                self.outcome.failures.append(
                    (
                        "update",
                        change.key,
                        f"outcome unknown ({reason}), and the List does not show it applied",
                    )
                )
            if problem is None and row is not None:
                self._learn(shown)
                self.shown[change.key] = row
            else:
                self.unshown.add(change.key)
        self.changes = waiting

    def _learn(self, shown: _Shown) -> None:
        """Count a write shown in the service's own form, and learn the text forms it shows."""
        if shown.own_form:
            self.verification.service_forms += 1
        if shown.forms:
            self.learned.append(shown.forms)

    def _check_removals(self, rows: Mapping[str, CurrentRow]) -> None:
        waiting = []
        for removal, reason in self.removals:
            if removal.row_id in rows:
                self.problems["delete", removal.key] = "still in the List"
                waiting.append((removal, reason))
                continue
            self.verification.verified += 1
            self.outcome.written_removals.append(removal)
            if reason is not None:
                self.outcome.rows_deleted += 1
        self.removals = waiting

    def _check(self, problem: str | None, kind: str, key: str) -> None:
        if problem is None:
            self.verification.verified += 1
        else:
            self.verification.drift[kind, key] = f"{kind} of {key!r}: {problem}"

    def give_up(self, verify_timeout: float) -> None:
        """Settle what the List still does not show: a write of unknown outcome failed (it may
        never have been applied), an acknowledged one is unconfirmed."""
        verification, outcome = self.verification, self.outcome
        unconfirmed: list[tuple[str, str]] = [("add", key) for key in self.adds]
        for change, reason in self.changes:
            if reason is None:
                unconfirmed.append(("update", change.key))
                outcome.written_changes.append(change)
            else:
                outcome.failures.append(
                    (
                        "update",
                        change.key,
                        f"outcome unknown ({reason}), and the List does not show it applied",
                    )
                )
            self.unshown.add(change.key)
        for removal, reason in self.removals:
            if reason is None:
                unconfirmed.append(("delete", removal.key))
                outcome.written_removals.append(removal)
            else:
                outcome.failures.append(
                    (
                        "delete",
                        removal.row_id,
                        f"outcome unknown ({reason}), and the row is still in the List",
                    )
                )
        for kind, key in unconfirmed:
            verification.unconfirmed[key] = kind
            if len(verification.unconfirmed_reasons) < MAX_FAILURE_REASONS:
                problem = self.problems.get((kind, key), "not shown")
                verification.unconfirmed_reasons.append(
                    f"{kind} of {key!r}: {problem} after {verify_timeout:g} s"
                )
        if unconfirmed:
            _log.warning(
                "%d acknowledged rows writes are not shown by the List after %g s (verify_timeout): "
                "counted unconfirmed, not sent again by a run within the visibility window",
                len(unconfirmed),
                verify_timeout,
            )

    def digest_shown(self, columns: list[str]) -> None:
        """The digests of the rows whose every write the List shows, for the next state."""
        shown = {key: row for key, row in self.shown.items() if key not in self.unshown}
        rows = list(shown.values())
        digests = row_digests(
            len(rows),
            [functools.partial(_cells_in, rows, column) for column in columns],
        )
        self.verification.seen = dict(zip(shown, digests.tolist(), strict=True))


def _cells_in(rows: Sequence[CurrentRow], column: str, start: int, stop: int) -> list[Any]:
    return [row.cells.get(column) for row in rows[start:stop]]


def _rows_by_id(
    client: ListSyncClient, table_id: str, row_ids: Sequence[str]
) -> tuple[dict[str, CurrentRow], int]:
    """The rows of ``row_ids`` that exist, by id, and the GET requests it took; the reads of
    :data:`ROW_IDS_PER_READ` ids go several at once (the client's ``max_in_flight``).

    Ids not answered are asked again (a service may cap the answer) until an answer brings none.
    """

    def read(start: int) -> tuple[dict[str, CurrentRow], int]:
        found: dict[str, CurrentRow] = {}
        requests = 0
        pending = list(row_ids[start : start + ROW_IDS_PER_READ])
        while pending:
            requests += 1
            answered = [row for row in client.get_rows(table_id, row_ids=pending).rows if row.id in pending]
            found.update((row.id, current_row(row)) for row in answered)
            if not answered:
                break
            pending = [row_id for row_id in pending if row_id not in found]
        return found, requests

    found: dict[str, CurrentRow] = {}
    requests = 0
    starts = range(0, len(row_ids), ROW_IDS_PER_READ)
    for part, asked in fan_out(read, starts, at_once=client.max_in_flight):
        found.update(part)
        requests += asked
    return found, requests


@dataclass(frozen=True)
class _Shown:
    """How a row shows the cells written to it.

    :ivar problem: how a cell differs from what was written (None: each is shown, in some form).
    :ivar forms: column → the classes of form a text cell is shown in
        (:func:`~listsync.sync.forms.learn_cell_form`).
    :ivar own_form: some cell is shown in a form of the service's own: a text form, a number in
        another notation (``10.0`` for ``10``), an enum label stored as its key.
    """

    problem: str | None = None
    forms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    own_form: bool = False


def _shown(wanted: Mapping[str, Any], row: CurrentRow) -> _Shown:
    """How ``row`` shows the cells ``wanted`` (the values sent)."""
    forms: dict[str, tuple[str, ...]] = {}
    own_form = False
    for column, value in wanted.items():
        current = row.cells.get(column)
        if cell_values_equal(value, current):
            own_form |= type(value) is not type(current)
            continue
        if cell_values_equal(value, row.shown.get(column)):
            own_form = True  # shown as written, stored otherwise: an enum label as its key
            continue
        form = learn_cell_form(value, current)
        if form is None:
            return _Shown(f"column {column!r} is {current!r}, expected {value!r}")
        forms[column] = form
    return _Shown(None, forms, own_form or bool(forms))
