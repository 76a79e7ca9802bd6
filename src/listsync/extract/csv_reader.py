"""CSV files cut into whole records first, so that a row with a field too many or too few is seen.

pandas' C parser reads a row with fewer fields than the header as if the missing ones were
empty, and fails the whole file on a later row with more (a longer first row silently becomes an
index); a quote left open swallows the rest of the file. So :func:`read_csv` first cuts the bytes
into whole records with a vectorised scan (line ends and delimiters found with NumPy, outside
quoted values; a quote opens a value only at the start of a field, as in pandas), then has the
C parser read each chunk of records. A chunk whose delimiters add up to the header's width for
each of its rows is read as it is; only a chunk where they do not is counted record by record,
and its rows with another number of fields are kept, with their reason in
``frame.attrs[ROW_PROBLEMS]`` (keyed by position in the chunk), for the caller to reject them.
A quote still open at the end of the file is an error naming the line it opens on.

A chunk without a quote is read by Arrow's CSV parser instead, unless its reading could differ
from pandas': a row of another width, or a line of blanks (which pandas skips and Arrow reads as a
row). Its columns are Arrow strings (:data:`ARROW_TEXT`, a missing value null): no Python string
is made for a value, and the parser does not hold Python's interpreter lock, which the C parser
holds throughout (the 1,050,000 rows of the people benchmark's extract in one call: 0.65 s against
0.82 s). Where the two differ, pandas is wrong: with CR line ends, a row of empty fields and an
empty line after it shift the next row's values (``,,``, an empty line, ``,,a`` read as
``[NaN, "a", NaN]``).

The scan reads UTF-8 (other encodings are transcoded to it first): the bytes it looks for are
ASCII, which no multi-byte UTF-8 sequence contains.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterator
from typing import IO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as arrow_csv

from listsync.extract.options import ExtractError

__all__ = ["ARROW_TEXT", "ROW_PROBLEMS", "read_csv"]

ARROW_TEXT = pd.ArrowDtype(pa.string())
"""The type of the columns of a chunk Arrow's CSV parser read."""

ROW_PROBLEMS = "listsync_row_problems"
"""Key of ``DataFrame.attrs`` holding ``{position: reason}`` for rows the file holds malformed."""

_LF, _CR, _QUOTE = 10, 13, 34
_BLOCK = 1 << 20
"""Bytes read at a time."""
_NO_POSITIONS = np.empty(0, dtype=np.intp)


def read_csv(handle: IO[bytes], *, sep: str, encoding: str, chunk_size: int) -> Iterator[pd.DataFrame]:
    """Yield the rows of a CSV file as DataFrames of at most ``chunk_size`` rows.

    Columns are the header's names as written (a blank one is ``Unnamed: <position>``, as pandas
    names it); an empty field is missing, any other field its text. Blank lines are skipped. A
    chunk's columns are :data:`ARROW_TEXT` (missing: null) where Arrow's parser read it, else
    objects (missing: NaN).

    :param sep: the field separator, one ASCII character other than a quote or a line break
        (``listsync.extract.sources.check_delimiter``).
    :param encoding: the file's codec (``utf-8-sig`` skips a UTF-8 byte-order mark).
    :raises ExtractError: the file is empty, or a quote is never closed.
    :raises UnicodeError: the file is not text in ``encoding``.
    """
    records = _Records(_utf8_blocks(handle, encoding), ord(sep))
    header = records.header()
    if header is None:
        raise ExtractError("the CSV extract is empty: it has not even a header row")
    names = next(csv.reader(io.StringIO(header.decode("utf-8"), newline=""), delimiter=sep), [])
    columns = [name if name else f"Unnamed: {position}" for position, name in enumerate(names)]
    produced = False
    for chunk in records.chunks(chunk_size):
        frame = chunk.read(len(columns), sep)
        if len(frame):
            produced = True
            yield frame.set_axis(pd.Index(columns, dtype=object), axis=1)
    if not produced:  # a header without rows still gives its columns
        yield _empty(len(columns)).set_axis(pd.Index(columns, dtype=object), axis=1)


def _empty(width: int) -> pd.DataFrame:
    return pd.DataFrame({position: [] for position in range(width)}, dtype=object)


def _utf8_blocks(handle: IO[bytes], encoding: str) -> Iterator[bytes]:
    """The file in blocks of UTF-8: as read when it is UTF-8 (a byte-order mark dropped), else
    decoded with ``encoding`` and encoded again."""
    codec = codecs.lookup(encoding).name
    if codec in ("utf-8", "utf-8-sig"):
        first = True
        while block := handle.read(_BLOCK):
            if first and codec == "utf-8-sig":
                block = block.removeprefix(codecs.BOM_UTF8)
            first = False
            yield block
        return
    decoder = codecs.getincrementaldecoder(encoding)()
    while True:
        block = handle.read(_BLOCK)
        text = decoder.decode(block, final=not block)
        if text:
            yield text.encode("utf-8")
        if not block:
            return


class _Chunk:
    """Whole records: their bytes, where each ends, the quotes that open and close values."""

    def __init__(self, data: bytes, ends: np.ndarray, quotes: np.ndarray, line: int, sep: int) -> None:
        self.data = data
        #: Position of each record's terminator (the LF of a CRLF); the last may be len(data).
        self.ends = ends
        self.quotes = quotes
        #: The file's line number of the first byte.
        self.line = line
        self._sep = sep
        self._bytes = np.frombuffer(data, dtype=np.uint8)
        self.starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.intp)
        content_ends = ends.copy()
        crlf = (ends > self.starts) & (ends < len(data))
        crlf[crlf] = self._bytes[ends[crlf] - 1] == _CR
        crlf[crlf] &= self._bytes[ends[crlf]] == _LF
        content_ends[crlf] -= 1
        self.blank = self._blank(content_ends)

    def _blank(self, content_ends: np.ndarray) -> np.ndarray:
        """Records pandas skips: empty, or only spaces and tabs (that are not the separator)."""
        lengths = content_ends - self.starts
        blank = lengths == 0
        spaces = np.array([char for char in (32, 9) if char != self._sep], dtype=np.uint8)
        maybe = np.flatnonzero(
            (lengths > 0)
            & np.isin(self._bytes[np.minimum(self.starts, len(self.data) - 1)], spaces)
            & np.isin(self._bytes[np.maximum(content_ends - 1, 0)], spaces)
        )
        strip = bytes(spaces)
        for index in maybe.tolist():
            blank[index] = not self.data[self.starts[index] : content_ends[index]].strip(strip)
        return blank

    def read(self, width: int, sep: str) -> pd.DataFrame:
        """The chunk's rows as a DataFrame of ``width`` columns (numbered), malformed rows marked."""
        rows = int(np.count_nonzero(~self.blank))
        if not rows:
            return _empty(width)
        if not self.quotes.size and (read := self._arrow(width, sep, rows)) is not None:
            return read
        frame = self._parse(width, sep)
        if (
            frame is not None
            and isinstance(frame.index, pd.RangeIndex)
            and len(frame) == rows
            and self._delimiters() == rows * (width - 1)
        ):
            return frame
        # Some row has another number of fields than the header: count them record by record.
        fields = self._fields()[~self.blank]
        frame = self._parse(max(width, int(fields.max())), sep)
        if frame is None or len(frame) != rows:
            raise ExtractError(
                f"the rows from line {self.line} on cannot be told apart; check their quotes and delimiters"
            )
        frame = frame.iloc[:, :width]
        lines = self._lines()[~self.blank]
        frame.attrs[ROW_PROBLEMS] = {
            position: _field_count_reason(int(lines[position]), int(count), width, sep)
            for position, count in enumerate(fields.tolist())
            if count != width
        }
        return frame

    def _arrow(self, width: int, sep: str, rows: int) -> pd.DataFrame | None:
        """Arrow's reading of a chunk without quotes; None where a row has another number of fields
        than ``width``, or where Arrow reads another number of rows than pandas (a line of blanks,
        which pandas skips and Arrow reads as a row)."""
        names = [str(position) for position in range(width)]
        try:
            table = arrow_csv.read_csv(
                pa.py_buffer(self.data),
                read_options=arrow_csv.ReadOptions(
                    column_names=names, use_threads=False, block_size=len(self.data) + 1
                ),
                parse_options=arrow_csv.ParseOptions(delimiter=sep, quote_char=False),
                convert_options=arrow_csv.ConvertOptions(
                    column_types=dict.fromkeys(names, pa.string()),
                    null_values=[""],  # as pandas: only an empty field is missing
                    strings_can_be_null=True,
                ),
            )
        except pa.ArrowInvalid:  # a row with another number of fields, text that is not UTF-8
            return None
        if table.num_rows != rows:
            return None
        return pd.DataFrame(
            {
                position: pd.arrays.ArrowExtensionArray(column.combine_chunks())
                for position, column in enumerate(table.columns)
            }
        )

    def _parse(self, width: int, sep: str) -> pd.DataFrame | None:
        """pandas' reading of the chunk with ``width`` columns; None when a row has more fields."""
        try:
            return pd.read_csv(
                io.BytesIO(self.data),
                sep=sep,
                header=None,
                names=range(width),
                dtype=object,  # identifiers stay text: no float coercion, leading zeros kept
                keep_default_na=False,
                na_values=[""],  # only an empty field is missing; "NA" or "null" are data
                encoding="utf-8",
                engine="c",
            )
        except pd.errors.ParserError:
            return None

    def _delimiters(self) -> int:
        """Delimiters outside quoted values."""
        if not self.quotes.size:
            return int(np.count_nonzero(self._bytes == self._sep))
        return int(np.count_nonzero(self._outside(np.flatnonzero(self._bytes == self._sep))))

    def _outside(self, positions: np.ndarray) -> np.ndarray:
        return (np.searchsorted(self.quotes, positions) % 2) == 0

    def _fields(self) -> np.ndarray:
        """Fields of each record."""
        delimiters = np.flatnonzero(self._bytes == self._sep)
        if self.quotes.size:
            delimiters = delimiters[self._outside(delimiters)]
        return np.bincount(np.searchsorted(self.ends, delimiters), minlength=len(self.ends)) + 1

    def line_breaks(self) -> np.ndarray:
        """Positions of the chunk's line breaks."""
        return _line_breaks(self._bytes)

    def _lines(self) -> np.ndarray:
        """The file's line number of each record's first byte."""
        return self.line + np.searchsorted(self.line_breaks(), self.starts)


def _line_breaks(data: np.ndarray) -> np.ndarray:
    """Positions of every line break: a LF, or a CR not followed by one."""
    breaks = np.flatnonzero(data == _LF)
    returns = np.count_nonzero(data == _CR)
    if returns and returns != np.count_nonzero(data[breaks[breaks > 0] - 1] == _CR):
        carriage = np.flatnonzero(data == _CR)
        following = data[np.minimum(carriage + 1, len(data) - 1)]
        bare = carriage[(carriage + 1 == len(data)) | (following != _LF)]
        breaks = np.sort(np.concatenate((breaks, bare)))
    return breaks


def _field_count_reason(line: int, count: int, width: int, sep: str) -> str:
    fields = f"line {line} has {count} field{'s' if count != 1 else ''}, the header has {width}"
    if count > width:
        return f"{fields}: quote a value that holds {sep!r}, or remove the extra field"
    return f"{fields}: give the missing values (an empty value still needs its {sep!r})"


class _Records:
    """Cuts a UTF-8 byte stream into whole CSV records, as pandas' C parser would.

    Line ends and delimiters count only outside quoted values. A quote opens a value when it
    starts a field (after a delimiter or a line end); inside, a quote closes the value, or,
    doubled, stands for itself; elsewhere it is a character like any other. When every quote of
    a block sits where the simple rule "quotes alternate between opening and closing" holds,
    the block is scanned with array operations only; otherwise its quotes are walked one by one.
    """

    def __init__(self, blocks: Iterator[bytes], sep: int) -> None:
        self._blocks = blocks
        self._sep = sep
        #: Bytes read and not yet taken: a growing buffer, so a value spanning many blocks (a
        #: 5 MB cell, a quote never closed) costs one copy per block, not one of everything so far.
        self._data = bytearray()
        #: How much of ``_data`` was scanned; bytes that may pair with the next block wait.
        self._scanned = 0
        self._inside = False
        self._ends: list[np.ndarray] = []
        self._quotes: list[np.ndarray] = []
        self._found = 0
        self._eof = False
        self._line = 1

    def header(self) -> bytes | None:
        """The first record that is not blank, without its line end; None for an empty file."""
        for chunk in self.chunks(1):
            if not chunk.blank[0]:
                return chunk.data[: int(chunk.ends[0])].rstrip(b"\r")
        return None

    def chunks(self, size: int) -> Iterator[_Chunk]:
        """Chunks of at most ``size`` records, to the end of the file."""
        while True:
            while self._found < size and not self._eof:
                self._read()
            if self._found:
                yield self._take(min(size, self._found))
            elif not self._eof:
                continue
            else:
                if self._inside:
                    opening = int(np.concatenate(self._quotes)[-1])
                    line = self._line + len(_line_breaks(np.frombuffer(self._data[:opening], dtype=np.uint8)))
                    raise ExtractError(
                        f"the quote opened on line {line} is never closed, so the rest of the file would "
                        'be one value; close it (a quote inside a quoted value is written twice: "")'
                    )
                if self._data:
                    self._ends.append(np.array([len(self._data)], dtype=np.intp))
                    self._found = 1
                    yield self._take(1)
                return

    def _read(self) -> None:
        block = next(self._blocks, b"")
        self._eof = not block
        self._data += block
        stop = len(self._data)
        if not self._eof:
            # A CR may start a CRLF, a quote may be doubled: decided with the next block.
            while stop > self._scanned and self._data[stop - 1] in (_CR, _QUOTE):
                stop -= 1
        if stop > self._scanned:
            self._scan(self._scanned, stop)
            self._scanned = stop

    def _scan(self, start: int, stop: int) -> None:
        # A view of a copy of the block: a view of ``_data`` itself would forbid resizing it for
        # as long as anything (a profiler keeping this frame) holds the view.
        data = np.frombuffer(self._data[start:stop], dtype=np.uint8)
        quotes = _NO_POSITIONS
        if self._data.find(b'"', start, stop) >= 0:
            quotes = self._active_quotes(data, np.flatnonzero(data == _QUOTE), start)
        ends = np.flatnonzero(data == _LF)
        if self._data.find(b"\r", start, stop) >= 0:
            ends = _line_breaks(data)
        if quotes.size or self._inside:
            ends = ends[(np.searchsorted(quotes, ends) + self._inside) % 2 == 0]
            self._inside = bool((len(quotes) + self._inside) % 2)
            self._quotes.append(quotes + start)
        self._ends.append(ends + start)
        self._found += len(ends)

    def _active_quotes(self, data: np.ndarray, quotes: np.ndarray, start: int) -> np.ndarray:
        """The quotes of a block that open or close values (or stand doubled inside one)."""
        before = np.empty(len(quotes), dtype=np.uint8)
        before[1:] = data[quotes[1:] - 1]
        before[0] = data[quotes[0] - 1] if quotes[0] else (self._data[start - 1] if start else _LF)
        opening = (np.arange(len(quotes)) + self._inside) % 2 == 0
        # An opening quote must start a field; after a quote it is the second of a doubled one.
        if np.isin(before[opening], (self._sep, _LF, _CR, _QUOTE)).all():
            return quotes
        active: list[int] = []
        inside = self._inside
        closed_at = -2
        for position, previous in zip(quotes.tolist(), before.tolist(), strict=True):
            if inside or closed_at == position - 1 or previous in (self._sep, _LF, _CR):
                active.append(position)
                closed_at = position if inside else -2
                inside = not inside
        return np.array(active, dtype=np.intp)

    def _take(self, count: int) -> _Chunk:
        ends = np.concatenate(self._ends)
        quotes = np.concatenate(self._quotes) if self._quotes else _NO_POSITIONS
        cut = min(int(ends[count - 1]) + 1, len(self._data))
        data = bytes(self._data[:cut])
        del self._data[:cut]
        inner = quotes < cut
        chunk = _Chunk(data, ends[:count], quotes[inner], self._line, self._sep)
        # Without quoted values, every line break ends a record.
        self._line += (
            len(chunk.line_breaks()) if chunk.quotes.size else int(np.count_nonzero(chunk.ends < cut))
        )
        self._ends = [ends[count:] - cut]
        self._quotes = [quotes[~inner] - cut]
        self._found -= count
        self._scanned -= cut
        return chunk
