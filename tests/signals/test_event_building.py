"""Event mapping rules, deterministic references and the checkpoint store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from listsync.signals.build import canonical_timestamp, event_reference
from listsync.signals.checkpoints import CHECKPOINT_KEY, CheckpointStore
from listsync.signals.columns import EventMapping

from ..support.signal_data import DictStore


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"identity_type": "account"}, "signal .* or signal_column"),
        ({"signal": "s", "signal_column": "c", "identity_type": "account"}, "exactly one of signal"),
        ({"signal": "s"}, "exactly one of identity_type"),
        (
            {"signal": "s", "identity_type": "account", "identity_type_column": "t"},
            "exactly one of identity_type",
        ),
        (
            {"signal": "s", "identity_type": "account", "data_columns": ["a"], "data_column": "d"},
            "data_columns or data_column",
        ),
        ({"signal": "s", "identity_type": "account", "data_columns": "a,b"}, "list of column names"),
        ({"signal": "s", "identity_type": "account", "data_columns": ["id"]}, "mapped more than once: id"),
        ({"signal": " ", "identity_type": "account"}, "signal must be a non-empty string"),
        ({"signal": "s", "identity_type": "account", "version": "v2"}, "version must be a number"),
    ],
)
def test_mapping_refuses_ambiguous_or_missing_choices(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EventMapping(identity_id_column="id", **kwargs)


def test_mapping_lists_the_columns_it_reads() -> None:
    mapping = EventMapping(
        identity_id_column="account_id",
        signal_column="signal",
        identity_type="account",
        data_columns=["seats", "plan"],
        timestamp_column="at",
    )
    assert mapping.columns() == ["signal", "account_id", "at", "seats", "plan"]


def test_canonical_timestamp_spells_one_instant_one_way() -> None:
    utc = datetime(2026, 3, 1, 9, 30, tzinfo=timezone.utc)
    paris = utc.astimezone(timezone(timedelta(hours=1)))
    assert canonical_timestamp(paris) == canonical_timestamp(utc) == "2026-03-01T09:30:00.000000Z"
    with pytest.raises(ValueError, match="no time zone"):
        canonical_timestamp(datetime(2026, 3, 1, 9, 30))


def test_reference_is_stable_and_depends_on_every_part() -> None:
    base = ("page_visit", "account", "acme.com", "2026-03-01T09:30:00.000000Z", {"path": "/", "n": 1})
    reference = event_reference(*base)

    assert reference == event_reference(*base)
    # Key order in data is not meaning.
    assert reference == event_reference(*base[:4], {"n": 1, "path": "/"})
    assert reference.startswith("ls_")
    assert len(reference) == len("ls_") + 32
    variants = [
        ("seats_used", *base[1:]),
        (base[0], "contact", *base[2:]),
        (*base[:2], "acme.io", *base[3:]),
        (*base[:3], None, base[4]),
        (*base[:4], {"path": "/", "n": 2}),
        (*base[:4], None),
    ]
    assert len({event_reference(*variant) for variant in variants} | {reference}) == len(variants) + 1


def test_checkpoint_store_writes_through_to_the_backend_and_reads_it_back() -> None:
    backend = DictStore()
    CheckpointStore(backend).save({"acknowledged": 3})

    assert backend.values == {CHECKPOINT_KEY: {"acknowledged": 3}}
    # A retried task builds a new store over the same backend and resumes from it.
    assert CheckpointStore(backend).load() == {"acknowledged": 3}


def test_checkpoint_store_prefers_the_backend_then_the_fallback() -> None:
    backend = DictStore()
    assert CheckpointStore(backend, fallback={"from": "event"}).load() == {"from": "event"}
    backend.set(CHECKPOINT_KEY, {"from": "store"})
    assert CheckpointStore(backend, fallback={"from": "event"}).load() == {"from": "store"}


def test_checkpoint_store_without_backend_keeps_the_latest_in_memory() -> None:
    store = CheckpointStore()
    assert store.load() is None
    store.save({"acknowledged": 1})
    store.save({"acknowledged": 2})
    assert store.load() == {"acknowledged": 2}
