"""The shared plan helpers: plan file, delete safety, progress logging, summary."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from listsync.extract.rejects import Rejects, TooManyRejectsError
from listsync.files import write_json_lines
from listsync.sync.steps import (
    MAX_FAILURE_REASONS,
    ProgressLogger,
    UnsafeDeleteError,
    build_summary,
    check_delete_safety,
    prepare_with_rejects,
    write_requested_plan,
)
from listsync.sync.summary import PeopleSummary

from ...support import read_jsonl

ENTRIES: list[dict[str, Any]] = [
    {"action": "add", "account_domain": "acme.com", "identity": "email:ann@acme.com"},
    {
        "action": "patch",
        "account_domain": "acme.com",
        "identity": "email:bob@acme.com",
        "changes": {"title": {"before": "CTO", "after": "Ünïcode CEO"}},
    },
]


def test_plan_file_is_json_lines_in_order(tmp_path: Path) -> None:
    path = write_json_lines(ENTRIES, tmp_path / "nested" / "plan.jsonl")

    assert path == str(tmp_path / "nested" / "plan.jsonl")
    assert read_jsonl(path) == ENTRIES


def test_plan_file_without_path_goes_to_a_temporary_file() -> None:
    path = write_json_lines(iter(ENTRIES), prefix="listsync-people-plan-")

    try:
        assert Path(path).name.startswith("listsync-people-plan-")
        assert path.endswith(".jsonl")
        assert len(Path(path).read_text(encoding="utf-8").splitlines()) == 2
    finally:
        Path(path).unlink()


def test_plan_file_accepts_an_object_with_open(tmp_path: Path) -> None:
    class Storage:
        """Stands in for ObjectStoragePath: only ``open`` and ``str``."""

        def __init__(self, real: Path) -> None:
            self.real = real

        def open(self, mode: str = "r"):  # type: ignore[no-untyped-def]
            return self.real.open(mode, encoding="utf-8")

        def __str__(self) -> str:
            return f"file://{self.real}"

    path = write_json_lines([], Storage(tmp_path / "empty.jsonl"))

    assert path == f"file://{tmp_path / 'empty.jsonl'}"
    assert (tmp_path / "empty.jsonl").read_text() == ""


@pytest.mark.parametrize(
    ("deletes", "total", "source_rows", "fraction"),
    [
        (0, 0, 0, 0.1),  # nothing to delete: an empty extract is harmless then
        (0, 100, 0, 0.0),
        (10, 100, 90, 0.1),  # exactly at the limit
        (1, 1, 5, 1.0),
    ],
)
def test_safe_deletes_pass(deletes: int, total: int, source_rows: int, fraction: float) -> None:
    check_delete_safety(
        planned_deletes=deletes, current_total=total, source_rows=source_rows, max_delete_fraction=fraction
    )


def test_deletes_above_the_fraction_are_refused_with_numbers_and_parameter() -> None:
    with pytest.raises(UnsafeDeleteError) as caught:
        check_delete_safety(planned_deletes=11, current_total=100, source_rows=89, max_delete_fraction=0.1)

    message = str(caught.value)
    assert "11 of 100 people" in message
    assert "11.0%" in message
    assert "max_delete_fraction=0.1" in message
    assert "at least 0.11" in message
    assert (caught.value.planned_deletes, caught.value.current_total, caught.value.source_rows) == (
        11,
        100,
        89,
    )


def test_the_needed_fraction_is_rounded_up_so_it_suffices() -> None:
    with pytest.raises(UnsafeDeleteError, match=r"at least 0\.334") as caught:
        check_delete_safety(planned_deletes=1, current_total=3, source_rows=2, max_delete_fraction=0.2)
    # The advice in the message really does allow the deletes.
    check_delete_safety(planned_deletes=1, current_total=3, source_rows=2, max_delete_fraction=0.334)
    assert caught.value.planned_deletes == 1


def test_deletes_from_an_empty_extract_are_refused_whatever_the_fraction() -> None:
    with pytest.raises(UnsafeDeleteError, match="no valid rows"):
        check_delete_safety(planned_deletes=5, current_total=5, source_rows=0, max_delete_fraction=1.0)


def test_message_uses_the_callers_noun_and_parameter_name() -> None:
    with pytest.raises(UnsafeDeleteError, match=r"3 of 4 rows .*--max-delete-fraction"):
        check_delete_safety(
            planned_deletes=3,
            current_total=4,
            source_rows=1,
            max_delete_fraction=0.5,
            noun="rows",
            fraction_parameter="--max-delete-fraction",
        )


@pytest.mark.parametrize("fraction", [-0.1, 1.5, float("nan")])
def test_a_fraction_outside_0_1_is_a_clear_error(fraction: float) -> None:
    with pytest.raises(ValueError, match="max_delete_fraction must be between 0 and 1"):
        check_delete_safety(planned_deletes=0, current_total=0, source_rows=0, max_delete_fraction=fraction)


def test_progress_logs_at_least_every_tenth(caplog: pytest.LogCaptureFixture) -> None:
    progress = ProgressLogger(1000, what="people sync", logger=logging.getLogger("test.progress"))
    with caplog.at_level(logging.INFO, logger="test.progress"):
        for _ in range(20):
            progress.advance(50, failed=0)

    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 10
    assert messages[0] == "people sync: 100 of 1000 applied (10%), failed 0"
    assert messages[-1] == "people sync: 1000 of 1000 applied (100%), failed 0"


def test_progress_logs_one_line_when_a_chunk_crosses_several_tenths(caplog: pytest.LogCaptureFixture) -> None:
    progress = ProgressLogger(10, logger=logging.getLogger("test.progress"))
    with caplog.at_level(logging.INFO, logger="test.progress"):
        progress.advance(1)
        progress.advance(6)
        progress.advance(3)

    assert [record.getMessage() for record in caplog.records] == [
        "plan: 1 of 10 applied (10%)",
        "plan: 7 of 10 applied (70%)",
        "plan: 10 of 10 applied (100%)",
    ]


def test_progress_of_an_empty_plan_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        ProgressLogger(0).advance(0)
    assert caplog.records == []


def test_summary_counts_requests_and_failure_reasons() -> None:
    summary = build_summary(
        PeopleSummary,
        read=5,
        added=2,
        failed=3,
        requests={"add": 1, "patch": 2},
        failure_reasons=["Account not found: a.com", "boom", "Account not found: a.com"],
        table_id="tbl_1",
        mode="upsert",
        delete_scope="list",
        normalization_version="1",
    )

    assert (summary.read, summary.added, summary.failed, summary.table_id) == (5, 2, 3, "tbl_1")
    assert summary.requests == {"add": 1, "patch": 2, "total": 3}
    assert summary.failure_reasons == {"Account not found: a.com": 2, "boom": 1}
    assert summary.drift_reasons == []


SUMMARY_OF_A_LIST = {
    "table_id": "tbl_1",
    "mode": "upsert",
    "delete_scope": "list",
    "normalization_version": "1",
}


def test_summary_keeps_only_the_most_frequent_reasons() -> None:
    reasons = ["common"] * 3 + [f"rare {i}" for i in range(MAX_FAILURE_REASONS * 2)]

    summary = build_summary(PeopleSummary, requests={}, failure_reasons=reasons, **SUMMARY_OF_A_LIST)

    assert len(summary.failure_reasons) == MAX_FAILURE_REASONS
    assert summary.failure_reasons["common"] == 3


@pytest.mark.parametrize(
    "values",
    [{"started": "today"}, {"added": -1}, {"plan_path": object()}],
    ids=["undeclared", "negative count", "not JSON"],
)
def test_summary_refuses_values_it_does_not_declare(values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        build_summary(PeopleSummary, requests={}, **SUMMARY_OF_A_LIST, **values)


class _Stats:
    def __init__(self, read: int) -> None:
        self.read = read


class _Prepared:
    def __init__(self, read: int) -> None:
        self.stats = _Stats(read)


class _StoredFile:
    """An object-storage stand-in: a file reached only through ``open(mode)``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, mode: str = "r") -> Any:
        return self.path.open(mode, encoding="utf-8")

    def __str__(self) -> str:
        return f"s3://bucket/{self.path.name}"


def _reject_one_of(read: int) -> Any:
    def prepare(rejects: Rejects) -> _Prepared:
        rejects.add(2, {"Email": "jane@"}, ["email 'jane@': has nothing after the @"])
        return _Prepared(read)

    return prepare


@pytest.mark.parametrize("stored", [False, True])
def test_rejects_are_written_to_a_local_path_or_object_storage(tmp_path: Path, stored: bool) -> None:
    path: Any = _StoredFile(tmp_path / "rejects.jsonl") if stored else tmp_path / "rejects.jsonl"

    prepared, written, by_reason = prepare_with_rejects(
        _reject_one_of(4), path, max_reject_fraction=1.0, prefix="test-rejects-"
    )

    assert prepared.stats.read == 4
    assert sum(by_reason.values()) == 1
    assert written == str(path)
    (record,) = read_jsonl(tmp_path / "rejects.jsonl")
    assert record["row"] == 2
    assert record["reasons"] == ["email 'jane@': has nothing after the @"]


def test_without_a_path_rejects_go_to_a_temporary_file_only_when_there_are_some() -> None:
    _, none_rejected, _ = prepare_with_rejects(
        lambda rejects: _Prepared(3), None, max_reject_fraction=1.0, prefix="test-rejects-"
    )
    _, written, _ = prepare_with_rejects(
        _reject_one_of(3), None, max_reject_fraction=1.0, prefix="test-rejects-"
    )

    assert none_rejected is None
    assert written is not None and Path(written).name.startswith("test-rejects-")
    assert len(Path(written).read_text().splitlines()) == 1
    Path(written).unlink()


def test_too_many_rejects_fail_after_the_rejects_are_written(tmp_path: Path) -> None:
    path = _StoredFile(tmp_path / "rejects.jsonl")

    with pytest.raises(TooManyRejectsError):
        prepare_with_rejects(_reject_one_of(2), path, max_reject_fraction=0.1, prefix="test-rejects-")

    assert len((tmp_path / "rejects.jsonl").read_text().splitlines()) == 1


def test_a_plan_file_is_written_when_asked_for_or_in_a_dry_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("test.plan")

    with caplog.at_level(logging.INFO, logger="test.plan"):
        asked = write_requested_plan(
            ENTRIES, tmp_path / "plan.jsonl", dry_run=False, prefix="test-plan-", logger=logger
        )
        not_asked = write_requested_plan(ENTRIES, None, dry_run=False, prefix="test-plan-", logger=logger)
        dry = write_requested_plan(ENTRIES, None, dry_run=True, prefix="test-plan-", logger=logger)

    assert asked == str(tmp_path / "plan.jsonl")
    assert not_asked is None
    assert dry is not None and Path(dry).name.startswith("test-plan-")
    assert read_jsonl(dry) == ENTRIES
    Path(dry).unlink()
    assert [record.getMessage() for record in caplog.records] == [
        f"Plan written to {asked}",
        f"Plan written to {dry}",
    ]
