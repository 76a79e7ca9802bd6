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
)

if TYPE_CHECKING:
    from listsync.files import OpenableFile
    from listsync.sync.history import SyncRun
    from listsync.sync.settings import Job, Setting, SyncSettings

__all__ = ["add_plan_arguments", "add_setting", "recorded", "state_file", "sync_settings"]


def add_setting(
    group: argparse._ArgumentGroup, setting: Setting, *, default_text: str | None = None, **options: Any
) -> None:
    """Add ``setting``'s option (:attr:`~listsync.sync.settings.Setting.option`) to ``group``,
    its default and help from its declaration: a flag for a bool (``--no-...`` for one on by
    default), else an option taking a value; ``options`` go to ``add_argument`` (a ``type``, a
    ``metavar``...).

    :param default_text: what the help says of the default, where the command line's differs
        from the declaration's.
    """
    if isinstance(setting.default, bool):
        options.setdefault("action", "store_false" if setting.default else "store_true")
        options.setdefault("dest", setting.name)
    else:
        options.setdefault("default", setting.default)
    shown = options.get("default")
    said = "" if shown in (None, []) or isinstance(shown, bool) else f" (default {shown})"
    if default_text is not None:
        said = f" (default: {default_text})"
    # argparse formats help with %, and the declaration's help is reStructuredText.
    text = setting.help.replace("``", "").replace("%", "%%")
    if setting.default is True:
        text = f"turn {setting.name} off: {text}"
    group.add_argument(setting.option, help=text + said, **options)


def add_plan_arguments(group: argparse._ArgumentGroup, *, job: Job) -> None:
    """Add the options of a List write that plans first (``sync-people``, ``upsert-rows``), each
    made from its declaration (:data:`~listsync.sync.settings.SETTINGS`) but ``mode`` and
    ``chunk_size``, which the command adds with their parsers: the delete and reject limits, null
    overwrites, the dry run, the failure policy, the files, the shard, the memory limit, the
    state, the lease and the history, which :func:`sync_settings` makes the job's
    :class:`~listsync.sync.settings.SyncSettings`.
    """
    from listsync.sync.settings import settings_of

    declared = settings_of(job)
    seconds: dict[str, Any] = {"type": float, "metavar": "SECONDS"}
    for name, options in (
        ("max_delete_fraction", {"type": float}),
        ("overwrite_with_null", {}),
        ("max_reject_fraction", {"type": float}),
        ("dry_run", {}),
        ("max_in_flight", {"type": int, "metavar": "N"}),
        ("fail_on_error", {}),
        ("rejects_path", {"metavar": "FILE"}),
        ("plan_path", {"metavar": "FILE"}),
        ("outcomes_path", {"metavar": "FILE"}),
        ("report_path", {"metavar": "FILE"}),
        ("shard", {"metavar": "I/N"}),
        ("max_memory", {"metavar": "SIZE"}),
    ):
        add_setting(group, declared[name], **options)
    add_setting(
        group,
        declared["state_path"],
        metavar="FILE",
        default_text=f"a file under ${STATE_DIR_ENV}, else $XDG_STATE_HOME/listsync, else "
        "~/.local/state/listsync, named after the service, the List, the shard and the mapping",
    )
    group.add_argument(
        "--no-state", action="store_true", help="keep no state: every run diffs against the live List alone"
    )
    for name, options in (
        ("fresh_state", {}),
        ("verify_timeout", seconds),
        ("visibility_window", seconds),
        ("approved_plan", {"metavar": "FILE"}),
        ("max_plan_age", seconds),
        ("lock_timeout", seconds),
        ("lease_expiry", seconds),
        ("history_table", {"metavar": "TABLE"}),
        ("history_rejects_table", {"metavar": "TABLE"}),
        ("history_outcomes_table", {"metavar": "TABLE"}),
    ):
        add_setting(group, declared[name], **options)
    group.add_argument(
        "--history-url",
        metavar="URL",
        default=os.environ.get(HISTORY_URL_ENV),
        help=f"the SQLAlchemy URL of the database holding --history-table (default ${HISTORY_URL_ENV}, "
        "which keeps a password out of the process list)",
    )


def sync_settings(args: argparse.Namespace) -> SyncSettings:
    """The settings ``sync_people`` and ``upsert_rows`` share, from the options
    :func:`add_plan_arguments` added, checked before anything is read or sent; the state in
    ``--state-path``, else in a file of its own under the state folder (named after the service,
    the List, the shard and the mapping), else, with ``--no-state``, nowhere.

    :raises ValueError: history options that do not go together, a value its setting's check
        refuses (:data:`~listsync.sync.settings.SETTINGS`), the message naming the option; or no
        file can be written at ``--rejects-path``, ``--plan-path``, ``--outcomes-path``,
        ``--report-path`` or ``--state-path``.
    """
    from listsync.files import check_output_file
    from listsync.sync.lease import this_process
    from listsync.sync.settings import SHARED, SyncSettings, check_history
    from listsync.sync.state import StateDirectory

    folder = StateDirectory(default_state_dir(), args.base_url.rstrip("/"))
    state: str | OpenableFile | StateDirectory | None = None
    if not args.no_state:
        state = folder if not args.state_path else state_file(args.state_path)
    try:
        SHARED["max_in_flight"].checked(args.max_in_flight)
        settings = SyncSettings(
            max_delete_fraction=args.max_delete_fraction,
            overwrite_with_null=args.overwrite_with_null,
            dry_run=args.dry_run,
            fail_on_error=args.fail_on_error,
            rejects_path=args.rejects_path,
            plan_path=args.plan_path,
            outcomes_path=args.outcomes_path,
            report_path=args.report_path,
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
    check_history(
        args.history_table,
        (args.history_rejects_table, args.history_outcomes_table),
        args.history_url,
        names=(
            "--history-table",
            "--history-rejects-table and --history-outcomes-table",
            f"--history-url (or ${HISTORY_URL_ENV})",
        ),
    )
    for what, option, path in (
        ("the rejects file", "--rejects-path", args.rejects_path),
        ("the plan file", "--plan-path", args.plan_path),
        ("the outcomes file", "--outcomes-path", args.outcomes_path),
        ("the report", "--report-path", args.report_path),
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
            record_run(
                engine,
                args.history_table,
                run,
                rejects_table=args.history_rejects_table,
                outcomes_table=args.history_outcomes_table,
            )
        finally:
            engine.dispose()

    def run() -> dict[str, Any]:
        from listsync.sync.history import run_recorded

        return run_recorded(job, args.table_id, sync, record)

    return run
