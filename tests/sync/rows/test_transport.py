"""The rows upsert's requests on the wire, with httpx.MockTransport: the read mode, the value it
compares, a row add answered by a 5xx, and the shapes of List rows read."""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from listsync.client.client import ListSyncClient
from listsync.client.errors import UnexpectedResponseError
from listsync.sync.rows import read_list_rows, upsert_rows


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
        max_in_flight=1,  # one request at a time: the sequence asserted is the job's own
    )
    with client:
        summary = upsert_rows(
            client, "tbl_1", [frame], key_column="domain", column_map={"Domain": "domain", "Plan": "plan"}
        )

    # Enum cells whose computedValue is the label still match by value: only new.dev is written.
    assert (summary["unchanged"], summary["added"], summary["resent"]) == (2, 1, 1)
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
        (  # the first page again: the List did not move while it was read
            "GET",
            {
                "columnId": "domain",
                "operator": "is_not_empty",
                "limit": "1000",
                "offset": "0",
                "userId": "usr_1",
            },
        ),
        ("POST", {}),
        ("GET", {"columnId": "domain", "operator": "eq", "query": "new.dev", "userId": "usr_1"}),
        ("POST", {}),
        ("GET", {"rowIds": "row_new0", "userId": "usr_1"}),
    ]
    assert (summary["verified"], summary["drift"]) == (1, 0)


def list_client(rows: list[Any]) -> ListSyncClient:
    """A client whose List answers GET rows with ``rows`` on one page."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"success": True, "data": {"rows": rows, "truncated": False}})

    return ListSyncClient("https://api.example.com", "sk_test", transport=httpx.MockTransport(handler))


def test_the_list_is_read_from_cells_as_objects_or_as_bare_values() -> None:
    rows = [
        row("row_1", domain=("Acme.com", "acme.com"), plan=("team", "Team")),
        {"id": "row_2", "cells": {"domain": "beta.io", "plan": {"tier": 1}, "note": None}},
        {"id": "row_3", "cells": {"domain": {"value": "gamma.dev"}}},
        {"id": "row_4"},  # no cells: no key, not read
    ]
    with list_client(rows) as client:
        table, requests = read_list_rows(client, "tbl_1", "domain", ["domain", "plan"], key_kind="domain")
    assert (table.row_ids, table.keys, requests) == (
        ["row_1", "row_2", "row_3", "row_4"],
        ["acme.com", "beta.io", "gamma.dev", None],
        1,
    )
    every = np.arange(4)
    assert table.cells["domain"].values(every).tolist() == ["Acme.com", "beta.io", "gamma.dev", None]
    assert table.cells["plan"].values(every).tolist() == ["team", {"tier": 1}, None, None]


@pytest.mark.parametrize(
    "bad",
    [["row_1"], {"cells": {}}, {"id": 7, "cells": {}}, {"id": "row_1", "cells": ["acme.com"]}],
    ids=["not an object", "no id", "id not text", "cells not an object"],
)
def test_a_list_row_that_is_not_a_row_is_refused(bad: Any) -> None:
    with list_client([bad]) as client, pytest.raises(UnexpectedResponseError, match="cannot read RowsPage"):
        read_list_rows(client, "tbl_1", "domain", ["domain"], key_kind="domain")
