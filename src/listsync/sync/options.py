"""The settings of the sync jobs and their checks, importable without pandas.

An operator checks its settings in its ``__init__``, so that a mistake fails when the DAG is
parsed; the DAG processor must not import pandas, NumPy, PyArrow or phonenumbers for that. This
module imports none of them, nor any module that does. The modules doing the work take these
names from here: :mod:`listsync.sync.sources` and :mod:`listsync.sync.normalize` (encoding, zone),
:mod:`listsync.sync.people` (mode, delete scope, chunk sizes), :mod:`listsync.sync.rows` (chunk
sizes) and :mod:`listsync.sync.events` (the event mapping).
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timezone, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from listsync.client.errors import ListSyncError
from listsync.client.writers import (
    CELL_UPDATES_PER_REQUEST,
    PEOPLE_PER_REQUEST,
    ROW_DELETES_PER_REQUEST,
    ROWS_PER_REQUEST,
)

__all__ = [
    "ADD_ROWS",
    "DELETE_ROWS",
    "DELETE_SCOPES",
    "MAX_MEMORY_AUTO",
    "PEOPLE_WRITE_KINDS",
    "ROWS_CHUNK_CAPS",
    "SYNC_MODES",
    "UPDATE_CELLS",
    "DeleteScope",
    "EventMapping",
    "ExtractError",
    "Shard",
    "SyncMode",
    "check_encoding",
    "check_output_file",
    "check_sync_options",
    "default_max_memory",
    "format_bytes",
    "parse_max_memory",
    "parse_shard",
    "people_chunk_sizes",
    "resolve_timezone",
    "rows_chunk_sizes",
]


# --- extracts ------------------------------------------------------------------------------


class ExtractError(ListSyncError, ValueError):
    """The extract cannot be read as asked; the message says what to change."""


def check_encoding(encoding: str) -> None:
    """:raises ExtractError: ``encoding`` names no text encoding Python knows."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise ExtractError(
            f"unknown encoding {encoding!r}: give one such as utf-8, latin-1, cp1252 or utf-16"
        ) from None


def resolve_timezone(name: str | tzinfo) -> tzinfo:
    """A tzinfo from an IANA name (``"UTC"``, ``"Europe/Paris"``) or a tzinfo; ``ValueError`` if unknown."""
    if isinstance(name, tzinfo):
        return name
    if name.upper() == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"naive_timezone {name!r} is not an IANA time zone name such as 'UTC'") from exc


# --- the files a job writes ----------------------------------------------------------------


def check_output_file(path: str | os.PathLike[str], what: str, advice: str) -> None:
    """Check that a job can write its file (rejects, plan, checkpoint) at the local ``path``,
    creating the folder as the job would; a URI (object storage) is left to its store.

    Called before anything is read or sent, so that a run does not fail, its work done, for a
    file it cannot keep.

    :param what: the file, for the message ("the rejects file").
    :param advice: what to do, naming the option or parameter that gave the path.
    :raises ValueError: ``cannot write <what> <path> (<reason>); <advice>``.
    """
    if "://" in os.fspath(path):
        return
    target = os.path.abspath(path)
    try:
        if os.path.isdir(target):
            raise IsADirectoryError(f"{target} is a folder")
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        if os.path.exists(target) and not os.access(target, os.W_OK):
            raise PermissionError(f"{target} is read-only")
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ValueError(f"cannot write {what} {os.fspath(path)} ({exc.strerror or exc}); {advice}") from None


# --- shards of a List sync ----------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: the accounts (people) or keys (rows) whose normalised text
    hashes to ``index``, on the extract's side and the List's alike.

    The hash is BLAKE2b of the UTF-8 text, its first 8 bytes as an integer, modulo ``count``: the
    same on every machine and Python version, unlike ``hash()``.
    """

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, key: str) -> bool:
        """Whether the normalised account domain or row key ``key`` is in this shard."""
        # surrogatepass: a lone surrogate cannot be UTF-8, yet its row must land in one shard.
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.count == self.index


def parse_shard(shard: str | Shard | None) -> Shard | None:
    """The shard ``"i/n"`` names (``"0/4"`` is the first of four); None for None (no sharding).

    :raises ValueError: not two whole numbers ``i/n`` with ``n >= 1`` and ``0 <= i < n``.
    """
    if shard is None or isinstance(shard, Shard):
        return shard
    match = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", str(shard))
    if match is None or not int(match[1]) < int(match[2]):
        raise ValueError(
            f'shard must be "i/n" with 0 <= i < n, such as "0/4" (the first of four); got {shard!r}'
        )
    return Shard(int(match[1]), int(match[2]))


# --- the memory a List sync may take -------------------------------------------------------

#: ``max_memory`` that asks for :func:`default_max_memory`, worked out where the sync runs.
MAX_MEMORY_AUTO = "auto"
_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_MEMORY_OFF = ("off", "none", "0")


def default_max_memory() -> int:
    """Half the memory this process may use (its cgroup's limit in a container, else the
    machine's): the other half stays for the task runner, the worker and other tasks."""
    available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit():
            available = min(available, int(text))
    return available // 2


def parse_max_memory(max_memory: int | str | None) -> int | None:
    """``max_memory`` in bytes: a whole number of bytes, or a number with a unit (``"2GiB"``,
    ``"500MB"``, ``"1.5 GB"``; KB, MB, GB, TB count by 1000, KiB, MiB, GiB, TiB by 1024);
    ``"auto"`` for :func:`default_max_memory`. None, 0 and ``"off"``: no limit (None).

    :raises ValueError: anything else, naming the forms allowed.
    """
    if max_memory is None or max_memory == 0 or str(max_memory).strip().lower() in _MEMORY_OFF:
        return None
    if isinstance(max_memory, str) and max_memory.strip().lower() == MAX_MEMORY_AUTO:
        return default_max_memory()
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*", str(max_memory))
    unit = _MEMORY_UNITS.get(match[2].lower()) if match is not None else None
    if isinstance(max_memory, bool) or match is None or unit is None or isinstance(max_memory, float):
        raise ValueError(
            'max_memory must be a number of bytes or a size such as "2GiB", "500MB" or "1.5 GB" '
            f'("auto": the default; "off": no limit); got {max_memory!r}'
        )
    return int(float(match[1]) * unit) or None


def format_bytes(size: float) -> str:
    """``size`` bytes for a message: ``"5.1 GiB"``, ``"500 MiB"``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{int(size)} bytes"


# --- the people sync -----------------------------------------------------------------------

SyncMode = Literal["upsert", "mirror"]
DeleteScope = Literal["accounts_in_source", "list"]
SYNC_MODES: tuple[str, ...] = ("upsert", "mirror")
DELETE_SCOPES: tuple[str, ...] = ("accounts_in_source", "list")

#: The people write kinds, as keys of ``chunk_size`` mappings and counted in summaries.
PEOPLE_WRITE_KINDS: tuple[str, ...] = ("add", "patch", "delete")


#: How long a read back waits, at most, for writes the List does not show yet, in seconds
#: (``verify_timeout``, ``--verify-timeout``). A service with a queue behind its write API shows a
#: write seconds after acknowledging it; what is still not shown then is ``unconfirmed``.
VERIFY_TIMEOUT = 60.0
#: How long a write the List has not shown is waited for rather than sent again, in seconds
#: (``visibility_window``, ``--visibility-window``): a later run within it reads before it writes.
VISIBILITY_WINDOW = 3600.0


def check_state_options(verify_timeout: float, visibility_window: float) -> None:
    """Check the read back's and the state's settings.

    :raises ValueError: a negative or non-numeric ``verify_timeout`` or ``visibility_window``.
    """
    for name, value in (("verify_timeout", verify_timeout), ("visibility_window", visibility_window)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            raise ValueError(f"{name} must be a number of seconds, 0 or more; got {value!r}")


def check_sync_options(mode: str, delete_scope: str) -> None:
    """Check ``mode`` and ``delete_scope`` (callers check early, before reading anything).

    :raises ValueError: an unknown mode or delete scope, naming the allowed values.
    """
    if mode not in SYNC_MODES:
        raise ValueError(f"mode must be one of {', '.join(SYNC_MODES)}; got {mode!r}")
    if delete_scope not in DELETE_SCOPES:
        raise ValueError(f"delete_scope must be one of {', '.join(DELETE_SCOPES)}; got {delete_scope!r}")


def people_chunk_sizes(chunk_size: int | Mapping[str, int]) -> dict[str, int]:
    """People per request for each write kind, from one number or a per-kind mapping.

    :raises ValueError: a kind other than add, patch or delete, or a size below 1 or above
        the service's cap (A21).
    """
    if isinstance(chunk_size, Mapping):
        unknown = sorted(set(chunk_size) - set(PEOPLE_WRITE_KINDS))
        if unknown:
            raise ValueError(
                f"chunk_size keys must be among {', '.join(PEOPLE_WRITE_KINDS)}; got {', '.join(unknown)}"
            )
        sizes = {kind: int(chunk_size.get(kind, PEOPLE_PER_REQUEST)) for kind in PEOPLE_WRITE_KINDS}
    else:
        sizes = dict.fromkeys(PEOPLE_WRITE_KINDS, int(chunk_size))
    for kind, size in sizes.items():
        if not 1 <= size <= PEOPLE_PER_REQUEST:
            raise ValueError(f"chunk_size for {kind} must be between 1 and {PEOPLE_PER_REQUEST}, got {size}")
    return sizes


# --- the rows upsert -----------------------------------------------------------------------

#: Write kinds of the rows upsert, as counted in summaries and as keys of ``chunk_size`` mappings.
ADD_ROWS, UPDATE_CELLS, DELETE_ROWS = "add_rows", "update_cells", "delete_rows"

#: Default chunk sizes: the per-request caps of docs/assumptions.md A21.
ROWS_CHUNK_CAPS: dict[str, int] = {
    ADD_ROWS: ROWS_PER_REQUEST,
    UPDATE_CELLS: CELL_UPDATES_PER_REQUEST,
    DELETE_ROWS: ROW_DELETES_PER_REQUEST,
}


def rows_chunk_sizes(chunk_size: int | Mapping[str, int] | None) -> dict[str, int]:
    """Items per request for each kind (:data:`ADD_ROWS`, :data:`UPDATE_CELLS`, :data:`DELETE_ROWS`).

    ``None`` gives the service's caps (A21: 500 rows, 1,000 cell updates, 1,000 row deletes);
    one number applies to every kind, each kind keeping at most its cap; a mapping sets kinds
    one by one (the others keep their cap).

    :raises ValueError: an unknown kind, or a size below 1 or above its kind's cap.
    """
    if chunk_size is None:
        return dict(ROWS_CHUNK_CAPS)
    if not isinstance(chunk_size, Mapping):
        if int(chunk_size) < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        return {kind: min(int(chunk_size), cap) for kind, cap in ROWS_CHUNK_CAPS.items()}
    unknown = sorted(set(chunk_size) - set(ROWS_CHUNK_CAPS))
    if unknown:
        raise ValueError(
            f"chunk_size keys must be among {', '.join(ROWS_CHUNK_CAPS)}; got {', '.join(unknown)}"
        )
    sizes = {kind: int(chunk_size.get(kind, cap)) for kind, cap in ROWS_CHUNK_CAPS.items()}
    for kind, size in sizes.items():
        if not 1 <= size <= ROWS_CHUNK_CAPS[kind]:
            raise ValueError(
                f"chunk_size for {kind} must be between 1 and {ROWS_CHUNK_CAPS[kind]}, got {size}"
            )
    return sizes


# --- event ingestion -----------------------------------------------------------------------

# Event fields as targets of the column map (see EventMapping.column_map).
SIGNAL = "signal"
IDENTITY_TYPE = "identity_type"
IDENTITY_ID = "identity_id"
DATA = "data"
DATA_PREFIX = "data."
TIMESTAMP = "timestamp"
REFERENCE = "reference"


@dataclass(frozen=True)
class EventMapping:
    """How the columns of an extract become signal events (spec §2.3).

    Give exactly one of each pair: ``signal`` (every row the same signal slug) or
    ``signal_column``; ``identity_type`` or ``identity_type_column``; ``data_columns`` (packed into
    ``data`` under their column names) or ``data_column`` (a JSON object per row), or neither for
    events without data. ``timestamp_column`` and ``reference_column`` are optional: without a
    timestamp the service stamps the event on arrival; without a reference one is derived
    (:func:`~listsync.sync.events.event_reference`). ``version`` is a schema version number or ``"latest"``.

    :raises ValueError: when a pair is given twice or not at all, naming the parameters.
    """

    identity_id_column: str
    signal: str | None = None
    signal_column: str | None = None
    identity_type: str | None = None
    identity_type_column: str | None = None
    data_columns: Sequence[str] | None = None
    data_column: str | None = None
    timestamp_column: str | None = None
    reference_column: str | None = None
    version: int | float | str | None = None

    def __post_init__(self) -> None:
        _exactly_one("signal", self.signal, "signal_column", self.signal_column)
        _exactly_one("identity_type", self.identity_type, "identity_type_column", self.identity_type_column)
        if self.data_columns is not None and self.data_column is not None:
            raise ValueError("give data_columns or data_column, not both")
        if isinstance(self.data_columns, str):
            raise ValueError("data_columns must be a list of column names, not a string")
        if self.data_columns is not None:
            object.__setattr__(self, "data_columns", tuple(self.data_columns))
        for name in ("signal", "identity_type"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if not (
            self.version is None
            or self.version == "latest"
            or (isinstance(self.version, (int, float)) and not isinstance(self.version, bool))
        ):
            raise ValueError(f"version must be a number or 'latest', got {self.version!r}")
        columns = self.columns()
        repeated = sorted({column for column in columns if columns.count(column) > 1})
        if repeated:
            raise ValueError(f"each column may be mapped once; mapped more than once: {', '.join(repeated)}")

    def columns(self) -> list[str]:
        """The extract columns this mapping reads, in a stable order."""
        return [column for column, _ in self._targets()]

    def column_map(self) -> dict[str, str]:
        """Extract column → event field, in the form :mod:`listsync.sync.prepare` works with.

        Data columns map to ``data.<column>``; a JSON data column maps to ``data``.
        """
        return dict(self._targets())

    def _targets(self) -> list[tuple[str, str]]:
        named = {
            SIGNAL: self.signal_column,
            IDENTITY_TYPE: self.identity_type_column,
            IDENTITY_ID: self.identity_id_column,
            DATA: self.data_column,
            TIMESTAMP: self.timestamp_column,
            REFERENCE: self.reference_column,
        }
        pairs = [(column, target) for target, column in named.items() if column is not None]
        pairs += [(column, DATA_PREFIX + column) for column in self.data_columns or ()]
        return pairs


def _exactly_one(name: str, value: object, other_name: str, other_value: object) -> None:
    if (value is None) == (other_value is None):
        raise ValueError(f"give exactly one of {name} (a fixed value) or {other_name} (a column)")
