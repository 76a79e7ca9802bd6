"""Where a sync's state is kept between runs: the stores, and loading and saving a state."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from listsync.files import OpenableFile
from listsync.sync.forms import Forms, merged_forms
from listsync.sync.lease import FileLease
from listsync.sync.state.format import StateEntries, StateMismatchError, StateScope, SyncState

log = logging.getLogger(__name__)


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


def state_files(folder: str | os.PathLike[str], job: str, table_id: str, shard: str | None) -> list[Path]:
    """The state files a :class:`StateDirectory` at ``folder`` keeps for ``job``, List and shard,
    of any service and mapping."""
    return sorted(Path(folder).glob(f"{StateScope.prefix(job, table_id, shard)}-*.state"))


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
