"""Planning a people sync: the extract's people against the List's, by account domain and identity,
into the adds, patches and deletes of a :class:`~listsync.sync.people.plan.PeoplePlan`; pure, no I/O.

Who is whom is :mod:`~listsync.sync.people.match`'s; here matched pairs are compared field by field
as columns, and only the planned writes become objects.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from listsync.client.models import person_match
from listsync.extract.mapping import ACCOUNT_DOMAIN, PERSON_FIELDS
from listsync.extract.normalize import lower
from listsync.sync.digests import key_hashes, value_digests
from listsync.sync.forms import Forms, delete_reach, fold_text
from listsync.sync.memory import give_back_freed_memory
from listsync.sync.people.frames import (
    IDENTITY,
    OBJECT_FIELDS,
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
from listsync.sync.people.match import (
    AccountCodes,
    ExtractPeople,
    arrow_text,
    list_values,
    match_people,
    numbered,
)
from listsync.sync.people.plan import (
    COPY,
    NEW,
    PATCHED,
    HeldPerson,
    PeopleLedger,
    PeoplePlan,
    PlannedAdd,
    PlannedDelete,
    PlannedPatch,
    PlannedWrites,
)
from listsync.sync.settings import DeleteScope, SyncMode, adds_allowed, check_sync_options, updates_allowed
from listsync.sync.state import DELETE, Digests, LastApplied


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
    :param mode: ``"upsert"`` adds and patches; ``"mirror"`` also deletes; ``"update_only"``
        patches and adds no one (the people it would add are counted in ``not_added``);
        ``"insert_only"`` adds and patches no one (the people it would patch are counted in
        ``not_updated``).
    :param delete_scope: in mirror mode, delete only within the extract's accounts
        (``"accounts_in_source"``) or anywhere in the List (``"list"``).
    :param overwrite_with_null: a null in the extract erases the List's value.
    :param last_applied: the sync's state, for a three-way diff: a matched person whose extract
        values are the ones last sent and whose List values are the ones seen after is unchanged,
        whatever form the List keeps them in; fields whose service forms were learned are compared
        (and people matched) in that form; writes the List has not shown yet, younger than the
        visibility window, are not planned again. The plan then carries a
        :class:`~listsync.sync.people.plan.PeopleLedger` for the next state. None: a live diff
        alone, no ledger.
    :raises ValueError: an unknown ``mode`` or ``delete_scope``.
    """
    check_sync_options(mode, delete_scope)
    wanted = _source_people(source, fields)
    listed = current if isinstance(current, ListPeople) else list_frame(current)
    return _Planner(wanted, listed, mode, delete_scope, overwrite_with_null, last_applied=last_applied).plan()


def _source_people(
    source: Mapping[str, Mapping[str, PersonRecord]] | pd.DataFrame, fields: Collection[str] | None
) -> ExtractPeople:
    if isinstance(source, pd.DataFrame):
        names = [name for name in PERSON_FIELDS if name in source.columns]
        if fields is None:
            return ExtractPeople(source, names, {name: source[name].notna().to_numpy() for name in names})
        carried = [name for name in PERSON_FIELDS if name in fields]
        missing = {name: field_column(name, [None] * len(source)) for name in carried if name not in names}
        return ExtractPeople(source.assign(**missing) if missing else source, carried, None)
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
    return ExtractPeople(frame, carried, present)


class _Planner:
    """One plan: the extract's people matched to the List's (:func:`match_people`), then
    compared, all as columns."""

    def __init__(
        self,
        wanted: ExtractPeople,
        listed: ListPeople,
        mode: SyncMode,
        delete_scope: DeleteScope,
        overwrite: bool,
        *,
        last_applied: LastApplied | None = None,
    ) -> None:
        self.wanted, self.listed, self.overwrite = wanted, listed, overwrite
        self.mirror, self.mode = mode == "mirror", mode
        self.source, self.list = wanted.frame, listed.frame
        self.last_applied = last_applied
        self.forms: Forms = {} if last_applied is None else last_applied.forms
        self.accounts = AccountCodes.of(self.list, self.source)
        self.in_scope = (
            np.ones(len(self.list), dtype=bool) if delete_scope == "list" else self.accounts.in_source()
        )
        self.result = PeoplePlan(
            source_people=len(self.source),
            current_people=listed.read,
            list_unidentified=listed.unidentified,
            delete_reach=delete_reach(self.forms),
        )
        self.ledger: PeopleLedger | None = None
        if last_applied is not None:
            self.ledger = self.result.ledger = PeopleLedger(fields=wanted.carried)

    def plan(self) -> PeoplePlan:
        source = self.source
        matching = match_people(
            self.wanted,
            self.list,
            self.forms,
            self.accounts,
            repair_in=self.in_scope if self.mirror else None,
        )
        give_back_freed_memory()
        matches, duplicated = matching.found, matching.duplicated
        self.result.list_duplicates = int(duplicated.sum())
        claimed = np.zeros(len(self.list), dtype=bool)
        copies, copy_numbers = matching.copies, matching.copy_numbers
        claimed[copies] = True  # removed as copies, not by the mirror deletes
        found = matches >= 0
        conflicts = found & np.append(duplicated, False)[matches]
        matched = found & ~conflicts
        claimed[matches[matched]] = True
        # Writes go account by account, the accounts in the order the extract first names them.
        grouped = self.accounts.source_order()
        added = grouped[~found[grouped]]
        if not adds_allowed(self.mode):
            self.result.not_added, added = len(added), added[:0]
        if self.last_applied is not None and self.ledger is not None:
            added = added[self.last_applied.adds(self._keys[added], self.ledger)]
            self.ledger.add_keys, self.ledger.add_sent = self._keys[added], self._sent[added]
        self._adds(added)
        for key in frame_records(source, grouped[conflicts[grouped]], [ACCOUNT_DOMAIN, IDENTITY]):
            self.result.conflicts += 1
            self.result.held.append(
                HeldPerson(
                    key[ACCOUNT_DOMAIN],
                    key[IDENTITY],
                    "write",
                    f"{key[IDENTITY]} on account {key[ACCOUNT_DOMAIN]} matches several List people; "
                    "remove the duplicates",
                )
            )
        patched = grouped[matched[grouped]]
        self._patches(patched, matches[patched])
        deleted = np.flatnonzero(~claimed & ~duplicated & self.in_scope) if self.mirror else copies[:0]
        held_copies, held_deletes = self._reaching_others(copies, deleted)
        copies, copy_numbers = copies[~held_copies], copy_numbers[~held_copies]
        deleted = deleted[~held_deletes]
        if len(copies):
            self.result.repairs = self._deletes(copies, copy_numbers)
        if self.mirror:
            if self.last_applied is not None and self.ledger is not None:
                # Not those an earlier run deleted that the List still shows, within the window.
                rows = self.list.iloc[deleted]
                keys = key_hashes(rows["domain"], rows[IDENTITY])
                kept = ~self.last_applied.hold(keys, DELETE, self.ledger)
                deleted, self.ledger.delete_keys = deleted[kept], keys[kept]
            self.result.deletes = self._deletes(deleted)
        return self.result

    def _reaching_others(self, copies: np.ndarray, deleted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which of the extra ``copies`` and of the people ``deleted`` (List positions) are not
        to be deleted, because a delete by their phone or name could reach another person of the
        account who is not meant to go (A38): by phone, anyone of the account with that phone
        number; by name, anyone with that first and last name, case aside. A person's copies are
        all meant to go (one is added again where a delete reaches every one). Each held delete
        is a failure, with its reason: the List needs a hand."""
        frame = self.list
        going = np.concatenate([copies, deleted])
        kinds = frame[IDENTITY].iloc[going]
        by_phone_or_name = (kinds.str.startswith("phone:") | kinds.str.startswith("name:")).fillna(False)
        held = self._held(copies, deleted) if by_phone_or_name.any() else np.zeros(len(frame), dtype=bool)
        for person in frame_records(frame, going[held[going]], ["domain", IDENTITY]):
            self.result.deletes_held += 1
            self.result.held.append(
                HeldPerson(
                    person["domain"],
                    person[IDENTITY],
                    "delete",
                    f"{person[IDENTITY]} on account {person['domain']} is not deleted: another person "
                    "of the account shares that phone number or name, and a delete by it could remove "
                    "them too",
                )
            )
        return held[copies], held[deleted]

    def _held(self, copies: np.ndarray, deleted: np.ndarray) -> np.ndarray:
        """:meth:`_reaching_others`, for every List person. Who shares a phone or a name with a
        person going is counted among the people with that phone or name (case aside) only, each
        (account, phone) or (account, name) numbered once: a night that deletes a few people of a
        List of millions numbers the keys of a few."""
        frame = self.list
        identities = arrow_text(frame[IDENTITY])
        meant = np.zeros(len(frame), dtype=bool)
        meant[deleted] = True
        if len(copies):
            among, keys = self._keyed(identities, copies)
            meant[among[np.isin(keys, keys[np.searchsorted(among, copies)])]] = True
        going = np.flatnonzero(meant)
        going_kinds = identities.take(going)
        held = np.zeros(len(frame), dtype=bool)
        for kind, fields in _REACHED_BY.items():
            by_kind = going[
                pc.fill_null(pc.starts_with(going_kinds, kind), False).to_numpy(zero_copy_only=False)
            ]
            if not len(by_kind) or any(name not in frame.columns for name in fields):
                continue
            lowered = [lower(arrow_text(frame[name])) for name in fields]
            among, keys = self._keyed(
                lowered[0] if len(lowered) == 1 else pc.binary_join_element_wise(*lowered, "\x1f"), by_kind
            )
            known = keys >= 0
            everyone = np.bincount(keys[known])
            meant_too = np.bincount(keys[known & meant[among]], minlength=len(everyone))
            at = np.searchsorted(among, by_kind)
            keyed = keys[at] >= 0
            by_kind, at = by_kind[keyed], at[keyed]
            held[by_kind[everyone[keys[at]] > meant_too[keys[at]]]] = True
        return held

    def _keyed(self, values: pa.ChunkedArray, of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The List people whose value in ``values`` (one per List person) is that of one of the
        people at ``of`` (positions; they are among them), in List order, and the number of each
        one's (account, value), equal pairs alike (-1: no value)."""
        wanted = pc.drop_null(pc.unique(values.take(pa.array(of))))
        among = np.flatnonzero(pc.is_in(values, value_set=wanted).to_numpy(zero_copy_only=False))
        codes = numbered([values.take(pa.array(among))])
        pairs = self.accounts.listed[among].astype(np.int64) * (int(codes.max(initial=-1)) + 1) + codes
        return among, np.where(codes >= 0, pd.factorize(pairs)[0], -1)

    def _deletes(
        self, positions: np.ndarray, copies: np.ndarray | None = None
    ) -> PlannedWrites[PlannedDelete]:
        people = _rows(self.list, positions, ["domain", IDENTITY, *PERSON_FIELDS])
        people = people.rename(columns={"domain": ACCOUNT_DOMAIN})
        people[COPY] = np.zeros(len(positions), dtype=np.int64) if copies is None else copies

        def make(start: int, stop: int) -> list[PlannedDelete]:
            deletes = []
            for person in frame_records(people, slice(start, stop)):
                domain, identity, copy = person.pop(ACCOUNT_DOMAIN), person.pop(IDENTITY), person.pop(COPY)
                deletes.append(PlannedDelete(domain, identity, _match_of(person, identity), copy, person))
            return deletes

        return PlannedWrites(len(positions), make, people)

    def _adds(self, positions: np.ndarray) -> None:
        # A field an extract person does not give is a null here, and frame_records leaves it out.
        people = _rows(self.source, positions, [ACCOUNT_DOMAIN, IDENTITY, *self.wanted.carried])

        def make(start: int, stop: int) -> list[PlannedAdd]:
            adds = []
            for person in frame_records(people, slice(start, stop)):
                domain, identity = person.pop(ACCOUNT_DOMAIN), person.pop(IDENTITY)
                adds.append(PlannedAdd(domain, identity, person))
            return adds

        self.result.adds = PlannedWrites(len(positions), make, people)

    def _patches(self, positions: np.ndarray, matches: np.ndarray) -> None:
        """Compare each matched pair field by field; patch the pairs that differ. With a state, the
        pairs whose values' digests are equal (:mod:`~listsync.sync.digests`) hold the same values
        and are not compared: on most nights, nearly all of them."""
        seen = None if self.last_applied is None else value_digests(self.list, self.wanted.carried)
        compared = (
            np.arange(len(positions))
            if seen is None or self.overwrite  # a null erasing an empty text: its digest is the same
            else np.flatnonzero(self._sent[positions] != seen[matches])
        )
        changed = {name: np.zeros(len(positions), dtype=bool) for name in self.wanted.carried}
        for name, mask in changed.items():
            mask[compared] = self._changed(name, positions[compared], matches[compared])
        differs = np.zeros(len(positions), dtype=bool)
        for mask in changed.values():
            differs |= mask
        held = np.zeros(len(positions), dtype=bool)
        if seen is not None and self.last_applied is not None and self.ledger is not None:

            def digests(start: int, stop: int) -> Digests:
                extract = positions[start:stop]
                return self._keys[extract], self._sent[extract], seen[matches[start:stop]]

            ledger = self.ledger
            differs, held, ledger.patch_keys, ledger.patch_sent = self.last_applied.changes(
                differs, ledger, digests
            )
        self.result.unchanged += int((~differs & ~held).sum())
        if not updates_allowed(self.mode):
            self.result.not_updated, differs = int(differs.sum()), np.zeros_like(differs)
            if self.ledger is not None:
                self.ledger.patch_keys, self.ledger.patch_sent = (
                    self.ledger.patch_keys[:0],
                    self.ledger.patch_sent[:0],
                )
        offsets = np.flatnonzero(differs)
        names = list(changed)
        # One frame of the patches (PlannedWrites.frame): the List person's fields, and the new ones.
        patches = _rows(self.list, matches[offsets], [IDENTITY, *PERSON_FIELDS])
        current = list(patches.columns)
        wanted = _rows(self.source, positions[offsets], [ACCOUNT_DOMAIN, *names])
        patches.insert(0, ACCOUNT_DOMAIN, wanted.pop(ACCOUNT_DOMAIN))
        for name in names:
            patches[NEW + name], patches[PATCHED + name] = wanted.pop(name), changed[name][offsets]

        def make(start: int, stop: int) -> list[PlannedPatch]:
            rows = slice(start, stop)
            flags = [(name, patches[PATCHED + name].iloc[rows].tolist()) for name in names]
            news = [NEW + name for name in names]
            result = []
            for at, (values, person) in enumerate(
                zip(
                    frame_records(patches, rows, [ACCOUNT_DOMAIN, *news], keep_nulls=True),
                    frame_records(patches, rows, current),
                    strict=True,
                )
            ):
                identity = person.pop(IDENTITY)
                changes = {
                    name: (person.get(name), values[NEW + name]) for name, changed in flags if changed[at]
                }
                result.append(
                    PlannedPatch(
                        values[ACCOUNT_DOMAIN], identity, _match_of(person, identity), changes, person
                    )
                )
            return result

        self.result.patches = PlannedWrites(len(offsets), make, patches)

    @cached_property
    def _keys(self) -> np.ndarray:
        """The state's key of each extract person, in the extract's order: their account domain and
        identity. Hashed in the frame's order, slices of it as they are, and taken where needed:
        hashing the people in the plan's order (account by account) first copied each of them out."""
        return key_hashes(self.source[ACCOUNT_DOMAIN], self.source[IDENTITY])

    @cached_property
    def _sent(self) -> np.ndarray:
        """The digest of each extract person's values, in the extract's order (as :attr:`_keys`)."""
        return value_digests(self.source, self.wanted.carried)

    def _folded(self, name: str, column: pd.Series) -> pd.Series:
        """A text field's values in the forms the service was seen to keep it in."""
        return pd.Series(pd.arrays.ArrowExtensionArray(fold_text(arrow_text(column), self.forms[name])))

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
        before = list_values(self.list, name, matches)
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


#: Matched pairs compared at once, field by field (:meth:`_Planner._changed`).
PAIRS_AT_ONCE = 100_000


#: The fields by which a delete by phone or by name (the identity's kind) reaches other people of
#: the account.
_REACHED_BY = {"phone:": ("phone_number",), "name:": ("first_name", "last_name")}


def _rows(frame: pd.DataFrame, positions: np.ndarray, names: list[str]) -> pd.DataFrame:
    """The columns ``names`` of the rows of ``frame`` at ``positions``, copied into columns of their
    own: a plan keeps these, not the whole extract or List. A name the frame has no column for (a
    field no List person has) is left out, as a null would be."""
    return frame[[name for name in names if name in frame.columns]].take(positions).reset_index(drop=True)


def _value(value: Any) -> Any:
    return value if given(value) else None


def _differs(value: Any, before: Any) -> bool:
    value, before = _value(value), _value(before)
    return value is not None and value != before and canonical(value) != canonical(before)


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
