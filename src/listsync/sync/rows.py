"""Upsert of warehouse rows into a List: changed cells only.

The service has no row upsert, so one is built from its four row operations. :func:`upsert_rows`
runs the whole flow (the operator and the ``listsync upsert-rows`` command call it)::

    prepared = prepare_rows(frames, column_map, key_column, rejects=rejects)   # normalised, one per key
    current, reads = read_current_rows(client, table_id, key_column)          # GET rows, paged
    plan = plan_rows_upsert(prepared.rows.values(), current, key_column=...)  # pure: no I/O
    write_plan_file(plan_entries(plan), plan_path)                            # for review
    check_delete_safety(...)                        # a broken extract never wipes a List
    outcome = apply_rows_plan(plan, client, table_id)   # POST rows, PATCH cells, DELETE rows

A row is identified by the value of its ``key_column`` cell. The plan holds:

- additions: keys that are not in the List, sent as POST rows (cells that are null are left out);
- changes: one cell update per cell whose value differs, sent as PATCH cells chunked across rows;
- removals: rows whose key is not in the extract, only with ``delete_missing=True``;
- duplicate keys: keys held by more than one row of the List. Those rows are reported and left
  alone (which of them is "the" row would be a guess); extract rows with such a key are counted
  as failed, so a person removes the duplicates.

Values compare canonically (:func:`cell_values_equal`): numbers by value (``10 == 10.0``), strings
exactly, booleans only to booleans, dates and timestamps as ISO 8601 (``prepare_rows`` turns them
into ISO strings; a ``date``/``datetime`` given directly matches any ISO form of itself), objects
and arrays element by element with the same rules, i.e. as canonical JSON. The List side is always
a cell's ``value``, never its ``computedValue``. A null in the extract leaves the List's cell
alone unless ``overwrite_with_null=True``.

Row adds are not idempotent: when a POST rows chunk fails in a way that may have reached the
server (timeout, dropped connection, 5xx), :func:`apply_rows_plan` re-reads that chunk's keys
(GET rows with ``operator=eq``) and re-sends only the rows still absent, so a retry never creates
a duplicate row.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import numbers
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from listsync.client.errors import ListSyncError
from listsync.client.models import CellUpdate, Row, RowAdd
from listsync.client.paging import iter_offset_pages
from listsync.client.writers import (
    CELL_UPDATES_PER_REQUEST,
    ROW_DELETES_PER_REQUEST,
    ROWS_PER_REQUEST,
    Keyed,
)
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

if TYPE_CHECKING:
    import pandas as pd

    from listsync.client.client import ListSyncClient

__all__ = [
    "ADD_ROWS",
    "DELETE_ROWS",
    "GET_ROWS",
    "UPDATE_CELLS",
    "ApplyOutcome",
    "CellChange",
    "CurrentRow",
    "DuplicateKey",
    "RowAddition",
    "RowRemoval",
    "RowsPlan",
    "apply_rows_plan",
    "cell_values_equal",
    "chunk_sizes",
    "list_key_normalizer",
    "plan_entries",
    "plan_rows_upsert",
    "read_current_rows",
    "to_cell_value",
    "upsert_rows",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CurrentRow:
    """A row of the List as read: its id and each cell's ``value`` by column id.

    ``shown`` holds the cells' ``computedValue`` where it differs from the value (an enum's label
    for its key): what the List shows of a value written in that form.
    """

    row_id: str
    cells: Mapping[str, Any]
    shown: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class RowAddition:
    """A key missing from the List: its cells as JSON values, ready for POST rows."""

    key: str
    cells: dict[str, Any]


@dataclass(frozen=True)
class CellChange:
    """One cell to update: ``before`` is the List's value, ``after`` the JSON value to send."""

    key: str
    row_id: str
    column_id: str
    before: Any
    after: Any


@dataclass(frozen=True)
class RowRemoval:
    """A List row whose key is not in the extract (planned only with ``delete_missing``)."""

    key: str
    row_id: str


@dataclass(frozen=True)
class DuplicateKey:
    """A key held by several rows of the List; ``in_extract`` says whether an extract row was blocked."""

    key: str
    row_ids: tuple[str, ...]
    in_extract: bool


@dataclass
class RowsPlan:
    """What an upsert would do, and the counts its summary needs.

    ``unchanged`` counts extract rows whose cells all match; ``list_rows`` counts the rows read
    from the List (the denominator of the delete safety check).
    """

    key_column: str
    list_rows: int
    additions: list[RowAddition] = field(default_factory=list)
    changes: list[CellChange] = field(default_factory=list)
    removals: list[RowRemoval] = field(default_factory=list)
    duplicate_keys: list[DuplicateKey] = field(default_factory=list)
    unchanged: int = 0

    @property
    def changed_rows(self) -> int:
        """The number of List rows with at least one cell to update."""
        return len({change.row_id for change in self.changes})

    @property
    def blocked_by_duplicates(self) -> int:
        """The number of extract rows not written because their key has several rows in the List."""
        return sum(1 for duplicate in self.duplicate_keys if duplicate.in_extract)

    @property
    def has_writes(self) -> bool:
        """Whether applying the plan sends any write request."""
        return bool(self.additions or self.changes or self.removals)


def plan_rows_upsert(
    desired: Iterable[Mapping[str, Any]],
    current: Iterable[CurrentRow],
    *,
    key_column: str,
    delete_missing: bool = False,
    overwrite_with_null: bool = False,
    normalize_key: Callable[[Any], str | None] | None = None,
) -> RowsPlan:
    """Diff the prepared extract rows against the List's current rows.

    :param desired: extract rows as ``{column id: value}``, already prepared (mapped, normalised,
        one row per key). Values may be Python types (``Decimal``, ``date``, ``datetime``, dicts,
        lists); they are converted with :func:`to_cell_value` for sending.
    :param current: the List's rows, with the cells' ``value`` (see :class:`CurrentRow`).
    :param key_column: the List column id whose value identifies a row.
    :param delete_missing: plan a removal for each List row whose key is not in ``desired``.
    :param overwrite_with_null: a null in ``desired`` clears the List's cell; otherwise a null
        leaves the cell as it is.
    :param normalize_key: turns a key cell of the List into the form ``desired`` uses (for a
        domain key, the domain normaliser), so ``Acme.com`` in the List matches ``acme.com``;
        ``None`` (the result) means the cell cannot be a key. Defaults to ``str``. When the
        normalised key differs from the List's cell, the cell is updated like any other.
    :raises ValueError: a desired row without a key, or two desired rows with the same key.
    """
    to_key = normalize_key or _default_key
    rows_by_key: dict[str, list[CurrentRow]] = {}
    list_rows = 0
    for row in current:
        list_rows += 1
        key = to_key(row.cells.get(key_column))
        if key is not None:
            rows_by_key.setdefault(key, []).append(row)

    plan = RowsPlan(key_column=key_column, list_rows=list_rows)
    seen: set[str] = set()
    for position, cells in enumerate(desired):
        key = cells.get(key_column)
        if key is None or key == "":
            raise ValueError(
                f"extract row {position} has no value for the key column {key_column!r}; "
                "prepare the rows (prepare_rows rejects rows without a key) before planning"
            )
        key = str(key)
        if key in seen:
            raise ValueError(
                f"key {key!r} appears twice in the extract; prepare the rows (prepare_rows keeps "
                "one row per key) before planning"
            )
        seen.add(key)
        matches = rows_by_key.get(key)
        if not matches:
            plan.additions.append(RowAddition(key, _cells_to_add(cells, key)))
        elif len(matches) > 1:
            plan.duplicate_keys.append(DuplicateKey(key, tuple(r.row_id for r in matches), True))
        else:
            changes = _changed_cells(key, cells, matches[0], overwrite_with_null)
            if changes:
                plan.changes.extend(changes)
            else:
                plan.unchanged += 1

    for key, rows in rows_by_key.items():
        if key in seen:
            continue
        if len(rows) > 1:
            plan.duplicate_keys.append(DuplicateKey(key, tuple(r.row_id for r in rows), False))
        # Every row holding a key the extract lacks is missing, duplicates included: removing
        # them all is what was asked, not a guess between them.
        if delete_missing:
            plan.removals.extend(RowRemoval(key, row.row_id) for row in rows)
    return plan


def _default_key(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _cells_to_add(cells: Mapping[str, Any], key: str) -> dict[str, Any]:
    # A new row has nothing to overwrite: a null cell is simply not sent.
    return {
        column: _cell_value_for(key, column, value) for column, value in cells.items() if value is not None
    }


def _changed_cells(
    key: str, cells: Mapping[str, Any], row: CurrentRow, overwrite_with_null: bool
) -> list[CellChange]:
    changes = []
    for column, value in cells.items():
        if value is None and not overwrite_with_null:
            continue
        before = row.cells.get(column)
        if not cell_values_equal(value, before):
            changes.append(CellChange(key, row.row_id, column, before, _cell_value_for(key, column, value)))
    return changes


def _cell_value_for(key: str, column: str, value: Any) -> Any:
    try:
        return to_cell_value(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"row {key!r}, column {column!r}: {exc}") from exc


def to_cell_value(value: Any) -> Any:
    """Convert an extract value to the JSON value sent in a cell.

    ``Decimal`` and other numbers become ``int`` when integral (``Decimal("10.00")`` → ``10``),
    else ``float``; dates become ``YYYY-MM-DD``; timestamps become ISO 8601 in UTC with a ``Z``
    (naive ones are taken as UTC); mappings and sequences are converted element by element.

    :raises ValueError: a number that JSON cannot carry (NaN, infinity).
    :raises TypeError: a value of a type that has no JSON form.
    """
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Number):
        return _json_number(value)
    if isinstance(value, dt.datetime):
        return _as_utc(value).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): to_cell_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_cell_value(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars (bool_, int64, float64) unwrap to Python ones
        return to_cell_value(value.item())
    raise TypeError(f"a {type(value).__name__} value has no JSON form")


def _json_number(value: Any) -> int | float:
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a finite number")
        return int(value) if value == value.to_integral_value() else float(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{number} is not a finite number")
    return number


_SAME_TYPE_SCALARS = frozenset((str, int, float, bool))


def cell_values_equal(desired: Any, current: Any) -> bool:
    """Whether the List already holds ``desired`` (an extract value) in a cell whose value is ``current``.

    ``current`` is the cell's JSON ``value`` as read (``None`` for an empty or absent cell).
    Numbers compare by the value that would be sent (``10 == 10.0``, ``Decimal("1.50") == 1.5``);
    strings exactly; booleans only to booleans; a ``date`` to a ``YYYY-MM-DD`` string, a
    ``datetime`` to any ISO 8601 string of the same instant; mappings and sequences element by
    element, key order ignored.
    """
    # Fast path for the common case, a scalar read back as the type it was sent as: for these
    # types Python's equality is exactly the rules below (JSON holds no NaN).
    if type(desired) is type(current) and type(desired) in _SAME_TYPE_SCALARS:
        return bool(desired == current)
    if desired is None or current is None:
        return desired is None and current is None
    if isinstance(desired, dt.datetime):
        return isinstance(current, str) and _parse_instant(current) == _as_utc(desired)
    if isinstance(desired, dt.date):
        return isinstance(current, str) and current == desired.isoformat()
    if isinstance(desired, bool) or isinstance(current, bool):
        return isinstance(desired, bool) and isinstance(current, bool) and desired == current
    if isinstance(desired, numbers.Number):
        return isinstance(current, numbers.Number) and _json_number(desired) == current
    if isinstance(desired, str):
        return isinstance(current, str) and desired == current
    if isinstance(desired, Mapping):
        return (
            isinstance(current, Mapping)
            and {str(k) for k in desired} == set(current)
            and all(cell_values_equal(v, current[str(k)]) for k, v in desired.items())
        )
    if isinstance(desired, (list, tuple)):
        return (
            isinstance(current, Sequence)
            and not isinstance(current, str)
            and len(desired) == len(current)
            and all(cell_values_equal(d, c) for d, c in zip(desired, current, strict=True))
        )
    if hasattr(desired, "item"):
        return cell_values_equal(desired.item(), current)
    raise TypeError(f"a {type(desired).__name__} value has no JSON form")


def _as_utc(value: dt.datetime) -> dt.datetime:
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc)


def _parse_instant(text: str) -> dt.datetime | None:
    # fromisoformat before Python 3.11 does not read a trailing "Z".
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        parsed = dt.datetime.fromisoformat(candidate)
    except ValueError:
        return None
    return _as_utc(parsed)


# --- reading the List ------------------------------------------------------------------------

#: Rows per GET rows page: the largest page the service allows (A22), so a read costs least.
ROWS_PAGE_SIZE = 1000


def read_current_rows(
    client: ListSyncClient, table_id: str, key_column: str, *, page_size: int = ROWS_PAGE_SIZE
) -> tuple[list[CurrentRow], int]:
    """Read every List row whose ``key_column`` cell is not empty, page by page.

    Uses the documented filter mode (``columnId=<key_column>&operator=is_not_empty``), so it does
    not depend on how the service pages a List without a filter. Rows without a key cannot be
    matched to the extract and are not read.

    :return: the rows (cells' ``value``, never ``computedValue``) and the GET requests sent.
    """
    requests = 0

    def fetch(offset: int) -> tuple[list[Row], bool | None, int | None]:
        nonlocal requests
        requests += 1
        page = client.get_rows(
            table_id, column_id=key_column, operator="is_not_empty", limit=page_size, offset=offset
        )
        return page.rows, page.more, page.total

    rows = [_current_row(row) for row in iter_offset_pages(fetch)]
    return rows, requests


def _current_row(row: Row) -> CurrentRow:
    shown = {
        column: cell.computed_value
        for column, cell in row.cells.items()
        if cell.computed_value is not None and cell.computed_value != cell.value
    }
    return CurrentRow(row.id, {column: cell.value for column, cell in row.cells.items()}, shown)


def list_key_normalizer(key_kind: str) -> Callable[[Any], str | None]:
    """How a List key cell is normalised to meet keys prepared with ``key_kind`` (see ``prepare_rows``).

    A cell the rule refuses keeps its text: it then matches no extract key, which is what it is.
    """
    from listsync.sync.normalize import NormalizationError, normalize_domain, normalize_text

    rule = normalize_domain if key_kind == "domain" else normalize_text

    def normalize(value: Any) -> str | None:
        if value is None or value == "":
            return None
        try:
            return rule(value)
        except NormalizationError:
            return str(value)

    return normalize


# --- applying a plan -------------------------------------------------------------------------

#: Request kinds, as counted in summaries and as keys of ``chunk_size`` mappings.
ADD_ROWS, UPDATE_CELLS, DELETE_ROWS, GET_ROWS = "add_rows", "update_cells", "delete_rows", "get_rows"

#: Default chunk sizes: the per-request caps of docs/assumptions.md A21.
DEFAULT_CHUNK_SIZES: dict[str, int] = {
    ADD_ROWS: ROWS_PER_REQUEST,
    UPDATE_CELLS: CELL_UPDATES_PER_REQUEST,
    DELETE_ROWS: ROW_DELETES_PER_REQUEST,
}

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


def chunk_sizes(chunk_size: int | Mapping[str, int] | None) -> dict[str, int]:
    """Items per request for each kind (:data:`ADD_ROWS`, :data:`UPDATE_CELLS`, :data:`DELETE_ROWS`).

    ``None`` gives the service's caps (A21: 500 rows, 1,000 cell updates, 1,000 row deletes);
    one number applies to every kind, each kind keeping at most its cap; a mapping sets kinds
    one by one (the others keep their cap).

    :raises ValueError: an unknown kind, or a size below 1 or above its kind's cap.
    """
    if chunk_size is None:
        return dict(DEFAULT_CHUNK_SIZES)
    if not isinstance(chunk_size, Mapping):
        if int(chunk_size) < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        return {kind: min(int(chunk_size), cap) for kind, cap in DEFAULT_CHUNK_SIZES.items()}
    unknown = sorted(set(chunk_size) - set(DEFAULT_CHUNK_SIZES))
    if unknown:
        raise ValueError(
            f"chunk_size keys must be among {', '.join(DEFAULT_CHUNK_SIZES)}; got {', '.join(unknown)}"
        )
    sizes = {kind: int(chunk_size.get(kind, cap)) for kind, cap in DEFAULT_CHUNK_SIZES.items()}
    for kind, size in sizes.items():
        if not 1 <= size <= DEFAULT_CHUNK_SIZES[kind]:
            raise ValueError(
                f"chunk_size for {kind} must be between 1 and {DEFAULT_CHUNK_SIZES[kind]}, got {size}"
            )
    return sizes


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
        for batch in _batches(additions, size):
            pending: list[RowAddition] = list(batch)
            for attempt in range(1, MAX_ADD_ATTEMPTS + 1):
                report = self.client.write_row_adds(
                    self.table_id,
                    [Keyed(row.key, RowAdd(cells=row.cells)) for row in pending],
                    chunk_size=size,
                )
                outcome.requests[ADD_ROWS] += report.requests
                outcome.isolation_requests += report.isolation_requests
                if attempt > 1:
                    outcome.resent_rows += len(pending)
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
        report = self.client.write_row_deletes(self.table_id, [Keyed(row_id, row_id) for row_id in row_ids])
        self.outcome.requests[DELETE_ROWS] += report.requests
        self.outcome.copies_removed += len(report.written)
        self.outcome.failures.extend(
            ("delete", row_id, f"a second copy of {key!r} a lost add left: {reason}")
            for row_id, reason in {**report.failed, **report.outcome_unknown}.items()
        )

    def update_cells(self, changes: Sequence[CellChange], size: int) -> None:
        outcome = self.outcome
        for start in range(0, len(changes), size):
            batch = changes[start : start + size]
            # Writer keys are positions in ``changes``: a row key alone would not name the cell.
            items = [
                Keyed(str(start + offset), CellUpdate(rowId=c.row_id, columnId=c.column_id, value=c.after))
                for offset, c in enumerate(batch)
            ]
            report = self.client.write_cell_updates(self.table_id, items, chunk_size=size)
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
        for batch in _batches(removals, size):
            by_id = {row.row_id: row for row in batch}
            report = self.client.write_row_deletes(
                self.table_id, [Keyed(row.row_id, row.row_id) for row in batch], chunk_size=size
            )
            outcome.requests[DELETE_ROWS] += report.requests
            outcome.isolation_requests += report.isolation_requests
            outcome.rows_deleted += len(report.written)
            outcome.written_removals.extend(by_id[row_id] for row_id in report.written)
            outcome.unknown_removals.extend(
                (by_id[row_id], reason) for row_id, reason in report.outcome_unknown.items()
            )
            outcome.failures.extend(("delete", row_id, reason) for row_id, reason in report.failed.items())
            self.progress.advance(len(batch), failed=len(outcome.failures))


# --- verifying what was written --------------------------------------------------------------

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
                _current_row(row)
                for row in found
                if normalize_key(_current_row(row).cells.get(key_column)) == key
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
            found.update((row.id, _current_row(row)) for row in answered)
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


# --- the plan file and the whole flow --------------------------------------------------------


def plan_entries(plan: RowsPlan) -> Iterator[dict[str, Any]]:
    """The plan as plan-file entries, in the order it is applied.

    ``{"action": "add", "key", "cells"}``, ``{"action": "update", "key", "row_id", "changes":
    {column: {"before", "after"}}}`` (one per row), ``{"action": "delete", "key", "row_id"}``, and
    ``{"action": "duplicate_key_in_list", "key", "row_ids", "in_extract"}`` for what is left alone.
    """
    for addition in plan.additions:
        yield {"action": "add", "key": addition.key, "cells": addition.cells}
    by_row: dict[str, dict[str, Any]] = {}
    for change in plan.changes:
        entry = by_row.setdefault(
            change.row_id, {"action": "update", "key": change.key, "row_id": change.row_id, "changes": {}}
        )
        entry["changes"][change.column_id] = {"before": change.before, "after": change.after}
    yield from by_row.values()
    for removal in plan.removals:
        yield {"action": "delete", "key": removal.key, "row_id": removal.row_id}
    for duplicate in plan.duplicate_keys:
        yield {
            "action": "duplicate_key_in_list",
            "key": duplicate.key,
            "row_ids": list(duplicate.row_ids),
            "in_extract": duplicate.in_extract,
        }


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
    max_delete_fraction: float = 0.1,
    overwrite_with_null: bool = False,
    chunk_size: int | Mapping[str, int] | None = None,
    dry_run: bool = False,
    fail_on_error: bool = True,
    rejects_path: str | os.PathLike[str] | OpenableFile | None = None,
    plan_path: str | os.PathLike[str] | OpenableFile | None = None,
    max_reject_fraction: float = 1.0,
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
    :param max_delete_fraction: refuse deletes above this fraction of the List's keyed rows.
    :param overwrite_with_null: let a null in the extract clear the List's cell.
    :param chunk_size: items per request, one number or a mapping by kind (see :func:`chunk_sizes`).
    :param dry_run: plan, write the plan file and return the summary without writing to the List.
    :param fail_on_error: raise :class:`~listsync.sync.plan.SyncFailedError` at the end if any
        row failed (after everything else was written).
    :param rejects_path: where rejected extract rows go (JSON lines): a local path, or an object
        with ``open()`` such as ``ObjectStoragePath``; None: a temporary file, only when some row
        was rejected.
    :param plan_path: where the plan goes (JSON lines), as ``rejects_path``; None: no plan file,
        except in a dry run (then a temporary file).
    :param max_reject_fraction: fail before reading the List when more of the extract is rejected.
    :return: the summary: extract rows ``read``, ``rejected``, ``duplicates``; ``rows_added``,
        ``rows_updated``, ``cells_updated``, ``rows_deleted``, ``unchanged``, ``failed`` (extract
        rows not written, including those blocked by a duplicate key, and rows not deleted),
        ``duplicate_keys_in_list``, ``rows_resent`` (row adds sent again after a re-read);
        ``requests`` (writes by kind and their ``total``), ``read_requests`` (GET rows),
        ``planned`` counts, ``failure_reasons``, the table, key and mode, and the file paths.
        A dry run writes nothing, so its write counts are 0 and ``planned`` tells what a run would do.
    :raises ColumnMappingError: the map does not fit the extract, or does not map one column to
        ``key_column``.
    :raises TooManyRejectsError: more than ``max_reject_fraction`` of the rows were rejected.
    :raises UnsafeDeleteError: the deletes look like a broken extract; nothing was written.
    :raises SyncFailedError: rows failed and ``fail_on_error`` is set; the rest was written.
    """
    from listsync.sync.prepare import ColumnMappingError, prepare_rows

    sizes = chunk_sizes(chunk_size)  # a bad setting fails before anything is read
    source_keys = [column for column, target in column_map.items() if target == key_column]
    if len(source_keys) != 1:
        raise ColumnMappingError(
            f"column_map must map exactly one extract column to the key column {key_column!r}; "
            f"it maps {len(source_keys)}: {dict(column_map)!r}"
        )
    prepared, written_rejects = prepare_with_rejects(
        lambda rejects: prepare_rows(
            frames, column_map, source_keys[0], rejects=rejects, key_kind=key_kind, json_columns=json_columns
        ),
        rejects_path,
        max_reject_fraction=max_reject_fraction,
        prefix="listsync-rows-rejects-",
    )

    current, read_requests = read_current_rows(client, table_id, key_column)
    plan = plan_rows_upsert(
        prepared.rows.values(),
        current,
        key_column=key_column,
        delete_missing=delete_missing,
        overwrite_with_null=overwrite_with_null,
        normalize_key=list_key_normalizer(key_kind),
    )
    _log.info(
        "Plan for %s: %d rows to add, %d cells to update on %d rows, %d rows to delete, %d unchanged "
        "(List holds %d keyed rows)",
        table_id,
        len(plan.additions),
        len(plan.changes),
        plan.changed_rows,
        len(plan.removals),
        plan.unchanged,
        plan.list_rows,
    )
    if plan.duplicate_keys:
        _log.warning(
            "List %s holds %d keys in more than one row; those rows are left alone (%d extract rows "
            "could not be written because of them). The plan file lists their row ids.",
            table_id,
            len(plan.duplicate_keys),
            plan.blocked_by_duplicates,
        )
    written_plan = write_requested_plan(
        plan_entries(plan), plan_path, dry_run=dry_run, prefix="listsync-rows-plan-", logger=_log
    )
    check_delete_safety(
        planned_deletes=len(plan.removals),
        current_total=plan.list_rows,
        source_rows=prepared.stats.passed,
        max_delete_fraction=max_delete_fraction,
        noun="rows",
    )
    outcome, verification = ApplyOutcome(), RowsVerification()
    if not dry_run:
        outcome = apply_rows_plan(plan, client, table_id, chunk_size=sizes)
        verification = verify_rows(plan, outcome, client, table_id, list_key_normalizer(key_kind))

    reasons = [
        f"key {duplicate.key!r} is held by {len(duplicate.row_ids)} List rows; remove the duplicates"
        for duplicate in plan.duplicate_keys
        if duplicate.in_extract
    ]
    reasons.extend(f"{kind}: {reason}" for kind, _, reason in outcome.failures)
    failed_rows = outcome.failed_keys("add") | outcome.failed_keys("update")
    summary = build_summary(
        {
            **prepared.stats.to_dict(),
            "rows_added": len(outcome.rows_added),
            "rows_updated": outcome.rows_updated,
            "cells_updated": outcome.cells_updated,
            "rows_deleted": outcome.rows_deleted,
            "unchanged": plan.unchanged,
            "failed": plan.blocked_by_duplicates + len(failed_rows) + len(outcome.failed_keys("delete")),
            "duplicate_keys_in_list": len(plan.duplicate_keys),
            "rows_resent": outcome.resent_rows,
            "copies_removed": outcome.copies_removed,
            "list_rows": plan.list_rows,
            "verified": verification.verified,
            "drift": len(verification.drift),
        },
        requests={kind: outcome.requests[kind] for kind in (ADD_ROWS, UPDATE_CELLS, DELETE_ROWS)},
        failure_reasons=reasons,
        drift_reasons=verification.drift,
        isolation_requests=outcome.isolation_requests,
        table_id=table_id,
        key_column=key_column,
        delete_missing=delete_missing,
        dry_run=dry_run,
        normalization_version=prepared.normalization_version,
        plan_path=written_plan,
        rejects_path=written_rejects,
        planned={
            "add_rows": len(plan.additions),
            "update_cells": len(plan.changes),
            "update_rows": plan.changed_rows,
            "delete_rows": len(plan.removals),
        },
        read_requests=read_requests + outcome.requests[GET_ROWS] + verification.requests,
    )
    _log.info("Rows upsert summary: %s", json.dumps(summary))
    if (summary["failed"] or summary["drift"]) and fail_on_error and not dry_run:
        raise SyncFailedError(summary)
    return summary
