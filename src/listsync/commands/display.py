"""What a person sees of a run of the command line: its progress on standard error while it
works, and its summary at the end.

:func:`watching` shows the run's log records on standard error for as long as it works: the
progress lines (:func:`listsync.progress.is_progress`: a long loop's line every 10 s, the share of
a plan applied, the plan made) as a live display on a terminal (the latest line, a bar of the
plan applied, the time spent), else as lines as they come; warnings and errors always; every
other record of listsync with ``-v`` (``-vv``: the debug records too). :func:`print_result`
prints a job's summary: a table on a terminal, one JSON document otherwise, as ``--output``
asks. Secrets are masked in both (:func:`~listsync.commands.common.masked_secrets`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from listsync.commands.common import EXIT_FAILED, EXIT_OK, mask, report, without_credentials
from listsync.progress import is_progress
from listsync.sync.summary import is_count

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

__all__ = [
    "OUTPUTS",
    "add_output_argument",
    "output_of",
    "print_result",
    "print_rows",
    "progress_shown",
    "run_and_report",
    "watching",
]

#: What ``--output`` takes: a table for a person, JSON for a program.
OUTPUTS = ("table", "json")
#: The width of a table printed where no terminal says how wide it may be.
WIDE = 400


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--output`` to a command that prints a result."""
    parser.add_argument(
        "--output",
        choices=OUTPUTS,
        help="how the result is printed on standard output (default: a table on a terminal, else json)",
    )


def output_of(args: argparse.Namespace) -> str:
    """``--output``, else a table when standard output is a terminal and JSON when it is not."""
    chosen: str | None = getattr(args, "output", None)
    if chosen is not None:
        return chosen
    return "table" if sys.stdout.isatty() else "json"


class _Reported(logging.Formatter):
    """Log records as the commands' own messages: ``listsync <command>: <message>``, secrets masked."""

    def __init__(self, command: str) -> None:
        super().__init__(f"listsync {command}: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return mask(super().format(record))


class _ToStderr(logging.Handler):
    """The run's records on standard error: progress lines on the live display while there is
    one (:func:`progress_shown`), the others as lines (above the display)."""

    def __init__(self, command: str, verbosity: int) -> None:
        super().__init__(logging.DEBUG if verbosity > 1 else logging.INFO)
        self.setFormatter(_Reported(command))
        self.verbose = verbosity > 0
        self.live: Progress | None = None
        self.task: TaskID | None = None

    def emit(self, record: logging.LogRecord) -> None:
        progress = is_progress(record)
        if not (progress or self.verbose or record.levelno >= logging.WARNING):
            return
        try:
            if self.live is None:
                print(self.format(record), file=sys.stderr)
            elif progress and self.task is not None:
                from rich.markup import escape

                # A line that says how much of a plan is applied fills the bar; others pulse it.
                total, done = getattr(record, "total", None), getattr(record, "done", 0)
                description = escape(mask(record.getMessage()))
                self.live.update(
                    self.task, description=description, total=total, completed=done, refresh=True
                )
            else:
                self.live.console.print(self.format(record), markup=False, highlight=False)
        except Exception:
            self.handleError(record)


#: The handler :func:`watching` set up for the command running, if it set one up.
_watched: list[_ToStderr] = []


@contextmanager
def watching(command: str, verbosity: int = 0, *, debug: bool = False) -> Iterator[None]:
    """Within the block, show the run's progress and messages on standard error (see the module
    docstring); with ``debug``, a warning of a failure beside the run with its traceback
    (:func:`~listsync.errors.warn_aside`). Logging set up already (by a program calling the
    command) is left as it is."""
    root = logging.getLogger()
    if root.handlers:
        yield
        return
    handler = _ToStderr(command, verbosity)
    listsync = logging.getLogger("listsync")
    level = listsync.level
    root.addHandler(handler)
    listsync.setLevel(logging.DEBUG if debug else handler.level)
    _watched.append(handler)
    try:
        yield
    finally:
        _watched.remove(handler)
        root.removeHandler(handler)
        listsync.setLevel(level)


@contextmanager
def progress_shown() -> Iterator[None]:
    """Within the block (a job's run), when standard error is a terminal, its progress lines are
    a live display rather than lines; the display is gone once the block ends, before the result
    is printed."""
    handler = _watched[-1] if _watched else None
    if handler is None or not sys.stderr.isatty():
        yield
        return
    with _live_display() as live:
        handler.live, handler.task = live, live.add_task("starting", total=None)
        try:
            yield
        finally:
            handler.live, handler.task = None, None


def _live_display() -> Progress:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    # Transient: once the run ends, the display gives way to its result.
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )


def print_result(summary: Mapping[str, Any], output: str) -> None:
    """Print a job's summary on standard output: one JSON document (``output="json"``), or a
    table of its counts (every count the summary holds, in the order the summary declares them,
    each with its meaning), its other values and its reasons."""
    if output == "json":
        print(mask(json.dumps(summary, indent=2)))
        return
    from rich.table import Table

    from listsync.sync.summary import counts_of, meaning

    held = counts_of(summary)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    # Summaries that are not a List sync's (an ingestion's) show their counts as they come.
    counts = {
        **held,
        **{name: value for name, value in summary.items() if is_count(value) and name not in held},
    }
    for name, value in counts.items():
        table.add_row(name, f"{value:,}", meaning(name), style="dim" if value == 0 else None)
    table.add_section()
    for name, value in summary.items():
        text = _value_text(name, value)
        if name not in counts and text:
            table.add_row(name, "", mask(text))
    _console().print(table)


def print_rows(rows: list[dict[str, Any]], columns: list[str], output: str) -> None:
    """Print ``rows`` (a history's runs, the states of a job) on standard output: one JSON
    document holding them whole (``output="json"``), or a table of their ``columns``."""
    if output == "json":
        print(mask(json.dumps(rows, indent=2, default=str)))
        return
    from rich.table import Table

    table = Table(*columns, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*(mask(_cell(row.get(column))) for column in columns))
    _console().print(table)


def _console() -> Console:
    from rich.console import Console

    # A table asked for into a file or a pipe has no terminal width to fit: lines are not cut.
    return Console(highlight=False, width=None if sys.stdout.isatty() else WIDE)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return f"{value:,}" if is_count(value) else str(value)


def _value_text(name: str, value: Any) -> str:
    if value is None or is_count(value):
        return ""
    if name == "failure_reasons" and isinstance(value, Mapping):
        return "; ".join(f"{count} x {reason}" for reason, count in value.items())
    if isinstance(value, Mapping):
        return ", ".join(f"{key} {count}" for key, count in value.items())
    if isinstance(value, list):
        return "; ".join(map(str, value))
    return str(value)


def run_and_report(
    command: str,
    job: Callable[[], Mapping[str, Any]],
    *,
    base_url: str | None = None,
    hint_on_failure: str | None = None,
    then: Callable[[Any], int | None] | None = None,
    output: str = "json",
) -> int:
    """Run ``job``, print its summary (:func:`print_result`), and return the exit status.

    A job that fails with some items not written prints the summary it would have returned
    before the message; one that did not fail for them (``--no-fail-on-error``) prints the same
    message after its summary: what failed permanently, what a re-run can retry. The messages of
    the errors caught say what to fix and name the request, never the API key (the client keeps
    it out of them); one that says more about the address than about the service (nothing
    answering, a redirect, a body that is not JSON) adds to check ``--base-url``.

    :param base_url: the ``--base-url`` the job talks to, quoted (without credentials) in that hint.
    :param hint_on_failure: a further line printed after the message of a failed run.
    :param then: called with the summary of a run that did not raise; it may print more and
        return an exit status other than :data:`EXIT_OK`.
    :param output: how the summary is printed (:func:`print_result`).
    :return: :data:`EXIT_OK`, or :data:`EXIT_FAILED` when the job raised an error of the
        service, the extract or the settings (or ``then`` said so).
    """
    from listsync.client.errors import ListSyncError, points_elsewhere
    from listsync.sync.steps import SyncFailedError

    try:
        with progress_shown():
            summary = job()
    except (ListSyncError, ValueError) as exc:
        if isinstance(exc, SyncFailedError):
            print_result(exc.summary, output)
        if base_url is not None and points_elsewhere(exc):
            where = without_credentials(base_url)
            report(command, f"{exc}; check --base-url ({where}): it must be the service's API address")
        else:
            report(command, exc)
        if hint_on_failure:
            report(command, hint_on_failure)
        return EXIT_FAILED
    print_result(summary, output)
    if any(summary.get(name) for name in ("failed_permanent", "failed_curable", "drift")):
        # A List sync that failed some items and was told not to fail for them still says so.
        from listsync.sync.steps import failure_advice

        report(command, failure_advice(summary))
    status = then(summary) if then is not None else None
    return EXIT_OK if status is None else status
