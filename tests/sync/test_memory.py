"""``max_memory``: its parser, its default, and the guard's estimate and message."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from listsync.extract.options import Shard
from listsync.sync.memory import (
    BASE_MEMORY,
    PEOPLE_COSTS,
    MemoryGuard,
    MemoryLimitError,
    collected_sparingly,
    kept_objects_frozen,
    rows_costs,
)
from listsync.sync.settings import default_max_memory, format_bytes, parse_max_memory

GIB = 1024**3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2GiB", 2 * GIB),
        ("500MB", 500_000_000),
        ("1.5 GB", 1_500_000_000),
        (" 512 mib ", 512 * 1024**2),
        ("4096", 4096),
        (4096, 4096),
        (3 * GIB, 3 * GIB),
        (None, None),
        (0, None),
        ("off", None),
        ("OFF", None),
        ("0", None),
    ],
)
def test_sizes_parse_to_bytes(value: int | str | None, expected: int | None) -> None:
    assert parse_max_memory(value) == expected


def test_auto_is_the_default_of_this_machine() -> None:
    assert parse_max_memory("auto") == default_max_memory()


@pytest.mark.parametrize("value", ["lots", "2 GX", "-1", "", "GiB", -5, 1.5, True])
def test_other_values_are_refused_naming_the_forms_allowed(value: object) -> None:
    with pytest.raises(ValueError, match=r'max_memory must be a number of bytes or a size such as "2GiB"'):
        parse_max_memory(value)  # type: ignore[arg-type]


def test_the_default_is_at_most_three_quarters_of_the_machine_memory() -> None:
    import os

    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < default_max_memory() <= machine * 3 // 4


@pytest.mark.parametrize(
    ("size", "text"),
    [(5.1 * GIB, "5.1 GiB"), (4 * GIB, "4 GiB"), (500 * 1024**2, "500 MiB"), (12, "12 bytes")],
)
def test_sizes_read_as_people_write_them(size: float, text: str) -> None:
    assert format_bytes(size) == text


def test_the_rows_costs_grow_with_the_columns() -> None:
    assert rows_costs(16).extract - rows_costs(6).extract == 10 * 50
    assert rows_costs(16).listed > rows_costs(6).listed


def guard(limit: int | None, shard: Shard | None = None) -> MemoryGuard:
    return MemoryGuard(limit, PEOPLE_COSTS, what="the people sync of tbl_x", shard=shard)


def test_extract_chunks_are_counted_until_they_pass_the_limit() -> None:
    memory = guard(BASE_MEMORY + 1_000 * PEOPLE_COSTS.extract)
    memory.count_extract(600)
    memory.count_extract(400)  # exactly at the limit: allowed

    with pytest.raises(MemoryLimitError) as failure:
        memory.count_extract(1)

    assert str(failure.value) == (
        f"the people sync of tbl_x would need about {format_bytes(memory.estimate())} for 1,001 extract "
        f"rows and 0 List people so far, more than max_memory={format_bytes(memory.limit or 0)}: split it "
        'with shard="i/n" (about 1/n each, e.g. shard over 2 tasks or more: shard="0/2" to "1/2") '
        "or raise max_memory"
    )


def test_list_items_stop_being_read_once_they_pass_the_limit() -> None:
    read = []

    def people() -> Iterator[int]:
        for number in range(100):
            read.append(number)
            yield number

    memory = guard(BASE_MEMORY + 10 * PEOPLE_COSTS.extract + 40 * PEOPLE_COSTS.listed)
    memory.count_extract(10)

    with pytest.raises(MemoryLimitError, match="for 10 extract rows and 41 List people so far"):
        list(memory.count_list(people()))

    assert len(read) == 41


def test_a_sharded_run_is_told_to_split_further() -> None:
    memory = guard(BASE_MEMORY + 1_000 * PEOPLE_COSTS.extract, Shard(1, 4))

    with pytest.raises(MemoryLimitError, match=r'split it further with shard="i/n" .* shard over 12 tasks'):
        memory.count_extract(2_500)  # 2.5 times what fits: each of 4 shards split in 3


def test_a_limit_below_what_a_sync_takes_before_any_row_asks_to_raise_it() -> None:
    with pytest.raises(MemoryLimitError, match=r"before its first row: raise max_memory$"):
        guard(1_000).count_extract(1)


def test_no_limit_counts_without_failing() -> None:
    memory = guard(None)
    memory.count_extract(10**9)
    assert list(memory.count_list(range(5))) == [0, 1, 2, 3, 4]
    assert memory.estimate() == BASE_MEMORY + 10**9 * PEOPLE_COSTS.extract


def test_the_people_read_back_is_counted_for_every_planned_write() -> None:
    # It reads the List once for all of them, holding hashes of each: no slice bounds it.
    memory = guard(None)
    memory.count_planned(3_000_000)
    assert memory.estimate() == BASE_MEMORY + 3_000_000 * (PEOPLE_COSTS.written + PEOPLE_COSTS.read_back)


def test_objects_settled_are_frozen_until_the_block_ends_unless_frozen_before() -> None:
    assert gc.get_freeze_count() == 0
    with kept_objects_frozen() as settle:
        kept = [{"row": number} for number in range(1000)]
        settle()
        assert gc.get_freeze_count() >= len(kept)
    assert gc.get_freeze_count() == 0

    gc.freeze()  # frozen by someone else (a process forked after freezing, say): left so
    try:
        before = gc.get_freeze_count()
        with kept_objects_frozen() as settle:
            settle()
        assert gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()


def test_young_objects_are_collected_sparingly_until_the_block_ends() -> None:
    before = gc.get_threshold()
    with collected_sparingly():
        assert gc.get_threshold() == (10_000, *before[1:])
    assert gc.get_threshold() == before


def test_a_threshold_set_within_the_block_is_left_as_set() -> None:
    before = gc.get_threshold()
    try:
        with collected_sparingly():
            gc.set_threshold(500, *before[1:])  # a caller's own choice, made while a sync ran
        assert gc.get_threshold() == (500, *before[1:])
    finally:
        gc.set_threshold(*before)
