"""Reading extracts: files (CSV, Parquet, JSON lines) and SQL queries, in chunks, typed predictably.

:func:`read_extract` is the one entry point. Whatever the source, every chunk it yields is a
``pandas.DataFrame`` with

- ``object`` columns holding plain Python values: ``str``, ``int`` (never a float made from an
  integer column with NULLs), ``float``, ``bool``, ``Decimal``, ``date``, ``dict``/``list``
  (JSON, jsonb, Parquet structs and lists) and ``None`` for every missing value (never NaN);
- CSV values all as text, exactly as written (``"007"`` stays ``"007"``); only an empty field
  is missing, so a person called ``NA`` or an id ``null`` survives. With ``arrow_text=True``, a
  CSV chunk Arrow's parser read (:mod:`listsync.extract.csv_reader`: a chunk without quotes,
  every row as wide as the header) keeps its columns as Arrow strings
  (``pd.ArrowDtype(pa.string())``, a missing value null), no Python string made for a value:
  the people job prepares its columns so;
- timezone-aware datetimes: naive ones are taken to be in ``naive_timezone`` (logged once per
  extract, with the columns concerned);
- an index holding the row number: the 1-based position of the row in the whole extract,
  continuing across chunks (its name is :data:`ROW_NUMBER`). Rejects and duplicate reports
  quote it;
- one column per name: a header naming a column twice (in a file or a query) is an error;
- the rows a CSV file holds malformed (more or fewer fields than its header) still there, each
  with its reason in ``frame.attrs[ROW_PROBLEMS]`` (``{row number: reason}``), for the job to
  reject it (see :mod:`listsync.extract.csv_reader`).

Files are told by their bytes as well as their names: a gzip file is read decompressed
(``contacts.csv.gz``), a Parquet file or UTF-16 text under another name is an error saying so.

Memory stays bounded by ``chunk_size``: files are parsed incrementally and SQL results are
streamed with a server-side cursor where the driver has one.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from datetime import date, datetime, tzinfo
from pathlib import PurePath
from typing import IO, Any, Literal, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from listsync.extract.csv_reader import ARROW_TEXT, ROW_PROBLEMS, read_csv
from listsync.extract.options import ExtractError, check_encoding, resolve_timezone
from listsync.progress import Progress

__all__ = [
    "ROW_NUMBER",
    "ROW_PROBLEMS",
    "ExtractError",
    "FileFormat",
    "check_delimiter",
    "check_encoding",
    "read_extract",
]

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
    chunk_size: int = 20_000,
    naive_timezone: str | tzinfo = "UTC",
    arrow_text: bool = False,
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
        ``.json``, each maybe followed by ``.gz``).
    :param delimiter: the CSV field separator, one character other than a quote or a line
        break; ``","`` by default (tab for ``.tsv``).
    :param encoding: the text encoding of CSV and JSON lines. With the default, UTF-8, a
        byte-order mark says otherwise: a UTF-16 one reads the file as UTF-16, a UTF-8 one is
        skipped. Text that is not in the encoding raises :class:`ExtractError` naming it.
    :param chunk_size: rows per DataFrame.
    :param naive_timezone: the zone of timestamps that carry no offset (IANA name).
    :param arrow_text: keep the Arrow string columns of CSV chunks as they are (see above) rather
        than make them objects.
    :raises ExtractError: a wrong combination of arguments, an unknown format, a malformed
        JSON line (with its line number), a quote never closed (with its line number), a
        column named twice, or a delimiter that is not one character.
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
        check_delimiter(delimiter)
        check_encoding(encoding)
        name = str(source)
        frames = _read_file(source, fmt, delimiter, encoding, chunk_size)
    return _finish(frames, zone, name, arrow_text)


def check_delimiter(delimiter: str | None) -> None:
    """:raises ExtractError: ``delimiter`` is not one character, or is a quote or a line break."""
    if delimiter is not None and (len(delimiter) != 1 or not delimiter.isascii() or delimiter in '"\r\n'):
        raise ExtractError(
            f"delimiter must be one character other than a quote or a line break, got {delimiter!r}"
        )


def _format_from_suffix(source: Any) -> FileFormat:
    name = str(getattr(source, "name", None) or source).lower().removesuffix(".gz")
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


def _read_file(
    source: Any, fmt: FileFormat, delimiter: str | None, encoding: str, chunk_size: int
) -> Iterator[pd.DataFrame]:
    with ExitStack() as stack:
        handle = _open(source, stack)
        head = _head(handle)
        compressed = head.startswith(_GZIP_MAGIC)
        if compressed:
            unpacked: Any = gzip.GzipFile(fileobj=handle, mode="rb")
            handle = stack.enter_context(unpacked)
            head = _head(handle)
        codec = encoding
        try:
            if head.startswith(_PARQUET_MAGIC) and fmt != "parquet":
                raise ExtractError(
                    f"this is a Parquet file (it starts with {_PARQUET_MAGIC.decode()}), not {fmt}: "
                    "rename it to end in .parquet"
                )
            if fmt != "parquet":
                codec = _codec(head, encoding)
                if not compressed:
                    _warn_if_large(source, handle, head)
            if fmt == "csv":
                sep = delimiter or ("\t" if str(source).lower().endswith(".tsv") else ",")
                yield from read_csv(handle, sep=sep, encoding=codec, chunk_size=chunk_size)
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
_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_HEAD = 1 << 16
"""Bytes looked at before a file is read: what kind of file it is, how many rows it may hold."""


def _head(handle: IO[bytes]) -> bytes:
    """The first bytes of ``handle`` (up to :data:`_HEAD`), left for the reader to read again."""
    if hasattr(handle, "peek"):
        return handle.peek(_HEAD)[:_HEAD]
    if getattr(handle, "seekable", lambda: False)():
        head = handle.read(_HEAD)
        handle.seek(0)
        return head
    return b""


def _codec(head: bytes, encoding: str) -> str:
    """The codec to read text with: ``encoding``, or, for the default UTF-8, the one a BOM names.

    :raises ExtractError: read as UTF-8, the text would be UTF-16 without a byte-order mark (every
        other byte a zero), which decodes without an error into text full of NUL characters.
    """
    if codecs.lookup(encoding).name != "utf-8":
        return encoding
    codec = next((codec for bom, codec in _BOMS if head.startswith(bom)), None)
    if codec is not None:
        return codec
    sample = head[:4096]
    for kind, zeros in (("utf-16-le", sample[1::2]), ("utf-16-be", sample[0::2])):
        if len(zeros) >= 8 and zeros.count(0) > len(zeros) * 3 // 4:
            raise ExtractError(
                f"this looks like {kind.upper()} text without a byte-order mark (every other byte is "
                f"zero), not utf-8; give its encoding: --encoding {kind} on the command line, "
                f"encoding='{kind}' on the operators"
            )
    # utf-8-sig skips a UTF-8 BOM that was not in view (a stream that cannot peek).
    return "utf-8-sig"


#: Memory a job holds per extract row until it writes: it keeps every prepared record (the
#: people sync of ``benchmarks/read_normalize.py`` holds 1,000,000 rows in about 1.5 GB).
PREPARED_ROW_BYTES = 1600


def _warn_if_large(source: Any, handle: IO[bytes], head: bytes) -> None:
    """Log a warning when the rows the file's size suggests would take more than half the
    machine's memory once prepared (estimated from the lines of its first bytes)."""
    size, memory = _file_size(handle), _memory_size()
    lines = head.count(b"\n") or head.count(b"\r")
    if not size or not memory or not lines:
        return
    rows = size * lines // len(head)
    peak = rows * PREPARED_ROW_BYTES
    if peak > memory // 2:
        log.warning(
            "Extract %s: %s holds about %d rows; a job keeps them all until it writes, about %s, and "
            "this machine has %s of memory: split the extract, or run it where there is more memory",
            source,
            _bytes(size),
            rows,
            _bytes(peak),
            _bytes(memory),
        )


def _bytes(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def _file_size(handle: IO[bytes]) -> int | None:
    try:
        return os.fstat(handle.fileno()).st_size
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        size = getattr(handle, "size", None)  # fsspec files (object storage)
        return size if isinstance(size, int) else None


def _memory_size() -> int | None:
    """The machine's physical memory in bytes, where the system says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def _frame(names: Sequence[Any], columns: Sequence[Sequence[Any]]) -> pd.DataFrame:
    # dtype=object stops pandas from turning strings into its str dtype or ints with None into
    # floats; columns go in by position, so two of one name both arrive (and _finish refuses them).
    frame = pd.DataFrame(dict(enumerate(columns)), dtype=object)
    frame.columns = pd.Index(list(names), dtype=object)
    return frame


def _read_parquet(handle: IO[bytes], chunk_size: int) -> Iterator[pd.DataFrame]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(handle)
    names = parquet.schema_arrow.names
    for batch in parquet.iter_batches(batch_size=chunk_size):
        yield _frame(
            names, [_python_values(name, column) for name, column in zip(names, batch.columns, strict=True)]
        )
    if parquet.metadata.num_rows == 0:
        yield _frame(names, [[] for _ in names])


# The days since 1970-01-01 of the first and last dates Python holds.
_PYTHON_DAYS = ((date.min - date(1970, 1, 1)).days, (date.max - date(1970, 1, 1)).days)


def _python_values(name: str, column: pa.Array) -> Sequence[Any]:
    """A Parquet column's values as Python objects. Text and dates that repeat (a value in two
    rows or more on average) are made once per value, each row holding the one object: a column
    of 50 owners takes 50 strings, not one a row. Other dates go through NumPy, twenty times
    faster than ``to_pylist``.

    :raises ExtractError: a date outside the years 1 to 9999, which Python cannot hold.
    """
    kind = column.type
    dates = pa.types.is_date32(kind)
    if dates:
        days = pc.min_max(column.cast(pa.int32()))
        first, last = days["min"].as_py(), days["max"].as_py()
        if first is not None and (first < _PYTHON_DAYS[0] or last > _PYTHON_DAYS[1]):
            raise ExtractError(
                f"column {name!r} holds a date outside the years 1 to 9999, which Python cannot hold: "
                "correct it at the source"
            )
    elif not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return column.to_pylist()
    encoded = column.dictionary_encode()
    distinct = len(encoded.dictionary)
    if distinct * 2 <= len(column):
        objects = np.array([*encoded.dictionary.to_pylist(), None], dtype=object)
        return objects[encoded.indices.fill_null(distinct).to_numpy()]
    return column.to_numpy(zero_copy_only=False).astype(object) if dates else column.to_pylist()


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
        except RecursionError:
            raise ExtractError(
                f"line {line_number} of the JSON lines extract is nested too deep to be read"
            ) from None
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
    return _frame(list(columns), list(columns.values()))


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
                yield _frame(columns, [[row[i] for row in rows] for i in range(len(columns))])
            if not produced:
                yield _frame(columns, [[] for _ in columns])
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


def _finish(
    frames: Iterable[pd.DataFrame], zone: tzinfo, name: str, arrow_text: bool
) -> Iterator[pd.DataFrame]:
    """Number the rows across chunks, turn every missing value into None (Arrow text kept as it
    is with ``arrow_text``), make datetimes aware, refuse a column named twice, and key the
    reasons of malformed rows by row number."""
    start = 1
    logged = False
    progress = Progress(log, "Extract %s: %d rows read so far")
    for raw in frames:
        if start == 1:
            _check_unique_columns(raw.columns, name)
        frame = _plain(raw, arrow_text)
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
        frame.attrs.pop(ROW_PROBLEMS, None)
        problems = raw.attrs.get(ROW_PROBLEMS)
        if problems:
            frame.attrs[ROW_PROBLEMS] = {start + position: reason for position, reason in problems.items()}
        start += len(frame)
        progress(name, start - 1)
        yield frame


def _plain(raw: pd.DataFrame, arrow_text: bool) -> pd.DataFrame:
    """``raw``'s columns as objects, a missing value None; with ``arrow_text``, a chunk of Arrow
    strings (as Arrow's CSV parser reads one) as it is."""
    if len(raw.columns) and all(dtype == ARROW_TEXT for dtype in raw.dtypes):
        if arrow_text:
            return raw
        # Arrow makes its nulls None itself: twice as fast as pandas' astype and where.
        arrays = [pa.array(column.array).to_numpy(zero_copy_only=False) for _, column in raw.items()]
        return pd.DataFrame(dict(enumerate(arrays)), dtype=object, copy=False).set_axis(raw.columns, axis=1)
    as_objects = raw.astype(object)
    return as_objects.where(as_objects.notna(), None)


def _check_unique_columns(columns: pd.Index, name: str) -> None:
    """:raises ExtractError: a column name is given twice (every column but one would be lost)."""
    repeated = sorted({str(column) for column in columns[columns.duplicated()]})
    if repeated:
        raise ExtractError(
            f"{name} has more than one column named {', '.join(map(repr, repeated))}: give each column "
            "its own name (in a query, an alias)"
        )


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
