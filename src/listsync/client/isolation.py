"""Sending a writer's items in requests, and taking apart a request the service refused.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from listsync.client.endpoints import ListEndpoints
from listsync.client.errors import (
    AccountsNotFoundError,
    ApiError,
    BadRequestError,
    ListNotFoundError,
    ListSyncError,
    NotFoundError,
    OutcomeUnknownError,
    RowsNotFoundError,
)
from listsync.client.models import WriteResult
from listsync.client.retry import outcome_unknown
from listsync.client.write_items import WriteReport, late_write_deadline

UnitT = TypeVar("UnitT")

_CAP = re.compile(r"Maximum (?P<size>\d+) (?P<things>\w+)")


def _stated_cap(message: str) -> tuple[str, int] | None:
    """``(things, n)`` from a refusal stating a per-request cap, else ``None``."""
    found = _CAP.search(message)
    return (found["things"], int(found["size"])) if found and int(found["size"]) >= 1 else None


@dataclass
class IsolatingSender(Generic[UnitT]):
    """Sends flat lists of units in requests, taking refused requests apart (see the module docstring).

    :ivar client: the List's endpoints: the time of a lost request dates its units' settling,
        and a stated cap is kept in its ``learned_caps``.
    :ivar report: where every unit's outcome goes.
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

    client: ListEndpoints
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
        """Send ``units`` in one request and record what became of each.

        :param isolating: ``units`` are a part of a refused request, sent to take it apart.
        """
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
            report.succeeded(keys, outcome)
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
            report.fail(keys, str(exc))

    def _refuse_list(self, units: list[UnitT], exc: ListSyncError) -> None:
        """The service refused the List itself: every unit fails with its words, now and later."""
        self._list_refusal = exc
        self.report.fail([self.key_of(unit) for unit in units], str(exc))

    def _drop_missing(
        self, units: list[UnitT], exc: AccountsNotFoundError | RowsNotFoundError, *, whole: bool
    ) -> None:
        names = exc.domains if isinstance(exc, AccountsNotFoundError) else exc.row_ids
        missing = {name.lower() for name in names}
        dropped = [i for i, unit in enumerate(units) if self.id_of(unit).lower() in missing]
        if dropped:
            reason = exc.reason if isinstance(exc, AccountsNotFoundError) else exc.message
            self._set_apart_missing(units, dropped, reason)
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
            self.report.fail(dropped_keys, reason)
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
            self.report.fail([self.key_of(units[0])], str(exc))
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


def indexes_named(message: str, array: str) -> list[int]:
    """The indexes ``array[<i>]`` a refusal message names."""
    return [int(found) for found in re.findall(rf"\b{array}\[(\d+)\]", message)]
