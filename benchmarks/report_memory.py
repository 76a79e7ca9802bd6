"""What the run's report costs a large run: memory, time and page size, against the plan's lines.

A plan of ``--lines`` lines (people adds, patches and deletes in the proportions of the people
benchmark: half adds, a quarter each patches and deletes) is written as a sync writes it, once
as it is and once through the report's :class:`~listsync.sync.report.PlanSample`; then the report
is rendered. Python's allocations are traced (``tracemalloc``): the sample's extra peak is what
the report holds of the plan, which must not grow with it. The same run with a hundredth of the
lines gives the ratio.

``--record`` appends the figures to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from results import publish

from listsync.files import write_json_lines
from listsync.sync.report import PlanSample, render_report
from listsync.sync.summary import PeopleSummary


def plan(lines: int) -> Iterator[dict[str, Any]]:
    """A people plan of ``lines`` lines, made one at a time as a planner yields them."""
    for number in range(lines):
        domain, identity = f"account{number // 20}.example", f"email:person{number}@example.com"
        if number % 4 < 2:
            changes = {"first_name": {"before": None, "after": f"Name{number}"}}
            yield {"action": "add", "account_domain": domain, "identity": identity, "changes": changes}
        elif number % 4 == 2:
            changes = {"title": {"before": "CTO", "after": f"CEO {number}"}}
            yield {"action": "patch", "account_domain": domain, "identity": identity, "changes": changes}
        else:
            yield {"action": "delete", "account_domain": domain, "identity": identity}


def measure(lines: int, folder: str) -> dict[str, float]:
    """Peak traced memory and seconds (the best of two untraced runs) of writing the plan without
    and with the sample, and the report's size."""
    figures: dict[str, float] = {}
    for name, sampled in (("plain", False), ("sampled", True)):
        for traced in (False, False, True):
            sample = PlanSample()
            entries = sample.through(plan(lines)) if sampled else plan(lines)
            if traced:
                tracemalloc.start()
            started = time.perf_counter()
            write_json_lines(entries, os.path.join(folder, f"{name}.jsonl"))
            seconds = time.perf_counter() - started
            if traced:
                figures[f"{name}_peak_kib"] = tracemalloc.get_traced_memory()[1] / 1024
                tracemalloc.stop()
            else:
                figures[f"{name}_seconds"] = min(seconds, figures.get(f"{name}_seconds", seconds))
    summary = PeopleSummary(table_id="tbl", mode="mirror", delete_scope="list", normalization_version="1")
    now = datetime.now(timezone.utc)
    figures["report_kib"] = len(render_report(summary, sample, started=now, finished=now).encode()) / 1024
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="plan lines of the large run")
    parser.add_argument("--record", action="store_true", help="append the figures to benchmarks/RESULTS.md")
    args = parser.parse_args()
    sizes = (args.lines // 100, args.lines)
    with tempfile.TemporaryDirectory() as folder:
        results = {lines: measure(lines, folder) for lines in sizes}
    small, large = (results[lines] for lines in sizes)
    lines = [
        f"\n## Run report (benchmarks/report_memory.py --lines {args.lines}), "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, shared with other "
        "engineers' test runs (load average "
        f"{os.getloadavg()[0]:.1f} at the end); a people plan written as a sync writes it, without and "
        "with the report's sample: the peak of Python's allocations traced by tracemalloc, the seconds "
        "the best of two untraced runs.\n",
        "| plan lines | peak KiB, plan file alone | peak KiB, with the sample | seconds alone | "
        "seconds with the sample | report KiB |",
        "|---|---|---|---|---|---|",
        *(
            f"| {n:,} | {r['plain_peak_kib']:,.0f} | {r['sampled_peak_kib']:,.0f} | {r['plain_seconds']:.2f} "
            f"| {r['sampled_seconds']:.2f} | {r['report_kib']:,.0f} |"
            for n, r in results.items()
        ),
        "",
        f"- {sizes[1] // sizes[0]}x the plan lines: the sample's extra peak "
        f"{large['sampled_peak_kib'] - large['plain_peak_kib']:,.0f} KiB against "
        f"{small['sampled_peak_kib'] - small['plain_peak_kib']:,.0f} KiB, the report "
        f"{large['report_kib'] / small['report_kib']:.2f}x the size; writing with the sample takes "
        f"{large['sampled_seconds'] / large['plain_seconds']:.2f}x the time of writing alone.",
    ]
    text = "\n".join(lines) + "\n"
    publish(text, args.record)


if __name__ == "__main__":
    main()
