"""The ``listsync`` command line: ``listsync <command> --help`` for each command."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version

from listsync.commands.common import (
    API_KEY_ENV,
    EXIT_FAILED,
    masked_secrets,
    report,
)
from listsync.commands.display import watching
from listsync.errors import one_line

# Each command lives in its own module under listsync.commands and exposes register(subparsers);
# heavy imports happen inside the command, so `listsync --help` stays fast.
COMMAND_MODULES = (
    "listsync.commands.emulator",
    "listsync.commands.people",
    "listsync.commands.ingest",
    "listsync.commands.rows",
    "listsync.commands.history",
    "listsync.commands.state",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="listsync",
        description="Sync CRM and warehouse extracts into Lists and ingest signal events.",
    )
    parser.add_argument(
        "--version", action="version", version=f"listsync {version('airflow-provider-listsync')}"
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    for command in subparsers.choices.values():
        command.add_argument(
            "--debug",
            action="store_true",
            help="on an unexpected error, or one beside the run (its history row), print the traceback too",
        )
        command.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=0,
            help="show what the run does on standard error, not only its progress (-vv: in detail)",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status (0 done, 1 failed, 2 bad arguments).

    No traceback reaches the user: an error the command did not expect ends in one line on
    standard error (``--debug`` shows the traceback), and every line printed has the API key
    masked, even when the service echoed it back.
    """
    args = build_parser().parse_args(argv)
    with (
        masked_secrets(getattr(args, "api_key", None), os.environ.get(API_KEY_ENV)),
        watching(args.command, args.verbose, debug=args.debug),
    ):
        try:
            result: int = args.func(args)
        except Exception as exc:
            if args.debug:
                raise
            report(args.command, f"{one_line(exc)} (--debug shows where it came from)")
            return EXIT_FAILED
    return result


if __name__ == "__main__":
    sys.exit(main())
