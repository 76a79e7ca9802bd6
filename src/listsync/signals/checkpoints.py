"""Where an ingestion's checkpoint survives between the tries and deferrals of a task.

The checkpoint (which events are acknowledged, written by :func:`listsync.signals.ingest.ingest_events`)
lives in any object with ``get(key, default)`` and ``set(key, value)`` taking JSON values: Airflow's
``context["task_state_store"]``, or the CLI's file store. Importable without pandas, so the
operator module that builds a :class:`CheckpointStore` stays cheap to import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["CHECKPOINT_KEY", "CheckpointStore", "KeyValueStore"]

#: Key of the checkpoint in the task state store.
CHECKPOINT_KEY = "listsync_ingest_checkpoint"


class KeyValueStore(Protocol):
    """The part of Airflow's task state store a checkpoint needs."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


@dataclass
class CheckpointStore:
    """Where the ingestion checkpoint survives between tries and deferrals.

    With a ``backend`` (Airflow's task state store) the checkpoint is written there before every
    send and after every acknowledged batch, and read back by a retried task or a re-run of the
    same task (the store outlives the task's success unless Airflow's ``[state_store]
    clear_on_success`` is set). ``fallback`` is used when the backend holds nothing, such as the
    checkpoint a trigger event carried back. Without a backend the checkpoint lives only in this
    object: a deferral still resumes (the trigger carries it), a crash does not. ``fresh`` ignores
    what the backend holds (send everything again, on purpose) until this object saves its own.
    """

    backend: KeyValueStore | None = None
    fallback: dict[str, Any] | None = None
    key: str = CHECKPOINT_KEY
    fresh: bool = False
    _latest: dict[str, Any] | None = field(default=None, init=False, repr=False)

    def load(self) -> dict[str, Any] | None:
        """The latest checkpoint, or ``None`` when the ingestion starts from the beginning."""
        if self._latest is not None:
            return self._latest
        if self.fresh:
            return None
        stored = self.backend.get(self.key, None) if self.backend is not None else None
        return stored if stored is not None else self.fallback

    def save(self, checkpoint: dict[str, Any]) -> None:
        """Record ``checkpoint`` (JSON values only) as the latest."""
        self._latest = checkpoint
        if self.backend is not None:
            self.backend.set(self.key, checkpoint)
