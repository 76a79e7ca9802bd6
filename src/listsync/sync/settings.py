"""The settings of the List syncs and their checks, importable without pandas.

An operator checks its settings in its ``__init__``, so that a mistake fails when the DAG is
parsed; the DAG processor must not import pandas, NumPy, PyArrow or phonenumbers for that. This
module imports none of them, nor any module that does. The modules doing the work take these
names from here: :mod:`listsync.sync.people` (mode, delete scope, chunk sizes),
:mod:`listsync.sync.rows` (chunk sizes) and :mod:`listsync.sync.memory` (the memory cap);
:class:`SyncSettings` holds the settings both syncs share.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from listsync.client.writers import (
    CELL_UPDATES_PER_REQUEST,
    PEOPLE_PER_REQUEST,
    ROW_DELETES_PER_REQUEST,
    ROWS_PER_REQUEST,
)
from listsync.extract.options import Shard, parse_shard
from listsync.sync.lease import LEASE_EXPIRY, LOCK_TIMEOUT

if TYPE_CHECKING:
    from listsync.files import OpenableFile
    from listsync.sync.lease import LeaseLocation
    from listsync.sync.state import StateStore

__all__ = [
    "ADD_ROWS",
    "DELETE_ROWS",
    "DELETE_SCOPES",
    "MAX_MEMORY_AUTO",
    "MAX_PLAN_AGE",
    "PEOPLE_WRITE_KINDS",
    "ROWS_CHUNK_CAPS",
    "ROWS_MODES",
    "SYNC_MODES",
    "UPDATE_CELLS",
    "VERIFY_TIMEOUT",
    "VISIBILITY_WINDOW",
    "DeleteScope",
    "RowsMode",
    "SyncMode",
    "SyncSettings",
    "adds_allowed",
    "check_rows_mode",
    "check_sync_options",
    "default_max_memory",
    "format_bytes",
    "parse_max_memory",
    "people_chunk_sizes",
    "rows_chunk_sizes",
    "updates_allowed",
]


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
    """Three quarters of the memory this process may use (its cgroup's limit in a container,
    else the machine's). The guard's estimate is at most 1.5 times a sync's measured peak
    (:mod:`listsync.sync.memory`), so a sync whose peak is below half that memory is never
    refused, and the quarter left stays for the task runner and the worker."""
    available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit():
            available = min(available, int(text))
    return available * 3 // 4


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

#: ``upsert`` adds and updates; ``mirror`` also deletes what the extract lacks; ``update_only``
#: updates what the List holds and adds nothing (an hourly score refresh must not create
#: accounts); ``insert_only`` adds what the List lacks and changes nothing it holds.
SyncMode = Literal["upsert", "mirror", "update_only", "insert_only"]
DeleteScope = Literal["accounts_in_source", "list"]
SYNC_MODES: tuple[str, ...] = ("upsert", "mirror", "update_only", "insert_only")
DELETE_SCOPES: tuple[str, ...] = ("accounts_in_source", "list")
#: The rows upsert's modes: its deletes are ``delete_missing``, allowed with ``upsert`` alone.
RowsMode = Literal["upsert", "update_only", "insert_only"]
ROWS_MODES: tuple[str, ...] = ("upsert", "update_only", "insert_only")


def adds_allowed(mode: str) -> bool:
    """Whether a sync in ``mode`` adds what the List lacks."""
    return mode != "update_only"


def updates_allowed(mode: str) -> bool:
    """Whether a sync in ``mode`` updates what the List holds."""
    return mode != "insert_only"


#: The people write kinds, as keys of ``chunk_size`` mappings and counted in summaries.
PEOPLE_WRITE_KINDS: tuple[str, ...] = ("add", "patch", "delete")


def check_sync_options(mode: str, delete_scope: str) -> None:
    """Check ``mode`` and ``delete_scope`` (callers check early, before reading anything).

    :raises ValueError: an unknown mode or delete scope, naming the allowed values.
    """
    if mode not in SYNC_MODES:
        raise ValueError(f"mode must be one of {', '.join(SYNC_MODES)}; got {mode!r}")
    if delete_scope not in DELETE_SCOPES:
        raise ValueError(f"delete_scope must be one of {', '.join(DELETE_SCOPES)}; got {delete_scope!r}")


def check_rows_mode(mode: str, delete_missing: bool) -> None:
    """Check the rows upsert's ``mode`` and ``delete_missing`` together.

    :raises ValueError: an unknown mode, or deletes asked of a mode that only adds or only updates.
    """
    if mode not in ROWS_MODES:
        raise ValueError(f"mode must be one of {', '.join(ROWS_MODES)}; got {mode!r}")
    if delete_missing and mode != "upsert":
        raise ValueError(f"delete_missing deletes rows, which mode {mode!r} never does; use mode='upsert'")


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


# --- what the people sync and the rows upsert share ----------------------------------------

#: How long a read back waits, at most, for writes the List does not show yet, in seconds
#: (``verify_timeout``, ``--verify-timeout``). A service with a queue behind its write API shows a
#: write seconds after acknowledging it; what is still not shown then is ``unconfirmed``.
VERIFY_TIMEOUT = 60.0
#: How long a write the List has not shown is waited for rather than sent again, in seconds
#: (``visibility_window``, ``--visibility-window``): a later run within it reads before it writes.
VISIBILITY_WINDOW = 3600.0


#: Seconds an approved plan stays good after its file was written: a day, so that the plan of a
#: night's dry run can be reviewed and applied through the next working day (A37).
MAX_PLAN_AGE = 24 * 3600.0


@dataclass(frozen=True)
class SyncSettings:
    """What the people sync and the rows upsert share: their safety limits, failure policy, files,
    shard, memory limit and state.

    :func:`~listsync.sync.people.sync_people` and :func:`~listsync.sync.rows.upsert_rows` take
    one as ``settings``; ``SyncTargetablePeopleOperator`` and ``UpsertRowsOperator`` build it from
    their parameters of the same names, ``listsync sync-people`` and ``listsync upsert-rows`` from
    their options (``--max-delete-fraction`` ...). A value out of range fails as the settings are
    made, before anything is read, so an operator's mistake fails when its DAG is parsed.

    :param max_delete_fraction: the largest share of what the List holds (its people, or its keyed
        rows; the shard's in a sharded run) one run may delete, 0 to 1. More, or any delete when
        the extract has no valid row, fails before any write, naming the value that would allow
        it (:func:`~listsync.sync.steps.check_delete_safety`).
    :param overwrite_with_null: a null in the extract erases the List's value (a person's field,
        a row's cell); otherwise the List's value is kept.
    :param dry_run: plan and write the plan file; send no write, keep the state as it was.
    :param fail_on_error: raise :class:`~listsync.sync.steps.SyncFailedError` at the end when the
        summary counts failures (items not written, those blocked by duplicates in the List
        among them) or drift, after everything else was written; never in a dry run.
    :param rejects_path: where rejected extract rows go, as JSON lines with their reasons: a
        local path, or an object with ``open()`` such as ``ObjectStoragePath``; None: a temporary
        file, only when some row was rejected.
    :param plan_path: where the plan goes, as JSON lines, as ``rejects_path``; None: no plan file,
        except in a dry run (then a temporary file).
    :param max_reject_fraction: fail before reading the List when a larger share of the extract's
        rows is rejected, 0 to 1 (1: rejects are counted, never fatal).
    :param shard: ``"i/n"`` (or a :class:`~listsync.extract.options.Shard`): sync only the
        accounts (people, by normalised domain) or the keys (rows) that hash to shard ``i`` of
        ``n``, in the extract and in the List alike; extract rows of other shards are counted in
        ``other_shards``, and the List counts and delete safety are the shard's. The ``n`` runs
        together sync the whole List. None: all of it.
    :param max_memory: fail, before reading further and with nothing written, as soon as the
        extract rows and List items read so far, or the writes planned, would take more memory
        than this (:mod:`listsync.sync.memory`; the message says how many shards would fit):
        bytes, or a size such as ``"2GiB"`` (:func:`parse_max_memory`). ``"auto"``: three
        quarters of the memory of the machine or container the sync runs on, worked out there
        (a sync that needs less than half of it always passes); None, 0 or ``"off"``: no limit.
    :param state_path: where the sync keeps what it applied, for the next run's three-way diff
        (:mod:`listsync.sync.state`): a local path, an object with ``open()`` such as
        ``ObjectStoragePath``, or a :class:`~listsync.sync.state.StateStore`; None: no state,
        every run diffs against the live List alone (and says so once). A state made for
        another List, shard or mapping is refused.
    :param fresh_state: do not use the state kept: diff against the live List alone, then keep
        a new state.
    :param verify_timeout: seconds the read back waits for writes the List does not show yet
        (:data:`VERIFY_TIMEOUT`); what is still not shown is ``unconfirmed``, not a failure.
    :param visibility_window: seconds a write the List has not shown yet is not sent again by a
        later run, which reads before it writes (:data:`VISIBILITY_WINDOW`).
    :param approved_plan: the plan file of a reviewed dry run (a local path or an object with
        ``open()``): the run plans again and applies only if its plan is that file, line for
        line, and the file is no older than ``max_plan_age``; otherwise it fails before any
        write (:mod:`listsync.sync.approved`). Its deletes were reviewed, so
        ``max_delete_fraction`` does not hold them back. None: no review, the usual checks.
    :param max_plan_age: seconds an ``approved_plan`` stays good after its file was written
        (:data:`MAX_PLAN_AGE`).
    :param lock_timeout: seconds a run waits for the lease of its List, job and shard while
        another run holds it (:mod:`listsync.sync.lease`, :data:`~listsync.sync.lease.LOCK_TIMEOUT`),
        then fails with nothing read or written, naming the holder. A dry run takes no lease.
    :param lease_expiry: seconds a lease outlives its holder's last renewal
        (:data:`~listsync.sync.lease.LEASE_EXPIRY`): how long a holder killed mid-run holds the
        next run back, at most.
    :param lease_holder: who the run is, for the messages of the runs that wait for it; None:
        this host and process.
    :param lease_location: where the lease lives (a :class:`~listsync.sync.lease.LeaseLocation`);
        None: where the state is (``state_path``'s folder, or its store). Without either, the
        run takes no lease, and says so.
    :raises ValueError: a fraction not between 0 and 1, a ``shard`` that is not ``"i/n"``, a
        ``max_memory`` that is not a size, or a negative or non-numeric number of seconds; the
        message begins with the setting's name.
    """

    max_delete_fraction: float = 0.1
    overwrite_with_null: bool = False
    dry_run: bool = False
    fail_on_error: bool = True
    rejects_path: str | os.PathLike[str] | OpenableFile | None = None
    plan_path: str | os.PathLike[str] | OpenableFile | None = None
    max_reject_fraction: float = 1.0
    shard: str | Shard | None = None
    max_memory: int | str | None = MAX_MEMORY_AUTO
    state_path: str | os.PathLike[str] | OpenableFile | StateStore | None = None
    fresh_state: bool = False
    verify_timeout: float = VERIFY_TIMEOUT
    visibility_window: float = VISIBILITY_WINDOW
    approved_plan: str | os.PathLike[str] | OpenableFile | None = None
    max_plan_age: float = MAX_PLAN_AGE
    lock_timeout: float = LOCK_TIMEOUT
    lease_expiry: float = LEASE_EXPIRY
    lease_holder: str | None = None
    lease_location: LeaseLocation | None = None

    def __post_init__(self) -> None:
        if self.approved_plan is not None and self.dry_run:
            raise ValueError("approved_plan applies a reviewed plan, which a dry run never does; drop one")
        parse_shard(self.shard)
        if self.max_memory != MAX_MEMORY_AUTO:  # "auto" is worked out where the sync runs
            parse_max_memory(self.max_memory)
        for name, seconds in (
            ("verify_timeout", self.verify_timeout),
            ("visibility_window", self.visibility_window),
            ("max_plan_age", self.max_plan_age),
            ("lock_timeout", self.lock_timeout),
            ("lease_expiry", self.lease_expiry),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
                raise ValueError(f"{name} must be a number of seconds, 0 or more; got {seconds!r}")
        if not self.lease_expiry > 0:
            raise ValueError(f"lease_expiry must be more than 0 seconds; got {self.lease_expiry!r}")
        for name, fraction in (
            ("max_delete_fraction", self.max_delete_fraction),
            ("max_reject_fraction", self.max_reject_fraction),
        ):
            # "not 0 <= fraction <= 1" also refuses NaN.
            if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {fraction!r}")
