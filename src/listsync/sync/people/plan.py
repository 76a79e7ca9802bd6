"""The plan of a people sync: the writes it holds (adds, patches, deletes, copies to remove), the
counts its summary needs, the ledger the next state is made from, and its plan-file entries.

:func:`~listsync.sync.people.diff.plan_people_sync` makes a plan; the apply, the read back and the
plan file take it from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar, overload

import numpy as np
import pandas as pd

from listsync.sync.state import Ledger


@dataclass(frozen=True, slots=True)
class PlannedAdd:
    """A person to add to an account row; ``person`` holds the fields to send (no ``None``)."""

    account_domain: str
    identity: str
    person: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PlannedPatch:
    """Changed fields of a List person: ``changes`` maps field → ``(before, after)``.

    ``match`` is the List person's identity (A17): their e-mail when they have one. ``current``
    holds the List person's fields as read, so a service that refuses the match can be given the
    person again whole (delete + add, see :func:`apply_people_plan`).
    """

    account_domain: str
    identity: str
    match: dict[str, Any]
    changes: dict[str, tuple[Any, Any]]
    current: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def patch(self) -> dict[str, Any]:
        """The fields to send, with their new values (``None`` only under ``overwrite_with_null``)."""
        return {name: after for name, (_before, after) in self.changes.items()}


@dataclass(frozen=True, slots=True)
class PlannedDelete:
    """A List person to remove, found by their identity (§4.6).

    ``copy`` is 0 for a person the extract no longer holds, and ``n`` for the ``n``-th extra copy
    of a person the List holds several times (a repair: one copy stays; where the service's
    deletes reach every copy, the identity is deleted and one copy added again).
    """

    account_domain: str
    identity: str
    match: dict[str, Any]
    copy: int = 0
    #: The List person's fields: a copy is added again from them where a delete removes every copy.
    person: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


#: Column prefixes of a patches frame (:class:`PlannedWrites`): a field's new value, and whether
#: the row's patch writes it.
NEW, PATCHED = "new:", "patched:"
#: The column of a deletes frame that is :attr:`PlannedDelete.copy`.
COPY = "copy"

WriteT = TypeVar("WriteT", "PlannedAdd", "PlannedPatch", "PlannedDelete")


class PlannedWrites(Sequence[WriteT], Generic[WriteT]):
    """Planned writes of one kind, held as the columns they are made of (the few rows of the
    extract and the List they need) and made objects a batch at a time as they are read: a plan of
    a large List holds hundreds of thousands of writes, most of them only counted or sent once.

    :param count: how many writes.
    :param make: the writes from ``start`` to ``stop``, as objects.
    :param frame: the columns the writes are made of, a row a write, where a reader can take
        them as columns; None: as objects only. Each has ``account_domain`` and ``identity``,
        and besides them: the adds, the fields they write (nulls unwritten); the patches, the
        List person's fields as read, and for each field some patch writes, its new value
        (:data:`NEW`) and whether the row's patch writes it (:data:`PATCHED`); the deletes, the
        List person's fields and :data:`COPY`.
    """

    #: Writes made objects at a time while iterating. Small enough for a batch's objects to stay in
    #: the processor's cache while they are used: writing the plan file of the 1,000,000-person
    #: change night took 1.3, 4.1 and 3.0 µs a write (adds, patches, deletes) a thousand at a time,
    #: 1.3, 4.9 and 3.1 ten thousand at a time; at 100,000 people, 1.3, 4.0 and 2.8 either way.
    BATCH = 1_000

    def __init__(
        self,
        count: int = 0,
        make: Callable[[int, int], list[WriteT]] | None = None,
        frame: pd.DataFrame | None = None,
    ) -> None:
        self._count = count
        self._make: Callable[[int, int], list[WriteT]] = make or (lambda _start, _stop: [])
        self.frame = frame

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[WriteT]:
        for start in range(0, self._count, self.BATCH):
            yield from self._make(start, min(start + self.BATCH, self._count))

    @overload
    def __getitem__(self, index: int) -> WriteT: ...
    @overload
    def __getitem__(self, index: slice) -> list[WriteT]: ...
    def __getitem__(self, index: int | slice) -> WriteT | list[WriteT]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            made = self._make(start, stop) if step == 1 and start < stop else []
            return made if step == 1 else [self[i] for i in range(start, stop, step)]
        position = index + self._count if index < 0 else index
        if not 0 <= position < self._count:
            raise IndexError(index)
        return self._make(position, position + 1)[0]

    def without(self, places: np.ndarray) -> PlannedWrites[WriteT]:
        """These writes but those at ``places``."""
        kept = np.setdiff1d(np.arange(self._count), places)
        make = self._make

        def made(start: int, stop: int) -> list[WriteT]:
            wanted = kept[start:stop]
            if not len(wanted):
                return []
            first = int(wanted[0])
            span = make(first, int(wanted[-1]) + 1)
            return [span[place - first] for place in wanted.tolist()]

        frame = None if self.frame is None else self.frame.take(kept).reset_index(drop=True)
        return PlannedWrites(len(kept), made, frame)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PlannedWrites({len(self)})"


class HeldPerson(NamedTuple):
    """A person the plan does not write, though the extract or the mirror would: ``action`` is
    ``write`` (an extract person whose identity several List people share) or ``delete``."""

    account_domain: str
    identity: str
    action: str
    reason: str


@dataclass
class PeoplePlan:
    """What a people sync will write, and the counts a summary needs.

    :ivar source_people: people the extract holds (after rejects and duplicates).
    :ivar current_people: people the List holds now.
    :ivar unchanged: extract people already in the List as they are.
    :ivar list_unidentified: List people with no identity, left alone.
    :ivar list_duplicates: List people sharing an e-mail, profile URL or identity with another on
        the same account, left alone: a write by that key could not say which of them it means.
    :ivar conflicts: extract people not written because their identity is one of those shared
        by several List people (remove the duplicates from the List to sync them).
    :ivar held: one :class:`HeldPerson` per conflict and per delete held back (``deletes_held``),
        naming the person, for the summary's ``failure_reasons`` and the outcomes file.
    :ivar repairs: in mirror mode, the extra copies of people the List holds more than once under
        one identity (a lost add of someone known only by phone or name leaves such copies): one
        copy of each is kept, these are deleted.
    :ivar not_added: with ``mode="update_only"``, extract people the List lacks, left out.
    :ivar not_updated: with ``mode="insert_only"``, List people whose fields differ from the
        extract's, left as they are.
    """

    adds: Sequence[PlannedAdd] = field(default_factory=PlannedWrites)
    patches: Sequence[PlannedPatch] = field(default_factory=PlannedWrites)
    deletes: Sequence[PlannedDelete] = field(default_factory=PlannedWrites)
    repairs: Sequence[PlannedDelete] = field(default_factory=PlannedWrites)
    unchanged: int = 0
    source_people: int = 0
    current_people: int = 0
    list_unidentified: int = 0
    list_duplicates: int = 0
    conflicts: int = 0
    held: list[HeldPerson] = field(default_factory=list)
    not_added: int = 0
    not_updated: int = 0
    #: Deletes and copies to remove held back: a delete by their phone or name could reach another
    #: person of the account (they are in ``held``).
    deletes_held: int = 0
    ledger: PeopleLedger | None = None
    #: How the List was read: reads again of a torn read, and whether the read planned from was
    #: steady (:mod:`listsync.sync.steady`); what tore it when it was not.
    rereads: int = 0
    steady_read: bool = True
    torn_reasons: list[str] = field(default_factory=list)
    #: How far the service's deletes by phone or name reach, as learned (``one``, ``all``; None:
    #: not known yet, learned from the first copy removed).
    delete_reach: str | None = None
    #: Whether reading accounts back may page the whole List when that takes fewer requests
    #: (:func:`~listsync.sync.people.read.read_accounts`); not for a shard of a split, which
    #: reads only its own accounts (:mod:`listsync.sync.people.split`).
    may_page_list: bool = True
    #: Accounts a shard of a split read afresh before it wrote (:mod:`listsync.sync.people.split`).
    rechecked: int = 0

    def drop_adds(self, places: np.ndarray) -> None:
        """Plan no add at ``places`` (among :attr:`adds`), nor keep it in the ledger."""
        if not len(places):
            return
        assert isinstance(self.adds, PlannedWrites)
        self.adds = self.adds.without(places)
        if self.ledger is not None:
            self.ledger.add_keys = np.delete(self.ledger.add_keys, places)
            self.ledger.add_sent = np.delete(self.ledger.add_sent, places)

    @property
    def size(self) -> int:
        """The number of writes the plan holds (people to add, patch and delete, copies to remove)."""
        return len(self.adds) + len(self.patches) + len(self.deletes) + len(self.repairs)

    def entries(self) -> Iterator[dict[str, Any]]:
        """The plan as plan-file entries (see ``listsync.files.write_json_lines``)."""
        for add in self.adds:
            yield {
                "action": "add",
                "account_domain": add.account_domain,
                "identity": add.identity,
                "changes": {name: {"before": None, "after": value} for name, value in add.person.items()},
            }
        for patch in self.patches:
            yield {
                "action": "patch",
                "account_domain": patch.account_domain,
                "identity": patch.identity,
                "match": patch.match,
                "changes": {
                    name: {"before": before, "after": after}
                    for name, (before, after) in patch.changes.items()
                },
            }
        for delete in [*self.repairs, *self.deletes]:
            yield {
                "action": "remove_copy" if delete.copy else "delete",
                "account_domain": delete.account_domain,
                "identity": delete.identity,
                "match": delete.match,
            }


@dataclass
class PeopleLedger(Ledger):
    """What the next state needs of a people plan (:mod:`listsync.sync.state`), besides what every
    :class:`~listsync.sync.state.Ledger` holds: the fields the digests are made of, the extract's
    keys and digests of each planned add and patch (in the plan's order), and the List's keys of
    each planned delete."""

    fields: list[str] = field(default_factory=list)
    add_keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    add_sent: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    patch_keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    patch_sent: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    delete_keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))


def item_key(item: PlannedAdd | PlannedPatch | PlannedDelete) -> str:
    copy = f" (copy {item.copy})" if isinstance(item, PlannedDelete) and item.copy else ""
    return f"{item.account_domain} {item.identity}{copy}"
