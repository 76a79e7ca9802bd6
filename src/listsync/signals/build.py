"""Signal events from extract rows: mapping, deterministic references, extract order, duplicates.

::

    stream = prepare_events(frames, mapping, rejects=rejects)   # rows -> SignalEvents, as read

Memory does not grow with the extract: events are made chunk by chunk as they are read, and the
only thing kept per event is its entry in :class:`SeenReferences` (20 bytes), which recognises
duplicates across chunks. Everything a retried ingestion depends on is deterministic: a row
without its own reference gets one derived from its signal, identity, timestamp and data
(:func:`event_reference`), and events come in the extract's order, so the same extract read
again gives the same events in the same order (:meth:`EventStream.position` lets a resumed
ingestion check that before sending anything).

The mapping of columns to events is :class:`~listsync.signals.columns.EventMapping`; the
ingestion that sends the events is :func:`~listsync.signals.ingest.ingest_events`. Nothing here
imports Airflow.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any

import numpy as np

from listsync.client.errors import InvalidRecordError
from listsync.client.models import SignalEvent, validate_event
from listsync.extract.mapping import (
    MappedRow,
    PrepareStats,
    Rule,
    iter_mapped_rows,
    reject_row,
    violation_reasons,
)
from listsync.extract.normalize import NORMALIZATION_VERSION
from listsync.extract.options import resolve_timezone
from listsync.extract.rejects import Rejects
from listsync.extract.value_rules import normalize_timestamp, parse_json, to_json_value
from listsync.signals.columns import (
    DATA,
    DATA_PREFIX,
    IDENTITY_ID,
    IDENTITY_TYPE,
    REFERENCE,
    SIGNAL,
    TIMESTAMP,
    EventMapping,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "REFERENCE_PREFIX",
    "EventStream",
    "SeenReferences",
    "canonical_timestamp",
    "event_reference",
    "prepare_events",
]

log = logging.getLogger(__name__)

#: Prefix of references this module derives, so they are told apart from an extract's own.
REFERENCE_PREFIX = "ls_"

# One spelling per JSON value (built once: json.dumps with these options builds an encoder a call).
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
    canonical = _CANONICAL_JSON.encode([signal, identity_type, identity_id, timestamp, data])
    return REFERENCE_PREFIX + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


# Stands for "no offset was given" while a timestamp is read: normalize_timestamp gives exactly
# this object to naive values, and parsing never makes it.
_NO_OFFSET = timezone(timedelta(0), "no offset")


def _event_rules(mapping: EventMapping, zone: tzinfo, naive_seen: list[bool]) -> dict[str, Rule]:
    def timestamp(value: Any) -> str:
        moment = normalize_timestamp(value, _NO_OFFSET)
        if moment.tzinfo is _NO_OFFSET:
            naive_seen.append(True)
            moment = moment.replace(tzinfo=zone)
        return canonical_timestamp(moment)

    rules: dict[str, Rule] = {DATA: parse_json, TIMESTAMP: timestamp}
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
) -> EventStream:
    """The signal events of an extract, made as it is read, in extract order.

    :param frames: chunks from :func:`~listsync.extract.sources.read_extract`.
    :param mapping: which columns hold which event fields.
    :param rejects: where rejected rows go, as they are met.
    :param naive_timezone: the zone of timestamps written without an offset (IANA name); one log
        line says so when the extract has any.
    :raises ~listsync.extract.mapping.ColumnMappingError: a mapped column is not in the extract
        (when the first chunk is read).

    Nothing is read until the result is iterated, and no event is kept once given: see
    :class:`EventStream`. A row is rejected, with every reason, when a field fails its rule (a
    timestamp that is not ISO 8601, a JSON data column that is not a JSON object), the event
    breaks the client's ``SignalEvent`` model (no signal, no identity type or id), or its
    reference column is empty. Rows with the same reference: the first is kept, later identical
    ones are duplicates and later different ones are rejected naming the first, whatever chunks
    they come in. Without a reference column, rows that say the same thing get the same derived
    reference and so collapse into one event.
    """
    return EventStream(frames, mapping, rejects, resolve_timezone(naive_timezone))


class EventStream:
    """The events of an extract, made as it is read: iterate it once, in extract order.

    Memory does not grow with the events: rows are mapped and validated a group at a time, each
    event is given out and forgotten, and duplicates are recognised by :class:`SeenReferences`
    (20 bytes per event). What was read so far is counted as it goes: :attr:`stats` (where every
    row went), :attr:`events` and :meth:`counts_by_signal` (events given out), and
    :meth:`position`, which a checkpoint records to recognise the same events when a retried
    task reads the extract again.
    """

    #: Rows mapped and validated together before their events are given out.
    GROUP_ROWS = 2048

    def __init__(self, frames: Iterable[pd.DataFrame], mapping: EventMapping, rejects: Rejects, zone: tzinfo):
        self.stats = PrepareStats()
        self.normalization_version = NORMALIZATION_VERSION
        self.events = 0
        self.seen = SeenReferences()
        self._counts: Counter[str] = Counter()
        self._digests: dict[str, Any] = {}
        self._iterator = self._read(frames, mapping, rejects, zone)

    def __iter__(self) -> Iterator[SignalEvent]:
        return self._iterator

    def counts_by_signal(self) -> dict[str, int]:
        """How many events each signal slug has had so far, slugs in sorted order."""
        return {signal: self._counts[signal] for signal in sorted(self._counts)}

    def position(self) -> dict[str, Any]:
        """Where the reading is, as JSON: events given so far, and per signal their count and a
        digest of their references in order. The same extract read again passes the same positions."""
        return {
            "events": self.events,
            "signals": {
                signal: {"events": self._counts[signal], "digest": self._digests[signal].hexdigest()[:32]}
                for signal in sorted(self._counts)
            },
        }

    def _read(
        self, frames: Iterable[pd.DataFrame], mapping: EventMapping, rejects: Rejects, zone: tzinfo
    ) -> Iterator[SignalEvent]:
        column_map = mapping.column_map()
        columns = {target: column for column, target in column_map.items()}
        naive_seen: list[bool] = []
        rows = iter_mapped_rows(frames, column_map, _event_rules(mapping, zone, naive_seen), self.stats)
        # A derived reference is a digest of the event: the same reference means the same event.
        derived = mapping.reference_column is None
        for group in _groups(rows, self.GROUP_ROWS):
            built = [(row, *_build_event(row, mapping, columns)) for row in group]
            events = [event for _, event, _ in built if event is not None]
            keys = _hashes(event.reference or "" for event in events)
            contents = keys if derived else _hashes(_content(event) for event in events)
            numbers = np.fromiter(
                (row.row_number for row, event, _ in built if event is not None), np.int64, len(events)
            )
            first_rows, same = self.seen.offer(keys, contents, numbers)
            index = 0
            for row, event, reasons in built:
                if event is None:
                    reject_row(row, reasons, rejects, self.stats)
                    continue
                first, identical = int(first_rows[index]), bool(same[index])
                index += 1
                if not first:
                    self.stats.passed += 1
                    self._count(event)
                    yield event
                elif identical:
                    self.stats.duplicates += 1
                else:
                    rejects.add_duplicate(
                        row.row_number, row.original, first, f"reference ({event.reference})"
                    )
                    self.stats.rejected += 1
        if naive_seen:
            log.info(
                "Timestamps without an offset in column %r are read as %s (naive_timezone)",
                mapping.timestamp_column,
                zone,
            )

    def _count(self, event: SignalEvent) -> None:
        self.events += 1
        self._counts[event.signal] += 1
        digest = self._digests.get(event.signal)
        if digest is None:
            digest = self._digests[event.signal] = hashlib.sha256()
        digest.update((event.reference or "").encode("utf-8") + b"\n")


def _groups(rows: Iterable[MappedRow], size: int) -> Iterator[list[MappedRow]]:
    group: list[MappedRow] = []
    for row in rows:
        group.append(row)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def _build_event(
    row: MappedRow, mapping: EventMapping, columns: Mapping[str, str]
) -> tuple[SignalEvent | None, list[str]]:
    """The event of one mapped row with its reference, or ``None`` and every reason it has none."""
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
    if reference is not None:
        fields["reference"] = reference
    event: SignalEvent | None = None
    try:
        event = validate_event(fields)
    except InvalidRecordError as error:
        reasons.extend(_event_violation_reasons(error, row))
    if reasons or event is None:
        return None, reasons
    if reference is None:
        # Derived from the validated fields, so that it is the same however a value was spelt.
        reference = event_reference(
            event.signal, event.identity.type, event.identity.id, event.timestamp, event.data
        )
        event = event.model_copy(update={"reference": reference})
    return event, reasons


def _hashes(texts: Iterable[str]) -> np.ndarray:
    """The 64-bit BLAKE2b digest of each text."""
    digests = [hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest() for text in texts]
    return np.frombuffer(b"".join(digests), dtype=np.uint64).copy()


def _content(event: SignalEvent) -> str:
    """What an event says, as canonical JSON: equal for events equal as JSON (``True`` is not
    ``1``, ``10`` is ``10.0``, key order does not matter)."""
    # Only the version and data can hold numbers; the other fields are text.
    version, data = _integral(event.version), _integral(event.data)
    return _CANONICAL_JSON.encode(
        [event.signal, version, event.identity.type, event.identity.id, event.timestamp, data]
    )


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value


class SeenReferences:
    """The references met so far, in 20 bytes each: a 64-bit digest of the reference, one of the
    event's content and the row number of its first row, in sorted NumPy arrays.

    :meth:`offer` takes a group of events at a time. The arrays are sorted runs merged as they
    grow (no run beyond :attr:`MAX_RUN` entries), so looking a group up costs a binary search per
    run and adding costs a merge now and then. Two references with one 64-bit digest would be
    taken for one: with five million references the chance is below one in a million.
    """

    #: Entries beyond which a run is not merged further (a merge briefly needs twice its size).
    MAX_RUN = 1 << 20

    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def __len__(self) -> int:
        return sum(len(keys) for keys, _, _ in self._runs)

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays."""
        return sum(keys.nbytes + contents.nbytes + rows.nbytes for keys, contents, rows in self._runs)

    def offer(
        self, keys: np.ndarray, contents: np.ndarray, rows: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Look up and add a group of events, given in extract order by reference digest, content
        digest and row number (1 or more).

        :return: per event, the row number of the first event with its reference (0 when it is
            that first one, now added) and whether its content is that first event's.
        """
        distinct, first_index, inverse = np.unique(keys, return_index=True, return_inverse=True)
        found_rows = np.zeros(len(distinct), dtype=np.uint32)
        found_contents = np.zeros(len(distinct), dtype=np.uint64)
        for run_keys, run_contents, run_rows in self._runs:
            at = np.minimum(np.searchsorted(run_keys, distinct), len(run_keys) - 1)
            hit = run_keys[at] == distinct
            found_rows[hit] = run_rows[at[hit]]
            found_contents[hit] = run_contents[at[hit]]
        new = found_rows == 0
        # A reference first met in this group: its first row here is the one the others compare to.
        found_rows[new] = rows[first_index[new]]
        found_contents[new] = contents[first_index[new]]
        first_rows = found_rows[inverse].astype(np.int64)
        first_rows[first_index[new]] = 0
        same = contents == found_contents[inverse]
        if new.any():
            self._add(distinct[new], found_contents[new], found_rows[new])
        return first_rows, same

    def _add(self, keys: np.ndarray, contents: np.ndarray, rows: np.ndarray) -> None:
        self._runs.append((keys, contents, rows))
        while len(self._runs) > 1:
            (keys_a, contents_a, rows_a), (keys_b, contents_b, rows_b) = self._runs[-2:]
            if len(keys_a) > 2 * len(keys_b) or len(keys_a) + len(keys_b) > self.MAX_RUN:
                break
            keys = np.concatenate((keys_a, keys_b))
            order = np.argsort(keys, kind="stable")
            merged = (
                keys[order],
                np.concatenate((contents_a, contents_b))[order],
                np.concatenate((rows_a, rows_b))[order],
            )
            self._runs[-2:] = [merged]


def _event_violation_reasons(error: InvalidRecordError, row: MappedRow) -> list[str]:
    # The model nests identity.type/identity.id; the map calls them identity_type/identity_id.
    flattened = InvalidRecordError(
        [(name.replace("identity.", "identity_", 1), message) for name, message in error.violations],
        record=error.record,
    )
    return violation_reasons(flattened, row)
