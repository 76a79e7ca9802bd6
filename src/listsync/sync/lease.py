"""One writing run per List, job and shard at a time: a lease taken before the List is read.

Two syncs of one List that overlap both read it, both plan the same adds and both send them:
the service merges adds by e-mail and profile URL alone, so people known by a phone or a name
end up in the List twice. Like Terraform's state lock, a writing run takes a lease before it
reads the state or the List, keeps it while it writes and reads back, and gives it up at the
end. A second run waits for it up to ``lock_timeout`` seconds, then fails with nothing read
or written, naming the holder (:class:`LeaseHeldError`). A dry run takes no lease; it only says
whether one was held while it read.

A lease names its holder (the DAG, run, task and try, or the host and process of the command
line) and when it was taken, and lapses ``lease_expiry`` seconds after its last renewal: the
holder renews it from a thread of its own every quarter of that, so a holder killed with
``kill -9``, or a lost worker, holds the next run back by at most the expiry. A holder that
cannot renew in time counts its lease as lost and stops before its next step
(:class:`LeaseLostError`).

Where a lease lives (:class:`LeaseStore`) is where every process that can write the List looks:

- :class:`FileLease`: a file next to the sync's state (a local folder, or object storage through
  any ``open("xb")`` that creates a file only when there is none, as fsspec's local and S3 file
  systems do). Taking it is creating it; taking over a lapsed one is creating a marker named
  after the lapsed holder, which one taker alone can create.
- :class:`RegisterLease`: a key of a store with get and set only (Airflow's asset state store):
  the taker writes its record, waits ``settle`` seconds, and holds the lease only if its record
  is still there; two racing takers each see the last record written, so exactly one goes on
  (Fischer's protocol: safe while a write lands within ``settle`` of the read that preceded it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from listsync.errors import ListSyncError
from listsync.files import OpenableFile
from listsync.progress import Progress

__all__ = [
    "LEASE_EXPIRY",
    "LOCK_TIMEOUT",
    "REGISTER_SETTLE",
    "FileLease",
    "Lease",
    "LeaseHeldError",
    "LeaseLocation",
    "LeaseLostError",
    "LeaseRecord",
    "LeaseStore",
    "RegisterLease",
    "lease_name",
    "peek",
    "this_process",
]

log = logging.getLogger(__name__)

#: How long a run waits for another run's lease before it fails, in seconds (``lock_timeout``,
#: ``--lock-timeout``): half an hour, twice the longest night measured (a fill of 3,000,000
#: people, 16 minutes), so that a nightly run that starts while a manual one writes goes on after it.
LOCK_TIMEOUT = 1800.0
#: How long a lease outlives its holder's last renewal, in seconds (``lease_expiry``,
#: ``--lease-expiry``): a holder killed with ``kill -9`` holds the next run back this long at most.
#: The holder renews every quarter of it, so three renewals in a row may fail before it is lost.
LEASE_EXPIRY = 60.0
#: How long a taker of a :class:`RegisterLease` waits between writing its record and reading it
#: back, in seconds. A set of Airflow's asset state store takes tens of milliseconds through the
#: execution API (docs/assumptions.md A41); two seconds is a margin of fifty times the slowest seen.
REGISTER_SETTLE = 2.0


class LeaseHeldError(ListSyncError):
    """Another run held the lease for longer than ``lock_timeout``; nothing was read or written."""


class LeaseLostError(ListSyncError):
    """The run could not renew its lease before it lapsed, or another run took it over; the run
    stopped before its next step."""


@dataclass(frozen=True)
class LeaseRecord:
    """A lease as stored: who holds it, since when, and until when (Unix seconds)."""

    token: str
    holder: str
    since: float
    expires: float

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, value: Any) -> LeaseRecord | None:
        """The record of ``value`` (its bytes, text or JSON object); None when it is not one."""
        try:
            data = json.loads(value) if isinstance(value, bytes | str) else value
            return cls(str(data["token"]), str(data["holder"]), float(data["since"]), float(data["expires"]))
        except (ValueError, TypeError, KeyError):
            return None

    def describe(self) -> str:
        """``<holder> since <time UTC>``, for messages."""
        return f"{self.holder} since {_utc(self.since)}"


class LeaseStore(Protocol):
    """Where one lease is kept."""

    def where(self) -> str:
        """Where the lease is, in words."""

    def how_to_clear(self) -> str:
        """What a person does to clear a lease whose holder is gone, in words."""

    def read(self) -> LeaseRecord | None:
        """The lease as stored; None when nobody holds it."""

    def claim(self, record: LeaseRecord, lapsed: LeaseRecord | None) -> bool:
        """Take the lease for ``record``: when nobody holds it (``lapsed`` None), or over
        ``lapsed``, a holder whose lease ran out. True when taken; exactly one of racing claims is."""

    def renew(self, record: LeaseRecord) -> bool:
        """Store ``record`` (its new expiry) if the lease is still its holder's; False when it is not."""

    def release(self, record: LeaseRecord) -> None:
        """Give the lease up, if it is still ``record``'s holder's."""


@runtime_checkable
class LeaseLocation(Protocol):
    """Where the leases of a sync live: the state stores (a state file's folder, the command
    line's state folder, the List asset's state store) are each one."""

    def lease(self, name: str) -> LeaseStore:
        """The lease called ``name`` (:func:`lease_name`) at this location."""


def lease_name(job: str, table_id: str, shard: str | None) -> str:
    """The name of the lease of a job's runs on one List and shard: ``people-tbl_1-all``,
    ``rows-tbl_1-0-of-4``. The mapping is not part of it: two mappings of one List write the same
    List."""
    shard_part = "all" if shard is None else shard.replace("/", "-of-")
    return f"{job}-{re.sub(r'[^A-Za-z0-9_.-]', '_', table_id)}-{shard_part}"


class FileLease:
    """A lease kept as a file: a local path, or a path in object storage (``ObjectStoragePath``,
    a ``UPath``) whose ``open("xb")`` fails when the file exists.

    A file that cannot be read (a taker stopped between creating and writing it) counts as held
    from when it was first seen, for one ``expiry``.
    """

    def __init__(self, path: str | os.PathLike[str] | OpenableFile, *, expiry: float = LEASE_EXPIRY) -> None:
        self.path: Any = Path(path) if isinstance(path, str | os.PathLike) else path
        self.expiry = expiry
        self._unreadable_since: float | None = None

    def where(self) -> str:
        return str(self.path)

    def how_to_clear(self) -> str:
        return f"delete the file {self.path}"

    def _marker(self, token: str) -> Any:
        return self.path.with_name(f"{self.path.name}.taken-{token}")

    def read(self) -> LeaseRecord | None:
        try:
            with self.path.open("rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            self._unreadable_since = None
            return None
        record = LeaseRecord.from_json(data)
        if record is not None:
            self._unreadable_since = None
            return record
        self._unreadable_since = self._unreadable_since or time.time()
        return LeaseRecord(
            f"unreadable-{hashlib.sha256(data).hexdigest()[:16]}",
            f"an unreadable lease file {self.path}",
            self._unreadable_since,
            self._unreadable_since + self.expiry,
        )

    def _create(self, path: Any, data: bytes) -> bool:
        if isinstance(path, Path):
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with path.open("xb") as handle:
                handle.write(data)
        except FileExistsError:
            return False
        return True

    def _replace(self, data: bytes) -> None:
        if isinstance(self.path, Path):
            # Written aside and renamed: a reader never sees half a record.
            partial = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.partial")
            partial.write_bytes(data)
            partial.replace(self.path)
            return
        with self.path.open("wb") as handle:  # one PUT: whole or not at all
            handle.write(data)

    def claim(self, record: LeaseRecord, lapsed: LeaseRecord | None) -> bool:
        if lapsed is None:
            return self._create(self.path, record.to_bytes())
        # One taker alone creates the marker of the lapsed holder; the lease is then checked to
        # still be that holder's, so that a taker who read it long ago takes nothing.
        if not self._create(self._marker(lapsed.token), record.token.encode()):
            return False
        if self.read() != lapsed:
            return False
        self._replace(record.to_bytes())
        return True

    def renew(self, record: LeaseRecord) -> bool:
        current = self.read()
        if current is None or current.token != record.token:
            return False
        self._replace(record.to_bytes())
        return True

    def release(self, record: LeaseRecord) -> None:
        current = self.read()
        if current is not None and current.token == record.token:
            self._unlink(self.path)
        for marker in self._markers_of(record):
            self._unlink(marker)

    def _markers_of(self, record: LeaseRecord) -> list[Any]:
        try:
            return [
                path
                for path in self.path.parent.iterdir()
                if path.name.startswith(f"{self.path.name}.taken-") and _read_text(path) == record.token
            ]
        except FileNotFoundError:
            return []

    @staticmethod
    def _unlink(path: Any) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class RegisterLease:
    """A lease kept under ``key`` of a store with ``get(key)``, ``set(key, value)`` and
    ``delete(key)`` and no compare-and-set, such as an Airflow asset state store accessor.

    :param settle: seconds between writing a claim and reading it back; None:
        :data:`REGISTER_SETTLE`, as it is when the claim is made.
    :param describe: the store, for messages (``where``).
    :param clear_advice: how a person deletes a key there, added to :meth:`how_to_clear`.
    """

    def __init__(
        self,
        store: Any,
        key: str,
        *,
        describe: str,
        clear_advice: str = "",
        settle: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store, self.key, self.describe = store, key, describe
        self.settle, self.sleep, self.clear_advice = settle, sleep, clear_advice

    def where(self) -> str:
        return f"{self.describe}, key {self.key}"

    def how_to_clear(self) -> str:
        return f"delete the key {self.key} of {self.describe}{self.clear_advice}"

    def read(self) -> LeaseRecord | None:
        value = self.store.get(self.key)
        return None if value is None else LeaseRecord.from_json(value)

    def claim(self, record: LeaseRecord, lapsed: LeaseRecord | None) -> bool:
        started = time.monotonic()
        self.store.set(self.key, record.to_bytes().decode())
        settle = REGISTER_SETTLE if self.settle is None else self.settle
        # The protocol holds while a write lands well within the settle: say how long this one took.
        log.info(
            "Claimed the lease at %s in %.0f ms; reading it back after %g s",
            self.where(),
            (time.monotonic() - started) * 1000,
            settle,
        )
        self.sleep(settle)
        current = self.read()
        return current is not None and current.token == record.token

    def renew(self, record: LeaseRecord) -> bool:
        current = self.read()
        if current is None or current.token != record.token:
            return False
        self.store.set(self.key, record.to_bytes().decode())
        return True

    def release(self, record: LeaseRecord) -> None:
        current = self.read()
        if current is not None and current.token == record.token:
            self.store.delete(self.key)


def this_process(command: str = "listsync") -> str:
    """The holder of a command-line run: ``<command> on <host>, pid <pid>``."""
    return f"{command} on {socket.gethostname()}, pid {os.getpid()}"


class Lease:
    """A run's hold on a :class:`LeaseStore`, as a context manager: ``with Lease(...) as lease:``
    waits for the lease (up to ``timeout`` seconds), renews it in a thread while the block runs,
    and gives it up at the end, also when the block fails.

    :param store: where the lease lives.
    :param holder: who takes it, for the messages of the runs that wait (:func:`this_process`).
    :param timeout: seconds to wait for another holder before :class:`LeaseHeldError`.
    :param expiry: seconds the lease outlives its last renewal.
    :param what: the lease's subject, for log lines ("the people sync of tbl_1").
    """

    def __init__(
        self,
        store: LeaseStore,
        holder: str,
        *,
        timeout: float = LOCK_TIMEOUT,
        expiry: float = LEASE_EXPIRY,
        what: str = "the List",
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store, self.holder, self.what = store, holder, what
        self.timeout, self.expiry = timeout, expiry
        self.clock, self.sleep = clock, sleep
        #: Seconds the run waited for another holder, and whom it waited for last (None: nobody).
        self.waited = 0.0
        self.waited_for: str | None = None
        self._record: LeaseRecord | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> Lease:
        self.take()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()

    def _new_record(self, since: float | None = None) -> LeaseRecord:
        now = self.clock()
        token = self._record.token if self._record is not None else uuid.uuid4().hex
        return LeaseRecord(token, self.holder, now if since is None else since, now + self.expiry)

    def take(self) -> None:
        """Wait for the lease and take it, then renew it in a thread.

        :raises LeaseHeldError: another holder kept it for ``timeout`` seconds.
        """
        started = self.clock()
        # A free lease is noticed within a second; a lapsing one as it lapses.
        poll = min(1.0, max(self.expiry / 8, 0.05))
        progress = Progress(log, "Waiting for the lease of %s at %s, held by %s (%.0f s of %.0f)")
        while True:
            current = self.store.read()
            now = self.clock()
            if current is None or current.expires <= now:
                record = self._new_record()
                if self.store.claim(record, current):
                    self._record = record
                    if current is not None:
                        # Its holder stopped renewing it (killed, or its worker lost).
                        log.warning("Took over the lapsed lease of %s from %s", self.what, current.describe())
                        self.waited_for = f"{current.describe()} (lapsed)"
                    break
                current = self.store.read()
            if current is not None and self.waited_for is None:
                log.warning(
                    "The lease of %s at %s is held by %s: waiting up to %.0f s for it",
                    self.what,
                    self.store.where(),
                    current.describe(),
                    self.timeout,
                )
            if current is not None:
                self.waited_for = current.describe()
            waited = self.clock() - started
            if waited >= self.timeout:
                self.waited = waited
                raise LeaseHeldError(self._held_message(current))
            progress(self.what, self.store.where(), self.waited_for, waited, self.timeout)
            lapses_in = poll if current is None else max(current.expires - self.clock(), 0.01)
            self.sleep(min(poll, lapses_in, self.timeout - waited))
        # Taking a free lease is not waiting, however long the store takes (a register's settle).
        self.waited = self.clock() - started if self.waited_for else 0.0
        log.info(
            "Took the lease of %s at %s%s",
            self.what,
            self.store.where(),
            f" after waiting {self.waited:.1f} s for {self.waited_for}" if self.waited_for else "",
        )
        self._renewer = threading.Thread(target=self._renew_until_stopped, name="listsync-lease", daemon=True)
        self._renewer.start()

    def _held_message(self, current: LeaseRecord | None) -> str:
        holder = "another run" if current is None else current.describe()
        lapses = "by itself" if current is None else f"at {_utc(current.expires)}, unless renewed meanwhile"
        return (
            f"{self.what} is being written by {holder} (its lease at {self.store.where()}); waited "
            f"{self.waited:.0f} s (lock_timeout, --lock-timeout), nothing was read or written. Run again "
            f"once it is done. If that holder is gone, its lease lapses {lapses}; to clear it at once, "
            f"{self.store.how_to_clear()}"
        )

    def _renew_until_stopped(self) -> None:
        while not self._stop.wait(self.expiry / 4):
            assert self._record is not None
            record = self._new_record(since=self._record.since)
            try:
                if self.clock() >= self._record.expires:
                    self._lost = f"it lapsed at {_utc(self._record.expires)} before it could be renewed"
                elif not self.store.renew(record):
                    self._lost = f"another run holds it now ({_describe(self.store.read())})"
                else:
                    self._record = record
                    continue
            except Exception as error:  # a store that does not answer now may answer next time
                log.warning("The lease of %s could not be renewed (%s); trying again", self.what, error)
                continue
            log.error("The lease of %s at %s is lost: %s", self.what, self.store.where(), self._lost)
            return

    def check(self) -> None:
        """:raises LeaseLostError: the lease was lost; the caller stops before its next step."""
        if self._lost is not None:
            raise LeaseLostError(
                f"the lease of {self.what} at {self.store.where()} is lost ({self._lost}): stopped "
                "before the next step; run again (another run may be writing the List)"
            )

    def release(self) -> None:
        """Stop renewing and give the lease up (if still held)."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self._record is not None and self._lost is None:
            try:
                self.store.release(self._record)
            except Exception as error:  # the lease then lapses by itself
                log.warning(
                    "The lease of %s at %s could not be given up (%s): it lapses within %.0f s",
                    self.what,
                    self.store.where(),
                    error,
                    self.expiry,
                )
        self._record = None


def peek(store: LeaseStore, clock: Callable[[], float] = time.time) -> str | None:
    """Who holds the lease of ``store`` now (:meth:`LeaseRecord.describe`); None when nobody does."""
    current = store.read()
    return None if current is None or current.expires <= clock() else current.describe()


def _describe(record: LeaseRecord | None) -> str:
    return "nobody" if record is None else record.describe()


def _read_text(path: Any) -> str | None:
    try:
        with path.open("rb") as handle:
            return str(handle.read().decode(errors="replace"))
    except OSError:
        return None


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
