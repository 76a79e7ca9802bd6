"""The rows upsert planner: pure diffs from hand-built current and extract rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from listsync.sync.rows import (
    CurrentRow,
    DuplicateKey,
    RowRemoval,
    cell_values_equal,
    plan_rows_upsert,
    to_cell_value,
)

UTC = dt.timezone.utc


def plan(desired: list[dict[str, Any]], current: list[CurrentRow], **options: Any):
    return plan_rows_upsert(desired, current, key_column="domain", **options)


# --- canonical comparison -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("desired", "current"),
    [
        (10, 10.0),
        (10.0, 10),
        (Decimal("10.00"), 10),
        (Decimal("1234.56"), 1234.56),
        ("acme", "acme"),
        (True, True),
        (dt.date(2026, 5, 14), "2026-05-14"),
        (dt.datetime(2026, 5, 14, 10, tzinfo=UTC), "2026-05-14T10:00:00.000Z"),
        (dt.datetime(2026, 5, 14, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))), "2026-05-14T10:00:00Z"),
        ({"b": [1, {"c": 2.0}], "a": None}, {"a": None, "b": [1.0, {"c": 2}]}),
        ([1, "x"], [1, "x"]),
        (None, None),
    ],
)
def test_equal_values(desired: Any, current: Any) -> None:
    assert cell_values_equal(desired, current)


@pytest.mark.parametrize(
    ("desired", "current"),
    [
        ("10", 10),
        (10, "10"),
        (1, True),
        (True, 1),
        ("Acme", "acme"),
        ("acme ", "acme"),
        (Decimal("1234.56"), 1234.57),
        (dt.date(2026, 5, 14), "2026-05-15"),
        (dt.datetime(2026, 5, 14, 10, tzinfo=UTC), "2026-05-14T10:00:01Z"),
        (dt.datetime(2026, 5, 14, 10, tzinfo=UTC), "not a date"),
        ({"a": 1}, {"a": 1, "b": 2}),
        ({"a": 1}, [1]),
        ([1, 2], [2, 1]),
        ([1], "1"),
        (None, ""),
        ("", None),
    ],
)
def test_different_values(desired: Any, current: Any) -> None:
    assert not cell_values_equal(desired, current)


def test_cell_values_are_sent_as_json() -> None:
    value = {
        "n": Decimal("10.00"),
        "f": Decimal("0.5"),
        "d": dt.date(2026, 5, 14),
        "t": dt.datetime(2026, 5, 14, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        "naive": dt.datetime(2026, 5, 14, 10, 0),
        "l": (1, "x"),
    }
    assert to_cell_value(value) == {
        "n": 10,
        "f": 0.5,
        "d": "2026-05-14",
        "t": "2026-05-14T10:30:00Z",
        "naive": "2026-05-14T10:00:00Z",
        "l": [1, "x"],
    }


@pytest.mark.parametrize("value", [float("nan"), float("inf"), Decimal("NaN")])
def test_numbers_json_cannot_carry_are_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="not a finite number"):
        to_cell_value(value)


def test_a_bad_value_names_the_row_and_column() -> None:
    with pytest.raises(ValueError, match=r"row 'acme.com', column 'arr'"):
        plan([{"domain": "acme.com", "arr": float("nan")}], [])


def test_a_number_json_cannot_carry_inside_an_object_is_refused_not_taken_for_null() -> None:
    current = [CurrentRow("row_1", {"domain": "acme.com", "meta": {"score": None}})]
    with pytest.raises(ValueError, match=r"row 'acme.com', column 'meta'.*not a finite number"):
        plan([{"domain": "acme.com", "meta": {"score": float("nan")}}], current)


@pytest.mark.parametrize(
    ("desired", "listed", "changed"),
    [
        ({"a": Decimal("1.5"), "b": [1]}, {"b": [1], "a": 1.5}, False),
        ({"a": Decimal("1.50")}, {"a": 1.5}, False),
        ({"a": Decimal("1.5")}, {"a": "1.5"}, True),
        ({"a": 1}, {"a": True}, True),
        ({"a": 1.0}, {"a": 1}, False),
        ({"é": ["ü"]}, {"é": ["ü"]}, False),
        ({"a": dt.date(2026, 5, 14)}, {"a": "2026-05-14"}, False),
    ],
)
def test_objects_compare_as_the_values_sent(desired: Any, listed: Any, changed: bool) -> None:
    current = [CurrentRow("row_1", {"domain": "acme.com", "meta": listed})]
    result = plan([{"domain": "acme.com", "meta": desired}], current)
    assert [(c.column_id, c.after) for c in result.changes] == (
        [("meta", to_cell_value(desired))] if changed else []
    )


# --- planning -------------------------------------------------------------------------------


def test_new_keys_are_added_without_null_cells() -> None:
    result = plan([{"domain": "acme.com", "arr": Decimal("100.0"), "owner": None}], [])
    assert [(a.key, a.cells) for a in result.additions] == [("acme.com", {"domain": "acme.com", "arr": 100})]
    assert result.changes == [] and result.unchanged == 0


def test_only_changed_cells_are_updated() -> None:
    current = [
        CurrentRow("row_1", {"domain": "acme.com", "arr": 100.0, "plan": "team", "extra": "kept"}),
        CurrentRow("row_2", {"domain": "beta.io", "arr": 5, "plan": "free"}),
    ]
    desired = [
        {"domain": "acme.com", "arr": 100, "plan": "enterprise"},
        {"domain": "beta.io", "arr": Decimal("5.0"), "plan": "free"},
    ]
    result = plan(desired, current)
    assert [(c.row_id, c.column_id, c.before, c.after) for c in result.changes] == [
        ("row_1", "plan", "team", "enterprise")
    ]
    assert result.unchanged == 1
    assert result.changed_rows == 1
    assert result.additions == [] and result.removals == []


def test_cell_missing_in_list_is_written() -> None:
    result = plan([{"domain": "acme.com", "owner": "ann"}], [CurrentRow("row_1", {"domain": "acme.com"})])
    assert [(c.column_id, c.before, c.after) for c in result.changes] == [("owner", None, "ann")]


def test_null_keeps_the_list_value_unless_overwrite_with_null() -> None:
    current = [CurrentRow("row_1", {"domain": "acme.com", "owner": "ann"})]
    desired = [{"domain": "acme.com", "owner": None}]
    assert plan(desired, current).changes == []
    assert plan(desired, current).unchanged == 1
    cleared = plan(desired, current, overwrite_with_null=True).changes
    assert [(c.column_id, c.before, c.after) for c in cleared] == [("owner", "ann", None)]
    # Nothing to clear: a null over an empty cell is unchanged either way.
    empty = [CurrentRow("row_1", {"domain": "acme.com"})]
    assert plan(desired, empty, overwrite_with_null=True).unchanged == 1


def test_missing_keys_are_removed_only_when_asked() -> None:
    current = [CurrentRow("row_1", {"domain": "acme.com"}), CurrentRow("row_2", {"domain": "gone.io"})]
    desired = [{"domain": "acme.com"}]
    assert plan(desired, current).removals == []
    assert plan(desired, current, delete_missing=True).removals == [RowRemoval("gone.io", "row_2")]


def test_duplicate_keys_in_the_list_are_reported_not_written() -> None:
    current = [
        CurrentRow("row_1", {"domain": "acme.com", "arr": 1}),
        CurrentRow("row_2", {"domain": "acme.com", "arr": 2}),
        CurrentRow("row_3", {"domain": "gone.io"}),
        CurrentRow("row_4", {"domain": "gone.io"}),
    ]
    result = plan([{"domain": "acme.com", "arr": 3}], current, delete_missing=True)
    assert result.duplicate_keys == [
        DuplicateKey("acme.com", ("row_1", "row_2"), True),
        DuplicateKey("gone.io", ("row_3", "row_4"), False),
    ]
    assert result.additions == [] and result.changes == [] and result.unchanged == 0
    assert result.blocked_by_duplicates == 1
    # A duplicated key the extract lacks is missing in every one of its rows.
    assert [r.row_id for r in result.removals] == ["row_3", "row_4"]


def test_list_keys_are_normalised_before_matching() -> None:
    current = [CurrentRow("row_1", {"domain": "WWW.Acme.com", "arr": 1})]
    result = plan(
        [{"domain": "acme.com", "arr": 1}],
        current,
        normalize_key=lambda v: str(v).lower().removeprefix("www."),
    )
    assert result.additions == []
    assert [(c.column_id, c.before, c.after) for c in result.changes] == [
        ("domain", "WWW.Acme.com", "acme.com")
    ]


def test_list_rows_without_a_key_are_counted_and_left_alone() -> None:
    result = plan([], [CurrentRow("row_1", {"arr": 1})], delete_missing=True)
    assert result.list_rows == 1 and result.removals == []


@pytest.mark.parametrize(
    ("desired", "message"),
    [
        ([{"arr": 1}], "no value for the key column 'domain'"),
        ([{"domain": "a.io"}, {"domain": "a.io"}], "appears twice in the extract"),
    ],
)
def test_unprepared_extract_rows_are_refused(desired: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan(desired, [])


# --- property: applying a plan converges ----------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.decimals(-1000, 1000, places=2, allow_nan=False),
    st.sampled_from(["", "a", "b", "é"]),
    st.dates(dt.date(2020, 1, 1), dt.date(2030, 1, 1)),
)
cell_value = st.one_of(
    json_scalars,
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from("xy"), st.integers(0, 3), max_size=2),
)
keys = st.sampled_from([f"k{i}.io" for i in range(8)])
columns = st.sampled_from(["a", "b", "c"])
extract = st.dictionaries(keys, st.dictionaries(columns, cell_value, max_size=3), max_size=6)
list_cells = st.dictionaries(columns, cell_value.map(to_cell_value), max_size=3)
list_rows = st.dictionaries(keys, list_cells, max_size=6)


def json_form(value: Any) -> Any:
    """The JSON a cell holds for an extract value, by this test's own rules (not the planner's):
    decimals as the numbers they are, dates as ISO text."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, list):
        return [json_form(item) for item in value]
    if isinstance(value, dict):
        return {key: json_form(item) for key, item in value.items()}
    return value


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value (1 and 1.0), true never 1, objects whatever their order."""
    number = (int, float)
    if (
        isinstance(a, number)
        and isinstance(b, number)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[key], b[key]) for key in a)
    return type(a) is type(b) and a == b


def simulate(result: Any, current: dict[str, dict[str, Any]]) -> list[CurrentRow]:
    rows = {f"row_{key}": dict(cells, domain=key) for key, cells in current.items()}
    for change in result.changes:
        rows[change.row_id][change.column_id] = change.after
    for removal in result.removals:
        del rows[removal.row_id]
    for addition in result.additions:
        rows[f"row_{addition.key}"] = dict(addition.cells)
    return [CurrentRow(row_id, cells) for row_id, cells in rows.items()]


@settings(max_examples=200, deadline=None)
@given(extract, list_rows, st.booleans(), st.booleans())
def test_applying_the_plan_converges(
    rows: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]], delete_missing: bool, overwrite: bool
) -> None:
    desired = [dict(cells, domain=key) for key, cells in rows.items()]
    options = {"delete_missing": delete_missing, "overwrite_with_null": overwrite}
    first = plan(desired, [CurrentRow(f"row_{k}", dict(c, domain=k)) for k, c in current.items()], **options)
    assert first.unchanged + len(first.additions) + first.changed_rows == len(desired)
    after = simulate(first, current)
    second = plan(desired, after, **options)
    assert not second.has_writes
    assert second.unchanged == len(desired)
    by_key = {row.cells["domain"]: row.cells for row in after}
    for cells in desired:
        for column, value in cells.items():
            if value is not None or overwrite or column not in current.get(cells["domain"], {}):
                assert same_json(json_form(value), by_key[cells["domain"]].get(column))
    if delete_missing:
        assert set(by_key) == {cells["domain"] for cells in desired}
