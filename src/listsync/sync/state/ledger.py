"""What a plan keeps for the next state, besides its writes (:mod:`listsync.sync.state`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from listsync.sync.state.format import StateEntries, SyncState


@dataclass
class Ledger:
    """What a plan keeps for the next state, besides its writes: the entries already final (items
    in step, writes held back: new ones, and those of the last state kept as they are), and what
    the three-way diff found.

    :ivar edited_in_list: items whose extract is as last sent but whose List values changed since
        they were seen (edited by hand): repaired as planned.
    :ivar awaiting: writes of an earlier run the List has not shown yet, younger than the
        visibility window: not sent again.
    """

    kept: list[StateEntries] = field(default_factory=list)
    edited_in_list: int = 0
    awaiting: int = 0
    #: Items the state says were applied and seen that the List read did not show, confirmed there
    #: by a fresh read: not written, their entries kept (:meth:`settle_absent`).
    turned_up: int = 0
    #: The state's positions of the absences to confirm, and their places among the plan's adds.
    absent: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    absent_adds: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: The last state's entries, and the positions of those kept as they are.
    _previous: StateEntries | None = field(default=None, repr=False)
    _kept_positions: list[np.ndarray] = field(default_factory=list, repr=False)

    @staticmethod
    def counts(ledger: Ledger | None) -> dict[str, int]:
        """What the three-way diff of ``ledger`` found, as the summary counts it (all 0 without a
        state): ``awaiting``, ``edited_in_list``, ``turned_up``."""
        if ledger is None:
            return {"awaiting": 0, "edited_in_list": 0, "turned_up": 0}
        return {
            "awaiting": ledger.awaiting,
            "edited_in_list": ledger.edited_in_list,
            "turned_up": ledger.turned_up,
        }

    def keep(self, positions: np.ndarray, last: SyncState | None) -> None:
        """Keep the ``last`` state's entries at ``positions`` as they are."""
        if len(positions) and last is not None:
            self._previous = last.entries
            self._kept_positions.append(positions)

    def absent_at(self, positions: np.ndarray, among_adds: np.ndarray, last: SyncState | None) -> None:
        """Note absences to confirm: the ``last`` state's entries at ``positions``, the plan's adds
        at ``among_adds``."""
        self.absent, self.absent_adds = positions, among_adds
        if len(positions) and last is not None:
            self._previous = last.entries

    def settle_absent(self, present: np.ndarray, *, confirmed: bool = True) -> np.ndarray:
        """What a fresh read showed of the absences (``present``, one a noted absence): an item
        present after all is not added, its entry kept as it is and, when the read ``confirmed``
        it, counted in ``turned_up``; an item absent was removed in the List by hand, is added
        again and counted in ``edited_in_list``. Return the places among the adds of those not to
        add. An unconfirmed read (a List read that was never steady) re-adds no one."""
        if not confirmed:
            present = np.ones(len(self.absent), dtype=bool)
        self._kept_positions.append(self.absent[present])
        if confirmed:
            self.turned_up += int(present.sum())
            self.edited_in_list += int((~present).sum())
        dropped = self.absent_adds[present]
        self.absent, self.absent_adds = self.absent[:0], self.absent_adds[:0]
        return dropped

    def final(self) -> list[StateEntries]:
        """The entries already final, the last state's kept ones included, in its order (by key):
        joined into the next state (:meth:`StateEntries.joined`), they are one sorted run among
        its entries, which is not sorted again (at 3,000,000 entries, 90% of them kept: 0.07 s
        rather than 0.33 s when taken in the plan's order)."""
        if self._previous is None or not self._kept_positions:
            return list(self.kept)
        kept = np.zeros(len(self._previous), dtype=bool)
        kept[np.concatenate(self._kept_positions)] = True
        return [*self.kept, self._previous.take(np.flatnonzero(kept))]
