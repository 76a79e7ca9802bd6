"""The ``listsync`` command line: ``listsync <command> --help`` for each command."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from listsync.commands.common import (
    API_KEY_ENV,
    EXIT_FAILED,
    log_warnings_to_stderr,
    masked_secrets,
    one_line,
    report,
)

# Each command lives in its own module under listsync.commands and exposes register(subparsers);
# heavy imports happen inside the command, so `listsync --help` stays fast.
COMMAND_MODULES = (
    "listsync.commands.emulator",
    "listsync.commands.people",
    "listsync.commands.ingest",
    "listsync.commands.rows",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="listsync",
        description="Sync CRM and warehouse extracts into Lists and ingest signal events.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    for command in subparsers.choices.values():
        command.add_argument(
            "--debug", action="store_true", help="on an unexpected error, print the traceback too"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status (0 done, 1 failed, 2 bad arguments).

    No traceback reaches the user: an error the command did not expect ends in one line on
    standard error (``--debug`` shows the traceback), and every line printed has the API key
    masked, even when the service echoed it back.
    """
    args = build_parser().parse_args(argv)
    log_warnings_to_stderr(args.command)
    with masked_secrets(getattr(args, "api_key", None), os.environ.get(API_KEY_ENV)):
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
