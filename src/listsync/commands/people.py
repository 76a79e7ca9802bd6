"""``listsync sync-people``: make a List's targetable people match an extract, outside Airflow.

The same flow and options as ``SyncTargetablePeopleOperator``
(:func:`listsync.sync.people.sync_people`); prints the JSON summary. Example::

    LISTSYNC_API_KEY=sk_... listsync sync-people --base-url http://127.0.0.1:8080 \\
        --table-id tbl_accounts --source contacts.csv \\
        --map domain=account_domain --map email=email --map first=first_name \\
        --mode mirror --dry-run --plan-path plan.jsonl
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

# The request kinds of a people sync (listsync.sync.people), spelt here so --help
# stays cheap.
WRITE_KINDS = ("add", "patch", "delete")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``sync-people`` command to the ``listsync`` parser."""
    parser = subparsers.add_parser(
        "sync-people",
        help="make a List's targetable people match an extract",
        description=(
            "Diff an extract of contacts against a List's targetable people and write only the "
            "changes: adds, changed fields, and with --mode mirror deletes. Prints the JSON summary. "
            "Exit status: 0 done, 1 the sync failed or some people could not be written, 2 bad arguments."
        ),
    )
    parser.add_argument("--table-id", required=True, help="the List to sync")
    add_extract_arguments(parser)
    parser.add_argument(
        "--map",
        dest="column_map",
        type=column_mapping,
        action="append",
        required=True,
        metavar="COLUMN=FIELD",
        help="map an extract column to a person field or account_domain; repeat for each column",
    )

    sync = parser.add_argument_group("sync")
    from listsync.sync.settings import SYNC_MODES, settings_of

    declared = settings_of("people")
    add_setting(sync, declared["mode"], choices=SYNC_MODES)
    sync.add_argument(
        "--delete-scope",
        choices=("accounts_in_source", "list"),
        default="accounts_in_source",
        help="where mirror mode deletes (default accounts_in_source)",
    )
    add_setting(
        sync,
        declared["chunk_size"],
        type=chunk_size_argument(WRITE_KINDS, "people"),
        action="append",
        default=[],
        metavar="N|KIND=N",
        default_text=f"{declared['chunk_size'].default}; repeat to set kinds apart",
    )
    sync.add_argument("--default-region", default="US", help="region of phone numbers without + (default US)")
    add_plan_arguments(sync, job="people")

    add_service_arguments(parser)
    add_output_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the sync and print the summary; exit status 2 on bad arguments, 1 on a failed run."""
    # Imported here so `listsync --help` does not pay for pandas and httpx.
    from listsync.client import ListSyncClient
    from listsync.client.writers import PEOPLE_PER_REQUEST
    from listsync.extract.contact_rules import check_region
    from listsync.extract.mapping import check_people_column_map
    from listsync.sync.people import chunk_sizes, sync_people

    sizes = {kind: size for kind, size in args.chunk_size if kind is not None}
    overall = [size for kind, size in args.chunk_size if kind is None]
    try:
        check_extract_arguments(args)
        settings = sync_settings(args)
        check_service_arguments(args)
        key = api_key(args)
        check_option("--map", check_people_column_map, dict(args.column_map))
        check_option("--default-region", check_region, args.default_region)
        check_source_file(args)
        chunk_size = chunk_sizes(
            {kind: sizes.get(kind, overall[-1] if overall else PEOPLE_PER_REQUEST) for kind in WRITE_KINDS}
        )
    except ValueError as exc:
        report("sync-people", exc)
        return EXIT_USAGE
    frames = read_frames(args, arrow_text=True)  # prepared as columns
    with ListSyncClient(
        args.base_url, key, args.user_id, timeout=args.timeout, max_in_flight=args.max_in_flight
    ) as client:
        return run_and_report(
            "sync-people",
            recorded(
                args,
                "people",
                lambda: sync_people(
                    client,
                    args.table_id,
                    frames,
                    dict(args.column_map),
                    mode=args.mode,
                    delete_scope=args.delete_scope,
                    chunk_size=chunk_size,
                    default_region=args.default_region,
                    settings=settings,
                ),
            ),
            base_url=args.base_url,
            output=output_of(args),
        )
