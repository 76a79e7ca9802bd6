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
alone. Its size is 29 bytes an item (29 MB at 1,000,000 people) before compression.
"""

from __future__ import annotations

import hashlib
import io
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
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from listsync.client.errors import ListSyncError
from listsync.sync.forms import Forms, merged_forms
from listsync.sync.plan import OpenableFile

__all__ = [
    "ADD",
    "DELETE",
    "PATCH",
    "STATE_FORMAT",
    "UNSEEN",
    "FileStateStore",
    "LastApplied",
    "StateDirectory",
    "StateEntries",
    "StateMismatchError",
    "StateScope",
    "StateStore",
    "SyncState",
    "digest_text",
    "key_hashes",
    "load_state",
    "save_state",
    "state_store",
    "value_digests",
]

log = logging.getLogger(__name__)

STATE_FORMAT = 1
#: ``seen`` of a write the List has not shown yet. Digests are never 0.
UNSEEN = np.uint64(0)
#: ``kind`` of an entry whose write the List has not shown yet (0: shown, or nothing written).
ADD, PATCH, DELETE = 1, 2, 3
_SEPARATOR = "\x1f"
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


@dataclass
class SyncState:
    """A sync's state: its scope, the forms learned, and one entry per item, sorted by key."""

    scope: StateScope
    forms: dict[str, list[str]] = field(default_factory=dict)
    entries: StateEntries = field(default_factory=StateEntries)
    made_at: float = 0.0

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The position of each of ``keys`` among the entries; -1 where it has none."""
        stored = self.entries.keys
        if not len(stored):
            return np.full(len(keys), -1, dtype=np.int64)
        positions = np.searchsorted(stored, keys)
        clipped = np.minimum(positions, len(stored) - 1)
        return np.where(stored[clipped] == keys, clipped, -1).astype(np.int64)

    def at(self, positions: np.ndarray) -> StateEntries:
        """The entries at ``positions``; where a position is -1, an empty entry (no key, nothing
        sent, nothing seen, nothing waited for)."""
        found = positions >= 0
        if not len(self.entries):
            return StateEntries.of(np.zeros(len(positions), dtype=np.uint64), 0, UNSEEN)
        taken = self.entries.take(np.where(found, positions, 0))
        for name in _COLUMNS:
            getattr(taken, name)[~found] = 0
        return taken

    def pending(self, positions: np.ndarray, kind: int, now: float, window: float) -> np.ndarray:
        """Which entries at ``positions`` (-1: none) are writes of ``kind`` the List has not shown
        yet, acknowledged less than ``window`` seconds before ``now``."""
        entries = self.at(positions)
        return (positions >= 0) & (entries.kind == kind) & (now - entries.since.astype(np.float64) < window)

    def to_bytes(self) -> bytes:
        """The state as a file's bytes: a header line, a JSON header, then the entries (NumPy)."""
        header = {
            "format": STATE_FORMAT,
            **self.scope.to_json(),
            "forms": self.forms,
            "made_at": self.made_at,
            "entries": len(self.entries),
        }
        buffer = io.BytesIO()
        buffer.write(_MAGIC)
        buffer.write(json.dumps(header, sort_keys=True).encode() + b"\n")
        np.savez_compressed(buffer, **{name: getattr(self.entries, name) for name in _COLUMNS})
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> SyncState:
        """The state written by :meth:`to_bytes`.

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
            with np.load(io.BytesIO(data[line_end + 1 :]), allow_pickle=False) as arrays:
                entries = StateEntries(*(arrays[name] for name in _COLUMNS))
            scope = StateScope(header["job"], header["table_id"], header["shard"], header["mapping"])
        except (ValueError, KeyError, TypeError, OSError, EOFError) as error:
            raise ValueError(f"the sync state {where} cannot be read ({error}); {advice}") from None
        return cls(
            scope, {k: list(v) for k, v in header.get("forms", {}).items()}, entries, header["made_at"]
        )


@dataclass(frozen=True)
class LastApplied:
    """What a plan weighs besides the extract and the List: the sync's state
    (:mod:`listsync.sync.state`; None on a first run or a fresh one), the time the plan is made, and
    how long a write the List has not shown yet is waited for rather than sent again."""

    state: SyncState | None
    now: float
    visibility_window: float

    @property
    def forms(self) -> Forms:
        """The forms learned so far (none without a state)."""
        return {} if self.state is None else self.state.forms


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


def _hashed(text: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each text (never 0), the same in every process and on every machine."""
    values = pa.chunked_array([text]) if isinstance(text, pa.Array) else text
    strings = values.to_numpy() if len(values) else np.empty(0, dtype=object)
    hashed = pd.util.hash_array(np.asarray(strings, dtype=object), categorize=False)
    return np.where(hashed == 0, np.uint64(1), hashed).astype(np.uint64)


def key_hashes(*columns: pd.Series | pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The key of each item named by ``columns`` (account domain and identity; a row key)."""
    parts = [_text(column) for column in columns]
    joined = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, _SEPARATOR)
    return _hashed(joined)


def value_digests(frame: pd.DataFrame, names: Sequence[str]) -> np.ndarray:
    """A digest of each row's values of the columns ``names`` (a missing column is nulls): text as
    it is, other values as :func:`digest_text` writes them; a null and an empty text alike."""
    parts = []
    for name in sorted(names):
        if name not in frame.columns:
            parts.append(pa.array([""] * len(frame), pa.string()))
            continue
        column = frame[name]
        if isinstance(column.dtype, pd.ArrowDtype) or column.dtype == "string":
            parts.append(_text(column))
        else:
            parts.append(pa.array([digest_text(value) for value in column.tolist()], pa.string()))
    if not parts:
        return np.ones(len(frame), dtype=np.uint64)
    joined = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, _SEPARATOR)
    return _hashed(joined)


def digest_text(value: Any) -> str:
    """A value as the text its digest is made of: equal values alike, whether a model, a mapping or
    a list of them; ``None`` members of mappings left out."""
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), default=str)


def _canonical(value: Any) -> Any:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple | np.ndarray):
        return [_canonical(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _text(column: pd.Series | pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """A column as Arrow text, nulls as empty text."""
    if isinstance(column, pd.Series):
        array = pa.array(column.astype(pd.ArrowDtype(pa.string())).array)
    else:
        array = column
    if isinstance(array, pa.Array):
        array = pa.chunked_array([array])
    return pc.fill_null(array.cast(pa.string()), "")
