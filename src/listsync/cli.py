"""The ``listsync`` command line: ``listsync <command> --help`` for each command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
