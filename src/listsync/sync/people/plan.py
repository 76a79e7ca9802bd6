"""Planning a people sync: the extract's people against the List's, by account domain and identity;
pure, no I/O."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeAlias, TypeVar, overload

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from listsync.client.models import person_match
from listsync.extract.mapping import ACCOUNT_DOMAIN, PERSON_FIELDS
from listsync.extract.normalize import NormalizationError, normalize_domain, normalize_profile_url
from listsync.sync.digests import key_hashes, value_digests
from listsync.sync.forms import Forms, fold_text
from listsync.sync.memory import give_back_freed_memory
from listsync.sync.people.frames import (
    IDENTITY,
    OBJECT_FIELDS,
    TEXT,
    TEXT_ARROW,
    ListPeople,
    PersonRecord,
    field_column,
    frame_records,
    given,
    list_frame,
    record_fields,
    records_frame,
    text_column,
    wire,
)
from listsync.sync.settings import DeleteScope, SyncMode, check_sync_options
from listsync.sync.state import DELETE, Digests, LastApplied, Ledger

#: Text as a pandas column or as Arrow.
Column: TypeAlias = pd.Series | pa.Array | pa.ChunkedArray


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
    of a person the List holds several times (a repair: one copy stays).
    """

    account_domain: str
    identity: str
    match: dict[str, Any]
    copy: int = 0


WriteT = TypeVar("WriteT", "PlannedAdd", "PlannedPatch", "PlannedDelete")


class PlannedWrites(Sequence[WriteT], Generic[WriteT]):
    """Planned writes of one kind, held as the columns they are made of (the few rows of the
    extract and the List they need) and made objects a batch at a time as they are read: a plan of
    a large List holds hundreds of thousands of writes, most of them only counted or sent once.

    :param count: how many writes.
    :param make: the writes from ``start`` to ``stop``, as objects.
    """

    #: Writes made objects at a time while iterating.
    BATCH = 10_000

    def __init__(self, count: int = 0, make: Callable[[int, int], list[WriteT]] | None = None) -> None:
        self._count = count
        self._make: Callable[[int, int], list[WriteT]] = make or (lambda _start, _stop: [])

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

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PlannedWrites({len(self)})"


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
    :ivar conflict_reasons: one reason per conflict, naming the person, for the summary's
        ``failure_reasons``.
    :ivar repairs: in mirror mode, the extra copies of people the List holds more than once under
        one identity (a lost add of someone known only by phone or name leaves such copies): one
        copy of each is kept, these are deleted.
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
    conflict_reasons: list[str] = field(default_factory=list)
    ledger: PeopleLedger | None = None

    @property
    def size(self) -> int:
        """The number of writes the plan holds (people to add, patch and delete, copies to remove)."""
        return len(self.adds) + len(self.patches) + len(self.deletes) + len(self.repairs)

    def entries(self) -> Iterator[dict[str, Any]]:
        """The plan as plan-file entries (see ``listsync.sync.steps.write_plan_file``)."""
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


def plan_people_sync(
    source: Mapping[str, Mapping[str, PersonRecord]] | pd.DataFrame,
    current: Iterable[PersonRecord] | ListPeople,
    *,
    fields: Collection[str] | None = None,
    mode: SyncMode = "upsert",
    delete_scope: DeleteScope = "accounts_in_source",
    overwrite_with_null: bool = False,
    last_applied: LastApplied | None = None,
) -> PeoplePlan:
    """Diff the extract's people against the List's, by account domain and identity.

    Pure: no I/O, so a plan can be built and inspected in a test or a dry run. Both sides are
    columns (:mod:`~listsync.sync.people.frames`): people are matched by joins on (account domain,
    key) and compared field by field as columns; only the planned writes become objects.

    :param source: the extract's people: ``prepare_people``'s frame (``PreparedPeople.frame``), or
        a mapping account domain → identity → person (a ``Person`` or a mapping of person fields),
        normalised and deduplicated.
    :param current: the List's people as read back (``ListedPerson`` or mappings of the same
        shape, with ``account_domain``), or already as columns
        (:func:`~listsync.sync.people.frames.list_frame`).
    :param fields: the person fields the extract carries (the targets of its column map); a
        field listed here but absent from a person is a null in the extract. None: the fields
        each person holds.
    :param mode: ``"upsert"`` adds and patches; ``"mirror"`` also deletes.
    :param delete_scope: in mirror mode, delete only within the extract's accounts
        (``"accounts_in_source"``) or anywhere in the List (``"list"``).
    :param overwrite_with_null: a null in the extract erases the List's value.
    :param last_applied: the sync's state, for a three-way diff: a matched person whose extract
        values are the ones last sent and whose List values are the ones seen after is unchanged,
        whatever form the List keeps them in; fields whose service forms were learned are compared
        (and people matched) in that form; writes the List has not shown yet, younger than the
        visibility window, are not planned again. The plan then carries a
        :class:`PeopleLedger` for the next state. None: a live diff alone, no ledger.
    :raises ValueError: an unknown ``mode`` or ``delete_scope``.
    """
    check_sync_options(mode, delete_scope)
    wanted = _source_people(source, fields)
    listed = current if isinstance(current, ListPeople) else list_frame(current)
    return _Planner(
        wanted, listed, mode == "mirror", delete_scope, overwrite_with_null, last_applied=last_applied
    ).plan()


@dataclass
class _Source:
    """The extract's people as columns: ``carried`` fields, and where each was given (None: everywhere)."""

    frame: pd.DataFrame
    carried: list[str]
    present: dict[str, np.ndarray] | None


def _source_people(
    source: Mapping[str, Mapping[str, PersonRecord]] | pd.DataFrame, fields: Collection[str] | None
) -> _Source:
    if isinstance(source, pd.DataFrame):
        names = [name for name in PERSON_FIELDS if name in source.columns]
        if fields is None:
            return _Source(source, names, {name: source[name].notna().to_numpy() for name in names})
        carried = [name for name in PERSON_FIELDS if name in fields]
        missing = {name: field_column(name, [None] * len(source)) for name in carried if name not in names}
        return _Source(source.assign(**missing) if missing else source, carried, None)
    people = [
        (domain, identity, person_fields(record))
        for domain, by_identity in source.items()
        for identity, record in by_identity.items()
    ]
    given = {name for _, _, values in people for name in values}
    carried = [name for name in PERSON_FIELDS if (name in fields if fields is not None else name in given)]
    frame = records_frame([(domain, values) for domain, _, values in people], carried)
    frame.insert(1, IDENTITY, text_column([identity for _, identity, _ in people]))
    present = None
    if fields is None:
        present = {
            name: np.array([name in values for _, _, values in people], dtype=bool) for name in carried
        }
    return _Source(frame, carried, present)


class _Planner:
    """One plan: the extract's people matched to the List's, then compared, all as columns.

    The List is indexed by (account domain, key) under every key a person is found by (identity,
    and a profile URL besides an e-mail), each key naming the first List person with it. An
    extract person's candidates are the List people its keys name, in the order
    :func:`person_keys` and the phone and name fallbacks give; the first candidate is theirs unless
    another extract person claimed it first. Candidates no other extract person has are decided as
    columns; the few shared ones one by one, in extract order.
    """

    def __init__(
        self,
        wanted: _Source,
        listed: ListPeople,
        mirror: bool,
        delete_scope: DeleteScope,
        overwrite: bool,
        *,
        last_applied: LastApplied | None = None,
    ) -> None:
        self.wanted, self.listed, self.mirror, self.overwrite = wanted, listed, mirror, overwrite
        self.source, self.list = wanted.frame, listed.frame
        self.last_applied = last_applied
        self.forms: Forms = {} if last_applied is None else last_applied.forms
        domains = pc.unique(_arrow(self.source[ACCOUNT_DOMAIN]))
        self.in_scope = (
            np.ones(len(self.list), dtype=bool)
            if delete_scope == "list"
            else pc.is_in(_arrow(self.list["domain"]), value_set=domains).to_numpy(zero_copy_only=False)
        )
        self.result = PeoplePlan(
            source_people=len(self.source),
            current_people=listed.read,
            list_unidentified=listed.unidentified,
        )
        self.ledger: PeopleLedger | None = None
        if last_applied is not None:
            self.ledger = self.result.ledger = PeopleLedger(fields=wanted.carried)

    def plan(self) -> PeoplePlan:
        source = self.source
        duplicated, claimed, matches = self._matches()
        give_back_freed_memory()
        found = matches >= 0
        conflicts = found & np.append(duplicated, False)[matches]
        matched = found & ~conflicts
        claimed[matches[matched]] = True
        # Writes go account by account, the accounts in the order the extract first names them
        # (numbered in order of first appearance).
        grouped = np.argsort(_numbered([source[ACCOUNT_DOMAIN]]), kind="stable")
        added = grouped[~found[grouped]]
        if self.last_applied is not None and self.ledger is not None:
            added = added[self.last_applied.adds(self._source_keys(added), self.ledger)]
            self.ledger.add_keys = self._source_keys(added)
            self.ledger.add_sent = value_digests(self.source, self.wanted.carried, added)
        self._adds(added)
        for key in frame_records(source, grouped[conflicts[grouped]], [ACCOUNT_DOMAIN, IDENTITY]):
            self.result.conflicts += 1
            self.result.conflict_reasons.append(
                f"{key[IDENTITY]} on account {key[ACCOUNT_DOMAIN]} matches several List people; "
                "remove the duplicates"
            )
        patched = grouped[matched[grouped]]
        self._patches(patched, matches[patched])
        if self.mirror:
            deleted = np.flatnonzero(~claimed & ~duplicated & self.in_scope)
            if self.last_applied is not None and self.ledger is not None:
                # Not those an earlier run deleted that the List still shows, within the window.
                rows = self.list.iloc[deleted]
                keys = key_hashes(rows["domain"], rows[IDENTITY])
                kept = ~self.last_applied.hold(keys, DELETE, self.ledger)
                deleted, self.ledger.delete_keys = deleted[kept], keys[kept]
            self.result.deletes = self._deletes(deleted)
        return self.result

    def _matches(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which List people share a key with another (left alone), which are claimed already (the
        extra copies a mirror run removes), and each extract person's List person (-1: none).
        The codes and indexes it builds are dropped on return, before the writes are planned."""
        listed, source = self.list, self.source
        identities = _arrow(listed[IDENTITY])
        email_identity = pc.starts_with(identities, "email:").to_numpy(zero_copy_only=False)
        # Every List person is found by their identity, and one with an e-mail by their profile URL too.
        list_keys = [
            self._fold_keys(identities),
            self._fold_keys(("url:" + self._list_values("url_key")).where(email_identity)),
        ]
        codes = _codes(
            listed["domain"], list_keys, source[ACCOUNT_DOMAIN], [self._fold_keys(source[IDENTITY])]
        )
        list_codes, source_codes = codes[: 2 * len(listed)], codes[2 * len(listed) :]
        first, duplicated = _index(list_codes, len(listed), int(codes.max()) + 1 if len(codes) else 0)
        self.result.list_duplicates = int(duplicated.sum())
        claimed = np.zeros(len(listed), dtype=bool)
        if self.mirror:
            self._repair(list_codes[: len(listed)], duplicated, claimed)
            self.result.list_duplicates = int(duplicated.sum())
        by_identity = np.where(source_codes >= 0, np.append(first, -1)[source_codes], -1)
        return (
            duplicated,
            claimed,
            self._match(by_identity, _OtherKeys(self, list_keys, email_identity), duplicated),
        )

    @staticmethod
    def _match(by_identity: np.ndarray, others: _OtherKeys, duplicated: np.ndarray) -> np.ndarray:
        """Each extract person's List person (-1: none), as :func:`_find` decides one by one in
        extract order: the first of their candidates that is duplicated or not yet claimed.

        Everyone's first candidate is theirs unless another extract person has it as a candidate
        too: those people, and whoever has one of their candidates first, are decided one by one.
        The keys besides the identity (profile URL, phone, name) are looked up only for the people
        that need them: the unmatched, and those decided one by one."""
        shared_freely = np.append(duplicated, False)  # a duplicated List person is never claimed
        first = by_identity.copy()
        unmatched = np.flatnonzero(first < 0)
        if len(unmatched):
            first[unmatched] = _first_found(others.candidates(unmatched))
        claimable = (first >= 0) & ~shared_freely[first]
        # How many claim each List person (the last count, of "none", stays 0).
        claims = np.bincount(first[claimable], minlength=len(shared_freely))
        contended = claimable & (claims[first] > 1)
        rows = np.flatnonzero(contended)
        every = np.empty((0, 4), dtype=np.int64)
        while len(rows):
            every = np.column_stack([by_identity[rows], others.candidates(rows)])
            wanted = every[(every >= 0) & ~shared_freely[every]]
            grown = contended | (claimable & np.isin(first, wanted))
            if (grown == contended).all():
                break
            contended = grown
            rows = np.flatnonzero(contended)
        matches = np.where(contended, -1, first)
        claimed: set[int] = set()
        for row, candidates in zip(rows.tolist(), every, strict=True):
            matches[row] = _find(candidates, duplicated, claimed)
        return matches

    def desired_text(self, name: str) -> pd.Series:
        """The extract's value of text field ``name`` where it is carried and given, trimmed."""
        if name not in self.wanted.carried:
            return pd.Series(pd.NA, index=self.source.index, dtype=TEXT)
        column = self.source[name].astype(TEXT).str.strip()
        column = column.where(column.str.len() > 0)
        present = self.wanted.present
        return column if present is None else column.where(present[name])

    def _list_values(self, name: str, positions: np.ndarray | None = None) -> pd.Series:
        """The List's field ``name`` (of the people at ``positions``; default everyone's column):
        nulls where no List person has the field, whose column :func:`list_frame` leaves out."""
        if name not in self.list.columns:
            return field_column(name, [None] * (len(self.list) if positions is None else len(positions)))
        column = self.list[name]
        return column if positions is None else column.iloc[positions].reset_index(drop=True)

    def _repair(self, list_keys: np.ndarray, duplicated: np.ndarray, claimed: np.ndarray) -> None:
        """Plan the removal of the extra copies of people known by phone or name alone (see
        :func:`plan_people_sync`'s module): the first copy stays and is planned like anyone."""
        shared = np.flatnonzero(duplicated & self.in_scope)  # usually few: only theirs are read
        merged = (self._list_values("email", shared).str.strip().str.len().fillna(0).to_numpy() > 0) | (
            self._list_values("network_profile_url", shared).str.strip().str.len().fillna(0).to_numpy() > 0
        )
        copies = shared[~merged]
        if not len(copies):
            return
        groups = pd.Series(copies).groupby(list_keys[copies], sort=False)
        number = groups.cumcount().to_numpy()
        order = np.lexsort((number, groups.ngroup().to_numpy()))
        duplicated[copies] = False
        extra = number[order] > 0
        removed = copies[order][extra]
        claimed[removed] = True  # removed here, not by the mirror deletes
        self.result.repairs = self._deletes(removed, number[order][extra].tolist())

    def _deletes(
        self, positions: np.ndarray, copies: Sequence[int] | None = None
    ) -> PlannedWrites[PlannedDelete]:
        people = _rows(self.list, positions, ["domain", IDENTITY, *PERSON_FIELDS])
        numbers = np.zeros(len(positions), dtype=np.int64) if copies is None else np.asarray(copies)

        def make(start: int, stop: int) -> list[PlannedDelete]:
            deletes = []
            for person, copy in zip(
                frame_records(people, np.arange(start, stop)), numbers[start:stop].tolist(), strict=True
            ):
                domain, identity = person.pop("domain"), person.pop(IDENTITY)
                deletes.append(PlannedDelete(domain, identity, _match_of(person, identity), copy))
            return deletes

        return PlannedWrites(len(positions), make)

    def _adds(self, positions: np.ndarray) -> None:
        # A field an extract person does not give is a null here, and frame_records leaves it out.
        people = _rows(self.source, positions, [ACCOUNT_DOMAIN, IDENTITY, *self.wanted.carried])

        def make(start: int, stop: int) -> list[PlannedAdd]:
            adds = []
            for person in frame_records(people, np.arange(start, stop)):
                domain, identity = person.pop(ACCOUNT_DOMAIN), person.pop(IDENTITY)
                adds.append(PlannedAdd(domain, identity, person))
            return adds

        self.result.adds = PlannedWrites(len(positions), make)

    def _patches(self, positions: np.ndarray, matches: np.ndarray) -> None:
        """Compare each matched pair field by field; patch the pairs that differ."""
        changed = {name: self._changed(name, positions, matches) for name in self.wanted.carried}
        differs = np.zeros(len(positions), dtype=bool)
        for mask in changed.values():
            differs |= mask
        held = np.zeros(len(positions), dtype=bool)
        if self.last_applied is not None and self.ledger is not None:
            carried = self.wanted.carried

            def digests(start: int, stop: int) -> Digests:
                extract, listed = positions[start:stop], matches[start:stop]
                return (
                    self._source_keys(extract),
                    value_digests(self.source, carried, extract),
                    value_digests(self.list, carried, listed),
                )

            ledger = self.ledger
            differs, held, ledger.patch_keys, ledger.patch_sent = self.last_applied.changes(
                differs, ledger, digests
            )
        self.result.unchanged += int((~differs & ~held).sum())
        offsets = np.flatnonzero(differs)
        names = list(changed)
        wanted = _rows(self.source, positions[offsets], [ACCOUNT_DOMAIN, *names])
        current = _rows(self.list, matches[offsets], [IDENTITY, *PERSON_FIELDS])
        masks = {name: mask[offsets] for name, mask in changed.items()}

        def make(start: int, stop: int) -> list[PlannedPatch]:
            span = np.arange(start, stop)
            patches = []
            for offset, values, person in zip(
                span.tolist(),
                frame_records(wanted, span, [ACCOUNT_DOMAIN, *names], keep_nulls=True),
                frame_records(current, span),
                strict=True,
            ):
                identity = person.pop(IDENTITY)
                changes = {name: (person.get(name), values[name]) for name in names if masks[name][offset]}
                patches.append(
                    PlannedPatch(
                        values[ACCOUNT_DOMAIN], identity, _match_of(person, identity), changes, person
                    )
                )
            return patches

        self.result.patches = PlannedWrites(len(offsets), make)

    def _source_keys(self, rows: np.ndarray) -> np.ndarray:
        """The state's keys of the extract people at ``rows``: their account domain and identity."""
        return key_hashes(self.source[ACCOUNT_DOMAIN].iloc[rows], self.source[IDENTITY].iloc[rows])

    def _fold_keys(self, keys: Column) -> Column:
        """Keys in the forms the service was seen to keep their fields in: profile-URL keys in the
        profile URL's, name keys in the names' (:mod:`listsync.sync.forms`); as they are when
        none was learned."""
        url = self.forms.get("network_profile_url", ())
        names = [*self.forms.get("first_name", ()), *self.forms.get("last_name", ())]
        if not url and not names:
            return keys
        folded = _arrow(keys)
        for prefix, classes in (("url:", url), ("name:", names)):
            if classes:
                folded = pc.if_else(pc.starts_with(folded, prefix), fold_text(folded, classes), folded)
        return folded

    def _folded(self, name: str, column: pd.Series) -> pd.Series:
        """A text field's values in the forms the service was seen to keep it in."""
        return pd.Series(pd.arrays.ArrowExtensionArray(fold_text(_arrow(column), self.forms[name])))

    def _changed(self, name: str, positions: np.ndarray, matches: np.ndarray) -> np.ndarray:
        """Which matched pairs differ in field ``name``: a given value the List does not hold, or,
        with ``overwrite_with_null``, a null where the List holds a value. Compared
        :data:`PAIRS_AT_ONCE` pairs at a time, so that only their values are copied out of the frames,
        and the pages those copies took go back to the system before the next field's."""
        changed = np.concatenate(
            [
                self._changed_pairs(
                    name, positions[start : start + PAIRS_AT_ONCE], matches[start : start + PAIRS_AT_ONCE]
                )
                for start in range(0, len(positions), PAIRS_AT_ONCE)
            ]
            or [np.zeros(0, dtype=bool)]
        )
        give_back_freed_memory()
        return changed

    def _changed_pairs(self, name: str, positions: np.ndarray, matches: np.ndarray) -> np.ndarray:
        desired = self.source[name].iloc[positions].reset_index(drop=True)
        before = self._list_values(name, matches)
        present = self.wanted.present
        given = desired.notna().to_numpy()
        if present is not None:
            given = given & present[name][positions]
        if name in OBJECT_FIELDS:
            differs = np.array(
                [_differs(value, old) for value, old in zip(desired, before, strict=True)], dtype=bool
            )
        elif name in self.forms:
            differs = (
                (self._folded(name, desired) != self._folded(name, before)).fillna(True).to_numpy(dtype=bool)
            )
        else:
            differs = (desired != before).fillna(True).to_numpy(dtype=bool)
        changed = given & differs
        if self.overwrite:
            erased = ~desired.notna().to_numpy() & before.notna().to_numpy()
            if present is not None:
                erased = erased & present[name][positions]
            changed |= erased
        return changed


class _OtherKeys:
    """The List people an extract person's profile URL, phone and name find (-1: none), looked up
    for the people asked about only; those keys find only List people not known by e-mail alone."""

    def __init__(self, planner: _Planner, list_keys: list[Column], email_identity: np.ndarray) -> None:
        self._planner = planner
        domains = _arrow(planner.list["domain"])
        by_other = ~email_identity
        positions = np.arange(len(domains))
        has_url = pc.is_valid(_arrow(list_keys[1])).to_numpy(zero_copy_only=False)
        self._domains = pa.chunked_array(
            [*domains.filter(by_other).chunks, *domains.filter(has_url).chunks], TEXT_ARROW
        )
        self._keys = pa.chunked_array(
            [*_arrow(list_keys[0]).filter(by_other).chunks, *_arrow(list_keys[1]).filter(has_url).chunks],
            TEXT_ARROW,
        )
        self._positions = np.concatenate([positions[by_other], positions[has_url]])

    def candidates(self, rows: np.ndarray) -> np.ndarray:
        """For each extract person at ``rows``: the List people of their profile URL, phone and
        name, in that order (shape ``(len(rows), 3)``)."""
        if not len(rows) or not len(self._keys):
            return np.full((len(rows), 3), -1, dtype=np.int64)
        planner = self._planner
        text = {name: planner.desired_text(name).iloc[rows] for name in _OTHER_KEY_FIELDS}
        keys = [
            "url:" + text["network_profile_url"],
            "phone:" + text["phone_number"],
            "name:" + text["first_name"] + " " + text["last_name"],
        ]
        domains = planner.source[ACCOUNT_DOMAIN].iloc[rows]
        codes = _codes(
            self._domains,
            [self._keys],
            pd.concat([domains] * 3, ignore_index=True),
            [planner._fold_keys(pd.concat(keys, ignore_index=True))],
        )
        listed, found = codes[: len(self._keys)], codes[len(self._keys) :]
        first = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
        given = listed >= 0
        first[listed[given][::-1]] = self._positions[given][::-1]  # the last assignment wins: the first
        return np.where(found >= 0, first[found], -1).reshape(3, len(rows)).T


_OTHER_KEY_FIELDS = ("network_profile_url", "phone_number", "first_name", "last_name")


#: Matched pairs compared at once, field by field (:meth:`_Planner._changed`).
PAIRS_AT_ONCE = 100_000

#: About how many keys are numbered at once by :func:`_codes`: the table Arrow builds to number
#: text holds the distinct values, so numbering every key of a large List at once would take
#: hundreds of MB for an instant (250 MiB at 1,000,000 people). At 200,000 rather than 500,000,
#: the people benchmark peaks 37 MiB lower at 1,000,000 people, in the same time; at 100,000,
#: planning one shard of 3,000,000 people (of 8) takes 30 MiB at most rather than 40.
KEYS_AT_ONCE = 100_000


def _codes(
    list_domains: Column,
    list_keys: list[Column],
    source_domains: Column,
    source_keys: list[Column],
) -> np.ndarray:
    """One integer per (account domain, key), equal for equal pairs (-1 where the key is null): the
    List's keys, then the extract's, each list of keys one after the other. Domains are numbered
    first; then the keys of a share of the domains at a time (about :data:`KEYS_AT_ONCE` keys), and
    the pairs of numbers within that share: equal pairs have equal domains, so they meet in one
    share. No text is built."""
    # Each side's domains numbered once, then repeated for each of its keys.
    both = _numbered([list_domains, source_domains])
    list_codes, source_codes = both[: len(list_domains)], both[len(list_domains) :]
    domain_codes = np.concatenate([list_codes] * len(list_keys) + [source_codes] * len(source_keys))
    keys = pa.chunked_array(
        [chunk for key in [*list_keys, *source_keys] for chunk in _arrow(key).chunks], TEXT_ARROW
    )
    codes = np.full(len(domain_codes), -1, dtype=np.int32)  # 4 bytes a key: a plan holds millions
    given = pc.is_valid(keys).to_numpy(zero_copy_only=False) if len(keys) else np.empty(0, dtype=bool)
    shares = max(1, -(-int(given.sum()) // KEYS_AT_ONCE))
    share_of = np.where(given, domain_codes % shares, -1)  # the divisions done once
    numbered = 0
    for share in range(shares):
        in_share = share_of == share
        if not in_share.any():
            continue
        key_codes = _numbered([keys.filter(pa.array(in_share))])
        pairs = domain_codes[in_share].astype(np.int64) * (int(key_codes.max()) + 1) + key_codes
        local = pd.factorize(pairs)[0]
        codes[in_share] = local + numbered
        numbered += int(local.max()) + 1
    return codes


def _numbered(columns: list[Column]) -> np.ndarray:
    """The values of ``columns``, end to end, numbered: equal values alike, nulls -1 (32-bit)."""
    chunks = [chunk for column in columns for chunk in _arrow(column).chunks]
    if not chunks or not sum(len(chunk) for chunk in chunks):
        return np.empty(0, dtype=np.int32)
    encoded = pc.dictionary_encode(pa.chunked_array(chunks, TEXT_ARROW))
    return np.concatenate(
        [pc.fill_null(chunk.indices, -1).to_numpy(zero_copy_only=False) for chunk in encoded.chunks]
    ).astype(np.int32, copy=False)


def _arrow(column: Column) -> pa.ChunkedArray:
    """Text as Arrow chunks, in the type text columns have (no copy where it already is)."""
    array = column if isinstance(column, pa.Array | pa.ChunkedArray) else pa.array(column.astype(TEXT).array)
    if isinstance(array, pa.Array):
        array = pa.chunked_array([array])
    return array.cast(TEXT_ARROW)


def _rows(frame: pd.DataFrame, positions: np.ndarray, names: list[str]) -> pd.DataFrame:
    """The columns ``names`` of the rows of ``frame`` at ``positions``, copied into columns of their
    own: a plan keeps these, not the whole extract or List. A name the frame has no column for (a
    field no List person has) is left out, as a null would be."""
    return frame[[name for name in names if name in frame.columns]].take(positions).reset_index(drop=True)


def _index(list_codes: np.ndarray, size: int, codes_count: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``codes_count`` codes, the first List person with it (-1: none); and which List
    people share a key with another."""
    positions = np.concatenate([np.arange(size, dtype=np.int32)] * 2)
    given = list_codes >= 0
    codes, positions = list_codes[given], positions[given]
    first = np.full(codes_count, -1, dtype=np.int32)
    first[codes[::-1]] = positions[::-1]  # the last assignment wins: the first List person
    counts = np.bincount(codes, minlength=len(first))
    duplicated = np.zeros(size, dtype=bool)
    duplicated[positions[counts[codes] > 1]] = True
    return first, duplicated


def _first_found(candidates: np.ndarray) -> np.ndarray:
    """Per row, the first candidate found (-1: none)."""
    found = candidates >= 0
    return np.where(found.any(axis=1), candidates[np.arange(len(candidates)), found.argmax(axis=1)], -1)


def _find(candidates: np.ndarray, duplicated: np.ndarray, claimed: set[int]) -> int:
    """The first candidate that is shared by several List people (a conflict) or not claimed yet;
    claim it."""
    for person in candidates:
        if person >= 0 and (duplicated[person] or person not in claimed):
            if not duplicated[person]:
                claimed.add(int(person))
            return int(person)
    return -1


def _value(value: Any) -> Any:
    return value if given(value) else None


def _differs(value: Any, before: Any) -> bool:
    value, before = _value(value), _value(before)
    return value is not None and value != before and canonical(value) != canonical(before)


def normalised_list_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The identity fields of a List person normalised like the extract's (e-mail case aside:
    identities lower-case it anyway)."""
    url = fields.get("network_profile_url")
    if not (isinstance(url, str) and url):
        return fields
    return {**fields, "network_profile_url": _list_profile_url(url)}


def person_keys(identity: str, fields: Mapping[str, Any]) -> Iterator[str]:
    """The keys a person can be found by: their identity, then e-mail and profile URL (A16)."""
    yield identity
    email = fields.get("email")
    if isinstance(email, str) and email.strip():
        yield f"email:{email.strip().lower()}"
    url = fields.get("network_profile_url")
    if isinstance(url, str) and url.strip():
        yield f"url:{url.strip()}"


def canonical(value: Any) -> Any:
    """Compare values as their JSON would: model or dict, key order and ``None`` members aside."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, Mapping):
        return json.dumps({k: v for k, v in value.items() if v is not None}, sort_keys=True, default=str)
    if isinstance(value, list | tuple):
        return tuple(canonical(item) for item in value)
    return value


def _match_of(fields: Mapping[str, Any], identity: str) -> dict[str, Any]:
    """The ``match`` of a List person (:func:`~listsync.client.models.person_match`), of the kind
    of their ``identity``; only a phone number can break the model, so only it is checked by it."""
    kind = identity.partition(":")[0]
    if kind == "phone":
        return person_match(fields).to_wire()
    return {name: fields[name].strip() for name in _MATCH_FIELDS[kind]}


_MATCH_FIELDS = {"email": ("email",), "url": ("network_profile_url",), "name": ("first_name", "last_name")}


def person_fields(record: PersonRecord) -> dict[str, Any]:
    """The person fields a record carries; absent fields stay absent (they are not in the extract)."""
    data = record_fields(record)
    paths = data.get("connection_paths")
    if paths:
        data["connection_paths"] = wire(paths)
    return data


def account_domain_of(record: PersonRecord) -> str | None:
    if isinstance(record, BaseModel):
        value = getattr(record, "account_domain", None)
    else:
        value = record.get("account_domain", record.get("accountDomain"))
    return value if isinstance(value, str) and value else None


def list_domain(value: str | None) -> str:
    """A List person's account domain, normalised like the extract's."""
    if value is None:
        return ""
    try:
        return normalize_domain(value)
    except NormalizationError:
        # A domain our rules reject can still be matched exactly; keep it rather than lose the person.
        return value.strip().lower()


def _list_profile_url(value: str) -> str:
    try:
        return normalize_profile_url(value)
    except NormalizationError:
        return value.strip()


def item_key(item: PlannedAdd | PlannedPatch | PlannedDelete) -> str:
    copy = f" (copy {item.copy})" if isinstance(item, PlannedDelete) and item.copy else ""
    return f"{item.account_domain} {item.identity}{copy}"
