"""Rejects: the file of rejected rows, and max_reject_fraction."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from listsync.extract.rejects import MAX_REASON_KINDS, OTHER_REASONS, Rejects, TooManyRejectsError

from ..support import read_jsonl


def test_rejects_are_written_as_json_lines_with_json_safe_originals(tmp_path: Path) -> None:
    path = tmp_path / "out" / "rejects.jsonl"
    with Rejects(path) as rejects:
        rejects.add(
            7,
            {"Email": "jane@", "amount": Decimal("1.5"), "at": datetime(2024, 5, 1, tzinfo=timezone.utc)},
            ["email: nothing after the @", "phone: too short"],
        )
        rejects.add(9, {"blob": b"\x00", "n": float("nan")}, ["binary"])
    assert rejects.count == 2
    assert rejects.path == path
    lines = read_jsonl(path)
    assert lines == [
        {
            "row": 7,
            "reasons": ["email: nothing after the @", "phone: too short"],
            "original": {"Email": "jane@", "amount": 1.5, "at": "2024-05-01T00:00:00+00:00"},
        },
        {"row": 9, "reasons": ["binary"], "original": {"blob": "b'\\x00'", "n": None}},
    ]
    assert rejects.records == []  # with a file, nothing piles up in memory


def test_file_exists_and_is_empty_when_nothing_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "rejects.jsonl"
    path.write_text("left over from an earlier try\n")
    with Rejects(path) as rejects:
        pass
    assert rejects.count == 0
    assert path.read_text() == ""


def test_without_a_path_rejects_stay_in_memory() -> None:
    rejects = Rejects()
    rejects.add(1, {"a": "x"}, ["why"])
    assert rejects.path is None
    assert rejects.records == [{"row": 1, "reasons": ["why"], "original": {"a": "x"}}]


def test_a_reject_needs_a_reason() -> None:
    with pytest.raises(ValueError, match="without a reason"):
        Rejects().add(3, {}, [])


def test_duplicate_reason_names_the_row_it_clashes_with() -> None:
    rejects = Rejects()
    rejects.add_duplicate(12, {"Email": "a@x.com"}, 4, "account domain and identity (x.com, email:a@x.com)")
    (reason,) = rejects.records[0]["reasons"]
    assert "duplicate of row 4" in reason
    assert "x.com, email:a@x.com" in reason
    assert rejects.count == 1


def test_check_fraction_passes_at_the_limit_and_fails_above_it_with_counts(tmp_path: Path) -> None:
    with Rejects(tmp_path / "r.jsonl") as rejects:
        for row in range(1, 3):
            rejects.add(row, {}, ["bad"])
        rejects.check_fraction(20, 0.1)  # 2 of 20 is exactly 10%: allowed
        with pytest.raises(TooManyRejectsError) as caught:
            rejects.check_fraction(19, 0.1)
    message = str(caught.value)
    assert "2 of 19 rows rejected" in message
    assert "max_reject_fraction=0.1" in message
    assert str(tmp_path / "r.jsonl") in message
    assert (caught.value.rejected, caught.value.total_read) == (2, 19)
    # flushed before raising: the file already holds what the message points to
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 2


def test_check_fraction_names_the_callers_parameter() -> None:
    rejects = Rejects()
    rejects.add(1, {}, ["bad"])
    with pytest.raises(TooManyRejectsError, match="max_bad_rows=0"):
        rejects.check_fraction(1, 0, parameter="max_bad_rows")


def test_check_fraction_refuses_a_fraction_outside_0_to_1() -> None:
    with pytest.raises(ValueError, match="max_reject_fraction must be between 0 and 1"):
        Rejects().check_fraction(10, 1.5)


def test_zero_rows_read_never_fails() -> None:
    Rejects().check_fraction(0, 0.0)


def test_rejects_are_counted_by_kind_of_reason_without_the_rows_values() -> None:
    rejects = Rejects()
    rejects.add(1, {}, ["email (column 'email'): email 'a@@b' must contain exactly one @"])
    rejects.add(2, {}, ["email (column 'email'): email 'x' must contain exactly one @"])
    rejects.add(3, {}, ["first_name (column 'first_name'): Field required"])
    rejects.add_duplicate(4, {}, 1, "account domain and identity (acme.com, email:a@acme.com)")
    rejects.add_duplicate(9, {}, 2, "account domain and identity (beta.io, email:b@beta.io)")
    rejects.add_duplicate(11, {}, 3, "key 'quantix.ai' (quantix.ai)")

    assert rejects.by_reason == {
        "email (column 'email'): email … must contain exactly one @": 2,
        "first_name (column 'first_name'): Field required": 1,
        "duplicate of row …: same account domain and identity … but different values …": 2,
        "duplicate of row …: same key … but different values …": 1,
    }


def test_rare_kinds_of_reason_past_the_limit_are_counted_together() -> None:
    rejects = Rejects()
    for number in range(MAX_REASON_KINDS + 3):
        rejects.add(number + 1, {}, [f"rule{'x' * number}: broken"])

    assert len(rejects.by_reason) == MAX_REASON_KINDS + 1
    assert rejects.by_reason[OTHER_REASONS] == 3
    assert sum(rejects.by_reason.values()) == rejects.count
