"""Reading extracts: files (CSV, Parquet, JSON lines) and SQL queries, in chunks, typed predictably.

:func:`read_extract` is the one entry point. Whatever the source, every chunk it yields is a
``pandas.DataFrame`` with

- ``object`` columns holding plain Python values: ``str``, ``int`` (never a float made from an
  integer column with NULLs), ``float``, ``bool``, ``Decimal``, ``date``, ``dict``/``list``
  (JSON, jsonb, Parquet structs and lists) and ``None`` for every missing value (never NaN);
- CSV values all as text, exactly as written (``"007"`` stays ``"007"``); only an empty field
  is missing, so a person called ``NA`` or an id ``null`` survives;
- timezone-aware datetimes: naive ones are taken to be in ``naive_timezone`` (logged once per
  extract, with the columns concerned);
- an index holding the row number: the 1-based position of the row in the whole extract,
  continuing across chunks (its name is :data:`ROW_NUMBER`). Rejects and duplicate reports
  quote it.

Memory stays bounded by ``chunk_size``: files are parsed incrementally and SQL results are
streamed with a server-side cursor where the driver has one.
"""

from __future__ import annotations

import codecs
import io
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime, tzinfo
from pathlib import PurePath
from typing import IO, Any, Literal, Protocol

import pandas as pd

from listsync.client.errors import ListSyncError
from listsync.sync.normalize import resolve_timezone

__all__ = ["ROW_NUMBER", "ExtractError", "FileFormat", "check_encoding", "read_extract"]

log = logging.getLogger(__name__)

ROW_NUMBER = "__row__"
"""Name of the index of every chunk: the 1-based row number in the whole extract."""

FileFormat = Literal["csv", "parquet", "jsonl"]
_FORMATS = ("csv", "parquet", "jsonl")

_SUFFIXES: dict[str, FileFormat] = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}


class ExtractError(ListSyncError, ValueError):
    """The extract cannot be read as asked; the message says what to change."""


class _Openable(Protocol):
    """Anything with ``open(mode)``: ``pathlib.Path``, Airflow's ``ObjectStoragePath``, UPath."""

    def open(self, mode: str = ...) -> IO[bytes]: ...


def read_extract(
    source: str | os.PathLike[str] | _Openable | None = None,
    *,
    sql: Any = None,
    engine: Any = None,
    url: str | None = None,
    params: Mapping[str, Any] | None = None,
    file_format: FileFormat | None = None,
    delimiter: str | None = None,
    encoding: str = "utf-8",
    chunk_size: int = 50_000,
    naive_timezone: str | tzinfo = "UTC",
) -> Iterator[pd.DataFrame]:
    """Yield the rows of an extract as DataFrames of at most ``chunk_size`` rows.

    :param source: a file: a local path (``str`` or ``os.PathLike``) or any object with
        ``open()``, such as Airflow's ``ObjectStoragePath`` (the Airflow layer turns a URI into
        one). Mutually exclusive with ``sql``.
    :param sql: a query (text, or a SQLAlchemy executable) run on ``engine`` or ``url``.
    :param engine: a SQLAlchemy ``Engine`` (e.g. from a hook's ``get_sqlalchemy_engine()``).
    :param url: a SQLAlchemy URL; an engine is created for the read and disposed after it.
    :param params: bound parameters of ``sql``.
    :param file_format: ``"csv"``, ``"parquet"`` or ``"jsonl"``; by default taken from the
        file's suffix (``.csv``/``.tsv``/``.txt``, ``.parquet``/``.pq``, ``.jsonl``/``.ndjson``/
        ``.json``).
    :param delimiter: the CSV field separator, one character; ``","`` by default (tab for
        ``.tsv``).
    :param encoding: the text encoding of CSV and JSON lines. With the default, UTF-8, a
        byte-order mark says otherwise: a UTF-16 one reads the file as UTF-16, a UTF-8 one is
        skipped. Text that is not in the encoding raises :class:`ExtractError` naming it.
    :param chunk_size: rows per DataFrame.
    :param naive_timezone: the zone of timestamps that carry no offset (IANA name).
    :raises ExtractError: a wrong combination of arguments, an unknown format, a malformed
        JSON line (with its line number) or a delimiter longer than one character.
    """
    if chunk_size < 1:
        raise ExtractError(f"chunk_size must be at least 1, got {chunk_size}")
    zone = resolve_timezone(naive_timezone)
    if (source is None) == (sql is None):
        raise ExtractError("read_extract needs exactly one of a file source or sql=")
    if sql is not None:
        if (engine is None) == (url is None):
            raise ExtractError("a SQL extract needs exactly one of engine= or url=")
        frames = _read_sql(sql, engine, url, params, chunk_size)
        name = "SQL query"
    else:
        fmt = file_format or _format_from_suffix(source)
        if fmt not in _FORMATS:
            raise ExtractError(f"unknown file_format {fmt!r}; use 'csv', 'parquet' or 'jsonl'")
        if delimiter is not None and len(delimiter) != 1:
            raise ExtractError(f"delimiter must be one character, got {delimiter!r}")
        check_encoding(encoding)
        name = str(source)
        frames = _read_file(source, fmt, delimiter, encoding, chunk_size)
    return _finish(frames, zone, name)


def _format_from_suffix(source: Any) -> FileFormat:
    name = str(getattr(source, "name", None) or source).lower()
    for suffix, fmt in _SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
    raise ExtractError(
        f"cannot tell the format of {source!s} from its name; pass file_format='csv', 'parquet' or 'jsonl'"
    )


def _open(source: Any, stack: ExitStack) -> IO[bytes]:
    if isinstance(source, str) and "://" in source:
        raise ExtractError(
            f"{source!r} is a URI; pass an object with open() for it, such as "
            "airflow.sdk.ObjectStoragePath(uri), or a local path"
        )
    if isinstance(source, (str, PurePath)):
        return stack.enter_context(open(source, "rb"))
    if hasattr(source, "open"):
        return stack.enter_context(source.open("rb"))
    if isinstance(source, os.PathLike):
        return stack.enter_context(open(os.fspath(source), "rb"))
    raise ExtractError(f"cannot open {source!r}: expected a path or an object with open()")


def check_encoding(encoding: str) -> None:
    """:raises ExtractError: ``encoding`` names no text encoding Python knows."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ExtractError(
            f"unknown encoding {encoding!r}: give one such as utf-8, latin-1, cp1252 or utf-16"
        ) from None


def _read_file(
    source: Any, fmt: FileFormat, delimiter: str | None, encoding: str, chunk_size: int
) -> Iterator[pd.DataFrame]:
    with ExitStack() as stack:
        handle = _open(source, stack)
        codec = _codec(handle, encoding)
        try:
            if fmt == "csv":
                sep = delimiter or ("\t" if str(source).lower().endswith(".tsv") else ",")
                yield from _read_csv(handle, sep, codec, chunk_size)
            elif fmt == "parquet":
                yield from _read_parquet(handle, chunk_size)
            else:
                yield from _read_jsonl(handle, codec, chunk_size)
        except UnicodeError as exc:
            raise ExtractError(
                f"{source} is not {codec} text ({exc}); give its encoding: --encoding on the command line, "
                "encoding= on the operators (latin-1, cp1252, utf-16...)"
            ) from None
        except ExtractError as exc:
            raise ExtractError(f"{source}: {exc}") from None
        except (pd.errors.ParserError, OSError, ValueError) as exc:
            # The parsers' own errors (an unclosed quote, a file that is not Parquet) name neither
            # the file nor the way out.
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ExtractError(
                f"{source} cannot be read as {fmt} ({detail}); check the file, and that its name's "
                "extension says what it holds (.csv, .parquet, .jsonl)"
            ) from None


_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _codec(handle: IO[bytes], encoding: str) -> str:
    """The codec to read text with: ``encoding``, or, for the default UTF-8, the one a BOM names."""
    if codecs.lookup(encoding).name != "utf-8":
        return encoding
    start = handle.peek(4)[:4] if hasattr(handle, "peek") else b""
    # Without a BOM in view (a stream that cannot peek), utf-8-sig still skips a UTF-8 one.
    return next((codec for bom, codec in _BOMS if start.startswith(bom)), "utf-8-sig")


def _read_csv(handle: IO[bytes], sep: str, encoding: str, chunk_size: int) -> Iterator[pd.DataFrame]:
    try:
        reader = pd.read_csv(
            handle,
            sep=sep,
            dtype=object,  # identifiers stay text: no float coercion, leading zeros kept
            keep_default_na=False,
            na_values=[""],  # only an empty field is missing; "NA" or "null" are data
            encoding=encoding,
            chunksize=chunk_size,
        )
    except pd.errors.EmptyDataError:
        raise ExtractError("the CSV extract is empty: it has not even a header row") from None
    with reader:
        yield from reader


def _frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    # dtype=object stops pandas from turning strings into its str dtype or ints with None into floats.
    return pd.DataFrame(columns, dtype=object)


def _read_parquet(handle: IO[bytes], chunk_size: int) -> Iterator[pd.DataFrame]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(handle)
    names = parquet.schema_arrow.names
    for batch in parquet.iter_batches(batch_size=chunk_size):
        yield _frame({name: batch.column(i).to_pylist() for i, name in enumerate(names)})
    if parquet.metadata.num_rows == 0:
        yield _frame({name: [] for name in names})


def _read_jsonl(handle: IO[bytes], encoding: str, chunk_size: int) -> Iterator[pd.DataFrame]:
    text = io.TextIOWrapper(handle, encoding=encoding)
    records: list[dict[str, Any]] = []
    for line_number, line in enumerate(text, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ExtractError(
                f"line {line_number} of the JSON lines extract is not valid JSON: {exc}"
            ) from exc
        if not isinstance(record, dict):
            raise ExtractError(
                f"line {line_number} of the JSON lines extract is a {type(record).__name__}, not an object"
            )
        records.append(record)
        if len(records) == chunk_size:
            yield _records_frame(records)
            records = []
    if records:
        yield _records_frame(records)
    text.detach()  # the caller's ExitStack closes the underlying handle


def _records_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    columns: dict[str, list[Any]] = {}
    for position, record in enumerate(records):
        for key in record:
            if key not in columns:
                columns[key] = [None] * position
    for key, values in columns.items():
        values.extend(record.get(key) for record in records[len(values) :])
    return _frame(columns)


def _read_sql(
    sql: Any, engine: Any, url: str | None, params: Mapping[str, Any] | None, chunk_size: int
) -> Iterator[pd.DataFrame]:
    import sqlalchemy as sa

    owned = sa.create_engine(url) if url is not None else None
    statement = sa.text(sql) if isinstance(sql, str) else sql
    try:
        # stream_results uses a server-side cursor (PostgreSQL), so rows arrive chunk by chunk;
        # closing the result releases that cursor also when the caller stops reading early.
        with (
            (owned or engine).connect() as connection,
            connection.execution_options(stream_results=True, yield_per=chunk_size).execute(
                statement, dict(params or {})
            ) as result,
        ):
            columns = list(result.keys())
            produced = False
            for rows in result.partitions(chunk_size):
                produced = True
                yield _frame({name: [row[i] for row in rows] for i, name in enumerate(columns)})
            if not produced:
                yield _frame({name: [] for name in columns})
    except sa.exc.SQLAlchemyError as exc:
        # The driver's own words, first line only: the rest repeats the query and a link.
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise ExtractError(
            f"the SQL query of the extract failed: {detail[0] if detail else type(exc).__name__}; check "
            "the query (--sql, sql=) and the database it runs on (--sql-url, sql_conn_id)"
        ) from None
    finally:
        if owned is not None:
            owned.dispose()


def _finish(frames: Iterable[pd.DataFrame], zone: tzinfo, name: str) -> Iterator[pd.DataFrame]:
    """Number the rows across chunks, turn every missing value into None, make datetimes aware."""
    start = 1
    logged = False
    for raw in frames:
        as_objects = raw.astype(object)
        frame = as_objects.where(as_objects.notna(), None)
        naive = _localize_naive(frame, zone)
        if naive and not logged:
            log.info(
                "Extract %s: timestamps without an offset in %s are read as %s (naive_timezone)",
                name,
                ", ".join(naive),
                zone,
            )
            logged = True
        frame.index = pd.RangeIndex(start, start + len(frame), name=ROW_NUMBER)
        start += len(frame)
        yield frame


def _localize_naive(frame: pd.DataFrame, zone: tzinfo) -> list[str]:
    """Give naive datetimes the zone ``zone``, in place; return the names of the columns that had any."""
    naive_columns = []
    for name in frame.columns:
        column = frame[name]
        if not len(column) or pd.api.types.infer_dtype(column, skipna=True) not in ("datetime", "mixed"):
            continue
        values = column.tolist()
        changed = False
        had_naive = False
        for position, value in enumerate(values):
            if not isinstance(value, datetime):
                continue
            # pandas Timestamps become plain datetimes, like every other value of a chunk.
            plain = value.to_pydatetime() if isinstance(value, pd.Timestamp) else value
            if plain.tzinfo is None:
                plain = plain.replace(tzinfo=zone)
                had_naive = True
            if plain is not value:
                values[position] = plain
                changed = True
        if had_naive:
            naive_columns.append(str(name))
        if changed:
            frame[name] = pd.Series(values, index=frame.index, dtype=object)
    return naive_columns
