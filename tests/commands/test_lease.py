"""Two command-line syncs of one List at once: the lease lets one write, the other waits and finds
nothing to write, or refuses naming the holder; a holder killed with SIGKILL holds the next run back
no longer than the lease's expiry.

The emulator plays a hosted service (reads lag writes by a second), and a third of the people have
only a phone number or only a name, which the service does not merge on add (§4.4): two writers
that overlap put those people in the List twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from listsync.emulator import EmulatorConfig, FaultRule, ListConfig
from listsync.sync.lease import Lease
from listsync.sync.state import StateDirectory

from ..support import LiveEmulator
from ..support.tenants import ROWS_COLUMNS

API_KEY = "sk_test_lease"
USER = "usr_lease"
ACCOUNTS = [f"acct{i}.com" for i in range(12)]
OFFSETS = (0.0, 0.2, 1.0)  # seconds between the two starts, one List each
LAG = 1.0


def contacts() -> str:
    lines = ["domain,email,phone,first,last"]
    for i in range(48):
        domain = ACCOUNTS[i % len(ACCOUNTS)]
        if i % 3 == 0:
            lines.append(f"{domain},,+1415555{i:04d},Pat{i},")  # a phone alone
        elif i % 3 == 1:
            lines.append(f"{domain},,,Ann{i},Lee{i}")  # a name alone
        else:
            lines.append(f"{domain},p{i}@{domain},,Em{i},")
    return "\n".join(lines) + "\n"


def accounts() -> str:
    return "domain,name\n" + "".join(f"{domain},Account {domain}\n" for domain in ACCOUNTS)


def tables(job: str) -> list[str]:
    return [f"tbl_{job}_{i}" for i in range(len(OFFSETS))]


@pytest.fixture
def emulator(live_emulator: Callable[..., LiveEmulator]) -> LiveEmulator:
    lists = [
        ListConfig.model_validate(
            {"id": table, "columns": ROWS_COLUMNS, "account_column": "domain", "unique_domains": True}
        )
        for job in ("people", "rows")
        for table in tables(job)
    ]
    config = EmulatorConfig(
        secret_keys=[API_KEY],
        users=[USER],
        lists=lists,
        profile="hosted",
        dialect_overrides={"lag_seconds": LAG},
    )
    served = live_emulator(config, clock=None)
    for table in tables("people"):
        served.seed(table, *({"domain": domain} for domain in ACCOUNTS))
    return served


def command(job: str, table: str, base_url: str, folder: Path, *options: str) -> list[str]:
    if job == "rows":
        (folder / "accounts.csv").write_text(accounts(), encoding="utf-8")
        return [
            sys.executable, "-m", "listsync.cli", "upsert-rows", "--base-url", base_url, "--user-id", USER,
            "--table-id", table, "--key-column", "domain", "--source", str(folder / "accounts.csv"),
            "--map", "domain=domain", "--map", "name=name", *options,
        ]  # fmt: skip
    (folder / "contacts.csv").write_text(contacts(), encoding="utf-8")
    return [
        sys.executable, "-m", "listsync.cli", "sync-people", "--base-url", base_url, "--user-id", USER,
        "--table-id", table, "--source", str(folder / "contacts.csv"), "--mode", job,
        "--map", "domain=account_domain", "--map", "email=email", "--map", "phone=phone_number",
        "--map", "first=first_name", "--map", "last=last_name", *options,
    ]  # fmt: skip


def start(argv: list[str], state_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "LISTSYNC_API_KEY": API_KEY, "LISTSYNC_STATE_DIR": str(state_dir)}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    out, err = process.communicate(timeout=120)
    return process.returncode, json.loads(out) if out.strip() else {}, err


def in_list(base_url: str, table: str, job: str) -> Counter[str]:
    """Each person (account and identity) or row (domain) the List holds, with its count."""
    held = httpx.get(f"{base_url}/_emulator/state").json()["lists"][table]["rows"]
    rows = held.values() if isinstance(held, dict) else held
    if job == "rows":
        return Counter(row["cells"]["domain"] for row in rows)
    return Counter(
        f"{row['cells']['domain']}|{person['first_name']}" for row in rows for person in row.get("people", [])
    )


@pytest.mark.parametrize(
    ("job", "where"),
    [
        ("mirror", "state folder"),
        ("upsert", "state folder"),
        ("rows", "state folder"),
        ("mirror", "object storage"),
    ],
)
def test_two_runs_at_once_write_once(job: str, where: str, emulator: LiveEmulator, tmp_path: Path) -> None:
    pairs = []
    for offset, table in zip(OFFSETS, tables("rows" if job == "rows" else "people"), strict=True):
        folder = tmp_path / table
        folder.mkdir()
        options = (
            [] if where == "state folder" else ["--state-path", f"file://{tmp_path}/bucket/{table}.state"]
        )
        argv = command(job, table, emulator.url, folder, *options)
        pairs.append((offset, table, argv))

    def run_pair(offset: float, argv: list[str], results: list[Any]) -> None:
        first = start(argv, tmp_path / "state")
        time.sleep(offset)
        second = start(argv, tmp_path / "state")
        results.extend([finish(first), finish(second)])

    outcomes: dict[str, list[Any]] = {table: [] for _, table, _ in pairs}
    threads = [threading.Thread(target=run_pair, args=(o, a, outcomes[t])) for o, t, a in pairs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    expected = len(ACCOUNTS) if job == "rows" else 48
    for offset, table, _ in pairs:
        (status_1, summary_1, err_1), (status_2, summary_2, err_2) = outcomes[table]
        assert (status_1, status_2) == (0, 0), (err_1, err_2)
        totals = sorted([summary_1["requests"]["total"], summary_2["requests"]["total"]])
        assert totals[0] == 0 and totals[1] > 0, (offset, totals)
        held = in_list(emulator.url, table, job)
        assert len(held) == expected and set(held.values()) == {1}, (offset, held)
        if offset == 0.0:
            # Started together: one waited for the other, and says for whom.
            waited = [s for s in (summary_1, summary_2) if s["lease_waited_for"]]
            assert len(waited) == 1 and waited[0]["requests"]["total"] == 0
            assert (
                f"listsync {'upsert-rows' if job == 'rows' else 'sync-people'} on "
                in waited[0]["lease_waited_for"]
            )
            assert waited[0]["lease_wait_seconds"] > 0


def test_a_short_lock_timeout_refuses_naming_the_holder(emulator: LiveEmulator, tmp_path: Path) -> None:
    table = tables("people")[0]
    namespace = emulator.url.rstrip("/")
    store = StateDirectory(tmp_path / "state", namespace).lease(f"people-{table}-all")
    emulator.stats.clear()

    with Lease(store, "DAG crm_to_list_nightly, run scheduled__1, task sync, try 1 on worker-7"):
        process = start(
            command("mirror", table, emulator.url, tmp_path, "--lock-timeout", "1"), tmp_path / "state"
        )
        status, summary, err = finish(process)

    assert status == 1 and summary == {}
    assert (
        "is being written by DAG crm_to_list_nightly, run scheduled__1, task sync, try 1 on worker-7" in err
    )
    assert f"to clear it at once, delete the file {store.where()}" in err
    assert sum(emulator.stats.requests.values()) == 0  # not even a read


def test_a_dry_run_takes_no_lease_and_says_who_held_it(emulator: LiveEmulator, tmp_path: Path) -> None:
    table = tables("people")[0]
    store = StateDirectory(tmp_path / "state", emulator.url.rstrip("/")).lease(f"people-{table}-all")

    with Lease(store, "the nightly run"):
        process = start(
            command("mirror", table, emulator.url, tmp_path, "--dry-run", "--lock-timeout", "0"),
            tmp_path / "state",
        )
        status, summary, err = finish(process)

    assert status == 0, err
    assert summary["lease_held_by"].startswith("the nightly run since ")
    assert summary["lease_wait_seconds"] == 0


def test_a_holder_killed_mid_write_holds_the_next_run_back_no_longer_than_the_expiry(
    live_emulator: Callable[..., LiveEmulator], tmp_path: Path
) -> None:
    expiry = 3.0
    table = tables("people")[0]
    config = EmulatorConfig(
        secret_keys=[API_KEY],
        users=[USER],
        lists=[
            ListConfig.model_validate(
                {"id": table, "columns": ROWS_COLUMNS, "account_column": "domain", "unique_domains": True}
            )
        ],
        profile="hosted",
        dialect_overrides={"lag_seconds": LAG},
    )
    slow_adds = FaultRule(
        endpoint="POST /v1/lists/{tableId}/targetable-people", kind="latency", latency_seconds=0.5
    )
    emulator = live_emulator(config, clock=None, faults=[slow_adds])
    emulator.seed(table, *({"domain": domain} for domain in ACCOUNTS))
    argv = command(
        "mirror", table, emulator.url, tmp_path, "--lease-expiry", str(expiry), "--chunk-size", "add=4"
    )

    holder = start(argv, tmp_path / "state")
    deadline = time.monotonic() + 60
    while emulator.stats.requests["POST /v1/lists/{tableId}/targetable-people"] < 2:
        assert time.monotonic() < deadline and holder.poll() is None
        time.sleep(0.05)
    holder.send_signal(signal.SIGKILL)
    holder.communicate()  # its pipes closed too
    killed_at = time.monotonic()

    status, summary, err = finish(start(argv, tmp_path / "state"))

    assert status == 0, err
    assert summary["lease_waited_for"] is not None and "sync-people on" in summary["lease_waited_for"]
    assert summary["lease_wait_seconds"] <= expiry + 1
    assert time.monotonic() - killed_at < 60
    held = in_list(emulator.url, table, "mirror")
    assert len(held) == 48 and set(held.values()) == {1}, held
