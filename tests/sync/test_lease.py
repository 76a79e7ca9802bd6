"""The lease of a List's writing run (``listsync.sync.lease``): one holder at a time, whatever the
store, waiting and refusing with the holder named, lapsing when its holder stops renewing it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from upath import UPath

from listsync.sync.lease import (
    FileLease,
    Lease,
    LeaseHeldError,
    LeaseLostError,
    LeaseRecord,
    LeaseStore,
    RegisterLease,
    peek,
)


class Register:
    """A store with get, set and delete and nothing more, as Airflow's asset state store; each
    call takes a moment, as a round trip to the API server does."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        time.sleep(0.001)
        with self._lock:
            return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        time.sleep(0.001)
        with self._lock:
            self.values[key] = value

    def delete(self, key: str) -> None:
        with self._lock:
            self.values.pop(key, None)


def register_lease(register: Register) -> RegisterLease:
    return RegisterLease(register, "lease-people-tbl_1-all", describe="a register", settle=0.05)


def local_lease(tmp_path: Path) -> FileLease:
    return FileLease(tmp_path / "people-tbl_1-all.lease")


def object_storage_lease(tmp_path: Path) -> FileLease:
    # fsspec's local file system through a URI: the object-storage path, with open("xb").
    return FileLease(UPath(f"file://{tmp_path}/bucket/people-tbl_1-all.lease"))


STORES = {"local file": local_lease, "object storage": object_storage_lease}


@pytest.fixture(params=[*STORES, "register"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Builds a store of each kind, every one built over the same place."""
    if request.param == "register":
        register = Register()
        return lambda: register_lease(register)
    return lambda: STORES[request.param](tmp_path)


def test_racing_takers_end_with_exactly_one_holder(make_store: Any) -> None:
    held: list[str] = []
    refused: list[str] = []
    start = threading.Barrier(6)

    def take(name: str) -> None:
        lease = Lease(make_store(), name, timeout=0, expiry=30)
        start.wait()
        try:
            lease.take()
        except LeaseHeldError:
            refused.append(name)
            return
        held.append(name)  # kept: the others must find it held

    threads = [threading.Thread(target=take, args=(f"run {i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(held) == 1, held
    assert len(refused) == 5
    assert peek(make_store()) is not None and held[0] in str(peek(make_store()))


def test_a_second_run_waits_then_refuses_naming_the_holder_and_how_to_clear(make_store: Any) -> None:
    with Lease(make_store(), "DAG nightly, run r1, task sync, try 1 on worker-1", expiry=30):
        second = Lease(make_store(), "listsync sync-people on laptop, pid 42", timeout=0.3, expiry=30)
        started = time.monotonic()
        with pytest.raises(LeaseHeldError) as refused:
            second.take()
    waited = time.monotonic() - started

    assert 0.3 <= waited < 2.0
    message = str(refused.value)
    assert "DAG nightly, run r1, task sync, try 1 on worker-1 since " in message
    assert "nothing was read or written" in message
    assert "to clear it at once, delete the " in message
    assert second.waited_for is not None and second.waited_for.startswith("DAG nightly")


def test_a_waiting_run_takes_the_lease_once_it_is_given_up(make_store: Any) -> None:
    first = Lease(make_store(), "first", expiry=30)
    first.take()
    threading.Timer(0.5, first.release).start()

    with Lease(make_store(), "second", timeout=10, expiry=30) as second:
        assert second.waited >= 0.4
        assert second.waited_for is not None and second.waited_for.startswith("first since ")
        assert peek(make_store()) is not None and str(peek(make_store())).startswith("second since")
    assert peek(make_store()) is None


def test_a_lease_whose_holder_stopped_renewing_lapses_after_its_expiry(make_store: Any) -> None:
    # A holder killed with kill -9: its record stays, renewed no more.
    gone = LeaseRecord("dead", "listsync sync-people on h, pid 1", time.time(), time.time() + 1.0)
    assert make_store().claim(gone, None)

    with Lease(make_store(), "next", timeout=10, expiry=30) as lease:
        assert 0.5 <= lease.waited <= 2.0
        assert lease.waited_for is not None and lease.waited_for.startswith(
            "listsync sync-people on h, pid 1"
        )


def test_a_holder_renews_its_lease_for_as_long_as_it_works(make_store: Any) -> None:
    with Lease(make_store(), "long run", expiry=0.6) as lease:
        time.sleep(1.5)  # more than twice the expiry
        lease.check()
        with pytest.raises(LeaseHeldError):
            Lease(make_store(), "other", timeout=0, expiry=0.6).take()


def test_a_lease_taken_over_is_lost_and_the_holder_stops(make_store: Any) -> None:
    lease = Lease(make_store(), "slow run", expiry=0.4)
    lease.take()
    store: LeaseStore = make_store()
    current = store.read()
    assert current is not None
    # Someone cleared it by hand, and another run took it.
    store.release(current)
    assert store.claim(LeaseRecord("other", "another run", time.time(), time.time() + 30), None)
    time.sleep(0.5)

    with pytest.raises(LeaseLostError, match="another run holds it now"):
        lease.check()
    lease.release()
    assert str(peek(make_store())).startswith("another run")  # the new holder's lease is left alone


def test_only_one_of_racing_takers_of_a_lapsed_lease_gets_it(tmp_path: Path) -> None:
    gone = LeaseRecord("dead", "gone", time.time() - 10, time.time() - 1)
    assert local_lease(tmp_path).claim(gone, None)
    results: list[bool] = []
    start = threading.Barrier(5)

    def take_over(i: int) -> None:
        store = local_lease(tmp_path)
        start.wait()
        results.append(store.claim(LeaseRecord(f"t{i}", f"taker {i}", time.time(), time.time() + 30), gone))

    threads = [threading.Thread(target=take_over, args=(i,)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [False, False, False, False, True]


def test_a_file_that_cannot_be_read_is_held_for_one_expiry_then_taken(tmp_path: Path) -> None:
    # A taker stopped between creating the file and writing it.
    (tmp_path / "people-tbl_1-all.lease").write_bytes(b"")
    store = FileLease(tmp_path / "people-tbl_1-all.lease", expiry=0.5)

    with Lease(store, "next", timeout=5, expiry=30) as lease:
        assert 0.4 <= lease.waited <= 2.0
    assert not (tmp_path / "people-tbl_1-all.lease").exists()
