"""The settings of the List syncs and their checks, importable without pandas.

An operator checks its settings in its ``__init__``, so that a mistake fails when the DAG is parsed;
the DAG processor must not import pandas, NumPy, PyArrow or phonenumbers for that. This module
imports none of them, nor any module that does. The modules doing the work take these names
from here: :mod:`listsync.sync.people` (mode, delete scope, chunk sizes), :mod:`listsync.sync.rows`
(chunk sizes) and :mod:`listsync.sync.memory` (the memory cap); :class:`SyncSettings` holds the
settings both syncs share."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ByteSize, TypeAdapter, ValidationError

from listsync.client.in_flight import MAX_IN_FLIGHT, MAX_IN_FLIGHT_CEILING, check_max_in_flight
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
    "JOBS",
    "MAX_MEMORY_AUTO",
    "MAX_PLAN_AGE",
    "PEOPLE_WRITE_KINDS",
    "ROWS_CHUNK_CAPS",
    "ROWS_MODES",
    "SETTINGS",
    "SHARED",
    "SYNC_MODES",
    "UPDATE_CELLS",
    "VERIFY_TIMEOUT",
    "VISIBILITY_WINDOW",
    "DeleteScope",
    "Job",
    "RowsMode",
    "Setting",
    "SyncMode",
    "SyncSettings",
    "adds_allowed",
    "check_history",
    "check_rows_mode",
    "check_sync_options",
    "default_max_memory",
    "format_bytes",
    "parse_max_memory",
    "people_chunk_sizes",
    "rows_chunk_sizes",
    "settings_of",
    "updates_allowed",
    "with_param_docs",
]


# --- the memory a List sync may take -------------------------------------------------------

#: ``max_memory`` that asks for :func:`default_max_memory`, worked out where the sync runs.
MAX_MEMORY_AUTO = "auto"
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
    """``max_memory`` in bytes: a whole number of bytes, or a size as :class:`pydantic.ByteSize`
    reads it (``"2GiB"``, ``"500MB"``, ``"1.5 GB"``; KB, MB, GB, TB count by 1000, KiB, MiB, GiB,
    TiB by 1024); ``"auto"`` for :func:`default_max_memory`. None, 0 and ``"off"``: no limit
    (None).

    :raises ValueError: anything else, naming the forms allowed.
    """
    if max_memory is None or max_memory == 0 or str(max_memory).strip().lower() in _MEMORY_OFF:
        return None
    if isinstance(max_memory, str) and max_memory.strip().lower() == MAX_MEMORY_AUTO:
        return default_max_memory()
    try:
        # ByteSize reads True as 1 and a float as whole bytes: neither is a size anyone meant.
        if isinstance(max_memory, bool | float):
            raise ValueError
        return int(TypeAdapter(ByteSize).validate_python(max_memory)) or None
    except (ValueError, ValidationError):
        raise ValueError(
            'max_memory must be a number of bytes or a size such as "2GiB", "500MB" or "1.5 GB" '
            f'("auto": the default; "off": no limit); got {max_memory!r}'
        ) from None


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
    _people_mode(mode)
    if delete_scope not in DELETE_SCOPES:
        raise ValueError(f"delete_scope must be one of {', '.join(DELETE_SCOPES)}; got {delete_scope!r}")


def check_rows_mode(mode: str, delete_missing: bool) -> None:
    """Check the rows upsert's ``mode`` and ``delete_missing`` together.

    :raises ValueError: an unknown mode, or deletes asked of a mode that only adds or only updates.
    """
    _rows_mode(mode)
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


# --- every setting of a List job, declared once ---------------------------------------------


def _fraction(name: str) -> Callable[[Any], None]:
    def check(fraction: Any) -> None:
        # "not 0 <= fraction <= 1" also refuses NaN.
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1:
            raise ValueError(f"{name} must be between 0 and 1, got {fraction!r}")

    return check


def _seconds(name: str, *, least: float = 0.0, inclusive: bool = True) -> Callable[[Any], None]:
    def check(seconds: Any) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= least:
            raise ValueError(f"{name} must be a number of seconds, 0 or more; got {seconds!r}")
        if not inclusive and not seconds > least:
            raise ValueError(f"{name} must be more than {least:g} seconds; got {seconds!r}")

    return check


def _max_memory(max_memory: Any) -> None:
    if max_memory != MAX_MEMORY_AUTO:  # "auto" is worked out where the sync runs
        parse_max_memory(max_memory)


def _people_mode(mode: Any) -> None:
    if mode not in SYNC_MODES:
        raise ValueError(f"mode must be one of {', '.join(SYNC_MODES)}; got {mode!r}")


def _rows_mode(mode: Any) -> None:
    if mode not in ROWS_MODES:
        raise ValueError(f"mode must be one of {', '.join(ROWS_MODES)}; got {mode!r}")


Job = Literal["people", "rows"]
JOBS: tuple[Job, ...] = ("people", "rows")


@dataclass(frozen=True)
class Setting:
    """One setting of a List job, declared once: its name (the operators' parameter, the field of
    :class:`SyncSettings` when the sync takes it there, ``--name-with-dashes`` on the command
    line), its default, its help and its check. The operators' docstrings and the command line's
    options are made from it (:func:`param_docs`, ``commands.plan_options``).

    :param check: raises ``ValueError`` for a value out of range, the message beginning with the
        setting's name; None: any value of its type.
    :param jobs: the jobs that take it.
    """

    name: str
    default: Any
    help: str
    check: Callable[[Any], object] | None = None
    jobs: tuple[Job, ...] = JOBS

    @property
    def option(self) -> str:
        """The command line's option: ``--no-`` before a flag that is on by default."""
        flag = self.name.replace("_", "-")
        return f"--no-{flag}" if self.default is True else f"--{flag}"

    def checked(self, value: Any) -> Any:
        """``value``, once its check passed."""
        if self.check is not None:
            self.check(value)
        return value


#: Every setting of a List job, in the order the docs list them.
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "mode",
        "upsert",
        "``upsert`` (add and patch, never delete), ``mirror`` (also delete the people the extract "
        "lacks), ``update_only`` (patch, add no one) or ``insert_only`` (add, patch no one).",
        _people_mode,
        jobs=("people",),
    ),
    Setting(
        "mode",
        "upsert",
        "``upsert`` (add and update), ``update_only`` (update the rows the List holds, add none) "
        "or ``insert_only`` (add the rows the List lacks, update none); ``delete_missing`` goes "
        "with ``upsert`` alone.",
        _rows_mode,
        jobs=("rows",),
    ),
    Setting(
        "chunk_size",
        PEOPLE_PER_REQUEST,
        f"People per request, one number or per kind (``add``, ``patch``, ``delete``); at most "
        f"{PEOPLE_PER_REQUEST}.",
        people_chunk_sizes,
        jobs=("people",),
    ),
    Setting(
        "chunk_size",
        None,
        "Items per request, one number or per kind (``add_rows``, at most "
        f"{ROWS_PER_REQUEST}; ``update_cells``, ``delete_rows``, at most {CELL_UPDATES_PER_REQUEST}); "
        "None: the service's caps.",
        rows_chunk_sizes,
        jobs=("rows",),
    ),
    Setting(
        "max_delete_fraction",
        0.1,
        "The largest share of what the List holds (its people, or its keyed rows; the shard's in "
        "a sharded run) one run may delete, 0 to 1. More, or any delete when the extract has no "
        "valid row, fails before any write, naming the value that would allow it.",
        _fraction("max_delete_fraction"),
    ),
    Setting(
        "overwrite_with_null",
        False,
        "A null in the extract erases the List's value (a person's field, a row's cell); "
        "otherwise the List's value is kept.",
    ),
    Setting("dry_run", False, "Plan and write the plan file; send no write, keep the state as it was."),
    Setting(
        "fail_on_error",
        True,
        "Fail at the end, after everything else was written, when some items could not be "
        "written (or drifted); never in a dry run. Off: they are only counted.",
    ),
    Setting(
        "rejects_path",
        None,
        "Where rejected extract rows go, as JSON lines with their reasons: a local path or an "
        "object-storage URI; none: a temporary file, only when some row was rejected.",
    ),
    Setting(
        "plan_path",
        None,
        "Where the plan goes, as JSON lines, as ``rejects_path``; none: no plan file, except in a "
        "dry run (then a temporary file).",
    ),
    Setting(
        "outcomes_path",
        None,
        "Where each person or row whose write did not end as planned (failed, drifted, "
        "unconfirmed, not found, refused) goes, as JSON lines with the service's answer and whether "
        "a re-run can cure it, as ``rejects_path``; none: a temporary file, only when there is one.",
    ),
    Setting(
        "report_path",
        None,
        "Where the run's report goes, an HTML page to look at (counts, rejects by reason, failures, "
        "a sample of the changes), as ``rejects_path``; none: beside the plan file, as ``.html``.",
    ),
    Setting(
        "max_reject_fraction",
        1.0,
        "Fail before reading the List when a larger share of the extract's rows is rejected, 0 to "
        "1 (1: rejects are counted, never fatal).",
        _fraction("max_reject_fraction"),
    ),
    Setting(
        "shard",
        None,
        "``i/n``: sync only the accounts (people, by normalised domain) or keys (rows) that hash "
        "to shard ``i`` of ``n``; the ``n`` runs together sync the whole List.",
        parse_shard,
    ),
    Setting(
        "max_memory",
        MAX_MEMORY_AUTO,
        "Fail, with nothing written, as soon as the rows read or the writes planned would take "
        "more memory than this: bytes or a size (``2GiB``, ``500MB``); ``auto``: three quarters "
        "of the memory of the machine or container the sync runs on; ``off``: no limit.",
        _max_memory,
    ),
    Setting(
        "state_path",
        None,
        "Where the sync keeps what it applied, for the next run's three-way diff: a local path "
        "or an object-storage URI. A state made for another List, shard or mapping is refused.",
    ),
    Setting(
        "fresh_state",
        False,
        "Do not use the state kept: diff against the live List alone, then keep a new state.",
    ),
    Setting(
        "verify_timeout",
        VERIFY_TIMEOUT,
        "Seconds the read back waits for writes the List does not show yet; what is still not "
        "shown is counted ``unconfirmed``, not failed.",
        _seconds("verify_timeout"),
    ),
    Setting(
        "visibility_window",
        VISIBILITY_WINDOW,
        "Seconds a write the List has not shown yet is not sent again by a later run, which "
        "reads before it writes.",
        _seconds("visibility_window"),
    ),
    Setting(
        "approved_plan",
        None,
        "The plan file of a reviewed dry run: plan again and apply only if the plan is that file, "
        "line for line, and no older than ``max_plan_age``; its deletes were reviewed, so "
        "``max_delete_fraction`` does not hold them back.",
    ),
    Setting(
        "max_plan_age",
        MAX_PLAN_AGE,
        "Seconds an ``approved_plan`` stays good after its file was written.",
        _seconds("max_plan_age"),
    ),
    Setting(
        "lock_timeout",
        LOCK_TIMEOUT,
        "Seconds a run waits while another run of its List, job and shard holds the List's "
        "lease, then fails with nothing read or written, naming the holder. The lease is kept "
        "beside the state; a dry run takes none.",
        _seconds("lock_timeout"),
    ),
    Setting(
        "lease_expiry",
        LEASE_EXPIRY,
        "Seconds a lease outlives its holder's last renewal: a run killed mid-write holds the "
        "next one back this long at most.",
        _seconds("lease_expiry", inclusive=False),
    ),
    Setting(
        "max_in_flight",
        MAX_IN_FLIGHT,
        f"The most requests to the List at once, 1 to {MAX_IN_FLIGHT_CEILING}; halved while the "
        "service pushes back (429, 5xx, no answer), grown back after.",
        check_max_in_flight,
    ),
    Setting(
        "history_table",
        None,
        "A table (``name`` or ``schema.name``) that gets a row for each run, successful or failed: "
        "its times, the List, the mode, every count of the summary and the summary; created if "
        "missing.",
    ),
    Setting(
        "history_rejects_table",
        None,
        "With ``history_table``, a table that gets each rejected row of a run, copied from a "
        "local ``rejects_path``.",
    ),
    Setting(
        "history_outcomes_table",
        None,
        "With ``history_table``, a table that gets each line of a run's outcomes file, copied "
        "from a local ``outcomes_path``.",
    ),
)


def settings_of(job: Job) -> dict[str, Setting]:
    """The settings ``job`` takes, by name."""
    return {setting.name: setting for setting in SETTINGS if job in setting.jobs}


#: The settings both jobs share, by name.
SHARED: dict[str, Setting] = {setting.name: setting for setting in SETTINGS if setting.jobs == JOBS}


def with_param_docs(doc: str | None, settings: Iterable[Setting], *, templated: Iterable[str] = ()) -> str:
    """An operator's docstring ``doc`` followed by the Sphinx ``:param:`` lines of ``settings``,
    made from their declaration; those named in ``templated`` are marked so."""
    marked = set(templated)
    lines = [(doc or "").rstrip()]
    for setting in settings:
        default = "" if setting.default is None else f" Default ``{setting.default!r}``."
        mark = " (templated)" if setting.name in marked else ""
        text = f":param {setting.name}: {setting.help}{default}{mark}"
        lines.append(textwrap.fill(text, 100, initial_indent="    ", subsequent_indent="        "))
    return "\n".join(lines) + "\n"


def check_history(
    table: str | None, copies: Iterable[str | None], where: str | None, *, names: tuple[str, str, str]
) -> None:
    """Check that the history settings go together: ``history_table`` with its database
    (``where``: the operator's connection, the command line's URL), the tables a run's rejects
    and outcomes are copied to (``copies``) with both.

    :param names: what the caller calls the table, the tables of copies and the database.
    :raises ValueError: one without the other, naming them.
    """
    if (table or any(copies)) and not (table and where):
        raise ValueError(f"{names[0]} needs {names[2]}; {names[1]} need both")


@dataclass(frozen=True)
class SyncSettings:
    """What the people sync and the rows upsert share: their safety limits, failure policy, files,
    shard, memory limit and state.

    :func:`~listsync.sync.people.sync_people` and :func:`~listsync.sync.rows.upsert_rows` take
    one as ``settings``; ``SyncTargetablePeopleOperator`` and ``UpsertRowsOperator`` build it from
    their parameters of the same names, ``listsync sync-people`` and ``listsync upsert-rows`` from
    their options (``--max-delete-fraction`` ...). A value out of range fails as the settings are
    made, before anything is read, so an operator's mistake fails when its DAG is parsed.

    Each field is a :class:`Setting` of :data:`SETTINGS`, where its default, help and check are
    declared; besides them:

    :param lease_holder: who the run is, for the messages of the runs that wait for it; None:
        this host and process.
    :param lease_location: where the lease lives (a :class:`~listsync.sync.lease.LeaseLocation`);
        None: where the state is (``state_path``'s folder, or its store). Without either, the
        run takes no lease, and says so.
    :raises ValueError: a fraction not between 0 and 1, a ``shard`` that is not ``"i/n"``, a
        ``max_memory`` that is not a size, or a negative or non-numeric number of seconds; the
        message begins with the setting's name.
    """

    max_delete_fraction: float = SHARED["max_delete_fraction"].default
    overwrite_with_null: bool = SHARED["overwrite_with_null"].default
    dry_run: bool = SHARED["dry_run"].default
    fail_on_error: bool = SHARED["fail_on_error"].default
    rejects_path: str | os.PathLike[str] | OpenableFile | None = SHARED["rejects_path"].default
    plan_path: str | os.PathLike[str] | OpenableFile | None = SHARED["plan_path"].default
    outcomes_path: str | os.PathLike[str] | OpenableFile | None = SHARED["outcomes_path"].default
    report_path: str | os.PathLike[str] | OpenableFile | None = SHARED["report_path"].default
    max_reject_fraction: float = SHARED["max_reject_fraction"].default
    shard: str | Shard | None = SHARED["shard"].default
    max_memory: int | str | None = SHARED["max_memory"].default
    state_path: str | os.PathLike[str] | OpenableFile | StateStore | None = SHARED["state_path"].default
    fresh_state: bool = SHARED["fresh_state"].default
    verify_timeout: float = SHARED["verify_timeout"].default
    visibility_window: float = SHARED["visibility_window"].default
    approved_plan: str | os.PathLike[str] | OpenableFile | None = SHARED["approved_plan"].default
    max_plan_age: float = SHARED["max_plan_age"].default
    lock_timeout: float = SHARED["lock_timeout"].default
    lease_expiry: float = SHARED["lease_expiry"].default
    lease_holder: str | None = None
    lease_location: LeaseLocation | None = None

    def __post_init__(self) -> None:
        if self.approved_plan is not None and self.dry_run:
            raise ValueError("approved_plan applies a reviewed plan, which a dry run never does; drop one")
        for item in fields(self):
            if item.name in SHARED:
                SHARED[item.name].checked(getattr(self, item.name))
