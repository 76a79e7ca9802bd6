"""``listsync state show|reset``: where the sync state of a List job is kept, its size and age,
and a reset that asks first.

A state is found by ``--state-path`` (a local path, or a URI of any file system fsspec knows, as
``sync-people`` and ``upsert-rows`` take it); by ``--airflow-url`` and ``--asset`` in the asset
state store where an Airflow deployment's operators keep it (:mod:`.airflow_states`); else by
``--job``, ``--table-id`` and ``--shard`` in the state folder, where the command line keeps one file
for each service and mapping of them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from listsync.commands.airflow_states import TOKEN_ENV, AirflowStates, AirflowStatesError
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


@dataclass(frozen=True)
class KeptState:
    """A state as found: where it is, its bytes, and how to delete it."""

    where: str
    data: bytes
    delete: Callable[[], None]


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
    parser.add_argument(
        "--airflow-url",
        metavar="URL",
        help="an Airflow deployment whose operators keep their states in an asset state store: its "
        f"API server's address, with a token in ${TOKEN_ENV}; give --asset",
    )
    parser.add_argument(
        "--asset",
        metavar="URI",
        help="with --airflow-url: the asset whose state store keeps the states, the List's "
        "listsync://<host>/<tableId> or the connection's listsync-state://<conn id>",
    )
    parser.add_argument("--yes", action="store_true", help="reset without asking")
    add_output_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Show or reset the states the options name; exit status 1 when there is none or the Airflow
    deployment cannot tell, 2 on bad arguments or a reset refused."""
    usage = _usage_error(args)
    if usage:
        report("state", usage)
        return EXIT_USAGE
    try:
        found = _found(args)
    except AirflowStatesError as error:
        report("state", error)
        return EXIT_FAILED
    if not found:
        report("state", "no state found there: the next run diffs against the live List alone")
        return EXIT_FAILED
    print_rows([_described(state) for state in found], COLUMNS, output_of(args))
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
    for state in found:
        try:
            state.delete()
        except AirflowStatesError as error:
            report("state", error)
            return EXIT_FAILED
        report("state", f"deleted {state.where}")
    return EXIT_OK


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the options that say where to look, if anything."""
    if bool(args.airflow_url) != bool(args.asset):
        return "give --airflow-url and --asset together"
    if args.airflow_url and not os.environ.get(TOKEN_ENV):
        return f"set ${TOKEN_ENV} to a token of the Airflow API (POST {args.airflow_url}/auth/token)"
    if not (args.state_path or args.airflow_url or (args.job and args.table_id)):
        return (
            "give --state-path, --airflow-url and --asset, or --job and --table-id to find the state "
            "in the state folder"
        )
    return None


def _found(args: argparse.Namespace) -> list[KeptState]:
    """The states the options name, those that exist."""
    if args.airflow_url:
        return _in_airflow(args)
    if args.state_path:
        from listsync.commands.plan_options import state_file

        path = state_file(args.state_path)
        # A URI is a universal_pathlib UPath, a Path of its file system.
        where = Path(path) if isinstance(path, str) else cast(Path, path)
        paths = [where] if where.exists() else []
    else:
        from listsync.sync.state import state_files

        paths = state_files(args.state_dir or default_state_dir(), args.job, args.table_id, args.shard)
    return [KeptState(str(path), path.read_bytes(), path.unlink) for path in paths]


def _in_airflow(args: argparse.Namespace) -> list[KeptState]:
    """The states in the state store of ``--asset``, those of ``--job`` and ``--table-id`` (and
    ``--shard``) when given."""
    from listsync.sync.state import StateScope

    store = AirflowStates(args.airflow_url, os.environ[TOKEN_ENV])
    asset_id = store.asset_id(args.asset)
    prefix = StateScope.prefix(args.job, args.table_id, args.shard) if args.job and args.table_id else ""

    def deleting(key: str) -> Callable[[], None]:
        return lambda: store.delete(asset_id, key)

    return [
        KeptState(f"{args.asset} state store, key {key}", data, deleting(key))
        for key, data in store.states(asset_id, prefix)
    ]


def _described(kept: KeptState) -> dict[str, Any]:
    """What a state holds, as a row: where, whose, how many items, how large, how old."""
    from datetime import datetime, timezone

    from listsync.sync.state import SyncState

    state = SyncState.from_bytes(kept.data, kept.where)
    return {
        "where": kept.where,
        "job": state.scope.job,
        "table_id": state.scope.table_id,
        "shard": state.scope.shard,
        "items": len(state.entries),
        "bytes": len(kept.data),
        "made_at": datetime.fromtimestamp(state.made_at, timezone.utc),
        "age": _age(time.time() - state.made_at),
    }


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
