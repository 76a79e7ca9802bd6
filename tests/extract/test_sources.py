"""read_extract: every source type, typed predictably, chunked, rows numbered across chunks."""

from __future__ import annotations

import collections
import gc
import json
import logging
import os
import re
import sys
import uuid
import warnings
from collections.abc import Iterator
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import IO, Any
from zoneinfo import ZoneInfo

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from listsync.extract.csv_reader import ARROW_TEXT
from listsync.extract.sources import ROW_NUMBER, ExtractError, read_extract


def records(frames: Iterator[pd.DataFrame]) -> list[dict[str, Any]]:
    """All rows of all chunks, each with its row number under ``__row__``."""
    # Not iterrows(): it re-infers a dtype per row, which would turn None back into NaN.
    return [{ROW_NUMBER: number, **row} for frame in frames for number, row in frame.to_dict("index").items()]


def test_csv_with_bom_quoted_newlines_leading_zeros_and_missing_values(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_bytes(
        '\ufeffid,name,notes,zip\n007,"Doe, Jane","line one\nline two",02134\n008,NA,,\n'.encode()
    )
    rows = records(read_extract(path))
    assert rows == [
        {ROW_NUMBER: 1, "id": "007", "name": "Doe, Jane", "notes": "line one\nline two", "zip": "02134"},
        {ROW_NUMBER: 2, "id": "008", "name": "NA", "notes": None, "zip": None},
    ]


def test_csv_values_stay_text_even_when_they_look_numeric(tmp_path: Path) -> None:
    path = tmp_path / "ids.csv"
    path.write_text("account_id,score\n12345678901234567890,1.50\n,3\n")
    frame = next(read_extract(path))
    assert frame["account_id"].tolist() == ["12345678901234567890", None]
    assert frame["score"].tolist() == ["1.50", "3"]
    assert all(pd.api.types.is_object_dtype(dtype) for dtype in frame.dtypes)


def test_csv_custom_delimiter_and_tsv_suffix(tmp_path: Path) -> None:
    semicolons = tmp_path / "export.txt"
    semicolons.write_text("a;b\n1;x,y\n")
    assert records(read_extract(semicolons, delimiter=";")) == [{ROW_NUMBER: 1, "a": "1", "b": "x,y"}]
    tabs = tmp_path / "export.tsv"
    tabs.write_text("a\tb\n1\tx,y\n")
    assert records(read_extract(tabs)) == [{ROW_NUMBER: 1, "a": "1", "b": "x,y"}]


def test_chunks_are_bounded_and_row_numbers_continue_across_them(tmp_path: Path) -> None:
    path = tmp_path / "many.csv"
    path.write_text("n\n" + "".join(f"{i}\n" for i in range(1, 8)))
    frames = list(read_extract(path, chunk_size=3))
    assert [len(frame) for frame in frames] == [3, 3, 1]
    assert [frame.index.tolist() for frame in frames] == [[1, 2, 3], [4, 5, 6], [7]]
    assert [value for frame in frames for value in frame["n"]] == [str(i) for i in range(1, 8)]


def test_parquet_keeps_ints_with_nulls_as_ints_and_makes_naive_timestamps_aware(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "accounts.parquet"
    table = pa.table(
        {
            "id": pa.array([9007199254740993, None, 3], pa.int64()),
            "code": pa.array(["007", None, "x"]),
            "seen": pa.array([datetime(2024, 5, 1, 10), None, datetime(2024, 5, 2)], pa.timestamp("us")),
            "tags": pa.array([["a"], None, []], pa.list_(pa.string())),
        }
    )
    pq.write_table(table, path, row_group_size=2)
    with caplog.at_level(logging.INFO, logger="listsync.extract.sources"):
        rows = records(read_extract(path, chunk_size=2, naive_timezone="Europe/Paris"))
    assert [row["id"] for row in rows] == [9007199254740993, None, 3]
    assert type(rows[0]["id"]) is int
    assert [row["code"] for row in rows] == ["007", None, "x"]
    assert rows[0]["seen"] == datetime(2024, 5, 1, 10, tzinfo=ZoneInfo("Europe/Paris"))
    assert rows[1]["seen"] is None
    assert rows[2]["tags"] == []
    assert [row[ROW_NUMBER] for row in rows] == [1, 2, 3]
    naive_logs = [r for r in caplog.records if "naive_timezone" in r.getMessage()]
    assert len(naive_logs) == 1  # said once, not once per chunk
    assert "seen" in naive_logs[0].getMessage()


def test_parquet_aware_timestamps_stay_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "events.parquet"
    moment = datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    pq.write_table(pa.table({"at": pa.array([moment], pa.timestamp("us", tz="UTC"))}), path)
    assert next(read_extract(path))["at"].tolist() == [moment]


def test_json_lines_keep_types_and_fill_absent_keys_with_none(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"id": "001", "n": 12345678901234567890, "data": {"k": [1, 2]}}),
                "",
                json.dumps({"id": "002", "extra": True}),
                json.dumps({"id": "003", "n": None}),
            ]
        )
    )
    rows = records(read_extract(path, chunk_size=2))
    assert rows == [
        {ROW_NUMBER: 1, "id": "001", "n": 12345678901234567890, "data": {"k": [1, 2]}, "extra": None},
        {ROW_NUMBER: 2, "id": "002", "n": None, "data": None, "extra": True},
        {ROW_NUMBER: 3, "id": "003", "n": None},
    ]


def test_malformed_json_line_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.ndjson"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(ExtractError, match="line 2 of the JSON lines extract"):
        list(read_extract(path))


class StoragePath:
    """Stands in for Airflow's ObjectStoragePath: something with open() and a name."""

    def __init__(self, data: bytes, name: str) -> None:
        self.data = data
        self.name = name
        self.opened: list[str] = []

    def open(self, mode: str = "r") -> IO[bytes]:
        import io

        self.opened.append(mode)
        return io.BytesIO(self.data)

    def __str__(self) -> str:
        return f"s3://bucket/{self.name}"


def test_any_object_with_open_is_read_in_binary_mode() -> None:
    source = StoragePath(b"a,b\n1,2\n", "extract.csv")
    assert records(read_extract(source)) == [{ROW_NUMBER: 1, "a": "1", "b": "2"}]
    assert source.opened == ["rb"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of a file source or sql="),
        ({"source": "x.csv", "sql": "select 1", "url": "sqlite://"}, "exactly one of a file source"),
        ({"sql": "select 1"}, "exactly one of engine= or url="),
        ({"source": "extract.xlsx"}, "file_format='csv'"),
        ({"source": "x.csv", "chunk_size": 0}, "chunk_size must be at least 1"),
        ({"source": "x.csv", "file_format": "xlsx"}, "unknown file_format 'xlsx'"),
        ({"source": "s3://bucket/x.csv"}, "ObjectStoragePath"),
    ],
)
def test_wrong_arguments_fail_with_what_to_change(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ExtractError, match=message):
        list(read_extract(**kwargs))


def test_an_empty_csv_file_is_refused_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    with pytest.raises(ExtractError, match="not even a header row"):
        list(read_extract(path))


def test_a_header_only_csv_gives_its_columns_and_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "header.csv"
    path.write_text("a,b\n")
    frames = list(read_extract(path))
    assert [list(frame.columns) for frame in frames] == [["a", "b"]]
    assert sum(len(frame) for frame in frames) == 0


def test_multi_character_delimiter_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a||b\n")
    with pytest.raises(ExtractError, match="one character"):
        read_extract(path, delimiter="||")  # refused at the call, before any read


def test_sqlite_by_url_in_chunks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'crm.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("create table accounts (id integer, domain text, revenue real)"))
        conn.execute(
            sa.text("insert into accounts values (1, 'acme.com', 1.5), (2, null, null), (3, '例え.jp', 2)")
        )
    engine.dispose()
    frames = list(read_extract(sql="select * from accounts order by id", url=url, chunk_size=2))
    assert [len(frame) for frame in frames] == [2, 1]
    rows = records(iter(frames))
    assert [row["id"] for row in rows] == [1, 2, 3]
    assert rows[1] == {ROW_NUMBER: 2, "id": 2, "domain": None, "revenue": None}
    assert rows[2]["domain"] == "例え.jp"


def test_sql_with_no_rows_still_gives_the_columns(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    with engine.begin() as conn:
        conn.execute(sa.text("create table t (a integer, b text)"))
    frames = list(read_extract(sql="select a, b from t where a = :a", engine=engine, params={"a": 1}))
    engine.dispose()
    assert [list(frame.columns) for frame in frames] == [["a", "b"]]
    assert sum(len(frame) for frame in frames) == 0


@pytest.mark.postgres
def test_postgresql_types(postgres_url: str, caplog: pytest.LogCaptureFixture) -> None:
    table = f"listsync_sources_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    f"create table {table} (id bigint, amount numeric(12, 2), seen timestamptz, "
                    "local_seen timestamp, payload jsonb, name text, zip text, born date)"
                )
            )
            conn.execute(
                sa.text(
                    f"insert into {table} values "
                    "(9223372036854775807, 12.50, '2024-05-01 10:00:00+02', '2024-05-01 10:00:00', "
                    """'{"plan": "pro", "seats": [1, 2]}', 'Zoë Łukasz 山田', '02134', '1990-02-01'), """
                    "(2, null, null, null, null, null, null, null)"
                )
            )
        with caplog.at_level(logging.INFO, logger="listsync.extract.sources"):
            frames = list(
                read_extract(sql=f"select * from {table} order by id desc", engine=engine, chunk_size=1)
            )
        rows = records(iter(frames))
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"drop table if exists {table}"))
        engine.dispose()
    assert [len(frame) for frame in frames] == [1, 1]
    first, second = rows
    assert first["id"] == 9223372036854775807 and type(first["id"]) is int
    assert first["amount"] == Decimal("12.50")
    assert first["seen"] == datetime(2024, 5, 1, 8, tzinfo=timezone.utc)
    assert first["seen"].tzinfo is not None
    assert first["local_seen"] == datetime(2024, 5, 1, 10, tzinfo=timezone.utc)
    assert first["payload"] == {"plan": "pro", "seats": [1, 2]}
    assert first["name"] == "Zoë Łukasz 山田"
    assert first["zip"] == "02134"
    assert first["born"] == date(1990, 2, 1)
    assert second == {
        ROW_NUMBER: 2,
        "id": 2,
        "amount": None,
        "seen": None,
        "local_seen": None,
        "payload": None,
        "name": None,
        "zip": None,
        "born": None,
    }
    assert any("local_seen" in r.getMessage() for r in caplog.records)


def test_airflow_object_storage_path_is_read_through_its_open(tmp_path: Path) -> None:
    sdk = pytest.importorskip("airflow.sdk")
    path = tmp_path / "contacts.csv"
    path.write_bytes("\ufeffid;name\n007;Zoë\n".encode())
    source = sdk.ObjectStoragePath(f"file://{path}")
    assert records(read_extract(source, delimiter=";")) == [{ROW_NUMBER: 1, "id": "007", "name": "Zoë"}]


@pytest.mark.postgres
@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_a_postgresql_read_given_up_half_way_closes_its_server_side_cursor(
    postgres_url: str, driver: str
) -> None:
    url = sa.engine.make_url(postgres_url).set(drivername=f"postgresql+{driver}")
    frames = read_extract(
        sql="select generate_series(1, 10) as n", url=url.render_as_string(False), chunk_size=2
    )
    assert len(next(frames)) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frames.close()  # what a caller that stops early does, explicitly or by dropping the iterator
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


# --- what a file holds malformed -----------------------------------------------------------


class Trickle:
    """A source whose stream gives at most ``size`` bytes per read, so that records, quotes and
    CRLFs straddle every read boundary."""

    def __init__(self, data: bytes, size: int, name: str = "extract.csv") -> None:
        self.data, self.size, self.name = data, size, name

    def open(self, mode: str = "rb") -> IO[bytes]:
        import io

        size = self.size

        class Stream(io.BytesIO):
            def read(self, n: int | None = -1) -> bytes:
                return super().read(size if n is None or n < 0 else min(n, size))

        return Stream(self.data)


def problems(frames: Iterator[pd.DataFrame]) -> dict[int, str]:
    from listsync.extract.sources import ROW_PROBLEMS

    return {row: reason for frame in frames for row, reason in frame.attrs.get(ROW_PROBLEMS, {}).items()}


def test_a_csv_row_with_a_field_too_many_or_too_few_is_kept_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "accounts.csv"
    path.write_text("domain,name\nacme.com,Acme\nbeta.io\ngamma.org,Gamma,extra\ndelta.net,Delta\n")
    rows = records(read_extract(path, chunk_size=2))
    # Every row is there, numbered as in the file; the malformed ones keep what fits the header.
    assert [row["domain"] for row in rows] == ["acme.com", "beta.io", "gamma.org", "delta.net"]
    assert rows[1]["name"] is None and rows[2]["name"] == "Gamma"
    assert problems(read_extract(path, chunk_size=2)) == {
        2: "line 3 has 1 field, the header has 2: give the missing values "
        "(an empty value still needs its ',')",
        3: "line 4 has 3 fields, the header has 2: quote a value that holds ',', or remove the extra field",
    }


def test_a_longer_first_row_does_not_shift_the_columns(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text("domain,email\nacme.com,ann@acme.com,extra\nbeta.io,bo@beta.io\n")
    assert [row["email"] for row in records(read_extract(path))] == ["ann@acme.com", "bo@beta.io"]
    assert list(problems(read_extract(path))) == [1]


quoted_values = st.lists(st.sampled_from(["a", "é", ",", '"', "\n", "\r\n", " ", "x"]), max_size=5).map(
    "".join
)


@given(
    rows=st.lists(st.tuples(st.lists(quoted_values, min_size=1, max_size=4), st.booleans()), max_size=8),
    read_size=st.sampled_from([1, 2, 3, 7, 4096]),
    chunk_size=st.integers(1, 3),
    line_end=st.sampled_from(["\n", "\r\n"]),
)
def test_csv_rows_and_their_shape_survive_any_read_size(
    rows: list[tuple[list[str], bool]], read_size: int, chunk_size: int, line_end: str
) -> None:
    def field(value: str) -> str:
        return (
            '"' + value.replace('"', '""') + '"'
            if value == "" or any(c in value for c in ',"\r\n ')
            else value
        )

    width = 3
    lines = ["a,b,c"] + [
        ",".join(map(field, values if ragged else (values + ["z"] * width)[:width]))
        for values, ragged in rows
    ]
    source = Trickle((line_end.join(lines) + line_end).encode(), read_size)
    expected = [(values if ragged else (values + ["z"] * width)[:width]) for values, ragged in rows]
    got = records(read_extract(source, chunk_size=chunk_size))
    assert [[row[name] for name in "abc"] for row in got] == [
        [(values + [None] * width)[position] or None for position in range(width)] for values in expected
    ]
    assert sorted(problems(read_extract(source, chunk_size=chunk_size))) == [
        number for number, values in enumerate(expected, start=1) if len(values) != width
    ]


unquoted_values = st.lists(
    st.sampled_from(["a", "é", " ", "\t", "NA", "null", "007", "İ", ";", "\x1c", "\x00"]), max_size=3
).map("".join)


@given(
    rows=st.lists(st.lists(unquoted_values, min_size=3, max_size=3), min_size=1, max_size=8),
    line_end=st.sampled_from(["\n", "\r\n", "\r"]),
)
def test_a_csv_without_quotes_is_read_as_arrow_text_holding_each_field_as_written(
    rows: list[list[str]], line_end: str
) -> None:
    lines = ["a,b,c", "", *(",".join(values) for values in rows)]  # an empty line is skipped
    (frame,) = read_extract(Trickle((line_end.join(lines) + line_end).encode(), 4096), arrow_text=True)
    assert frame.dtypes.eq(ARROW_TEXT).all()
    # (pandas' C parser misreads some of these: with CR line ends, ",,", an empty line, then ",,a"
    # read as [NaN, "a", NaN].)
    values = frame.astype(object)
    assert values.where(values.notna(), None).to_numpy().tolist() == [
        [value or None for value in row] for row in rows
    ]


def test_a_csv_chunk_arrow_could_read_otherwise_than_pandas_is_read_by_pandas(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    for data, by_arrow in (
        (b"a,b\nx,y\n", True),
        (b"a,b\nx,y\n \t\nz,w\n", False),  # a line of blanks, which pandas skips
        (b"a\nx\n \t\nz\n", False),  # the same in a file of one column
        (b'a,b\n"x",y\n', False),  # a quote
        (b"a,b\nx,y,z\n", False),  # a field too many, which pandas reports
    ):
        path.write_bytes(data)
        frames = list(read_extract(path, arrow_text=True))
        assert [frame.dtypes.eq(ARROW_TEXT).all() for frame in frames] == [by_arrow], data


def test_a_quote_inside_an_unquoted_value_is_text_as_pandas_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text('a,b\n5\'10",x\nAcme "Best, Inc",y\n')
    rows = records(read_extract(path))
    assert [(row["a"], row["b"]) for row in rows] == [("5'10\"", "x"), ('Acme "Best', ' Inc"')]
    assert list(problems(read_extract(path))) == [2]  # its comma splits it: a field too many


def test_a_quote_never_closed_names_the_file_and_its_line(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text('domain,name\nacme.com,"Acme\n"beta.io",Beta\ngamma.org,"Gamma\n')
    with pytest.raises(ExtractError, match=r"people\.csv: the quote opened on line 4 is never closed"):
        list(read_extract(path))


def test_a_gzip_file_is_read_as_the_file_it_holds_whatever_its_name(tmp_path: Path) -> None:
    import gzip

    for name in ("accounts.csv.gz", "accounts.csv"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(b"domain,name\nacme.com,Acme\n"))
        assert records(read_extract(path)) == [{ROW_NUMBER: 1, "domain": "acme.com", "name": "Acme"}]


def test_a_parquet_file_under_another_name_is_said_to_be_one(tmp_path: Path) -> None:
    path = tmp_path / "accounts.csv"
    pq.write_table(pa.table({"domain": ["acme.com"]}), path)
    with pytest.raises(ExtractError, match=r"accounts\.csv: this is a Parquet file .* rename it"):
        list(read_extract(path))


def test_utf16_without_a_byte_order_mark_is_refused_naming_its_encoding(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_bytes("domain,name\nacme.com,Acme\n".encode("utf-16-le"))
    with pytest.raises(ExtractError, match=r"UTF-16-LE text without a byte-order mark.*--encoding utf-16-le"):
        list(read_extract(path))
    assert records(read_extract(path, encoding="utf-16-le"))[0]["name"] == "Acme"


def test_a_column_named_twice_is_refused_whatever_the_source(tmp_path: Path) -> None:
    csv = tmp_path / "people.csv"
    csv.write_text("domain,email,email\nacme.com,a@acme.com,b@acme.com\n")
    parquet = tmp_path / "people.parquet"
    pq.write_table(
        pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["email", "email"]), parquet
    )
    for frames in (
        read_extract(csv),
        read_extract(parquet),
        read_extract(sql="select 'a' as email, 'b' as email", url="sqlite://"),
    ):
        with pytest.raises(ExtractError, match="more than one column named 'email'"):
            list(frames)


def test_a_json_line_nested_too_deep_to_read_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"id": 1}\n{"data": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(ExtractError, match="line 2 of the JSON lines extract is nested too deep"):
        list(read_extract(path))


def test_a_file_whose_rows_would_not_fit_in_memory_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import listsync.extract.sources as sources

    path = tmp_path / "people.csv"
    path.write_text("domain\n" + "acme.com\n" * 1000)
    with caplog.at_level(logging.WARNING, logger="listsync.extract.sources"):
        list(read_extract(path))
        assert not caplog.records
        # As if each prepared row took a hundredth of the machine's memory.
        monkeypatch.setattr(
            sources, "PREPARED_ROW_BYTES", os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 100
        )
        list(read_extract(path))
    (warning,) = caplog.records
    message = warning.getMessage()
    # Estimated from the lines of the first bytes read: about the 1,000 rows there are.
    assert re.search(r"MiB holds about 1\d{3} rows", message) and "of memory: split the extract" in message


def test_a_profiler_keeping_the_frames_it_saw_does_not_break_reading_a_csv(tmp_path: Path) -> None:
    # A profiler may hold the last frames that returned, and their local variables with them.
    path = tmp_path / "blocks.csv"
    path.write_text("email,name\n" + "".join(f"p{i:07d}@example.com,Person {i}\n" for i in range(100_000)))
    seen: collections.deque[Any] = collections.deque(maxlen=1000)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "return":
            seen.append(frame)

    sys.setprofile(profile)
    try:
        frames = list(read_extract(path, chunk_size=30_000))
    finally:
        sys.setprofile(None)
        seen.clear()

    assert [len(frame) for frame in frames] == [30_000, 30_000, 30_000, 10_000]
    assert frames[-1]["email"].iloc[-1] == "p0099999@example.com"


def test_parquet_dates_arrive_as_dates_and_one_python_cannot_hold_is_refused_by_column(
    tmp_path: Path,
) -> None:
    path = tmp_path / "accounts.parquet"
    days = [date(2026, 1, 1), None, date(1, 1, 1), date(9999, 12, 31)]
    pq.write_table(pa.table({"renewal": pa.array(days, pa.date32())}), path, row_group_size=2)
    rows = records(read_extract(path, chunk_size=2))
    assert [row["renewal"] for row in rows] == days
    assert type(rows[0]["renewal"]) is date

    beyond = tmp_path / "beyond.parquet"
    late = (date(9999, 12, 31) - date(1970, 1, 1)).days + 1
    pq.write_table(pa.table({"renewal": pa.array([0, late], pa.int32()).cast(pa.date32())}), beyond)
    with pytest.raises(ExtractError, match=r"column 'renewal' holds a date outside the years 1 to 9999"):
        list(read_extract(beyond))


def test_parquet_text_and_dates_that_repeat_are_one_object_per_value(tmp_path: Path) -> None:
    repeated = tmp_path / "repeated.parquet"
    owners = ["ann", None, "bob", "ann", "ann", None, "bob", "ann"]
    renewals = [date(2026, 1, 1), None, date(2026, 1, 2), date(2026, 1, 1)] * 2
    pq.write_table(pa.table({"owner": owners, "renewal": pa.array(renewals, pa.date32())}), repeated)
    rows = records(read_extract(repeated))
    assert [row["owner"] for row in rows] == owners
    assert [row["renewal"] for row in rows] == renewals
    # A value in two rows or more on average is one object, whichever rows hold it.
    assert len({id(row["owner"]) for row in rows if row["owner"] == "ann"}) == 1
    assert len({id(row["renewal"]) for row in rows if row["renewal"] == date(2026, 1, 1)}) == 1
