"""Alerts about a List sync, sent through any Airflow notifier (Slack, SMTP, a webhook...).

:class:`SyncNotifier` is a task's (or a DAG's) ``on_failure_callback`` and
``on_success_callback``. It reads the sync's JSON summary (people or rows), works out what a
person should know, and calls the notifier it wraps with the task's context plus a ``listsync``
key, which that notifier's templated fields use::

    alerts = SyncNotifier(
        SmtpNotifier(to="data@example.com", subject="{{ listsync.subject }}",
                     html_content="<pre>{{ listsync.message }}</pre>"),
        max_reject_fraction=0.02,
        alert_on_drift=True,
        max_count_change=0.2,
    )
    SyncTargetablePeopleOperator(..., on_failure_callback=alerts, on_success_callback=alerts)

``listsync`` holds ``subject`` (one line), ``message`` (plain text: the DAG, task, run, List and
mode, the alerts, the counts, the most frequent failure reasons), ``alerts`` (one line each) and
``summary`` (the summary as the task left it, or None).

When it sends:

- A failed run always sends, with the exception's message on one line (as the sync code wrote
  it: secrets in it are already masked) and the summary's counts when there is one: a sync that
  wrote what it could and failed the rest leaves its summary; one that failed before (an unsafe
  delete, too many rejects, a wrong key) leaves none. The thresholds below add their lines too.
- A successful run sends only when a threshold is crossed, one line per finding:
  ``max_reject_fraction`` (rejected rows over the rows of the run's shard, ``read`` less
  ``other_shards``: the extract's rows when the sync is not sharded), ``alert_on_drift`` (written
  items that read back with other values, ``drift``, and writes the List did not show in time,
  ``unconfirmed``) and ``max_count_change`` (``read``, the extract's rows, against the last
  successful run of the same task and map index). A threshold left None (False) is not checked;
  each is crossed only when strictly exceeded. :func:`crossed_thresholds` is that decision.

Where the numbers come from: the summary is the task instance's XCom ``return_value``, which
Airflow clears as each try starts, so it is this try's. The last successful run is
``ti.get_previous_ti(state="success")`` of the task SDK, asked for a run logically before this one
(before its ``run_after`` when it has no logical date, as a run triggered by hand): its
``return_value`` is the summary compared with. None found (the first run): no count alert.
Something that cannot be read (the XCom, the previous run) is logged and left out; it never stops
the alert of a failure.

Given as a notifier of an approval (Airflow's ``ApprovalOperator`` or any human-in-the-loop
operator: its ``notifiers``), it sends as the approval starts to wait: who is asked, the
approval's subject and what the reviewer reads (its body), so that the person who must answer
hears of it.

As a DAG's callback, the task it reads is the one Airflow's context names (the one whose failure
failed the run, or the last to succeed), and a failure's line gives the DAG run's reason. Under
``dag.test()`` a DAG callback gets the serialized DAG, with which no ``BaseNotifier`` can render
its templates (apache/airflow#64649); the DAG processor, which runs them in a deployment, gives
the DAG parsed from its file.

The wrapped notifier renders its templates when called, which Airflow does in place and for
good; each alert calls a copy of it, so that one ``SyncNotifier`` serves every task, run and
callback of a process with fresh templates.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from airflow.sdk import BaseNotifier

from listsync.errors import warn_aside
from listsync.sync.summary import HEADLINE_COUNTS, counts_of, upgraded

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import DagRunProtocol, RuntimeTaskInstanceProtocol

__all__ = [
    "AlertThresholds",
    "LogNotifier",
    "SyncNotifier",
    "crossed_thresholds",
    "previous_successful_summary",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Reasons of each kind the message lists, most frequent first.
MAX_REASONS = 3
#: Longest exception message an alert line carries.
MAX_LINE = 500


class LogNotifier(BaseNotifier):
    """A notifier that writes its message to the log, as a warning: where no Slack or SMTP is set
    up yet, alerts still show in the task's log (or the callback's, for a missed deadline).

    :param message: what to write (templated), by default the alert :class:`SyncNotifier` made.
    """

    template_fields = ("message",)

    def __init__(self, message: str = "{{ listsync.subject }}\n{{ listsync.message }}") -> None:
        super().__init__()
        self.message = message

    def notify(self, context: Context) -> None:
        logging.getLogger("listsync.alerts").warning("%s", self.message)


@dataclass(frozen=True)
class AlertThresholds:
    """When a successful sync still deserves an alert.

    :param max_reject_fraction: alert when more than this share (0 to 1) of the run's rows were
        rejected; None: not checked.
    :param alert_on_drift: alert when written items read back with other values (``drift``) or
        were not shown by the List in time (``unconfirmed``).
    :param max_count_change: alert when the extract's row count (``read``) moved by more than
        this share (0 to 1) of the last successful run's, up or down; None: not checked.
    :raises ValueError: a fraction that is not a number between 0 and 1.
    """

    max_reject_fraction: float | None = None
    alert_on_drift: bool = False
    max_count_change: float | None = None

    def __post_init__(self) -> None:
        for name, fraction in (
            ("max_reject_fraction", self.max_reject_fraction),
            ("max_count_change", self.max_count_change),
        ):
            # "not 0 <= fraction <= 1" also refuses NaN.
            if fraction is not None and (
                isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction <= 1
            ):
                raise ValueError(f"{name} must be between 0 and 1, got {fraction!r}")


def crossed_thresholds(
    summary: Mapping[str, Any], previous: Mapping[str, Any] | None, thresholds: AlertThresholds
) -> list[str]:
    """The thresholds a sync's summary crosses, one line each saying by how much.

    :param summary: the sync's JSON summary (people or rows).
    :param previous: the summary of the task's last successful run; None when there is none,
        and then the count change is not checked.
    :param thresholds: what to check.
    :return: the lines, empty when nothing is crossed.
    """
    lines = []
    if thresholds.max_reject_fraction is not None:
        rows = _count(summary, "read") - _count(summary, "other_shards")
        rejected = _count(summary, "rejected")
        if rows > 0 and rejected / rows > thresholds.max_reject_fraction:
            lines.append(
                f"rejects: {rejected} of {rows} rows rejected ({rejected / rows:.1%}), more than "
                f"max_reject_fraction={thresholds.max_reject_fraction} allows"
            )
    if thresholds.alert_on_drift:
        drift = _count(summary, "drift")
        if drift:
            lines.append(
                f"drift: {drift} written item(s) read back with other values"
                + _first(summary.get("drift_reasons"))
            )
        unconfirmed = _count(summary, "unconfirmed")
        if unconfirmed:
            lines.append(
                f"unconfirmed: {unconfirmed} write(s) not shown by the List when read back"
                + _first(summary.get("unconfirmed_reasons"))
            )
    if thresholds.max_count_change is not None and previous is not None:
        read, before = _count(summary, "read"), _count(previous, "read")
        change = (read - before) / before if before else (math.inf if read else 0.0)
        if abs(change) > thresholds.max_count_change:
            moved = f"{change:+.1%}" if before else "from none"
            lines.append(
                f"row count: {read} rows read, {before} at the last successful run ({moved}), more "
                f"than max_count_change={thresholds.max_count_change} allows"
            )
    return lines


def previous_successful_summary(
    ti: RuntimeTaskInstanceProtocol, dag_run: DagRunProtocol | None
) -> Mapping[str, Any] | None:
    """The summary of the last successful run of ``ti``'s task (same map index) logically before
    ``dag_run``; None when there is none.

    A run without a logical date (triggered by hand) looks before its ``run_after``: the task
    instance query compares logical dates, so without one it would not exclude the run itself.
    """
    from airflow.sdk import TaskInstanceState

    map_index = -1 if ti.map_index is None else ti.map_index
    before = None if dag_run is None else dag_run.logical_date or dag_run.run_after
    previous = ti.get_previous_ti(state=TaskInstanceState.SUCCESS, logical_date=before, map_index=map_index)
    if previous is None or previous.run_id == ti.run_id:
        return None
    return summary_of(ti.xcom_pull(task_ids=ti.task_id, run_id=previous.run_id, map_indexes=map_index))


def summary_of(value: Any) -> Mapping[str, Any] | None:
    """``value`` when it is a sync's summary (a mapping with a ``read`` count), its counts under
    today's names (one an older listsync returned may name them otherwise), else None: what
    another task returned (a DAG's last task, a report) is not read as one."""
    if isinstance(value, Mapping) and isinstance(value.get("read"), int):
        return upgraded(value)
    return None


class SyncNotifier(BaseNotifier):
    """Tell a person about a List sync: its failure, or what is odd in its success.

    Give it as ``on_failure_callback`` and ``on_success_callback`` of the sync tasks
    (``SyncTargetablePeopleOperator``, ``UpsertRowsOperator``), or of their DAG; see the module
    docstring for when it sends and what the wrapped notifier gets.

    :param notifier: the notifier that sends, e.g. ``SlackNotifier`` or ``SmtpNotifier``; its
        templated fields see ``{{ listsync.subject }}``, ``{{ listsync.message }}``,
        ``{{ listsync.alerts }}`` and ``{{ listsync.summary }}``.
    :param max_reject_fraction: see :class:`AlertThresholds`.
    :param alert_on_drift: see :class:`AlertThresholds`.
    :param max_count_change: see :class:`AlertThresholds`.
    :raises TypeError: ``notifier`` is not a ``BaseNotifier``.
    :raises ValueError: a fraction is not between 0 and 1 (when the DAG is parsed).
    """

    def __init__(
        self,
        notifier: BaseNotifier,
        *,
        max_reject_fraction: float | None = None,
        alert_on_drift: bool = False,
        max_count_change: float | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(notifier, BaseNotifier):
            raise TypeError(f"notifier must be an Airflow BaseNotifier, got {type(notifier).__name__}")
        self.notifier = notifier
        self.thresholds = AlertThresholds(
            max_reject_fraction=max_reject_fraction,
            alert_on_drift=alert_on_drift,
            max_count_change=max_count_change,
        )

    def notify(self, context: Context) -> None:
        """Work out the alerts of the run in ``context`` and, when there is one, call the wrapped
        notifier with ``context`` plus ``listsync``."""
        waiting = _awaited_answer(context)
        if waiting is not None:
            subject = f"[ListSync] approval waiting: {_where(context)}"
            lines = [
                subject,
                "",
                _run_line(context, "waiting for a person's answer"),
                "",
                "Alerts:",
                f"- {waiting}",
                "",
            ]
            body = getattr(context.get("task"), "body", None)
            self._send(context, subject, "\n".join([*lines, *([body] if body else [])]), [waiting], None)
            return
        ti = context.get("ti")
        failed = _failed(context)
        summary = None
        if ti is not None:
            summary = self._read(
                "the sync's summary",
                lambda: summary_of(ti.xcom_pull(task_ids=ti.task_id, map_indexes=_map_index(ti))),
            )
        alerts = [_failure_line(context)] if failed else []
        if summary is not None:
            previous = None
            if ti is not None and self.thresholds.max_count_change is not None:
                previous = self._read(
                    "the last successful run's summary",
                    lambda: previous_successful_summary(ti, context.get("dag_run")),
                )
            alerts += crossed_thresholds(summary, previous, self.thresholds)
        if not alerts:
            self.log.info("No ListSync alert: the run succeeded and crossed no threshold")
            return
        subject = _subject(context, summary, failed, len(alerts))
        self._send(context, subject, _message(subject, context, summary, alerts), alerts, summary)

    def _send(
        self,
        context: Context,
        subject: str,
        message: str,
        alerts: list[str],
        summary: Mapping[str, Any] | None,
    ) -> None:
        """Call the wrapped notifier with ``context`` plus ``listsync``."""
        listsync = {"subject": subject, "message": message, "alerts": alerts, "summary": summary}
        # Rendering replaces the notifier's templates by their values, so each alert renders a copy.
        target = copy.copy(self.notifier)
        try:
            target(cast("Context", {**context, "listsync": listsync}))
        except Exception as error:
            # The alert is beside the run: its failure must not fail a callback, nor bury the log.
            warn_aside(log, f"ListSync alert {subject!r} was not sent by {type(target).__name__}", error)

    def _read(self, what: str, read: Callable[[], T]) -> T | None:
        """What ``read`` returns; None, logged, when it fails: an alert goes out without it."""
        try:
            return read()
        except Exception as error:
            warn_aside(log, f"ListSync alert: could not read {what}", error)
            return None


def _awaited_answer(context: Context) -> str | None:
    """The alert of an approval (a human-in-the-loop task) starting to wait, naming its subject
    and whom it asks; None when the context is not such a task's."""
    try:
        from airflow.providers.standard.operators.hitl import HITLOperator
    except ImportError:  # no human-in-the-loop operators: nothing waits for a person
        return None
    task = context.get("task")
    if not isinstance(task, HITLOperator):
        return None
    users = [user.get("name") or user.get("id") for user in task.assigned_users or []]
    asked = f" (asked: {', '.join(map(str, users))})" if users else ""
    return f"waiting for approval: {task.subject}{asked}"


def _failed(context: Context) -> bool:
    """Whether the run in ``context`` failed. A DAG callback's context says why it was called
    (``reason``); a task's, its state. Only failure callbacks run without a state (the DAG
    processor's, for a task whose worker was lost)."""
    if "reason" in context:
        return context.get("reason") != "success"
    ti = context.get("ti")
    return ti is None or ti.state != "success"


def _failure_line(context: Context) -> str:
    if "reason" in context:
        ti = context.get("ti")
        # The task Airflow names: the one whose failure failed the run, or one left blocked.
        task = f"; task {_task_name(ti)}" if ti is not None else ""
        return f"failed: the DAG run failed ({context.get('reason')}){task}"
    error = context.get("exception")
    if error is None:
        return "failed: no exception was recorded (the task may have been killed or its worker lost)"
    if isinstance(error, BaseException):
        return f"failed: {type(error).__name__}: {_one_line(str(error))}"
    return f"failed: {_one_line(str(error))}"


def _subject(context: Context, summary: Mapping[str, Any] | None, failed: bool, alerts: int) -> str:
    where = _where(context)
    table_id = _table_id(context, summary)
    if table_id:
        where += f", List {table_id}"
    if failed:
        return f"[ListSync] FAILED {where}"
    return f"[ListSync] {alerts} warning(s): {where}"


def _message(subject: str, context: Context, summary: Mapping[str, Any] | None, alerts: list[str]) -> str:
    lines = [subject, "", _run_line(context)]
    task = context.get("task")
    table_id = _table_id(context, summary)
    mode = (summary or {}).get("mode") or getattr(task, "mode", None)
    dry_run = (summary or {}).get("dry_run", getattr(task, "is_dry_run", False))
    about = [f"List {table_id}"] if table_id else []
    about += [f"mode {mode}"] if mode else []
    about += ["dry run"] if dry_run is True else []
    if summary is not None and summary.get("shard"):
        about.append(f"shard {summary['shard']}")
    if about:
        lines.append(", ".join(about))
    lines += ["", "Alerts:", *(f"- {alert}" for alert in alerts), ""]
    if summary is None:
        lines.append("No summary: the task ended before the sync had one.")
        return "\n".join(lines)
    held = counts_of(summary)
    counts = ", ".join(f"{name} {held[name]}" for name in HEADLINE_COUNTS if name in held)
    if "requests_total" in held:
        counts += f"; {held['requests_total']} write request(s)"
    lines.append(f"Counts: {counts}")
    reasons = summary.get("failure_reasons")
    if isinstance(reasons, Mapping) and reasons:
        lines.append("Failure reasons, most frequent first:")
        lines += [f"- {count} x {reason}" for reason, count in list(reasons.items())[:MAX_REASONS]]
    for title, key in (("Drift", "drift_reasons"), ("Unconfirmed", "unconfirmed_reasons")):
        found = summary.get(key)
        if isinstance(found, list) and found:
            lines.append(f"{title}, first {min(len(found), MAX_REASONS)}:")
            lines += [f"- {line}" for line in found[:MAX_REASONS]]
    if _count(summary, "rejected") and summary.get("rejects_path"):
        lines.append(f"Rejected rows and their reasons: {summary['rejects_path']}")
    unsettled = any(_count(summary, name) for name in ("failed", "drift", "unconfirmed"))
    if unsettled and summary.get("outcomes_path"):
        lines.append(f"Each record that did not end as planned, and why: {summary['outcomes_path']}")
    return "\n".join(lines)


def _run_line(context: Context, outcome: str | None = None) -> str:
    """Which run of which task, and how it ended (or ``outcome``, what it is doing)."""
    ti = context.get("ti")
    parts = [f"DAG {_dag_id(context)}"]
    if "reason" in context:
        outcome = "succeeded" if context.get("reason") == "success" else f"failed ({context.get('reason')})"
        if ti is not None:
            parts.append(f"last task {_task_name(ti)}")
        parts.append(f"run {context.get('run_id')}")
        return ", ".join(parts) + f": the DAG run {outcome}"
    if ti is not None:
        parts += [f"task {_task_name(ti)}", f"run {ti.run_id}", f"try {ti.try_number}"]
    state = getattr(ti, "state", None)
    said = {"success": "succeeded", "up_for_retry": "failed, to be retried"}.get(
        str(getattr(state, "value", state)), "failed"
    )
    return ", ".join(parts) + f": {outcome or said}"


def _where(context: Context) -> str:
    ti = context.get("ti")
    if "reason" in context or ti is None:
        return f"DAG {_dag_id(context)}"
    return f"{ti.dag_id}.{_task_name(ti)}"


def _dag_id(context: Context) -> str:
    dag = context.get("dag")
    if dag is not None:
        return str(dag.dag_id)
    ti = context.get("ti")
    return ti.dag_id if ti is not None else "?"


def _task_name(ti: RuntimeTaskInstanceProtocol) -> str:
    return ti.task_id if _map_index(ti) < 0 else f"{ti.task_id}[{ti.map_index}]"


def _map_index(ti: RuntimeTaskInstanceProtocol) -> int:
    return -1 if ti.map_index is None else ti.map_index


def _table_id(context: Context, summary: Mapping[str, Any] | None) -> str | None:
    """The List: the summary's, else the task's (a task that failed before it had a summary)."""
    table_id = (summary or {}).get("table_id") or getattr(context.get("task"), "table_id", None)
    return str(table_id) if table_id else None


def _count(summary: Mapping[str, Any], name: str) -> int:
    value = summary.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _first(reasons: Any) -> str:
    return f", e.g. {reasons[0]}" if isinstance(reasons, list) and reasons else ""


def _one_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…"
