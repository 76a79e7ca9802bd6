"""The sync state's pieces: the forms a service keeps values in, digests, and where a state is kept."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from listsync.operators.asset_state import AssetStateStore, list_asset_state_store
from listsync.sync.digests import key_hashes, value_digests
from listsync.sync.forms import fold, fold_text, learn_cell_form, learn_form, merged_forms
from listsync.sync.state import (
    ADD,
    UNSEEN,
    FileStateStore,
    StateDirectory,
    StateEntries,
    StateMismatchError,
    StateScope,
    SyncState,
    load_state,
    save_state,
)
from listsync.sync.state import format as state_format

SCOPE = StateScope("people", "tbl_1", None, {"column_map": {"Email": "email"}})


@pytest.mark.parametrize(
    ("field", "sent", "shown", "form"),
    [
        ("title", "VP  Sales", "VP Sales", ("whitespace",)),
        ("title", " VP Sales", "VP Sales", ("whitespace",)),
        ("email", "Ann@Acme.com", "ann@acme.com", ("case",)),
        ("network_profile_url", "https://x.example/in/Ann", "https://x.example/in/ann", ("case",)),
        ("network_profile_url", "http://x.example/in/ann/", "https://x.example/in/ann", ("url",)),
        ("network_profile_url", "http://x.example/in/Ann/", "https://x.example/in/ann", ("case", "url")),
        ("avatar_url", "https://a.example/p.png/", "https://a.example/p.png", ("url",)),
        # A name or title in another case is a change a reader sees: not a form.
        ("title", "VP Sales", "vp sales", None),
        ("first_name", "Ann", "ANN", None),
        ("email", "ann@acme.com", "bob@acme.com", None),
        ("title", "VP Sales", "VP Sales", None),  # the same value: nothing to learn
        ("target", True, "true", None),
    ],
)
def test_a_difference_is_a_service_form_only_when_the_service_could_have_made_it(
    field: str, sent: Any, shown: Any, form: tuple[str, ...] | None
) -> None:
    assert learn_form(field, sent, shown) == form


@pytest.mark.parametrize(
    ("sent", "shown", "form"),
    [
        ("Acme  Corp", "Acme Corp", ("whitespace",)),
        ("Owner@Acme.COM", "owner@acme.com", ("case",)),
        ("Acme.COM", "acme.com", ("case",)),
        ("http://Acme.com/About/", "https://acme.com/about", ("case", "url")),
        # A List says nothing of a column's meaning: the text written decides. A name is not an
        # e-mail address, so its case is its own.
        ("Acme Corp", "ACME CORP", None),
        ("Owner@Acme.com", "Boss@Acme.com", None),
        ("10", 10, None),
        (10, 10.0, None),  # numbers compare by value, no class needed
    ],
)
def test_a_cells_form_is_learned_by_the_shape_of_the_text_written(
    sent: Any, shown: Any, form: tuple[str, ...] | None
) -> None:
    assert learn_cell_form(sent, shown) == form


@pytest.mark.parametrize(
    "value", ["VP  Sales ", "\tA\nB", "HTTP://X.example/in/Ann//", "http://x.example/", "plain", ""]
)
@pytest.mark.parametrize("classes", [("whitespace",), ("case",), ("url",), ("whitespace", "case", "url")])
def test_a_column_is_folded_as_each_value_is(value: str, classes: tuple[str, ...]) -> None:
    assert fold_text(pa.array([value]), classes).to_pylist() == [fold(value, classes)]


def test_forms_learned_on_several_runs_are_merged_field_by_field() -> None:
    merged = merged_forms({"email": ["case"]}, {"email": ("whitespace",), "title": ("whitespace",)})
    assert merged == {"email": ["whitespace", "case"], "title": ["whitespace"]}


def test_digests_are_the_same_in_another_process() -> None:
    frame = pd.DataFrame({"a": ["x", None], "b": [["p", "q"], None]})
    here = [int(value) for value in value_digests(frame, ["a", "b"])] + [int(key_hashes(pd.Series(["k"]))[0])]
    code = (
        "import json, pandas as pd; from listsync.sync.digests import key_hashes, value_digests; "
        "f = pd.DataFrame({'a': ['x', None], 'b': [['p', 'q'], None]}); "
        "digests = [*value_digests(f, ['a', 'b']), key_hashes(pd.Series(['k']))[0]]; "
        "print(json.dumps([int(v) for v in digests]))"
    )
    # Another interpreter, with another hash seed: Python's hash() would differ.
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "7"}
    ).stdout
    assert here == json.loads(there)


def test_digests_are_those_of_the_states_kept_before() -> None:
    # A state on disk holds these numbers: a change of hash would make every kept person a stranger.
    keys = key_hashes(
        pd.Series(["acme.com", "müller.de"]), pd.Series(["email:ann@acme.com", "name:jürgen müller"])
    )
    frame = pd.DataFrame(
        {"title": pd.Series(["Directrice générale", None], dtype="string"), "personas": [["CEO"], None]}
    )
    assert [int(key) for key in keys] == [16945697494587423024, 15292436883451618885]
    assert [int(digest) for digest in value_digests(frame, ["title", "personas"])] == [
        16725025168856891119,
        13812669998446145592,
    ]


def test_digests_tell_values_apart_and_see_equal_ones_alike() -> None:
    frame = pd.DataFrame(
        {
            "title": pd.Series(["CEO", "CEO", "CTO", None, ""], dtype=pd.ArrowDtype(pa.string())),
            "personas": [["champion"], ["champion"], ["champion"], None, None],
        }
    )
    digests = value_digests(frame, ["title", "personas"]).tolist()
    assert digests[0] == digests[1] and digests[0] != digests[2]
    assert digests[3] == digests[4]  # a null and an empty text alike
    assert UNSEEN not in digests


def test_a_later_entry_of_a_key_wins_and_entries_come_out_sorted() -> None:
    joined = StateEntries.joined(
        [
            StateEntries.of(np.array([9, 3], dtype=np.uint64), 1, 2),
            StateEntries.of(np.array([3], dtype=np.uint64), 5, UNSEEN, 100.0, ADD),
        ]
    )
    assert joined.keys.tolist() == [3, 9]
    assert (joined.sent.tolist(), joined.seen.tolist(), joined.kind.tolist()) == ([5, 1], [0, 2], [ADD, 0])


@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 11), max_size=40), st.booleans(), st.sampled_from([0, 50, 60])),
        max_size=5,
    ),
    st.sampled_from([1, 4, 1 << 16]),
)
def test_entries_joined_are_those_of_their_parts_by_key_the_last_of_each_key_winning(
    given_parts: list[tuple[list[int], bool, int]], at_once: int
) -> None:
    # Keys of 12 values spread over the 64 bits, or all in their low bits (shift 0), as given or
    # sorted: the last state's entries kept come sorted, a night's new ones in the plan's order.
    parts, expected = [], {}
    for number, (values, ascending, shift) in enumerate(given_parts):
        keys = np.array(sorted(values) if ascending else values, dtype=np.uint64) << np.uint64(shift)
        keys = keys + np.uint64(1)
        sent = np.arange(len(keys), dtype=np.uint64) + np.uint64(100 * number)
        parts.append(StateEntries.of(keys, sent, number))
        expected.update(zip(keys.tolist(), sent.tolist(), strict=True))
    with mock.patch.object(state_format, "JOINED_AT_ONCE", at_once):  # a range of keys at a time
        joined = StateEntries.joined(parts)
    assert joined.keys.tolist() == sorted(expected)
    assert joined.sent.tolist() == [expected[key] for key in sorted(expected)]
    assert (joined.seen == joined.sent // np.uint64(100)).all()


def test_a_state_finds_keys_asked_in_any_order() -> None:
    entries = StateEntries.of(np.array([3, 9, 20, 41], dtype=np.uint64), 1, 2)
    found = SyncState(SCOPE, entries=entries).find(np.array([41, 5, 3, 50, 9, 20, 3], dtype=np.uint64))
    assert found.tolist() == [3, -1, 0, -1, 1, 2, 0]


def test_a_state_reads_back_as_it_was_written(tmp_path: Path) -> None:
    store = FileStateStore(tmp_path / "s" / "people.state")
    entries = StateEntries.of(np.array([4, 2], dtype=np.uint64), 7, 8)
    save_state(store, SCOPE, [entries], [{"email": ["case"]}], clock=lambda: 1_800_000_000.0)

    state = load_state(store, SCOPE, fresh=False)

    assert state is not None and state.scope == SCOPE and state.made_at == 1_800_000_000.0
    assert state.forms == {"email": ["case"]}
    assert state.find(np.array([2, 3, 4], dtype=np.uint64)).tolist() == [0, -1, 1]
    assert not (tmp_path / "s" / "people.state.partial").exists()
    assert load_state(store, SCOPE, fresh=True) is None


def test_a_state_that_cannot_be_read_says_where_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "people.state"
    path.write_bytes(b"listsync-state\n{not json")
    with pytest.raises(ValueError, match=rf"the sync state {path} cannot be read .*fresh_state=True"):
        load_state(FileStateStore(path), SCOPE, fresh=False)


def test_a_state_of_another_scope_is_refused(tmp_path: Path) -> None:
    store = FileStateStore(tmp_path / "people.state")
    save_state(store, SCOPE, [], [])
    other = StateScope("rows", "tbl_1", None, SCOPE.mapping)
    with pytest.raises(StateMismatchError, match="made for a people sync, not a rows sync"):
        load_state(store, other, fresh=False)


def test_a_state_folder_keeps_a_file_for_each_scope(tmp_path: Path) -> None:
    store = StateDirectory(tmp_path, "https://api.example.com")
    shard = StateScope("people", "tbl/1", "1/4", SCOPE.mapping)
    save_state(store, SCOPE, [], [])
    save_state(store, shard, [], [])
    names = sorted(path.name for path in tmp_path.iterdir())
    assert (
        len(names) == 2
        and names[0].startswith("people-tbl_1-1-of-4-")
        and names[1].startswith("people-tbl_1-all-")
    )
    elsewhere = StateDirectory(tmp_path, "https://other.example.com")
    assert elsewhere.where(SCOPE) != store.where(SCOPE)  # another service's List of the same id


@pytest.fixture
def store_log(caplog: pytest.LogCaptureFixture) -> Any:
    """The messages :mod:`listsync.operators.asset_state` logs, whatever Airflow did to logging."""
    logger = logging.getLogger("listsync.operators.asset_state")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING, logger=logger.name)
    yield caplog
    logger.removeHandler(caplog.handler)


class FakeAccessor:
    """An Airflow asset state store accessor, in memory."""

    def __init__(self, refuse: bool = False) -> None:
        self.values: dict[str, Any] = {}
        self.refuse = refuse

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        if self.refuse:
            from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
            from airflow.sdk.execution_time.comms import ErrorResponse

            raise AirflowRuntimeError(
                ErrorResponse(error=ErrorType.GENERIC_ERROR, detail={"message": "too big"})
            )
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


def test_the_asset_state_store_keeps_a_value_for_each_scope(store_log: pytest.LogCaptureFixture) -> None:
    accessor = FakeAccessor()
    store = AssetStateStore(accessor, "listsync_tbl_1", max_bytes=200)
    save_state(store, SCOPE, [StateEntries.of(np.arange(1, 3, dtype=np.uint64), 1, 2)], [])
    assert list(accessor.values) == [SCOPE.name()] and isinstance(accessor.values[SCOPE.name()], str)
    assert load_state(store, SCOPE, fresh=False) is not None
    # Larger than [state_store] max_value_storage_bytes: kept all the same, with a warning.
    assert any("more than [state_store] max_value_storage_bytes (200)" in m for m in store_log.messages)


def test_a_state_the_asset_store_refuses_costs_the_next_run_not_this_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = AssetStateStore(FakeAccessor(refuse=True), "listsync_tbl_1", max_bytes=0)
    caplog.set_level(logging.WARNING, logger="listsync.operators.asset_state")
    save_state(store, SCOPE, [], [])
    assert any("could not be kept" in message and "state_path" in message for message in caplog.messages)


def test_a_task_keeps_its_state_in_its_list_assets_store() -> None:
    from airflow.sdk import Asset

    class Accessors(dict[Any, Any]):
        def __getitem__(self, asset: Any) -> Any:
            return FakeAccessor()

    context = {"asset_state_store": Accessors()}
    mine = Asset(uri="listsync://api.example.com/tbl_1", name="listsync_tbl_1")
    other = Asset(uri="listsync://api.example.com/tbl_2", name="listsync_tbl_2")
    found = list_asset_state_store("tbl_1", [other, mine], context)
    assert found is not None and found.asset_name == "listsync_tbl_1"
    assert list_asset_state_store("tbl_3", [other, mine], context) is None  # no asset of its List
    assert list_asset_state_store("tbl_1", [mine], {}) is None  # an Airflow without the store
    assert SyncState(SCOPE).entries.keys.size == 0
