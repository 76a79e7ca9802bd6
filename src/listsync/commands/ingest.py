"""``listsync ingest``: send the rows of an extract as signal events, outside Airflow.

The same flow as ``IngestSignalsOperator`` (:func:`listsync.signals.ingest.ingest_events`): map,
validate, send at the pace the rate limits allow, print the JSON summary.

It resumes by default. The checkpoint is a JSON file (``--checkpoint FILE``, else one under
``--state-dir`` named after the extract, the service and the mapping), written before each send
and after each acknowledged batch: the same command started again after a crash or a kill sends
only what was not acknowledged, and says where it resumed; started again after a complete run, it
sends nothing and says so. ``--fresh`` starts again from the first event (acknowledged events are
then sent twice); ``--no-checkpoint`` keeps nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from listsync.commands.common import (
    API_KEY_ENV,
    EXIT_FAILED,
    EXIT_USAGE,
    OUTPUT_ADVICE,
    STATE_DIR_ENV,
    add_extract_arguments,
    add_service_arguments,
    api_key,
    check_extract_arguments,
    check_service_arguments,
    check_source_file,
    default_state_dir,
    read_frames,
    report,
)
from listsync.commands.display import add_output_argument, output_of, run_and_report

__all__ = ["API_KEY_ENV", "STATE_DIR_ENV", "JsonFileStore", "default_state_dir", "register", "run"]


class JsonFileStore:
    """A get/set store over one JSON file: the command line's stand-in for a task state store."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        return self._read().get(key, default)

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key``; the file is replaced atomically, so a crash leaves the old one."""
        data = self._read()
        data[key] = value
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(json.dumps(data), encoding="utf-8")
        partial.replace(self.path)

    def check_writable(self) -> None:
        """Create the file's folder and make sure a checkpoint can be written there, before any send.

        :raises ValueError: it cannot, naming the path and the reason.
        """
        from listsync.files import check_output_file

        check_output_file(
            self.path,
            "the checkpoint",
            "give a writable --checkpoint FILE or --state-dir, or --no-checkpoint",
        )

    def _read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"the checkpoint {self.path} cannot be read ({exc}); it cannot say what was sent: "
                "delete it, or run with --fresh to send every event again"
            ) from None
        if not isinstance(data, dict):
            raise ValueError(
                f"the checkpoint {self.path} is not a JSON object; delete it, or run with --fresh"
            )
        return data


def checkpoint_path(args: argparse.Namespace) -> Path | None:
    """Where this command's checkpoint lives: ``--checkpoint``, else a file under the state folder
    named after what makes the events and where they go; ``None`` with ``--no-checkpoint``."""
    if args.no_checkpoint:
        return None
    if args.checkpoint:
        return Path(args.checkpoint)
    source = str(Path(args.source).resolve()) if args.source else f"{args.sql_url}\n{args.sql}"
    fields = [
        *("signal", "signal_column", "identity_type", "identity_type_column", "identity_id_column"),
        *("data_columns", "data_column", "timestamp_column", "reference_column", "version"),
    ]
    identity = json.dumps([source, args.base_url, [str(getattr(args, name)) for name in fields]])
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:20]
    return Path(args.state_dir or default_state_dir()) / f"ingest-{digest}.json"


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

    state = parser.add_argument_group("resuming (on by default)")
    state.add_argument("--checkpoint", metavar="FILE", help="JSON file to resume from and checkpoint to")
    state.add_argument(
        "--state-dir",
        metavar="DIR",
        help=f"folder of the checkpoints named after their extract (default ${STATE_DIR_ENV}, "
        "else $XDG_STATE_HOME/listsync, else ~/.local/state/listsync)",
    )
    state.add_argument("--no-checkpoint", action="store_true", help="keep no checkpoint: a re-run sends all")
    state.add_argument(
        "--fresh", action="store_true", help="forget the checkpoint and send every event again (duplicates!)"
    )
    parser.add_argument("--rejects-path", metavar="FILE", help="write rejected rows here as JSON lines")
    parser.add_argument("--dry-run", action="store_true", help="map and count the events; send nothing")
    add_output_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the ingestion and print the summary; exit status 2 on bad arguments, 1 on a failed run."""
    # Imported here so `listsync --help` does not pay for pandas and httpx.
    from listsync.client import ListSyncClient
    from listsync.extract.rejects import Rejects
    from listsync.files import check_output_file
    from listsync.signals.checkpoints import CheckpointStore
    from listsync.signals.columns import EventMapping
    from listsync.signals.ingest import ingest_events

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
        check_service_arguments(args)
        if args.rejects_path:
            check_output_file(args.rejects_path, "the rejects file", OUTPUT_ADVICE.format("--rejects-path"))
        if not 1 <= args.batch_size <= 100:
            # Checked here too, so a dry run refuses what a real run would.
            raise ValueError(f"--batch-size must be between 1 and 100, got {args.batch_size}")
        key = api_key(args, required=not args.dry_run)
        check_source_file(args)
        if args.no_checkpoint and (args.checkpoint or args.fresh):
            raise ValueError("--no-checkpoint keeps no checkpoint: drop --checkpoint and --fresh")
        path = None if args.dry_run else checkpoint_path(args)
        store = JsonFileStore(path) if path is not None else None
        if store is not None:
            store.check_writable()
            if args.fresh:
                store.path.unlink(missing_ok=True)
    except ValueError as exc:
        report("ingest", exc)
        return EXIT_USAGE
    frames = read_frames(args)
    checkpoints = CheckpointStore(store)
    try:
        saved = checkpoints.load()
    except ValueError as exc:
        report("ingest", exc)
        return EXIT_FAILED
    if saved:
        before = sum(saved.get("acknowledged", {}).values())
        report("ingest", f"resuming from {before} events acknowledged by earlier runs ({path})")
    client = None if args.dry_run else ListSyncClient(args.base_url, key, timeout=args.timeout)

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

    resume = "run the same command again to resume" if store is not None else None
    try:
        status = run_and_report(
            "ingest",
            ingest,
            base_url=args.base_url,
            output=output_of(args),
            hint_on_failure=resume,
            then=lambda summary: _say(summary, path),
        )
    finally:
        if client is not None:
            client.close()
    return status


def _say(summary: dict[str, Any], checkpoint: Path | None) -> int | None:
    """Tell that a run had nothing left to send, or that the service refused it all; the exit
    status for the last."""
    if summary["dry_run"]:
        return None
    from listsync.signals.ingest import nothing_left_to_send

    if nothing_left_to_send(summary):
        report("ingest", f"nothing left to send ({checkpoint}): run with --fresh to send every event again")
    if summary["events"] and not summary["acknowledged"] and summary["rejected_by_service"]:
        report("ingest", "the service refused every event; the summary lists its reasons")
        return EXIT_FAILED
    return None
