"""Fault injection: off by default, seeded, "next N requests" rules, drops before and after writes."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from listsync.emulator import ConnectionDropped, FaultRule, demo_config
from listsync.emulator.config import FaultsConfig
from listsync.emulator.faults import FaultInjector

ROWS = "/v1/lists/tbl_accounts/rows"
ROW_ADDS = "POST /v1/lists/{tableId}/rows"
ONE_ROW = {"rows": [{"cells": {"domain": "acme.com"}}]}


def with_faults(*rules: dict, seed: int | None = 7):
    return demo_config().model_copy(
        update={"faults": FaultsConfig(rules=[FaultRule(**r) for r in rules]), "seed": seed}
    )


def statuses(client, n, path="/v1/lists"):
    return [client.get(path).status_code for _ in range(n)]


def test_faults_are_off_by_default(client):
    assert set(statuses(client, 50)) == {200}


def test_error_probability_is_deterministic_for_a_seed(client_for):
    rule = {"endpoint": "GET /v1/lists", "kind": "error", "status": 503, "probability": 0.3}
    first = statuses(client_for(with_faults(rule)), 200)
    again = statuses(client_for(with_faults(rule)), 200)
    other_seed = statuses(client_for(with_faults(rule, seed=8)), 200)
    assert first == again
    assert first != other_seed
    assert set(first) == {200, 503}
    assert 30 < first.count(503) < 90


def test_injected_error_uses_the_envelope(client_for):
    client = client_for(with_faults({"endpoint": "*", "kind": "error", "status": 502}))
    response = client.post("/v1/events", json={})
    assert response.status_code == 502
    assert response.json() == {"success": False, "error": "Bad gateway"}


def test_times_rule_fires_on_exactly_the_next_n_matching_requests(client, emulator):
    emulator.faults.add([FaultRule(endpoint="GET /v1/lists", kind="error", times=2)])
    assert client.get("/v1/lists/tbl_accounts").status_code == 200  # another endpoint
    assert statuses(client, 4) == [500, 500, 200, 200]
    assert emulator.faults.snapshot() == []


def test_forced_429_storm(client, emulator, fake_clock):
    emulator.faults.add([FaultRule(endpoint="*", kind="rate_limit", times=2, retry_after_seconds=7)])
    batch = client.post("/v1/events/batch", json={"events": [{"signal": "page_visit"}]})
    assert batch.status_code == 429
    assert batch.json() == {"success": False, "error": "Rate limit exceeded for all events in batch"}
    assert batch.headers["Retry-After"] == "7"
    assert batch.headers["X-RateLimit-Reset"] == "2027-01-15T08:00:07.000Z"
    rows = client.post(ROWS, json=ONE_ROW)
    assert (rows.status_code, rows.json()["error"]) == (429, "Rate limit exceeded")
    assert emulator.state.lists["tbl_accounts"].rows == {}
    assert client.post(ROWS, json=ONE_ROW).status_code == 200


def test_latency_is_awaited_through_the_injected_sleep(client, emulator, fake_clock):
    emulator.faults.add([FaultRule(endpoint="GET /v1/lists", kind="latency", latency_seconds=1.5)])
    assert client.get("/v1/lists").status_code == 200
    client.get("/v1/lists/tbl_accounts")
    assert fake_clock.slept == [1.5]


def test_latency_combines_with_a_terminal_fault():
    injector = FaultInjector(
        [
            FaultRule(endpoint="*", kind="latency", latency_seconds=0.5),
            FaultRule(endpoint="GET /v1/lists", kind="error", times=1),
            FaultRule(endpoint="GET /v1/lists", kind="drop_before", times=1),
        ],
        seed=1,
    )
    first = injector.decide("GET /v1/lists")
    assert (first.latency_seconds, first.fault.kind) == (0.5, "error")
    # The drop rule was not consumed by the request the error already took.
    assert injector.decide("GET /v1/lists").fault.kind == "drop_before"
    assert injector.decide("GET /v1/lists").fault is None


def test_drop_before_does_not_apply_the_write_in_process(client, emulator):
    emulator.faults.add([FaultRule(endpoint=ROW_ADDS, kind="drop_before", times=1)])
    with pytest.raises(httpx.RemoteProtocolError):
        client.post(ROWS, json=ONE_ROW)
    assert emulator.state.lists["tbl_accounts"].rows == {}
    assert emulator.stats.snapshot()["endpoints"][ROW_ADDS]["statuses"] == {"dropped": 1}


def test_drop_after_applies_the_write_then_drops_in_process(client, emulator):
    emulator.faults.add([FaultRule(endpoint=ROW_ADDS, kind="drop_after", times=1)])
    with pytest.raises(ConnectionDropped):
        client.post(ROWS, json=ONE_ROW)
    assert [r.cells for r in emulator.state.lists["tbl_accounts"].rows.values()] == [{"domain": "acme.com"}]
    # Sending the same row again is the duplicate a client must guard against.
    assert client.post(ROWS, json=ONE_ROW).status_code == 409


def test_drops_over_a_socket_surface_as_remote_protocol_errors(live_emulator):
    """The "send twice" case over a live server: the runtime API arms the fault, uvicorn drops."""
    emulator = live_emulator()
    with httpx.Client(base_url=emulator.url) as http:
        auth = {"Authorization": "Bearer sk_demo_listsync"}
        armed = http.post(
            "/_emulator/faults",
            json={
                "rules": [
                    {"endpoint": ROW_ADDS, "kind": "drop_before", "times": 1},
                    {"endpoint": ROW_ADDS, "kind": "drop_after", "times": 1},
                ]
            },
        )
        assert [r["remaining"] for r in armed.json()["rules"]] == [1, 1]
        with pytest.raises(httpx.RemoteProtocolError):
            http.post(ROWS, json=ONE_ROW, headers=auth)
        assert emulator.state.lists["tbl_accounts"].rows == {}
        with pytest.raises(httpx.RemoteProtocolError):
            http.post(ROWS, json=ONE_ROW, headers=auth)
        assert len(emulator.state.lists["tbl_accounts"].rows) == 1
        assert http.post(ROWS, json=ONE_ROW, headers=auth).status_code == 409
        assert http.get("/_emulator/faults").json() == {"rules": []}


def test_runtime_fault_api_validates_and_clears(client, emulator):
    bad = client.post("/_emulator/faults", json={"rules": [{"endpoint": "GET /nope", "kind": "error"}]})
    assert bad.status_code == 400
    assert bad.json()["success"] is False
    client.post("/_emulator/faults", json={"rules": [{"endpoint": "*", "kind": "error"}]})
    assert client.get("/v1/lists").status_code == 500
    assert client.delete("/_emulator/faults").json() == {"rules": []}
    assert client.get("/v1/lists").status_code == 200


def test_inspection_endpoints_are_never_faulted(client_for):
    client = client_for(with_faults({"endpoint": "*", "kind": "error"}))
    assert client.get("/_emulator/stats").status_code == 200
    assert client.get("/_emulator/state").status_code == 200


def test_drops_through_asgi_transport_surface_as_remote_protocol_errors(app, emulator):
    async def post_rows() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://emulator") as http:
            await http.post(ROWS, json=ONE_ROW, headers={"Authorization": "Bearer sk_demo_listsync"})

    emulator.faults.add([FaultRule(endpoint=ROW_ADDS, kind="drop_after", times=1)])
    with pytest.raises(httpx.RemoteProtocolError):
        asyncio.run(post_rows())
    assert len(emulator.state.lists["tbl_accounts"].rows) == 1


def test_a_drop_before_over_a_socket_is_a_clean_close_even_with_a_large_unread_body(live_emulator):
    # Closing a socket with request bytes still unread makes the kernel reset the connection,
    # which the client sees as a read or write error instead of "server disconnected".
    big = {"rows": [{"cells": {"domain": f"acme{i}.com" + "x" * 4000}} for i in range(500)]}
    emulator = live_emulator()
    with httpx.Client(base_url=emulator.url) as http:
        auth = {"Authorization": "Bearer sk_demo_listsync"}
        http.post(
            "/_emulator/faults", json={"rules": [{"endpoint": ROW_ADDS, "kind": "drop_before", "times": 5}]}
        )
        for _ in range(5):
            with pytest.raises(httpx.RemoteProtocolError):
                http.post(ROWS, json=big, headers=auth)
        assert emulator.state.lists["tbl_accounts"].rows == {}


def test_a_write_delayed_past_its_clients_timeout_still_lands(live_emulator) -> None:
    # A late write: the client gave up, the service applies the request all the same.
    url = live_emulator(clock=None).url
    rule = {
        "endpoint": "POST /v1/lists/{tableId}/rows",
        "kind": "latency",
        "latency_seconds": 1.0,
        "times": 1,
    }
    httpx.post(f"{url}/_emulator/faults", json={"rules": [rule]}).raise_for_status()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{url}/v1/lists/tbl_accounts/rows",
            json={"rows": [{"cells": {"domain": "late.io"}}]},
            headers={"Authorization": "Bearer sk_demo_listsync"},
            timeout=0.3,
        )
    deadline = time.monotonic() + 5
    rows: list = []
    while not rows and time.monotonic() < deadline:
        time.sleep(0.1)
        rows = httpx.get(f"{url}/_emulator/state").json()["lists"]["tbl_accounts"]["rows"]

    assert [row["cells"]["domain"] for row in rows] == ["late.io"]
