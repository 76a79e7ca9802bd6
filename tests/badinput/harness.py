"""The machinery of the bad-input corpus: what a case is, input builders, fake servers, runners, checks.

The table itself is in ``cases.py``; ``test_corpus.py`` runs it. Nothing here knows about a
particular case: a case says what input to build, how to run a job on it and what must come out,
and :func:`verify` holds the rules every outcome follows (see ``test_corpus.py``).
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import pytest

from ..support import read_jsonl

# --- the case ------------------------------------------------------------------------------

API_KEY = "sk_badinput_SECRET_0123456789"
"""The key of every run; the emulator knows it, the fake servers echo it back."""
TABLE = "tbl_accounts"
USER = "usr_demo"
ACCOUNTS = ("acme.com", "beta.io")
"""Account rows the List holds before every case (people are added to them)."""
SIGNAL_TYPES = {"page_visit": "Event", "seats_used": "Metric", "deal_stage": "State"}
CLIENT_TIMEOUT = 0.3
"""Seconds per request where a case can set it (operators, ``--timeout``): silent servers stay short."""
SUBPROCESS_LIMIT = 15.0
"""Hard limit of a subprocess case: it is killed, and fails, after this many seconds."""

Job = Literal["people", "rows", "ingest"]
Entry = Literal["cli", "subprocess", "operator", "dag"]
Outcome = Literal["ok", "reject", "error"]
CLASSES = ("file", "header", "value", "key", "source", "argument", "server")
COMMANDS = {"people": "sync-people", "rows": "upsert-rows", "ingest": "ingest"}


@dataclass(frozen=True)
class Extract:
    """Where a job reads its rows: a file (``source``) or a query (``sql`` on ``url``)."""

    source: str | None = None
    sql: str | None = None
    url: str | None = None


Builder = Callable[[Path], Extract]


@dataclass
class Result:
    """What a run gave: the exit status (CLI) or the exception (operators), and what it printed."""

    case: Case
    tmp: Path
    status: int | None = None
    stdout: str = ""
    stderr: str = ""
    logs: str = ""
    summary: dict[str, Any] | None = None
    exc: BaseException | None = None
    escaped: str | None = None
    service: Any = None

    @property
    def rejects(self) -> list[dict[str, Any]]:
        path = self.tmp / "rejects.jsonl"
        if not path.exists():
            return []
        return read_jsonl(path)


@dataclass(frozen=True)
class Case:
    """One bad input and the outcome it must reach (see ``cases.py`` for the table).

    :param args: CLI options appended to the job's defaults (a later option wins); ``{tmp}``
        stands for the case's folder.
    :param mapping: CLI mapping options replacing the job's default ones (``--map``...).
    :param kwargs: operator keyword arguments replacing the defaults (``None`` removes one).
    :param fragments: for ``reject``, text one reason of the rejected row holds; for ``error``,
        text the one-line message holds (both compared without case).
    :param row: for ``reject``, the row number the rejects file must name.
    :param status: for ``error`` through the CLI, the exit status.
    :param server: ``emulator``, a fake server kind (:data:`FAKE_KINDS`), ``tls``,
        ``unreachable``, or ``url:<base URL>``.
    :param expect: summary values an ``ok`` or ``reject`` run must report.
    :param check: further checks of a finished run (what the List or the events hold).
    :param secrets: strings besides the API key that must never be printed.
    :param xfail: what the code does now, when that is wrong (the case is a strict xfail).
    """

    id: str
    cls: str
    job: Job
    entry: Entry
    build: Builder
    outcome: Outcome
    fragments: tuple[str, ...] = ()
    row: int = 1
    status: int = 1
    args: tuple[str, ...] = ()
    mapping: tuple[str, ...] | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    server: str = "emulator"
    seed_people: bool = False
    expect: Mapping[str, Any] = field(default_factory=dict)
    check: Callable[[Result], None] | None = None
    secrets: tuple[str, ...] = ()
    xfail: str | None = None

    def param(self) -> Any:
        marks = [pytest.mark.xfail(strict=True, reason=self.xfail)] if self.xfail else []
        return pytest.param(self, id=self.id, marks=marks)


# --- input builders ------------------------------------------------------------------------


def _write(tmp: Path, name: str, data: bytes) -> Extract:
    path = tmp / name
    path.write_bytes(data)
    return Extract(source=str(path))


def text(content: str, name: str = "extract.csv", encoding: str = "utf-8") -> Builder:
    """A file holding ``content`` in ``encoding`` (lone surrogates written as they are)."""
    return lambda tmp: _write(tmp, name, content.encode(encoding, "surrogatepass"))


def raw(data: bytes | Callable[[], bytes], name: str = "extract.csv") -> Builder:
    """A file holding ``data`` (or what calling it gives, for inputs built lazily)."""
    return lambda tmp: _write(tmp, name, data() if callable(data) else data)


def gzipped(content: str, name: str = "extract.csv.gz") -> Builder:
    return lambda tmp: _write(tmp, name, gzip.compress(content.encode()))


def jsonl(*records: Mapping[str, Any] | str, name: str = "extract.jsonl") -> Builder:
    """JSON lines: each record as ``json.dumps`` writes it, or a line given as text."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    return text("".join(line + "\n" for line in lines), name)


def parquet(
    columns: Mapping[str, Sequence[Any]] | Callable[[], Any], name: str = "extract.parquet"
) -> Builder:
    """A Parquet file of ``columns`` (or of the Arrow table a callable gives)."""

    def build(tmp: Path) -> Extract:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = columns() if callable(columns) else pa.table(dict(columns))
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        return _write(tmp, name, buffer.getvalue())

    return build


def parquet_bytes(columns: Mapping[str, Sequence[Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table(dict(columns)), buffer)
    return buffer.getvalue()


def sqlite(setup: str, query: str) -> Builder:
    """A SQLite database made by the statements ``setup``; the extract is ``query`` on it."""

    def build(tmp: Path) -> Extract:
        import sqlite3

        path = tmp / "warehouse.db"
        with contextlib.closing(sqlite3.connect(path)) as connection:
            connection.executescript(setup)
            connection.commit()
        return Extract(sql=query, url=f"sqlite:///{path}")

    return build


def sql_on(url: str, query: str = "select 1 as domain") -> Builder:
    """A query on a database URL given as is (unreachable, unparsable...); ``{port}`` stands
    for a local port nothing listens on."""
    return lambda tmp: Extract(sql=query, url=url.replace("{port}", str(closed_port())))


def table(header: Sequence[str], *rows: Sequence[Any], name: str = "extract.csv") -> Builder:
    """A CSV file written by the ``csv`` module (quoting done right for JSON in cells)."""

    def build(tmp: Path) -> Extract:
        import csv

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
        return _write(tmp, name, buffer.getvalue().encode("utf-8"))

    return build


def path(source: str) -> Builder:
    """A source named as is (a missing file, a URI)."""
    return lambda tmp: Extract(source=source)


# --- fake servers --------------------------------------------------------------------------

_HTML = b"<html><head><title>Welcome</title></head><body><h1>Welcome to nginx!</h1></body></html>"


def _answer(kind: str, authorization: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of a fake server of ``kind`` (one answer for every request)."""
    if kind == "html":
        return 200, {"content-type": "text/html"}, _HTML
    if kind == "badjson":
        return 200, {}, b'{"success": true, "data": ['
    if kind == "empty":
        return 200, {}, b""
    if kind == "shape":
        return 200, {}, b'{"success": true, "data": {"people": "none", "rows": "none", "events": "none"}}'
    if kind == "scalars":
        return 200, {}, b"[1, 2, 3]"
    if kind == "huge":
        # 8 MB of an error page: the message must quote a line of it, not all of it.
        return (
            502,
            {"content-type": "text/html"},
            b"<html><body>" + b"Bad gateway. " * 640_000 + b"</body></html>",
        )
    if kind == "echo401":
        return 401, {}, json.dumps({"success": False, "error": f"Invalid API key: {authorization}"}).encode()
    if kind == "echo503":
        return (
            503,
            {},
            json.dumps({"success": False, "error": f"Overloaded; you sent {authorization}"}).encode(),
        )
    if kind == "redirect":
        return 302, {"location": "/login"}, b""
    if kind == "ratelimited":
        return 429, {"retry-after": "3600"}, b'{"success": false, "error": "Rate limit exceeded"}'
    raise ValueError(f"unknown fake server kind {kind!r}")


FAKE_KINDS = (
    *("html", "badjson", "empty", "shape", "scalars", "huge"),
    *("echo401", "echo503", "redirect", "ratelimited", "silent", "slow"),
)


@contextlib.contextmanager
def fake_server(kind: str) -> Iterator[str]:
    """A tiny HTTP server in a thread answering every request the ``kind`` way; yields its URL.

    ``silent`` reads the request and never answers (until the server stops); ``slow`` answers
    after a second, longer than :data:`CLIENT_TIMEOUT`.
    """
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            if kind == "silent":
                stop.wait(30)
                self.close_connection = True
                return
            if kind == "slow" and stop.wait(1.0):
                return
            status, headers, body = _answer(
                "html" if kind == "slow" else kind, self.headers.get("authorization", "")
            )
            self.send_response(status)
            for name, value in {"content-type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_DELETE = _handle  # noqa: N815 (http.server's names)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_port() -> int:
    """A local port nothing listens on (bound, then closed), for a connection refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def base_url(case: Case, emulator_url: str) -> Iterator[str]:
    """The service a case talks to (see :class:`Case` ``server``)."""
    if case.server == "emulator":
        yield emulator_url
    elif case.server == "unreachable":
        yield f"http://127.0.0.1:{closed_port()}"
    elif case.server == "tls":
        with fake_server("html") as url:
            yield url.replace("http://", "https://")
    elif case.server.startswith("url:"):
        yield case.server.removeprefix("url:")
    else:
        with fake_server(case.server) as url:
            yield url


# --- running a case ------------------------------------------------------------------------

DEFAULT_MAPPING: dict[str, tuple[str, ...]] = {
    "people": ("--map", "domain=account_domain", "--map", "email=email", "--map", "first=first_name"),
    "rows": ("--key-column", "domain", "--map", "domain=domain", "--map", "name=name"),
    "ingest": ("--signal", "page_visit", "--identity-type", "account", "--identity-id-column", "id"),
}
DEFAULT_KWARGS: dict[str, dict[str, Any]] = {
    "people": {
        "table_id": TABLE,
        "column_map": {"domain": "account_domain", "email": "email", "first": "first_name"},
    },
    "rows": {"table_id": TABLE, "key_column": "domain", "column_map": {"domain": "domain", "name": "name"}},
    "ingest": {
        "signal": "page_visit",
        "identity_type": "account",
        "identity_id_column": "id",
        "signal_types": SIGNAL_TYPES,
    },
}


def _fill(value: Any, tmp: Path) -> Any:
    return value.replace("{tmp}", str(tmp)) if isinstance(value, str) else value


def cli_argv(case: Case, extract: Extract, url: str, tmp: Path) -> list[str]:
    """The command line of a case: the job's defaults, the extract, then the case's own options."""
    argv = [COMMANDS[case.job], "--base-url", url]
    if case.job == "ingest":
        for slug, kind in SIGNAL_TYPES.items():
            argv += ["--signal-type", f"{slug}={kind}"]
    else:
        argv += ["--table-id", TABLE, "--user-id", USER]
    if extract.source is not None:
        argv += ["--source", extract.source]
    if extract.sql is not None:
        argv += ["--sql", extract.sql, "--sql-url", extract.url or ""]
    argv += case.mapping if case.mapping is not None else DEFAULT_MAPPING[case.job]
    argv += ["--rejects-path", str(tmp / "rejects.jsonl")]
    return argv + [_fill(arg, tmp) for arg in case.args]


def _release(error: BaseException | None) -> None:
    """Drop the tracebacks of ``error`` and its causes, and collect: the frames they hold (an
    extract's open file, a half-read generator) go now, and any ``ResourceWarning`` about them
    is raised within the case rather than in whichever test the garbage collector runs next."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        error.__traceback__ = None
        error = error.__cause__ or error.__context__
    gc.collect(1)  # what the case made is young: a full collection costs more than the case


def _captured_call(call: Callable[[], int]) -> tuple[int | None, str | None]:
    """Run ``call`` as a user would: warnings shown, not raised (pytest makes them errors)."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            status = call()
        except SystemExit as exit_:
            return (exit_.code if isinstance(exit_.code, int) else 2), None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # anything escaping main() would be a traceback for the user
            _release(exc)
            return None, f"{type(exc).__name__}: {exc}"[:2000]
        if status != 0:  # a failed run may have left a half-read extract behind
            gc.collect(1)
        return status, None


def run_cli(case: Case, extract: Extract, url: str, tmp: Path, capsys: Any, caplog: Any) -> Result:
    """``listsync.cli.main(argv)`` in-process; stdout and stderr from ``capsys``, log records from
    ``caplog`` (a CLI without logging set up prints warnings on standard error)."""
    from listsync.cli import main

    argv = cli_argv(case, extract, url, tmp)
    capsys.readouterr()
    caplog.clear()
    status, escaped = _captured_call(lambda: main(argv))
    captured = capsys.readouterr()
    result = Result(case, tmp, status, captured.out, captured.err, caplog.text, escaped=escaped)
    with contextlib.suppress(ValueError):
        result.summary = json.loads(captured.out) if captured.out.strip().startswith("{") else None
    return result


# A command line whose retries do not wait: the run is the same, only shorter.
_BOOT = """
import functools, sys
import listsync.client.client as client
from listsync.client.retry import RetryPolicy
client.RetryPolicy = functools.partial(RetryPolicy, backoff_initial=0.01, backoff_max=0.02)
from listsync.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_subprocess(case: Case, extract: Extract, url: str, tmp: Path) -> Result:
    """The CLI in a child process, killed after :data:`SUBPROCESS_LIMIT` seconds (status None)."""
    argv = cli_argv(case, extract, url, tmp)
    env = {**os.environ, "LISTSYNC_API_KEY": API_KEY}
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-c", _BOOT, *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=SUBPROCESS_LIMIT,
            check=False,
        )
    except subprocess.TimeoutExpired as timeout:
        out = timeout.stdout.decode() if isinstance(timeout.stdout, bytes) else timeout.stdout or ""
        err = timeout.stderr.decode() if isinstance(timeout.stderr, bytes) else timeout.stderr or ""
        return Result(case, tmp, None, out, err, escaped=f"killed after {time.monotonic() - started:.1f} s")
    result = Result(case, tmp, done.returncode, done.stdout, done.stderr)
    with contextlib.suppress(ValueError):
        result.summary = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    return result


def operator_for(case: Case, extract: Extract, tmp: Path, monkeypatch: Any, **extra: Any) -> Any:
    """The case's operator, built as a DAG file would build it (``extra``: more ``BaseOperator``
    arguments)."""
    from listsync.operators.people import SyncTargetablePeopleOperator
    from listsync.operators.rows import UpsertRowsOperator
    from listsync.operators.signals import IngestSignalsOperator

    kwargs: dict[str, Any] = {**DEFAULT_KWARGS[case.job], "rejects_path": str(tmp / "rejects.jsonl")}
    if extract.source is not None:
        kwargs["source"] = extract.source
    if extract.sql is not None:
        monkeypatch.setenv("AIRFLOW_CONN_BADINPUT_SQL", extract.url or "")
        kwargs.update(sql=extract.sql, sql_conn_id="badinput_sql")
    kwargs.update({name: _fill(value, tmp) for name, value in case.kwargs.items()})
    kwargs = {name: value for name, value in kwargs.items() if value is not None}
    operator_class = {
        "people": SyncTargetablePeopleOperator,
        "rows": UpsertRowsOperator,
        "ingest": IngestSignalsOperator,
    }[case.job]
    return operator_class(task_id=f"badinput_{case.job}", **kwargs, **extra)


class DictStore:
    """Stands in for Airflow's task state store (the ingestion checkpoint)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


def connect(monkeypatch: Any, url: str) -> None:
    """Point ``listsync_default`` at ``url`` with the corpus key and a short request timeout."""
    connection = {
        "conn_type": "listsync",
        "host": url,
        "password": API_KEY,
        "extra": {"user_id": USER, "timeout": CLIENT_TIMEOUT},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LISTSYNC_DEFAULT", json.dumps(connection))


def run_operator(case: Case, extract: Extract, url: str, tmp: Path, monkeypatch: Any) -> Result:
    """``operator.execute(context)`` with a minimal context; a failure is the exception raised
    (when the DAG is parsed or when the task runs)."""
    connect(monkeypatch, url)
    result = Result(case, tmp)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            operator = operator_for(case, extract, tmp, monkeypatch)
            result.summary = operator.execute({"task_state_store": DictStore()})
        except Exception as exc:
            result.exc = exc
        if result.exc is not None:
            _release(result.exc)
    return result


def run_in_dag(case: Case, extract: Extract, url: str, tmp: Path, monkeypatch: Any, run_dag: Any) -> Result:
    """The operator as the one task of a DAG run by ``dag.test()``; a failure is the task's
    exception, as Airflow recorded it."""
    from datetime import datetime, timezone

    from airflow.sdk import DAG

    connect(monkeypatch, url)
    failures: list[BaseException] = []
    with DAG(
        f"badinput_{case.id.replace('-', '_')}",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    ) as dag:
        operator = operator_for(
            case,
            extract,
            tmp,
            monkeypatch,
            on_failure_callback=lambda context: failures.append(context["exception"]),
        )
    run = run_dag(dag)
    result = Result(case, tmp)
    if run.state != "success":
        result.exc = failures[0] if failures else RuntimeError(f"the DAG run ended {run.state}")
    else:
        result.summary = run.get_task_instance(operator.task_id).xcom_pull(task_ids=operator.task_id)
    return result


# --- the rules every outcome follows -------------------------------------------------------

# Exceptions that say where the code broke, not what is wrong with the input.
INTERNAL_ERRORS = (
    KeyError,
    IndexError,
    TypeError,
    AttributeError,
    NameError,
    RecursionError,
    UnicodeError,
    AssertionError,
    ZeroDivisionError,
)
MAX_LINE = 1000
"""The longest message line accepted: a message quotes a value, it does not print a 5 MB cell."""


def _has_all(text: str, fragments: Sequence[str], tmp: Path) -> bool:
    # The case's folder is named after the test (and so the case): it must not match a fragment.
    text = text.replace(str(tmp), "<tmp>").lower()
    return all(fragment.lower() in text for fragment in fragments)


def message_lines(result: Result) -> list[str]:
    """The lines of standard error, argparse's usage synopsis left out (the error line after it stays)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    kept, in_usage = [], False
    for line in lines:
        if line.startswith("usage: "):
            in_usage = True
            continue
        if in_usage and line.startswith(" "):
            continue
        in_usage = False
        kept.append(line)
    return kept


def _rejected(result: Result) -> int:
    summary = result.summary or {}
    return int(summary.get("rows_rejected" if result.case.job == "ingest" else "rejected", 0))


def verify(result: Result) -> None:
    """Check ``result`` against its case's outcome; the assertion says what happened instead."""
    case = result.case
    printed = result.stdout + result.stderr
    cli = case.entry in ("cli", "subprocess")
    stderr = result.stderr[-1500:]
    shown = f"status={result.status} escaped={result.escaped} exc={result.exc!r}\nstderr={stderr!r}"
    for secret in (API_KEY, *case.secrets):
        assert secret not in printed, f"a secret was printed: {shown}"
        # Log records reach standard error in the CLI (and a task's log in Airflow).
        assert not cli or secret not in result.logs, f"a secret reached a log line: {result.logs[-1500:]!r}"
        assert result.exc is None or secret not in str(result.exc), f"a secret is in the error: {shown}"
        assert secret not in json.dumps(result.summary, default=str), "a secret is in the summary"
    assert result.escaped is None, f"nothing clean came out: {shown}"
    assert "Traceback" not in printed, f"a traceback reached the user: {shown}"
    assert not cli or "Traceback" not in result.logs, (
        f"a traceback reached a log line: {result.logs[-1500:]!r}"
    )

    if case.outcome == "error":
        if cli:
            assert result.status == case.status, f"expected exit status {case.status}: {shown}"
            lines = message_lines(result)
            command = f"listsync {COMMANDS[case.job]}: "
            assert lines, f"no message on standard error: {shown}"
            assert all(line.startswith(command) for line in lines), (
                f"stderr is not one-line messages: {shown}"
            )
            assert all(len(line) <= MAX_LINE for line in lines), (
                f"a message line is {max(map(len, lines))} long"
            )
            assert any(_has_all(line, case.fragments, result.tmp) for line in lines), (
                f"no message line holds {case.fragments}: {shown}"
            )
            if case.status == 2 and case.server == "emulator" and result.service is not None:
                # Exit 2 promises that nothing was read from or sent to the service.
                sent = sum(result.service.stats.requests.values())
                assert sent == 0, f"bad arguments, yet {sent} request(s) reached the service"
        else:
            assert result.exc is not None, f"the task did not fail: summary={result.summary}"
            assert not isinstance(result.exc, INTERNAL_ERRORS), f"an internal error, not a clear one: {shown}"
            assert _has_all(str(result.exc), case.fragments, result.tmp), (
                f"the error lacks {case.fragments}: {shown}"
            )
        if case.check is not None:
            case.check(result)
        return

    if cli:
        assert result.status == 0, f"expected a completed run: {shown}"
    else:
        assert result.exc is None, f"expected a completed task: {shown}"
    assert result.summary is not None, f"no summary: {shown}"
    for name, value in case.expect.items():
        assert result.summary.get(name) == value, (
            f"summary {name}={result.summary.get(name)!r}, expected {value!r}"
        )
    if case.outcome == "reject":
        assert _rejected(result) >= 1, f"no row counted as rejected: {json.dumps(result.summary)[:1500]}"
        # The summary says where the rejected rows and their reasons are.
        assert result.summary.get("rejects_path") == str(result.tmp / "rejects.jsonl"), result.summary.get(
            "rejects_path"
        )
        records = result.rejects
        matching = [
            r
            for r in records
            if r["row"] == case.row and _has_all(" ".join(r["reasons"]), case.fragments, result.tmp)
        ]
        assert matching, f"no reject of row {case.row} with {case.fragments}: {records!r:.1500}"
    else:
        assert _rejected(result) == 0, f"rows were rejected: {result.rejects!r:.1500}"
    if case.check is not None:
        case.check(result)
