"""The rows upsert's requests on the wire, with httpx.MockTransport: the read mode, the value it
compares, and a row add answered by a 5xx."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pandas as pd

from listsync.client.client import ListSyncClient
from listsync.sync.rows import upsert_rows


def row(row_id: str, **cells: tuple[Any, Any]) -> dict[str, Any]:
    """A row as GET rows returns it; each cell given as (value, computedValue)."""
    return {
        "id": row_id,
        "tableId": "tbl_1",
        "cells": {
            column: {"columnId": column, "rowId": row_id, "value": value, "computedValue": computed}
            for column, (value, computed) in cells.items()
        },
    }


def test_reads_by_key_compares_values_and_rereads_a_row_add_answered_by_a_5xx() -> None:
    seen: list[tuple[str, dict[str, str]]] = []
    posts = 0
    created: list[dict[str, object]] = []
    pages = {
        "0": [row("row_1", domain=("acme.com", "acme.com"), plan=("team", "Team"))],
        "1": [row("row_2", domain=("beta.io", "beta.io"), plan=("free", "Free"))],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal posts
        params = dict(request.url.params)
        seen.append((request.method, params))
        if request.method == "GET" and params.get("operator") == "is_not_empty":
            rows = pages.get(params["offset"], [])
            truncated = params["offset"] == "0"
            return httpx.Response(200, json={"success": True, "data": {"rows": rows, "truncated": truncated}})
        if request.method == "GET" and "rowIds" in params:  # the read-back of what was written
            rows = [r for r in created if r["id"] in params["rowIds"].split(",")]
            return httpx.Response(200, json={"success": True, "data": {"rows": rows, "truncated": False}})
        if request.method == "GET":  # the re-read of the key whose add failed with a 5xx
            return httpx.Response(200, json={"success": True, "data": {"rows": [], "truncated": False}})
        posts += 1
        if posts == 1:
            return httpx.Response(502, json={"success": False, "error": "Bad gateway"})
        sent = json.loads(request.content)["rows"]
        created.extend({"id": f"row_new{i}", "cells": r["cells"]} for i, r in enumerate(sent))
        return httpx.Response(200, json={"success": True, "data": {"rows": created, "added": len(sent)}})

    frame = pd.DataFrame(
        {"Domain": ["acme.com", "beta.io", "new.dev"], "Plan": ["team", "free", "team"]}, dtype=object
    )
    client = ListSyncClient(
        "https://api.example.com",
        "sk_test",
        "usr_1",
        transport=httpx.MockTransport(handler),
        sleep=lambda s: None,
    )
    with client:
        summary = upsert_rows(
            client, "tbl_1", [frame], key_column="domain", column_map={"Domain": "domain", "Plan": "plan"}
        )

    # Enum cells whose computedValue is the label still match by value: only new.dev is written.
    assert (summary["unchanged"], summary["rows_added"], summary["rows_resent"]) == (2, 1, 1)
    assert summary["requests"] == {"add_rows": 2, "update_cells": 0, "delete_rows": 0, "total": 2}
    assert seen == [
        (
            "GET",
            {
                "columnId": "domain",
                "operator": "is_not_empty",
                "limit": "1000",
                "offset": "0",
                "userId": "usr_1",
            },
        ),
        (
            "GET",
            {
                "columnId": "domain",
                "operator": "is_not_empty",
                "limit": "1000",
                "offset": "1",
                "userId": "usr_1",
            },
        ),
        ("POST", {}),
        ("GET", {"columnId": "domain", "operator": "eq", "query": "new.dev", "userId": "usr_1"}),
        ("POST", {}),
        ("GET", {"rowIds": "row_new0", "userId": "usr_1"}),
    ]
    assert (summary["verified"], summary["drift"]) == (1, 0)
