"""``listsync ingest``: the same flow from the command line, with a checkpoint file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from listsync.cli import main
from listsync.emulator import demo_config, serve_in_thread

from .emulated import API_KEY, INVALID_ROWS, ingested_references, mixed_rows


@pytest.fixture
def base_url() -> Iterator[str]:
    with serve_in_thread(demo_config()) as url:
        yield url


def test_ingest_prints_the_summary_and_a_rerun_resumes_from_the_checkpoint_file(
    base_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = mixed_rows(page_visits=12, seats=5, stages=4)
    extract = tmp_path / "events.csv"
    pd.DataFrame(rows).to_csv(extract, index=False)
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    argv = [
        "ingest",
        "--source", str(extract),
        "--base-url", base_url,
        "--signal-column", "signal",
        "--identity-type-column", "object_type",
        "--identity-id-column", "object_id",
        "--data-column", "payload",
        "--timestamp-column", "occurred_at",
        "--signal-type", "page_visit=Event",
        "--signal-type", "deal_stage=State",
        "--checkpoint", str(tmp_path / "checkpoint.json"),
        "--rejects-path", str(tmp_path / "rejects.jsonl"),
    ]  # fmt: skip

    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    second = json.loads(capsys.readouterr().out)

    assert first["acknowledged"] == 12 + 5 + 4
    assert first["rows_rejected"] == INVALID_ROWS
    # Without a reference column the references are derived, the same on both runs, so the
    # second run finds every event acknowledged; only the unknown signal's events are tried again.
    assert second["resumed_from"] == {"deal_stage": 4, "page_visit": 12, "seats_used": 5}
    assert second["requests"] == first["requests"] + 1  # counters continue from the checkpoint
    assert second["signals"]["not_a_signal"]["rejected_reasons"] == {"Signals not found: not_a_signal": 2}
    assert sorted(ingested_references(base_url).values()) == [1] * 21
    assert all(reference.startswith("ls_") for reference in ingested_references(base_url))
    assert API_KEY not in json.dumps(first)


def test_bad_arguments_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LISTSYNC_API_KEY", raising=False)
    argv = ["ingest", "--source", "x.csv", "--base-url", "http://x", "--identity-id-column", "id"]

    assert main([*argv, "--identity-type", "account"]) == 2
    assert "exactly one of signal" in capsys.readouterr().err

    assert main([*argv, "--signal", "s", "--identity-type", "account", "--api-key", ""]) == 2
    assert "LISTSYNC_API_KEY" in capsys.readouterr().err


@pytest.mark.parametrize("batch_size", ["0", "101"])
def test_a_batch_size_outside_1_to_100_is_a_bad_argument(
    batch_size: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extract = tmp_path / "events.csv"
    pd.DataFrame(mixed_rows(page_visits=1, seats=0, stages=0)).to_csv(extract, index=False)
    argv = [
        "ingest", "--source", str(extract), "--base-url", "http://127.0.0.1:9", "--dry-run",
        "--signal-column", "signal", "--identity-type", "account", "--identity-id-column", "object_id",
        "--batch-size", batch_size,
    ]  # fmt: skip

    assert main(argv) == 2
    assert "--batch-size must be between 1 and 100" in capsys.readouterr().err
