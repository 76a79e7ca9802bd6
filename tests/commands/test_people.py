"""``listsync sync-people``: the people sync from the command line, against the emulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from listsync.cli import main
from listsync.emulator import FaultRule

from ..support import LiveEmulator, read_jsonl
from ..support.tenants import ACCOUNTS, people_in_list, people_writes
from ..support.tenants import PEOPLE_API_KEY as API_KEY
from ..support.tenants import PEOPLE_TABLE as TABLE

EXTRACT = "domain,email,first\nacme.com,Ann@Acme.com,Ann\nbeta.io,cy@beta.io,Cy\nbeta.io,bad,Dee\n"
MAPS = ["--map", "domain=account_domain", "--map", "email=email", "--map", "first=first_name"]


@pytest.fixture
def cli(
    people_emulator: LiveEmulator, people_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., int]:
    """Run ``listsync sync-people`` on an extract file with the emulator's URL and key."""
    monkeypatch.setenv("LISTSYNC_API_KEY", API_KEY)
    (tmp_path / "contacts.csv").write_text(EXTRACT, encoding="utf-8")

    def run(*options: str, extract: str = "contacts.csv") -> int:
        source = str(tmp_path / extract)
        return main(
            [
                "sync-people",
                "--base-url",
                people_emulator.url,
                "--table-id",
                TABLE,
                "--source",
                source,
                *MAPS,
                *options,
            ]
        )

    return run


def test_dry_run_prints_the_plan_summary_and_writes_nothing(
    cli: Callable[..., int],
    capsys: pytest.CaptureFixture[str],
    people_emulator: LiveEmulator,
    tmp_path: Path,
) -> None:
    status = cli(
        "--dry-run", "--plan-path", str(tmp_path / "plan.jsonl"), "--report-path", str(tmp_path / "run.html")
    )

    summary = json.loads(capsys.readouterr().out)
    assert summary["report_path"] == str(tmp_path / "run.html")
    assert "Dry run: planned, nothing written" in (tmp_path / "run.html").read_text(encoding="utf-8")
    assert status == 0
    assert summary["planned"] == {"add": 2, "patch": 0, "delete": 0, "remove_copy": 0}
    assert (summary["rejected"], summary["dry_run"]) == (1, True)
    assert len((tmp_path / "plan.jsonl").read_text().splitlines()) == 2
    assert people_writes(people_emulator) == {"add": 0, "patch": 0, "delete": 0}


def test_a_sync_writes_and_a_second_one_finds_nothing_to_do(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], people_emulator: LiveEmulator
) -> None:
    assert cli("--chunk-size", "1", "--chunk-size", "delete=10") == 0
    first = json.loads(capsys.readouterr().out)

    assert cli() == 0
    second = json.loads(capsys.readouterr().out)

    assert (first["added"], first["requests"]["add"]) == (2, 2)
    assert (second["unchanged"], second["requests"]["total"]) == (2, 0)
    assert [p["email"] for p in people_in_list(people_emulator)["acme.com"]] == ["ann@acme.com"]


def test_a_sync_keeps_its_state_in_the_state_folder_unless_told_otherwise(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], listsync_state_dir: Path, tmp_path: Path
) -> None:
    assert cli() == 0
    kept = json.loads(capsys.readouterr().out)["state"]
    assert [path.name for path in listsync_state_dir.iterdir()] == [Path(kept).name]
    assert Path(kept).name.startswith(f"people-{TABLE}-all-")

    assert cli("--state-path", str(tmp_path / "mine.state")) == 0
    assert json.loads(capsys.readouterr().out)["state"] == str(tmp_path / "mine.state")
    assert (tmp_path / "mine.state").exists()

    assert cli("--no-state") == 0
    assert json.loads(capsys.readouterr().out)["state"] is None

    # Another region for phone numbers is another mapping: a state of its own.
    assert cli("--default-region", "GB") == 0
    assert len(list(listsync_state_dir.iterdir())) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--verify-timeout", "-1"], "--verify-timeout must be a number of seconds, 0 or more"),
        (["--visibility-window", "nan"], "--visibility-window must be a number of seconds"),
    ],
)
def test_bad_state_settings_exit_2(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    assert cli(*options) == 2
    assert message in capsys.readouterr().err


def test_unsafe_deletes_exit_1_with_the_reason(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cli() == 0
    capsys.readouterr()
    (tmp_path / "only_ann.csv").write_text(
        "domain,email,first\nacme.com,ann@acme.com,Ann\n", encoding="utf-8"
    )

    status = cli("--mode", "mirror", "--delete-scope", "list", extract="only_ann.csv")

    assert status == 1
    assert "Refusing to delete 1 of 2 people" in capsys.readouterr().err


def test_people_that_fail_print_the_summary_and_exit_1(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "unknown.csv").write_text("domain,email,first\nnowhere.example,a@nowhere.example,A\n")

    status = cli(extract="unknown.csv")

    captured = capsys.readouterr()
    assert status == 1
    [reason] = json.loads(captured.out)["failure_reasons"]
    assert reason.startswith("Account not found: nowhere.example (") and "account rows first" in reason
    assert "1 item(s) failed" in captured.err
    assert cli("--no-fail-on-error", extract="unknown.csv") == 0


def test_people_that_fail_permanently_are_named_in_the_outcomes_file_and_no_rerun_is_advised(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], people_emulator: LiveEmulator, tmp_path: Path
) -> None:
    (tmp_path / "unknown.csv").write_text(
        "domain,email,first\nnowhere.example,a@nowhere.example,A\nnowhere.example,b@nowhere.example,B\n"
        "acme.com,c@acme.com,C\n"
    )
    outcomes, database = tmp_path / "outcomes.jsonl", tmp_path / "history.db"
    history = ["--history-table", "runs", "--history-url", f"sqlite:///{database}"]

    status = cli(
        "--outcomes-path",
        str(outcomes),
        *history,
        "--history-outcomes-table",
        "outcomes",
        extract="unknown.csv",
    )

    err = capsys.readouterr().err
    assert status == 1
    assert "2 failed permanently (2 x Account not found: nowhere.example" in err
    assert "write the account rows first" in err and str(outcomes) in err
    assert "re-run" not in err.lower() and "transient" not in err
    # The people named are those whose account the List has no row for.
    lines = read_jsonl(outcomes)
    listed = people_in_list(people_emulator)
    assert sorted(line["identity"] for line in lines) == [
        f"email:{email}"
        for email in ("a@nowhere.example", "b@nowhere.example")
        if "nowhere.example" not in listed
    ]
    assert {(line["outcome"], line["status"], line["curable"]) for line in lines} == {("failed", 404, False)}
    with sa.create_engine(f"sqlite:///{database}").connect() as conn:
        copied = conn.execute(
            sa.text("select identity, status, curable from outcomes order by identity")
        ).all()
    assert [tuple(row) for row in copied] == [(line["identity"], 404, 0) for line in lines]


def test_people_that_fail_on_transient_errors_are_to_be_retried_by_a_rerun(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], people_emulator: LiveEmulator, tmp_path: Path
) -> None:
    people_emulator.faults.add(
        [FaultRule(endpoint="POST /v1/lists/{tableId}/targetable-people", kind="error")]
    )

    status = cli("--verify-timeout", "0", "--no-fail-on-error")

    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert status == 0
    # The two people of the extract are not in the List: a re-run may add them.
    assert people_in_list(people_emulator) == {domain: [] for domain in ACCOUNTS}
    assert (summary["failed"], summary["failed_curable"], summary["failed_permanent"]) == (2, 2, 0)
    assert "2 failed on transient errors (" in captured.err and "-> 500: " in captured.err
    assert "re-run to retry them" in captured.err and "permanently" not in captured.err
    lines = read_jsonl(summary["outcomes_path"])
    assert {(line["identity"], line["status"], line["curable"]) for line in lines} == {
        ("email:ann@acme.com", 500, True),
        ("email:cy@beta.io", 500, True),
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--sql", "select 1"], "give --source FILE, or --sql QUERY with --sql-url URL"),
        (["--chunk-size", "0"], "between 1 and 500"),
    ],
)
def test_bad_arguments_exit_2(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], options: list[str], message: str
) -> None:
    assert cli(*options) == 2
    assert message in capsys.readouterr().err


def test_a_missing_key_is_a_clear_error(
    cli: Callable[..., int], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LISTSYNC_API_KEY")

    assert cli() == 2
    assert "set $LISTSYNC_API_KEY" in capsys.readouterr().err


def test_a_malformed_mapping_is_refused_by_the_parser(cli: Callable[..., int]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli("--map", "no_equals_sign")
    assert caught.value.code == 2
