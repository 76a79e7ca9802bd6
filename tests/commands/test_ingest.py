"""``listsync ingest``: the same flow from the command line, with a checkpoint file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from listsync.cli import main

from ..support import LiveEmulator
from ..support.signal_data import API_KEY, INVALID_ROWS, ingested_references, mixed_rows


@pytest.fixture
def base_url(live_emulator: Callable[..., LiveEmulator]) -> str:
    """The demo tenant on the wall clock, which the command's client keeps."""
    return live_emulator(clock=None).url


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


def page_visits(path: Path, count: int) -> list[str]:
    """An extract of ``count`` page visits with references; returns the references."""
    references = [f"pv-{i:05d}" for i in range(count)]
    frame = pd.DataFrame(
        {"ref": references, "account": [f"acct-{i % 17}" for i in range(count)], "path": "/pricing"}
    )
    frame.to_csv(path, index=False)
    return references


def ingest_argv(extract: Path, base_url: str, *more: str) -> list[str]:
    return [
        "ingest", "--source", str(extract), "--base-url", base_url, "--signal", "page_visit",
        "--identity-type", "account", "--identity-id-column", "account", "--data-columns", "path",
        "--reference-column", "ref", "--signal-type", "page_visit=Event", *more,
    ]  # fmt: skip


def test_ingest_resumes_by_default_and_a_rerun_after_success_sends_nothing(
    base_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    listsync_state_dir: Path,
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    references = page_visits(tmp_path / "visits.csv", 30)
    argv = ingest_argv(tmp_path / "visits.csv", base_url)

    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    captured = capsys.readouterr()
    second = json.loads(captured.out)

    assert (first["acknowledged"], first["resumed_from"]) == (30, None)
    assert second["resumed_from"] == {"page_visit": 30}
    assert "resuming from 30 events acknowledged by earlier runs" in captured.err
    assert "nothing left to send" in captured.err and "run with --fresh" in captured.err
    assert ingested_references(base_url) == dict.fromkeys(references, 1)
    (checkpoint,) = listsync_state_dir.glob("ingest-*.json")

    # --fresh sends everything again, on purpose; --no-checkpoint keeps nothing.
    assert main([*argv, "--fresh"]) == 0
    assert json.loads(capsys.readouterr().out)["resumed_from"] is None
    assert ingested_references(base_url) == dict.fromkeys(references, 2)
    checkpoint.unlink()
    assert main([*argv, "--no-checkpoint"]) == 0
    assert list(listsync_state_dir.glob("ingest-*.json")) == []


def test_each_extract_and_service_has_its_own_checkpoint(
    base_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listsync_state_dir: Path
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    page_visits(tmp_path / "a.csv", 3)
    page_visits(tmp_path / "b.csv", 3)

    for name in ("a.csv", "b.csv"):
        assert main(ingest_argv(tmp_path / name, base_url)) == 0
    # Another mapping of the same file makes other events.
    assert main([*ingest_argv(tmp_path / "a.csv", base_url), "--identity-type", "contact"]) == 0

    assert len(list(listsync_state_dir.glob("ingest-*.json"))) == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--checkpoint", "/proc/listsync/checkpoint.json"], "cannot write the checkpoint /proc/listsync"),
        (["--no-checkpoint", "--fresh"], "--no-checkpoint keeps no checkpoint"),
    ],
    ids=["unwritable", "contradiction"],
)
def test_a_checkpoint_that_cannot_be_kept_is_refused_before_anything_is_sent(
    base_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    options: list[str],
    message: str,
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    page_visits(tmp_path / "visits.csv", 3)

    assert main([*ingest_argv(tmp_path / "visits.csv", base_url), *options]) == 2

    assert message in capsys.readouterr().err
    assert ingested_references(base_url) == {}


def test_a_corrupt_checkpoint_names_its_file_and_the_way_out(
    base_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    page_visits(tmp_path / "visits.csv", 3)
    (tmp_path / "cp.json").write_text('{"listsync_ingest_checkpoint": ', encoding="utf-8")

    status = main(
        [*ingest_argv(tmp_path / "visits.csv", base_url), "--checkpoint", str(tmp_path / "cp.json")]
    )

    err = capsys.readouterr().err
    assert status == 1
    assert f"the checkpoint {tmp_path / 'cp.json'} cannot be read" in err
    assert "--fresh" in err
    assert ingested_references(base_url) == {}


def test_ingest_fails_when_the_service_refuses_every_event(
    base_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    page_visits(tmp_path / "visits.csv", 3)
    argv = ingest_argv(tmp_path / "visits.csv", base_url)
    argv[argv.index("page_visit")] = "legacy_score"  # an inactive signal: 404 for every event

    assert main(argv) == 1

    captured = capsys.readouterr()
    assert json.loads(captured.out)["rejected_by_service"] == 3
    assert "the service refused every event" in captured.err
