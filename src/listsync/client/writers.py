"""Chunked writers for the List endpoints, reporting per item what was written and what failed.

Every item carries a caller-chosen string ``key`` (a source row number, a person identity, a
row key) and ends up in exactly one bucket of the :class:`WriteReport`:

- ``written``: the request holding it succeeded (for deletes, also "was already gone");
- ``failed``: it was not applied; the reason says why (a rule it breaks, an unknown account,
  or the error of the request that carried it after retries);
- ``outcome_unknown`` (row adds only): the request was sent but its fate is unknown.

One failing chunk never stops the others, and a writer never raises for one chunk. Default
chunk sizes are the per-request caps of docs/assumptions.md A21.

When the service refuses a whole request naming unknown accounts (``404 Account not found``,
A14) or unknown rows (``404 Rows not found``, A20), those items are recorded and the rest of
the chunk is sent again: the refusal applied nothing, so resending is safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from listsync.client.errors import (
    AccountsNotFoundError,
    InvalidRecordError,
    ListSyncError,
    OutcomeUnknownError,
    RowsNotFoundError,
    ServerError,
)
from listsync.client.models import (
    CellUpdate,
    Person,
    PersonMatch,
    PersonPatch,
    RowAdd,
    WriteResult,
    validate_cell_update,
    validate_person,
    validate_person_match,
    validate_person_patch,
    validate_row,
)

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient

PEOPLE_PER_REQUEST = 500
ACCOUNTS_PER_REQUEST = 100
ROWS_PER_REQUEST = 500
CELL_UPDATES_PER_REQUEST = 1000
ROW_DELETES_PER_REQUEST = 1000

ValueT = TypeVar("ValueT")
UnitT = TypeVar("UnitT")


@dataclass(frozen=True)
class Keyed(Generic[ValueT]):
    """An item to write and the caller's key for it."""

    key: str
    value: ValueT


@dataclass(frozen=True)
class AccountKeyed(Generic[ValueT]):
    """A person-level item to write on the account row of ``account_domain``."""

    key: str
    account_domain: str
    value: ValueT


@dataclass
class WriteReport:
    """What a chunked write did, per item key.

    :ivar requests: write requests sent (a request retried after a transient failure counts once).
    :ivar written: keys of items whose request succeeded, in order.
    :ivar failed: key -> reason, for items not applied.
    :ivar outcome_unknown: key -> reason, for row adds whose request may or may not have been
        applied (timeout after sending, 5xx). Re-read them before re-sending.
    :ivar row_ids: key -> new row id, for row adds when the service returns the ids.
    :ivar counts: the service's counts summed over requests (``added``, ``updated``, ``skipped``,
        ``deleted``), when it returns them.
    :ivar not_found: the ``notFound`` entries of patches and deletes (A19), as returned.
    """

    requests: int = 0
    written: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    outcome_unknown: dict[str, str] = field(default_factory=dict)
    row_ids: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    not_found: list[Any] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary (for XCom)."""
        return {
            "requests": self.requests,
            "written": list(self.written),
            "failed": dict(self.failed),
            "outcome_unknown": dict(self.outcome_unknown),
            "row_ids": dict(self.row_ids),
            "counts": dict(self.counts),
            "not_found": list(self.not_found),
        }

    def _succeeded(self, keys: Sequence[str], result: WriteResult) -> None:
        self.written.extend(keys)
        for name in ("added", "updated", "skipped", "deleted"):
            value = getattr(result, name)
            if value is not None:
                self.counts[name] = self.counts.get(name, 0) + value
        self.not_found.extend(result.not_found)

    def _fail(self, keys: Iterable[str], reason: str) -> None:
        for key in keys:
            self.failed[key] = reason


def _validated(
    items: Iterable[ValueT],
    key_of: Callable[[ValueT], str],
    validate: Callable[[ValueT], UnitT],
    report: WriteReport,
) -> list[UnitT]:
    # Invalid items fail alone instead of failing the whole chunk they would be sent in.
    valid = []
    for item in items:
        try:
            valid.append(validate(item))
        except InvalidRecordError as exc:
            report.failed[key_of(item)] = str(exc)
    return valid


def _chunks(items: Sequence[UnitT], size: int) -> Iterator[list[UnitT]]:
    if size < 1:
        raise ValueError("chunk size must be at least 1")
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _send_dropping_missing(
    report: WriteReport,
    units: list[UnitT],
    *,
    keys_of: Callable[[UnitT], list[str]],
    id_of: Callable[[UnitT], str],
    send: Callable[[list[UnitT]], WriteResult],
    missing_means_done: bool = False,
) -> None:
    """Send ``units`` in one request; on a refusal naming missing accounts or rows, drop those
    units and send the rest again. ``missing_means_done`` records dropped units as written
    (a delete of what is already gone), else as failed with the service's message."""
    while units:
        report.requests += 1
        try:
            result = send(units)
        except (AccountsNotFoundError, RowsNotFoundError) as exc:
            missing = {
                name.lower()
                for name in (exc.domains if isinstance(exc, AccountsNotFoundError) else exc.row_ids)
            }
            dropped = [unit for unit in units if id_of(unit).lower() in missing]
            if not dropped:
                # The service named nothing we sent: resending would loop.
                report._fail((key for unit in units for key in keys_of(unit)), str(exc))
                return
            dropped_keys = [key for unit in dropped for key in keys_of(unit)]
            if missing_means_done:
                report.written.extend(dropped_keys)
                report.not_found.extend(id_of(unit) for unit in dropped)
            else:
                report._fail(dropped_keys, exc.message)
            units = [unit for unit in units if id_of(unit).lower() not in missing]
        except ListSyncError as exc:
            report._fail((key for unit in units for key in keys_of(unit)), str(exc))
            return
        else:
            report._succeeded([key for unit in units for key in keys_of(unit)], result)
            return


# -- targetable people ---------------------------------------------------------------------------


def chunk_by_account(
    items: Sequence[tuple[str, str, ValueT]], *, max_people: int, max_accounts: int
) -> Iterator[list[tuple[str, list[tuple[str, ValueT]]]]]:
    """Group ``(key, account_domain, value)`` by account (domains compared case-insensitively, in
    order of first appearance) and cut the groups into chunks of at most ``max_people`` values
    and ``max_accounts`` accounts. An account with more people than fit is split across chunks.
    """
    if max_people < 1 or max_accounts < 1:
        raise ValueError("chunk limits must be at least 1")
    groups: dict[str, tuple[str, list[tuple[str, ValueT]]]] = {}
    for key, domain, value in items:
        groups.setdefault(domain.lower(), (domain, []))[1].append((key, value))
    chunk: list[tuple[str, list[tuple[str, ValueT]]]] = []
    people = 0
    for domain, members in groups.values():
        start = 0
        while start < len(members):
            if people == max_people or len(chunk) == max_accounts:
                yield chunk
                chunk, people = [], 0
            taken = members[start : start + max_people - people]
            chunk.append((domain, taken))
            people += len(taken)
            start += len(taken)
    if chunk:
        yield chunk


def _write_people(
    items: Iterable[AccountKeyed[Any]],
    validate: Callable[[Any], Any],
    send: Callable[[list[dict[str, Any]]], WriteResult],
    *,
    chunk_size: int,
    max_accounts: int,
) -> WriteReport:
    report = WriteReport()
    valid = _validated(
        items,
        lambda item: item.key,
        lambda item: (item.key, _account_domain(item), validate(item.value)),
        report,
    )
    for chunk in chunk_by_account(valid, max_people=chunk_size, max_accounts=max_accounts):
        _send_dropping_missing(
            report,
            chunk,
            keys_of=lambda unit: [key for key, _ in unit[1]],
            id_of=lambda unit: unit[0],
            send=lambda units: send(
                [
                    {"accountDomain": domain, "people": [value for _, value in members]}
                    for domain, members in units
                ]
            ),
        )
    return report


def _account_domain(item: AccountKeyed[Any]) -> str:
    # Checked per item: the request model would refuse the whole chunk for one empty domain.
    domain = item.account_domain.strip() if isinstance(item.account_domain, str) else ""
    if not domain:
        raise InvalidRecordError([("accountDomain", "must be a non-empty string")], record="account")
    return domain


def write_people_adds(
    client: ListSyncClient,
    table_id: str,
    items: Iterable[AccountKeyed[Person | Mapping[str, Any]]],
    *,
    chunk_size: int = PEOPLE_PER_REQUEST,
    max_accounts: int = ACCOUNTS_PER_REQUEST,
    duplicate_strategy: str | None = None,
) -> WriteReport:
    """Add people (:class:`Person` or §2.1 mappings) to their account rows, in chunks.

    Chunks hold at most ``chunk_size`` people and ``max_accounts`` accounts. People of unknown
    accounts fail with the service's ``Account not found`` message; the rest are sent.
    """
    return _write_people(
        items,
        validate_person,
        lambda accounts: client.add_people(table_id, accounts, duplicate_strategy=duplicate_strategy),
        chunk_size=chunk_size,
        max_accounts=max_accounts,
    )


def write_people_patches(
    client: ListSyncClient,
    table_id: str,
    items: Iterable[AccountKeyed[PersonPatch | Mapping[str, Any]]],
    *,
    chunk_size: int = PEOPLE_PER_REQUEST,
    max_accounts: int = ACCOUNTS_PER_REQUEST,
) -> WriteReport:
    """Update people (:class:`PersonPatch`: ``match`` + ``patch``) on their account rows, in chunks.

    People the service did not find are ``written`` and listed in ``report.not_found`` (A18).
    """
    return _write_people(
        items,
        validate_person_patch,
        lambda accounts: client.update_people(table_id, accounts),
        chunk_size=chunk_size,
        max_accounts=max_accounts,
    )


def write_people_deletes(
    client: ListSyncClient,
    table_id: str,
    items: Iterable[AccountKeyed[PersonMatch | Mapping[str, Any]]],
    *,
    chunk_size: int = PEOPLE_PER_REQUEST,
    max_accounts: int = ACCOUNTS_PER_REQUEST,
) -> WriteReport:
    """Remove people (identified by :class:`PersonMatch`) from their account rows, in chunks."""
    return _write_people(
        items,
        validate_person_match,
        lambda accounts: client.delete_people(table_id, accounts),
        chunk_size=chunk_size,
        max_accounts=max_accounts,
    )


# -- rows and cells ------------------------------------------------------------------------------


def write_row_adds(
    client: ListSyncClient,
    table_id: str,
    items: Iterable[Keyed[RowAdd | Mapping[str, Any]]],
    *,
    chunk_size: int = ROWS_PER_REQUEST,
) -> WriteReport:
    """Add rows (:class:`RowAdd` or ``{"cells": {...}}``) in chunks, never re-sending blindly.

    A row add is not idempotent. When a chunk's request times out after sending, loses its
    connection, or gets a 5xx, this writer does not send it again: the chunk's keys go to
    ``report.outcome_unknown`` with the reason, and the next chunks go on. The caller re-reads
    those keys (e.g. ``client.get_rows(table_id, column_id=<key column>, operator="eq",
    query=<key>)``) and sends again only the rows that are missing. Failures that prove nothing
    was applied (no connection, a 429, a 4xx) are retried by the client or reported ``failed``.

    ``report.row_ids`` maps each key to its new row id when the service returns one id per row.
    """
    report = WriteReport()
    valid = _validated(
        items, lambda item: item.key, lambda item: Keyed(item.key, validate_row(item.value)), report
    )
    for chunk in _chunks(valid, chunk_size):
        keys = [item.key for item in chunk]
        report.requests += 1
        try:
            result = client.add_rows(table_id, [item.value for item in chunk])
        except (OutcomeUnknownError, ServerError) as exc:
            report.outcome_unknown.update(dict.fromkeys(keys, str(exc)))
        except ListSyncError as exc:
            report._fail(keys, str(exc))
        else:
            report._succeeded(keys, result)
            if len(result.row_ids) == len(keys):
                report.row_ids.update(zip(keys, result.row_ids, strict=True))
    return report


def write_cell_updates(
    client: ListSyncClient,
    table_id: str,
    items: Iterable[Keyed[CellUpdate | Mapping[str, Any]]],
    *,
    chunk_size: int = CELL_UPDATES_PER_REQUEST,
) -> WriteReport:
    """Update cells (:class:`CellUpdate` or ``rowId``/``columnId``/``value``) in chunks.

    Updates of rows the service reports missing (``404 Rows not found``) fail with that message;
    the rest of their chunk is sent again.
    """
    report = WriteReport()
    valid = _validated(
        items, lambda item: item.key, lambda item: Keyed(item.key, validate_cell_update(item.value)), report
    )
    for chunk in _chunks(valid, chunk_size):
        _send_dropping_missing(
            report,
            chunk,
            keys_of=lambda unit: [unit.key],
            id_of=lambda unit: unit.value.row_id,
            send=lambda units: client.update_cells(table_id, [unit.value for unit in units]),
        )
    return report


def write_row_deletes(
    client: ListSyncClient,
    table_id: str,
    items: Iterable[Keyed[str]],
    *,
    chunk_size: int = ROW_DELETES_PER_REQUEST,
) -> WriteReport:
    """Delete rows by id (``Keyed(key, row_id)``) in chunks.

    Rows already gone count as written, whether the service lists them in ``notFound`` (A19) or
    refuses with ``404 Rows not found`` (then the rest of the chunk is sent again).
    """
    report = WriteReport()

    def check(item: Keyed[str]) -> Keyed[str]:
        if not isinstance(item.value, str) or not item.value.strip():
            raise InvalidRecordError([("rowId", "must be a non-empty string")], record="row delete")
        return Keyed(item.key, item.value.strip())

    valid = _validated(items, lambda item: item.key, check, report)
    for chunk in _chunks(valid, chunk_size):
        _send_dropping_missing(
            report,
            chunk,
            keys_of=lambda unit: [unit.key],
            id_of=lambda unit: unit.value,
            send=lambda units: client.delete_rows(table_id, [unit.value for unit in units]),
            missing_means_done=True,
        )
    return report
