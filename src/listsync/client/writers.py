"""Chunked writers for the List endpoints, reporting per item what was written and what failed.

Every item carries a caller-chosen string ``key`` (a source row number, a person identity, a
row key) and ends up in exactly one bucket of the :class:`WriteReport`:

- ``written``: the request holding it succeeded (for deletes, also "was already gone");
- ``failed``: it was not applied; the reason says why (a rule it breaks, an unknown account,
  the service's refusal of that item, or the error of the request that carried it);
- ``outcome_unknown``: the request was sent but its fate is unknown (no answer, a 5xx after the
  client's retries, a 2xx that cannot be read). Re-read before re-sending.

One failing chunk never stops the others, and a writer never raises for one chunk. Default
chunk sizes are the per-request caps of docs/assumptions.md A21.

**A refused request is taken apart, not given up.** A 4xx refusal applies nothing, so resending
part of it is safe. Taken apart are 400, 404, 409, 422 and every other 4xx but 401/403 (the
key: no part of the request would pass) and 429 (the client waits and retries it); a 5xx or a
lost answer is an unknown outcome, never resent here:

- a refusal naming unknown accounts (``404 Account not found``, A14) or rows (``404 Rows not
  found``, A20) drops those items and sends the rest again;
- a refusal stating a cap (``Maximum <n> <things> per request``) re-cuts the chunk to that size,
  and the client remembers it (``client.learned_caps``) for the rest of the run;
- a 404 in other words that names account domains of the request (people writes) or row ids
  (cells, row deletes), each as a whole token, case aside, is read the same way: those
  accounts or rows are not there, so their items fail with the service's words (row deletes:
  already gone) and the rest is sent again;
- a refusal of the List itself fails every item with the service's words and ends the writer
  call: nothing more is sent to a List the service refuses. It is ``404 List not found or not
  accessible`` (or its 403, A10), a 404 naming the List's id and none of the request's items,
  or a 404 that both halves of a bisected request draw, naming none of their items, when a
  read of one item of the List (sent once per call) answers 404 as well;
- any other refusal is bisected: the items the message names (``rows[12]``,
  ``accounts[1].people[3]``, or, not in a 404, an account domain or row id) are sent apart
  from the rest, or, when it names none, the chunk is halved, until each refused item stands
  alone and fails with the service's reason while every other item is written.

The extra requests (and that read of the List) are counted in ``isolation_requests``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from listsync.client.errors import (
    AccountsNotFoundError,
    ApiError,
    BadRequestError,
    InvalidRecordError,
    ListNotFoundError,
    ListSyncError,
    NotFoundError,
    OutcomeUnknownError,
    RowsNotFoundError,
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
from listsync.client.retry import outcome_unknown

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient

PEOPLE_PER_REQUEST = 500
ACCOUNTS_PER_REQUEST = 100
ROWS_PER_REQUEST = 500
CELL_UPDATES_PER_REQUEST = 1000
ROW_DELETES_PER_REQUEST = 1000

#: How long past a lost request's send a write may still land, in the client's timeouts: the
#: timeout itself and a fifth of it more (at least a second). The earliest a write of unknown
#: outcome is looked for in the List, so that a re-read does not miss a write still on its way
#: and send it a second time.
LATE_WRITE_TIMEOUTS = 1.2


def late_write_deadline(sent_at: float, timeout: float) -> float:
    """When a request sent at ``sent_at`` with ``timeout`` can no longer land."""
    return sent_at + max(LATE_WRITE_TIMEOUTS * timeout, timeout + 1.0)


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

    :ivar requests: requests sent (a request retried after a transient failure counts once): the
        writes, and the rare read of :attr:`isolation_requests`.
    :ivar isolation_requests: those of ``requests`` sent to take apart a request the service
        refused whole (bisection, a re-cut to a stated cap, a resend without unknown accounts,
        a read checking that the List is still there).
    :ivar written: keys of items whose request succeeded, in order.
    :ivar failed: key -> reason, for items not applied.
    :ivar outcome_unknown: key -> reason, for items whose request may or may not have been
        applied (no answer, 5xx, an unreadable 2xx). Re-read them before re-sending.
    :ivar row_ids: key -> new row id, for row adds when the service returns the ids.
    :ivar counts: the service's counts summed over requests (``added``, ``updated``, ``skipped``,
        ``deleted``), when it returns them.
    :ivar not_found: the ``notFound`` entries of patches and deletes (A19), as returned.
    :ivar settle_after: for ``outcome_unknown`` items, the time (the client's clock) after which
        their requests can no longer land (:func:`late_write_deadline` of the last attempt).
        Re-read them no earlier.
    """

    requests: int = 0
    isolation_requests: int = 0
    written: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    outcome_unknown: dict[str, str] = field(default_factory=dict)
    row_ids: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    not_found: list[Any] = field(default_factory=list)
    settle_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary (for XCom)."""
        return {
            "requests": self.requests,
            "isolation_requests": self.isolation_requests,
            "written": list(self.written),
            "failed": dict(self.failed),
            "outcome_unknown": dict(self.outcome_unknown),
            "row_ids": dict(self.row_ids),
            "counts": dict(self.counts),
            "not_found": list(self.not_found),
            "settle_after": self.settle_after,
        }

    def merge(self, other: WriteReport) -> None:
        """Add ``other``'s outcome to this report's."""
        self.requests += other.requests
        self.isolation_requests += other.isolation_requests
        self.written += other.written
        self.failed.update(other.failed)
        self.outcome_unknown.update(other.outcome_unknown)
        self.row_ids.update(other.row_ids)
        for name, value in other.counts.items():
            self.counts[name] = self.counts.get(name, 0) + value
        self.not_found += other.not_found
        if other.settle_after is not None:
            self.settle_after = max(self.settle_after or other.settle_after, other.settle_after)

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


_CAP = re.compile(r"Maximum (?P<size>\d+) (?P<things>\w+)")


def _stated_cap(message: str) -> tuple[str, int] | None:
    """``(things, n)`` from a refusal stating a per-request cap, else ``None``."""
    found = _CAP.search(message)
    return (found["things"], int(found["size"])) if found and int(found["size"]) >= 1 else None


@dataclass
class _Sender(Generic[UnitT]):
    """Sends flat lists of units in requests, taking refused requests apart (see the module docstring).

    :ivar request: sends some units in one request.
    :ivar key_of: the item key of a unit.
    :ivar id_of: the account domain or row id a refusal may name (``""``: none, as for row adds).
    :ivar named: positions of the units a refusal message names (e.g. ``rows[3]``).
    :ivar recut: the units cut into requests of at most ``n`` of ``things`` (a stated cap), or
        ``None`` when ``things`` is not what this request counts.
    :ivar table_id: the List written to, which a refusal of the whole List names.
    :ivar probe: reads the List (one item), to tell a 404 of the List from one of its units.
    :ivar missing_means_done: a unit the service reports missing counts as written (a delete).
    """

    client: ListSyncClient
    report: WriteReport
    request: Callable[[list[UnitT]], WriteResult]
    key_of: Callable[[UnitT], str]
    id_of: Callable[[UnitT], str]
    named: Callable[[str, list[UnitT]], list[int]]
    recut: Callable[[list[UnitT], str, int], list[list[UnitT]] | None]
    table_id: str
    probe: Callable[[], object]
    missing_means_done: bool = False
    #: The refusal of the whole List, once seen: every later unit fails with it, unsent.
    _list_refusal: ListSyncError | None = field(default=None, init=False)
    _probed: bool = field(default=False, init=False)

    def send(self, units: list[UnitT], *, isolating: bool = False) -> None:
        if units:
            self._settle(units, self._attempt(units, isolating=isolating), whole=not isolating)

    def _attempt(self, units: list[UnitT], *, isolating: bool) -> WriteResult | ListSyncError:
        """Send ``units`` in one request; what it answered, or the error it raised."""
        if self._list_refusal is not None:
            return self._list_refusal  # the List is refused: sending more would only be refused
        self.report.requests += 1
        self.report.isolation_requests += isolating
        try:
            return self.request(units)
        except ListSyncError as exc:
            return exc

    def _settle(self, units: list[UnitT], outcome: WriteResult | ListSyncError, *, whole: bool) -> None:
        """Record what a request of ``units`` did, taking it apart when it was refused.

        :param whole: ``units`` are a chunk as first sent, not a part of one.
        """
        report = self.report
        keys = [self.key_of(unit) for unit in units]
        if isinstance(outcome, WriteResult):
            report._succeeded(keys, outcome)
            if len(outcome.row_ids) == len(keys):
                report.row_ids.update(zip(keys, outcome.row_ids, strict=True))
            return
        exc = outcome
        if exc is self._list_refusal or isinstance(exc, ListNotFoundError):
            self._refuse_list(units, exc)
        elif isinstance(exc, (AccountsNotFoundError, RowsNotFoundError)):
            self._drop_missing(units, exc, whole=whole)
        elif isinstance(exc, (BadRequestError, NotFoundError)):
            self._take_apart(units, exc, whole=whole)
        elif outcome_unknown(exc):
            report.outcome_unknown.update(dict.fromkeys(keys, str(exc)))
            if isinstance(exc, OutcomeUnknownError):
                # No answer came: the request may still be on its way to being applied.
                sent = self.client.last_sent_at
                settled = late_write_deadline(
                    self.client.clock() if sent is None else sent, self.client.timeout
                )
                report.settle_after = max(report.settle_after or settled, settled)
        else:
            report._fail(keys, str(exc))

    def _refuse_list(self, units: list[UnitT], exc: ListSyncError) -> None:
        """The service refused the List itself: every unit fails with its words, now and later."""
        self._list_refusal = exc
        self.report._fail([self.key_of(unit) for unit in units], str(exc))

    def _drop_missing(
        self, units: list[UnitT], exc: AccountsNotFoundError | RowsNotFoundError, *, whole: bool
    ) -> None:
        names = exc.domains if isinstance(exc, AccountsNotFoundError) else exc.row_ids
        missing = {name.lower() for name in names}
        dropped = [i for i, unit in enumerate(units) if self.id_of(unit).lower() in missing]
        if dropped:
            self._set_apart_missing(units, dropped, exc.message)
        else:
            # It names nothing as we sent it (another spelling?): taken apart like any refusal.
            self._take_apart(units, exc, whole=whole)

    def _set_apart_missing(self, units: list[UnitT], positions: Iterable[int], reason: str) -> None:
        """Units on accounts or rows the service says it does not have fail with ``reason`` (or
        count as written, for deletes) without another request; the rest are sent again."""
        gone = set(positions)
        dropped = [unit for i, unit in enumerate(units) if i in gone]
        dropped_keys = [self.key_of(unit) for unit in dropped]
        if self.missing_means_done:
            self.report.written.extend(dropped_keys)
            self.report.not_found.extend(self.id_of(unit) for unit in dropped)
        else:
            self.report._fail(dropped_keys, reason)
        self.send([unit for i, unit in enumerate(units) if i not in gone], isolating=True)

    def _take_apart(self, units: list[UnitT], exc: ApiError, *, whole: bool) -> None:
        """A refusal that applied nothing (a 4xx but 401/403/429), in words not recognised as
        naming accounts, rows or the List: re-cut to a stated cap, set apart what it names, or
        bisect."""
        message = exc.message
        parts = self._recut_to_stated_cap(units, message)
        if parts is not None:
            for part in parts:
                self.send(part, isolating=True)
            return
        not_found = isinstance(exc, NotFoundError)
        ids = self._ids_named(message, units)
        if not_found and ids:
            # A 404 naming accounts or rows of the request: they are not there, so every unit on
            # them is refused and none of the others is.
            self._set_apart_missing(units, ids, str(exc))
            return
        if not_found and self.table_id and _named_tokens(message, [self.table_id]):
            self._refuse_list(units, exc)
            return
        if len(units) == 1:
            self.report._fail([self.key_of(units[0])], str(exc))
            return
        named = set(self.named(message, units)) or set(ids)
        if named and len(named) < len(units):
            # Sent apart rather than failed: a 400 naming an account may be about one person.
            self.send([unit for i, unit in enumerate(units) if i not in named], isolating=True)
            self.send([unit for i, unit in enumerate(units) if i in named], isolating=True)
            return
        self._bisect(units, exc, whole=whole)

    def _bisect(self, units: list[UnitT], exc: ApiError, *, whole: bool) -> None:
        """Send each half of ``units``. When both halves of a ``whole`` chunk draw a 404 naming
        none of their units, as they do when the List is gone, a read of the List (once per
        writer call) tells whether it is: deeper down, both halves of a part refused is only
        several refused units side by side (an account's people)."""
        half = len(units) // 2
        parts = [units[:half], units[half:]]
        outcomes = [self._attempt(part, isolating=True) for part in parts]
        refused = [self._refused_unnamed(part, out) for part, out in zip(parts, outcomes, strict=True)]
        if whole and isinstance(exc, NotFoundError) and all(refused) and self._list_gone():
            self._refuse_list(units, exc)
            return
        for part, outcome in zip(parts, outcomes, strict=True):
            self._settle(part, outcome, whole=False)

    def _refused_unnamed(self, units: list[UnitT], outcome: WriteResult | ListSyncError) -> bool:
        """Whether ``outcome`` is a 404 that names none of ``units``."""
        return (
            isinstance(outcome, NotFoundError)
            and not self._ids_named(outcome.message, units)
            and not self.named(outcome.message, units)
        )

    def _list_gone(self) -> bool:
        """Whether a read of the List answers 404 (or ``List not found``): asked once per writer
        call, counted as an isolation request. A read failing otherwise says nothing: ``False``."""
        if self._probed:
            return False
        self._probed = True
        self.report.requests += 1
        self.report.isolation_requests += 1
        try:
            self.probe()
        except NotFoundError:
            return True
        except ListSyncError:
            return False
        return False

    def _ids_named(self, message: str, units: list[UnitT]) -> list[int]:
        """Positions of the units whose account domain or row id ``message`` names."""
        found = _named_tokens(message, {self.id_of(unit) for unit in units})
        return [i for i, unit in enumerate(units) if self.id_of(unit).lower() in found] if found else []

    def _recut_to_stated_cap(self, units: list[UnitT], message: str) -> list[list[UnitT]] | None:
        cap = _stated_cap(message)
        if cap is None:
            return None
        parts = self.recut(units, *cap)
        if parts is None or len(parts) < 2:
            return None  # the request was within the cap: the refusal is about something else
        self.client.learned_caps[cap[0]] = cap[1]
        return parts


def _named_tokens(message: str, names: Iterable[str]) -> set[str]:
    """Those of ``names`` that ``message`` names, lowercased: each compared case-insensitively,
    as a whole token, not inside a longer name (``a.io`` is not named by ``data.io`` or
    ``a.io.uk``) nor an e-mail address (``b.io`` is not named by ``ann@b.io``). A full stop after
    a name may end the sentence."""
    wanted = sorted({name.lower() for name in names if name}, key=len, reverse=True)
    if not wanted:
        return set()
    alternatives = "|".join(re.escape(name) for name in wanted)
    pattern = rf"(?<![\w.@-])(?:{alternatives})(?![\w-]|\.[\w-])"
    return {found.lower() for found in re.findall(pattern, message, re.IGNORECASE)}


def _positions(message: str, array: str) -> list[int]:
    """The indexes ``array[<i>]`` a refusal message names."""
    return [int(found) for found in re.findall(rf"\b{array}\[(\d+)\]", message)]


def _capped(size: int, client: ListSyncClient, things: str) -> int:
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
    client: ListSyncClient,
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

    sender = _Sender[PersonUnit](
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
        client,
        table_id,
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
    client: ListSyncClient,
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
    sender = _Sender[Keyed[Any]](
        client,
        report,
        request=lambda units: request([unit.value for unit in units]),
        key_of=lambda unit: unit.key,
        id_of=lambda unit: id_of(unit.value),
        named=lambda message, units: _positions(message, array),
        recut=lambda units, things, size: list(_chunks(units, size)) if things == array else None,
        table_id=table_id,
        probe=lambda: client.get_rows(table_id, limit=1),
        missing_means_done=missing_means_done,
    )
    for chunk in _chunks(valid, _capped(chunk_size, client, array)):
        sender.send(chunk)
    return report


def write_row_adds(
    client: ListSyncClient,
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
    client: ListSyncClient,
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
