"""sync_people with ``max_memory``: it fails before reading further once the rows read would take too
much, while preparing the extract or reading the List, and only then."""

from __future__ import annotations

import gc
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pytest_mock import MockerFixture

from listsync.cli import main
from listsync.client import ListSyncClient
from listsync.extract.contact_rules import normalize_domain
from listsync.extract.options import Shard
from listsync.operators.people import SyncTargetablePeopleOperator
from listsync.sync.memory import BASE_MEMORY, PEOPLE_COSTS, MemoryLimitError
from listsync.sync.people import sync_people
from listsync.sync.settings import SyncSettings

from ...support import LiveEmulator
from ...support.tenants import PEOPLE_API_KEY as API_KEY
from ...support.tenants import PEOPLE_TABLE as TABLE

COLUMN_MAP = {"domain": "account_domain", "email": "email", "first": "first_name"}
DOMAINS = ("acme.com", "beta.io", "gamma.org")  # the accounts of conftest.py
LIST_PEOPLE = 30
GET_PEOPLE = "GET /v1/lists/{tableId}/targetable-people"


def limit(extract_rows: int, list_people: int, writes: int = 0) -> int:
    """A max_memory that holds exactly this many extract rows and List people, and planned writes."""
    costs = PEOPLE_COSTS
    reading = extract_rows * costs.extract + list_people * costs.listed
    return BASE_MEMORY + max(reading, writes * (costs.written + costs.read_back))


def chunk(first: int, rows: int) -> pd.DataFrame:
    numbers = range(first, first + rows)
    return pd.DataFrame(
        {
            "domain": [DOMAINS[number % 3] for number in numbers],
            "email": [f"new{number}@{DOMAINS[number % 3]}" for number in numbers],
            "first": [f"New{number}" for number in numbers],
        }
    )


@pytest.fixture
def seeded(client: ListSyncClient, emulator: LiveEmulator) -> ListSyncClient:
    """The List holds 30 people, 10 on each account."""
    client.add_people(
        TABLE,
        [
            {
                "accountDomain": domain,
                "people": [{"email": f"p{i}@{domain}", "first_name": f"P{i}"} for i in range(10)],
            }
            for domain in DOMAINS
        ],
    )
    emulator.stats.clear()
    return client


def test_a_sync_under_the_limit_runs(
    seeded: ListSyncClient, write_requests: Callable[[], dict[str, int]]
) -> None:
    summary = sync_people(
        seeded,
        TABLE,
        [chunk(0, 4)],
        COLUMN_MAP,
        page_size=5,
        settings=SyncSettings(max_memory=limit(4, LIST_PEOPLE, writes=4)),
    )

    assert (summary["added"], summary["list_people"]) == (4, LIST_PEOPLE)
    assert write_requests()["add"] == 1


def test_the_writes_are_sent_with_the_plan_out_of_the_cycle_collectors_sight(
    seeded: ListSyncClient, mocker: MockerFixture
) -> None:
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    add = seeded.add_people
    seen: list[tuple[int, int]] = []

    def sent(*args: Any, **kwargs: Any) -> Any:
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))
        return add(*args, **kwargs)

    mocker.patch.object(seeded, "add_people", side_effect=sent)
    summary = sync_people(seeded, TABLE, [chunk(0, 4)], COLUMN_MAP)

    assert summary["added"] == 4
    # Young objects collected every 10,000 allocations, everything alive once planned frozen.
    assert seen and all(young == 10_000 and now_frozen > frozen for young, now_frozen in seen)
    assert (gc.get_threshold(), gc.get_freeze_count()) == (threshold, frozen)


def test_too_many_planned_writes_fail_before_the_first_is_sent_and_a_dry_run_passes(
    seeded: ListSyncClient, write_requests: Callable[[], dict[str, int]]
) -> None:
    # 30 adds take more than reading 30 rows and the 30 List people: sending is the peak.
    too_small = limit(30, LIST_PEOPLE, writes=29)
    assert too_small > limit(30, LIST_PEOPLE)
    refusal = "for 30 extract rows and 30 List people read, and 30 planned writes"
    with pytest.raises(MemoryLimitError, match=refusal):
        sync_people(seeded, TABLE, [chunk(0, 30)], COLUMN_MAP, settings=SyncSettings(max_memory=too_small))
    assert write_requests() == {"add": 0, "patch": 0, "delete": 0}

    dry = sync_people(
        seeded, TABLE, [chunk(0, 30)], COLUMN_MAP, settings=SyncSettings(max_memory=too_small, dry_run=True)
    )
    assert dry["planned"]["add"] == 30


def test_too_big_an_extract_fails_while_prepared_before_the_next_chunk(
    seeded: ListSyncClient, emulator: LiveEmulator, write_requests: Callable[[], dict[str, int]]
) -> None:
    chunks_read = []

    def frames() -> Iterator[pd.DataFrame]:
        for number in range(5):
            chunks_read.append(number)
            yield chunk(number * 3, 3)

    with pytest.raises(MemoryLimitError) as failure:
        sync_people(seeded, TABLE, frames(), COLUMN_MAP, settings=SyncSettings(max_memory=limit(5, 0)))

    message = str(failure.value)
    assert message.startswith("the people sync of tbl_people would need about ")
    # The List is read while the extract is prepared: the guard counts both as they come.
    counted = re.search(
        r"for (\d+) extract rows and (\d+) List people so far, more than max_memory=", message
    )
    assert counted is not None
    extract_rows, list_people = map(int, counted.groups())
    assert extract_rows in (3, 6) and list_people <= LIST_PEOPLE
    assert 'split it with shard="i/n"' in message and message.endswith("or raise max_memory")
    assert chunks_read == list(range(extract_rows // 3))
    assert write_requests() == {"add": 0, "patch": 0, "delete": 0}


def test_too_big_a_list_fails_while_read_before_the_next_page(
    seeded: ListSyncClient, emulator: LiveEmulator, write_requests: Callable[[], dict[str, int]]
) -> None:
    # The List is read while the extract is prepared, each person checked against the extract
    # rows counted by then: it fails at the 13th person once the extract's two rows are counted,
    # at the 15th while they are not yet.
    with pytest.raises(MemoryLimitError, match=r"for [0-2] extract rows and 1[3-5] List people so far"):
        sync_people(
            seeded,
            TABLE,
            [chunk(0, 2)],
            COLUMN_MAP,
            page_size=5,
            settings=SyncSettings(max_memory=limit(2, 12)),
        )

    # The third page held the 13th person; the pages asked for ahead of it are all that followed.
    assert emulator.stats.requests[GET_PEOPLE] <= 3 + seeded.max_in_flight
    assert write_requests() == {"add": 0, "patch": 0, "delete": 0}


def test_a_sharded_sync_counts_its_own_rows_only(seeded: ListSyncClient) -> None:
    shard = Shard(1, 3)
    extract = chunk(0, 12)
    own = sum(shard.holds(normalize_domain(domain)) for domain in extract["domain"])
    own_list = 10 * sum(shard.holds(domain) for domain in DOMAINS)
    assert 0 < own < 12 and own_list < LIST_PEOPLE  # the test needs both shards to hold some

    summary = sync_people(
        seeded,
        TABLE,
        [extract],
        COLUMN_MAP,
        settings=SyncSettings(shard="1/3", max_memory=limit(own, own_list), dry_run=True),
    )
    assert summary["planned"]["add"] == own

    with pytest.raises(MemoryLimitError) as failure:
        sync_people(
            seeded,
            TABLE,
            [extract],
            COLUMN_MAP,
            settings=SyncSettings(shard="1/3", max_memory=limit(own, own_list - 1)),
        )
    message = str(failure.value)
    assert f"for {own} extract rows and {own_list} List people so far" in message
    assert 'split it further with shard="i/n"' in message and "shard over 6 tasks" in message


def test_no_limit_lets_any_sync_run(seeded: ListSyncClient) -> None:
    for off in (None, 0, "off"):
        summary = sync_people(
            seeded, TABLE, [chunk(0, 3)], COLUMN_MAP, settings=SyncSettings(max_memory=off, dry_run=True)
        )
        assert summary["planned"]["add"] == 3


@pytest.fixture
def cli(
    emulator: LiveEmulator, seeded: ListSyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., int]:
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    chunk(0, 3).to_csv(tmp_path / "contacts.csv", index=False)

    def run(*options: str) -> int:
        return main(
            [
                "sync-people",
                *(
                    "--base-url",
                    emulator.url,
                    "--table-id",
                    TABLE,
                    "--source",
                    str(tmp_path / "contacts.csv"),
                ),
                *(f"--map={column}={field}" for column, field in COLUMN_MAP.items()),
                *options,
            ]
        )

    return run


def test_the_command_exits_1_with_one_line(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("--max-memory", "100MiB") == 1

    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    # The List is read while the extract is prepared: whichever counts first fails the run.
    assert re.fullmatch(
        r"listsync sync-people: the people sync of tbl_people would need about 180 MiB for [03] extract "
        r"rows and [01] List people so far, more than max_memory=100 MiB, below the 180 MiB a sync takes "
        r"before its first row: raise max_memory",
        line,
    )


def test_the_command_runs_under_its_limit(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli("--max-memory", "1GiB", "--dry-run") == 0
    assert '"add": 3' in capsys.readouterr().out


@pytest.mark.parametrize("value", ["lots", "-1", "2 GX"])
def test_the_command_refuses_a_bad_size_with_exit_2(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert cli("--max-memory", value) == 2
    assert (
        '--max-memory: max_memory must be a number of bytes or a size such as "2GiB"'
        in capsys.readouterr().err
    )


@pytest.mark.parametrize("value", ["lots", -1, 1.5])
def test_the_operator_refuses_a_bad_size_when_the_dag_is_parsed(value: Any) -> None:
    with pytest.raises(ValueError, match="max_memory must be a number of bytes"):
        SyncTargetablePeopleOperator(
            task_id="t", table_id=TABLE, column_map=COLUMN_MAP, source="x.csv", max_memory=value
        )


def test_the_operator_hands_its_limit_to_the_sync() -> None:
    operator = SyncTargetablePeopleOperator(
        task_id="t", table_id=TABLE, column_map=COLUMN_MAP, source="x.csv", max_memory="2GiB"
    )
    assert operator.sync_settings({}).max_memory == "2GiB"
    default = SyncTargetablePeopleOperator(task_id="d", table_id=TABLE, column_map=COLUMN_MAP, source="x.csv")
    assert default.sync_settings({}).max_memory == "auto"


GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.parametrize(
    ("chosen", "backend"),
    [
        ({}, "system" if GLIBC else "jemalloc"),  # glibc's threshold fixed: Arrow through it
        ({"MALLOC_MMAP_THRESHOLD_": "65536"}, "system"),  # the threshold fixed by the user
        ({"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}, "mimalloc"),  # the user's pool stays
    ],
)
def test_a_sync_allocates_from_a_pool_that_gives_freed_memory_back(
    chosen: dict[str, str], backend: str
) -> None:
    script = (
        "from listsync.sync.memory import use_returning_allocator\n"
        "use_returning_allocator()\n"
        "import pyarrow as pa\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    left = ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_MMAP_THRESHOLD_")
    environment = {name: value for name, value in os.environ.items() if name not in left} | chosen
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == backend


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's; elsewhere freed pages are the allocator's")
def test_pages_freed_between_blocks_still_held_go_back_to_the_system() -> None:
    # 2,000 blocks of 64 KiB come from the C library's heap (under the fixed mmap threshold); all
    # but the last are freed, and the last keeps the heap from shrinking on its own.
    script = (
        "from listsync.sync.memory import give_back_freed_memory, use_returning_allocator\n"
        "use_returning_allocator()\n"
        "def rss():\n"
        "    status = open('/proc/self/status').read()\n"
        "    return int(status.split('VmRSS:')[1].split()[0]) // 1024\n"
        "blocks = [bytearray(b'x' * 65536) for _ in range(2000)]\n"
        "del blocks[:-1]\n"
        "freed = rss()\n"
        "give_back_freed_memory()\n"
        "print(freed, rss())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    freed, given_back = map(int, done.stdout.split())

    assert freed - given_back >= 100  # MiB, of the 125 MiB freed
