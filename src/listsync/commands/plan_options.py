"""The options of the List writes that plan first (``sync-people``, ``upsert-rows``): their
settings, where their state and lease are kept, and the history of their runs."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from listsync.commands.common import (
    HISTORY_URL_ENV,
    OUTPUT_ADVICE,
    STATE_DIR_ENV,
    default_state_dir,
    max_in_flight_argument,
)

if TYPE_CHECKING:
    from listsync.files import OpenableFile
    from listsync.sync.history import Job, SyncRun
    from listsync.sync.settings import SyncSettings

__all__ = ["add_plan_arguments", "recorded", "state_file", "sync_settings"]


def add_plan_arguments(group: argparse._ArgumentGroup, *, noun: str, overwrite_help: str) -> None:
    """Add the options of a List write that plans first (``sync-people``, ``upsert-rows``): the
    delete and reject limits, null overwrites, the dry run, the failure policy, the files,
    the shard, the memory limit and the state, which :func:`sync_settings` makes the job's
    :class:`~listsync.sync.settings.SyncSettings`.

    :param noun: what the job writes, for the help ("people", "rows").
    :param overwrite_help: the help of ``--overwrite-with-null``.
    """
    from listsync.client.in_flight import MAX_IN_FLIGHT

    group.add_argument(
        "--max-delete-fraction",
        type=float,
        default=0.1,
        help=f"largest share of the List's {noun} one run may delete (default 0.1)",
    )
    group.add_argument("--overwrite-with-null", action="store_true", help=overwrite_help)
    group.add_argument(
        "--max-reject-fraction",
        type=float,
        default=1.0,
        help="fail before writing when a larger share of rows is rejected (default 1.0)",
    )
    group.add_argument("--dry-run", action="store_true", help="plan and write the plan file; send no write")
    group.add_argument(
        "--max-in-flight",
        type=max_in_flight_argument,
        default=MAX_IN_FLIGHT,
        metavar="N",
        help=f"most requests to the List at once, 1 to 64; halved while the service pushes back "
        f"(default {MAX_IN_FLIGHT})",
    )
    group.add_argument(
        "--no-fail-on-error",
        dest="fail_on_error",
        action="store_false",
        help=f"exit 0 even when some {noun} could not be written (they are counted in the summary)",
    )
    group.add_argument("--rejects-path", metavar="FILE", help="write rejected rows here as JSON lines")
    group.add_argument("--plan-path", metavar="FILE", help="write the plan here as JSON lines")
    group.add_argument(
        "--shard",
        metavar="I/N",
        help="sync only shard I of N (0 <= I < N) of the accounts or keys, split by a hash; "
        "the N runs together sync the whole List",
    )
    group.add_argument(
        "--max-memory",
        default="auto",
        metavar="SIZE",
        help="fail as soon as the rows read would take more memory than SIZE (bytes, or e.g. 2GiB, "
        "500MB); auto (default): three quarters of the machine's or container's memory; off: no limit",
    )
    from listsync.sync.settings import MAX_PLAN_AGE, VERIFY_TIMEOUT, VISIBILITY_WINDOW

    group.add_argument(
        "--state-path",
        metavar="FILE",
        help="where the sync keeps what it applied, for the next run's three-way diff (default: a "
        f"file under ${STATE_DIR_ENV}, else $XDG_STATE_HOME/listsync, else ~/.local/state/listsync, "
        "named after the service, the List, the shard and the mapping)",
    )
    group.add_argument(
        "--no-state", action="store_true", help="keep no state: every run diffs against the live List alone"
    )
    group.add_argument(
        "--fresh-state",
        action="store_true",
        help="do not use the state kept: diff against the live List alone, then keep a new state",
    )
    group.add_argument(
        "--verify-timeout",
        type=float,
        default=VERIFY_TIMEOUT,
        metavar="SECONDS",
        help="how long the read back waits for writes the List does not show yet; what is still "
        f"not shown is counted unconfirmed (default {VERIFY_TIMEOUT:g})",
    )
    group.add_argument(
        "--visibility-window",
        type=float,
        default=VISIBILITY_WINDOW,
        metavar="SECONDS",
        help="how long a write the List has not shown is not sent again by a later run "
        f"(default {VISIBILITY_WINDOW:g})",
    )
    group.add_argument(
        "--approved-plan",
        metavar="FILE",
        help="the plan file of a reviewed --dry-run: plan again and apply only if the plan is that file, "
        "line for line (then --max-delete-fraction does not hold back its reviewed deletes)",
    )
    group.add_argument(
        "--max-plan-age",
        type=float,
        default=MAX_PLAN_AGE,
        metavar="SECONDS",
        help=f"refuse an --approved-plan written longer ago than this (default {MAX_PLAN_AGE:g}, a day)",
    )
    from listsync.sync.lease import LEASE_EXPIRY, LOCK_TIMEOUT

    group.add_argument(
        "--lock-timeout",
        type=float,
        default=LOCK_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait while another run of this List (job and shard) holds its lease, then "
        f"fail with nothing written, naming the holder (default {LOCK_TIMEOUT:g}); the lease is a file "
        "next to the state",
    )
    group.add_argument(
        "--lease-expiry",
        type=float,
        default=LEASE_EXPIRY,
        metavar="SECONDS",
        help="how long a lease outlives its holder's last renewal: a run killed mid-write holds the next "
        f"one back this long at most (default {LEASE_EXPIRY:g})",
    )
    group.add_argument(
        "--history-table",
        metavar="TABLE",
        help="record each run (times, List, mode, every count of the summary) as a row of TABLE "
        "(name or schema.name) at --history-url; created if missing",
    )
    group.add_argument(
        "--history-url",
        metavar="URL",
        default=os.environ.get(HISTORY_URL_ENV),
        help=f"the SQLAlchemy URL of the database holding --history-table (default ${HISTORY_URL_ENV}, "
        "which keeps a password out of the process list)",
    )
    group.add_argument(
        "--history-rejects-table",
        metavar="TABLE",
        help="with --history-table, also copy each rejected row (from --rejects-path) to TABLE",
    )


def sync_settings(args: argparse.Namespace) -> SyncSettings:
    """The settings ``sync_people`` and ``upsert_rows`` share, from the options
    :func:`add_plan_arguments` added, checked before anything is read or sent; the state in
    ``--state-path``, else in a file of its own under the state folder (named after the service,
    the List, the shard and the mapping), else, with ``--no-state``, nowhere.

    :raises ValueError: history options that do not go together, a setting
        :class:`~listsync.sync.settings.SyncSettings` refuses
        (``--max-delete-fraction`` or ``--max-reject-fraction`` not between 0 and 1, ``--shard``
        not ``I/N``, ``--max-memory`` not a size, a negative ``--verify-timeout`` or
        ``--visibility-window``), the message naming the option; or no file can be written at
        ``--rejects-path``, ``--plan-path`` or ``--state-path``.
    """
    from listsync.files import check_output_file
    from listsync.sync.lease import this_process
    from listsync.sync.settings import SyncSettings
    from listsync.sync.state import StateDirectory

    folder = StateDirectory(default_state_dir(), args.base_url.rstrip("/"))
    state: str | OpenableFile | StateDirectory | None = None
    if not args.no_state:
        state = folder if not args.state_path else state_file(args.state_path)
    try:
        settings = SyncSettings(
            max_delete_fraction=args.max_delete_fraction,
            overwrite_with_null=args.overwrite_with_null,
            dry_run=args.dry_run,
            fail_on_error=args.fail_on_error,
            rejects_path=args.rejects_path,
            plan_path=args.plan_path,
            max_reject_fraction=args.max_reject_fraction,
            shard=args.shard,
            max_memory=args.max_memory,
            state_path=state,
            fresh_state=args.fresh_state,
            verify_timeout=args.verify_timeout,
            visibility_window=args.visibility_window,
            approved_plan=args.approved_plan,
            max_plan_age=args.max_plan_age,
            lock_timeout=args.lock_timeout,
            lease_expiry=args.lease_expiry,
            lease_holder=this_process(f"listsync {args.command}"),
            # Without a state, the lease is still taken in the state folder.
            lease_location=folder if args.no_state else None,
        )
    except ValueError as error:
        # The message begins with the setting's name. An option whose text the setting parses
        # (--shard, --max-memory) is named before it, as check_option names options; one that
        # argparse made a number takes the setting's place.
        setting, _, rest = str(error).partition(" ")
        option = "--" + setting.replace("_", "-")
        raise ValueError(
            f"{option}: {error}" if isinstance(getattr(args, setting), str) else f"{option} {rest}"
        ) from None
    if (args.history_table or args.history_rejects_table) and not (args.history_table and args.history_url):
        raise ValueError(
            f"--history-table needs --history-url (or ${HISTORY_URL_ENV}); --history-rejects-table needs both"
        )
    for what, option, path in (
        ("the rejects file", "--rejects-path", args.rejects_path),
        ("the plan file", "--plan-path", args.plan_path),
        ("the state file", "--state-path", args.state_path),
    ):
        if path:
            check_output_file(path, what, OUTPUT_ADVICE.format(option))
    return settings


def state_file(path: str) -> str | OpenableFile:
    """``--state-path`` as the state is kept: a local path, or a URI (``s3://bucket/key``, any
    file system fsspec knows) as a path in that store, its lease beside it."""
    if "://" not in path:
        return path
    from upath import UPath

    return UPath(path)


def recorded(
    args: argparse.Namespace, job: Job, sync: Callable[[], dict[str, Any]]
) -> Callable[[], dict[str, Any]]:
    """``sync``, recording its run in ``--history-table`` when one is given
    (:func:`~listsync.sync.history.run_recorded`)."""
    if not args.history_table:
        return sync

    def record(run: SyncRun) -> None:
        import sqlalchemy as sa

        from listsync.sync.history import record_run

        engine = sa.create_engine(args.history_url)
        try:
            record_run(engine, args.history_table, run, rejects_table=args.history_rejects_table)
        finally:
            engine.dispose()

    def run() -> dict[str, Any]:
        from listsync.sync.history import run_recorded

        return run_recorded(job, args.table_id, sync, record)

    return run
