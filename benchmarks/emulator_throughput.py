"""Throughput of the emulator over HTTP: batch ingestion and paging a 100k-person List.

Run: ``.venv/bin/python benchmarks/emulator_throughput.py [--rounds N] [--append-results]``

- Batch ingestion: sequential POST /v1/events/batch of 100 Metric events on one keep-alive
  connection. The window is an hour and the Metric limit is lifted, so no request is limited
  and the figure is the emulator's own cost. Aim: >= 500 requests/s.
- Paging: 100,000 people on 1,000 account rows (added through the API, 500 per request), then
  read back with GET targetable-people pages of 1,000 and of 100. Aim: >= 50,000 people/s.

The server runs in a thread of this process (``serve_in_thread``), so client and server share
one interpreter: the figures are a floor for a separately served emulator.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

from listsync.emulator import demo_config, serve_in_thread

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADERS = {"Authorization": "Bearer sk_demo_listsync"}
TABLE = "/v1/lists/tbl_accounts"
ACCOUNTS = 1_000
PEOPLE_PER_ACCOUNT = 100


def bench_batches(http: httpx.Client, requests: int) -> float:
    events = [
        {"signal": "seats_used", "identity": {"type": "account", "id": f"acct_{i}"}, "data": {"seats": i}}
        for i in range(100)
    ]
    # Encoded once: the client's JSON work is not the emulator's cost.
    body = json.dumps({"events": events}).encode()
    headers = {**HEADERS, "Content-Type": "application/json"}
    http.post("/v1/events/batch", content=body, headers=headers).raise_for_status()  # warm-up
    started = time.perf_counter()
    for _ in range(requests):
        response = http.post("/v1/events/batch", content=body, headers=headers)
        if response.status_code != 200 or b'"rate_limited"' in response.content:
            raise RuntimeError(f"unexpected answer: {response.status_code} {response.text[:200]}")
    return requests / (time.perf_counter() - started)


def seed_people(http: httpx.Client) -> float:
    """Add the accounts and their people; return people added per second."""
    for start in range(0, ACCOUNTS, 500):
        rows = [{"cells": {"domain": f"account{i}.example"}} for i in range(start, start + 500)]
        http.post(f"{TABLE}/rows", json={"rows": rows}, headers=HEADERS).raise_for_status()
    started = time.perf_counter()
    per_request = 500 // PEOPLE_PER_ACCOUNT
    for start in range(0, ACCOUNTS, per_request):
        accounts = [
            {
                "accountDomain": f"account{i}.example",
                "people": [
                    {"first_name": f"P{j}", "email": f"p{j}@account{i}.example", "personas": ["champion"]}
                    for j in range(PEOPLE_PER_ACCOUNT)
                ],
            }
            for i in range(start, start + per_request)
        ]
        http.post(
            f"{TABLE}/targetable-people", json={"accounts": accounts}, headers=HEADERS
        ).raise_for_status()
    return ACCOUNTS * PEOPLE_PER_ACCOUNT / (time.perf_counter() - started)


def bench_paging(http: httpx.Client, page_size: int) -> float:
    started = time.perf_counter()
    seen = offset = 0
    while True:
        params: dict[str, str | int] = {"limit": page_size, "offset": offset}
        data = http.get(f"{TABLE}/targetable-people", params=params, headers=HEADERS).json()["data"]
        seen += len(data["people"])
        offset += len(data["people"])
        if not data["hasMore"]:
            break
    elapsed = time.perf_counter() - started
    if seen != ACCOUNTS * PEOPLE_PER_ACCOUNT:
        raise RuntimeError(f"paged {seen} people, expected {ACCOUNTS * PEOPLE_PER_ACCOUNT}")
    return seen / elapsed


def spread(rates: list[float], unit: str) -> str:
    """Best (bold) and median of the rounds: on a shared machine the best is the emulator's own
    speed, the median what a neighbour's load left of it."""
    return f"**{max(rates):,.0f} {unit}** best, {statistics.median(rates):,.0f} median of {len(rates)} rounds"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1_000, help="batch requests per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measurement")
    parser.add_argument("--append-results", action="store_true", help=f"append a section to {RESULTS}")
    args = parser.parse_args()

    config = demo_config().model_copy(
        update={"window_seconds": 3600.0, "rate_limits": {"Event": 100, "Metric": 10**9, "State": 30}}
    )
    with serve_in_thread(config) as base_url, httpx.Client(base_url=base_url, timeout=60) as http:
        batch_rps = [bench_batches(http, args.batches) for _ in range(args.rounds)]
        add_pps = seed_people(http)
        page_1000 = [bench_paging(http, 1000) for _ in range(args.rounds)]
        page_100 = [bench_paging(http, 100) for _ in range(args.rounds)]

    lines = [
        f"- Batch ingestion (100 Metric events per request, {args.batches} requests per round): "
        f"{spread(batch_rps, 'requests/s')}; aim >= 500",
        f"- Paging 100,000 people, pages of 1,000: {spread(page_1000, 'people/s')}; aim >= 50,000",
        f"- Paging 100,000 people, pages of 100: {spread(page_100, 'people/s')}",
        f"- Adding people (500 per request, 100 per account, one round): {add_pps:,.0f} people/s",
    ]
    print("\n".join(lines))
    if args.append_results:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        header = (
            f"\n## Emulator throughput ({stamp})\n\n"
            f"`benchmarks/emulator_throughput.py`; machine: 2 cores / 24 GiB, python-svc "
            f"(Python {platform.python_version()}); server in a thread of the client's process "
            f"(serve_in_thread, uvicorn), one keep-alive connection; load average at the end "
            f"{os.getloadavg()[0]:.1f} (the machine is shared with other engineers' test runs).\n\n"
        )
        with RESULTS.open("a", encoding="utf-8") as out:
            out.write(header + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
