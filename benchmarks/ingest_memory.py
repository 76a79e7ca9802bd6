"""Peak memory of a signal ingestion: a dry run of millions of events and a real run, against a baseline.

Writes a CSV extract of ``--events`` events (three signals of the demo tenant, mixed in the
proportion of their rate limits so that they finish together, each row with its own
``event_id`` and timestamp) and measures the peak RSS of the process that ingests it, each run
in a fresh process started for it:

- a dry run with the reference column, and one without it (references derived from each event);
- a real run of the first ``--real-events`` events against the emulator, served by a child
  process of this script with a short rate-limit window (``--window-seconds``) and the spec's
  limits per window.

Each run is made twice: with this tree's ``src`` and, when ``--baseline-src DIR`` is given, with
another tree's (``PYTHONPATH=DIR``, e.g. a checkout of an earlier commit), and the ratio of the
two is printed. The process's peak includes the interpreter, pandas and the client (``idle``: the
peak of a process that only imported them).

Run: ``.venv/bin/python benchmarks/ingest_memory.py --events 5000000 [--real-events 300000]
[--window-seconds 0.1] [--src DIR] [--baseline-src DIR] [--skip-baseline-dry-run] [--record]``;
``--record`` appends the figures to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from child_emulator import SERVE_FLAG, ChildEmulator, serve_until_stdin_closes
from results import publish
from rss import peak_rss_mib

SRC = Path(__file__).resolve().parent.parent / "src"
API_KEY = "sk_demo_listsync"
SIGNALS = {"page_visit": "Event", "seats_used": "Metric", "deal_stage": "State"}
LIMITS = {"Event": 100, "Metric": 1000, "State": 30}
MEASURE_FLAG = "--measure"
ROWS_PER_WRITE = 250_000


def write_extract(path: Path, events: int) -> None:
    """``events`` rows: signals in the proportion of their limits, one reference and second each."""
    import pandas as pd

    per_cycle = [slug for slug, kind in SIGNALS.items() for _ in range(LIMITS[kind])]
    start = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
    with path.open("w", encoding="utf-8", newline="") as handle:
        for first in range(0, events, ROWS_PER_WRITE):
            numbers = range(first, min(events, first + ROWS_PER_WRITE))
            signals = [per_cycle[i % len(per_cycle)] for i in numbers]
            payloads = [
                json.dumps({"path": f"/docs/{i % 50}"})
                if signal == "page_visit"
                else json.dumps({"seats": i % 400})
                if signal == "seats_used"
                else json.dumps({"stage": ("open", "won", "lost")[i % 3]})
                for i, signal in zip(numbers, signals, strict=True)
            ]
            frame = pd.DataFrame(
                {
                    "event_id": [f"ev-{i:08d}" for i in numbers],
                    "signal": signals,
                    "account_id": [f"acct-{i % 9973:04d}" for i in numbers],
                    "payload": payloads,
                    "occurred_at": pd.to_datetime([start + i for i in numbers], unit="s", utc=True).strftime(
                        "%Y-%m-%dT%H:%M:%SZ"
                    ),
                }
            )
            frame.to_csv(handle, index=False, header=first == 0)


def measure(args: argparse.Namespace) -> None:
    """In a child: ingest the extract once and print the figures as JSON."""
    import listsync
    from listsync.client import ListSyncClient
    from listsync.extract.rejects import Rejects
    from listsync.extract.sources import read_extract
    from listsync.signals.columns import EventMapping
    from listsync.signals.ingest import ingest_events

    idle = peak_rss_mib()
    mapping = EventMapping(
        signal_column="signal",
        identity_type="account",
        identity_id_column="account_id",
        data_column="payload",
        timestamp_column="occurred_at",
        reference_column="event_id" if args.reference else None,
    )
    dry_run = args.url is None
    client = None if dry_run else ListSyncClient(args.url, API_KEY, timeout=60)
    started = time.perf_counter()
    summary = ingest_events(
        client,
        read_extract(args.csv),
        mapping,
        rejects=Rejects(),
        signal_types=SIGNALS,
        dry_run=dry_run,
    )
    seconds = time.perf_counter() - started
    figures = {
        "seconds": round(seconds, 1),
        "peak_mib": round(peak_rss_mib()),
        "idle_mib": round(idle),
        "rows_read": summary["rows_read"],
        "events": summary["events"],
        "acknowledged": summary.get("acknowledged"),
        "requests": summary.get("requests"),
        "listsync": str(Path(listsync.__file__).parent.parent),
    }
    print(json.dumps(figures), flush=True)


def run_child(src: Path, csv: Path, *, reference: bool, url: str | None = None) -> dict[str, Any]:
    """Ingest ``csv`` in a fresh process importing listsync from ``src``; its figures."""
    command = [sys.executable, __file__, MEASURE_FLAG, "--csv", str(csv)]
    command += ["--reference"] if reference else []
    command += ["--url", url] if url else []
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the run failed ({src}):\n{done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(figures["listsync"]).resolve() != src.resolve():
        raise RuntimeError(f"the run imported listsync from {figures['listsync']}, not {src}")
    return figures


def serve_emulator(window: float) -> None:
    """In the child: the demo emulator with a ``window``-second rate-limit window."""
    from listsync.emulator import create_app, demo_config

    serve_until_stdin_closes(create_app(demo_config().model_copy(update={"window_seconds": window})))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=5_000_000, help="events of the dry runs")
    parser.add_argument("--real-events", type=int, default=300_000, help="events of the real run")
    parser.add_argument("--window-seconds", type=float, default=0.1, help="the emulator's rate-limit window")
    parser.add_argument("--src", type=Path, default=SRC, help="the src measured (default: this tree's)")
    parser.add_argument("--baseline-src", type=Path, help="another tree's src, measured the same way")
    parser.add_argument(
        "--skip-baseline-dry-run", action="store_true", help="measure the baseline on the real run only"
    )
    parser.add_argument("--record", action="store_true", help="append the figures to benchmarks/RESULTS.md")
    args = parser.parse_args()

    trees = {"this tree": args.src} | ({"baseline": args.baseline_src} if args.baseline_src else {})
    results: dict[tuple[str, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        full, small = Path(workdir) / "events.csv", Path(workdir) / "events-real.csv"
        started = time.perf_counter()
        write_extract(full, args.events)
        write_extract(small, args.real_events)
        size = full.stat().st_size / 2**20
        print(f"extracts written in {time.perf_counter() - started:.0f} s ({size:,.0f} MiB)")
        runs = [
            (f"dry run, {args.events:,} events, reference column", full, True),
            (f"dry run, {args.events:,} events, derived references", full, False),
        ]
        for name, csv, reference in runs:
            for tree, src in trees.items():
                if tree == "baseline" and args.skip_baseline_dry_run:
                    continue
                results[name, tree] = run_child(src, csv, reference=reference)
                print(name, tree, json.dumps(results[name, tree]), flush=True)
        name = f"real run, {args.real_events:,} events, {args.window_seconds:g} s window"
        for tree, src in trees.items():
            with ChildEmulator(__file__, "--window-seconds", str(args.window_seconds)) as url:
                results[name, tree] = run_child(src, small, reference=True, url=url)
            assert results[name, tree]["acknowledged"] == args.real_events, results[name, tree]
            print(name, tree, json.dumps(results[name, tree]), flush=True)

    lines = [
        f"\n## Signal ingestion memory (benchmarks/ingest_memory.py --events {args.events} "
        f"--real-events {args.real_events} --window-seconds {args.window_seconds:g}), "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n",
        f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}); each run in a "
        "fresh process, the emulator in a child process of the benchmark; peak RSS of the ingesting "
        "process (an idle one, having imported pandas and listsync, peaks at about "
        f"{min(r['idle_mib'] for r in results.values())} MiB). "
        "Three signals mixed in the proportion of their limits (Event 100, Metric 1,000, State 30).\n",
        "| run | code | seconds | peak RSS MiB | events | acknowledged | requests |",
        "|---|---|---|---|---|---|---|",
    ]
    for (name, tree), r in results.items():
        lines.append(
            f"| {name} | {tree} | {r['seconds']:.1f} | {r['peak_mib']:,} | {r['events']:,} "
            f"| {'-' if r['acknowledged'] is None else format(r['acknowledged'], ',')} "
            f"| {'-' if r['requests'] is None else format(r['requests'], ',')} |"
        )
    for name in dict.fromkeys(name for name, _ in results):
        if (name, "baseline") in results:
            ours, base = results[name, "this tree"], results[name, "baseline"]
            lines.append(
                f"\n{name}: peak RSS {ours['peak_mib'] / base['peak_mib']:.2f}× the baseline's, "
                f"time {ours['seconds'] / base['seconds']:.2f}×."
            )
    text = "\n".join(lines) + "\n"
    publish(text, args.record)


def child_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument(MEASURE_FLAG, action="store_true")
    parser.add_argument("--csv", type=Path, required=True)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--url")
    return parser.parse_args()


if __name__ == "__main__":
    if SERVE_FLAG in sys.argv:
        serve_emulator(float(sys.argv[sys.argv.index("--window-seconds") + 1]))
    elif MEASURE_FLAG in sys.argv:
        measure(child_arguments())
    else:
        main()
