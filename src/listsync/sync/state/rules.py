"""The three-way diff's decisions, which the people and rows planners share: what a plan weighs
besides the extract and the List (:mod:`listsync.sync.state`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from listsync.sync.forms import Forms
from listsync.sync.state.format import ADD, COLUMN_DTYPES, PATCH, UNSEEN, StateEntries, SyncState
from listsync.sync.state.ledger import Ledger

#: Matched items weighed at once by :meth:`LastApplied.changes`.
WEIGHED_AT_ONCE = 100_000
#: The keys, the digests of the extract's values and those of the List's, of some items.
Digests = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class LastApplied:
    """What a plan weighs besides the extract and the List: the sync's state
    (:mod:`listsync.sync.state`; None on a first run or a fresh one), the time the plan is made, and
    how long a write the List has not shown yet is waited for rather than sent again. Its methods
    are the three-way diff's decisions, which the people and rows planners share; each records
    what it decides in the plan's :class:`Ledger`."""

    state: SyncState | None
    now: float
    visibility_window: float

    @property
    def forms(self) -> Forms:
        """The forms learned so far (none without a state)."""
        return {} if self.state is None else self.state.forms

    def entries(self, keys: np.ndarray) -> tuple[np.ndarray, _Entries]:
        """Where each of ``keys`` stands in the state (-1: nowhere), and its entry's columns (those
        of an empty entry where it has none), each taken when first asked for."""
        if self.state is None:
            nowhere = np.full(len(keys), -1, dtype=np.int32)
            return nowhere, _Entries(None, nowhere)
        positions = self.state.find(keys)
        return positions, _Entries(self.state.entries, positions)

    def hold(self, keys: np.ndarray, kind: int, ledger: Ledger) -> np.ndarray:
        """Which of ``keys`` have a write of ``kind`` the List has not shown yet, acknowledged
        within the visibility window: not planned again, their entries kept as they are."""
        positions, entries = self.entries(keys)
        return self._held(positions, entries, kind, ledger)

    def _held(
        self,
        positions: np.ndarray,
        entries: _Entries,
        kind: int,
        ledger: Ledger,
        among: np.ndarray | None = None,
    ) -> np.ndarray:
        waiting = (positions >= 0) & (entries.kind == kind)
        if among is not None:
            waiting &= among
        candidates = np.flatnonzero(waiting)
        since = entries.since[candidates].astype(np.float64)
        waiting[candidates[self.now - since >= self.visibility_window]] = False
        ledger.keep(positions[waiting], self.state)
        ledger.awaiting += int(waiting.sum())
        return waiting

    def adds(self, keys: np.ndarray, ledger: Ledger) -> np.ndarray:
        """Which of the items to add (by ``keys``) to add indeed: not those an earlier run added
        that the List has not shown yet (a second add would make a second copy of anyone the
        service does not merge). An item the List showed once and no longer holds may have been
        removed there by hand, or only be missing from a read that the List moved under: it is an
        absence to confirm by a fresh read before it is added again (:meth:`Ledger.settle_absent`),
        noted in the ledger by its place among the adds kept."""
        positions, entries = self.entries(keys)
        waiting = self._held(positions, entries, ADD, ledger)
        gone = (positions >= 0) & ~waiting & (entries.kind == 0) & (entries.seen != UNSEEN)
        ledger.absent_at(positions[gone], np.flatnonzero(gone[~waiting]), self.state)
        return ~waiting

    def in_step(self, keys: np.ndarray, sent: np.ndarray, seen: np.ndarray) -> np.ndarray:
        """Which matched items have the extract values last sent (digests ``sent``) and the List
        values last seen (``seen``): unchanged, whatever form the List keeps them in."""
        positions, entries = self.entries(keys)
        return (positions >= 0) & (entries.sent == sent) & (entries.seen == seen)

    def changes(
        self, differs: np.ndarray, ledger: Ledger, digests: Callable[[int, int], Digests]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Which matched items to write, of those a live diff finds different (``differs``), and
        which to wait for (a write of an earlier run not shown yet); and the keys and digests sent
        of those to write. Items in step are no change; a List changed under an unchanged extract
        was edited by hand (repaired, counted). The items not written become entries of the next
        state. ``digests(start, stop)`` gives the keys, the digests of the extract's values and
        those of the List's of the items from ``start`` to ``stop``: they are asked for
        :data:`WEIGHED_AT_ONCE` items at a time, so that the state's entries are taken for that many at
        once, never for every item."""
        differs, held = differs.copy(), np.zeros(len(differs), dtype=bool)
        written: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, len(differs), WEIGHED_AT_ONCE):
            stop = min(start + WEIGHED_AT_ONCE, len(differs))
            keys, sent, seen = digests(start, stop)
            differs[start:stop], held[start:stop] = self._weighed(
                keys, sent, seen, differs[start:stop], ledger
            )
            written.append((keys[differs[start:stop]], sent[differs[start:stop]]))
        keys = np.concatenate([keys for keys, _ in written] or [np.empty(0, dtype=np.uint64)])
        sent = np.concatenate([sent for _, sent in written] or [np.empty(0, dtype=np.uint64)])
        return differs, held, keys, sent

    def _weighed(
        self, keys: np.ndarray, sent: np.ndarray, seen: np.ndarray, differs: np.ndarray, ledger: Ledger
    ) -> tuple[np.ndarray, np.ndarray]:
        positions, entries = self.entries(keys)
        as_sent = (positions >= 0) & (entries.sent == sent)
        seen_before = entries.seen
        was_seen = seen_before != UNSEEN
        unmoved = as_sent & (seen_before == seen) & (entries.kind == 0)
        del seen_before
        differs = differs & ~unmoved
        held = self._held(positions, entries, PATCH, ledger, among=as_sent & differs)
        differs = differs & ~held
        edited = differs & as_sent & was_seen & (entries.kind == 0)
        ledger.edited_in_list += int(edited.sum())
        steady = ~differs & ~held
        # An entry that stays as it was is kept by its place in the state, not copied.
        ledger.keep(positions[steady & unmoved], self.state)
        new = steady & ~unmoved
        ledger.kept.append(StateEntries.of(keys[new], sent[new], seen[new]))
        return differs, held


class _Entries:
    """The columns of the state's entries at some positions (-1: none; an empty entry there),
    each taken from the state when read, and not kept: a plan of a million people holds one at a
    time."""

    def __init__(self, entries: StateEntries | None, positions: np.ndarray) -> None:
        self._entries, self._positions = entries, positions

    def _column(self, name: str) -> np.ndarray:
        if self._entries is None or not len(self._entries):
            return np.zeros(len(self._positions), dtype=np.dtype(COLUMN_DTYPES[name]))
        found = self._positions >= 0
        column = getattr(self._entries, name)[np.where(found, self._positions, 0)]
        column[~found] = 0
        return column

    @property
    def sent(self) -> np.ndarray:
        return self._column("sent")

    @property
    def seen(self) -> np.ndarray:
        return self._column("seen")

    @property
    def since(self) -> np.ndarray:
        return self._column("since")

    @property
    def kind(self) -> np.ndarray:
        return self._column("kind")
