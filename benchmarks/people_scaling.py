"""The people job's cost per person at a series of sizes, step by step, and a columnar baseline.

Run: ``.venv/bin/python benchmarks/people_scaling.py [--sizes 100000,300000,1000000] [--latency SECONDS]
[--in-flight 4] [--rounds 1] [--baseline] [--append-results]``

At each size of ``--sizes`` (people on night 1), the three nights of ``people_job.py`` (fill,
change, quiet: the same CRM-like data, emulator and whole ``sync_people``, a fresh emulator per
size, each night in a process of its own) at one latency and one in-flight value. For each night
and each step the job's night process times (read + prepare the extract, read the List, plan,
apply, read back, the state read, the plan file, the state kept, the rest), at each size: the
wall time and the CPU time (of all the process's threads) per person (microseconds, over the
night-1 people N, so the three nights of a size share the divisor) and the peak RSS the night
reached by the end of the step, over what the process held before the job (bytes per person). A
step is flagged when one of these per person at the largest size is more than 25% above that at
the smallest (steps under a second at the largest size are shown, not flagged: their per-person
figures are noise). On a shared machine the CPU time moves less with the load than the wall time.

With ``--rounds N``, every size is run N times, the sizes taking turns (100,000, 1,000,000,
3,000,000, then again), so that a machine whose speed drifts during the run weighs on every size
alike: each step's figures per person are the medians of its rounds' (a step of half a second
at 100,000 people moves by a third from one round to the next, so that the figures of one run,
that whose night took the median time, flagged a step in one scaling run of unchanged code and
not in the next), and each night's wall time at every size is reported over that at the size
below it, as medians.

With ``--baseline`` (needs the ``bench`` extra: ``make bench``), the change night at 1,000,000
people (the size issue 36 names; the largest size when 1,000,000 is not among them) is also
planned by a columnar pipeline in DuckDB (``people_baseline.py``, in a process of its own, with
one thread and with as many as it takes), on the same extract and on the List as the service sent
it after night 1 (every person read through the client once, outside the timing, and kept as JSON
lines): the same normalisation, the same rejects, the same join by account domain and identity
and the same counts of adds, patches, deletes and unchanged, asserted equal to the change night's
plan. Reported: ours (read + prepare, read List, plan of the change night) over the
baseline's wall time, with and without the List read (ours over HTTP from the emulator, the
baseline's from a local file); and ours on the same two files, in a process of its own
(``people_baseline.py --ours``: the same steps by listsync's functions, the List's people made
columns beside the extract's preparation as a sync does, without a service sharing the machine),
against the one-thread baseline, the like-for-like comparison. Aim (issue 36): ours <= 2x. The
two are run in turn :data:`TURNS` times and compared by their median runs: on a shared machine
one run of either can take half as long again as the next (ours on the files took 9.1 s in one
scaling run and 6.2 s about twenty minutes later, on the same code and data).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from child_emulator import covered
from people_job import (
    HEADER,
    RESULTS,
    RULE,
    Crm,
    Night,
    describe,
    machine,
    minimum_writes,
    row,
    run_matrix,
    utc_now,
)
from people_sync import API_KEY, TABLE

#: The steps of a night, in the order the job runs them (the names ``people_job.py`` times).
STEPS = (
    "state read",
    "read + prepare",
    "read List",
    "plan",
    "plan file",
    "apply",
    "read back",
    "state keep",
    "other",
)
NIGHTS = {1: "fill", 2: "change", 3: "quiet"}
#: A step's cost per person may grow this much from the smallest size to the largest.
GROWTH = 0.25
#: Steps shorter than this at the largest size are not flagged.
NOISE_SECONDS = 1.0
#: The size whose change night the baseline plans, when it is among the sizes run.
BASELINE_SIZE = 1_000_000
#: The change night's steps the baseline does the work of.
PLANNING = ("read + prepare", "read List", "plan")
#: How many times ours on the files and the one-thread baseline are run, in turn.
TURNS = 3


def dump_list(url: str, path: Path) -> int:
    """Every person of the List at ``url``, as the service sent them, into ``path`` (JSON lines)."""
    from listsync.client import ListSyncClient

    count = 0
    with ListSyncClient(url, API_KEY, timeout=120.0) as client, path.open("w", encoding="utf-8") as out:
        for record in client.iter_targetable_people_records(TABLE, page_size=1000):
            out.write(json.dumps(record) + "\n")
            count += 1
    return count


def per_person(night: Night, size: int) -> dict[str, tuple[float, float, float]]:
    """Each step of ``night`` (and ``night`` for the whole): wall and CPU microseconds per person
    and the bytes per person of the peak RSS the night reached by the step's end, above the RSS
    before the job."""
    figures, start = night.figures, night.figures["start_rss"]
    costs = {}
    for step in STEPS:
        if step in figures["steps"]:
            seconds, used, peak = figures["steps"][step], figures["cpu"][step], figures["peaks"][step]
            costs[step] = (seconds / size * 1e6, used / size * 1e6, (peak - start) * 2**20 / size)
    costs["night"] = (
        night.seconds / size * 1e6,
        figures["cpu_seconds"] / size * 1e6,
        (figures["rss"] - start) * 2**20 / size,
    )
    return costs


def median_costs(rounds: list[list[Night]], number: int, size: int) -> dict[str, tuple[float, ...]]:
    """The :func:`per_person` costs of night ``number`` of ``rounds`` (of one size), each figure of
    each step the median of the rounds': a step of half a second at 100,000 people takes a third
    longer in one round than in the next, whichever night's wall time is the median."""
    each = [per_person(nights[number - 1], size) for nights in rounds]
    return {
        step: tuple(statistics.median(costs[step][figure] for costs in each) for figure in range(3))
        for step in each[0]
        if all(step in costs for costs in each)
    }


def growth_table(rounds: dict[int, list[list[Night]]]) -> tuple[list[str], list[str]]:
    """The per-person table of every night and step at every size (medians of the rounds), and the
    flags."""
    sizes = sorted(rounds)
    smallest, largest = sizes[0], sizes[-1]
    header = (
        "| night | step | "
        + " | ".join(f"{size:,}: wall, CPU µs / person; peak B / person" for size in sizes)
        + f" | {largest:,} ÷ {smallest:,} per person: wall, CPU, peak | |"
    )
    lines = [header, "|" + "---|" * (len(sizes) + 4)]
    flags = []
    for number, name in NIGHTS.items():
        costs = {size: median_costs(rounds[size], number, size) for size in sizes}
        for step in (*STEPS, "night"):
            if not all(step in costs[size] for size in sizes):
                continue
            cells = [
                f"{costs[size][step][0]:,.1f}, {costs[size][step][1]:,.1f}; {costs[size][step][2]:,.0f}"
                for size in sizes
            ]
            ratios = [
                last / first if first > 0 else 1.0
                for first, last in zip(costs[smallest][step], costs[largest][step], strict=True)
            ]
            seconds = costs[largest][step][0] * largest / 1e6
            grown = [
                what
                for what, ratio in zip(("wall", "CPU", "peak"), ratios, strict=True)
                if ratio > 1 + GROWTH
            ]
            mark = ""
            if grown and seconds >= NOISE_SECONDS:
                mark = "GROWS: " + ", ".join(grown)
                flags.append(
                    f"{name} night, {step}: per person at {largest:,} over {smallest:,}: "
                    f"wall {ratios[0]:.2f}x, CPU {ratios[1]:.2f}x, peak {ratios[2]:.2f}x "
                    f"({seconds:.1f} s at {largest:,})"
                )
            lines.append(
                f"| {number} {name} | {step} | "
                + " | ".join(cells)
                + f" | {ratios[0]:.2f}, {ratios[1]:.2f}, {ratios[2]:.2f} | {mark} |"
            )
    return lines, flags


Run = TypeVar("Run")


def median_run(runs: Sequence[Run], seconds: Callable[[Run], float]) -> Run:
    """The run with the median wall time (``seconds``), the lower of the two middle ones for an
    even count."""
    return sorted(runs, key=seconds)[(len(runs) - 1) // 2]


def median_nights(rounds: list[list[Night]]) -> list[Night]:
    """Each night of one size's ``rounds`` (the nights of each round): its median run."""
    return [median_run(runs, lambda night: night.seconds) for runs in zip(*rounds, strict=True)]


def size_ratios(rounds: dict[int, list[list[Night]]]) -> list[str]:
    """Each night's median wall time at every size over that at the size below it, with the
    wall time of every round."""
    sizes = sorted(rounds)
    medians = {size: median_nights(rounds[size]) for size in sizes}
    lines = []
    for number, name in NIGHTS.items():
        for smaller, larger in itertools.pairwise(sizes):
            low, high = medians[smaller][number - 1].seconds, medians[larger][number - 1].seconds
            walls = {
                size: ", ".join(f"{nights[number - 1].seconds:.1f}" for nights in rounds[size])
                for size in (smaller, larger)
            }
            lines.append(
                f"{name} night, {larger:,} over {smaller:,}: {high:.1f} / {low:.1f} s = {high / low:.2f}x "
                f"(medians of {len(rounds[larger])} rounds; walls {walls[smaller]} s and {walls[larger]} s)"
            )
    return lines


def run_baseline(extract: Path, listed: Path, *options: str) -> dict[str, Any]:
    """``people_baseline.py`` on ``extract`` and ``listed`` in a process of its own, with
    ``options``; its figures."""
    command = [sys.executable, str(Path(__file__).with_name("people_baseline.py")), str(extract), str(listed)]
    command += options
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the baseline failed: exit {done.returncode}")
    figures: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return figures


def run_seconds(run: dict[str, Any]) -> float:
    """The wall time of a run of ``people_baseline.py``."""
    seconds: float = run["seconds"]
    return seconds


def baseline_lines(
    change: Night,
    baselines: list[dict[str, Any]],
    turns: list[tuple[dict[str, Any], dict[str, Any]]],
    listed: int,
) -> list[str]:
    """Ours against each baseline on the change night (the first: the median one-thread run of
    ``turns``), and ours on the baseline's files against it (``turns``: the one-thread baseline
    and ours on its files, run in turn; ours by its median run); raises if their counts differ
    from ours."""
    summary = change.summary
    ours_counts = {
        "adds": summary["planned"]["add"],
        "patches": summary["planned"]["patch"],
        "deletes": summary["planned"]["delete"],
        "unchanged": summary["unchanged"],
        "rejected": summary["rejected"],
    }
    steps = change.figures["steps"]
    # The List is read beside the extract's preparation: the planning's wall time is what its
    # steps cover together, its CPU time the process's from the first one's start to the last
    # one's end (all threads).
    spans = [span for span in change.figures["spans"] if span[0] in PLANNING]
    ours = covered((start, end) for _step, start, end, _cpu, _cpu_end in spans)
    ours_cpu = max(span[4] for span in spans) - min(span[3] for span in spans)
    without = sum(steps[step] for step in PLANNING if step != "read List")
    counts = ", ".join(f"{name} {value:,}" for name, value in ours_counts.items())
    lines = [
        f"the change night's counts, ours and the baseline's: {counts}; the List as read after night 1: "
        f"{listed:,} people; ours (read + prepare, read List, plan): {ours:.1f} s "
        f"({', '.join(f'{step} {steps[step]:.1f}' for step in PLANNING)})"
    ]
    for baseline in baselines:
        if ours_counts != baseline["counts"]:
            raise SystemExit(f"the baseline's counts {baseline['counts']} are not ours {ours_counts}")
        base, base_without = baseline["seconds"], baseline["seconds"] - baseline["steps"]["read List"]
        lines.append(
            f"baseline DuckDB {baseline['version']}, {baseline['threads']} thread(s): {base:.1f} s "
            f"({', '.join(f'{step} {value:.1f}' for step, value in baseline['steps'].items())}), peak RSS "
            f"{baseline['rss']:,.0f} MiB; ours / baseline {ours / base:.2f}x (aim <= 2x: "
            f"{'met' if ours <= 2 * base else 'NOT met'}); without the List read (ours over HTTP, the "
            f"baseline's from a file) {without:.1f} s / {base_without:.1f} s = "
            f"{without / base_without:.2f}x; CPU seconds (all threads) {ours_cpu:.1f} / "
            f"{baseline['cpu']:.1f} = {ours_cpu / baseline['cpu']:.2f}x"
        )
    for _, from_files in turns:
        if ours_counts != from_files["counts"]:
            raise SystemExit(f"ours on the files counted {from_files['counts']}, not {ours_counts}")
    base, from_files = baselines[0], median_run([run for _, run in turns], run_seconds)
    walls = [", ".join(f"{run['seconds']:.1f}" for run in runs) for runs in zip(*turns, strict=True)]
    lines.append(
        f"ours on the same files, one process, no service beside it, and the {base['threads']}-thread "
        f"baseline, run in turn {len(turns)} times: ours {walls[1]} s, the baseline {walls[0]} s; the "
        f"median runs: ours {from_files['seconds']:.1f} s "
        f"({', '.join(f'{step} {value:.1f}' for step, value in from_files['steps'].items())}), peak RSS "
        f"{from_files['rss']:,.0f} MiB; over the baseline's {base['seconds']:.1f} s "
        f"{from_files['seconds'] / base['seconds']:.2f}x (aim <= 2x: "
        f"{'met' if from_files['seconds'] <= 2 * base['seconds'] else 'NOT met'}); CPU seconds "
        f"{from_files['cpu']:.1f} / {base['cpu']:.1f} = {from_files['cpu'] / base['cpu']:.2f}x"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="100000,300000,1000000", help="people on night 1, comma-separated")
    parser.add_argument(
        "--latency", type=float, default=0.0, help="seconds added to each request (default 0)"
    )
    parser.add_argument("--in-flight", type=int, default=4, help="the client's max_in_flight (default 4)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every size this many times, the sizes taking turns; each night's figures are "
        "those of its median wall time (default 1)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="plan the change night at 1,000,000 (else the largest) in DuckDB too",
    )
    parser.add_argument("--append-results", action="store_true", help="append a section to RESULTS.md")
    args = parser.parse_args()
    if args.baseline and importlib.util.find_spec("duckdb") is None:
        parser.error("--baseline needs DuckDB, which the bench extra installs: run `make bench` first")
    command = shlex.join([".venv/bin/python", "benchmarks/people_scaling.py", *sys.argv[1:]])
    sizes = sorted(int(value) for value in args.sizes.split(","))
    baseline_size = BASELINE_SIZE if BASELINE_SIZE in sizes else sizes[-1]
    rounds: dict[int, list[list[Night]]] = {size: [] for size in sizes}
    described: list[str] = []
    tables: list[str] = []
    compared: list[str] = []
    for turn in range(1, args.rounds + 1):
        for size in sizes:
            crm = Crm.make(size)
            if turn == 1:
                described.append(describe(crm))
                print(described[-1], flush=True)
            minimum = minimum_writes(crm)
            with tempfile.TemporaryDirectory() as name:
                folder = Path(name)
                listed = folder / "list.jsonl"
                dumped: list[int] = []
                baseline = args.baseline and size == baseline_size and turn == 1

                def after(
                    url: str,
                    number: int,
                    baseline: bool = baseline,
                    listed: Path = listed,
                    dumped: list[int] = dumped,
                ) -> None:
                    if baseline and number == 1:
                        dumped.append(dump_list(url, listed))

                nights, _ = run_matrix(crm, [args.latency], [args.in_flight], folder, None, after)
                rounds[size].append(nights)
                people = f"{size:,}" if args.rounds == 1 else f"{size:,} (round {turn})"
                tables.extend(f"| {people} {row(night, minimum)}" for night in nights)
                if dumped:
                    extract = folder / "night2.csv"
                    one_thread = ("--threads", "1")
                    turns = [
                        (run_baseline(extract, listed, *one_thread), run_baseline(extract, listed, "--ours"))
                        for _ in range(TURNS)
                    ]
                    baselines = [
                        median_run([run for run, _ in turns], run_seconds),
                        run_baseline(extract, listed),
                    ]
                    compared = baseline_lines(nights[1], baselines, turns, dumped[0])
    table, flags = growth_table(rounds)
    lines = [
        *size_ratios(rounds),
        *compared,
        *(flags or [f"no step grows more than {GROWTH:.0%} per person"]),
    ]
    print("\n".join(table))
    for line in lines:
        print(line)
    if args.append_results:
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write(
                f"\n## People job per person at {', '.join(f'{size:,}' for size in sizes)} people "
                f"(benchmarks/people_scaling.py), {utc_now()}\n\n"
                f"Machine: {machine()}. Command: `{command}`.\n\n"
                + "".join(f"- {text}\n" for text in described)
                + "\n"
                + "\n".join([f"| people {HEADER}", f"|---{RULE}", *tables])
                + "\n\n"
                + "\n".join(table)
                + "\n\n"
                + "".join(f"- {line}\n" for line in lines)
            )


if __name__ == "__main__":
    main()
