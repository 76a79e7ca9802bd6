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
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from listsync.client.errors import InvalidRecordError
from listsync.client.models import SignalEvent, validate_event
from listsync.sync.normalize import (
    NORMALIZATION_VERSION,
    normalize_timestamp,
    parse_json,
    resolve_timezone,
    to_json_value,
)
from listsync.sync.prepare import (
    Deduplicator,
    MappedRow,
    PrepareStats,
    Rule,
    iter_mapped_rows,
    reject_row,
    violation_reasons,
)
from listsync.sync.rejects import Rejects

if TYPE_CHECKING:
    import pandas as pd

#: Prefix of references this module derives, so they are told apart from an extract's own.
REFERENCE_PREFIX = "ls_"

#: Key of the checkpoint in the task state store.
CHECKPOINT_KEY = "listsync_ingest_checkpoint"

# Event fields as targets of the column map (see EventMapping.column_map).
SIGNAL = "signal"
IDENTITY_TYPE = "identity_type"
IDENTITY_ID = "identity_id"
DATA = "data"
DATA_PREFIX = "data."
TIMESTAMP = "timestamp"
REFERENCE = "reference"


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
        for name in ("signal", "identity_type"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if not (
            self.version is None
            or self.version == "latest"
            or (isinstance(self.version, (int, float)) and not isinstance(self.version, bool))
        ):
            raise ValueError(f"version must be a number or 'latest', got {self.version!r}")
        columns = self.columns()
        repeated = sorted({column for column in columns if columns.count(column) > 1})
        if repeated:
            raise ValueError(f"each column may be mapped once; mapped more than once: {', '.join(repeated)}")

    def columns(self) -> list[str]:
        """The extract columns this mapping reads, in a stable order."""
        return [column for column, _ in self._targets()]

    def column_map(self) -> dict[str, str]:
        """Extract column → event field, in the form :mod:`listsync.sync.prepare` works with.

        Data columns map to ``data.<column>``; a JSON data column maps to ``data``.
        """
        return dict(self._targets())

    def _targets(self) -> list[tuple[str, str]]:
        named = {
            SIGNAL: self.signal_column,
            IDENTITY_TYPE: self.identity_type_column,
            IDENTITY_ID: self.identity_id_column,
            DATA: self.data_column,
            TIMESTAMP: self.timestamp_column,
            REFERENCE: self.reference_column,
        }
        pairs = [(column, target) for target, column in named.items() if column is not None]
        pairs += [(column, DATA_PREFIX + column) for column in self.data_columns or ()]
        return pairs


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


@dataclass
class PreparedEvents:
    """Events ready to send, in sending order, and where every extract row went.

    ``events`` are sorted by timestamp (events without one last), then reference: the same
    extract always gives the same list, whatever its row order or chunking.
    """

    events: list[SignalEvent]
    stats: PrepareStats
    normalization_version: str = NORMALIZATION_VERSION

    def counts_by_signal(self) -> dict[str, int]:
        """How many events each signal slug has, slugs in sorted order."""
        counts = Counter(event.signal for event in self.events)
        return {signal: counts[signal] for signal in sorted(counts)}


def event_order(event: SignalEvent) -> tuple[bool, str, str]:
    """Sort key of the sending order: chronological, undated events last, ties by reference."""
    return (event.timestamp is None, event.timestamp or "", event.reference or "")


def _event_rules(mapping: EventMapping, naive_timezone: str) -> dict[str, Rule]:
    zone = resolve_timezone(naive_timezone)
    rules: dict[str, Rule] = {
        DATA: parse_json,
        TIMESTAMP: lambda value: canonical_timestamp(normalize_timestamp(value, zone)),
    }
    rules.update({DATA_PREFIX + column: to_json_value for column in mapping.data_columns or ()})
    return rules


def _event_fields(mapping: EventMapping, values: Mapping[str, Any]) -> dict[str, Any]:
    """The §2.3 fields of one mapped row, before validation."""
    data: Any
    if mapping.data_columns is not None:
        # A missing value is sent as null rather than left out, so every event of the extract has
        # the same keys and a signal's required keys are never absent only because a cell was empty.
        data = {column: values.get(DATA_PREFIX + column) for column in mapping.data_columns}
    else:
        data = values.get(DATA)
    return {
        "signal": mapping.signal if mapping.signal is not None else values.get(SIGNAL),
        "version": mapping.version,
        "identity": {
            "type": mapping.identity_type if mapping.identity_type is not None else values.get(IDENTITY_TYPE),
            "id": values.get(IDENTITY_ID),
        },
        "data": data,
        "timestamp": values.get(TIMESTAMP),
    }


def prepare_events(
    frames: Iterable[pd.DataFrame],
    mapping: EventMapping,
    *,
    rejects: Rejects,
    naive_timezone: str = "UTC",
) -> PreparedEvents:
    """Map, normalise and validate the rows of an extract into signal events, in sending order.

    :param frames: chunks from :func:`~listsync.sync.sources.read_extract`.
    :param mapping: which columns hold which event fields.
    :param rejects: where rejected rows go.
    :param naive_timezone: the zone of timestamps written without an offset (IANA name).
    :raises ~listsync.sync.prepare.ColumnMappingError: a mapped column is not in the extract.

    A row is rejected, with every reason, when a field fails its rule (a timestamp that is not
    ISO 8601, a JSON data column that is not a JSON object), the event breaks the client's
    ``SignalEvent`` model (no signal, no identity type or id), or its reference column is empty.
    Rows with the same reference: the first is kept, later identical ones are duplicates and
    later different ones are rejected naming the first. Without a reference column, rows that
    say the same thing get the same derived reference and so collapse into one event.
    """
    stats = PrepareStats()
    survivors: Deduplicator[str, SignalEvent] = Deduplicator(rejects, stats, "reference")
    column_map = mapping.column_map()
    columns = {target: column for column, target in column_map.items()}
    for row in iter_mapped_rows(frames, column_map, _event_rules(mapping, naive_timezone), stats):
        reasons = list(row.reasons)
        fields = _event_fields(mapping, row.values)
        if DATA not in row.failed and fields["data"] is not None and not isinstance(fields["data"], dict):
            reasons.append(
                f"data (column {columns[DATA]!r}): must be a JSON object, got {type(fields['data']).__name__}"
            )
            fields["data"] = None
        reference = row.values.get(REFERENCE)
        if mapping.reference_column is not None and reference is None and REFERENCE not in row.failed:
            reasons.append(f"reference (column {mapping.reference_column!r}) is empty")
        event: SignalEvent | None = None
        try:
            event = validate_event(fields)
        except InvalidRecordError as error:
            reasons.extend(_event_violation_reasons(error, row))
        if reasons or event is None:
            reject_row(row, reasons, rejects, stats)
            continue
        if reference is None:
            reference = event_reference(
                event.signal, event.identity.type, event.identity.id, event.timestamp, event.data
            )
        event = event.model_copy(update={"reference": reference})
        survivors.offer(row, reference, event, reference)
    events = sorted(survivors.kept().values(), key=event_order)
    return PreparedEvents(events, stats)


def _event_violation_reasons(error: InvalidRecordError, row: MappedRow) -> list[str]:
    # The model nests identity.type/identity.id; the map calls them identity_type/identity_id.
    flattened = InvalidRecordError(
        [(name.replace("identity.", "identity_", 1), message) for name, message in error.violations],
        record=error.record,
    )
    return violation_reasons(flattened, row)


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
