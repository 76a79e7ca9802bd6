"""Benchmark: read and normalise a 1M-row CRM extract (CSV) in chunks.

Generates a messy people extract into a temporary directory, then measures, each phase in its
own process so that peak RSS is that phase's alone:

- ``chunked``: ``read_extract`` in chunks of 50,000 rows + ``normalize_column`` for domain,
  e-mail, phone, booleans and names (vectorised domain/e-mail and ten-digit North American
  phones, other phones parsed once per distinct number): the path every operator takes;
- ``naive``: a plain row-by-row loop (``csv.DictReader`` + the same scalar rules per value);
- ``prepare_people``: the full people preparation (normalise, validate with the client models,
  deduplicate), for reference: it keeps every prepared person in memory by design.

Both normalisation phases count normalised values and rejects per field; the run fails if they
disagree, so the speed-up is never bought with different results. Figures are printed and
appended to ``benchmarks/RESULTS.md``::

    .venv/bin/python benchmarks/read_normalize.py            # 1,000,000 rows
    .venv/bin/python benchmarks/read_normalize.py --rows 100000 --no-results
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("RESULTS.md")
CHUNK_SIZE = 50_000
COLUMNS = ["account_domain", "first_name", "last_name", "email", "phone", "target"]


def generate(path: Path, rows: int, seed: int = 7) -> None:
    """A people extract with the mess CRMs produce: case, schemes, spaces, bad values, blanks."""
    rng = random.Random(seed)
    accounts = max(rows // 20, 1)
    # One switchboard number per account (CRMs often hold the company line for a contact).
    phones = [
        f"{rng.randint(200, 989)}{rng.randint(200, 999)}{rng.randint(1000, 9999)}" for _ in range(accounts)
    ]
    names = [("Jane", "jane"), ("John", "john"), ("Zoë", "zoe"), ("Łukasz", "lukasz"), ("Mei", "mei")]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for i in range(rows):
            account = rng.randrange(accounts)
            host = f"company{account}.com" if account % 100 else f"bücher{account}.de"
            domain = rng.choice([host, host.upper(), f"https://www.{host}/", f"{host}.", f" {host} "])
            first, local = rng.choice(names)
            email = f"{local}.{i}@{host}"
            roll = rng.random()
            if roll < 0.02:
                email = email.replace("@", "")  # no @
            elif roll < 0.05:
                email = f" {email.upper()} "
            elif roll < 0.08:
                email = ""
            digits = phones[account]
            layouts = [
                "",
                "",
                f"({digits[:3]}) {digits[3:6]}-{digits[6:]}",
                f"+1 {digits}",
                f"{digits[:3]}.{digits[3:]}",
            ]
            phone = rng.choice(layouts)
            if rng.random() < 0.02:  # junk: CRM placeholders, or a number cut short
                phone = rng.choice(["n/a", "TBD", "000", "-", digits[:6], digits[:6]])
            target = rng.choice(["yes", "no", "TRUE", "0", "", "maybe"])
            writer.writerow([domain, f" {first} ", f"Doe{i % 977}", email, phone, target])


def _rules() -> dict[str, Any]:
    from listsync.extract.contact_rules import normalize_domain, normalize_email, normalize_phone
    from listsync.extract.text_rules import normalize_text
    from listsync.extract.value_rules import parse_bool

    return {
        "account_domain": normalize_domain,
        "first_name": normalize_text,
        "last_name": normalize_text,
        "email": normalize_email,
        "phone": partial(normalize_phone, default_region="US"),
        "target": parse_bool,
    }


def run_chunked(path: Path) -> dict[str, Any]:
    from listsync.extract.normalize import normalize_column
    from listsync.extract.sources import read_extract

    rules = _rules()
    counts = {field: [0, 0] for field in rules}  # normalised, rejected
    rows = 0
    for frame in read_extract(path, chunk_size=CHUNK_SIZE):
        rows += len(frame)
        for field, rule in rules.items():
            result = normalize_column(frame[field], rule)
            counts[field][0] += sum(value is not None for value in result.values)
            counts[field][1] += len(result.errors)
    return {"rows": rows, "counts": counts}


def run_naive(path: Path) -> dict[str, Any]:
    from listsync.extract.text_rules import NormalizationError, is_missing

    rules = _rules()
    counts = {field: [0, 0] for field in rules}
    rows = 0
    with path.open(newline="", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle):
            rows += 1
            for field, rule in rules.items():
                value = row[field]
                if is_missing(value):
                    continue
                try:
                    rule(value)
                except NormalizationError:
                    counts[field][1] += 1
                else:
                    counts[field][0] += 1
    return {"rows": rows, "counts": counts}


def run_prepare_people(path: Path) -> dict[str, Any]:
    from listsync.extract.rejects import Rejects
    from listsync.extract.sources import read_extract
    from listsync.sync.people.prepare import prepare_people

    column_map = {"account_domain": "account_domain", "first_name": "first_name", "last_name": "last_name"}
    column_map |= {"email": "email", "phone": "phone_number", "target": "target"}
    with Rejects(path.with_suffix(".rejects.jsonl")) as rejects:
        frames = read_extract(path, chunk_size=CHUNK_SIZE, arrow_text=True)  # as the people operator reads it
        prepared = prepare_people(frames, column_map, rejects=rejects)
    return {"rows": prepared.stats.read, "stats": prepared.stats.to_dict()}


PHASES = {"chunked": run_chunked, "naive": run_naive, "prepare_people": run_prepare_people}


def child(phase: str, path: Path) -> None:
    # Import cost is part of no phase: the import happens before the clock starts.
    import listsync.extract.mapping  # noqa: F401

    start, cpu_start = time.perf_counter(), time.process_time()
    outcome = PHASES[phase](path)
    outcome["seconds"] = time.perf_counter() - start
    outcome["cpu_seconds"] = time.process_time() - cpu_start
    outcome["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps(outcome))


def measure(phase: str, path: Path) -> dict[str, Any]:
    output = subprocess.run(
        [sys.executable, __file__, "--child", phase, str(path)], check=True, capture_output=True, text=True
    ).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each compared phase (best kept)")
    parser.add_argument("--no-results", action="store_true", help="do not append to benchmarks/RESULTS.md")
    parser.add_argument("--child", nargs=2, metavar=("PHASE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "people.csv"
        start = time.perf_counter()
        generate(path, args.rows)
        size_mib = path.stat().st_size / 2**20
        print(f"generated {args.rows:,} rows ({size_mib:.0f} MiB) in {time.perf_counter() - start:.1f} s")
        # The machine is shared, so the two compared phases alternate, each runs --repeat times
        # and keeps its best wall time; CPU time (less disturbed by other processes) is shown too.
        runs: dict[str, list[dict[str, Any]]] = {phase: [] for phase in PHASES}
        for _ in range(args.repeat):
            for phase in ("chunked", "naive"):
                runs[phase].append(measure(phase, path))
        runs["prepare_people"].append(measure("prepare_people", path))
        results = {
            phase: min(outcomes, key=lambda outcome: outcome["seconds"]) for phase, outcomes in runs.items()
        }

    chunked, naive, people = results["chunked"], results["naive"], results["prepare_people"]
    if chunked["counts"] != naive["counts"] or chunked["rows"] != naive["rows"]:
        raise SystemExit(f"chunked and naive results differ:\n{chunked}\n{naive}")
    lines = []
    for phase, outcome in results.items():
        rate = outcome["rows"] / outcome["seconds"]
        rss = outcome["peak_rss_mib"]
        lines.append(
            f"| {phase} | {outcome['seconds']:.1f} s | {outcome['cpu_seconds']:.1f} s | {rate:,.0f} rows/s "
            f"| {rss:.0f} MiB |"
        )
    speedup = naive["seconds"] / chunked["seconds"]
    cpu_speedup = naive["cpu_seconds"] / chunked["cpu_seconds"]
    all_runs = "; ".join(
        f"{phase} " + ", ".join(f"{outcome['seconds']:.1f}" for outcome in runs[phase]) for phase in runs
    )
    summary = [
        "| phase | wall time (best) | CPU time | throughput | peak RSS |",
        "|---|---|---|---|---|",
        *lines,
        "",
        f"- chunked read + normalise vs the plain row-by-row loop: **{speedup:.1f}×** by wall time, "
        f"{cpu_speedup:.1f}× by CPU time (aim ≥ 5×); peak RSS {chunked['peak_rss_mib']:.0f} MiB "
        "(aim < 1 GB).",
        f"- every run, wall seconds: {all_runs}.",
        f"- normalised / rejected per field (identical in both phases): {json.dumps(chunked['counts'])}",
        f"- prepare_people accounting: {json.dumps(people['stats'])}",
    ]
    print("\n".join(summary))
    if not args.no_results:
        header = (
            f"\n## read_normalize: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
            f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}); load "
            f"average {os.getloadavg()[0]:.1f} at the end (shared with other engineers' runs). Extract: "
            f"{args.rows:,} rows, {size_mib:.0f} MiB CSV (20 people per account, one switchboard "
            f"number per account in three layouts, 2% bad e-mails, 2% junk phones), chunks of "
            f"{CHUNK_SIZE:,}; `benchmarks/read_normalize.py`, each phase in its own process.\n\n"
        )
        with RESULTS.open("a", encoding="utf-8") as handle:
            handle.write(header + "\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
