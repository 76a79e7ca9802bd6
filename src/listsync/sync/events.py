"""Signal events from extracts: mapping, deterministic references and order, checkpoints, ingestion.

The flow of a backfill::

    prepared = prepare_events(frames, mapping, rejects=rejects)   # rows -> SignalEvents, in order
    summary = ingest_events(client, frames, mapping, ...)          # the whole flow, as JSON

Re-runs are safe because everything a retry depends on is deterministic: a row without its own
reference gets one derived from its signal, identity, timestamp and data
(:func:`event_reference`), and events are sent in one fixed order (:func:`event_order`), so the
checkpoint written after each acknowledged batch still describes the same events when a retried
task reads the extract again.

Checkpoints live in any object with ``get(key, default)`` and ``set(key, value)`` taking JSON
values (Airflow's ``context["task_state_store"]``); :class:`CheckpointStore` adapts one, or keeps
the checkpoint in memory where there is none. Nothing here imports Airflow.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

#: Prefix of references this module derives, so they are told apart from an extract's own.
REFERENCE_PREFIX = "ls_"

#: Key of the checkpoint in the task state store.
CHECKPOINT_KEY = "listsync_ingest_checkpoint"


@dataclass(frozen=True)
class EventMapping:
    """How the columns of an extract become signal events (spec §2.3).

    Give exactly one of each pair: ``signal`` (every row the same signal slug) or
    ``signal_column``; ``identity_type`` or ``identity_type_column``; ``data_columns`` (packed into
    ``data`` under their column names) or ``data_column`` (a JSON object per row), or neither for
    events without data. ``timestamp_column`` and ``reference_column`` are optional: without a
    timestamp the service stamps the event on arrival; without a reference one is derived
    (:func:`event_reference`). ``version`` is a schema version number or ``"latest"``.

    :raises ValueError: when a pair is given twice or not at all, naming the parameters.
    """

    identity_id_column: str
    signal: str | None = None
    signal_column: str | None = None
    identity_type: str | None = None
    identity_type_column: str | None = None
    data_columns: Sequence[str] | None = None
    data_column: str | None = None
    timestamp_column: str | None = None
    reference_column: str | None = None
    version: int | float | str | None = None

    def __post_init__(self) -> None:
        _exactly_one("signal", self.signal, "signal_column", self.signal_column)
        _exactly_one("identity_type", self.identity_type, "identity_type_column", self.identity_type_column)
        if self.data_columns is not None and self.data_column is not None:
            raise ValueError("give data_columns or data_column, not both")
        if isinstance(self.data_columns, str):
            raise ValueError("data_columns must be a list of column names, not a string")
        if self.data_columns is not None:
            object.__setattr__(self, "data_columns", tuple(self.data_columns))

    def columns(self) -> list[str]:
        """The extract columns this mapping reads, in a stable order."""
        named = [
            self.signal_column,
            self.identity_type_column,
            self.identity_id_column,
            self.data_column,
            self.timestamp_column,
            self.reference_column,
        ]
        return [c for c in named if c is not None] + list(self.data_columns or ())


def _exactly_one(name: str, value: object, other_name: str, other_value: object) -> None:
    if (value is None) == (other_value is None):
        raise ValueError(f"give exactly one of {name} (a fixed value) or {other_name} (a column)")


def canonical_timestamp(moment: datetime) -> str:
    """ISO 8601 in UTC with microseconds and ``Z``: one spelling per instant.

    :raises ValueError: for a naive datetime (the sources make timestamps timezone-aware).
    """
    if moment.tzinfo is None:
        raise ValueError("timestamp has no time zone")
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_reference(
    signal: str,
    identity_type: str,
    identity_id: str,
    timestamp: str | None,
    data: Mapping[str, Any] | None,
) -> str:
    """A reference that depends only on what the event says, so a re-run derives the same one.

    ``timestamp`` must be canonical (:func:`canonical_timestamp`) and ``data`` JSON-serialisable;
    key order in ``data`` does not matter. Two rows that say the same thing get the same
    reference, which is how duplicates in an extract are recognised.
    """
    canonical = json.dumps(
        [signal, identity_type, identity_id, timestamp, data],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return REFERENCE_PREFIX + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


class KeyValueStore(Protocol):
    """The part of Airflow's task state store a checkpoint needs."""

    def get(self, key: str, default: Any = None) -> Any: ...

    def set(self, key: str, value: Any) -> None: ...


@dataclass
class CheckpointStore:
    """Where the ingestion checkpoint survives between tries and deferrals.

    With a ``backend`` (Airflow's task state store) the checkpoint is written there after every
    acknowledged batch and read back by a retried task. ``fallback`` is used when the backend holds
    nothing, such as the checkpoint a trigger event carried back. Without a backend the checkpoint
    lives only in this object: a deferral still resumes (the trigger carries it), a crash does not.
    """

    backend: KeyValueStore | None = None
    fallback: dict[str, Any] | None = None
    key: str = CHECKPOINT_KEY
    _latest: dict[str, Any] | None = field(default=None, init=False, repr=False)

    def load(self) -> dict[str, Any] | None:
        """The latest checkpoint, or ``None`` when the ingestion starts from the beginning."""
        if self._latest is not None:
            return self._latest
        stored = self.backend.get(self.key, None) if self.backend is not None else None
        return stored if stored is not None else self.fallback

    def save(self, checkpoint: dict[str, Any]) -> None:
        """Record ``checkpoint`` (JSON values only) as the latest."""
        self._latest = checkpoint
        if self.backend is not None:
            self.backend.set(self.key, checkpoint)
