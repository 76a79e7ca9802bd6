"""What a List sync last applied, kept from one run to the next: the state of a three-way diff.

A hosted service may show a write seconds after acknowledging it, and keep values in a form of its
own (:mod:`listsync.sync.forms`). A sync that diffs the extract against the live List alone then
sees every such value as a change, every late write as missing, and writes them again, night after
night. Like ``kubectl apply``'s last-applied configuration and Terraform's state, a sync keeps,
for every person or row it wrote or found in step, one entry:

- ``key``: a 64-bit hash of the item as the extract names it (account domain and identity, or the
  row key);
- ``sent``: a digest of the extract's normalised values last applied;
- ``seen``: a digest of the values the List showed for the item afterwards (:data:`UNSEEN` when
  the List has not shown the write yet);
- ``since`` and ``kind``: when a write the List has not shown yet was acknowledged, and which
  (:data:`ADD`, :data:`PATCH`, :data:`DELETE`; 0 once shown);

and the forms the service keeps each field in, learned from read backs. The next run diffs three
ways: an item whose extract values are the ones sent and whose List values are the ones seen is
unchanged, whatever form the List keeps them in; an extract that changed is written; a List that
changed under an unchanged extract was edited by hand, and is repaired and counted
(``edited_in_list``). A write not yet shown is not repeated while it is younger than the
visibility window.

A state is refused when it was made for another List, shard or mapping (:class:`StateMismatchError`);
without one (the first run, a lost state, ``fresh_state``) the sync diffs against the live List
alone. Its size is 29 bytes an item (28 MiB at 1,000,000 people), read back without a copy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from listsync.errors import ListSyncError
from listsync.files import OpenableFile
from listsync.sync.forms import Forms, merged_forms
from listsync.sync.lease import FileLease

__all__ = [
    "ADD",
    "DELETE",
    "PATCH",
    "STATE_FORMAT",
    "UNSEEN",
    "FileStateStore",
    "LastApplied",
    "Ledger",
    "StateDirectory",
    "StateEntries",
    "StateMismatchError",
    "StateScope",
    "StateStore",
    "SyncState",
    "load_state",
    "save_state",
    "state_store",
]

log = logging.getLogger(__name__)

STATE_FORMAT = 2
#: ``seen`` of a write the List has not shown yet. Digests are never 0.
UNSEEN = np.uint64(0)
#: ``kind`` of an entry whose write the List has not shown yet (0: shown, or nothing written).
ADD, PATCH, DELETE = 1, 2, 3
_MAGIC = b"listsync-state\n"


class StateMismatchError(ListSyncError, ValueError):
    """The state found was made for another List, shard or mapping; nothing was read or written."""


@dataclass(frozen=True)
class StateScope:
    """What a state belongs to: a job (``people``, ``rows``) of one List and shard, with one mapping
    (the column map and whatever else decides what is written)."""

    job: str
    table_id: str
    shard: str | None
    mapping: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "table_id": self.table_id,
            "shard": self.shard,
            "mapping": dict(self.mapping),
        }

    def name(self, namespace: str = "") -> str:
        """A name for this scope's state, unique for the job, List, shard and mapping (and the
        ``namespace``, such as the service's address): ``people-tbl_1-all-<12 hex digits>``."""
        shard = "all" if self.shard is None else self.shard.replace("/", "-of-")
        digest = hashlib.sha256(
            json.dumps([namespace, _plain(self.mapping)], sort_keys=True).encode()
        ).hexdigest()[:12]
        return f"{self.job}-{re.sub(r'[^A-Za-z0-9_.-]', '_', self.table_id)}-{shard}-{digest}"

    def mismatch(self, other: StateScope) -> str | None:
        """How ``other`` (a stored state's scope) differs from this one, in words; None if not."""
        if other.job != self.job:
            return f"a {other.job} sync, not a {self.job} sync"
        if other.table_id != self.table_id:
            return f"List {other.table_id}, not {self.table_id}"
        if other.shard != self.shard:
            return f"shard {other.shard or 'none'}, not {self.shard or 'none'}"
        if _plain(other.mapping) != _plain(self.mapping):
            return f"the mapping {json.dumps(_plain(other.mapping), sort_keys=True)}, not this one"
        return None


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass
class StateEntries:
    """Entries of a state, as columns of equal length (see the module docstring)."""

    keys: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    sent: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    seen: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    since: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint32))
    kind: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint8))

    @classmethod
    def of(
        cls,
        keys: np.ndarray,
        sent: np.ndarray | int,
        seen: np.ndarray | int,
        since: np.ndarray | float = 0,
        kind: np.ndarray | int = 0,
    ) -> StateEntries:
        """Entries for ``keys``; each other column an array or one value for all."""
        size = len(keys)

        def column(values: np.ndarray | float, dtype: type) -> np.ndarray:
            return np.broadcast_to(np.asarray(values).astype(dtype), (size,)).copy()

        return cls(
            np.asarray(keys, dtype=np.uint64),
            column(sent, np.uint64),
            column(seen, np.uint64),
            column(since, np.uint32),
            column(kind, np.uint8),
        )

    @classmethod
    def listed(cls, entries: Sequence[tuple[int, int, int | np.uint64, float, int]]) -> StateEntries:
        """Entries given one by one, as ``(key, sent, seen, since, kind)``."""
        if not entries:
            return cls()
        keys, sent, seen, since, kind = zip(*entries, strict=True)
        return cls.of(
            np.array(keys, dtype=np.uint64),
            np.array(sent, dtype=np.uint64),
            np.array(seen, dtype=np.uint64),
            np.array(since),
            np.array(kind),
        )

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, positions: np.ndarray) -> StateEntries:
        return StateEntries(*(getattr(self, name)[positions] for name in _COLUMNS))

    @classmethod
    def joined(cls, parts: Iterable[StateEntries]) -> StateEntries:
        """The entries of ``parts`` in one, each key once: a later part's entry wins."""
        parts = [part for part in parts if len(part)]
        if not parts:
            return cls()
        joined = cls(*(np.concatenate([getattr(part, name) for part in parts]) for name in _COLUMNS))
        # The last entry of each key: unique over the reversed keys finds each key's last one.
        _, last = np.unique(joined.keys[::-1], return_index=True)
        return joined.take(len(joined) - 1 - last)  # sorted by key, as np.unique gives them


_COLUMNS = ("keys", "sent", "seen", "since", "kind")
#: How each column is stored: little-endian, whatever the machine.
_DTYPES = {"keys": "<u8", "sent": "<u8", "seen": "<u8", "since": "<u4", "kind": "u1"}


@dataclass
class SyncState:
    """A sync's state: its scope, the forms learned, and one entry per item, sorted by key."""

    scope: StateScope
    forms: dict[str, list[str]] = field(default_factory=dict)
    entries: StateEntries = field(default_factory=StateEntries)
    made_at: float = 0.0

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The position of each of ``keys`` among the entries; -1 where it has none (32-bit
        while the entries fit: a plan finds a million keys at once)."""
        stored = self.entries.keys
        kind = np.int32 if len(stored) < 2**31 else np.int64
        if not len(stored):
            return np.full(len(keys), -1, dtype=kind)
        positions = np.searchsorted(stored, keys).astype(kind)
        clipped = np.minimum(positions, len(stored) - 1)
        return np.where(stored[clipped] == keys, clipped, -1).astype(kind, copy=False)

    def to_bytes(self) -> bytes:
        """The state as a file's bytes: a first line naming the format, a line of JSON (the scope,
        the forms, the number of entries), then each column of the entries as its raw
        little-endian values, so that reading it back copies nothing (:meth:`from_bytes`)."""
        header = {
            "format": STATE_FORMAT,
            **self.scope.to_json(),
            "forms": self.forms,
            "made_at": self.made_at,
            "entries": len(self.entries),
        }
        columns = [np.ascontiguousarray(getattr(self.entries, name), _DTYPES[name]) for name in _COLUMNS]
        return b"".join(
            [_MAGIC, json.dumps(header, sort_keys=True).encode(), b"\n", *(column.data for column in columns)]
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> SyncState:
        """The state written by :meth:`to_bytes`; its entries are read-only views of ``data``.

        :raises ValueError: the bytes are not such a state, naming ``where`` and what to do.
        """
        advice = "delete it, or run once with a fresh state (fresh_state=True, --fresh-state)"
        try:
            if not data.startswith(_MAGIC):
                raise ValueError("it is not a listsync state")
            line_end = data.index(b"\n", len(_MAGIC))
            header = json.loads(data[len(_MAGIC) : line_end])
            if header.get("format") != STATE_FORMAT:
                raise ValueError(
                    f"it is of format {header.get('format')}, this listsync reads {STATE_FORMAT}"
                )
            count, offset = int(header["entries"]), line_end + 1
            if len(data) - offset != count * sum(np.dtype(_DTYPES[name]).itemsize for name in _COLUMNS):
                raise ValueError(f"it does not hold the {count} entries it announces")
            columns = []
            for name in _COLUMNS:
                columns.append(np.frombuffer(data, _DTYPES[name], count, offset))
                offset += columns[-1].nbytes
            scope = StateScope(header["job"], header["table_id"], header["shard"], header["mapping"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"the sync state {where} cannot be read ({error}); {advice}") from None
        return cls(
            scope,
            {k: list(v) for k, v in header.get("forms", {}).items()},
            StateEntries(*columns),
            header["made_at"],
        )


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
        ledger.keep(positions[waiting], self)
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
        ledger.absent_at(positions[gone], np.flatnonzero(gone[~waiting]), self)
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
        :data:`WEIGHED_AT_ONCE` items at a time, so that a plan never holds them for every item."""
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
        ledger.keep(positions[steady & unmoved], self)
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
            return np.zeros(len(self._positions), dtype=np.dtype(_DTYPES[name]))
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

    def keep(self, positions: np.ndarray, last: LastApplied) -> None:
        """Keep the last state's entries at ``positions`` as they are."""
        if len(positions) and last.state is not None:
            self._previous = last.state.entries
            self._kept_positions.append(positions)

    def absent_at(self, positions: np.ndarray, among_adds: np.ndarray, last: LastApplied) -> None:
        """Note absences to confirm: the state's entries at ``positions``, the plan's adds at
        ``among_adds``."""
        self.absent, self.absent_adds = positions, among_adds
        if len(positions) and last.state is not None:
            self._previous = last.state.entries

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
        """The entries already final, the last state's kept ones included."""
        if self._previous is None or not self._kept_positions:
            return list(self.kept)
        return [*self.kept, self._previous.take(np.concatenate(self._kept_positions))]


@runtime_checkable
class StateStore(Protocol):
    """Where a sync's state is kept between runs: one state for each scope it is asked about."""

    def where(self, scope: StateScope) -> str:
        """Where the state of ``scope`` is, in words, for log lines and the summary."""

    def read(self, scope: StateScope) -> bytes | None:
        """The state's bytes; None when there is none yet."""

    def write(self, scope: StateScope, data: bytes) -> None:
        """Replace the state."""


class FileStateStore:
    """A state kept in one file, whatever its scope (a state of another scope found there is
    refused): a local path, replaced atomically so that a crash leaves the old one, or anything
    with ``open(mode)`` such as Airflow's ``ObjectStoragePath``."""

    def __init__(self, path: str | os.PathLike[str] | OpenableFile) -> None:
        self.path: Path | OpenableFile = Path(path) if isinstance(path, str | os.PathLike) else path

    def where(self, scope: StateScope) -> str:
        return str(self.path)

    def read(self, scope: StateScope) -> bytes | None:
        try:
            with self.path.open("rb") as handle:
                data: bytes = handle.read()
        except FileNotFoundError:
            return None
        return data

    def lease(self, name: str) -> FileLease:
        """The lease ``name`` as a file in the state file's folder."""
        return FileLease(self.path.with_name(f"{name}.lease"))  # type: ignore[union-attr]

    def write(self, scope: StateScope, data: bytes) -> None:
        if isinstance(self.path, Path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_bytes(data)
            partial.replace(self.path)
            return
        with self.path.open("wb") as handle:
            handle.write(data)


class StateDirectory:
    """States kept in a folder, a file for each scope (:meth:`StateScope.name`, with the service's
    address as ``namespace``): the command line's default, under ``$LISTSYNC_STATE_DIR``."""

    def __init__(self, folder: str | os.PathLike[str], namespace: str) -> None:
        self.folder, self.namespace = Path(folder), namespace

    def _file(self, scope: StateScope) -> FileStateStore:
        return FileStateStore(self.folder / f"{scope.name(self.namespace)}.state")

    def where(self, scope: StateScope) -> str:
        return self._file(scope).where(scope)

    def read(self, scope: StateScope) -> bytes | None:
        return self._file(scope).read(scope)

    def write(self, scope: StateScope, data: bytes) -> None:
        self._file(scope).write(scope, data)

    def lease(self, name: str) -> FileLease:
        """The lease ``name`` as a file in the folder, named after the service too."""
        digest = hashlib.sha256(self.namespace.encode()).hexdigest()[:12]
        return FileLease(self.folder / f"{name}-{digest}.lease")


def state_store(where: str | os.PathLike[str] | OpenableFile | StateStore | None) -> StateStore | None:
    """A :class:`StateStore` for ``where``: one as it is, a path or an openable file as a
    :class:`FileStateStore`; None for None."""
    if where is None:
        return None
    if isinstance(where, StateStore):
        return where
    return FileStateStore(where)


def load_state(store: StateStore | None, scope: StateScope, *, fresh: bool) -> SyncState | None:
    """The state kept in ``store`` for ``scope``; None (logged once) when there is none to use, so
    the sync diffs against the live List alone.

    :raises StateMismatchError: the state was made for another List, shard or mapping.
    :raises ValueError: the state cannot be read.
    """
    if store is None:
        log.info(
            "No sync state is kept for %s (no state_path, nor an Airflow asset state store): "
            "diffing against the live List alone",
            scope.table_id,
        )
        return None
    where = store.where(scope)
    if fresh:
        log.info("Fresh state: the sync state %s is not used; diffing against the live List alone", where)
        return None
    data = store.read(scope)
    if data is None:
        log.info("No sync state at %s yet: diffing against the live List alone", where)
        return None
    state = SyncState.from_bytes(data, where)
    problem = scope.mismatch(state.scope)
    if problem is not None:
        raise StateMismatchError(
            f"the sync state {where} was made for {problem}: it is not used. Give this sync a "
            "state_path of its own (--state-path), or start it afresh (fresh_state=True, --fresh-state)"
        )
    log.info(
        "Sync state %s: %d items as last applied (%s), forms %s",
        where,
        len(state.entries),
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(state.made_at)),
        state.forms or "none learned",
    )
    return state


def save_state(
    store: StateStore | None,
    scope: StateScope,
    entries: Iterable[StateEntries],
    forms: Sequence[Forms],
    *,
    clock: Callable[[], float] = time.time,
) -> int | None:
    """Write the new state; return its size in bytes (None: no store)."""
    if store is None:
        return None
    state = SyncState(scope, merged_forms(*forms), StateEntries.joined(entries), clock())
    data = state.to_bytes()
    store.write(scope, data)
    log.info("Sync state %s: %d items, %d bytes", store.where(scope), len(state.entries), len(data))
    return len(data)
