"""The List endpoints' common ground, and the endpoints that describe Lists (GET lists, GET list).

:class:`ListOperations` finds a List, checks ``userId``, sizes pages and keeps reads behind writes
by the profile's lag, for every List endpoint; the targetable-people endpoints (spec §4.3–4.6) are
:mod:`~listsync.emulator.people_endpoints`, rows and cells (§4.7–4.9) and GET rows
:mod:`~listsync.emulator.rows_endpoints`.

Every write validates the whole request, then applies it, so a refused request changes nothing
and a retry is safe (assumptions A11, A14, A20, A21, A23). Statuses, messages and response bodies
follow ``docs/assumptions.md``, as the profile (:mod:`listsync.emulator.profiles`) varies them:
page cap, filter names, ``match`` keys, unknown accounts, caps, missing rows, the statuses and
refusal wordings, the forms people are kept in and the lag of reads behind writes; the wording
of answers in :mod:`listsync.emulator.answers`. Answers are returned in the reference form (A13,
A18).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from listsync.emulator.config import EmulatorConfig
from listsync.emulator.request_checks import bad_request, int_param
from listsync.emulator.store import ApiError, EmulatorState, ListState

DEFAULT_PAGE = 100


class ListOperations:
    """What every List endpoint shares, over an :class:`EmulatorState` (``clock`` gives epoch
    seconds), and the endpoints that describe Lists."""

    def __init__(self, config: EmulatorConfig, state: EmulatorState, clock: Callable[[], float]) -> None:
        self.dialect = config.dialect
        self.state = state
        self.clock = clock
        #: Refusals are worded the other way (the profile's ``refusal_wording``).
        self.other_wording = self.dialect.refusal_wording == "other"
        self._users = frozenset(config.users)
        self._lag = self.dialect.lag_seconds

    def table(self, table_id: str) -> ListState:
        lst = self.state.lists.get(table_id)
        if lst is None:
            raise ApiError(
                self.dialect.list_not_found_status, f"List not found or not accessible: {table_id}"
            )
        return lst

    def page_size(self, params: Mapping[str, str]) -> int:
        """``limit`` (default 100) up to the profile's page cap. Above the cap: a 400, or, when the
        profile does not refuse, a page of the cap's size, shorter than asked and without an error."""
        cap = self.dialect.page_cap
        default = min(DEFAULT_PAGE, cap)
        if self.dialect.page_cap_refuses:
            return int_param(params, "limit", default, 1, cap)
        return min(int_param(params, "limit", default, 1, None), cap)

    # ---- lag_seconds: reads behind writes ----------------------------------------------------

    def write(
        self,
        lst: ListState,
        operation: Callable[[ListState, dict[str, Any]], Mapping[str, Any]],
        body: dict[str, Any],
    ) -> Mapping[str, Any]:
        """Apply a List write (a write endpoint of :mod:`~listsync.emulator.people_endpoints` or
        :mod:`~listsync.emulator.rows_endpoints`) and answer it at once; under a lag,
        also keep a copy of the List as the write left it, stamped with the time of the answer.
        Without a lag this is the operation alone: nothing is copied."""
        if not self._lag:
            return operation(lst, body)
        before = None if lst.history else lst.copy()
        result = operation(lst, body)  # a refused write raises here, and nothing is kept
        if before is not None:
            lst.history.append((-math.inf, before))
        lst.history.append((self.clock(), lst.copy()))
        return result

    def visible(self, lst: ListState) -> ListState:
        """The List as reads see it: as it is, or under a lag as the newest write answered at
        least ``lag_seconds`` ago left it (before any write: as it was then). Copies no read can
        show again are dropped, all of them once the last write shows."""
        history = lst.history
        if not history:
            return lst
        cutoff = self.clock() - self._lag
        shown = 0
        while shown + 1 < len(history) and history[shown + 1][0] <= cutoff:
            shown += 1
        if shown == len(history) - 1 and history[shown][0] <= cutoff:
            # Every write shows: the List itself is what reads see until the next write.
            history.clear()
            return lst
        del history[:shown]
        return history[0][1]

    def check_user(self, user_id: object) -> None:
        """A9: ``userId`` is optional; when sent it must name a configured user."""
        if user_id is not None and user_id not in self._users:
            raise bad_request(f"User not found: {user_id}")

    # ---- Lists -------------------------------------------------------------------------------

    def describe(self, lst: ListState) -> dict[str, Any]:
        return {
            self.dialect.list_id_field: lst.id,
            "name": lst.config.name or lst.id,
            "columns": [
                {
                    "columnId": c.id,
                    "name": c.name or c.id,
                    "type": c.type,
                    **({"options": [o.model_dump() for o in c.options]} if c.type == "enum" else {}),
                }
                for c in lst.config.columns
            ],
            "targetableAccountColumn": lst.config.account_column,
            "uniqueDomains": lst.config.unique_domains,
            "rowCount": len(self.visible(lst).rows),
        }

    def list_lists(self) -> list[dict[str, Any]]:
        return [self.describe(lst) for lst in self.state.lists.values()]
