"""Reading back the accounts a people plan touched, and checking every write against what the plan
meant: waiting for writes the List does not show yet, and learning the forms it keeps values in."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from listsync.sync.digests import value_digests
from listsync.sync.forms import merged_forms
from listsync.sync.memory import READ_BACK_AT_ONCE
from listsync.sync.people.apply import PeopleApplyResult
from listsync.sync.people.frames import records_frame
from listsync.sync.people.plan import (
    PeoplePlan,
    PlannedAdd,
    PlannedDelete,
    PlannedPatch,
    PlannedWrites,
    item_key,
)
from listsync.sync.people.read import (
    ReadBack,
    SoughtPeople,
    TakenWrites,
    delete_read_back,
    looked_up_keys,
    not_found,
    people_index,
    read_accounts,
    read_back,
)
from listsync.sync.steps import MAX_FAILURE_REASONS, read_back_rounds, wait_for_late_writes

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient

log = logging.getLogger(__name__)

#: ``PeopleVerification.outcome`` of a write: not settled (failed, or drift), shown, not shown yet.
NOT_SETTLED, SHOWN, UNCONFIRMED = 0, 1, 2


@dataclass
class PeopleVerification:
    """What re-reading the accounts a plan touched showed.

    :ivar verified: writes the re-read confirms (acknowledged ones, and unknown ones found applied).
    :ivar drift: key → reason, per acknowledged write the re-read contradicts.
    :ivar filter: how the touched accounts were read: ``"service"`` (the service's account
        filter), ``"client"`` (the whole List, filtered here, because the service ignores the
        filter or too many accounts were touched), or ``None`` (nothing to verify).
    :ivar service_forms: writes the List shows in a form of its own (:mod:`listsync.sync.forms`).
    :ivar forms: field → the classes of form learned from them.
    :ivar unconfirmed: acknowledged writes the List did not show within the verify timeout.
    :ivar unconfirmed_reasons: what was not shown, one line each (the first few).
    :ivar outcome: per planned write, in the order of :func:`planned_writes`: ``SHOWN``,
        ``UNCONFIRMED`` or ``NOT_SETTLED``.
    :ivar seen: per planned add or patch shown, the digest of the List person's values
        (:func:`~listsync.sync.state.value_digests` of the plan's fields); 0 elsewhere.
    :ivar copies_removed: extra copies the List shows removed (one copy of the person left).
    :ivar lost: ``"<account domain> <identity>"`` of the people whose extra copies were removed
        and whom the List no longer holds at all: each also drift, and added again by the next run.
    """

    verified: int = 0
    drift: dict[str, str] = field(default_factory=dict)
    filter: str | None = None
    service_forms: int = 0
    forms: dict[str, list[str]] = field(default_factory=dict)
    unconfirmed: int = 0
    unconfirmed_reasons: list[str] = field(default_factory=list)
    outcome: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    copies_removed: int = 0
    lost: set[str] = field(default_factory=set)


def verify_people(
    plan: PeoplePlan,
    result: PeopleApplyResult,
    client: ListSyncClient,
    *,
    table_id: str,
    page_size: int,
    verify_timeout: float = 0.0,
) -> PeopleVerification:
    """Re-read the accounts the plan touched and check every write against the plan's intent.

    A write the List does not show yet (an add absent, a patched field at its old value, a deleted
    person present) is read again, with growing pauses, until it shows or ``verify_timeout``
    seconds have passed; then an acknowledged one is ``unconfirmed`` (not a failure: the next
    run does not send it again while it is younger than the visibility window). A written value
    shown in the service's own form counts in ``service_forms`` and teaches that form. An
    acknowledged write the List contradicts otherwise is drift. A write of unknown outcome is
    settled here: found applied, it is counted as written; not found, it moves to
    ``result.failed``. Only the touched accounts are read: by the service's account filter when
    there are fewer of them than pages of the whole List, otherwise (or when the service ignores
    the filter) by reading the whole List, once a round for every write (:class:`SoughtPeople`:
    the keys each write's person is found by and what it wrote, as hashes). A write whose person
    the hashes show other than written (in a form of the service's own, at an old value, or
    drifted) is read back again in full, :data:`READ_BACK_AT_ONCE` writes at a time, to say how.
    """
    # A set of both only when some outcome is unknown: made of a night's 3,000,000 acknowledged
    # writes, it took 1.4 s.
    settled = result.written.keys() | result.unknown.keys() if result.unknown else result.written.keys()
    verification = PeopleVerification(
        outcome=np.zeros(plan.size, dtype=np.uint8), seen=np.zeros(plan.size, dtype=np.uint64)
    )
    if len(settled) == plan.size:  # every write answered: none made an object to say so
        pending = np.ones(plan.size, dtype=bool)
    else:
        pending = np.array([item_key(item) in settled for _, item in planned_writes(plan)], dtype=bool)
    if not pending.any():
        return verification
    wait_for_late_writes(client, result.settle_after if result.unknown else None)
    reading = _ReadBack(plan, result, verification, pending, client, table_id, page_size)
    for _round in read_back_rounds(client, verify_timeout, lambda: bool(pending.any()), "people writes"):
        in_full = reading.read_hashed()
        for first in range(0, len(in_full), READ_BACK_AT_ONCE):
            reading.read_in_full(in_full[first : first + READ_BACK_AT_ONCE])
    _not_shown(plan, result, verification, pending, problems=reading.problems, verify_timeout=verify_timeout)
    verification.forms = merged_forms(*reading.learned)
    return verification


@dataclass
class _ReadBack:
    """One read back of a plan's writes; records what each write shows in ``verification``,
    settles the unknown ones in ``result``, and clears the writes shown from ``pending``."""

    plan: PeoplePlan
    result: PeopleApplyResult
    verification: PeopleVerification
    pending: np.ndarray
    client: ListSyncClient
    table_id: str
    page_size: int
    #: Position → what a write not shown yet still lacks.
    problems: dict[int, str] = field(default_factory=dict)
    #: The forms each write shown in the service's own form taught.
    learned: list[dict[str, tuple[str, ...]]] = field(default_factory=list)

    def read_hashed(self) -> np.ndarray:
        """Read the accounts of every pending write once, holding hashes of what each looks for
        (:class:`SoughtPeople`), and settle the writes the hashes settle; return the positions
        of those to read back in full: an add or a patch whose person shows other than written."""
        plan = self.plan
        taken: list[TakenWrites] = []
        offset = 0
        for kind, of_kind in _kinds(plan):
            rows = np.flatnonzero(self.pending[offset : offset + len(of_kind)])
            if len(rows):  # a plan's writes are the columns they are made of (diff.py)
                assert isinstance(of_kind, PlannedWrites) and of_kind.frame is not None
                taken.append(TakenWrites(kind, of_kind.frame, rows, offset))
            offset += len(of_kind)
        sought = SoughtPeople(taken, None if plan.ledger is None else plan.ledger.fields)
        sought.read(self._read(sought.domains, sorted_by_reader=True))
        # With no write of unknown outcome to settle, those shown (as written, or deleted) are
        # settled as columns, and only the others are made objects again.
        at_once = not self.result.unknown
        if at_once:
            self._shown(*sought.shown())
        writes = (write for write in sought.writes() if not (at_once and write[1]))
        in_full: list[int] = []
        for (position, (kind, item)), (found, shown, seen) in zip(
            _pending(plan, self.pending), writes, strict=True
        ):
            if isinstance(item, PlannedDelete):
                self._check(position, kind, item, delete_read_back(item, found))
            elif not any(found):
                self._check(position, kind, item, not_found(item))
            elif not shown:
                in_full.append(position)
            elif self._check(position, kind, item, ReadBack("shown")):
                self.verification.seen[position] = seen
        return np.asarray(in_full, dtype=np.int64)

    def _shown(self, positions: np.ndarray, seen: np.ndarray) -> None:
        """Record the acknowledged writes at ``positions`` as shown, as :meth:`_check` does one by
        one, their people's digests being ``seen`` (0: a delete)."""
        verification = self.verification
        self.pending[positions] = False
        if self.problems:
            for position in positions.tolist():
                self.problems.pop(position, None)
        verification.verified += len(positions)
        verification.outcome[positions] = SHOWN
        verification.seen[positions] = seen

    def read_in_full(self, positions: np.ndarray) -> None:
        """Read the accounts of the writes at ``positions`` (pending, in order) and check those
        writes against the people found, who are held for these writes only."""
        plan, verification = self.plan, self.verification
        chosen = np.zeros_like(self.pending)
        chosen[positions] = True
        start, stop = int(positions[0]), int(positions[-1]) + 1
        wanted: dict[str, set[str]] = {}
        for _position, (_, item) in _pending(plan, chosen, start, stop):
            wanted.setdefault(item.account_domain, set()).update(looked_up_keys(item))
        index = people_index(self._read(wanted), wanted)  # only the people the writes look for
        del wanted
        shown: dict[int, dict[str, Any]] = {}
        for position, (kind, item) in _pending(plan, chosen, start, stop):
            back = read_back(item, index.get(item.account_domain, {}))
            if self._check(position, kind, item, back) and back.found is not None:
                shown[position] = back.found
        del index
        if plan.ledger is not None and shown:
            fields = plan.ledger.fields
            places = np.fromiter(shown, dtype=np.int64, count=len(shown))
            frame = records_frame(((None, found) for found in shown.values()), fields)
            verification.seen[places] = value_digests(frame, fields)

    def _read(self, domains: Collection[str], *, sorted_by_reader: bool = False) -> Iterable[Any]:
        """The people of ``domains``, as they come (:func:`read_accounts`)."""
        listed, filter_used = read_accounts(
            self.client,
            self.table_id,
            sorted(domains),
            self.page_size,
            self.plan.current_people,
            may_page=self.plan.may_page_list,
            sorted_by_reader=sorted_by_reader,
        )
        self.verification.filter = self.verification.filter or filter_used
        return listed

    def _check(
        self, position: int, kind: str, item: PlannedAdd | PlannedPatch | PlannedDelete, back: ReadBack
    ) -> bool:
        """Record what the List shows of one write (``back``); whether it is verified."""
        result, verification = self.result, self.verification
        if back.status == "not_yet":
            self.problems[position] = back.problem or ""
            return False
        self.pending[position] = False
        self.problems.pop(position, None)
        key = item_key(item)
        if back.status == "lost":
            # Counted once a person, however many copies were removed with them; never verified.
            person = f"{item.account_domain} {item.identity}"
            if person not in verification.lost:
                verification.lost.add(person)
                verification.drift[key] = f"{kind} of {key}: {back.problem}"
            result.unknown.pop(key, None)
            return False
        if isinstance(item, PlannedDelete) and item.copy:
            verification.copies_removed += 1
        if key in result.unknown:
            _written_kind, reason = result.unknown.pop(key)
            if back.status == "drift":
                result.failed[key] = f"outcome unknown ({reason}), and the List does not show it applied"
                return False
            result.count(kind, 1)
        elif back.status == "drift":
            verification.drift[key] = f"{kind} of {key}: {back.problem}"
            return False
        verification.verified += 1
        verification.outcome[position] = SHOWN
        if back.forms:
            verification.service_forms += 1
            self.learned.append(back.forms)
        return True


def _not_shown(
    plan: PeoplePlan,
    result: PeopleApplyResult,
    verification: PeopleVerification,
    pending: np.ndarray,
    *,
    problems: dict[int, str],
    verify_timeout: float,
) -> None:
    """Settle the writes the List still does not show once the read back gave up on them: one of
    unknown outcome failed (it may never have been applied), an acknowledged one is unconfirmed."""
    for position, (kind, item) in _pending(plan, pending):
        key = item_key(item)
        if key in result.unknown:
            _written_kind, reason = result.unknown.pop(key)
            result.failed[key] = f"outcome unknown ({reason}), and the List does not show it applied"
            continue
        verification.unconfirmed += 1
        verification.outcome[position] = UNCONFIRMED
        if len(verification.unconfirmed_reasons) < MAX_FAILURE_REASONS:
            verification.unconfirmed_reasons.append(
                f"{kind} of {key}: {problems.get(position) or 'not shown'} after {verify_timeout:g} s"
            )
    if verification.unconfirmed:
        log.warning(
            "%d acknowledged people writes are not shown by the List after %g s (verify_timeout): "
            "counted unconfirmed, not sent again by a run within the visibility window",
            verification.unconfirmed,
            verify_timeout,
        )


def _pending(
    plan: PeoplePlan, pending: np.ndarray, start: int = 0, stop: int | None = None
) -> Iterator[tuple[int, tuple[str, PlannedAdd | PlannedPatch | PlannedDelete]]]:
    """The pending writes from position ``start`` to ``stop``, made objects a batch at a time for
    each pass rather than held: a large plan's writes are many objects."""
    stop = len(pending) if stop is None else stop
    offset = 0
    for kind, writes in _kinds(plan):
        low, high = max(start - offset, 0), min(stop - offset, len(writes))
        for batch in range(low, high, PlannedWrites.BATCH):
            end = min(batch + PlannedWrites.BATCH, high)
            if not pending[offset + batch : offset + end].any():
                continue  # made for nothing: a round after the first has few writes left
            for position, item in enumerate(writes[batch:end], start=offset + batch):
                if pending[position]:
                    yield position, (kind, item)
        offset += len(writes)


def _kinds(plan: PeoplePlan) -> tuple[tuple[str, Sequence[PlannedAdd | PlannedPatch | PlannedDelete]], ...]:
    """A plan's writes of each kind, in the plan's order (the copies removed are deletes)."""
    return (("add", plan.adds), ("patch", plan.patches), ("delete", plan.repairs), ("delete", plan.deletes))


def planned_writes(plan: PeoplePlan) -> Iterator[tuple[str, PlannedAdd | PlannedPatch | PlannedDelete]]:
    """A plan's writes with their kind: the adds, the patches, the copies removed, the deletes."""
    yield from (("add", add) for add in plan.adds)
    yield from (("patch", patch) for patch in plan.patches)
    yield from (("delete", delete) for delete in [*plan.repairs, *plan.deletes])
