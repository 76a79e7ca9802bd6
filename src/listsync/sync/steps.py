"""What the sync plans share: the plan file, delete safety, progress logging and the summary.

A planner (``people.plan_people_sync``, ``rows.plan_rows_upsert``) turns an extract and a List
into a plan; before the plan is applied, the same few steps run for every job:

- :func:`prepare_with_rejects` prepares the extract and writes its rejected rows, locally or to
  object storage, before :class:`~listsync.extract.rejects.Rejects` enforces ``max_reject_fraction``;
- :func:`write_requested_plan` writes the plan as JSON lines, one object per planned action,
  when the caller asked for it or the run is dry, so a dry run can be reviewed and a real run
  audited;
- :func:`check_delete_safety` refuses deletes that look like a broken extract rather than a real
  change (an empty extract, or more deletes than ``max_delete_fraction`` of the List);
- :class:`ProgressLogger` logs progress while the plan is applied, at least every 10 %;
- :func:`build_summary` makes the job's summary (:mod:`listsync.sync.summary`), whose JSON an
  operator returns to XCom and the command line prints; :func:`combine_summaries` adds up the
  summaries of the shards of one sync.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from listsync.errors import ListSyncError
from listsync.files import OpenableFile, write_json_lines
from listsync.progress import PROGRESS
from listsync.sync.summary import ListSyncSummary

if TYPE_CHECKING:
    from listsync.client.client import ListSyncClient
    from listsync.extract.rejects import Rejects

__all__ = [
    "MAX_FAILURE_REASONS",
    "ProgressLogger",
    "SyncFailedError",
    "UnsafeDeleteError",
    "build_summary",
    "check_delete_safety",
    "combine_summaries",
    "failure_advice",
    "prepare_with_rejects",
    "read_back_rounds",
    "wait_for_late_writes",
    "write_requested_plan",
]

#: The summary keeps this many distinct failure reasons (the most frequent), so that an XCom
#: stays small when thousands of people fail for thousands of slightly different reasons.
MAX_FAILURE_REASONS = 20


class UnsafeDeleteError(ListSyncError, ValueError):
    """Planned deletes were refused because they look like a broken extract.

    Nothing was written when this is raised. ``planned_deletes``, ``current_total`` and
    ``source_rows`` carry the numbers the message states.
    """

    def __init__(self, message: str, *, planned_deletes: int, current_total: int, source_rows: int) -> None:
        super().__init__(message)
        self.planned_deletes = planned_deletes
        self.current_total = current_total
        self.source_rows = source_rows


class SyncFailedError(ListSyncError):
    """Some items could not be written; everything else was.

    Raised at the end of a sync with ``fail_on_error=True``. ``summary`` is the JSON summary the
    sync would have returned; the message is :func:`failure_advice`.
    """

    def __init__(self, summary: Mapping[str, Any]) -> None:
        self.summary = dict(summary)
        super().__init__(failure_advice(summary) + " (with fail_on_error=False they are only counted)")


def failure_advice(summary: Mapping[str, Any]) -> str:
    """What a sync's failures and drift call for, from its summary: how many items failed
    permanently, with their most frequent reasons (no run writes them before what the reasons
    say is done), how many on transient errors, with theirs (re-run to retry them), what
    drifted, and where the outcomes file names each of them."""
    failed, drift = summary.get("failed", 0), summary.get("drift", 0)
    permanent, curable = summary.get("failed_permanent", 0), summary.get("failed_curable", 0)
    what = f"{failed} item(s) failed to be written"
    if drift:
        what += f" and {drift} written item(s) differ when read back"
    parts = []
    if permanent:
        reasons = _most_frequent(summary.get("permanent_reasons"))
        parts.append(
            f"{permanent} failed permanently ({reasons}): they stay unwritten until what the reasons "
            "say is done"
        )
    if curable:
        reasons = _most_frequent(summary.get("curable_reasons"))
        parts.append(f"{curable} failed on transient errors ({reasons}): re-run to retry them")
    if failed > permanent + curable:  # a summary that does not tell them apart (an older one)
        reasons = _most_frequent(summary.get("failure_reasons"))
        parts.append(f"{failed - permanent - curable} failed ({reasons})")
    if drift:
        parts.append("drift: " + "; ".join(summary.get("drift_reasons", [])[:3]))
    where = summary.get("outcomes_path")
    if isinstance(where, list):  # combined shards
        where = ", ".join(map(str, filter(None, where)))
    return f"{what}, everything else was written: {'; '.join(parts)}" + (
        f". The outcomes file names each: {where}" if where else ""
    )


def _most_frequent(reasons: Mapping[str, int] | None) -> str:
    top = list((reasons or {}).items())[:3]
    return "; ".join(f"{count} x {reason}" for reason, count in top) or "reasons not kept"


def write_requested_plan(
    entries: Iterable[Mapping[str, Any]],
    path: str | os.PathLike[str] | OpenableFile | None,
    *,
    dry_run: bool,
    prefix: str,
    logger: logging.Logger,
) -> str | None:
    """Write the plan file when ``path`` is given or the run is dry (then, without a path, to a
    temporary file), log where it went and return that; None when no plan file was asked for.

    :param entries: the planned actions, read only when the file is written.
    :param prefix: the temporary file's name prefix (see :func:`~listsync.files.write_json_lines`).
    :param logger: the job's logger, for the line saying where the plan went.
    """
    if path is None and not dry_run:
        return None
    written = write_json_lines(entries, path, prefix=prefix)
    logger.info("Plan written to %s", written)
    return written


class _ReadCount(Protocol):
    read: int


class PreparedExtract(Protocol):
    @property
    def stats(self) -> _ReadCount: ...  # pragma: no cover - protocol


PreparedT = TypeVar("PreparedT", bound=PreparedExtract)
SummaryT = TypeVar("SummaryT", bound=ListSyncSummary)


def prepare_with_rejects(
    prepare: Callable[[Rejects], PreparedT],
    rejects_path: str | os.PathLike[str] | OpenableFile | None,
    *,
    max_reject_fraction: float,
    prefix: str,
) -> tuple[PreparedT, str | None, Counter[str]]:
    """Prepare an extract, write its rejected rows, then enforce ``max_reject_fraction``.

    Rejects stream to a local ``rejects_path``; elsewhere (object storage, or no path) they are
    kept in memory, which holds only the rejected rows, and written once at the end: to
    ``rejects_path``, or without one to a temporary file when any row was rejected.

    :param prepare: prepares the extract (``prepare_people``, ``prepare_rows``...), giving every
        rejected row to the collector it is called with.
    :param rejects_path: where rejected rows go: a local path, an object with ``open()`` such as
        ``ObjectStoragePath``, or None.
    :param max_reject_fraction: the largest share of the rows read that may be rejected.
    :param prefix: the temporary file's name prefix.
    :return: what ``prepare`` returned, where the rejects were written (None: nowhere), and the
        rejected rows by kind of reason (:attr:`~listsync.extract.rejects.Rejects.by_reason`).
    :raises TooManyRejectsError: more rows were rejected than ``max_reject_fraction`` allows; the
        rejects are written first, so that a run failed for them leaves them to read.
    """
    from listsync.extract.rejects import Rejects

    local = rejects_path if isinstance(rejects_path, str | os.PathLike) else None
    with Rejects(local) as rejects:
        prepared = prepare(rejects)
        written = str(local) if local is not None else None
        if local is None and (rejects_path is not None or rejects.records):
            written = write_json_lines(rejects.records, rejects_path, prefix=prefix)
        rejects.check_fraction(prepared.stats.read, max_reject_fraction)
    return prepared, written, rejects.by_reason


def check_delete_safety(
    *,
    planned_deletes: int,
    current_total: int,
    source_rows: int,
    max_delete_fraction: float,
    noun: str = "people",
    fraction_parameter: str = "max_delete_fraction",
) -> None:
    """Refuse deletes that look like a broken extract; return quietly when they are safe.

    Two rules, checked only when something would be deleted:

    - the extract produced no valid row (empty file, failed query, every row rejected): a sync
      would then delete everything in scope, which is never what a nightly job meant to do;
    - the deletes exceed ``max_delete_fraction`` of what the List holds now.

    :param planned_deletes: how many items the plan deletes.
    :param current_total: how many items the List holds now (the denominator of the fraction).
    :param source_rows: how many valid rows the extract produced (after rejects).
    :param max_delete_fraction: the largest allowed ``planned_deletes / current_total``, 0 to 1.
    :param noun: what is deleted, for the message ("people", "rows").
    :param fraction_parameter: the name under which the caller exposes ``max_delete_fraction``,
        so the message names the setting the user can change.
    :raises ValueError: ``max_delete_fraction`` is not between 0 and 1.
    :raises UnsafeDeleteError: a rule refused the deletes; the message gives the numbers.
    """
    if not 0.0 <= max_delete_fraction <= 1.0 or math.isnan(max_delete_fraction):
        raise ValueError(f"{fraction_parameter} must be between 0 and 1, got {max_delete_fraction!r}")
    if planned_deletes <= 0:
        return
    numbers = {"planned_deletes": planned_deletes, "current_total": current_total, "source_rows": source_rows}
    if source_rows == 0:
        raise UnsafeDeleteError(
            f"Refusing to delete {planned_deletes} of {current_total} {noun}: the extract produced no "
            f"valid rows, which usually means a broken source rather than an empty CRM. Check the "
            f"source and the rejects file; nothing was written.",
            **numbers,
        )
    fraction = planned_deletes / current_total if current_total else 1.0
    if fraction > max_delete_fraction:
        needed = math.ceil(fraction * 1000) / 1000
        raise UnsafeDeleteError(
            f"Refusing to delete {planned_deletes} of {current_total} {noun} ({fraction:.1%}), more than "
            f"{fraction_parameter}={max_delete_fraction} allows; nothing was written. If these deletes "
            f"are intended, set {fraction_parameter} to at least {needed}.",
            **numbers,
        )


class ProgressLogger:
    """Log how much of a plan has been applied, each time another tenth is done.

    Call :meth:`advance` after each chunk is written; one line is logged whenever progress
    crosses a multiple of ``step`` (10 % by default), so a long run shows it is alive and a short
    one does not flood the log. Several steps crossed at once give one line.
    """

    def __init__(
        self, total: int, *, what: str = "plan", logger: logging.Logger | None = None, step: float = 0.1
    ) -> None:
        """
        :param total: the number of items the plan holds.
        :param what: what is being applied, for the log line.
        :param logger: where to log (default: this module's logger).
        :param step: the fraction of ``total`` between two log lines, 0 < step <= 1.
        """
        if not 0.0 < step <= 1.0:
            raise ValueError(f"step must be in (0, 1], got {step!r}")
        self.total = total
        self.done = 0
        self._what = what
        self._log = logger or logging.getLogger(__name__)
        self._step = step
        self._next_mark = 1

    def advance(self, count: int, **counts: int) -> None:
        """Record ``count`` more items applied; ``counts`` (e.g. ``failed=2``) join the log line."""
        self.done += count
        if self.total <= 0:
            return
        fraction = self.done / self.total
        reached = math.floor(fraction / self._step + 1e-9)
        if reached >= self._next_mark:
            self._next_mark = reached + 1
            details = "".join(f", {name} {value}" for name, value in counts.items())
            self._log.info(
                "%s: %d of %d applied (%.0f%%)%s",
                self._what,
                self.done,
                self.total,
                fraction * 100,
                details,
                extra={**PROGRESS, "done": self.done, "total": self.total},
            )


def build_summary(
    summary_type: type[SummaryT],
    *,
    requests: Mapping[str, int],
    failure_reasons: Iterable[str] = (),
    drift_reasons: Iterable[str] = (),
    **values: Any,
) -> SummaryT:
    """The summary of a sync (:mod:`listsync.sync.summary`), its reasons counted and cut short.

    :param summary_type: the job's summary (``PeopleSummary``, ``RowsSummary``).
    :param requests: write requests sent, by kind (e.g. ``{"add": 3, "patch": 1, "delete": 0}``);
        a ``total`` is added.
    :param failure_reasons: one reason per failed item; the summary counts them by reason and
        keeps the :data:`MAX_FAILURE_REASONS` most frequent.
    :param drift_reasons: one line per write the re-read after applying contradicts; the summary
        keeps the first :data:`MAX_FAILURE_REASONS`.
    :param values: the summary's other fields, by name.
    :raises pydantic.ValidationError: a value the summary does not declare, or of another type.
    """
    return summary_type(
        **values,
        requests={**requests, "total": sum(requests.values())},
        failure_reasons=dict(Counter(failure_reasons).most_common(MAX_FAILURE_REASONS)),
        drift_reasons=list(itertools.islice(drift_reasons, MAX_FAILURE_REASONS)),
    )


def combine_summaries(
    summaries: Iterable[Mapping[str, Any]], *, split: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One summary for the shards of one sync (``sync_people`` or ``upsert_rows`` run with
    ``shard="i/n"``), e.g. for a task downstream of a mapped sync.

    Shards of a split (``sync_people`` with ``parts_path``) each read only their part, the split
    having read the extract (``split``: what ``split_people`` returned): ``read``, ``rejected``,
    ``duplicates``, ``rejects_path`` and ``reject_reasons`` are then the split's, and
    ``other_shards`` the rows the split passed to shards not combined.

    Every shard reads the whole extract, so the combined ``read`` is the extract's rows once and
    ``other_shards`` the rows of shards not combined (0 when all are): ``read = passed + rejected
    + duplicates + other_shards`` holds for the combination as for each shard. The other counts
    are summed, and so are the counts by kind (``requests``, ``planned``); failure reasons are
    merged (the :data:`MAX_FAILURE_REASONS` most frequent kept) and drift reasons joined.
    ``shard`` gives way to ``shards``, the shards combined in order, so that a missing one shows.
    Other values are kept where the shards agree (the List, the mode); where they differ (each
    shard's plan and rejects files) they become the list of each shard's values, in shard order.

    :raises ValueError: no summary, a summary without a shard, shards of different counts or a
        shard twice, summaries of different Lists, or shards that read different extracts (or,
        with ``split``, shards of another number or List than the split's).
    """
    items = list(summaries)
    shards = [str(summary.get("shard")) for summary in items]
    parsed = [shard.split("/") for shard in shards if shard.count("/") == 1]
    if not items or len(parsed) != len(items):
        raise ValueError(
            f"combine_summaries needs the summaries of sharded runs (with a shard); got shards {shards}"
        )
    if len({count for _, count in parsed}) > 1 or len(set(shards)) < len(shards):
        raise ValueError(f"combine_summaries needs the distinct shards of one sync; got shards {shards}")
    tables = {summary.get("table_id") for summary in items}
    if len(tables) > 1:
        raise ValueError(f"combine_summaries needs the shards of one List; got {sorted(map(str, tables))}")
    if split is not None and (
        {int(count) for _, count in parsed} != {split.get("shards")} or tables != {split.get("table_id")}
    ):
        raise ValueError(
            f"combine_summaries needs the shards of the split of {split.get('table_id')} in "
            f"{split.get('shards')}; got shards {shards} of {sorted(map(str, tables))}"
        )
    read = {summary.get("read", 0) for summary in items}
    if split is None and len(read) > 1:
        raise ValueError(
            f"combine_summaries needs shards that read one extract; they read {sorted(read)} rows"
        )
    indices = [int(index) for index, _ in parsed]
    ordered = [summary for _, summary in sorted(zip(indices, items, strict=True), key=lambda pair: pair[0])]
    combined: dict[str, Any] = {"shards": [summary["shard"] for summary in ordered]}
    for name in dict.fromkeys(name for summary in ordered for name in summary):
        values = [summary.get(name) for summary in ordered]
        if name == "shard":
            continue
        if name == "read":
            combined[name] = values[0]
        elif name == "other_shards":
            # Each shard counts every row of the others: those of the shards combined, len - 1 times.
            combined[name] = sum(value or 0 for value in values) - (len(values) - 1) * ordered[0]["read"]
        elif name in ("failure_reasons", "permanent_reasons", "curable_reasons"):
            combined[name] = dict(_added(values).most_common(MAX_FAILURE_REASONS))
        elif name == "drift_reasons":
            combined[name] = list(
                itertools.islice(itertools.chain(*(v or [] for v in values)), MAX_FAILURE_REASONS)
            )
        elif all(_is_count(value) for value in values):
            combined[name] = sum(values)
        elif all(isinstance(value, Mapping) and all(map(_is_count, value.values())) for value in values):
            combined[name] = dict(_added(values))
        else:
            combined[name] = values[0] if all(value == values[0] for value in values) else values
    if split is not None:
        for name in ("read", "rejected", "duplicates", "rejects_path", "reject_reasons"):
            combined[name] = split.get(name)
        combined["other_shards"] = split["passed"] - combined["passed"]
    return combined


def _added(counts: Iterable[Mapping[str, int] | None]) -> Counter[str]:
    """The counts added up by key (a zero kept: ``requests`` lists every kind)."""
    total: Counter[str] = Counter()
    for value in counts:
        total.update(value or {})
    return total


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The first pause of a read back waiting for writes to show, and the longest (it doubles).
READ_BACK_PAUSES = (0.5, 8.0)


def read_back_rounds(
    client: ListSyncClient, timeout: float, pending: Callable[[], bool], what: str
) -> Iterator[int]:
    """The rounds of a read back: the first at once; then, while ``pending()`` says some writes are
    not shown by the List yet, another after a pause (:data:`READ_BACK_PAUSES`), until the pauses
    add up to ``timeout`` seconds (``verify_timeout``)."""
    pause, longest = READ_BACK_PAUSES
    waited = 0.0
    number = 0
    while True:
        yield number
        number += 1
        left = timeout - waited
        if left <= 0 or not pending():
            return
        delay = min(pause, left)
        logging.getLogger(__name__).info(
            "Some %s are not shown by the List yet: reading them again in %.1f s "
            "(%.0f s left of verify_timeout)",
            what,
            delay,
            left,
        )
        client.sleep(delay)
        waited += delay
        pause = min(pause * 2, longest)


def wait_for_late_writes(client: ListSyncClient, settle_after: float | None) -> None:
    """Sleep until writes whose answer was lost can no longer land (``WriteReport.settle_after``),
    so that reading them back cannot miss one still on its way and send it a second time."""
    delay = 0.0 if settle_after is None else settle_after - client.clock()
    if delay > 0:
        logging.getLogger(__name__).info(
            "Waiting %.1f s for writes whose answer was lost to land before reading them back", delay
        )
        client.sleep(delay)
