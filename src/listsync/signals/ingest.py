"""Signal events from extracts: mapping, deterministic references, extract order, checkpoints, ingestion.

The flow of a backfill::

    stream = prepare_events(frames, mapping, rejects=rejects)   # rows -> SignalEvents, as read
    summary = ingest_events(client, frames, mapping, ...)        # the whole flow, as JSON

Memory does not grow with the extract: events are made chunk by chunk as they are sent, and the
only thing kept per event is its entry in :class:`SeenReferences` (20 bytes), which recognises
duplicates across chunks. Re-runs are safe because everything a retry depends on is
deterministic: a row without its own reference gets one derived from its signal, identity,
timestamp and data (:func:`event_reference`), and events are sent in the extract's order, so the
checkpoint written before each send and after each acknowledged batch still describes the same
events when a retried task reads the same extract again (:meth:`EventStream.position` lets it
check that before sending anything).

Checkpoints live in any object with ``get(key, default)`` and ``set(key, value)`` taking JSON
values (Airflow's ``context["task_state_store"]``); :class:`~listsync.signals.checkpoints.CheckpointStore`
adapts one, or keeps the checkpoint in memory where there is none. The mapping of columns to
events is :class:`~listsync.sync.settings.EventMapping`. Nothing here imports Airflow.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any

import numpy as np

from listsync.client.errors import InvalidRecordError
from listsync.client.models import SignalEvent, validate_event
from listsync.errors import ListSyncError
from listsync.extract.mapping import (
    MappedRow,
    PrepareStats,
    Rule,
    iter_mapped_rows,
    reject_row,
    violation_reasons,
)
from listsync.extract.normalize import (
    NORMALIZATION_VERSION,
    normalize_timestamp,
    parse_json,
    resolve_timezone,
    to_json_value,
)
from listsync.extract.rejects import Rejects
from listsync.signals.checkpoints import CheckpointStore
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
from listsync.signals.sender import MAX_QUEUED_EVENTS, IngestReport, SignalReport, stream_events
from listsync.sync.steps import OpenableFile, write_plan_file

if TYPE_CHECKING:
    import pandas as pd

    from listsync.client.client import ListSyncClient

log = logging.getLogger(__name__)

#: Prefix of references this module derives, so they are told apart from an extract's own.
REFERENCE_PREFIX = "ls_"

# One spelling per JSON value (built once: json.dumps with these options builds an encoder a call).
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)

CHECKPOINT_FORMAT = 2
"""Version of the checkpoint envelope written by :func:`ingest_events` (1: events sorted by
timestamp, refused with a message saying so)."""

# Counters of the client's per-signal report that add up across the parts of one ingestion
# (the tries of a task and the stretches between its deferrals).
_ADDITIVE_COUNTERS = (
    "rate_limited_resends",
    "requests",
    "rate_limited_responses",
    "seconds_waited",
)


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


def nothing_left_to_send(summary: Mapping[str, Any]) -> bool:
    """Whether an ingestion found every event acknowledged by an earlier try or run and sent none."""
    before = sum((summary.get("resumed_from") or {}).values())
    return bool(before) and summary.get("acknowledged") == before and not summary.get("pending")


class CheckpointMismatchError(ListSyncError, ValueError):
    """The checkpoint was written for different events than the extract now gives.

    The checkpoint marks acknowledged events by their position in the extract's order, so it can
    only be applied to the very same events; resuming anyway could skip unsent events or resend
    acknowledged ones.
    """


def _resume_point(saved: Mapping[str, Any] | None, store: CheckpointStore) -> dict[str, Any] | None:
    """The saved envelope, if it is one this version can resume from; ``None`` to start afresh."""
    if saved is None:
        return None
    if saved.get("format") == 1:
        raise CheckpointMismatchError(
            f"checkpoint {store.key!r} was written by an earlier version of listsync, which sent events "
            "sorted by timestamp; this one sends them in the extract's order, so the positions it "
            "records name other events. Finish the ingestion with the version that started it, or "
            "start fresh (fresh=True, --fresh) to send every event again (acknowledged ones would then "
            "be duplicated)."
        )
    if saved.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointMismatchError(
            f"checkpoint {store.key!r} has format {saved.get('format')!r}, expected {CHECKPOINT_FORMAT}; "
            "it was written by another version of listsync"
        )
    return dict(saved)


def _checked(stream: EventStream, read: Mapping[str, Any], store: CheckpointStore) -> Iterator[SignalEvent]:
    """The events of ``stream``, compared with the ones checkpoint ``read`` was written for as
    soon as as many are read, before that last one is given out."""
    horizon = int(read.get("events", 0))
    for event in stream:
        if stream.events == horizon:
            _compare(stream.position(), read, store)
        yield event
    if stream.events < horizon:
        _compare(stream.position(), read, store)


def _compare(position: Mapping[str, Any], read: Mapping[str, Any], store: CheckpointStore) -> None:
    now, before = position["signals"], read.get("signals", {})
    changed = sorted(signal for signal in set(now) | set(before) if now.get(signal) != before.get(signal))
    if changed:
        raise CheckpointMismatchError(
            f"the extract changed since checkpoint {store.key!r} was written: the events of "
            f"{', '.join(changed)} are not the ones read before, so the task cannot tell which "
            "were sent. Make the extract repeatable (a fixed data interval, no late rows), or delete "
            "the checkpoint to send every event again (acknowledged ones would then be duplicated)."
        )


def ingest_events(
    client: ListSyncClient | None,
    frames: Iterable[pd.DataFrame],
    mapping: EventMapping,
    *,
    rejects: Rejects,
    signal_types: Mapping[str, str] | None = None,
    batch_size: int = 100,
    checkpoints: CheckpointStore | None = None,
    max_wait: float | None = None,
    dry_run: bool = False,
    naive_timezone: str = "UTC",
    rejects_file: OpenableFile | None = None,
    deferred_seconds: float = 0.0,
    deferred_signals: Collection[str] = (),
    max_queued: int = MAX_QUEUED_EVENTS,
) -> dict[str, Any]:
    """Read the events of an extract and send them as they are read, resuming from the checkpoint;
    return the summary.

    Memory stays bounded whatever the number of events: the extract is read chunk by chunk,
    at most ``max_queued`` events wait unsent at a time, and duplicates are recognised in 20 bytes
    per event (:class:`EventStream`). Events go out in the extract's order (per signal; signals
    progress at their own pace), so a retried task reading the same extract meets the same events
    in the same order, and the checkpoint's positions still name them.

    :param client: the service client; may be ``None`` for a dry run.
    :param frames: chunks from :func:`~listsync.extract.sources.read_extract`.
    :param mapping: which columns hold which event fields.
    :param rejects: where rejected rows go, as they are met; the summary gives their file. When
        ``rejects`` has no path they are written to a temporary file instead (kept, and named
        in the summary, when some row was rejected) and ``rejects.records`` stays empty.
    :param signal_types: signal slug → ``"Event"``, ``"Metric"`` or ``"State"``, which sets its
        pace; slugs not listed are probed (see ``ListSyncClient.send_events``).
    :param batch_size: events per request, 1 to 100.
    :param checkpoints: where the checkpoint is read from and written to before every send and
        after every acknowledged batch; ``None`` keeps it in memory only.
    :param max_wait: the longest rate-limit wait to sleep through; when the next wait is longer,
        read the rest of the extract without sending (to count it) and return with
        ``summary["resume_at"]`` set (ISO 8601); call again after that time.
    :param dry_run: read and count only; nothing is sent and no event is kept.
    :param naive_timezone: the zone of timestamps written without an offset.
    :param rejects_file: where the rejected rows go when ``rejects`` has no path: an object with
        ``open()`` such as ``ObjectStoragePath``, written from the temporary file at the end.
    :param deferred_seconds: how long the ingestion waited outside this call since the last one
        returned with ``resume_at`` (a deferred task); counted in ``seconds_waited``, for the
        whole run and for each of ``deferred_signals`` (the signals that had events left).
    :param max_queued: events read but not yet sent, at most (see
        :func:`~listsync.signals.sender.stream_events`).
    :raises CheckpointMismatchError: the checkpoint was written for other events (checked
        before anything is sent), or by a version of listsync that ordered events differently.

    The checkpoint (format 2) records, besides the client's acknowledged positions, how far the
    reading had got when it was written (:meth:`EventStream.position`). A resumed call reads that
    far before its first send and compares: a change in that part of the extract fails with
    :class:`CheckpointMismatchError`; events beyond it (rows added at the end) are simply sent.

    The summary (JSON-serialisable): ``rows_read``, ``rows_rejected``, ``duplicates_collapsed``,
    ``rejects_path``, ``events``, ``acknowledged`` (over every try, with the checkpoint),
    ``rejected_by_service``, ``pending``, ``rate_limited_resends``, ``requests``,
    ``rate_limited_responses`` (429s), ``seconds_waited``, ``possibly_duplicated``,
    ``resumed_from`` (events per signal acknowledged before this call, or ``None``),
    ``resume_at``, ``dry_run``, ``normalization_version`` and the same counters per signal under
    ``signals``, with the service's reasons for rejected events. The counters of requests, 429s,
    waits and re-sends add up over the deferrals of one task (the waits include the time spent
    deferred, ``deferred_seconds``); a try that crashed contributes only its acknowledged events.
    """
    if client is None and not dry_run:
        raise ValueError("ingest_events needs a client unless dry_run=True")
    store = checkpoints if checkpoints is not None else CheckpointStore()
    saved = _resume_point(store.load(), store)
    previous: dict[str, Any] = saved["totals"] if saved else {}
    if deferred_seconds:
        previous = _add_wait(previous, deferred_seconds, deferred_signals)
    report: IngestReport | None = None
    with _RejectsOutput(rejects, rejects_file) as output:
        stream = prepare_events(frames, mapping, rejects=output.rejects, naive_timezone=naive_timezone)
        events = _checked(stream, saved["read"], store) if saved else iter(stream)
        if client is None or dry_run:
            for _ in events:
                pass
        else:
            report = _send(
                client,
                stream,
                events,
                saved,
                store,
                previous=previous,
                signal_types=signal_types,
                batch_size=batch_size,
                max_wait=max_wait,
                max_queued=max_queued,
            )
    summary = _summary_base(stream, output.path, dry_run)
    if report is None:
        summary["signals"] = {
            signal: {"events": count} for signal, count in stream.counts_by_signal().items()
        }
        return summary
    summary.update(_sent_summary(stream, report, _add_totals(previous, report), resumed=saved is not None))
    if nothing_left_to_send(summary):
        log.warning(
            "Nothing left to send: every event was acknowledged by an earlier try or run (the checkpoint "
            "says so). To send them again on purpose, start fresh (fresh=True, --fresh)."
        )
    for signal, signal_summary in summary["signals"].items():
        for reason, count in signal_summary["rejected_reasons"].items():
            log.warning("%d event(s) of signal %r rejected by the service: %s", count, signal, reason)
    return summary


def _send(
    client: ListSyncClient,
    stream: EventStream,
    events: Iterator[SignalEvent],
    saved: Mapping[str, Any] | None,
    store: CheckpointStore,
    *,
    previous: Mapping[str, Any],
    signal_types: Mapping[str, str] | None,
    batch_size: int,
    max_wait: float | None,
    max_queued: int,
) -> IngestReport:
    """Send ``events`` as they are read, saving the checkpoint envelope whenever the client's changes."""
    if saved:
        log.info("Resuming from the checkpoint; acknowledged before, per signal: %s", saved["acknowledged"])
    # Where the reading was at the last save: the client's positions all lie before it. (At the
    # end the reading may have gone further, to count what an early return leaves unsent; a
    # resumed try need not read that far before its first send.)
    read = saved["read"] if saved else stream.position()
    logged = -1

    def on_checkpoint(client_checkpoint: dict[str, Any]) -> None:
        nonlocal read, logged
        read = stream.position()
        envelope = _envelope(read, client_checkpoint, previous)
        store.save(envelope)
        acknowledged = sum(envelope["acknowledged"].values())
        if acknowledged != logged:  # saved before each send too, with nothing new acknowledged
            logged = acknowledged
            log.info("Checkpoint: %d events acknowledged, %d read", acknowledged, read["events"])

    report = stream_events(
        client,
        events,
        signal_types,
        batch_size=batch_size,
        checkpoint=saved["client"] if saved else None,
        on_checkpoint=on_checkpoint,
        max_wait=max_wait,
        max_queued=max_queued,
        read_first=int(saved["read"].get("events", 0)) if saved else 0,
    )
    store.save(_envelope(read, report.checkpoint, _add_totals(previous, report)))
    return report


class _RejectsOutput:
    """Where the rejected rows of one ingestion go: ``rejects`` when it writes to a file, else a
    temporary file, copied to ``rejects_file`` at the end when one is given.

    :attr:`path` (after the ``with`` block) is the file the summary names, or ``None`` when no
    file was asked for and no row was rejected.
    """

    def __init__(self, rejects: Rejects, rejects_file: OpenableFile | None) -> None:
        self._given = rejects
        self._file = rejects_file
        self.path: str | None = str(rejects.path) if rejects.path is not None else None
        self.rejects = rejects
        if rejects.path is None:
            # Kept on disk, not in memory: an extract may reject any number of rows.
            with tempfile.NamedTemporaryFile(
                prefix="listsync-ingest-rejects-", suffix=".jsonl", delete=False
            ) as spool:
                self.rejects = Rejects(spool.name)

    def __enter__(self) -> _RejectsOutput:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.rejects is self._given:
            self.rejects.flush()
            return
        self.rejects.close()
        spool = self.rejects.path
        assert spool is not None
        if self._file is not None:
            with spool.open(encoding="utf-8") as lines:
                self.path = write_plan_file((json.loads(line) for line in lines), self._file)
            spool.unlink()
        elif self.rejects.count:
            self.path = str(spool)
        else:
            spool.unlink()


def _summary_base(stream: EventStream, rejects_path: str | None, dry_run: bool) -> dict[str, Any]:
    return {
        "rows_read": stream.stats.read,
        "rows_rejected": stream.stats.rejected,
        "duplicates_collapsed": stream.stats.duplicates,
        "rejects_path": rejects_path,
        "events": stream.events,
        "normalization_version": stream.normalization_version,
        "dry_run": dry_run,
        "resumed_from": None,
        "resume_at": None,
    }


def _envelope(
    read: Mapping[str, Any], client_checkpoint: Mapping[str, Any], totals: Mapping[str, Any]
) -> dict[str, Any]:
    acknowledged = {
        signal: int(state.get("prefix", 0)) + sum(end - start for start, end in state.get("ranges", []))
        for signal, state in client_checkpoint.get("signals", {}).items()
    }
    return {
        "format": CHECKPOINT_FORMAT,
        "read": dict(read),
        "acknowledged": acknowledged,
        "client": dict(client_checkpoint),
        "totals": dict(totals),
    }


def _add_totals(previous: Mapping[str, Any], report: IngestReport) -> dict[str, Any]:
    """``previous`` totals plus this run's counters.

    Batches carry several signals, so the run's requests, 429s and waits are kept apart from the
    per-signal ones rather than summed from them.
    """
    signals = {signal: dict(counters) for signal, counters in previous.get("signals", {}).items()}
    for signal, signal_report in report.signals.items():
        counters = signals.setdefault(signal, {})
        for name in _ADDITIVE_COUNTERS:
            counters[name] = counters.get(name, 0) + getattr(signal_report, name)
    return {
        "signals": signals,
        "requests": previous.get("requests", 0) + report.requests,
        "rate_limited_responses": previous.get("rate_limited_responses", 0) + report.rate_limited_responses,
        "seconds_waited": previous.get("seconds_waited", 0.0) + report.seconds_waited,
    }


def _add_wait(totals: Mapping[str, Any], seconds: float, signals: Iterable[str]) -> dict[str, Any]:
    """``totals`` with a wait of ``seconds`` added, for the run and each of ``signals``."""
    by_signal = {signal: dict(counters) for signal, counters in totals.get("signals", {}).items()}
    for signal in signals:
        counters = by_signal.setdefault(signal, {})
        counters["seconds_waited"] = counters.get("seconds_waited", 0.0) + seconds
    return {**totals, "signals": by_signal, "seconds_waited": totals.get("seconds_waited", 0.0) + seconds}


def _sent_summary(
    stream: EventStream, report: IngestReport, totals: Mapping[str, Any], *, resumed: bool
) -> dict[str, Any]:
    counts = stream.counts_by_signal()
    signals: dict[str, dict[str, Any]] = {}
    for signal in sorted(set(counts) | set(report.signals)):
        signal_report = report.signals.get(signal, SignalReport())
        counters = totals["signals"].get(signal, {})
        reasons = Counter(signal_report.rejected.values())
        # Counted from the checkpoint, where each try records its own as it goes: a try that
        # crashed leaves no counters, but its possible duplicates are there.
        twice = report.checkpoint.get("signals", {}).get(signal, {}).get("twice", [])
        signals[signal] = {
            "events": counts.get(signal, 0),
            "acknowledged": signal_report.skipped + signal_report.acknowledged,
            "rejected_by_service": len(signal_report.rejected),
            "rejected_reasons": dict(sorted(reasons.items())),
            **{name: counters.get(name, 0) for name in _ADDITIVE_COUNTERS},
            "possibly_duplicated": sum(end - start for start, end in twice),
        }
    return {
        "acknowledged": sum(s["acknowledged"] for s in signals.values()),
        "rejected_by_service": sum(s["rejected_by_service"] for s in signals.values()),
        "pending": report.pending,
        "rate_limited_resends": sum(s["rate_limited_resends"] for s in signals.values()),
        "requests": totals["requests"],
        "rate_limited_responses": totals.get("rate_limited_responses", 0),
        "seconds_waited": round(totals["seconds_waited"], 3),
        "possibly_duplicated": sum(s["possibly_duplicated"] for s in signals.values()),
        "resumed_from": (
            {signal: r.skipped for signal, r in sorted(report.signals.items()) if r.skipped}
            if resumed
            else None
        ),
        "resume_at": (
            datetime.fromtimestamp(report.resume_at, timezone.utc).isoformat()
            if report.resume_at is not None
            else None
        ),
        "signals": signals,
    }
