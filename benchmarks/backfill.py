"""Backfill at the speed limit: ``ingest_events`` against a naive loop, on the emulator.

Three signals of the demo tenant, one of each type (``page_visit`` Event, ``seats_used`` Metric,
``deal_stage`` State), each with enough events for ``--windows`` full rate-limit windows, mixed
in one extract in timestamp order as a backfill reads them. The emulator runs in its own process
with a short window (``--window-seconds``, 2 by default) and the spec's limits per window, once
per emulator profile of ``--profiles`` (default: ``reference``, whose windows are aligned to the
clock, and ``rolling``, whose windows open at each signal's first event).

Both runs start just after a window boundary, on a freshly reset emulator, and report:

- utilisation = the minimum time the limits allow ÷ the time taken, both counted from the first
  request (reading the extract's first events comes before it). A signal with ``n`` events and a
  limit ``L`` per window cannot have its last event accepted before the start of its
  ``ceil(n / L)``-th window: that is ``(ceil(n / L) - 1) × window`` after the first request where
  windows open at a signal's first event, less the part of the first window already gone where
  windows are aligned to the clock; the minimum is that of the slowest signal;
- 429 responses, and events the emulator refused for their signal's limit (in a 429 or in the
  ``rate_limited`` list of a 200), each of which had to be sent again;
- events lost (sent, never ingested) and duplicated (ingested more than once): both must be 0.

The naive baseline sends one POST /v1/events per event, in extract order, and on a 429 sleeps
until ``X-RateLimit-Reset`` before trying the same event again.

Run: ``.venv/bin/python benchmarks/backfill.py [--window-seconds 2] [--windows 10]
[--profiles reference,rolling] [--record]``;
``--record`` appends the figures to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pandas as pd
from results import publish

from listsync.client import ListSyncClient
from listsync.client.rate_hints import parse_timestamp
from listsync.emulator import PROFILES, demo_config
from listsync.extract.rejects import Rejects
from listsync.signals.build import prepare_events
from listsync.signals.columns import EventMapping
from listsync.signals.ingest import ingest_events

API_KEY = "sk_demo_listsync"
SIGNALS = {"page_visit": "Event", "seats_used": "Metric", "deal_stage": "State"}
LIMITS = {"Event": 100, "Metric": 1000, "State": 30}
PAYLOADS = {
    "page_visit": lambda i: {"path": f"/docs/{i % 50}"},
    "seats_used": lambda i: {"seats": i % 400},
    "deal_stage": lambda i: {"stage": ("open", "won", "lost")[i % 3]},
}
MAPPING = EventMapping(
    signal_column="signal",
    identity_type="account",
    identity_id_column="account_id",
    data_column="payload",
    timestamp_column="occurred_at",
    reference_column="event_id",
)


def history(windows: int) -> pd.DataFrame:
    """Every signal's events spread over the same month, so they interleave in timestamp order."""
    start = datetime(2026, 10, 1, tzinfo=timezone.utc).timestamp()
    month = 30 * 24 * 3600
    rows = []
    for slug, kind in SIGNALS.items():
        count = LIMITS[kind] * windows
        for i in range(count):
            at = datetime.fromtimestamp(start + month * i / count, timezone.utc)
            rows.append(
                {
                    "event_id": f"{slug}-{i:06d}",
                    "signal": slug,
                    "account_id": f"acct-{i % 997:04d}",
                    "payload": PAYLOADS[slug](i),
                    "occurred_at": at.isoformat(),
                }
            )
    return pd.DataFrame(rows)


def minimum_seconds(frame: pd.DataFrame, window: float, profile: str, first_request: float) -> float:
    """The least time from the first request to the last event's acceptance the limits allow."""
    counts = frame["signal"].value_counts()
    windows = max(math.ceil(counts[slug] / LIMITS[kind]) for slug, kind in SIGNALS.items())
    gone = first_request % window if PROFILES[profile].windows == "aligned" else 0.0
    return (windows - 1) * window - gone


class Timed(httpx.HTTPTransport):
    """An HTTP transport that notes when its first request is sent (epoch seconds)."""

    first_request: float | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.first_request is None:
            self.first_request = time.time()
        return super().handle_request(request)


class Emulator:
    """The emulator in a child process, so its work does not share this process's GIL."""

    def __init__(self, window: float, workdir: Path, profile: str) -> None:
        config = demo_config().model_copy(update={"window_seconds": window, "profile": profile})
        config_path = workdir / "emulator.json"
        config_path.write_text(config.model_dump_json(), encoding="utf-8")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        code = (
            "import sys; from listsync.emulator import load_config; "
            "from listsync.emulator.server import serve_forever; "
            "serve_forever(load_config(sys.argv[1]), '127.0.0.1', int(sys.argv[2]))"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(config_path), str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{port}"
        self.window = window
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{self.url}/_emulator/stats").raise_for_status()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("the emulator did not start") from None
                time.sleep(0.1)

    def reset_and_align(self) -> None:
        """Fresh state and counters, then wait until just after a window boundary."""
        httpx.post(f"{self.url}/_emulator/reset").raise_for_status()
        now = time.time()
        time.sleep(math.ceil(now / self.window) * self.window - now + 0.01)

    def outcome(self, expected: set[str]) -> dict[str, int]:
        events = httpx.get(f"{self.url}/_emulator/state", timeout=60).json()["events"]
        stats = httpx.get(f"{self.url}/_emulator/stats").json()
        seen = Counter(event["reference"] for event in events)
        endpoints = stats["endpoints"].values()
        return {
            "requests": sum(e["requests"] for e in endpoints),
            "responses_429": sum(e["rate_limited"] for e in endpoints),
            "events_rate_limited": sum(stats["events_rate_limited"].values()),
            "lost": len(expected - set(seen)),
            "duplicated": sum(count - 1 for count in seen.values()),
            "unexpected": len(set(seen) - expected),
        }

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def run_listsync(emulator: Emulator, frame: pd.DataFrame) -> tuple[float, float]:
    """Ingest the extract; return when the first request went out and when the run ended."""
    transport = Timed()
    with ListSyncClient(emulator.url, API_KEY, transport=transport) as client:
        emulator.reset_and_align()
        summary = ingest_events(client, [frame], MAPPING, rejects=Rejects(), signal_types=SIGNALS)
        ended = time.time()
    assert summary["acknowledged"] == len(frame), summary
    assert transport.first_request is not None
    return transport.first_request, ended


def run_naive(emulator: Emulator, frame: pd.DataFrame) -> tuple[float, float]:
    events = [event.to_wire() for event in prepare_events([frame], MAPPING, rejects=Rejects())]
    headers = {"Authorization": f"Bearer {API_KEY}"}
    transport = Timed()
    with httpx.Client(base_url=emulator.url, headers=headers, timeout=30, transport=transport) as http:
        emulator.reset_and_align()
        for event in events:
            while True:
                response = http.post("/v1/events", json=event)
                if response.status_code != 429:
                    response.raise_for_status()
                    break
                reset_at = parse_timestamp(response.headers["X-RateLimit-Reset"]) or time.time() + 1
                time.sleep(max(0.0, reset_at - time.time()))
        ended = time.time()
    assert transport.first_request is not None
    return transport.first_request, ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-seconds", type=float, default=2.0)
    parser.add_argument("--windows", type=int, default=10, help="full windows of events per signal")
    parser.add_argument(
        "--profiles", default="reference,rolling", help="emulator profiles to run against, comma-separated"
    )
    parser.add_argument("--record", action="store_true", help="append the figures to benchmarks/RESULTS.md")
    args = parser.parse_args()

    frame = history(args.windows)
    expected = set(frame["event_id"])
    counts = {str(slug): int(n) for slug, n in frame["signal"].value_counts().items()}
    print(f"{len(frame)} events {counts}, window {args.window_seconds} s")
    results: dict[tuple[str, str], dict[str, float]] = {}
    runs = (("listsync send_events", run_listsync), ("naive: 1 POST per event", run_naive))
    with tempfile.TemporaryDirectory() as workdir:
        for profile in args.profiles.split(","):
            emulator = Emulator(args.window_seconds, Path(workdir), profile)
            try:
                for name, run in runs:
                    first_request, ended = run(emulator, frame)
                    minimum = minimum_seconds(frame, args.window_seconds, profile, first_request)
                    results[profile, name] = {
                        "seconds": ended - first_request,
                        "minimum": minimum,
                        "utilisation": minimum / (ended - first_request),
                        **emulator.outcome(expected),
                    }
                    print(profile, name, json.dumps(results[profile, name]))
            finally:
                emulator.close()

    lines = [
        f"\n## Signal backfill at the speed limit ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)\n",
        f"Machine: 2 cores / 24 GiB, python-svc (Python {platform.python_version()}). "
        f"`benchmarks/backfill.py --window-seconds {args.window_seconds:g} --windows {args.windows} "
        f"--profiles {args.profiles}`: "
        f"{len(frame)} events ({', '.join(f'{SIGNALS[s]} {s} {n}' for s, n in counts.items())}), "
        f"emulator in its own process with the spec's limits per {args.window_seconds:g} s window. "
        "Seconds and the minimum the limits allow are counted from the first request.\n",
        "| profile | run | seconds | minimum | utilisation | requests | 429s | events rate limited "
        "| lost | duplicated |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (profile, name), r in results.items():
        lines.append(
            f"| {profile} | {name} | {r['seconds']:.2f} | {r['minimum']:.2f} | {r['utilisation']:.3f} "
            f"| {r['requests']} "
            f"| {r['responses_429']} | {r['events_rate_limited']} | {r['lost']} | {r['duplicated']} |"
        )
    for profile in args.profiles.split(","):
        ours, naive = results[profile, runs[0][0]], results[profile, runs[1][0]]
        lines.append(
            f"\n{profile}: listsync is {naive['seconds'] / ours['seconds']:.1f}× faster than the naive "
            f"loop and uses {ours['requests'] / naive['requests']:.3f}× its requests."
        )
    text = "\n".join(lines) + "\n"
    publish(text, args.record)


if __name__ == "__main__":
    main()
