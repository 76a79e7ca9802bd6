"""The summary of a List sync, declared once: what ``sync_people`` and ``upsert_rows`` return.

:class:`ListSyncSummary` holds what both jobs report, under one name each (a row added and a
person added are both ``added``); :class:`PeopleSummary` and :class:`RowsSummary` add the counts
of their own job. Each field is documented here once (its ``description``), and every view of a
summary is made from these classes: the JSON given to XCom and printed by the command line
(``model_dump``), the history table's count columns (:data:`COUNT_NAMES`), the alert's counts,
the asset event's ``extra``, the command line's table and the README's list of keys.

A count is a field of type ``int``; the views take the counts in the order declared here.
Summaries written before the rows upsert's counts took the shared names (``rows_added``...)
are read through :func:`upgraded`, which gives them the names of today (:data:`RENAMED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "COUNT_NAMES",
    "HEADLINE_COUNTS",
    "RENAMED",
    "WRITE_COUNTS",
    "ListSyncSummary",
    "PeopleSummary",
    "RowsSummary",
    "count_names",
    "counts_of",
    "is_count",
    "meaning",
    "upgraded",
]


def _count(description: str, *, headline: bool = False) -> Any:
    """A count's field; a ``headline`` count is one an alert names (:data:`HEADLINE_COUNTS`)."""
    return Field(default=0, ge=0, description=description, json_schema_extra={"headline": headline})


class ListSyncSummary(BaseModel):
    """What a people sync and a rows upsert both report, the counts first."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    read: int = _count(
        "Extract rows read (``passed + rejected + duplicates + other_shards``).", headline=True
    )
    passed: int = _count("Extract rows that passed every rule and were planned.")
    rejected: int = _count("Extract rows rejected, each with its reasons in the rejects file.", headline=True)
    duplicates: int = _count("Extract rows whose key an earlier row of the extract had.", headline=True)
    other_shards: int = _count("Extract rows of the other shards of a sharded run.")
    added: int = _count("People or rows added to the List.", headline=True)
    updated: int = _count("People or rows changed in the List.", headline=True)
    deleted: int = _count("People or rows deleted from the List.", headline=True)
    unchanged: int = _count("People or rows the List already held as the extract has them.", headline=True)
    not_added: int = _count("``update_only``: extract people or rows the List lacks, left out.")
    not_updated: int = _count("``insert_only``: List people or rows that differ, left as they are.")
    failed: int = _count("People or rows not written (refused, conflicting or held back).", headline=True)
    failed_permanent: int = _count(
        "Of ``failed``, those a re-run cannot write as things stand (a 4xx refusal, a conflict, a "
        "delete held back): see their reasons."
    )
    failed_curable: int = _count(
        "Of ``failed``, those a re-run can write (the service failed, pushed back or did not answer)."
    )
    resent: int = _count("Adds of unknown outcome sent again after a read found them absent.")
    copies_removed: int = _count("Extra copies of a person or row removed from the List.")
    verified: int = _count("Writes read back as sent.")
    drift: int = _count("Writes read back with other values than sent (the run fails).", headline=True)
    service_forms: int = _count("Writes the List shows in a form of its own.")
    unconfirmed: int = _count(
        "Acknowledged writes the List did not show within ``verify_timeout``.", headline=True
    )
    awaiting: int = _count("Writes of an earlier run still not shown, not sent again.")
    edited_in_list: int = _count("People or rows edited in the List since the last run, repaired.")
    turned_up: int = _count("People or rows missing from the read that a fresh read found there.")
    rereads: int = _count("Reads of the List made again because it moved under the read.")
    isolation_requests: int = _count("Requests spent taking refused requests apart.")

    requests: dict[str, int] = Field(
        default_factory=dict, description="Write requests sent, by kind, with their ``total``."
    )
    planned: dict[str, int] = Field(default_factory=dict, description="Planned writes, by kind.")
    failure_reasons: dict[str, int] = Field(
        default_factory=dict, description="The most frequent reasons of ``failed``, with their counts."
    )
    permanent_reasons: dict[str, int] = Field(
        default_factory=dict,
        description="The most frequent reasons of ``failed_permanent``, with their counts.",
    )
    curable_reasons: dict[str, int] = Field(
        default_factory=dict,
        description="The most frequent reasons of ``failed_curable``, with their counts.",
    )
    reject_reasons: dict[str, int] = Field(
        default_factory=dict,
        description="The most frequent kinds of reason of ``rejected`` (values left out), with their rows.",
    )
    drift_reasons: list[str] = Field(default_factory=list, description="The first writes that drifted.")
    unconfirmed_reasons: list[str] = Field(
        default_factory=list, description="Why writes stayed unconfirmed, the first few."
    )
    table_id: str = Field(description="The List.")
    shard: str | None = Field(default=None, description="The shard of a sharded run (``i/n``).")
    mode: str = Field(description="The sync's mode (``upsert``, ``mirror``, ``update_only``...).")
    dry_run: bool = Field(default=False, description="Whether the run only planned.")
    steady_read: bool = Field(default=True, description="Whether a read of the List was steady.")
    torn_reasons: list[str] = Field(
        default_factory=list, description="How the List moved under its reads, when it did."
    )
    normalization_version: str = Field(description="The version of the normalisation rules.")
    plan_path: str | None = Field(default=None, description="Where the plan file was written.")
    rejects_path: str | None = Field(default=None, description="Where the rejected rows were written.")
    outcomes_path: str | None = Field(
        default=None, description="Where the writes that did not end as planned were written."
    )
    state: str | None = Field(default=None, description="Where the sync's state is kept.")
    report_path: str | None = Field(default=None, description="Where the run's report was written.")
    lease_wait_seconds: float = Field(
        default=0.0, description="How long the run waited for the List's lease."
    )
    lease_waited_for: str | None = Field(default=None, description="Whom the run waited for.")
    lease_held_by: str | None = Field(default=None, description="Who held the lease while a dry run read.")


class PeopleSummary(ListSyncSummary):
    """What ``sync_people`` returns."""

    conflicts: int = _count("Extract people whose identity several List people share (in ``failed``).")
    deletes_held: int = _count(
        "Deletes held back: their phone or name reaches someone staying (in ``failed``)."
    )
    not_found: int = _count("Patches or deletes of people the List no longer held.")
    list_people: int = _count("People the List held when read.")
    list_duplicates: int = _count("List people sharing an identity on their account, left alone.")
    list_unidentified: int = _count("List people without an identity, left alone.")
    replaced: int = _count("People whose patch was refused, deleted and added again whole.")
    lost: int = _count("People a delete of extra copies left with none (drift).")
    rechecked: int = _count(
        "A shard of a split: accounts it wrote in, read afresh before it wrote (its part is a snapshot)."
    )

    delete_scope: str = Field(description="Which List people a mirror may delete.")
    verify_filter: str | None = Field(default=None, description="The filter the read back used.")


class RowsSummary(ListSyncSummary):
    """What ``upsert_rows`` returns."""

    cells_updated: int = _count("Cells updated in the rows of ``updated``.", headline=True)
    duplicate_keys_in_list: int = _count("Keys several List rows hold.")
    list_rows: int = _count("Rows the List held when read.")
    read_requests: int = _count("Read requests sent to the List.")

    key_column: str = Field(description="The column whose value keys a row.")
    delete_missing: bool = Field(default=False, description="Whether rows the extract lacks are deleted.")


def count_names(summary_type: type[ListSyncSummary]) -> tuple[str, ...]:
    """The counts of ``summary_type``, in the order declared."""
    return tuple(name for name, field in summary_type.model_fields.items() if field.annotation is int)


_FIELDS = {**PeopleSummary.model_fields, **RowsSummary.model_fields}

#: The counts of either job, the shared ones first, and ``requests_total`` (``requests["total"]``).
COUNT_NAMES: tuple[str, ...] = (
    *dict.fromkeys((*count_names(PeopleSummary), *count_names(RowsSummary))),
    "requests_total",
)

#: The counts an alert names, in the order declared.
HEADLINE_COUNTS: tuple[str, ...] = tuple(
    name for name, field in _FIELDS.items() if field.json_schema_extra == {"headline": True}
)

#: The counts of what a sync changed in the List.
WRITE_COUNTS = ("added", "updated", "deleted", "copies_removed")

#: The rows upsert's old names of counts both jobs now share.
RENAMED = {
    "rows_added": "added",
    "rows_updated": "updated",
    "rows_deleted": "deleted",
    "rows_not_added": "not_added",
    "rows_not_updated": "not_updated",
    "rows_resent": "resent",
}


def upgraded(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``summary`` with the names of today for counts an older listsync named otherwise."""
    return {RENAMED.get(name, name): value for name, value in summary.items()}


def counts_of(summary: Mapping[str, Any]) -> dict[str, int]:
    """The counts ``summary`` holds, by :data:`COUNT_NAMES`, ``requests_total`` included."""
    summary = upgraded(summary)
    requests = summary.get("requests")
    values = {**summary, "requests_total": requests.get("total") if isinstance(requests, Mapping) else None}
    return {name: values[name] for name in COUNT_NAMES if is_count(values.get(name))}


def is_count(value: Any) -> bool:
    """Whether ``value`` is a count: an ``int``, not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def meaning(name: str) -> str:
    """What the summary's ``name`` means, as declared; ``""`` for a name it does not declare."""
    if name == "requests_total":
        return "Write requests sent."
    field = _FIELDS.get(name)
    return "" if field is None or field.description is None else field.description.replace("``", "")
