"""The report of a List sync run: one HTML page a person looks at rather than reads.

A run of ``sync_people`` or ``upsert_rows`` writes it at its end (``report_path``; by default
beside the plan file, its name ending ``.html``): the List, the mode, the time and the lease wait;
the counts of the summary, each with what it means (from :mod:`listsync.sync.summary`, where it is
declared once); the rejected rows by kind of reason; what failed; and a sample of the plan, the
first :data:`SAMPLE_SIZE` lines of each action with their values before and after.

The page stands alone: its style is inline, it loads nothing (no script, font, image or link
elsewhere), so it opens offline, attached to a mail or kept with the run's files. Every value
on it is escaped: an extract's values are untrusted text, and ``<script>`` in a name is shown
as written.

Its memory is bounded whatever the run's size: :class:`PlanSample` keeps the first lines of each
action as the plan streams past, and a file of failed records (``outcomes``) is read line by line,
its first :data:`SAMPLE_SIZE` records kept. A report that cannot be written is one warning line;
the run's outcome is unchanged (:func:`~listsync.errors.warn_aside`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

from listsync.files import OpenableFile
from listsync.sync.summary import HEADLINE_COUNTS, ListSyncSummary, count_names, meaning

__all__ = ["SAMPLE_SIZE", "PlanSample", "render_report", "report_target", "write_report"]

#: Plan lines shown of each action, and failed records of an outcomes file.
SAMPLE_SIZE = 20

_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
 color:#1f2328;background:#f6f8fa;margin:0}
main{max-width:1100px;margin:0 auto;padding:24px 32px 48px;background:#fff;min-height:100vh}
h1{font-size:26px;margin:0 0 4px}
h2{font-size:19px;margin:32px 0 8px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
h3{font-size:16px;margin:20px 0 6px}
.status{display:inline-block;padding:3px 12px;border-radius:12px;font-weight:600;font-size:14px}
.ok{background:#dafbe1;color:#116329}.bad{background:#ffebe9;color:#a40e26}
.dry{background:#ddf4ff;color:#0550ae}
table{border-collapse:collapse;margin:6px 0 10px;width:100%}
table.compact{width:auto;min-width:360px}
th,td{border:1px solid #d0d7de;padding:5px 9px;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}tbody tr:nth-child(even){background:#fbfcfd}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap;width:7em}
table.zero td{color:#8c959f}details{margin:4px 0 10px}summary{cursor:pointer;color:#57606a}
.facts th{width:13em}.facts th,.facts td{padding:3px 9px}.meaning{color:#57606a}
.side{display:flex;flex-wrap:wrap;gap:0 32px}
.headline{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.tile{border:1px solid #d0d7de;border-radius:8px;padding:8px 14px;min-width:92px}
.tile b{display:block;font-size:22px}.tile span{color:#57606a;font-size:13px}
.tile.warn{border-color:#cf222e}.tile.warn b{color:#cf222e}
code,.v{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px;
 word-break:break-word}
del{background:#ffebe9;color:#82071e}ins{background:#dafbe1;color:#116329;text-decoration:none}
.none{color:#8c959f;font-style:italic}p.note{color:#57606a}
"""
#: Counts whose non-zero value is bad news: shown in red.
_WARNING_COUNTS = ("rejected", "failed", "drift", "unconfirmed", "lost")


class PlanSample:
    """The first :data:`SAMPLE_SIZE` lines of each action of a plan, and how many lines each
    action has, kept as the plan streams past (:meth:`through`)."""

    def __init__(self, size: int = SAMPLE_SIZE) -> None:
        self.size = size
        #: The lines kept, by action, actions in the order met.
        self.lines: dict[str, list[Mapping[str, Any]]] = {}
        #: Lines of each action.
        self.counts: dict[str, int] = {}

    def through(self, entries: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """``entries``, each one yielded on, the sample taken of them on the way."""
        for entry in entries:
            action = str(entry.get("action"))
            kept = self.lines.setdefault(action, [])
            self.counts[action] = self.counts.get(action, 0) + 1
            if len(kept) < self.size:
                kept.append(entry)
            yield entry

    def take(self, entries: Iterable[Mapping[str, Any]]) -> PlanSample:
        """Take the sample of ``entries`` (a plan written nowhere); return this sample."""
        for _ in self.through(entries):
            pass
        return self


def report_target(
    report_path: str | os.PathLike[str] | OpenableFile | None,
    plan_path: str | os.PathLike[str] | OpenableFile | None,
    plan_written: str | None,
) -> str | os.PathLike[str] | OpenableFile | None:
    """Where the report goes: ``report_path``; else beside the plan file written, its name ending
    ``.html`` instead (``people.plan.jsonl``: ``people.plan.html``), in the same store; else
    nowhere (None: the run wrote no plan file and asked for no report)."""
    if report_path is not None:
        return report_path
    if plan_written is None:
        return None
    with_suffix = getattr(plan_path, "with_suffix", None)
    if plan_path is not None and not isinstance(plan_path, str | os.PathLike) and callable(with_suffix):
        suffixed: OpenableFile = with_suffix(".html")  # ObjectStoragePath, UPath
        return suffixed
    return str(Path(plan_written).with_suffix(".html"))


def write_report(
    target: str | os.PathLike[str] | OpenableFile,
    summary: ListSyncSummary,
    sample: PlanSample,
    *,
    started: datetime,
    finished: datetime,
    outcomes: str | os.PathLike[str] | OpenableFile | None = None,
) -> str:
    """Write the run's report to ``target`` (a local path or an object with ``open(mode)``);
    return where it went. ``outcomes``: a JSON-lines file of the records that failed, one object
    each, shown as a table (see :func:`render_report`)."""
    page = render_report(summary, sample, started=started, finished=finished, outcomes=outcomes)
    if isinstance(target, str | os.PathLike):
        local = Path(target)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(page, encoding="utf-8")
        return str(local)
    with target.open("w") as handle:
        handle.write(page)
    return str(target)


def render_report(
    summary: ListSyncSummary,
    sample: PlanSample,
    *,
    started: datetime,
    finished: datetime,
    outcomes: str | os.PathLike[str] | OpenableFile | None = None,
) -> str:
    """The report's page.

    :param outcomes: a JSON-lines file of the records whose write failed, one object a line,
        shown as one table (a column a key) of its first :data:`SAMPLE_SIZE` records; None: the
        summary's reasons alone.
    """
    job = "Rows upsert" if "key_column" in type(summary).model_fields else "People sync"
    title = f"{job} of List {summary.table_id}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_text(title)}</title><style>{_STYLE}</style></head><body><main>",
        f"<h1>{_text(title)}</h1>",
        _status(summary),
        _headline(summary),
        _facts(summary, started, finished),
        _failures(summary, outcomes),
        _rejects(summary),
        _changes(sample),
        _counts(summary),
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _text(value: Any) -> str:
    """``value`` as escaped text."""
    return escape(str(value), quote=True)


def _number(value: int) -> str:
    return f"{value:,}"


def _status(summary: ListSyncSummary) -> str:
    if summary.dry_run:
        return '<p><span class="status dry">Dry run: planned, nothing written</span></p>'
    trouble = [
        f"{_number(value)} {name}" for name in ("failed", "drift") if (value := getattr(summary, name))
    ]
    if trouble:
        return f'<p><span class="status bad">{_text(", ".join(trouble))}</span></p>'
    return '<p><span class="status ok">Everything planned was written</span></p>'


def _headline(summary: ListSyncSummary) -> str:
    tiles = []
    for name in HEADLINE_COUNTS:
        if name in type(summary).model_fields:
            value = getattr(summary, name)
            warn = " warn" if value and name in _WARNING_COUNTS else ""
            tiles.append(
                f'<div class="tile{warn}" title="{_text(meaning(name))}"><b>{_number(value)}</b>'
                f"<span>{_text(name.replace('_', ' '))}</span></div>"
            )
    return f'<div class="headline">{"".join(tiles)}</div>'


def _facts(summary: ListSyncSummary, started: datetime, finished: datetime) -> str:
    took = (finished - started).total_seconds()
    lease = "no wait"
    if summary.lease_wait_seconds:
        lease = f"waited {summary.lease_wait_seconds:g} s" + (
            f" for {summary.lease_waited_for}" if summary.lease_waited_for else ""
        )
    if summary.lease_held_by:
        lease = f"held by {summary.lease_held_by} while this dry run read"
    rows: list[tuple[str, Any]] = [
        ("List", summary.table_id),
        ("Shard", summary.shard),
        ("Mode", summary.mode + (" (dry run)" if summary.dry_run else "")),
        *[
            (name.replace("_", " ").capitalize(), getattr(summary, name))
            for name in ("delete_scope", "key_column", "delete_missing")
            if name in type(summary).model_fields
        ],
        ("Started", f"{started:%Y-%m-%d %H:%M:%S %Z}".strip()),
        ("Took", f"{took:.1f} s"),
        ("Lease", lease),
        ("Plan file", summary.plan_path),
        ("Rejects file", summary.rejects_path),
        ("State", summary.state),
        ("Normalisation", summary.normalization_version),
    ]
    body = "".join(
        f'<tr><th>{_text(label)}</th><td class="v">{_value(value)}</td></tr>'
        for label, value in rows
        if value is not None
    )
    return f'<h2>The run</h2><table class="facts">{body}</table>'


def _counts(summary: ListSyncSummary) -> str:
    """Every count of the summary's type, each with its meaning: those that counted something
    first, those at zero folded away below them."""
    rows: dict[bool, list[str]] = {True: [], False: []}
    for name in count_names(type(summary)):
        value = getattr(summary, name)
        rows[bool(value)].append(
            f'<tr><td><code>{_text(name)}</code></td><td class="n">{_number(value)}</td>'
            f'<td class="meaning">{_text(meaning(name))}</td></tr>'
        )
    head = "<thead><tr><th>Count</th><th>Value</th><th>What it counts</th></tr></thead>"
    parts = ["<h2>Counts</h2>"]
    if rows[True]:
        parts.append(f"<table>{head}<tbody>{''.join(rows[True])}</tbody></table>")
    if rows[False]:
        parts.append(
            f"<details><summary>{len(rows[False])} counts at zero</summary>"
            f'<table class="zero">{head}<tbody>{"".join(rows[False])}</tbody></table></details>'
        )
    by_kind = [
        f"<div>{_meaning_heading(name)}{_count_table(['Kind', 'Count'], getattr(summary, name))}</div>"
        for name in ("planned", "requests")
        if getattr(summary, name)
    ]
    parts.append(f'<div class="side">{"".join(by_kind)}</div>')
    return "".join(parts)


def _meaning_heading(name: str) -> str:
    """A heading of what the summary's ``name`` holds, as its description says."""
    return f"<h3>{_text(meaning(name).rstrip('.'))}</h3>"


def _count_table(header: list[str], counts: Mapping[str, int]) -> str:
    head = "".join(f"<th>{_text(column)}</th>" for column in header)
    body = "".join(
        f'<tr><td class="v">{_text(key)}</td><td class="n">{_number(value)}</td></tr>'
        for key, value in counts.items()
    )
    return f'<table class="compact"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _section(title: str, parts: list[str], nothing: str) -> str:
    """A section of the page: its heading, then ``parts``, or the note ``nothing`` when none."""
    body = "".join(parts) if parts else f'<p class="note">{_text(nothing)}</p>'
    return f"<h2>{_text(title)}</h2>{body}"


def _rejects(summary: ListSyncSummary) -> str:
    parts = []
    if summary.rejected:
        where = (
            f" Every row and its reasons: <code>{_text(summary.rejects_path)}</code>."
            if summary.rejects_path
            else ""
        )
        parts.append(
            f'<p class="note">{_number(summary.rejected)} rows rejected, by kind of reason (a row '
            f"rejected for several counts under each).{where}</p>"
        )
        parts.append(_count_table(["Reason", "Rows"], summary.reject_reasons))
    return _section("Rejected rows", parts, "No row of the extract was rejected.")


def _failures(summary: ListSyncSummary, outcomes: str | os.PathLike[str] | OpenableFile | None) -> str:
    parts = []
    if summary.failure_reasons:
        parts.append(_meaning_heading("failure_reasons"))
        parts.append(_count_table(["Reason", "Count"], summary.failure_reasons))
    for name in ("drift_reasons", "unconfirmed_reasons"):
        reasons = getattr(summary, name)
        if reasons:
            items = "".join(f'<li class="v">{_text(reason)}</li>' for reason in reasons)
            parts.append(f"{_meaning_heading(name)}<ul>{items}</ul>")
    if outcomes is not None:
        records, more = _first_records(outcomes, SAMPLE_SIZE)
        parts.append(f"<h3>Failed records: <code>{_text(outcomes)}</code></h3>")
        parts.append(_records_table(records))
        if more:
            parts.append(f'<p class="note">… and {_number(more)} more in the file.</p>')
    trouble = summary.failed or summary.drift or summary.unconfirmed
    return _section(
        "What failed",
        parts,
        "The summary keeps no reason for them."
        if trouble
        else "Nothing failed, drifted or stayed unconfirmed.",
    )


def _first_records(
    path: str | os.PathLike[str] | OpenableFile, size: int
) -> tuple[list[Mapping[str, Any]], int]:
    """The first ``size`` objects of the JSON-lines file at ``path``, and how many lines follow
    them; the file is read a line at a time."""
    records: list[Mapping[str, Any]] = []
    more = 0
    local = isinstance(path, str | os.PathLike)
    with open(path, encoding="utf-8") if local else path.open("r") as handle:  # type: ignore[arg-type,union-attr]
        for line in handle:
            if not line.strip():
                continue
            if len(records) < size:
                record = json.loads(line)
                records.append(record if isinstance(record, Mapping) else {"value": record})
            else:
                more += 1
    return records, more


def _records_table(records: list[Mapping[str, Any]]) -> str:
    """``records`` as a table, a column for each key met, in the order met."""
    if not records:
        return '<p class="note">None.</p>'
    columns = list(dict.fromkeys(key for record in records for key in record))
    head = "".join(f"<th>{_text(column)}</th>" for column in columns)
    body = "".join(
        "<tr>" + "".join(f'<td class="v">{_value(record.get(column))}</td>' for column in columns) + "</tr>"
        for record in records
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _changes(sample: PlanSample) -> str:
    parts = []
    for action, lines in sample.lines.items():
        total = sample.counts[action]
        shown = (
            f"the first {len(lines)} of {_number(total)}" if total > len(lines) else f"all {_number(total)}"
        )
        parts.append(f"<h3><code>{_text(action)}</code>: {shown}</h3>")
        parts.append(_records_table([{k: v for k, v in line.items() if k != "action"} for line in lines]))
    return _section(
        "The plan: a sample of each action",
        parts,
        "The plan holds nothing: the List already matched the extract.",
    )


def _value(value: Any, *, nested: bool = False) -> str:
    """A value of a plan line or record, escaped: ``{field: {before, after}}`` as the changes
    they are, other mappings a line a key, lists joined; within them (``nested``), a mapping or
    list in its braces on one line; None greyed."""
    if value is None:
        return '<span class="none">none</span>'
    if isinstance(value, Mapping) and value and all(_is_change(change) for change in value.values()):
        return "<br>".join(
            f"{_text(field)}: {_before_after(change['before'], change['after'])}"
            for field, change in value.items()
        )
    if isinstance(value, Mapping):
        items = [f"{_text(key)}: {_value(item, nested=True)}" for key, item in value.items()]
        return "{" + ", ".join(items) + "}" if nested or not items else "<br>".join(items)
    if isinstance(value, list | tuple):
        joined = ", ".join(_value(item, nested=True) for item in value)
        return f"[{joined}]" if nested or not value else joined
    if isinstance(value, bool | int | float | str):
        return _text(value)
    return _text(json.dumps(value, default=str, ensure_ascii=False))


def _is_change(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"before", "after"}


def _before_after(before: Any, after: Any) -> str:
    if before is None:
        return f"<ins>{_value(after)}</ins>"
    if after is None:
        return f'<del>{_value(before)}</del> → <span class="none">none</span>'
    return f"<del>{_value(before)}</del> → <ins>{_value(after)}</ins>"
