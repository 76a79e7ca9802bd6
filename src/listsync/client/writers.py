"""Chunked writers for the List endpoints, reporting per item what was written and what failed.

Each writer takes the List's endpoints (:class:`~listsync.client.endpoints.ListEndpoints`, which
a :class:`~listsync.client.client.ListSyncClient` is), the List's id and keyed items
(:mod:`listsync.client.write_items`), validates each item alone (an invalid one fails without
failing its chunk), cuts the rest into requests no larger than the per-request caps, and
returns a :class:`~listsync.client.write_items.WriteReport` in which every key is written,
failed or of unknown outcome. One failing chunk never stops the others, and a writer never
raises for one chunk. Default chunk sizes are the per-request caps of docs/assumptions.md A21.

A refused request is taken apart, not given up (:mod:`listsync.client.isolation`): the items it
names, or halves of it, are sent again until each refused item fails alone with its reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from listsync.client.endpoints import ListEndpoints
from listsync.client.errors import InvalidRecordError
from listsync.client.isolation import IsolatingSender, indexes_named
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
from listsync.client.write_items import AccountKeyed, Keyed, WriteReport

#: Per-request caps (docs/assumptions.md A21): the writers' default chunk sizes.
PEOPLE_PER_REQUEST = 500
ACCOUNTS_PER_REQUEST = 100
ROWS_PER_REQUEST = 500
CELL_UPDATES_PER_REQUEST = 1000
ROW_DELETES_PER_REQUEST = 1000

ValueT = TypeVar("ValueT")
UnitT = TypeVar("UnitT")


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


def _capped(size: int, client: ListEndpoints, things: str) -> int:
    """A chunk size no larger than the cap the service stated for ``things``, if it stated one."""
    return min(size, client.learned_caps.get(things, size))


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


#: A person-level unit as sent: ``(key, account domain, validated value)``.
PersonUnit = tuple[str, str, Any]


def _write_people(
    client: ListEndpoints,
    table_id: str,
    items: Iterable[AccountKeyed[Any]],
    validate: Callable[[Any], Any],
    send: Callable[[list[dict[str, Any]]], WriteResult],
    *,
    chunk_size: int,
    max_accounts: int,
) -> WriteReport:
    report = WriteReport()
    valid: list[PersonUnit] = _validated(
        items,
        lambda item: item.key,
        lambda item: (item.key, _account_domain(item), validate(item.value)),
        report,
    )

    def recut(units: list[PersonUnit], things: str, size: int) -> list[list[PersonUnit]] | None:
        if things not in ("people", "accounts"):
            return None
        people, accounts = (size, max_accounts) if things == "people" else (chunk_size, size)
        return [_flat(chunk) for chunk in chunk_by_account(units, max_people=people, max_accounts=accounts)]

    sender = IsolatingSender[PersonUnit](
        client,
        report,
        request=lambda units: send(
            [
                {"accountDomain": domain, "people": [value for _, value in members]}
                for domain, members in _by_account(units)
            ]
        ),
        key_of=lambda unit: unit[0],
        id_of=lambda unit: unit[1],
        named=_named_people,
        recut=recut,
        table_id=table_id,
        probe=lambda: client.get_targetable_people(table_id, limit=1),
    )
    for chunk in chunk_by_account(
        valid,
        max_people=_capped(chunk_size, client, "people"),
        max_accounts=_capped(max_accounts, client, "accounts"),
    ):
        sender.send(_flat(chunk))
    return report


def _flat(chunk: list[tuple[str, list[tuple[str, Any]]]]) -> list[PersonUnit]:
    return [(key, domain, value) for domain, members in chunk for key, value in members]


def _by_account(units: Sequence[PersonUnit]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Units grouped by account (case-insensitively, in order of first appearance), as sent."""
    groups: dict[str, tuple[str, list[tuple[str, Any]]]] = {}
    for key, domain, value in units:
        groups.setdefault(domain.lower(), (domain, []))[1].append((key, value))
    return list(groups.values())


def _named_people(message: str, units: list[PersonUnit]) -> list[int]:
    """Positions of the units ``accounts[<a>].people[<p>]`` (or a whole ``accounts[<a>]``) names."""
    positions: dict[tuple[int, int], int] = {}
    accounts: dict[int, list[int]] = {}
    position = 0
    for a, (_domain, members) in enumerate(_by_account(units)):
        for p in range(len(members)):
            positions[(a, p)] = position
            accounts.setdefault(a, []).append(position)
            position += 1
    named: list[int] = []
    for account, person in re.findall(r"\baccounts\[(\d+)\](?:\.people\[(\d+)\])?", message):
        if person:
            found = positions.get((int(account), int(person)))
            named.extend([] if found is None else [found])
        else:
            named.extend(accounts.get(int(account), []))
    return named


def _account_domain(item: AccountKeyed[Any]) -> str:
    # Checked per item: the request model would refuse the whole chunk for one empty domain.
    domain = item.account_domain.strip() if isinstance(item.account_domain, str) else ""
    if not domain:
        raise InvalidRecordError([("accountDomain", "must be a non-empty string")], record="account")
    return domain


def write_people_adds(
    client: ListEndpoints,
    table_id: str,
    items: Iterable[AccountKeyed[Person | Mapping[str, Any]]],
    *,
    chunk_size: int = PEOPLE_PER_REQUEST,
    max_accounts: int = ACCOUNTS_PER_REQUEST,
    duplicate_strategy: str | None = None,
) -> WriteReport:
    """Add people (:class:`Person` or §2.1 mappings) to their account rows, in chunks.

    Chunks hold at most ``chunk_size`` people and ``max_accounts`` accounts. People of unknown
    accounts fail with the service's ``Account not found`` message (or a 404 in other words
    naming their domain); the rest are sent.
    """
    return _write_people(
        client,
        table_id,
        items,
        validate_person,
        lambda accounts: client.add_people(table_id, accounts, duplicate_strategy=duplicate_strategy),
        chunk_size=chunk_size,
        max_accounts=max_accounts,
    )


def write_people_patches(
    client: ListEndpoints,
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
        client,
        table_id,
        items,
        validate_person_patch,
        lambda accounts: client.update_people(table_id, accounts),
        chunk_size=chunk_size,
        max_accounts=max_accounts,
    )


def write_people_deletes(
    client: ListEndpoints,
    table_id: str,
    items: Iterable[AccountKeyed[PersonMatch | Mapping[str, Any]]],
    *,
    chunk_size: int = PEOPLE_PER_REQUEST,
    max_accounts: int = ACCOUNTS_PER_REQUEST,
) -> WriteReport:
    """Remove people (identified by :class:`PersonMatch`) from their account rows, in chunks."""
    return _write_people(
        client,
        table_id,
        items,
        validate_person_match,
        lambda accounts: client.delete_people(table_id, accounts),
        chunk_size=chunk_size,
        max_accounts=max_accounts,
    )


# -- rows and cells ------------------------------------------------------------------------------


def _write_keyed(
    client: ListEndpoints,
    table_id: str,
    items: Iterable[Keyed[Any]],
    validate: Callable[[Any], Any],
    request: Callable[[list[Any]], WriteResult],
    *,
    array: str,
    chunk_size: int,
    id_of: Callable[[Any], str],
    missing_means_done: bool = False,
) -> WriteReport:
    """Write ``Keyed`` items whose request body is one array (``array``: rows, updates, rowIds)."""
    report = WriteReport()
    valid = _validated(
        items, lambda item: item.key, lambda item: Keyed(item.key, validate(item.value)), report
    )
    sender = IsolatingSender[Keyed[Any]](
        client,
        report,
        request=lambda units: request([unit.value for unit in units]),
        key_of=lambda unit: unit.key,
        id_of=lambda unit: id_of(unit.value),
        named=lambda message, units: indexes_named(message, array),
        recut=lambda units, things, size: list(_chunks(units, size)) if things == array else None,
        table_id=table_id,
        probe=lambda: client.get_rows(table_id, limit=1),
        missing_means_done=missing_means_done,
    )
    for chunk in _chunks(valid, _capped(chunk_size, client, array)):
        sender.send(chunk)
    return report


def write_row_adds(
    client: ListEndpoints,
    table_id: str,
    items: Iterable[Keyed[RowAdd | Mapping[str, Any]]],
    *,
    chunk_size: int = ROWS_PER_REQUEST,
) -> WriteReport:
    """Add rows (:class:`RowAdd` or ``{"cells": {...}}``) in chunks, never re-sending blindly.

    A row add is not idempotent. When a chunk's request times out after sending, loses its
    connection, gets a 5xx or an unreadable 2xx, this writer does not send it again: the chunk's
    keys go to ``report.outcome_unknown`` with the reason, and the next chunks go on. The caller
    re-reads those keys (e.g. ``client.get_rows(table_id, column_id=<key column>, operator="eq",
    query=<key>)``) and sends again only the rows that are missing. Failures that prove nothing
    was applied (no connection, a 429, a 4xx) are retried by the client, taken apart, or reported
    ``failed``.

    ``report.row_ids`` maps each key to its new row id when the service returns one id per row.
    """
    return _write_keyed(
        client,
        table_id,
        items,
        validate_row,
        lambda rows: client.add_rows(table_id, rows),
        array="rows",
        chunk_size=chunk_size,
        id_of=lambda row: "",
    )


def write_cell_updates(
    client: ListEndpoints,
    table_id: str,
    items: Iterable[Keyed[CellUpdate | Mapping[str, Any]]],
    *,
    chunk_size: int = CELL_UPDATES_PER_REQUEST,
) -> WriteReport:
    """Update cells (:class:`CellUpdate` or ``rowId``/``columnId``/``value``) in chunks.

    Updates of rows the service reports missing (``404 Rows not found``, or a 404 in other words
    naming their ids) fail with that message; the rest of their chunk is sent again.
    """
    return _write_keyed(
        client,
        table_id,
        items,
        validate_cell_update,
        lambda updates: client.update_cells(table_id, updates),
        array="updates",
        chunk_size=chunk_size,
        id_of=lambda update: update.row_id,
    )


def write_row_deletes(
    client: ListEndpoints,
    table_id: str,
    items: Iterable[Keyed[str]],
    *,
    chunk_size: int = ROW_DELETES_PER_REQUEST,
) -> WriteReport:
    """Delete rows by id (``Keyed(key, row_id)``) in chunks.

    Rows already gone count as written, whether the service lists them in ``notFound`` (A19) or
    refuses with ``404 Rows not found`` (then the rest of the chunk is sent again).
    """

    def check(row_id: str) -> str:
        if not isinstance(row_id, str) or not row_id.strip():
            raise InvalidRecordError([("rowId", "must be a non-empty string")], record="row delete")
        return row_id.strip()

    return _write_keyed(
        client,
        table_id,
        items,
        check,
        lambda row_ids: client.delete_rows(table_id, row_ids),
        array="rowIds",
        chunk_size=chunk_size,
        id_of=lambda row_id: row_id,
        missing_means_done=True,
    )
