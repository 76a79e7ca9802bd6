"""Helpers shared by the signal tests: what a live emulator ingested and a fault to arm on it, a
mixed extract, its column mapping and valid rows, and a stand-in for Airflow's task state store."""

from __future__ import annotations

import json
from collections import Counter

import httpx

API_KEY = "sk_demo_listsync"
SIGNAL_TYPES = {"page_visit": "Event", "seats_used": "Metric", "deal_stage": "State"}
# How the columns of :func:`mixed_rows` become events (``EventMapping`` or operator arguments).
MAPPING_COLUMNS = {
    "signal_column": "signal",
    "identity_type_column": "object_type",
    "identity_id_column": "object_id",
    "data_column": "payload",
    "timestamp_column": "occurred_at",
    "reference_column": "event_id",
}


def ingested_references(base_url: str) -> Counter[str]:
    """How many times the emulator ingested each reference."""
    events = httpx.get(f"{base_url}/_emulator/state").json()["events"]
    return Counter(event["reference"] for event in events)


def fail_next_batch(base_url: str) -> None:
    """Make the emulator answer the next POST /v1/events/batch with a 500 (not retried)."""
    rule = {"endpoint": "POST /v1/events/batch", "kind": "error", "status": 500, "times": 1}
    httpx.post(f"{base_url}/_emulator/faults", json={"rules": [rule]}).raise_for_status()


def mixed_rows(page_visits: int = 150, seats: int = 40, stages: int = 35) -> list[dict[str, str]]:
    """Rows of an extract with three signals, an unknown slug and invalid rows.

    Every valid row has its own ``event_id``; the invalid ones are listed by :data:`INVALID_ROWS`.
    """
    rows: list[dict[str, str]] = []

    def add(signal: str, object_id: str, payload: dict, at: str) -> None:
        rows.append(
            {
                "event_id": f"ev-{len(rows) + 1:05d}",
                "signal": signal,
                "object_type": "account",
                "object_id": object_id,
                "payload": json.dumps(payload),
                "occurred_at": at,
            }
        )

    for i in range(page_visits):
        add("page_visit", f"acc-{i % 17}", {"path": f"/p/{i}"}, f"2026-11-01T{i // 60:02d}:{i % 60:02d}:00Z")
    for i in range(seats):
        add("seats_used", f"acc-{i}", {"seats": i}, f"2026-11-01T05:{i % 60:02d}:00Z")
    for i in range(stages):
        add("deal_stage", f"deal-{i}", {"stage": "won" if i % 2 else "open"}, f"2026-11-01T06:{i:02d}:30Z")
    add("not_a_signal", "acc-1", {"x": 1}, "2026-11-01T07:00:00Z")
    add("not_a_signal", "acc-2", {"x": 2}, "2026-11-01T07:01:00Z")
    # Invalid rows: no identity id, a timestamp that is not ISO 8601, a payload that is not an object.
    add("page_visit", "", {"path": "/"}, "2026-11-01T08:00:00Z")
    add("page_visit", "acc-1", {"path": "/"}, "01/11/2026")
    rows.append({**rows[0], "event_id": "ev-bad-payload", "payload": "[1, 2]"})
    return rows


INVALID_ROWS = 3
UNKNOWN_SIGNAL_ROWS = 2


def valid_references(rows: list[dict[str, str]]) -> set[str]:
    """The ``event_id`` of every row of :func:`mixed_rows` that makes a valid event."""
    return {
        row["event_id"]
        for row in rows
        if row["signal"] != "not_a_signal"
        and row["object_id"]
        and row["occurred_at"][0] == "2"
        and row["payload"].startswith("{")
    }


class DictStore:
    """Stands in for Airflow's task state store: get/set of JSON values; counts the writes."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}
        self.writes = 0

    def get(self, key: str, default: object = None) -> object:
        return self.values.get(key, default)

    def set(self, key: str, value: object) -> None:
        self.writes += 1
        self.values[key] = value
