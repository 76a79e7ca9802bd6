"""upsert_rows with ``shard="i/n"``: the n shards, run one after another, do what the whole upsert does.

The List holds twenty keyed rows: the extract keeps some, changes some, drops some (deleted with
``delete_missing``) and adds new keys, with duplicates and rows rejected for their key. Four
shards must leave the List as the unsharded upsert would, write each planned item once, and
account for every row once; ``listsync upsert-rows --shard`` runs one shard and refuses a bad one.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from listsync.cli import main
from listsync.extract.sources import read_extract
from listsync.sync.rows import upsert_rows
from listsync.sync.settings import SyncSettings
from listsync.sync.steps import combine_summaries

from ...support import LiveEmulator, read_jsonl
from ...support.tenants import ROWS_SECRET as SECRET
from ...support.tenants import ROWS_TABLE as TABLE
from ...support.tenants import ROWS_USER as USER

COLUMN_MAP = {"Domain": "domain", "Name": "name"}
SHARDS = 4
KEPT, CHANGED, DROPPED, NEW = range(0, 5), range(5, 10), range(10, 20), range(20, 30)


def extract_text() -> str:
    lines = ["Domain,Name"]
    lines += [f"k{number}.example,Kept {number}" for number in KEPT]
    lines += [f"https://WWW.k{number}.example/,Renamed {number}" for number in CHANGED]
    lines += [f"k{number}.example,New {number}" for number in NEW]
    lines += ["k0.example,Kept 0", "k20.example,Other 20"]  # a duplicate, and a clash with a new key
    lines += ["not a domain!,Bad", ",Empty"]  # keys no shard can normalise
    return "\n".join(lines) + "\n"


@pytest.fixture
def source(emulator: LiveEmulator, tmp_path: Path) -> Path:
    emulator.seed(
        TABLE, *({"domain": f"k{number}.example", "name": f"Kept {number}"} for number in range(20))
    )
    path = tmp_path / "accounts.csv"
    path.write_text(extract_text(), encoding="utf-8")
    return path


def run(emulator: LiveEmulator, source: Path, folder: Path, name: str, **settings: Any) -> dict[str, Any]:
    with emulator.client(sleep=lambda seconds: None) as client:
        return upsert_rows(
            client,
            TABLE,
            read_extract(source),
            key_column="domain",
            column_map=COLUMN_MAP,
            delete_missing=True,
            settings=SyncSettings(
                max_delete_fraction=1.0,
                fail_on_error=False,
                rejects_path=folder / f"rejects-{name}.jsonl",
                plan_path=folder / f"plan-{name}.jsonl",
                **settings,
            ),
        )


def lines(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path) if path.exists() else []


def test_four_shards_one_after_another_do_what_the_whole_upsert_does(
    emulator: LiveEmulator, source: Path, tmp_path: Path
) -> None:
    whole = run(emulator, source, tmp_path, "whole", dry_run=True)

    shards = [
        run(emulator, source, tmp_path, str(index), shard=f"{index}/{SHARDS}") for index in range(SHARDS)
    ]

    for index, summary in enumerate(shards):
        assert summary["shard"] == f"{index}/{SHARDS}"
        assert summary["read"] == whole["read"] == len(extract_text().splitlines()) - 1
        assert summary["read"] == sum(
            summary[name] for name in ("passed", "rejected", "duplicates", "other_shards")
        )
        assert sum(summary["planned"].values()) > 0  # each shard had keys of its own
    for name in ("passed", "rejected", "duplicates", "list_rows"):
        assert sum(summary[name] for summary in shards) == whole[name], name
    rejected = Counter(
        entry["row"] for index in range(SHARDS) for entry in lines(tmp_path / f"rejects-{index}.jsonl")
    )
    assert rejected == Counter(entry["row"] for entry in lines(tmp_path / "rejects-whole.jsonl"))
    assert set(rejected.values()) == {1} and len(rejected) == 3
    # Each planned item was written by one shard; together they wrote what the whole planned.
    items = Counter(
        (entry["action"], entry["key"])
        for index in range(SHARDS)
        for entry in lines(tmp_path / f"plan-{index}.jsonl")
    )
    assert items == Counter((entry["action"], entry["key"]) for entry in lines(tmp_path / "plan-whole.jsonl"))
    assert set(items.values()) == {1}
    written = {
        name: sum(summary[name] for summary in shards) for name in ("added", "cells_updated", "deleted")
    }
    assert written == {
        "added": whole["planned"]["add_rows"],
        "cells_updated": whole["planned"]["update_cells"],
        "deleted": whole["planned"]["delete_rows"],
    }
    assert written == {"added": len(NEW), "cells_updated": len(CHANGED), "deleted": len(DROPPED)}

    # The List is the whole upsert's: run unsharded now, it has nothing left to write.
    after = run(emulator, source, tmp_path, "after")
    assert (after["requests"]["total"], after["unchanged"]) == (0, len(KEPT) + len(CHANGED) + len(NEW))
    assert sorted(row["domain"] for row in emulator.rows(TABLE)) == sorted(
        f"k{number}.example" for number in [*KEPT, *CHANGED, *NEW]
    )

    combined = combine_summaries(shards)
    assert (combined["added"], combined["deleted"], combined["list_rows"]) == (10, 10, 20)
    assert (combined["read"], combined["other_shards"]) == (whole["read"], 0)
    assert combined["passed"] + combined["rejected"] + combined["duplicates"] == whole["read"]


def cli(emulator: LiveEmulator, source: Path, *extra: str) -> int:
    return main(
        [
            "upsert-rows",
            "--base-url",
            emulator.url,
            "--user-id",
            USER,
            "--api-key",
            SECRET,
            "--table-id",
            TABLE,
            "--key-column",
            "domain",
            "--source",
            str(source),
            "--map",
            "Domain=domain",
            "--map",
            "Name=name",
            *extra,
        ]
    )


def test_the_command_runs_one_shard(
    emulator: LiveEmulator, source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(emulator, source, "--shard", "1/4", "--dry-run") == 0

    summary = json.loads(capsys.readouterr().out)
    assert summary["shard"] == "1/4"
    assert 0 < summary["other_shards"] < summary["read"]


@pytest.mark.parametrize("shard", ["4/4", "1/0", "a/4"])
def test_the_command_refuses_a_bad_shard_with_exit_status_2(
    emulator: LiveEmulator, source: Path, capsys: pytest.CaptureFixture[str], shard: str
) -> None:
    assert cli(emulator, source, "--shard", shard) == 2

    error = capsys.readouterr().err
    assert (
        f'--shard: shard must be "i/n" with 0 <= i < n, such as "0/4" (the first of four); got \'{shard}\''
        in error
    )
    assert sum(emulator.stats.requests.values()) == 0
