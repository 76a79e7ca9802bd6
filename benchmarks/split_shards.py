"""A split and its shards, each in a process of its own, against a local emulator: every task's wall
time and peak RSS, and what a shard holds a person; this code's against a revision's in one run.

Run: ``.venv/bin/python benchmarks/split_shards.py [--people N] [--shards N] [--run 0,3]
[--baseline REV] [--append-results]`` (default: 1,600,000 people, 8 shards, shards 0 and 3 run,
no baseline). Not part of ``make test``.

The List and the extract are those of ``benchmarks/people_sync.py``: N people, 5 on each of N/5
accounts, put straight into the emulator's state (served by a child process); the extract (a CSV
file) removes 5%, retitles 5% and adds 10% new people. For each code (this checkout's, then with
``--baseline`` a git worktree of that revision), on a List of its own: ``split_people`` in one
process, then ``sync_people`` of each shard of ``--run`` with the split's ``parts_path`` (mirror,
accounts in source) in one process each, one after the other, as ``benchmarks/sharded_cluster.py``
runs them on the cluster without Airflow around them.

A task's peak RSS is its process's high-water mark (``VmHWM``); its RSS at start is read once
the libraries are imported, before the task begins. What a shard holds a person is its peak over
its start divided by its people (its part of the extract and of the List): the figure that
carries a shard to a larger List.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from child_emulator import SERVE_FLAG, ChildEmulator
from people_sync import API_KEY, COLUMN_MAP, TABLE, Scale, write_extract
from results import publish
from rss import peak_rss_mib

REPO = Path(__file__).resolve().parents[1]
TASK_FLAG = "--task"


def rss_mib() -> float:
    """This process's RSS now."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def task(url: str, parts: Path, extract: Path, shards: int, which: str) -> None:
    """Child process: the split (``which`` is ``split``) or shard ``which`` ("i/n"); print its figures."""
    from listsync.client import ListSyncClient
    from listsync.extract.sources import read_extract
    from listsync.sync import SyncSettings
    from listsync.sync.people import sync_people
    from listsync.sync.people.split import split_people

    start = rss_mib()
    began = time.perf_counter()
    with ListSyncClient(url, API_KEY, timeout=120.0) as client:
        if which == "split":
            frames = read_extract(extract, arrow_text=True)  # as the split operator reads it
            summary = split_people(client, TABLE, frames, COLUMN_MAP, shards=shards, parts_path=parts)
        else:
            settings = SyncSettings(
                shard=which, max_delete_fraction=0.5, plan_path=parts / "plan.jsonl", fail_on_error=False
            )
            summary = sync_people(
                client, TABLE, (), COLUMN_MAP, mode="mirror", parts_path=parts, settings=settings
            )
    people = summary["passed"] + summary["list_people"]
    seconds = time.perf_counter() - began
    print(json.dumps({"seconds": seconds, "start": start, "peak": peak_rss_mib(), "people": people}))


def run_code(src: Path, people: int, shards: int, run: list[int], extract: Path) -> dict[str, dict[str, Any]]:
    """The split and the shards of ``run`` with the code in ``src``, on a List of their own."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    figures = {}
    with ChildEmulator(__file__, "--people", str(people)) as url, tempfile.TemporaryDirectory() as folder:
        for which in ["split", *(f"{index}/{shards}" for index in run)]:
            command = [sys.executable, __file__, TASK_FLAG, url, folder, str(extract), str(shards), which]
            output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
            figures[which] = json.loads(output.strip().splitlines()[-1])
    return figures


def with_revision(revision: str, work: Any) -> Any:
    """``work(src)`` with ``src`` the code of ``revision``, checked out in a git worktree."""
    tree = Path(tempfile.mkdtemp()) / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), revision], check=True)
    try:
        return work(tree / "src")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True)
        shutil.rmtree(tree.parent, ignore_errors=True)


def describe(code: str, figures: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for which, task_figures in figures.items():
        over = task_figures["peak"] - task_figures["start"]
        name = "the split" if which == "split" else f"shard {which}"
        lines.append(
            f"{code}, {name}: {task_figures['seconds']:.1f} s, "
            f"peak RSS {task_figures['peak']:,.0f} MiB (at start {task_figures['start']:,.0f} MiB); "
            f"{task_figures['people']:,} people (extract and List), "
            f"{over * 1024 * 1024 / task_figures['people']:,.0f} bytes a person over the start"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--people", type=int, default=1_600_000, help="people in the List (default 1,600,000)"
    )
    parser.add_argument("--shards", type=int, default=8, help="shards (default 8)")
    parser.add_argument("--run", default="0,3", help="the shards run, by number (default 0,3)")
    parser.add_argument("--baseline", help="a git revision run the same way, for the ratios")
    parser.add_argument("--append-results", action="store_true", help="append a section to RESULTS.md")
    parser.add_argument(SERVE_FLAG, action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(TASK_FLAG, nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_emulator:
        from people_sync import serve_emulator

        serve_emulator(Scale(args.people))
        return
    if args.task:
        url, parts, extract, shards, which = args.task
        task(url, Path(parts), Path(extract), int(shards), which)
        return
    run = [int(number) for number in args.run.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        extract = Path(folder) / "extract.csv"
        write_extract(Scale(args.people), extract)
        ours = run_code(REPO / "src", args.people, args.shards, run, extract)
        lines = describe("this code", ours)
        if args.baseline:
            theirs = with_revision(
                args.baseline, lambda src: run_code(src, args.people, args.shards, run, extract)
            )
            lines += describe(args.baseline, theirs)
            for which in ours:
                a, b = ours[which], theirs[which]
                lines.append(
                    f"{which}: wall {a['seconds'] / b['seconds']:.2f}x the baseline's, peak over the start "
                    f"{(a['peak'] - a['start']) / (b['peak'] - b['start']):.2f}x"
                )
    title = (
        f"\n## A split and its shards, {args.people:,} people in {args.shards} shards "
        f"(benchmarks/split_shards.py), {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
        f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}); emulator in a child "
        f"process; load average at the end {os.getloadavg()[0]:.1f}. Command: `.venv/bin/python "
        f"benchmarks/split_shards.py {' '.join(sys.argv[1:])}`.\n\n"
    )
    publish(title + "".join(f"- {line}\n" for line in lines), args.append_results)


if __name__ == "__main__":
    main()
