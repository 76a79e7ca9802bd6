"""upsert_rows and apply_rows_plan against the emulator: convergence, zero-write reruns, faults."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from listsync.emulator import FaultRule
from listsync.extract.rejects import TooManyRejectsError
from listsync.sync.rows import (
    apply_rows_plan,
    list_key_normalizer,
    plan_rows_upsert,
    read_current_rows,
    upsert_rows,
)
from listsync.sync.settings import SyncSettings
from listsync.sync.steps import SyncFailedError, UnsafeDeleteError

from ...support import LiveEmulator, read_jsonl
from ...support.tenants import ROW_WRITES, rows_config
from ...support.tenants import ROWS_TABLE as TABLE

COLUMN_MAP = {
    "Domain": "domain",
    "Name": "name",
    "ARR": "arr",
    "Plan": "plan",
    "Meta": "metadata",
    "Renewal": "renewal_date",
}
POST_ROWS = "POST /v1/lists/{tableId}/rows"


def extract(*rows: dict[str, Any]) -> list[pd.DataFrame]:
    # dtype=object, as read_extract gives: values keep their Python types, None stays None.
    return [pd.DataFrame(list(rows), columns=list(COLUMN_MAP), dtype=object)]


def account(domain: str, name: str, arr: Any = None, plan: Any = None, meta: Any = None, renewal: Any = None):
    return {"Domain": domain, "Name": name, "ARR": arr, "Plan": plan, "Meta": meta, "Renewal": renewal}


def run(
    emulator: LiveEmulator,
    frames: list[pd.DataFrame],
    tmp_path: Path,
    settings: SyncSettings = SyncSettings(),
    **options: Any,
) -> dict[str, Any]:
    with emulator.client(sleep=lambda seconds: None) as client:
        return upsert_rows(
            client,
            TABLE,
            frames,
            key_column="domain",
            column_map=COLUMN_MAP,
            settings=replace(
                settings, plan_path=tmp_path / "plan.jsonl", rejects_path=tmp_path / "rejects.jsonl"
            ),
            **options,
        )


def by_domain(emulator: LiveEmulator) -> dict[str, dict[str, Any]]:
    rows = emulator.rows(TABLE)
    domains = Counter(row["domain"] for row in rows)
    assert all(count == 1 for count in domains.values()), f"duplicate rows: {domains}"
    return {row["domain"]: row for row in rows}


def plan_file(tmp_path: Path) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "plan.jsonl")


def test_upsert_converges_and_a_rerun_writes_nothing(emulator: LiveEmulator, tmp_path: Path) -> None:
    emulator.seed(
        TABLE,
        {"domain": "acme.com", "name": "Acme", "arr": 100, "plan": "team", "metadata": {"tier": 1}},
        {"domain": "beta.io", "name": "Beta", "arr": 5.5, "plan": "free"},
        {"domain": "gone.io", "name": "Gone"},
    )
    frames = extract(
        # Same values in other forms: 100.0, a key spelt differently, JSON keys in another order.
        account("https://www.ACME.com/", "Acme", 100.0, "team", {"tier": 1}),
        account("beta.io", "Beta Ltd", 5.5, "free", None, "2027-01-31"),
        account("new.dev", "New", 7, "team", {"tags": ["a", "b"], "n": 2}, "2026-12-01"),
        account("", "No key"),
    )
    summary = run(
        emulator, frames, tmp_path, delete_missing=True, settings=SyncSettings(max_delete_fraction=0.5)
    )

    rows = by_domain(emulator)
    assert set(rows) == {"acme.com", "beta.io", "new.dev"}
    assert rows["beta.io"] == {
        "domain": "beta.io",
        "name": "Beta Ltd",
        "arr": 5.5,
        "plan": "free",
        "renewal_date": "2027-01-31",
    }
    assert rows["new.dev"] == {
        "domain": "new.dev",
        "name": "New",
        "arr": 7,
        "plan": "team",
        "metadata": {"tags": ["a", "b"], "n": 2},
        "renewal_date": "2026-12-01",
    }
    assert rows["acme.com"]["metadata"] == {"tier": 1}
    assert summary["read"] == 4 and summary["rejected"] == 1
    assert (summary["added"], summary["updated"], summary["cells_updated"]) == (1, 1, 2)
    assert (summary["deleted"], summary["unchanged"], summary["failed"]) == (1, 1, 0)
    assert summary["requests"] == {"add_rows": 1, "update_cells": 1, "delete_rows": 1, "total": 3}
    assert emulator.requests(*ROW_WRITES) == dict.fromkeys(emulator.requests(*ROW_WRITES), 1)
    rejects = (tmp_path / "rejects.jsonl").read_text()
    assert "the key is empty" in rejects

    emulator.stats.clear()
    again = run(
        emulator, frames, tmp_path, delete_missing=True, settings=SyncSettings(max_delete_fraction=0.5)
    )
    assert again["requests"]["total"] == 0
    assert again["unchanged"] == 3
    assert emulator.requests(*ROW_WRITES) == dict.fromkeys(emulator.requests(*ROW_WRITES), 0)
    assert plan_file(tmp_path) == []


def test_enum_cells_compare_by_value_not_computed_value(emulator: LiveEmulator, tmp_path: Path) -> None:
    emulator.seed(TABLE, {"domain": "acme.com", "name": "Acme", "plan": "team"})  # computedValue "Team"
    summary = run(emulator, extract(account("acme.com", "Acme", plan="team")), tmp_path)
    assert summary["unchanged"] == 1 and summary["requests"]["total"] == 0


def test_null_keeps_the_list_value_unless_overwrite_with_null(emulator: LiveEmulator, tmp_path: Path) -> None:
    emulator.seed(TABLE, {"domain": "acme.com", "name": "Acme", "arr": 10})
    frames = extract(account("acme.com", "Acme", arr=None))
    assert run(emulator, frames, tmp_path)["unchanged"] == 1
    assert by_domain(emulator)["acme.com"]["arr"] == 10

    summary = run(
        emulator,
        extract(account("acme.com", "Acme", arr=None)),
        tmp_path,
        settings=SyncSettings(overwrite_with_null=True),
    )
    assert summary["cells_updated"] == 1
    assert by_domain(emulator)["acme.com"].get("arr") is None


def test_dry_run_writes_the_plan_and_sends_nothing(emulator: LiveEmulator, tmp_path: Path) -> None:
    emulator.seed(TABLE, {"domain": "acme.com", "name": "Acme"}, {"domain": "gone.io", "name": "Gone"})
    before = emulator.rows(TABLE)
    frames = extract(account("acme.com", "Acme Inc"), account("new.dev", "New"))
    summary = run(
        emulator,
        frames,
        tmp_path,
        delete_missing=True,
        settings=SyncSettings(dry_run=True, max_delete_fraction=1.0),
    )

    assert emulator.rows(TABLE) == before
    assert emulator.requests(*ROW_WRITES) == dict.fromkeys(emulator.requests(*ROW_WRITES), 0)
    assert summary["dry_run"] is True and summary["requests"]["total"] == 0
    assert (summary["added"], summary["cells_updated"], summary["deleted"]) == (0, 0, 0)
    assert summary["planned"] == {"add_rows": 1, "update_cells": 1, "update_rows": 1, "delete_rows": 1}
    entries = plan_file(tmp_path)
    assert [entry["action"] for entry in entries] == ["add", "update", "delete"]
    assert entries[0] == {"action": "add", "key": "new.dev", "cells": {"domain": "new.dev", "name": "New"}}
    assert entries[1]["changes"] == {"name": {"before": "Acme", "after": "Acme Inc"}}
    assert entries[2]["key"] == "gone.io"


def test_missing_rows_are_kept_without_delete_missing(emulator: LiveEmulator, tmp_path: Path) -> None:
    emulator.seed(TABLE, {"domain": "acme.com", "name": "Acme"}, {"domain": "other.io", "name": "Other"})
    summary = run(emulator, extract(account("acme.com", "Acme")), tmp_path)
    assert summary["deleted"] == 0
    assert set(by_domain(emulator)) == {"acme.com", "other.io"}


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        (extract(), "the extract produced no valid rows"),
        (extract(account("acme.com", "Acme")), "set max_delete_fraction to at least 0.5"),
    ],
)
def test_unsafe_deletes_are_refused_before_any_write(
    emulator: LiveEmulator, tmp_path: Path, frames: list[pd.DataFrame], message: str
) -> None:
    emulator.seed(TABLE, {"domain": "acme.com", "name": "Acme"}, {"domain": "gone.io", "name": "Gone"})
    with pytest.raises(UnsafeDeleteError, match=message):
        run(emulator, frames, tmp_path, delete_missing=True)
    assert emulator.requests(*ROW_WRITES) == dict.fromkeys(emulator.requests(*ROW_WRITES), 0)


def test_duplicate_keys_in_the_list_are_reported_not_guessed(
    live_emulator: Callable[..., LiveEmulator], tmp_path: Path
) -> None:
    emulator = live_emulator(rows_config(unique_domains=False))
    emulator.seed(
        TABLE,
        {"domain": "acme.com", "name": "Acme 1"},
        {"domain": "acme.com", "name": "Acme 2"},
        {"domain": "beta.io", "name": "Beta"},
    )
    frames = extract(account("acme.com", "Acme"), account("beta.io", "Beta Ltd"))
    with pytest.raises(SyncFailedError, match="held by 2 List rows") as raised:
        run(emulator, frames, tmp_path)

    summary = raised.value.summary
    assert (summary["duplicate_keys_in_list"], summary["failed"], summary["cells_updated"]) == (1, 1, 1)
    # The other row was written; the duplicated ones were left exactly as they were.
    assert sorted(row["name"] for row in emulator.rows(TABLE)) == ["Acme 1", "Acme 2", "Beta Ltd"]
    duplicates = [entry for entry in plan_file(tmp_path) if entry["action"] == "duplicate_key_in_list"]
    assert duplicates == [
        {
            "action": "duplicate_key_in_list",
            "key": "acme.com",
            "row_ids": ["row_1", "row_2"],
            "in_extract": True,
        }
    ]
    assert run(emulator, frames, tmp_path, settings=SyncSettings(fail_on_error=False))["failed"] == 1


@pytest.mark.parametrize(("kind", "resent"), [("drop_after", 0), ("drop_before", 2)])
def test_a_dropped_row_add_is_reread_and_never_duplicated(
    emulator: LiveEmulator, tmp_path: Path, kind: str, resent: int
) -> None:
    emulator.faults.add([FaultRule(endpoint=POST_ROWS, kind=kind, times=1)])
    frames = extract(account("a.io", "A"), account("b.io", "B"), account("c.io", "C"))
    summary = run(emulator, frames, tmp_path, chunk_size=2)

    assert set(by_domain(emulator)) == {"a.io", "b.io", "c.io"}  # by_domain fails on a duplicate
    assert summary["added"] == 3 and summary["failed"] == 0
    assert summary["resent"] == resent
    # Each row of the first chunk was looked up once by key before anything was sent again, and
    # the three rows were read back by id once written.
    assert summary["read_requests"] == 1 + 2 + 1
    assert (summary["verified"], summary["drift"]) == (3, 0)
    assert emulator.stats.requests[POST_ROWS] == 2 + (1 if resent else 0)


def test_row_adds_never_confirmed_fail_without_duplicates(emulator: LiveEmulator, tmp_path: Path) -> None:
    emulator.faults.add([FaultRule(endpoint=POST_ROWS, kind="drop_before", times=3)])
    with pytest.raises(SyncFailedError, match="outcome unknown after 3 sends") as raised:
        run(emulator, extract(account("a.io", "A")), tmp_path)
    assert raised.value.summary["failed"] == 1 and raised.value.summary["added"] == 0
    assert emulator.rows(TABLE) == []


def test_a_failed_reread_is_not_followed_by_a_resend(emulator: LiveEmulator) -> None:
    with emulator.client(sleep=lambda seconds: None) as client:
        current, _ = read_current_rows(client, TABLE, "domain")
        plan = plan_rows_upsert(
            [{"domain": "a.io", "name": "A"}],
            current,
            key_column="domain",
            normalize_key=list_key_normalizer("domain"),
        )
        emulator.faults.add(
            [
                FaultRule(endpoint=POST_ROWS, kind="drop_after", times=1),
                # A read is retried on any 5xx: this one fails every attempt the policy allows.
                FaultRule(endpoint="GET /v1/lists/{tableId}/rows", kind="error", status=500, times=5),
            ]
        )
        outcome = apply_rows_plan(plan, client, TABLE)

    assert [(kind, key) for kind, key, _ in outcome.failures] == [("add", "a.io")]
    assert "re-read failed" in outcome.failures[0][2]
    assert len(emulator.rows(TABLE)) == 1  # applied once by the dropped request, never sent again


def test_too_many_rejects_fail_before_reading_the_list_and_leave_the_rejects_file(
    emulator: LiveEmulator, tmp_path: Path
) -> None:
    frames = extract(account("acme.com", "Acme"), account("", "No key"))
    with pytest.raises(TooManyRejectsError):
        run(emulator, frames, tmp_path, settings=SyncSettings(max_reject_fraction=0.1))
    assert "the key is empty" in (tmp_path / "rejects.jsonl").read_text()
    assert emulator.stats.requests["GET /v1/lists/{tableId}/rows"] == 0


def test_acknowledged_writes_the_list_never_shows_are_unconfirmed_not_failures(
    emulator: LiveEmulator, tmp_path: Path, intercepting: Callable[..., httpx.BaseTransport]
) -> None:
    # A service that answers cell updates and row deletes with success but applies none of them.
    ids = emulator.seed(TABLE, {"domain": "a.io", "name": "A"}, {"domain": "gone.io", "name": "Gone"})
    slept: list[float] = []

    def forget(request: httpx.Request) -> httpx.Response | None:
        if request.method in ("PATCH", "DELETE"):
            return httpx.Response(200, json={"success": True, "data": {}})
        return None

    with emulator.client(sleep=slept.append, transport=intercepting(forget)) as client:
        summary = upsert_rows(
            client,
            TABLE,
            extract(account("a.io", "A2"), account("b.io", "B")),
            key_column="domain",
            column_map=COLUMN_MAP,
            delete_missing=True,
            settings=SyncSettings(max_delete_fraction=1.0, verify_timeout=10),
        )

    assert (summary["added"], summary["cells_updated"], summary["deleted"]) == (1, 1, 1)
    assert (summary["verified"], summary["drift"], summary["failed"], summary["unconfirmed"]) == (1, 0, 0, 2)
    assert summary["unconfirmed_reasons"] == [
        "update of 'a.io': column 'name' is still 'A' after 10 s",
        "delete of 'gone.io': still in the List after 10 s",
    ]
    # The read back waited the whole verify_timeout, in growing pauses, before giving up.
    assert slept == [0.5, 1.0, 2.0, 4.0, 2.5]
    assert ids[1] in {row_id for row_id in emulator.state.lists[TABLE].rows}


def test_acknowledged_writes_the_list_contradicts_are_drift(
    emulator: LiveEmulator, tmp_path: Path, intercepting: Callable[..., httpx.BaseTransport]
) -> None:
    emulator.seed(TABLE, {"domain": "a.io", "name": "A"})

    def something_else(request: httpx.Request) -> httpx.Response | None:
        if request.method != "PATCH":
            return None
        # The service applies another value than the one sent.
        body = json.loads(request.content)
        body["updates"][0]["value"] = "Another"
        headers = {name: value for name, value in request.headers.items() if name != "content-length"}
        with httpx.Client() as direct:
            return direct.request(request.method, request.url, headers=headers, json=body)

    with (
        emulator.client(sleep=lambda seconds: None, transport=intercepting(something_else)) as client,
        pytest.raises(SyncFailedError, match="1 written item") as raised,
    ):
        upsert_rows(client, TABLE, extract(account("a.io", "A2")), key_column="domain", column_map=COLUMN_MAP)

    summary = raised.value.summary
    assert (summary["cells_updated"], summary["verified"], summary["drift"], summary["unconfirmed"]) == (
        1,
        0,
        1,
        0,
    )
    assert summary["drift_reasons"] == ["update of 'a.io': column 'name' is 'Another', expected 'A2'"]


@pytest.mark.parametrize("kind", ["drop_after", "drop_before"])
def test_cell_updates_and_deletes_of_unknown_outcome_are_settled_by_the_read_back(
    emulator: LiveEmulator, tmp_path: Path, kind: str
) -> None:
    emulator.seed(TABLE, {"domain": "a.io", "name": "A"}, {"domain": "gone.io", "name": "Gone"})
    # Every attempt loses its answer: drop_after applied the writes, drop_before did not.
    emulator.faults.add(
        [
            FaultRule(endpoint="PATCH /v1/lists/{tableId}/cells", kind=kind, times=5),
            FaultRule(endpoint="DELETE /v1/lists/{tableId}/rows", kind=kind, times=5),
        ]
    )
    frames = extract(account("a.io", "A2"))

    if kind == "drop_after":
        summary = run(
            emulator, frames, tmp_path, delete_missing=True, settings=SyncSettings(max_delete_fraction=1.0)
        )
        assert (summary["cells_updated"], summary["deleted"], summary["failed"]) == (1, 1, 0)
        assert summary["verified"] == 2
    else:
        with pytest.raises(SyncFailedError) as raised:
            run(
                emulator,
                frames,
                tmp_path,
                delete_missing=True,
                settings=SyncSettings(max_delete_fraction=1.0),
            )
        summary = raised.value.summary
        assert (summary["cells_updated"], summary["deleted"], summary["failed"]) == (0, 0, 2)
        assert all("outcome unknown" in reason for reason in summary["failure_reasons"])
        assert by_domain(emulator)["a.io"]["name"] == "A"


def test_a_row_add_answered_after_the_timeout_is_reread_once_it_has_landed(
    live_emulator: Callable[..., LiveEmulator], intercepting: Callable[..., httpx.BaseTransport]
) -> None:
    # The service applies the add 1.5 s after it was sent; the client gives up after 1 s. Read
    # back at once, the row would look absent and be sent again: the job waits until the request
    # can no longer land (its timeout and a margin), then finds it. All of it in real time.
    emulator = live_emulator(rows_config(unique_domains=False), clock=None)
    late: list[threading.Timer] = []

    def slow_service(request: httpx.Request) -> httpx.Response | None:
        if request.method != "POST" or late:
            return None
        forward = httpx.Request(request.method, request.url, headers=request.headers, content=request.read())

        def land() -> None:
            with httpx.HTTPTransport() as transport:
                transport.handle_request(forward).read()

        late.append(threading.Timer(1.5, land))
        late[0].start()
        time.sleep(1.0)
        raise httpx.ReadTimeout("timed out", request=request)

    with emulator.client(timeout=1.0, transport=intercepting(slow_service)) as client:
        summary = upsert_rows(
            client, TABLE, extract(account("a.io", "A")), key_column="domain", column_map=COLUMN_MAP
        )
    late[0].join()

    assert set(by_domain(emulator)) == {"a.io"}  # by_domain fails on a duplicate
    assert (summary["added"], summary["resent"], summary["failed"]) == (1, 0, 0)


def test_copies_a_lost_add_left_are_deleted_down_to_one(live_emulator: Callable[..., LiveEmulator]) -> None:
    # The add lands, its answer is lost, and the read back finds the key twice (it had landed
    # once before) on a List without unique keys: one row is kept, the other deleted.
    emulator = live_emulator(rows_config(unique_domains=False))
    with emulator.client(sleep=lambda seconds: None) as client:
        current, _ = read_current_rows(client, TABLE, "domain")
        plan = plan_rows_upsert(
            [{"domain": "a.io", "name": "A"}],
            current,
            key_column="domain",
            normalize_key=list_key_normalizer("domain"),
        )
        client.add_rows(TABLE, [{"cells": {"domain": "a.io", "name": "A"}}])
        emulator.faults.add([FaultRule(endpoint=POST_ROWS, kind="drop_after", times=1)])
        outcome = apply_rows_plan(plan, client, TABLE)

    assert [row["domain"] for row in emulator.rows(TABLE)] == ["a.io"]
    assert (outcome.copies_removed, outcome.resent_rows, outcome.failures) == (1, 0, [])


def test_an_enum_label_the_list_stores_as_its_key_is_not_drift(
    emulator: LiveEmulator, tmp_path: Path
) -> None:
    # The List keeps the option's key and shows its label: what the extract wrote is there.
    summary = run(emulator, extract(account("a.io", "A", plan="Team")), tmp_path)

    assert (summary["added"], summary["verified"], summary["drift"], summary["failed"]) == (1, 1, 0, 0)
    assert by_domain(emulator)["a.io"]["plan"] == "team"
