"""``listsync ingest``: send the rows of an extract as signal events, outside Airflow.

The same flow as ``IngestSignalsOperator`` (:func:`listsync.sync.events.ingest_events`): map,
validate, send at the pace the rate limits allow, print the JSON summary. ``--checkpoint FILE``
keeps the checkpoint in a JSON file, so a run that was interrupted resumes after its last
acknowledged batch when started again with the same file and extract.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from listsync.commands.common import (
    API_KEY_ENV,
    EXIT_USAGE,
    add_extract_arguments,
    add_service_arguments,
    api_key,
    check_extract_arguments,
    check_source_file,
    read_frames,
    report,
    run_and_report,
)

__all__ = ["API_KEY_ENV", "JsonFileStore", "register", "run"]


class JsonFileStore:
    """A get/set store over one JSON file: the command line's stand-in for a task state store."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        if not self.path.exists():
            return default
        return json.loads(self.path.read_text(encoding="utf-8")).get(key, default)

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key``; the file is replaced atomically, so a crash leaves the old one."""
        data = json.loads(self.path.read_text(encoding="utf-8")) if self.path.exists() else {}
        data[key] = value
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(data), encoding="utf-8")
        partial.replace(self.path)


def _signal_type(text: str) -> tuple[str, str]:
    slug, sep, kind = text.partition("=")
    if not sep or not slug or kind not in ("Event", "Metric", "State"):
        raise argparse.ArgumentTypeError(f"expected SLUG=Event|Metric|State, got {text!r}")
    return slug, kind


def _version(text: str) -> int | float | str:
    if text == "latest":
        return text
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number or 'latest', got {text!r}") from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``ingest`` command to the ``listsync`` parser."""
    parser = subparsers.add_parser(
        "ingest",
        help="send the rows of an extract as signal events",
        description=(
            "Read an extract (a CSV, Parquet or JSON lines file, or a SQL query), map its columns to "
            "signal events, and send them at the pace the signals' rate limits allow. Prints the JSON "
            f"summary. The API key is read from ${API_KEY_ENV} unless --api-key is given."
        ),
    )
    add_extract_arguments(parser)

    mapping = parser.add_argument_group("mapping (one of each pair)")
    mapping.add_argument("--signal", help="the signal slug of every event")
    mapping.add_argument("--signal-column", help="column holding each event's signal slug")
    mapping.add_argument("--identity-type", help="CRM object type of every event (account, contact...)")
    mapping.add_argument("--identity-type-column", help="column holding each event's object type")
    mapping.add_argument("--identity-id-column", required=True, help="column holding the object's CRM id")
    mapping.add_argument("--data-columns", help="comma-separated columns packed into data under their names")
    mapping.add_argument("--data-column", help="column holding data as a JSON object")
    mapping.add_argument("--timestamp-column", help="column holding when the event happened (ISO 8601)")
    mapping.add_argument("--reference-column", help="column holding the event's reference")
    mapping.add_argument("--version", type=_version, help="schema version: a number or latest")

    service = add_service_arguments(parser, user_id=False)
    service.add_argument(
        "--signal-type",
        type=_signal_type,
        action="append",
        default=[],
        metavar="SLUG=TYPE",
        help="a signal's type (Event, Metric or State), which sets its pace; repeat for each signal",
    )
    service.add_argument("--batch-size", type=int, default=100, help="events per request, 1 to 100")

    parser.add_argument("--checkpoint", metavar="FILE", help="JSON file to resume from and checkpoint to")
    parser.add_argument("--rejects-path", metavar="FILE", help="write rejected rows here as JSON lines")
    parser.add_argument("--dry-run", action="store_true", help="map and count the events; send nothing")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the ingestion and print the summary; exit status 2 on bad arguments, 1 on a failed run."""
    # Imported here so `listsync --help` does not pay for pandas and httpx.
    from listsync.client import ListSyncClient
    from listsync.sync.events import CheckpointStore, EventMapping, ingest_events
    from listsync.sync.rejects import Rejects

    try:
        mapping = EventMapping(
            signal=args.signal,
            signal_column=args.signal_column,
            identity_type=args.identity_type,
            identity_type_column=args.identity_type_column,
            identity_id_column=args.identity_id_column,
            data_columns=args.data_columns.split(",") if args.data_columns else None,
            data_column=args.data_column,
            timestamp_column=args.timestamp_column,
            reference_column=args.reference_column,
            version=args.version,
        )
        check_extract_arguments(args)
        if not 1 <= args.batch_size <= 100:
            # Checked here too, so a dry run refuses what a real run would.
            raise ValueError(f"--batch-size must be between 1 and 100, got {args.batch_size}")
        key = api_key(args, required=not args.dry_run)
        check_source_file(args)
    except ValueError as exc:
        report("ingest", exc)
        return EXIT_USAGE
    frames = read_frames(args)
    checkpoints = CheckpointStore(JsonFileStore(args.checkpoint) if args.checkpoint else None)
    client = None if args.dry_run else ListSyncClient(args.base_url, key)

    def ingest() -> dict[str, Any]:
        with Rejects(args.rejects_path) as rejects:
            return ingest_events(
                client,
                frames,
                mapping,
                rejects=rejects,
                signal_types=dict(args.signal_type),
                batch_size=args.batch_size,
                checkpoints=checkpoints,
                dry_run=args.dry_run,
                naive_timezone=args.naive_timezone,
            )

    resume = f"run again with --checkpoint {args.checkpoint} to resume" if args.checkpoint else None
    try:
        return run_and_report("ingest", ingest, hint_on_failure=resume)
    finally:
        if client is not None:
            client.close()
