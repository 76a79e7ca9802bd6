"""prepare_events: rows to events in extract order, rejects with reasons, duplicates."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from listsync.extract.mapping import ColumnMappingError
from listsync.extract.rejects import Rejects
from listsync.signals.build import event_reference, prepare_events
from listsync.signals.columns import EventMapping

MAPPING = EventMapping(
    signal_column="signal",
    identity_type="account",
    identity_id_column="account_id",
    data_columns=["seats", "plan"],
    timestamp_column="at",
)


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, dtype=object)


ROWS = [
    {"signal": "seats_used", "account_id": "0042", "seats": 5, "plan": "team", "at": "2026-11-02T10:00:00Z"},
    {"signal": "page_visit", "account_id": "7", "seats": None, "plan": None, "at": "2026-11-01T09:00:00"},
    {"signal": "", "account_id": "8", "seats": 1, "plan": "free", "at": "2026-11-01T09:00:00Z"},
    {"signal": "page_visit", "account_id": None, "seats": 1, "plan": "free", "at": "yesterday"},
    # The same event as the first row, with the offset spelt differently: a duplicate.
    {
        "signal": "seats_used",
        "account_id": "0042",
        "seats": 5,
        "plan": "team",
        "at": "2026-11-02T11:00:00+01:00",
    },
]


def test_rows_become_validated_events_with_every_row_accounted_for() -> None:
    rejects = Rejects()
    prepared = prepare_events([frame(ROWS)], MAPPING, rejects=rejects)
    events = list(prepared)

    assert prepared.stats.to_dict() == {
        "read": 5,
        "passed": 2,
        "rejected": 2,
        "duplicates": 1,
        "other_shards": 0,
    }
    # The extract's order: a retried task reading it again meets the events in the same order.
    assert [e.signal for e in events] == ["seats_used", "page_visit"]
    seats, visit = events
    assert visit.identity.model_dump() == {"type": "account", "id": "7"}
    assert visit.timestamp == "2026-11-01T09:00:00.000000Z"  # naive taken as UTC
    assert visit.data == {"seats": None, "plan": None}  # empty cells are sent as null
    assert seats.identity.id == "0042"  # identifiers stay text, leading zeros kept
    assert seats.reference == event_reference(
        "seats_used", "account", "0042", "2026-11-02T10:00:00.000000Z", {"seats": 5, "plan": "team"}
    )
    assert prepared.counts_by_signal() == {"page_visit": 1, "seats_used": 1}

    by_row = {record["row"]: record for record in rejects.records}
    assert sorted(by_row) == [3, 4]
    assert any("signal" in reason for reason in by_row[3]["reasons"])
    reasons_4 = " ".join(by_row[4]["reasons"])
    assert "timestamp (column 'at')" in reasons_4
    assert "identity_id" in reasons_4
    assert by_row[4]["original"]["at"] == "yesterday"


def test_events_come_in_extract_order_and_do_not_depend_on_chunking() -> None:
    rows = [
        {
            "signal": "page_visit",
            "account_id": str(i),
            "seats": i,
            "plan": "x",
            "at": f"2026-11-01T0{i}:00:00Z",
        }
        for i in range(1, 8)
    ]
    rows.append({"signal": "page_visit", "account_id": "9", "seats": 0, "plan": "x", "at": None})
    one = list(prepare_events([frame(rows)], MAPPING, rejects=Rejects()))
    chunked = list(prepare_events([frame(rows[:3]), frame(rows[3:])], MAPPING, rejects=Rejects()))
    reversed_rows = rows[::-1]
    backwards = list(prepare_events([frame(reversed_rows)], MAPPING, rejects=Rejects()))

    assert [e.to_wire() for e in one] == [e.to_wire() for e in chunked]
    # Read backwards, the same events come backwards: the order is the extract's, not the clock's.
    assert [e.to_wire() for e in backwards] == [e.to_wire() for e in one][::-1]
    assert one[-1].timestamp is None  # the service stamps undated events on arrival
    assert [e.identity.id for e in one] == ["1", "2", "3", "4", "5", "6", "7", "9"]


def test_reference_column_is_used_and_clashes_are_rejected_naming_the_first_row() -> None:
    mapping = EventMapping(
        signal="deal_stage",
        identity_type_column="type",
        identity_id_column="id",
        data_column="payload",
        reference_column="event_id",
        version=1,
    )
    rows = [
        {"event_id": "e-1", "type": "deal", "id": "d1", "payload": '{"stage": "won"}'},
        {"event_id": "e-1", "type": "deal", "id": "d1", "payload": '{"stage": "won"}'},
        {"event_id": "e-1", "type": "deal", "id": "d1", "payload": '{"stage": "lost"}'},
        {"event_id": "e-2", "type": "deal", "id": "d2", "payload": '["not", "an", "object"]'},
        {"event_id": "e-3", "type": "deal", "id": "d3", "payload": "{broken"},
        {"event_id": None, "type": "deal", "id": "d4", "payload": None},
    ]
    rejects = Rejects()
    prepared = prepare_events([frame(rows)], mapping, rejects=rejects)
    (event,) = prepared

    assert prepared.stats.to_dict() == {
        "read": 6,
        "passed": 1,
        "rejected": 4,
        "duplicates": 1,
        "other_shards": 0,
    }
    assert event.to_wire() == {
        "signal": "deal_stage",
        "version": 1,
        "identity": {"type": "deal", "id": "d1"},
        "data": {"stage": "won"},
        "reference": "e-1",
    }
    reasons = {record["row"]: " ".join(record["reasons"]) for record in rejects.records}
    assert "duplicate of row 1" in reasons[3]
    assert "must be a JSON object, got list" in reasons[4]
    assert "not valid JSON" in reasons[5]
    assert "reference (column 'event_id') is empty" in reasons[6]


def test_a_mapped_column_missing_from_the_extract_fails_at_once() -> None:
    prepared = prepare_events(
        [frame([{"signal": "s", "account_id": "1", "seats": 1, "at": None}])], MAPPING, rejects=Rejects()
    )
    with pytest.raises(ColumnMappingError, match="'plan'"):
        next(iter(prepared))


def test_aware_timestamps_from_typed_sources_are_used_as_they_are() -> None:
    mapping = EventMapping(
        signal="page_visit", identity_type="contact", identity_id_column="id", timestamp_column="at"
    )
    at = pd.Timestamp(datetime(2026, 11, 1, 12, 30, tzinfo=timezone.utc)).tz_convert("Europe/Paris")
    prepared = prepare_events([pd.DataFrame({"id": [17], "at": [at]})], mapping, rejects=Rejects())

    (event,) = prepared
    assert event.timestamp == "2026-11-01T12:30:00.000000Z"
    assert event.identity.id == "17"
    assert event.data is None


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {
                "signal": st.sampled_from(["page_visit", "seats_used", ""]),
                "account_id": st.sampled_from(["1", "2", "007", None]),
                "seats": st.integers(0, 3),
                "plan": st.sampled_from(["team", None]),
                "at": st.sampled_from(["2026-11-01T09:00:00Z", "2026-11-01T10:00:00+02:00", None, "later"]),
            }
        ),
        max_size=25,
    ),
    seed=st.randoms(use_true_random=False),
    chunk=st.integers(1, 10),
)
def test_any_extract_gives_the_same_events_whatever_its_chunks_and_row_order(
    rows: list[dict], seed: random.Random, chunk: int
) -> None:
    shuffled = rows[:]
    seed.shuffle(shuffled)
    as_read = prepare_events([frame(rows)] if rows else [], MAPPING, rejects=Rejects())
    events = [e.to_wire() for e in as_read]
    rechunked = prepare_events(
        [frame(rows[i : i + chunk]) for i in range(0, len(rows), chunk)], MAPPING, rejects=Rejects()
    )
    reordered = prepare_events([frame(shuffled)] if rows else [], MAPPING, rejects=Rejects())

    # The same extract in other chunks: the very same sequence. In another order: the same events.
    assert [e.to_wire() for e in rechunked] == events
    assert sorted(map(repr, (e.to_wire() for e in reordered))) == sorted(map(repr, events))
    stats = as_read.stats
    assert stats.read == len(rows) == stats.passed + stats.rejected + stats.duplicates
    assert len({e["reference"] for e in events}) == len(events) == as_read.events


def test_a_json_data_column_holding_nan_is_rejected_rather_than_sent_as_null() -> None:
    mapping = EventMapping(
        signal="seats_used", identity_type="account", identity_id_column="account_id", data_column="data"
    )
    rows = [
        {"account_id": "1", "data": '{"seats": NaN}'},
        {"account_id": "2", "data": '{"seats": 3}'},
    ]
    rejects = Rejects()
    prepared = prepare_events([frame(rows)], mapping, rejects=rejects)
    events = list(prepared)

    assert prepared.stats.to_dict() == {
        "read": 2,
        "passed": 1,
        "rejected": 1,
        "duplicates": 0,
        "other_shards": 0,
    }
    assert [event.data for event in events] == [{"seats": 3}]
    assert [record["row"] for record in rejects.records] == [1]
    assert "NaN" in rejects.records[0]["reasons"][0]


def test_timestamps_without_an_offset_are_read_in_the_naive_zone_and_the_log_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rows = [
        {"signal": "page_visit", "account_id": "1", "seats": 1, "plan": "team", "at": "2026-11-01T09:00:00"},
        {"signal": "page_visit", "account_id": "2", "seats": 1, "plan": "team", "at": "2026-11-01T09:00:00Z"},
    ]
    with caplog.at_level("INFO", logger="listsync.signals.build"):
        events = list(
            prepare_events([frame(rows)], MAPPING, rejects=Rejects(), naive_timezone="Europe/Paris")
        )

    assert sorted(event.timestamp for event in events) == [
        "2026-11-01T08:00:00.000000Z",
        "2026-11-01T09:00:00.000000Z",
    ]
    lines = [record.getMessage() for record in caplog.records if "without an offset" in record.getMessage()]
    assert len(lines) == 1
    assert "'at'" in lines[0] and "Europe/Paris" in lines[0]


def test_no_naive_zone_line_when_every_timestamp_has_an_offset(caplog: pytest.LogCaptureFixture) -> None:
    rows = [{"signal": "page_visit", "account_id": "1", "seats": 1, "plan": None, "at": "2026-11-01T09:00Z"}]
    with caplog.at_level("INFO", logger="listsync.signals.build"):
        list(prepare_events([frame(rows)], MAPPING, rejects=Rejects()))

    assert not [record for record in caplog.records if "without an offset" in record.getMessage()]
