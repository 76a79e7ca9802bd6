"""ListSyncHook: a connection becomes a client; the form; the connection test; the key stays hidden."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from listsync.hooks import ListSyncHook

API_KEY = "sk_live_HOOK_SECRET_987"


def set_connection(monkeypatch, conn_id: str = "listsync_default", **fields) -> None:
    conn = {
        "conn_type": "listsync",
        "host": "http://127.0.0.1:8080",
        "password": API_KEY,
        "extra": {"user_id": "usr_demo", "timeout": 12},
    }
    conn.update(fields)
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def lists_handler(request: httpx.Request) -> httpx.Response:
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    return httpx.Response(200, json={"success": True, "data": [{"id": "tbl_1"}, {"id": "tbl_2"}]})


def test_hook_metadata():
    assert ListSyncHook.conn_name_attr == "listsync_conn_id"
    assert ListSyncHook.default_conn_name == "listsync_default"
    assert ListSyncHook.conn_type == "listsync"
    assert ListSyncHook.hook_name == "ListSync"


def test_client_is_built_from_the_connection_once_and_cached(monkeypatch):
    set_connection(monkeypatch)
    hook = ListSyncHook()

    client = hook.get_client()

    assert client.base_url == "http://127.0.0.1:8080"
    assert client.user_id == "usr_demo"
    assert client._http.timeout.read == 12
    assert hook.get_client() is client
    assert hook.get_conn() is client


def test_connection_id_and_defaults(monkeypatch):
    set_connection(monkeypatch, "other", host="api.example.com", extra={})
    client = ListSyncHook(listsync_conn_id="other").get_client()

    assert client.base_url == "https://api.example.com"
    assert client.user_id is None
    assert client._http.timeout.read == 30


def test_building_the_hook_does_no_io(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_LISTSYNC_DEFAULT", raising=False)
    ListSyncHook()  # no connection exists; only get_client looks it up


def test_a_connection_without_key_is_refused(monkeypatch):
    set_connection(monkeypatch, password=None)
    with pytest.raises(ValueError, match="no password"):
        ListSyncHook().get_client()


def test_test_connection_reports_success(monkeypatch):
    set_connection(monkeypatch)
    ok, message = ListSyncHook(transport=httpx.MockTransport(lists_handler)).test_connection()
    assert ok is True
    assert message == "Connected: 2 List(s) visible"


def test_test_connection_reports_a_refused_key_once_without_leaking_it(monkeypatch):
    set_connection(monkeypatch)
    calls = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(401, json={"success": False, "error": "Invalid API key"})

    ok, message = ListSyncHook(transport=httpx.MockTransport(refuse)).test_connection()

    assert ok is False
    assert message == "GET /v1/lists -> 401: Invalid API key"
    assert API_KEY not in message
    assert len(calls) == 1


def test_the_key_is_registered_with_the_secrets_masker(monkeypatch, mocker):
    set_connection(monkeypatch)
    mask = mocker.patch("airflow.sdk.log.mask_secret")

    ListSyncHook().get_client()

    mask.assert_any_call(API_KEY)


def test_the_key_is_not_in_reprs_or_logs(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    set_connection(monkeypatch)
    hook = ListSyncHook(transport=httpx.MockTransport(lists_handler))

    client = hook.get_client()
    client.list_lists()

    assert API_KEY not in repr(hook)
    assert API_KEY not in repr(client)
    assert API_KEY not in caplog.text


def test_connection_form_comes_from_the_provider_info():
    from listsync import get_provider_info

    (conn_type,) = get_provider_info()["connection-types"]
    assert conn_type["connection-type"] == "listsync"
    assert conn_type["hook-class-name"] == "listsync.hooks.listsync.ListSyncHook"
    assert {name: field["label"] for name, field in conn_type["conn-fields"].items()} == {
        "user_id": "User ID",
        "timeout": "Timeout (seconds)",
    }
    assert conn_type["ui-field-behaviour"]["relabeling"] == {"host": "Base URL", "password": "API key"}
    assert conn_type["ui-field-behaviour"]["hidden-fields"] == ["schema", "port", "login"]
