"""An emulator loaded by a benchmark script and served from a child process of it.

The child runs the same script with ``--serve-emulator``: it builds its List state in memory,
prints the base URL and serves until its standard input closes. Serving from another process
keeps the emulator's work off the measured process's GIL.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

SERVE_FLAG = "--serve-emulator"


def serve_until_stdin_closes(app: Any) -> None:
    """In the child: serve ``app``, print its base URL, return when standard input closes."""
    from listsync.emulator import serve_in_thread

    with serve_in_thread(app) as url:
        print(url, flush=True)
        sys.stdin.read()


class ChildEmulator:
    """``with ChildEmulator(__file__) as url:`` a fresh emulator, served by ``script`` in a child;
    ``args`` are passed on to the child's command line."""

    def __init__(self, script: str, *args: str) -> None:
        self.script = script
        self.args = args

    def __enter__(self) -> str:
        self.child = subprocess.Popen(
            [sys.executable, self.script, SERVE_FLAG, *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.child.stdout is not None
        return self.child.stdout.readline().strip()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.child.stdin is not None
        self.child.stdin.close()
        self.child.wait(timeout=60)


def requests_by_kind(url: str, endpoints: Mapping[str, str]) -> dict[str, int]:
    """Requests the emulator at ``url`` received, per kind (kind -> endpoint name of its stats)."""
    stats = httpx.get(f"{url}/_emulator/stats").json()["endpoints"]
    return {kind: stats.get(endpoint, {}).get("requests", 0) for kind, endpoint in endpoints.items()}
