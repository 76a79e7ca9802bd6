"""The rows upsert's outcomes file against the emulator: every row whose write did not end as
planned, failed (permanently or not), drifted or unconfirmed, named with the service's answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from listsync.sync.rows import upsert_rows
from listsync.sync.settings import SyncSettings
from listsync.sync.steps import SyncFailedError

from ...support import LiveEmulator, read_jsonl
from ...support.tenants import ROWS_TABLE as TABLE

COLUMN_MAP = {"Domain": "domain", "Name": "name"}


def frames(*rows: tuple[str, str]) -> list[pd.DataFrame]:
    return [pd.DataFrame([{"Domain": key, "Name": name} for key, name in rows], dtype=object)]


def forwarded(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
    """``request`` sent to the emulator with another body."""
    headers = {name: value for name, value in request.headers.items() if name != "content-length"}
    with httpx.Client() as direct:
        return direct.request(request.method, request.url, headers=headers, json=body)


def test_each_row_not_written_as_planned_is_in_the_outcomes_file_with_its_answer(
    emulator: LiveEmulator, tmp_path: Path, intercepting: Callable[..., httpx.BaseTransport]
) -> None:
    seeded = {"a.io": "A", "b.io": "B", "gone.io": "Gone"}
    ids = dict(
        zip(seeded, emulator.seed(TABLE, *({"domain": k, "name": v} for k, v in seeded.items())), strict=True)
    )

    def service(request: httpx.Request) -> httpx.Response | None:
        """The add of c.io is refused, a.io's update applied with another value, b.io's answered
        500 and never applied, and the delete of gone.io acknowledged and never applied."""
        body = json.loads(request.content or b"{}")
        if request.method == "POST" and body["rows"][0]["cells"]["domain"] == "c.io":
            return httpx.Response(400, json={"success": False, "error": "rows[0].cells.name: not allowed"})
        if request.method == "PATCH" and body["updates"][0]["rowId"] == ids["a.io"]:
            body["updates"][0]["value"] = "Another"
            return forwarded(request, body)
        if request.method == "PATCH" and body["updates"][0]["rowId"] == ids["b.io"]:
            return httpx.Response(500, json={"success": False, "error": "Internal error"})
        if request.method == "DELETE":
            return httpx.Response(200, json={"success": True, "data": {"deleted": 1, "notFound": []}})
        return None

    extract = {"a.io": "A2", "b.io": "B2", "c.io": "C", "d.io": "D"}
    outcomes_path, plan_path = tmp_path / "outcomes.jsonl", tmp_path / "plan.jsonl"
    settings = SyncSettings(
        outcomes_path=outcomes_path, plan_path=plan_path, verify_timeout=0, max_delete_fraction=1.0
    )
    with (
        emulator.client(sleep=lambda seconds: None, transport=intercepting(service)) as client,
        pytest.raises(SyncFailedError) as raised,
    ):
        upsert_rows(
            client,
            TABLE,
            frames(*extract.items()),
            key_column="domain",
            column_map=COLUMN_MAP,
            delete_missing=True,
            chunk_size=1,
            settings=settings,
        )

    # What each row's write should have left, against what the List holds now.
    shown = {row["domain"]: row for row in emulator.rows(TABLE)}
    expected = set()
    for key, name in extract.items():
        if key not in shown:
            expected.add(("failed", "add", key, None, 400, False))
        elif shown[key]["name"] == seeded.get(key) != name:
            expected.add(("failed", "update", key, ids[key], 500, True))
        elif shown[key]["name"] != name:
            expected.add(("drifted", "update", key, ids[key], None, False))
    expected.update(
        ("unconfirmed", "delete", key, ids[key], None, True) for key in shown if key not in extract
    )
    lines = read_jsonl(outcomes_path)
    found = {
        (line["outcome"], line["action"], line["key"], line["row_id"], line["status"], line["curable"])
        for line in lines
    }
    assert found == expected and len(lines) == len(expected) == 4
    plan = read_jsonl(plan_path)
    for line in lines:
        assert (plan[line["plan_line"] - 1]["action"], plan[line["plan_line"] - 1]["key"]) == (
            line["action"],
            line["key"],
        )
    messages = {line["key"]: line["message"] for line in lines}
    assert "-> 400: rows[0].cells.name: not allowed" in messages["c.io"]
    assert "-> 500: Internal error" in messages["b.io"]
    assert messages["a.io"] == "column 'name' is 'Another', expected 'A2'"

    summary = raised.value.summary
    assert (summary["failed"], summary["failed_permanent"], summary["failed_curable"]) == (2, 1, 1)
    assert (summary["drift"], summary["unconfirmed"], summary["outcomes_path"]) == (1, 1, str(outcomes_path))
