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
values (Airflow's ``context["task_state_store"]``); :class:`~listsync.sync.checkpoints.CheckpointStore`
adapts one, or keeps the checkpoint in memory where there is none. The mapping of columns to
events is :class:`~listsync.sync.options.EventMapping`. Nothing here imports Airflow.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any

from listsync.client.errors import InvalidRecordError, ListSyncError
from listsync.client.events import IngestReport, SignalReport
from listsync.client.models import SignalEvent, validate_event
from listsync.sync.checkpoints import CheckpointStore
from listsync.sync.normalize import (
    NORMALIZATION_VERSION,
    normalize_timestamp,
    parse_json,
    resolve_timezone,
    to_json_value,
)
from listsync.sync.options import (
    DATA,
    DATA_PREFIX,
    IDENTITY_ID,
    IDENTITY_TYPE,
    REFERENCE,
    SIGNAL,
    TIMESTAMP,
    EventMapping,
)
from listsync.sync.plan import OpenableFile, write_plan_file
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

    from listsync.client.client import ListSyncClient

log = logging.getLogger(__name__)

#: Prefix of references this module derives, so they are told apart from an extract's own.
REFERENCE_PREFIX = "ls_"

CHECKPOINT_FORMAT = 1
"""Version of the checkpoint envelope written by :func:`ingest_events`."""

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
) -> PreparedEvents:
    """Map, normalise and validate the rows of an extract into signal events, in sending order.

    :param frames: chunks from :func:`~listsync.sync.sources.read_extract`.
    :param mapping: which columns hold which event fields.
    :param rejects: where rejected rows go.
    :param naive_timezone: the zone of timestamps written without an offset (IANA name); one log
        line says so when the extract has any.
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
    zone = resolve_timezone(naive_timezone)
    naive_seen: list[bool] = []
    for row in iter_mapped_rows(frames, column_map, _event_rules(mapping, zone, naive_seen), stats):
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
    if naive_seen:
        log.info(
            "Timestamps without an offset in column %r are read as %s (naive_timezone)",
            mapping.timestamp_column,
            zone,
        )
    events = sorted(survivors.kept().values(), key=event_order)
    return PreparedEvents(events, stats)


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

    The checkpoint marks acknowledged events by their position in the sending order, so it can
    only be applied to the very same events; resuming anyway could skip unsent events or resend
    acknowledged ones.
    """


def signal_fingerprints(events: Sequence[SignalEvent]) -> dict[str, str]:
    """Per signal, a digest of its events' references in sending order."""
    digests: dict[str, Any] = {}
    for event in events:
        digest = digests.setdefault(event.signal, hashlib.sha256())
        digest.update((event.reference or "").encode("utf-8") + b"\n")
    return {signal: digests[signal].hexdigest()[:32] for signal in sorted(digests)}


def _resume_point(
    saved: Mapping[str, Any] | None, fingerprints: Mapping[str, str], store: CheckpointStore
) -> dict[str, Any] | None:
    """The saved envelope if it applies to these events; ``None`` to start from the beginning."""
    if saved is None:
        return None
    if saved.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointMismatchError(
            f"checkpoint {store.key!r} has format {saved.get('format')!r}, expected {CHECKPOINT_FORMAT}; "
            "it was written by another version of listsync"
        )
    saved_fingerprints = saved.get("fingerprints", {})
    changed = sorted(
        signal
        for signal, count in saved.get("acknowledged", {}).items()
        if count and saved_fingerprints.get(signal) != fingerprints.get(signal)
    )
    if changed:
        raise CheckpointMismatchError(
            f"the extract changed since checkpoint {store.key!r} was written: the events of "
            f"{', '.join(changed)} are not the ones acknowledged before, so the task cannot tell which "
            "were sent. Make the extract repeatable (a fixed data interval, no late rows), or delete "
            "the checkpoint to send every event again (acknowledged ones would then be duplicated)."
        )
    return dict(saved)


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
) -> dict[str, Any]:
    """Prepare the events of an extract and send them, resuming from the checkpoint; return the summary.

    :param client: the service client; may be ``None`` for a dry run.
    :param frames: chunks from :func:`~listsync.sync.sources.read_extract`.
    :param mapping: which columns hold which event fields.
    :param rejects: where rejected rows go; the summary gives their file (a temporary one when
        ``rejects`` has no path and some row was rejected).
    :param signal_types: signal slug → ``"Event"``, ``"Metric"`` or ``"State"``, which sets its
        pace; slugs not listed are probed (see ``ListSyncClient.send_events``).
    :param batch_size: events per request, 1 to 100.
    :param checkpoints: where the checkpoint is read from and written to after every acknowledged
        batch; ``None`` keeps it in memory only.
    :param max_wait: the longest rate-limit wait to sleep through; when the next wait is longer,
        return with ``summary["resume_at"]`` set (ISO 8601) and call again after that time.
    :param dry_run: prepare and count only; nothing is sent.
    :param naive_timezone: the zone of timestamps written without an offset.
    :param rejects_file: where the rejected rows go when ``rejects`` has no path and keeps them in
        memory: an object with ``open()`` such as ``ObjectStoragePath``, written once they are all
        known (as ``prepare_with_rejects`` does for the people and rows syncs).
    :param deferred_seconds: how long the ingestion waited outside this call since the last one
        returned with ``resume_at`` (a deferred task); counted in ``seconds_waited``, for the
        whole run and for each of ``deferred_signals`` (the signals that had events left).
    :raises CheckpointMismatchError: the checkpoint was written for other events.

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
    prepared = prepare_events(frames, mapping, rejects=rejects, naive_timezone=naive_timezone)
    rejects.flush()
    rejects_path = str(rejects.path) if rejects.path is not None else None
    if rejects_path is None and (rejects_file is not None or rejects.records):
        # Kept in memory only: write them out, as the people and rows syncs do, so that every
        # rejected row keeps a reason someone can read.
        rejects_path = write_plan_file(rejects.records, rejects_file, prefix="listsync-ingest-rejects-")
    store = checkpoints if checkpoints is not None else CheckpointStore()
    fingerprints = signal_fingerprints(prepared.events)
    saved = _resume_point(store.load(), fingerprints, store)
    summary = _summary_base(prepared, rejects_path, dry_run)
    if dry_run:
        summary["signals"] = {
            signal: {"events": count} for signal, count in prepared.counts_by_signal().items()
        }
        return summary
    if client is None:
        raise ValueError("ingest_events needs a client unless dry_run=True")
    previous: dict[str, Any] = saved["totals"] if saved else {}
    if deferred_seconds:
        previous = _add_wait(previous, deferred_seconds, deferred_signals)
    total = len(prepared.events)
    if saved:
        log.info("Resuming from the checkpoint; acknowledged before, per signal: %s", saved["acknowledged"])

    logged = [-1]

    def on_checkpoint(client_checkpoint: dict[str, Any]) -> None:
        envelope = _envelope(fingerprints, client_checkpoint, previous)
        store.save(envelope)
        acknowledged = sum(envelope["acknowledged"].values())
        if acknowledged != logged[0]:  # saved before each send too, with nothing new acknowledged
            logged[0] = acknowledged
            log.info("Checkpoint: %d of %d events acknowledged", acknowledged, total)

    report = client.send_events(
        prepared.events,
        signal_types,
        batch_size=batch_size,
        checkpoint=saved["client"] if saved else None,
        on_checkpoint=on_checkpoint,
        max_wait=max_wait,
    )
    totals = _add_totals(previous, report)
    store.save(_envelope(fingerprints, report.checkpoint, totals))
    summary.update(_sent_summary(prepared, report, totals, resumed=saved is not None))
    if nothing_left_to_send(summary):
        log.warning(
            "Nothing left to send: every event was acknowledged by an earlier try or run (the checkpoint "
            "says so). To send them again on purpose, start fresh (fresh=True, --fresh)."
        )
    for signal, signal_summary in summary["signals"].items():
        for reason, count in signal_summary["rejected_reasons"].items():
            log.warning("%d event(s) of signal %r rejected by the service: %s", count, signal, reason)
    return summary


def _summary_base(prepared: PreparedEvents, rejects_path: str | None, dry_run: bool) -> dict[str, Any]:
    return {
        "rows_read": prepared.stats.read,
        "rows_rejected": prepared.stats.rejected,
        "duplicates_collapsed": prepared.stats.duplicates,
        "rejects_path": rejects_path,
        "events": len(prepared.events),
        "normalization_version": prepared.normalization_version,
        "dry_run": dry_run,
        "resumed_from": None,
        "resume_at": None,
    }


def _envelope(
    fingerprints: Mapping[str, str], client_checkpoint: Mapping[str, Any], totals: Mapping[str, Any]
) -> dict[str, Any]:
    acknowledged = {
        signal: int(state.get("prefix", 0)) + sum(end - start for start, end in state.get("ranges", []))
        for signal, state in client_checkpoint.get("signals", {}).items()
    }
    return {
        "format": CHECKPOINT_FORMAT,
        "fingerprints": dict(fingerprints),
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
    prepared: PreparedEvents, report: IngestReport, totals: Mapping[str, Any], *, resumed: bool
) -> dict[str, Any]:
    counts = prepared.counts_by_signal()
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
