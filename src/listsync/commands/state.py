"""``listsync state show|reset``: where the sync state of a List job is kept, its size and age,
and a reset that asks first.

A state is found by ``--state-path`` (a local path, or a URI of any file system fsspec knows, as
``sync-people`` and ``upsert-rows`` take it), else by ``--job``, ``--table-id`` and ``--shard`` in
the state folder, where the command line keeps one file for each service and mapping of them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, cast

from listsync.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    STATE_DIR_ENV,
    default_state_dir,
    report,
)
from listsync.commands.display import add_output_argument, output_of, print_rows

COLUMNS = ["where", "job", "table_id", "shard", "items", "bytes", "made_at", "age"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``state`` command (``show``, ``reset``) to the ``listsync`` parser."""
    parser = subparsers.add_parser(
        "state",
        help="show where a List job keeps its state, or reset it",
        description=(
            "show: where the state of a people sync or rows upsert is, its size and age; reset: "
            "delete it (asked first), so the next run diffs against the live List alone."
        ),
    )
    parser.add_argument("action", choices=("show", "reset"))
    parser.add_argument(
        "--state-path", metavar="FILE", help="the state file, a local path or a URI (s3://bucket/key)"
    )
    parser.add_argument(
        "--job", choices=("people", "rows"), help="the job, to find its state in the state folder"
    )
    parser.add_argument("--table-id", help="the List, to find its state in the state folder")
    parser.add_argument("--shard", metavar="I/N", help="the shard of a sharded job")
    parser.add_argument(
        "--state-dir",
        type=Path,
        help=f"the state folder (default ${STATE_DIR_ENV}, else $XDG_STATE_HOME/listsync, else "
        "~/.local/state/listsync)",
    )
    parser.add_argument("--yes", action="store_true", help="reset without asking")
    add_output_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Show or reset the states the options name; exit status 1 when there is none, 2 on bad
    arguments or a reset refused."""
    if not args.state_path and not (args.job and args.table_id):
        report("state", "give --state-path, or --job and --table-id to find the state in the state folder")
        return EXIT_USAGE
    found = _found(args)
    if not found:
        report("state", "no state found there: the next run diffs against the live List alone")
        return EXIT_FAILED
    states = [_described(path) for path in found]
    print_rows(states, COLUMNS, output_of(args))
    if args.action == "show":
        return EXIT_OK
    if not args.yes:
        if not sys.stdin.isatty():
            report("state", "reset asks first; give --yes to reset without a terminal")
            return EXIT_USAGE
        answer = input(
            f"Delete {len(found)} state(s) above? The next run diffs against the live List alone [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            report("state", "nothing deleted")
            return EXIT_USAGE
    for path in found:
        path.unlink()
        report("state", f"deleted {path}")
    return EXIT_OK


def _found(args: argparse.Namespace) -> list[Path]:
    """The state files the options name, those that exist."""
    if args.state_path:
        from listsync.commands.plan_options import state_file

        path = state_file(args.state_path)
        # A URI is a universal_pathlib UPath, a Path of its file system.
        where = Path(path) if isinstance(path, str) else cast(Path, path)
        return [where] if where.exists() else []
    from listsync.sync.state import state_files

    return list(state_files(args.state_dir or default_state_dir(), args.job, args.table_id, args.shard))


def _described(path: Path) -> dict[str, Any]:
    """What a state holds, as a row: where, whose, how many items, how large, how old."""
    from datetime import datetime, timezone

    from listsync.sync.state import SyncState

    data = path.read_bytes()
    state = SyncState.from_bytes(data, str(path))
    return {
        "where": str(path),
        "job": state.scope.job,
        "table_id": state.scope.table_id,
        "shard": state.scope.shard,
        "items": len(state.entries),
        "bytes": len(data),
        "made_at": datetime.fromtimestamp(state.made_at, timezone.utc),
        "age": _age(time.time() - state.made_at),
    }


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
