"""A sharded night that reads the List once: one split task, then one people sync per shard.

::

    split_people                           # one task, no lease (it writes nothing to the List)
        prepare the extract                # rejects and duplicates, once for the whole extract
        write each shard's prepared people # Parquet
        page the List, steadily            # once; each batch of people, as columns, streamed to
                                           # the parts of the shards of their accounts (Parquet;
                                           # nothing of the List is held)
        write split.json                   # last: what was split, read when, steady or not
    sync_people(parts_path=..., shard=i/n) # n tasks, the one people job, under the List's lease
        prepare = the part's people        # nothing is read from the extract
        read the List = the part's people  # the snapshot of the shard's accounts, as columns
        plan, re-read the accounts written afresh by the account filter, plan again
        apply, read back by account, keep the state of the shard

A part is a snapshot: it ages while the shards take turns, and other people may change the List
meanwhile. A shard therefore re-reads, just before it writes, the accounts its plan writes in (by
the service's account filter) and plans again with them as they are now: a person someone else
added since the split is found there and not added twice, one they deleted or changed is not
deleted on the snapshot's word. Accounts the plan leaves alone are not read again: nothing is written
there. The files are in a folder (``parts_path``): a local path or object storage, through the
same ``open()`` the plan files use.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from listsync.client.paging import ReadWatch
from listsync.extract.contact_rules import normalize_domain
from listsync.extract.mapping import PrepareStats, shard_numbers
from listsync.extract.options import Shard
from listsync.progress import PROGRESS
from listsync.sync.lease import LeaseLocation, lease_name, peek
from listsync.sync.memory import PEOPLE_COSTS, MemoryGuard, give_back_freed_memory, use_returning_allocator
from listsync.sync.people.frames import (
    BATCH,
    IDENTITY,
    OBJECT_FIELDS,
    TEXT,
    ListPeople,
    PersonRecord,
    list_columns,
    list_frame,
)
from listsync.sync.people.prepare import PreparedPeople, prepare_people
from listsync.sync.settings import SyncSettings, parse_max_memory
from listsync.sync.state import state_store
from listsync.sync.steady import read_steadily
from listsync.sync.steps import MAX_FAILURE_REASONS, prepare_with_rejects

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient

__all__ = [
    "MANIFEST",
    "PartFolder",
    "PeoplePart",
    "SplitError",
    "load_part",
    "split_people",
]

log = logging.getLogger(__name__)

#: The file a split writes last, naming what it split: a folder without it holds no split.
MANIFEST = "split.json"


class SplitError(ValueError):
    """The parts cannot serve this shard: none were written, or for another List, mapping or
    number of shards; the message says which."""


class PartFolder(Protocol):
    """A folder of parts: ``pathlib.Path`` or Airflow's ``ObjectStoragePath``."""

    def __truediv__(self, name: str) -> Any: ...  # pragma: no cover - protocol


def _part_file(folder: PartFolder, shard: Shard, kind: str) -> Any:
    """The file of ``shard``'s ``kind`` (``people.parquet``, ``list.jsonl``) in ``folder``."""
    return folder / f"shard-{shard.index}-of-{shard.count}.{kind}"


@dataclass
class SplitManifest:
    """What a split wrote (``split.json``): the List, the mapping and the number of shards it was
    made for, when and how steadily the List was read, and where the extract's rows went."""

    table_id: str
    shards: int
    mapping: dict[str, Any]
    normalization_version: str
    read_at: float
    list_people: int
    steady: bool
    rereads: int
    torn_reasons: list[str]
    stats: dict[str, int]
    parts: list[dict[str, int]] = field(default_factory=list)


@dataclass
class PeoplePart:
    """One shard's part of a split (:func:`load_part`)."""

    folder: PartFolder
    shard: Shard
    manifest: SplitManifest

    def people(self) -> pd.DataFrame:
        """The shard's prepared extract people (``PreparedPeople.frame``), as the split made them."""
        return _pandas(self._table("people.parquet"))

    def list_people(
        self, memory: MemoryGuard, fresh: Iterable[PersonRecord] = (), afresh: Collection[str] = ()
    ) -> ListPeople:
        """The shard's List people as the split read them, but those of the accounts ``afresh``
        (normalised domains), whose people are ``fresh`` (as read) instead; all counted by
        ``memory``."""
        table = self._table("list.parquet")
        # Taken as the plan takes them, in Arrow: the identified people, the fields they have;
        # the rows are copied once, and not at all when all are taken.
        taken = pc.is_valid(table[IDENTITY])
        read = table.num_rows
        if afresh:
            mine = pc.invert(pc.is_in(table["domain"], pa.array(sorted(afresh), pa.string())))
            read = pc.sum(mine).as_py() or 0
            taken = pc.and_(taken, mine)
        memory.count_listed(read)
        if pc.sum(taken).as_py() != table.num_rows:
            table = table.filter(taken)
        table = table.select(
            [
                name
                for name in table.column_names
                if name in ("domain", IDENTITY) or table[name].null_count < len(table)
            ]
        )
        kept = _pandas(table)
        del table
        # What the plan before and reading the part freed goes back before the fresh are read.
        give_back_freed_memory()
        return list_frame(memory.count_list(fresh), before=ListPeople(kept, read))

    def _table(self, kind: str) -> pa.Table:
        try:
            with _part_file(self.folder, self.shard, kind).open("rb") as handle:
                return pq.read_table(handle)
        except FileNotFoundError:
            raise SplitError(
                f"{_part_file(self.folder, self.shard, kind)} is missing: the split in {self.folder} "
                "was made by another version of listsync, or its folder was changed since; run the "
                "split again"
            ) from None


def load_part(folder: PartFolder, shard: Shard, table_id: str, mapping: Mapping[str, Any]) -> PeoplePart:
    """Shard ``shard``'s part of the split in ``folder``, checked to be of ``table_id``, the shard's
    number of shards and ``mapping``.

    :raises SplitError: no split there, or one of another List, mapping or number of shards.
    """
    try:
        with (folder / MANIFEST).open("rb") as handle:
            manifest = SplitManifest(**json.load(handle))
    except FileNotFoundError:
        raise SplitError(
            f"no split in {folder} ({MANIFEST} is missing): run the split (SplitPeopleOperator, "
            "split_people) with this parts_path before its shards"
        ) from None
    expected = {"table_id": table_id, "shards": shard.count, "mapping": dict(mapping)}
    found = {"table_id": manifest.table_id, "shards": manifest.shards, "mapping": manifest.mapping}
    if found != expected:
        raise SplitError(
            f"the split in {folder} was made for {found}, not for this shard's {expected}: give the "
            "shards the split's List, column map, default region and number of shards"
        )
    return PeoplePart(folder, shard, manifest)


def split_people(
    client: ListSyncClient,
    table_id: str,
    frames: Iterable[pd.DataFrame],
    column_map: Mapping[str, str],
    *,
    shards: int,
    parts_path: PartFolder,
    default_region: str = "US",
    page_size: int = 1000,
    settings: SyncSettings = SyncSettings(),
) -> dict[str, Any]:
    """Prepare the extract and read the List once, and write each of ``shards`` shards its part in
    ``parts_path``, for ``sync_people(..., parts_path=parts_path, shard="i/n")``; return what was
    split (JSON).

    Holds the prepared extract (as an unsharded sync does) but none of the List, which goes to
    the parts as it is paged. Takes no lease: it writes nothing to the List (it says who held the
    List's lease while it read, as a dry run does); each shard takes the List's lease.

    :param settings: of :class:`~listsync.sync.settings.SyncSettings`, the split uses
        ``rejects_path``, ``max_reject_fraction``, ``max_memory`` and where the lease is kept
        (``state_path``, ``lease_location``).
    :raises TooManyRejectsError: more than ``max_reject_fraction`` of the rows were rejected.
    :raises MemoryLimitError: the extract would take more than ``max_memory``.
    """
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise ValueError(f"shards must be a whole number, 1 or more; got {shards!r}")
    use_returning_allocator()
    memory = MemoryGuard(
        parse_max_memory(settings.max_memory), PEOPLE_COSTS, what=f"the split of {table_id}", shard=None
    )
    prepared, rejects_path, reject_reasons = prepare_with_rejects(
        lambda rejects: prepare_people(
            frames, column_map, rejects=rejects, default_region=default_region, on_chunk=memory.count_extract
        ),
        settings.rejects_path,
        max_reject_fraction=settings.max_reject_fraction,
        prefix="listsync-people-rejects-",
    )
    people = _write_people_parts(prepared, parts_path, shards)
    del prepared
    give_back_freed_memory()
    log.info(
        "Wrote the extract's %d people of %s into %d parts; reading the List",
        people.stats.passed,
        table_id,
        shards,
        extra=PROGRESS,
    )
    read_at = client.clock()
    listed = read_steadily(
        lambda watch: _write_list_parts(
            client, table_id, watch, folder=parts_path, shards=shards, page_size=page_size
        ),
        sleep=client.sleep,
        what=f"the people of {table_id}",
    )
    manifest = SplitManifest(
        table_id=table_id,
        shards=shards,
        mapping={"column_map": dict(column_map), "default_region": default_region},
        normalization_version=people.version,
        read_at=read_at,
        list_people=sum(listed.value),
        steady=listed.steady,
        rereads=listed.rereads,
        torn_reasons=listed.problems,
        stats=people.stats.to_dict(),
        parts=[
            {"people": extract, "list_people": held}
            for extract, held in zip(people.counts, listed.value, strict=True)
        ],
    )
    with (parts_path / MANIFEST).open("wb") as handle:
        handle.write(json.dumps(asdict(manifest), indent=1).encode("utf-8"))
    log.info(
        "Split %s into %d parts in %s: %d extract people, %d List people (read steadily: %s)",
        table_id,
        shards,
        parts_path,
        people.stats.passed,
        manifest.list_people,
        listed.steady,
        extra=PROGRESS,
    )
    store = state_store(settings.state_path)
    where = settings.lease_location if settings.lease_location is not None else store
    leases = where.lease(lease_name("people", table_id, None)) if isinstance(where, LeaseLocation) else None
    return {
        "table_id": table_id,
        "shards": shards,
        "parts_path": str(parts_path),
        **people.stats.to_dict(),
        "list_people": manifest.list_people,
        "steady_read": listed.steady,
        "rereads": listed.rereads,
        "torn_reasons": listed.problems,
        "rejects_path": rejects_path,
        "reject_reasons": dict(reject_reasons.most_common(MAX_FAILURE_REASONS)),
        "lease_held_by": None if leases is None else peek(leases),
        "parts": manifest.parts,
    }


@dataclass
class _PeopleParts:
    stats: PrepareStats
    version: str
    counts: list[int]


def _write_people_parts(prepared: PreparedPeople, folder: PartFolder, shards: int) -> _PeopleParts:
    """Write each shard's rows of the prepared extract as Parquet: text as text, the object
    fields (lists, booleans) as their JSON."""
    frame = prepared.frame
    numbers = shard_numbers(frame["account_domain"], normalize_domain, shards)
    table = _arrow(frame)
    counts = []
    for index in range(shards):
        mine = table.filter(pa.array(numbers == index))
        counts.append(mine.num_rows)
        with _part_file(folder, Shard(index, shards), "people.parquet").open("wb") as handle:
            pq.write_table(mine, handle)
    return _PeopleParts(prepared.stats, prepared.normalization_version, counts)


def _write_list_parts(
    client: ListSyncClient,
    table_id: str,
    watch: ReadWatch,
    *,
    folder: PartFolder,
    shards: int,
    page_size: int,
) -> list[int]:
    """Page the List once, :data:`~listsync.sync.people.frames.BATCH` people at a time turned into
    columns (:func:`~listsync.sync.people.frames.list_columns`) and each person written to the part
    of the shard of its account domain (normalised as the extract's, as
    :func:`~listsync.sync.people.read.people_in_shard` places it); return how many went to each. A
    read again writes the parts afresh."""
    counts = [0] * shards
    with contextlib.ExitStack() as stack:
        writers = [
            stack.enter_context(
                pq.ParquetWriter(
                    stack.enter_context(_part_file(folder, Shard(index, shards), "list.parquet").open("wb")),
                    _list_schema(),
                )
            )
            for index in range(shards)
        ]
        records = client.iter_targetable_people_records(table_id, page_size=page_size, watch=watch)
        while batch := list(itertools.islice(records, BATCH)):
            people = list_columns(batch)
            numbers = shard_numbers(people["domain"], normalize_domain, shards)
            table = _arrow(people)
            del batch, people
            for index, writer in enumerate(writers):
                mine = table.filter(pa.array(numbers == index))
                writer.write_table(mine)
                counts[index] += mine.num_rows
    return counts


def _arrow(frame: pd.DataFrame) -> pa.Table:
    """A people frame as Parquet holds it: text as text, the object fields (lists, booleans) as
    their JSON (:func:`_pandas` reads it back)."""
    columns = {}
    for name in frame.columns:
        if name in OBJECT_FIELDS:
            texts = [None if value is None else json.dumps(value) for value in frame[name].tolist()]
            columns[name] = pa.array(texts, pa.string())
        else:
            columns[name] = pa.array(frame[name], pa.string(), from_pandas=True)
    return pa.table(columns)


def _pandas(table: pa.Table) -> pd.DataFrame:
    """The people frame of a table :func:`_arrow` made."""
    frame = table.to_pandas(types_mapper={pa.string(): TEXT, pa.large_string(): TEXT}.get)
    for name in OBJECT_FIELDS & set(frame.columns):
        # Each distinct JSON text read once (a flag has two), the people given its value.
        encoded = pc.dictionary_encode(table[name].combine_chunks())
        nulls = len(encoded.dictionary)
        values = np.empty(nulls + 1, dtype=object)  # the last: a null's
        for index, text in enumerate(encoded.dictionary.to_pylist()):
            values[index] = json.loads(text)
        frame[name] = pd.Series(values[pc.fill_null(encoded.indices, nulls).to_numpy()], dtype=object)
    return frame


@functools.cache
def _list_schema() -> pa.Schema:
    """The columns of a List part: those of a List frame, as :func:`_arrow` writes them (made when
    first needed: it takes the libraries a List frame needs)."""
    return _arrow(list_columns([])).schema
