"""``listsync upsert-rows``: make a List's rows match an extract, writing only changed cells, outside Airflow.

The same flow and options as ``UpsertRowsOperator`` (:func:`listsync.sync.rows.upsert_rows`);
prints the JSON summary. Example::

    LISTSYNC_API_KEY=sk_... listsync upsert-rows --base-url http://127.0.0.1:8080 \\
        --table-id tbl_accounts --key-column domain \\
        --sql "select * from accounts" --sql-url postgresql://postgres@127.0.0.1/test \\
        --map website=domain --map arr=arr --map meta=metadata --dry-run --plan-path plan.jsonl
"""

from __future__ import annotations

import argparse

from listsync.commands.common import (
    API_KEY_ENV,
    EXIT_USAGE,
    add_extract_arguments,
    add_service_arguments,
    api_key,
    check_extract_arguments,
    check_option,
    check_service_arguments,
    check_source_file,
    chunk_size_argument,
    column_mapping,
    read_frames,
    report,
)
from listsync.commands.display import add_output_argument, output_of, run_and_report
from listsync.commands.plan_options import add_plan_arguments, add_setting, recorded, sync_settings

__all__ = ["API_KEY_ENV", "WRITE_KINDS", "register", "run"]

# The request kinds of a rows upsert (listsync.sync.rows), spelt here so --help stays
# cheap.
WRITE_KINDS = ("add_rows", "update_cells", "delete_rows")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``upsert-rows`` command to the ``listsync`` parser."""
    parser = subparsers.add_parser(
        "upsert-rows",
        help="make a List's rows match an extract, writing only changed cells",
        description=(
            "Diff an extract against a List's rows by a key column and write only the changes: new "
            "rows, changed cells, and with --delete-missing the removal of rows the extract lacks. "
            "Prints the JSON summary. Exit status: 0 done, 1 the upsert failed or some rows could "
            "not be written, 2 bad arguments."
        ),
    )
    parser.add_argument("--table-id", required=True, help="the List to write")
    parser.add_argument("--key-column", required=True, help="the List column id that identifies a row")
    parser.add_argument(
        "--key-kind",
        choices=("domain", "text"),
        default="domain",
        help="normalise keys as domains (default) or as trimmed text",
    )
    add_extract_arguments(parser)
    parser.add_argument(
        "--map",
        dest="column_map",
        type=column_mapping,
        action="append",
        required=True,
        metavar="COLUMN=COLUMN_ID",
        help="map an extract column to a List column id; repeat for each column",
    )
    parser.add_argument(
        "--json-column",
        dest="json_columns",
        action="append",
        default=[],
        metavar="COLUMN",
        help=(
            "an extract column whose text holds JSON, e.g. CSV numbers for a number column "
            "(typed SQL columns need none); repeatable"
        ),
    )

    upsert = parser.add_argument_group("upsert")
    from listsync.sync.settings import ROWS_MODES, settings_of

    declared = settings_of("rows")
    add_setting(upsert, declared["mode"], choices=ROWS_MODES)
    upsert.add_argument(
        "--delete-missing",
        action="store_true",
        help="delete List rows whose key is not in the extract (with --mode upsert)",
    )
    add_setting(
        upsert,
        declared["chunk_size"],
        type=chunk_size_argument(WRITE_KINDS, "items"),
        action="append",
        default=[],
        metavar="N|KIND=N",
        default_text="the service's caps; repeat to set kinds apart",
    )
    add_plan_arguments(upsert, job="rows")

    add_service_arguments(parser)
    add_output_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the upsert and print the summary; exit status 2 on bad arguments, 1 on a failed run."""
    # Imported here so `listsync --help` does not pay for pandas and httpx.
    from listsync.client import ListSyncClient
    from listsync.extract.mapping import check_rows_column_map, rows_key_column
    from listsync.sync.rows import chunk_sizes, upsert_rows
    from listsync.sync.settings import check_rows_mode

    overall = [size for kind, size in args.chunk_size if kind is None]
    by_kind = {kind: size for kind, size in args.chunk_size if kind is not None}
    try:
        check_extract_arguments(args)
        settings = sync_settings(args)
        check_service_arguments(args)
        key = api_key(args)
        column_map = dict(args.column_map)
        source_key = check_option("--map", rows_key_column, column_map, args.key_column)
        check_option("--map", check_rows_column_map, column_map, source_key, args.json_columns)
        check_rows_mode(args.mode, args.delete_missing)
        check_source_file(args)
        sizes = chunk_sizes(overall[-1] if overall else None)
        sizes = chunk_sizes({**sizes, **by_kind})
    except ValueError as exc:
        report("upsert-rows", exc)
        return EXIT_USAGE
    frames = read_frames(args)
    with ListSyncClient(
        args.base_url, key, args.user_id, timeout=args.timeout, max_in_flight=args.max_in_flight
    ) as client:
        return run_and_report(
            "upsert-rows",
            recorded(
                args,
                "rows",
                lambda: upsert_rows(
                    client,
                    args.table_id,
                    frames,
                    key_column=args.key_column,
                    column_map=column_map,
                    key_kind=args.key_kind,
                    json_columns=args.json_columns,
                    delete_missing=args.delete_missing,
                    chunk_size=sizes,
                    mode=args.mode,
                    settings=settings,
                ),
            ),
            base_url=args.base_url,
            output=output_of(args),
        )
