"""The memory the outcomes file takes: a people plan of 1,000,000 adds, a share of which failed,
written as the outcomes file (``listsync.sync.people.outcomes`` through
``listsync.sync.outcomes.write_outcomes``).

The apply already holds each failure (``PeopleApplyResult.failed``: key → reason); writing the
file streams the plan's writes a batch at a time and the lines one at a time. The benchmark
measures, with ``tracemalloc``, what the failures take in the apply's result and the peak the
writing adds on top of it, and the peak the same lines would take held in a list, as ratios to
the failures' own memory. ``--record`` appends the figures to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import gc
import platform
import tempfile
import time
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from results import publish

from listsync.sync.outcomes import write_outcomes
from listsync.sync.people.apply import PeopleApplyResult
from listsync.sync.people.outcomes import people_outcomes
from listsync.sync.people.plan import PeoplePlan, PlannedAdd, PlannedWrites
from listsync.sync.people.verify import PeopleVerification

MIB = 1024 * 1024


def plan_of(people: int) -> PeoplePlan:
    def make(start: int, stop: int) -> list[PlannedAdd]:
        return [
            PlannedAdd(f"d{i // 10}.example", f"email:p{i}@d{i // 10}.example", {"first_name": f"P{i}"})
            for i in range(start, stop)
        ]

    return PeoplePlan(adds=PlannedWrites(people, make))


def measure(people: int, failed: int) -> dict[str, float]:
    plan = plan_of(people)
    step = max(1, people // failed)
    gc.collect()
    tracemalloc.start()
    result = PeopleApplyResult()
    for i in range(0, step * failed, step):
        domain = f"d{i // 10}.example"
        result.failed[f"{domain} email:p{i}@{domain}"] = (
            f"Account not found: {domain} (a person is written under their account's row: write the "
            "account rows first, then the people)"
        )
    held = tracemalloc.get_traced_memory()[0]
    verification = PeopleVerification(outcome=np.zeros(plan.size, dtype=np.uint8))
    with tempfile.TemporaryDirectory() as folder:
        tracemalloc.reset_peak()
        started = time.perf_counter()
        counts = write_outcomes(
            people_outcomes(plan, result, verification, numbered=True, verify_timeout=60.0),
            Path(folder) / "outcomes.jsonl",
            prefix="bench-",
        )
        seconds = time.perf_counter() - started
        streamed = tracemalloc.get_traced_memory()[1] - held
        size = (Path(folder) / "outcomes.jsonl").stat().st_size
    assert counts.permanent == failed, counts
    tracemalloc.reset_peak()
    lines = list(people_outcomes(plan, result, verification, numbered=True, verify_timeout=60.0))
    listed = tracemalloc.get_traced_memory()[1] - held
    tracemalloc.stop()
    del lines
    return {
        "held_mib": held / MIB,
        "streamed_mib": streamed / MIB,
        "listed_mib": listed / MIB,
        "file_mib": size / MIB,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=1_000_000)
    parser.add_argument("--failed", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    parser.add_argument("--record", action="store_true", help="append the figures to benchmarks/RESULTS.md")
    args = parser.parse_args()
    lines = [
        f"\n## Outcomes file (benchmarks/outcomes_file.py --people {args.people}), "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n",
        f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}), shared with "
        "other engineers' test runs. A people plan of that many adds; memory traced by tracemalloc "
        "(Python allocations), beside what the apply's failures already take.\n",
        "| failed | failures held by the apply, MiB | writing the file adds, MiB | lines held in a list, MiB "
        "| file, MiB | seconds |",
        "|---|---|---|---|---|---|",
    ]
    ratios = []
    for failed in args.failed:
        r = measure(args.people, failed)
        print(failed, r, flush=True)
        ratios.append((failed, r["streamed_mib"] / r["held_mib"], r["listed_mib"] / r["held_mib"]))
        lines.append(
            f"| {failed:,} | {r['held_mib']:.1f} | {r['streamed_mib']:.1f} | {r['listed_mib']:.1f} "
            f"| {r['file_mib']:.1f} | {r['seconds']:.1f} |"
        )
    lines.append("")
    lines.extend(
        f"- {failed:,} failed: writing adds {streamed:.2f}x what the failures take; held in a list, "
        f"the lines would take {listed:.2f}x."
        for failed, streamed, listed in ratios
    )
    text = "\n".join(lines) + "\n"
    publish(text, args.record)


if __name__ == "__main__":
    main()
