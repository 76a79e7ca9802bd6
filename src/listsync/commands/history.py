"""``listsync history``: the last runs of a List job, one row a run, from its history table."""

from __future__ import annotations

import argparse
import os

from listsync.commands.common import EXIT_OK, EXIT_USAGE, HISTORY_URL_ENV, report
from listsync.commands.display import add_output_argument, output_of, print_rows

#: The columns a run's row shows, after its time, job, List, mode and state.
SHOWN_COUNTS = ("read", "rejected", "added", "updated", "deleted", "unchanged", "failed", "drift")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``history`` command to the ``listsync`` parser."""
    parser = subparsers.add_parser(
        "history",
        help="show the last runs of a List job from its history table",
        description=(
            "Read the runs recorded in a history table (--history-table of sync-people and "
            "upsert-rows, history_table of the operators), the newest first, one row a run."
        ),
    )
    parser.add_argument(
        "--history-table", required=True, metavar="TABLE", help="the table (name or schema.name)"
    )
    parser.add_argument(
        "--history-url",
        metavar="URL",
        default=os.environ.get(HISTORY_URL_ENV),
        help=f"the SQLAlchemy URL of its database (default ${HISTORY_URL_ENV})",
    )
    parser.add_argument("--table-id", help="only the runs of this List")
    parser.add_argument("--job", choices=("people", "rows"), help="only the runs of this job")
    parser.add_argument("--limit", type=int, default=20, metavar="N", help="how many runs (default 20)")
    add_output_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the runs; exit status 2 on bad arguments or a table that is not there."""
    import sqlalchemy as sa

    from listsync.sync.history import read_runs

    if not args.history_url:
        report("history", f"--history-url (or ${HISTORY_URL_ENV}) names the database of --history-table")
        return EXIT_USAGE
    engine = sa.create_engine(args.history_url)
    try:
        runs = read_runs(engine, args.history_table, table_id=args.table_id, job=args.job, limit=args.limit)
    except ValueError as exc:
        report("history", exc)
        return EXIT_USAGE
    finally:
        engine.dispose()
    columns = ["started_at", "job", "table_id", "mode", "dry_run", "state", *SHOWN_COUNTS, "error"]
    print_rows(runs, columns, output_of(args))
    return EXIT_OK
