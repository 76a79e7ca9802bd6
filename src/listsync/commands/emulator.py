"""``listsync emulator``: serve the local emulator of the service until interrupted."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

FAULT_EXAMPLE = (
    """'{"endpoint": "POST /v1/events/batch", "kind": "error", "status": 503, "probability": 0.1}'"""
)


class _ProfileNames:
    """The names of the emulator's profiles, as argparse ``choices``.

    Read only when argparse checks a ``--profile`` value or prints the help: importing
    ``listsync.emulator`` loads FastAPI, which ``listsync --help`` should not pay for.
    """

    @staticmethod
    def _names() -> list[str]:
        from listsync.emulator import PROFILES

        return list(PROFILES)

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``emulator`` command to the ``listsync`` parser."""
    parser = subparsers.add_parser(
        "emulator",
        help="serve a local emulator of the service",
        description=(
            "Serve the Signal Ingestion and List Write API locally. Without --config it serves the "
            "built-in demo tenant (API key sk_demo_listsync, user usr_demo, List tbl_accounts). "
            "Inspection endpoints: /_emulator/state, /_emulator/stats, /_emulator/reset, /_emulator/faults."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to bind (default 8080)")
    parser.add_argument("--config", metavar="FILE", help="YAML or JSON emulator config (default: the demo)")
    parser.add_argument(
        "--window-seconds",
        type=float,
        help="length of a rate-limit window in seconds (default: the config's, else 60)",
    )
    parser.add_argument("--seed", type=int, help="seed for fault injection and event ids")
    parser.add_argument(
        "--profile",
        metavar="NAME",  # a metavar keeps argparse from listing the choices when it builds the parser
        choices=_ProfileNames(),
        help=(
            "how the emulator reads what the spec leaves open: one of %(choices)s "
            "(default: the config's, else reference)"
        ),
    )
    parser.add_argument("--state-file", metavar="FILE", help="keep Lists and events in this JSON file")
    parser.add_argument(
        "--fault",
        metavar="JSON",
        action="append",
        default=[],
        help=("add a fault rule to the config's, as JSON, e.g. " + FAULT_EXAMPLE + "; repeatable"),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so `listsync --help` does not pay for FastAPI and uvicorn.
    import json

    import yaml

    from listsync.emulator import EmulatorConfig, demo_config, load_config
    from listsync.emulator.server import serve_forever

    overrides = {
        "window_seconds": args.window_seconds,
        "seed": args.seed,
        "state_file": args.state_file,
        "profile": args.profile,
    }
    try:
        config = load_config(args.config) if args.config else demo_config()
        # Validated again, so a bad option (say --window-seconds 0) is refused like a bad config file.
        data = {**config.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
        data["faults"]["rules"] += [json.loads(rule) for rule in args.fault]
        config = EmulatorConfig.model_validate(data)
    except (OSError, ValueError, yaml.YAMLError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"listsync emulator: invalid configuration: {exc}", file=sys.stderr)
        return 2
    serve_forever(config, args.host, args.port)
    return 0
