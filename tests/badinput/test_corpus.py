"""A corpus of bad inputs for the three jobs, each with the outcome it must reach.

Every case of ``cases.py`` builds one small input (a file, a query, arguments, a misbehaving
server), runs one job (``sync-people``, ``upsert-rows``, ``ingest``) through one entry point (the
CLI in-process, the CLI in a subprocess, an operator's ``execute``, or a DAG run) and checks the
outcome with :func:`harness.verify`:

- ``ok``: the run completes (exit 0, or the task returns its summary) and rejects nothing; the
  case may check what reached the List or the events;
- ``reject``: the run completes, counts the row as rejected, its summary names the rejects file
  written to ``--rejects-path`` (``rejects_path=``), and that file holds the row's number with a
  reason naming the column (the case's fragments);
- ``error``: through the CLI, the exit status is 2 for bad arguments and 1 for a failed run, and
  standard error holds only ``listsync <command>: ...`` lines (argparse's usage synopsis aside),
  none longer than 1,000 characters, one of which holds the case's fragments: what is wrong, the
  input or argument, what to do. Through an operator, the task fails with an exception that is
  not an internal one (``KeyError``, ``TypeError``, ``RecursionError``, ``UnicodeError``...) and
  whose message holds the fragments. A CLI exit 2 also means that no request reached the service.

Whatever the outcome, no traceback and no secret is printed: not the API key (the fake servers
echo it back in their errors), not a database password; for the CLI the log records count as
printed, since a command line without logging set up writes warnings to standard error.

The expected outcome is what the README, the docstrings and the principle say ("every bad input
ends in a clear error or a counted reject with a reason; nothing changes silently; no traceback
reaches a user; secrets never appear"), not what the code does today. A case the code fails is
a strict ``xfail`` whose reason says what the code does now, so the suite stays green and the
mark has to go when the code is fixed. Where the project has not decided, the corpus decides:

- a control character other than tab, CR and LF in a value (NUL, ESC, BEL, vertical tab) is
  rejected, naming the column; format characters (RTL marks, zero-width joiners), combining
  marks and emoji are text like any other and pass unchanged;
- a CSV row with fewer or more fields than the header is rejected, naming the row (a reason
  about its fields), and the other rows go on;
- duplicate header names (in a file, or the columns of a query) are an error naming the column;
  a blank header name over a column the mapping does not use is harmless;
- a file that is not in the encoding is an error naming the file and ``--encoding`` (the
  operators: ``encoding=``); a UTF-8 or UTF-16 byte-order mark is followed;
- an empty CSV file (not even a header) is an error naming the file; a header without rows, an
  empty JSON-lines file and a query without rows are extracts of no rows (and then deletes are
  refused, as the README says);
- header names match the mapping exactly (the code's choice): another case or spacing is an
  error listing the extract's columns;
- an error about the extract names the file; a file of the wrong kind (a CSV named
  ``.parquet``, a Parquet named ``.csv``) says what the file is, not only that it could not be
  decoded; a gzip file is read as the file it holds, whatever its name;
- arguments that can be checked before anything is read are bad arguments (exit 2) and name
  the option: unknown mapping targets, unwritable ``--rejects-path``/``--plan-path``, a table
  id that no path can carry, an unparsable ``--sql-url`` or ``--base-url``, a bad
  ``--delimiter`` or ``--default-region``;
- an answer that shows the base URL names no API (an HTML page, a redirect, no TLS where
  ``https://`` was asked, nothing listening) tells to check ``--base-url`` (operators: the
  ``listsync_default`` connection); a failed query says the ``--sql`` query failed;
- a JSON value no JSON text can hold (``1e400`` parses to infinity) is rejected like
  ``Infinity``; JSON nested too deep for the code to walk is rejected, naming the column;
- ``--timeout`` bounds each request of the CLI, as the connection's ``timeout`` does for the
  operators.

Adding a case is one line in ``cases.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..support import LiveEmulator
from .cases import CASES
from .conftest import reset_service
from .harness import (
    CLASSES,
    FAKE_KINDS,
    Case,
    base_url,
    run_cli,
    run_in_dag,
    run_operator,
    run_subprocess,
    verify,
)


def _params(entry: str) -> list[Any]:
    return [case.param() for case in CASES if case.entry == entry]


@pytest.mark.parametrize("case", _params("cli"))
def test_cli(
    case: Case,
    tmp_path: Path,
    badinput_service: LiveEmulator,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    reset_service(badinput_service, people=case.seed_people)
    extract = case.build(tmp_path)
    with base_url(case, badinput_service.url) as url:
        result = run_cli(case, extract, url, tmp_path, capsys, caplog)
    result.service = badinput_service
    verify(result)


@pytest.mark.parametrize("case", _params("subprocess"))
def test_subprocess(case: Case, tmp_path: Path, badinput_service: LiveEmulator) -> None:
    reset_service(badinput_service, people=case.seed_people)
    extract = case.build(tmp_path)
    with base_url(case, badinput_service.url) as url:
        result = run_subprocess(case, extract, url, tmp_path)
    result.service = badinput_service
    verify(result)


@pytest.mark.parametrize("case", _params("operator"))
def test_operator(
    case: Case, tmp_path: Path, badinput_service: LiveEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    reset_service(badinput_service, people=case.seed_people)
    extract = case.build(tmp_path)
    with base_url(case, badinput_service.url) as url:
        result = run_operator(case, extract, url, tmp_path, monkeypatch)
    result.service = badinput_service
    verify(result)


@pytest.mark.parametrize("case", _params("dag"))
def test_dag(
    case: Case,
    tmp_path: Path,
    badinput_service: LiveEmulator,
    monkeypatch: pytest.MonkeyPatch,
    run_dag: Callable[..., Any],
) -> None:
    reset_service(badinput_service, people=case.seed_people)
    extract = case.build(tmp_path)
    with base_url(case, badinput_service.url) as url:
        result = run_in_dag(case, extract, url, tmp_path, monkeypatch, run_dag)
    result.service = badinput_service
    verify(result)


def test_the_corpus_covers_every_class_job_and_entry_point() -> None:
    ids = [case.id for case in CASES]
    assert len(CASES) >= 120
    assert len(set(ids)) == len(ids), [name for name, n in Counter(ids).items() if n > 1]
    for case in CASES:
        assert case.cls in CLASSES, case.id
        assert case.outcome in ("ok", "reject", "error"), case.id
        assert case.outcome == "ok" or case.fragments, f"{case.id}: a reject or an error needs a fragment"
        servers = ("emulator", "unreachable", "tls", *FAKE_KINDS)
        assert case.server in servers or case.server.startswith("url:"), case.id
    by_class_and_job = Counter((case.cls, case.job) for case in CASES)
    for cls in CLASSES:
        jobs = [job for job in ("people", "rows", "ingest") if by_class_and_job[(cls, job)]]
        assert len(jobs) >= 2, f"class {cls} covers only {jobs}"
    entries = Counter(case.entry for case in CASES)
    assert entries["operator"] + entries["dag"] >= 15
    assert all(entries[entry] for entry in ("cli", "subprocess", "operator", "dag"))
