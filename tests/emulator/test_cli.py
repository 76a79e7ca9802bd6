"""``listsync emulator`` starts a server that answers the spec's POST /v1/events."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from listsync.cli import main

# Generous: this bounds a hung start, it does not measure start-up time.
GIVE_UP_AFTER_SECONDS = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_listsync_emulator_answers_a_real_event_post(tmp_path):
    port = free_port()
    command = [str(Path(sys.executable).with_name("listsync")), "emulator", "--port", str(port)]
    command += ["--window-seconds", "60", "--seed", "3"]
    command += ["--fault", '{"endpoint": "GET /v1/lists", "kind": "error", "status": 503}']
    log = (tmp_path / "emulator.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + GIVE_UP_AFTER_SECONDS
        while True:
            assert process.poll() is None, (tmp_path / "emulator.log").read_text()
            try:
                httpx.get(f"{base_url}/_emulator/stats")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the emulator never answered"
                time.sleep(0.05)
        response = httpx.post(
            f"{base_url}/v1/events",
            headers={"Authorization": "Bearer sk_demo_listsync"},
            json={
                "signal": "page_visit",
                "identity": {"type": "account", "id": "acme.com"},
                "reference": "cli",
            },
        )
        assert response.status_code == 200
        body = response.json()
        assert body["success"] is True
        assert uuid.UUID(body["data"]["id"])
        assert {k: body["data"][k] for k in ("signal_id", "schema_version", "status", "reference")} == {
            "signal_id": "sig_pagevisit01",
            "schema_version": None,
            "status": "pending",
            "reference": "cli",
        }
        assert response.headers["X-RateLimit-Limit"] == "100"
        assert response.headers["X-RateLimit-Remaining"] == "99"
        faulted = httpx.get(f"{base_url}/v1/lists", headers={"Authorization": "Bearer sk_demo_listsync"})
        assert (faulted.status_code, faulted.json()["error"]) == (503, "Service unavailable")
    finally:
        process.terminate()
        process.wait(timeout=GIVE_UP_AFTER_SECONDS)
        log.close()


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--window-seconds", "0"], "greater than 0"),
        (["--config", "/nonexistent/emulator.yaml"], "No such file"),
        (["--fault", '{"endpoint": "GET /v9", "kind": "error"}'], "unknown endpoint"),
        (["--fault", "error"], "Expecting value"),
    ],
)
def test_invalid_configuration_exits_2_without_serving(capsys, argv, reason):
    assert main(["emulator", *argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith("listsync emulator: invalid configuration:")
    assert reason in error
