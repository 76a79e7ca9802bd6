"""prepare_people / prepare_rows: mapping, normalisation, validation, duplicates and accounting."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from listsync.extract.contact_rules import normalize_email
from listsync.extract.csv_reader import ARROW_TEXT
from listsync.extract.mapping import (
    ColumnMappingError,
    PrepareStats,
    check_people_column_map,
    check_rows_column_map,
    iter_mapped_rows,
    reject_row,
    rows_key_column,
)
from listsync.extract.rejects import Rejects
from listsync.extract.sources import read_extract
from listsync.extract.value_rules import normalize_timestamp
from listsync.sync.people import prepare as people_prepare
from listsync.sync.people.prepare import prepare_people
from listsync.sync.rows.prepare import prepare_rows

from ..support import read_jsonl

PEOPLE_MAP = {
    "Company Domain": "account_domain",
    "First": "first_name",
    "Last": "last_name",
    "Email": "email",
    "Phone": "phone_number",
    "Profile": "network_profile_url",
    "Personas": "personas",
    "Target": "target",
    "Paths": "connection_paths",
}


def frames_of(
    rows: list[dict[str, Any]], chunk_size: int, *, arrow_text: bool = False
) -> Iterator[pd.DataFrame]:
    """The rows as read_extract would give them: object columns (with ``arrow_text``, text as a CSV
    chunk Arrow's parser read: Arrow strings), numbered from 1, in chunks."""
    frame = pd.DataFrame(rows, dtype=object)
    if arrow_text:
        frame = frame.astype(ARROW_TEXT)
    frame.index = pd.RangeIndex(1, len(frame) + 1, name="__row__")
    for start in range(0, len(frame), chunk_size):
        part = frame.iloc[start : start + chunk_size]
        # Arrow text in two chunks, as a frame joined from two holds it.
        yield pd.concat([part.iloc[:1], part.iloc[1:]]) if arrow_text else part


def person_row(**values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(PEOPLE_MAP)
    row.update({"Company Domain": "acme.com", "First": "Jane", "Last": "Doe"})
    row.update(values)
    return row


def test_people_are_normalised_and_grouped_by_domain_and_identity(tmp_path: Path) -> None:
    csv = tmp_path / "people.csv"
    csv.write_text(
        "Company Domain,First,Last,Email,Phone,Profile,Personas,Target,Paths\n"
        'https://www.ACME.com/,Jane , Doe,JANE@Acme.com,(415) 555-2671,,"Champion, Economic Buyer",yes,'
        '"[{""userId"": ""usr_1"", ""source"": ""Network"", ""degree"": ""1st""}]"\n'
        "globex.com,Hank,Scorpio,,,network.example.com/in/hank/,,no,\n"
    )
    rejects = Rejects()
    prepared = prepare_people(read_extract(csv), PEOPLE_MAP, rejects=rejects)
    assert rejects.records == []
    assert prepared.stats.to_dict() == {
        "read": 2,
        "passed": 2,
        "rejected": 0,
        "duplicates": 0,
        "other_shards": 0,
    }
    jane = prepared.people["acme.com"]["email:jane@acme.com"]
    assert jane.first_name == "Jane" and jane.last_name == "Doe"
    assert jane.phone_number == "+14155552671"
    assert jane.personas == ["champion", "economic_buyer"]
    assert jane.target is True
    assert jane.connection_paths is not None
    assert jane.connection_paths[0].source == "network"
    hank = prepared.people["globex.com"]["url:https://network.example.com/in/hank"]
    assert hank.target is False and hank.email is None
    assert prepared.normalization_version


def test_every_reason_of_a_bad_row_is_kept_with_its_column() -> None:
    rows = [
        person_row(**{"Company Domain": "localhost", "First": None, "Email": "jane@", "Target": "maybe"}),
        person_row(Paths='[{"userId": "usr_1", "source": "fax", "degree": "3rd"}]', Email="j@acme.com"),
    ]
    rejects = Rejects()
    prepared = prepare_people(frames_of(rows, 10), PEOPLE_MAP, rejects=rejects)
    assert prepared.stats.to_dict() == {
        "read": 2,
        "passed": 0,
        "rejected": 2,
        "duplicates": 0,
        "other_shards": 0,
    }
    first, second = rejects.records
    assert first["row"] == 1
    reasons = " | ".join(first["reasons"])
    assert "account_domain (column 'Company Domain'): domain 'localhost' has no dot" in reasons
    assert "email (column 'Email')" in reasons
    assert "target (column 'Target')" in reasons
    assert "first_name (column 'First')" in reasons
    assert first["original"]["Email"] == "jane@"
    assert second["row"] == 2
    assert any(
        reason.startswith("connection_paths.0.source (column 'Paths')") for reason in second["reasons"]
    )
    assert any(
        reason.startswith("connection_paths.0.degree (column 'Paths')") for reason in second["reasons"]
    )


def test_rows_without_an_account_or_an_identity_are_rejected() -> None:
    rows = [person_row(**{"Company Domain": None}), person_row(Last=None)]
    rejects = Rejects()
    prepare_people(frames_of(rows, 10), PEOPLE_MAP, rejects=rejects)
    assert "every person needs an account" in rejects.records[0]["reasons"][0]
    assert "person has no identity" in rejects.records[1]["reasons"][0]


@pytest.mark.parametrize("chunk_size", [1, 2, 100])
def test_duplicates_collapse_and_clashes_keep_the_first_row(chunk_size: int) -> None:
    rows = [
        person_row(Email="jane@acme.com", Phone="+14155552671"),
        person_row(Email=" JANE@ACME.COM ", Phone="(415) 555-2671"),  # same after normalisation
        person_row(Email="jane@acme.com", Phone="+14155550000"),  # same identity, other values
        person_row(**{"Company Domain": "other.com"}, Email="jane@acme.com"),  # other account: fine
        person_row(Email="jane@acme.com", Phone="+14155550000"),  # still clashes with row 1
    ]
    rejects = Rejects()
    prepared = prepare_people(frames_of(rows, chunk_size), PEOPLE_MAP, rejects=rejects)
    assert prepared.stats.to_dict() == {
        "read": 5,
        "passed": 2,
        "rejected": 2,
        "duplicates": 1,
        "other_shards": 0,
    }
    assert prepared.people["acme.com"]["email:jane@acme.com"].phone_number == "+14155552671"
    assert set(prepared.people) == {"acme.com", "other.com"}
    assert [record["row"] for record in rejects.records] == [3, 5]
    for record in rejects.records:
        (reason,) = record["reasons"]
        assert "duplicate of row 1" in reason
        assert "acme.com, email:jane@acme.com" in reason


def test_rows_are_checked_against_the_first_kept_whatever_part_it_was_joined_into() -> None:
    """Kept rows are joined into parts as the extract is read; a later duplicate or clash still
    finds the row it repeats, however far back."""
    emails = [f"p{number}@acme.com" for number in range(9)]
    rows = [person_row(Email=email, Phone="+14155552671") for email in emails]
    rows += [person_row(Email=email.upper(), Phone="(415) 555-2671") for email in emails[::2]]
    rows += [person_row(Email=email, Phone="+14155550000") for email in emails[1::2]]
    rejects = Rejects()
    with mock.patch.object(people_prepare, "PART_ROWS", 2):
        prepared = prepare_people(frames_of(rows, 1), PEOPLE_MAP, rejects=rejects)
    assert prepared.stats == PrepareStats(read=18, passed=9, rejected=4, duplicates=5)
    assert list(prepared.frame["email"]) == emails
    assert [record["row"] for record in rejects.records] == [15, 16, 17, 18]
    for record, first in zip(rejects.records, (2, 4, 6, 8), strict=True):
        assert f"duplicate of row {first}:" in record["reasons"][0]


PREPARE_AND_MEASURE = """
import tracemalloc
import pandas as pd
from listsync.sync.people.prepare import prepare_people
from listsync.extract.rejects import Rejects

rows = [{"domain": f"acct{n // 5}.example", "email": f"p{n}@acct{n // 5}.example", "first": "P"}
        for n in range(60_000)]
frame = pd.DataFrame(rows, dtype=object)
chunks = [frame.iloc[start : start + 20_000] for start in range(0, len(frame), 20_000)]
column_map = {"domain": "account_domain", "email": "email", "first": "first_name"}
tracemalloc.start()
prepared = prepare_people(chunks, column_map, rejects=Rejects())
kept, peak = tracemalloc.get_traced_memory()
print(prepared.stats.passed, kept, peak)
"""


def test_preparing_people_keeps_nothing_but_their_frame() -> None:
    """The working memory of preparing (the hashes' tables among it) goes once the people are
    prepared: a sync holds the extract's people while it reads the List and plans. Measured in a
    fresh interpreter, where nothing was prepared before."""
    output = subprocess.run(
        [sys.executable, "-c", PREPARE_AND_MEASURE], capture_output=True, text=True, check=True
    ).stdout
    passed, kept, peak = map(int, output.split())
    assert passed == 60_000
    # The frame's text is Arrow's, which tracemalloc does not see; preparing took megabytes.
    assert peak > 8 * 1024**2
    # What the first use imports and caches stays; the tables alone took 16 MiB.
    assert kept < 3 * 1024**2


def test_a_mapped_column_missing_from_the_extract_fails_at_once_listing_the_columns() -> None:
    frames = frames_of([{"domain": "acme.com", "first": "Jane"}], 10)
    with pytest.raises(ColumnMappingError) as caught:
        prepare_people(frames, {"domain": "account_domain", "First": "first_name"}, rejects=Rejects())
    assert "'First'" in str(caught.value)
    assert "the extract has: 'domain', 'first'" in str(caught.value)


@pytest.mark.parametrize(
    ("column_map", "message"),
    [
        ({"d": "account_domain", "f": "first_name", "x": "nickname"}, r"unknown field\(s\) 'nickname'"),
        ({"d": "account_domain", "f": "first_name", "g": "first_name"}, "several columns to 'first_name'"),
        ({"d": "account_domain"}, "no column to 'first_name'"),
        ({"f": "first_name"}, "no column to 'account_domain'"),
    ],
)
def test_a_column_map_that_cannot_work_fails_before_reading(column_map: dict[str, str], message: str) -> None:
    def never_read() -> Iterator[pd.DataFrame]:
        raise AssertionError("the extract must not be read")
        yield  # pragma: no cover

    with pytest.raises(ColumnMappingError, match=message):
        prepare_people(never_read(), column_map, rejects=Rejects())


def test_unknown_default_region_fails_before_reading() -> None:
    with pytest.raises(ValueError, match="default_region"):
        prepare_people(iter(()), PEOPLE_MAP, rejects=Rejects(), default_region="ZZ")


def test_default_region_reads_national_numbers() -> None:
    rows = [person_row(Email="a@acme.com", Phone="020 7946 0958")]
    prepared = prepare_people(frames_of(rows, 10), PEOPLE_MAP, rejects=Rejects(), default_region="GB")
    assert prepared.people["acme.com"]["email:a@acme.com"].phone_number == "+442079460958"


# --- rows ----------------------------------------------------------------------------------

ROWS_MAP = {"Website": "domain", "Revenue": "revenue", "Seen": "last_seen", "Meta": "meta", "Plan": "plan"}


def test_rows_are_keyed_by_normalised_domain_with_json_safe_cells() -> None:
    rows = [
        {
            "Website": "https://www.Acme.com/",
            "Revenue": Decimal("1200.00"),
            "Seen": datetime(2024, 5, 1, 10, tzinfo=timezone.utc),
            "Meta": '{"tier": 1, "tags": ["a"]}',
            "Plan": "pro",
        },
        {"Website": "globex.com", "Revenue": 3.5, "Seen": None, "Meta": None, "Plan": "  "},
    ]
    rejects = Rejects()
    prepared = prepare_rows(frames_of(rows, 10), ROWS_MAP, "Website", rejects=rejects, json_columns=["Meta"])
    assert rejects.records == []
    assert prepared.key_column_id == "domain"
    assert prepared.rows == {
        "acme.com": {
            "domain": "acme.com",
            "revenue": 1200,
            "last_seen": "2024-05-01T10:00:00+00:00",
            "meta": {"tier": 1, "tags": ["a"]},
            "plan": "pro",
        },
        "globex.com": {"domain": "globex.com", "revenue": 3.5, "last_seen": None, "meta": None, "plan": None},
    }
    json.dumps(prepared.rows)  # every value can be sent


def test_rows_with_bad_keys_or_values_are_rejected_and_duplicate_keys_handled() -> None:
    rows = [
        {"Website": "acme.com", "Revenue": 1, "Seen": None, "Meta": "{}", "Plan": "pro"},
        {"Website": None, "Revenue": 2, "Seen": None, "Meta": "{}", "Plan": "pro"},
        {"Website": "not a domain", "Revenue": 3, "Seen": None, "Meta": "{oops", "Plan": "pro"},
        {"Website": "ACME.com", "Revenue": 1, "Seen": None, "Meta": "{}", "Plan": "pro"},
        {"Website": "acme.com", "Revenue": 9, "Seen": None, "Meta": "{}", "Plan": "pro"},
        {"Website": "b.com", "Revenue": float("inf"), "Seen": None, "Meta": "{}", "Plan": "pro"},
    ]
    rejects = Rejects()
    prepared = prepare_rows(frames_of(rows, 2), ROWS_MAP, "Website", rejects=rejects, json_columns=["Meta"])
    assert prepared.stats.to_dict() == {
        "read": 6,
        "passed": 1,
        "rejected": 4,
        "duplicates": 1,
        "other_shards": 0,
    }
    assert prepared.rows["acme.com"]["revenue"] == 1
    by_row = {record["row"]: record["reasons"] for record in rejects.records}
    assert "the key is empty" in by_row[2][0]
    assert len(by_row[3]) == 2  # the key and the JSON, both reported
    assert any("not valid JSON" in reason for reason in by_row[3])
    assert "duplicate of row 1" in by_row[5][0]
    assert "finite" in by_row[6][0]


def test_text_keys_and_unmapped_key_column() -> None:
    rows = [{"id": " 007 ", "name": "Bond"}]
    prepared = prepare_rows(
        frames_of(rows, 10), {"id": "ext_id", "name": "name"}, "id", rejects=Rejects(), key_kind="text"
    )
    assert prepared.rows == {"007": {"ext_id": "007", "name": "Bond"}}
    with pytest.raises(ColumnMappingError, match="not mapped: 'key'"):
        prepare_rows(iter(()), {"id": "ext_id"}, "key", rejects=Rejects())
    with pytest.raises(ColumnMappingError, match="several columns to 'x'"):
        prepare_rows(iter(()), {"id": "x", "name": "x"}, "id", rejects=Rejects())


# --- the shared pieces, as another job (events) uses them ------------------------------------


def test_shared_pieces_number_rows_normalise_and_account() -> None:
    rows = [
        {"Who": "A@x.com", "When": "2024-05-01"},
        {"Who": "bad", "When": "soon"},
        {"Who": None, "When": None},
    ]
    rules = {"email": normalize_email, "timestamp": normalize_timestamp}
    stats = PrepareStats()
    rejects = Rejects()
    passed = []
    for row in iter_mapped_rows(frames_of(rows, 2), {"Who": "email", "When": "timestamp"}, rules, stats):
        if row.reasons:
            reject_row(row, row.reasons, rejects, stats)
        else:
            passed.append((row.row_number, row.values))
            stats.passed += 1
    assert passed == [
        (1, {"email": "a@x.com", "timestamp": datetime(2024, 5, 1, tzinfo=timezone.utc)}),
        (3, {}),
    ]
    assert stats.to_dict() == {"read": 3, "passed": 2, "rejected": 1, "duplicates": 0, "other_shards": 0}
    assert rejects.records[0]["row"] == 2
    assert rejects.records[0]["original"] == {"Who": "bad", "When": "soon"}
    assert len(rejects.records[0]["reasons"]) == 2


# --- accounting over generated messy extracts ---------------------------------------------------

DOMAINS = ["acme.com", "https://www.ACME.com/", "globex.com", "localhost", "", None, "bücher.de"]
FIRSTS = ["Jane", " Jane ", "", None, "Hank"]
LASTS = ["Doe", None, "Scorpio"]
EMAILS = ["jane@acme.com", "JANE@acme.com ", "jane@", None, "hank@globex.com", "a@b@c"]
PHONES = ["+14155552671", "(415) 555-2671", "12", None, "not a phone", "+44 20 7946 0958"]
PERSONAS = ["champion", "Champion, champion", "bad!", None, '["economic_buyer"]']
TARGETS = ["yes", "no", "maybe", None, "1"]

messy_people = st.lists(
    st.fixed_dictionaries(
        {
            "Company Domain": st.sampled_from(DOMAINS),
            "First": st.sampled_from(FIRSTS),
            "Last": st.sampled_from(LASTS),
            "Email": st.sampled_from(EMAILS),
            "Phone": st.sampled_from(PHONES),
            "Profile": st.sampled_from([None, "network.example.com/in/x", "ftp://x.com/a"]),
            "Personas": st.sampled_from(PERSONAS),
            "Target": st.sampled_from(TARGETS),
            "Paths": st.sampled_from(
                [None, "[]", "{", '[{"userId": "u", "source": "network", "degree": "2nd"}]']
            ),
        }
    ),
    max_size=40,
)


def in_row_order(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda record: int(record["row"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=messy_people,
    chunk_size=st.integers(min_value=1, max_value=7),
    part_rows=st.integers(min_value=1, max_value=9),
)
def test_every_row_is_passed_rejected_or_collapsed(
    rows: list[dict[str, Any]], chunk_size: int, part_rows: int
) -> None:
    rejects = Rejects()
    # Kept rows joined into parts of a few rows, so that earlier rows are found across joins.
    with mock.patch.object(people_prepare, "PART_ROWS", part_rows):
        prepared = prepare_people(frames_of(rows, chunk_size), PEOPLE_MAP, rejects=rejects)
    stats = prepared.stats
    assert stats.read == len(rows)
    assert stats.read == stats.passed + stats.rejected + stats.duplicates
    assert stats.rejected == rejects.count
    assert stats.passed == sum(len(people) for people in prepared.people.values())
    assert len({record["row"] for record in rejects.records}) == rejects.count
    assert all(record["reasons"] for record in rejects.records)
    # the outcome does not depend on how the extract was chunked, nor its kept rows joined
    whole_rejects = Rejects()
    whole = prepare_people(frames_of(rows, max(len(rows), 1)), PEOPLE_MAP, rejects=whole_rejects)
    assert whole.people == prepared.people
    assert whole.stats == stats
    assert whole.frame.equals(prepared.frame)
    # Within a chunk, rows a rule refuses are recorded before the duplicates decided after them.
    assert in_row_order(whole_rejects.records) == in_row_order(rejects.records)


@given(rows=messy_people, chunk_size=st.integers(min_value=1, max_value=7))
def test_people_read_as_arrow_text_are_prepared_as_from_python_values(
    rows: list[dict[str, Any]], chunk_size: int
) -> None:
    from_objects, from_arrow = Rejects(), Rejects()
    expected = prepare_people(frames_of(rows, chunk_size), PEOPLE_MAP, rejects=from_objects)
    prepared = prepare_people(frames_of(rows, chunk_size, arrow_text=True), PEOPLE_MAP, rejects=from_arrow)
    assert prepared.stats == expected.stats
    assert prepared.frame.equals(expected.frame)
    # Each reject quotes its row as read, a missing value as None.
    assert from_arrow.records == from_objects.records


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {
                "Website": st.sampled_from(DOMAINS),
                "Revenue": st.sampled_from([None, 1, 1.5, Decimal("2.0"), float("inf"), "10"]),
                "Seen": st.sampled_from([None, "2024-01-01"]),
                "Meta": st.sampled_from([None, "{}", "[1]", "{bad"]),
                "Plan": st.sampled_from([None, "pro", "free"]),
            }
        ),
        max_size=30,
    ),
    chunk_size=st.integers(min_value=1, max_value=5),
)
def test_rows_accounting_holds_for_any_extract(rows: list[dict[str, Any]], chunk_size: int) -> None:
    rejects = Rejects()
    prepared = prepare_rows(
        frames_of(rows, chunk_size), ROWS_MAP, "Website", rejects=rejects, json_columns=["Meta"]
    )
    stats = prepared.stats
    assert stats.read == len(rows) == stats.passed + stats.rejected + stats.duplicates
    assert stats.rejected == rejects.count
    assert stats.passed == len(prepared.rows)


def test_json_lines_chunks_without_a_mapped_key_read_it_as_missing(tmp_path: Path) -> None:
    path = tmp_path / "people.jsonl"
    lines = [
        {"domain": "acme.com", "first": "Jane", "email": "jane@acme.com", "personas": ["Champion"]},
        {"domain": "acme.com", "first": "John", "email": "john@acme.com"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    column_map = {"domain": "account_domain", "first": "first_name", "email": "email", "personas": "personas"}
    prepared = prepare_people(read_extract(path, chunk_size=1), column_map, rejects=Rejects())
    assert prepared.stats.to_dict() == {
        "read": 2,
        "passed": 2,
        "rejected": 0,
        "duplicates": 0,
        "other_shards": 0,
    }
    assert prepared.people["acme.com"]["email:jane@acme.com"].personas == ["champion"]
    assert prepared.people["acme.com"]["email:john@acme.com"].personas is None


def test_json_text_with_nan_or_infinity_is_rejected_not_sent() -> None:
    # Python's json module reads NaN and Infinity, which JSON has no spelling for: a row holding
    # them must be rejected with its reason, never fail the whole upsert nor reach a JSON body.
    rows = [
        {"Website": "acme.com", "Revenue": 1, "Seen": None, "Meta": '{"score": NaN}', "Plan": "pro"},
        {"Website": "b.com", "Revenue": 1, "Seen": None, "Meta": "-Infinity", "Plan": "pro"},
        {"Website": "c.com", "Revenue": 1, "Seen": None, "Meta": '{"score": 1.5}', "Plan": "pro"},
    ]
    rejects = Rejects()
    prepared = prepare_rows(frames_of(rows, 10), ROWS_MAP, "Website", rejects=rejects, json_columns=["Meta"])
    assert prepared.stats.to_dict() == {
        "read": 3,
        "passed": 1,
        "rejected": 2,
        "duplicates": 0,
        "other_shards": 0,
    }
    assert list(prepared.rows) == ["c.com"]
    by_row = {record["row"]: record["reasons"] for record in rejects.records}
    assert "not valid JSON" in by_row[1][0] and "NaN" in by_row[1][0]
    assert "not valid JSON" in by_row[2][0] and "-Infinity" in by_row[2][0]


def test_rows_differing_only_by_true_and_1_clash_rather_than_collapse() -> None:
    # Python says True == 1, JSON does not: the second row says something else, so it is a
    # reject naming the first, not a duplicate silently folded into it. 10 and 10.0 stay one value.
    rows = [
        {"id": "a", "flag": True, "n": 10},
        {"id": "a", "flag": 1, "n": 10},
        {"id": "b", "flag": False, "n": 10},
        {"id": "b", "flag": False, "n": 10.0},
        {"id": "c", "flag": None, "n": {"x": [True]}},
        {"id": "c", "flag": None, "n": {"x": [1]}},
    ]
    rejects = Rejects()
    prepared = prepare_rows(
        frames_of(rows, 10), {"id": "id", "flag": "flag", "n": "n"}, "id", rejects=rejects, key_kind="text"
    )
    assert prepared.stats.to_dict() == {
        "read": 6,
        "passed": 3,
        "rejected": 2,
        "duplicates": 1,
        "other_shards": 0,
    }
    assert prepared.rows["a"]["flag"] is True
    reasons = [(record["row"], record["reasons"][0]) for record in rejects.records]
    assert [row for row, _ in reasons] == [2, 6]
    assert all("duplicate of row" in reason for _, reason in reasons)


def test_people_of_one_account_sharing_a_profile_url_clash_like_a_shared_identity() -> None:
    # The service merges an added person into one with the same profile URL (A16): two extract
    # rows with one URL would overwrite each other in the List, never converging. The first wins.
    url = "https://network.example.com/in/jane"
    rows = [
        person_row(Email="jane@acme.com", Profile=url),
        person_row(Email="jane.doe@acme.com", Profile=url),  # other e-mail, same URL
        person_row(Profile=url + "/"),  # no e-mail: known by the URL, the same person again
        person_row(Email="jane@acme.com", Profile=url),  # identical to row 1: a duplicate
        person_row(**{"Company Domain": "other.com"}, Email="x@other.com", Profile=url),  # other account
    ]
    rejects = Rejects()
    prepared = prepare_people(frames_of(rows, 2), PEOPLE_MAP, rejects=rejects)
    assert prepared.stats.to_dict() == {
        "read": 5,
        "passed": 2,
        "rejected": 2,
        "duplicates": 1,
        "other_shards": 0,
    }
    assert list(prepared.people["acme.com"]) == ["email:jane@acme.com"]
    assert [record["row"] for record in rejects.records] == [2, 3]
    for record in rejects.records:
        (reason,) = record["reasons"]
        assert "duplicate of row 1" in reason and url in reason


def test_a_row_of_another_width_than_the_header_is_rejected_alone_with_its_shape(tmp_path: Path) -> None:
    path = tmp_path / "accounts.csv"
    path.write_text("domain,name,owner\nacme.com,Acme\nbeta.io,Beta,Bo\ngamma.org,Gamma,Gus,extra\n")
    column_map = {"domain": "domain", "name": "name", "owner": "owner"}
    with Rejects() as rejects:
        prepared = prepare_rows(read_extract(path), column_map, "domain", rejects=rejects)
    assert list(prepared.rows) == ["beta.io"]
    assert prepared.stats.to_dict() == {
        "read": 3,
        "passed": 1,
        "rejected": 2,
        "duplicates": 0,
        "other_shards": 0,
    }
    # Its values may sit in the wrong columns, so its shape is the one reason given.
    short = "line 2 has 2 fields, the header has 3: give the missing values"
    long = "line 4 has 4 fields, the header has 3: quote a value that holds ','"
    assert [record["row"] for record in rejects.records] == [1, 3]
    assert [len(record["reasons"]) for record in rejects.records] == [1, 1]
    assert rejects.records[0]["reasons"][0].startswith(short)
    assert rejects.records[1]["reasons"][0].startswith(long)
    assert rejects.records[0]["original"] == {"domain": "acme.com", "name": "Acme", "owner": None}


def test_column_maps_are_checked_against_their_job_before_anything_is_read() -> None:
    with pytest.raises(ColumnMappingError, match="unknown field"):
        check_people_column_map({"d": "account_domain", "f": "first_name", "e": "emial"})
    with pytest.raises(ColumnMappingError, match="several columns to 'first_name'"):
        check_people_column_map({"d": "account_domain", "f": "first_name", "e": "first_name"})
    assert rows_key_column({"website": "domain", "n": "name"}, "domain") == "website"
    with pytest.raises(ColumnMappingError, match="exactly one extract column to the key column 'domain'"):
        rows_key_column({"n": "name"}, "domain")
    with pytest.raises(ColumnMappingError, match="not mapped: 'meta'"):
        check_rows_column_map({"website": "domain"}, "website", ["meta"])


def test_a_rejected_value_holding_a_lone_surrogate_is_written_escaped(tmp_path: Path) -> None:
    path = tmp_path / "accounts.jsonl"
    path.write_text('{"domain": "acme.com", "name": "A\\udfff"}\n', encoding="utf-8")
    with Rejects(tmp_path / "rejects.jsonl") as rejects:
        prepare_rows(read_extract(path), {"domain": "domain", "name": "name"}, "domain", rejects=rejects)
    (record,) = read_jsonl(tmp_path / "rejects.jsonl")
    assert "lone surrogate U+DFFF" in record["reasons"][0] and record["original"]["name"] == "A\\udfff"
