"""A sync's state as it is kept: its scope, its entries as columns, and the file format
(:mod:`listsync.sync.state` says what the state is for)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from listsync.errors import ListSyncError
from listsync.sync.digests import hash_order, sought

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
        digest = hashlib.sha256(
            json.dumps([namespace, _plain(self.mapping)], sort_keys=True).encode()
        ).hexdigest()[:12]
        return f"{self.prefix(self.job, self.table_id, self.shard)}-{digest}"

    @staticmethod
    def prefix(job: str, table_id: str, shard: str | None) -> str:
        """What the :meth:`name` of every state of ``job``, List and shard begins with, whatever
        its mapping and namespace: ``people-tbl_1-all``."""
        part = "all" if shard is None else shard.replace("/", "-of-")
        return f"{job}-{re.sub(r'[^A-Za-z0-9_.-]', '_', table_id)}-{part}"

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
        """The entries of ``parts`` in one, sorted by key, each key once: a later part's entry wins.

        Each part is sorted by key (one sorted already, the last state's entries kept, as it is),
        then the parts are merged :data:`JOINED_AT_ONCE` entries' range of keys at a time into
        columns made once. Merged whole, the 3,100,000 entries of a change night made about 350 MB
        of new arrays and took 0.18-0.79 s; a range at a time, 0.10-0.24 s."""
        parts = [
            part if _ascending(part.keys) else part.take(hash_order(part.keys)) for part in parts if len(part)
        ]
        if not parts:
            return cls()
        size = sum(map(len, parts))
        bits = max(0, math.ceil(math.log2(size / JOINED_AT_ONCE)))
        edges = np.arange(1, 1 << bits, dtype=np.uint64) << np.uint64(64 - bits)
        cuts = [[0, *np.searchsorted(part.keys, edges).tolist(), len(part)] for part in parts]
        joined = cls(*(np.empty(size, dtype=getattr(parts[0], name).dtype) for name in _COLUMNS))
        filled = 0
        for at in range(1 << bits):
            pieces = [(part, cut[at], cut[at + 1]) for part, cut in zip(parts, cuts, strict=True)]
            block = cls(
                *(
                    np.concatenate([getattr(part, name)[low:high] for part, low, high in pieces])
                    for name in _COLUMNS
                )
            )
            order = np.argsort(block.keys, kind="stable")
            keys = block.keys[order]
            # Sorted stably, the entries of a key are in the parts' order: its last one is the last.
            last = np.ones(len(keys), dtype=bool)
            np.not_equal(keys[1:], keys[:-1], out=last[:-1])
            kept = block.take(order[last])
            for name in _COLUMNS:
                getattr(joined, name)[filled : filled + len(kept)] = getattr(kept, name)
            filled += len(kept)
        return cls(*(getattr(joined, name)[:filled] for name in _COLUMNS))


def _ascending(keys: np.ndarray) -> bool:
    return bool((keys[1:] >= keys[:-1]).all())


#: Entries a range of keys holds, about, when parts are joined (:meth:`StateEntries.joined`): so
#: many stay in the caches while they are sorted.
JOINED_AT_ONCE = 1 << 16
_COLUMNS = ("keys", "sent", "seen", "since", "kind")
#: How each column is stored: little-endian, whatever the machine.
COLUMN_DTYPES = {"keys": "<u8", "sent": "<u8", "seen": "<u8", "since": "<u4", "kind": "u1"}


@dataclass
class SyncState:
    """A sync's state: its scope, the forms learned, and one entry per item, sorted by key."""

    scope: StateScope
    forms: dict[str, list[str]] = field(default_factory=dict)
    entries: StateEntries = field(default_factory=StateEntries)
    made_at: float = 0.0

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The position of each of ``keys`` among the entries; -1 where it has none (32-bit
        while the entries fit: a plan finds a million keys at once), sought in sorted order
        (:func:`~listsync.sync.digests.sought`)."""
        stored = self.entries.keys
        kind = np.int32 if len(stored) < 2**31 else np.int64
        if not len(stored):
            return np.full(len(keys), -1, dtype=kind)
        positions = sought(stored, keys, kind)
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
        columns = [
            np.ascontiguousarray(getattr(self.entries, name), COLUMN_DTYPES[name]) for name in _COLUMNS
        ]
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
            if len(data) - offset != count * sum(np.dtype(COLUMN_DTYPES[name]).itemsize for name in _COLUMNS):
                raise ValueError(f"it does not hold the {count} entries it announces")
            columns = []
            for name in _COLUMNS:
                columns.append(np.frombuffer(data, COLUMN_DTYPES[name], count, offset))
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
