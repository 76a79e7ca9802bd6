"""The run's report (listsync.sync.report): written by people and rows runs against the emulator,
its counts those of the summary, every value escaped, nothing loaded from elsewhere, its samples
bounded, and a report that cannot be written a warning that fails nothing."""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from listsync.client import ListSyncClient
from listsync.extract.sources import read_extract
from listsync.sync.people import sync_people
from listsync.sync.report import SAMPLE_SIZE, PlanSample, render_report
from listsync.sync.rows import upsert_rows
from listsync.sync.settings import SyncSettings
from listsync.sync.summary import PeopleSummary, RowsSummary, count_names

from ..support import LiveEmulator
from ..support.tenants import PEOPLE_TABLE, ROWS_TABLE, people_in_list

PEOPLE_MAP = {
    "Company Domain": "account_domain",
    "Email": "email",
    "First": "first_name",
    "Last": "last_name",
}
ROWS_MAP = {"Domain": "domain", "Name": "name"}
SCRIPT = "<script>alert('x')</script>"
CONTACTS = f"""Company Domain,Email,First,Last
acme.com,ann@acme.com,Ann,"{SCRIPT}"
acme.com,bob@acme.com,Bob,Ray
acme.com,not-an-email,Cy,Doe
acme.com,also-bad,Di,Eve
"""


class Page(HTMLParser):
    """A report as a person sees it: its text, its tables (rows of cell texts) under the heading
    before each, and every tag with its attributes."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._heading = ""
        self._in_heading = False
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("h2", "h3"):
            self._heading, self._in_heading = "", True
        elif tag == "table":
            self.tables.append((self._heading, []))
        elif tag == "tr":
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h2", "h3"):
            self._in_heading = False
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_heading:
            self._heading += data
        if self._cell is not None:
            self._cell.append(data)

    def table(self, heading: str) -> list[list[str]]:
        """The rows of the first table under a heading that begins with ``heading``."""
        return next(rows for title, rows in self.tables if title.startswith(heading))

    def counts(self) -> dict[str, int]:
        """The counts of the tables under "Counts": those at zero folded away below the others."""
        tables = [rows for title, rows in self.tables if title == "Counts"]
        return {row[0]: int(row[1].replace(",", "")) for rows in tables for row in rows[1:]}


def page_of(summary: dict[str, Any]) -> Page:
    return Page(Path(summary["report_path"]).read_text(encoding="utf-8"))


def people_sync(client: ListSyncClient, tmp_path: Path, **settings: Any) -> dict[str, Any]:
    contacts = tmp_path / "contacts.csv"
    contacts.write_text(CONTACTS, encoding="utf-8")
    settings = {
        "plan_path": tmp_path / "people.plan.jsonl",
        "rejects_path": tmp_path / "rejects.jsonl",
        **settings,
    }
    return sync_people(
        client, PEOPLE_TABLE, read_extract(contacts), PEOPLE_MAP, settings=SyncSettings(**settings)
    )


def rows_upsert(emulator: LiveEmulator, tmp_path: Path, names: list[str], **settings: Any) -> dict[str, Any]:
    frame = pd.DataFrame(
        [{"Domain": f"{name.lower()}.io", "Name": name} for name in names]
        + [{"Domain": "", "Name": "No key"}],
        dtype=object,
    )
    settings = {"plan_path": tmp_path / "accounts.plan.jsonl", **settings}
    with emulator.client(sleep=lambda seconds: None) as client:
        return upsert_rows(
            client,
            ROWS_TABLE,
            [frame],
            key_column="domain",
            column_map=ROWS_MAP,
            settings=SyncSettings(**settings),
        )


def test_a_people_run_reports_the_summarys_counts_beside_its_plan_file(
    people_client: ListSyncClient, people_emulator: LiveEmulator, tmp_path: Path
) -> None:
    summary = people_sync(people_client, tmp_path)

    assert summary["report_path"] == str(tmp_path / "people.plan.html")
    page = page_of(summary)
    # Every count of the people summary, as the summary has it.
    assert page.counts() == {name: summary[name] for name in count_names(PeopleSummary)}
    added = [person for people in people_in_list(people_emulator).values() for person in people]
    assert page.counts()["added"] == len(added) == 2
    assert page.table("The run")[0] == ["List", PEOPLE_TABLE]
    rejects = page.table("Rejected rows")
    assert [int(row[1]) for row in rejects[1:]] == list(summary["reject_reasons"].values())
    assert sum(summary["reject_reasons"].values()) == summary["rejected"] == 2
    # The plan's adds are shown, each person by the values written.
    adds = page.table("add")
    assert len(adds) - 1 == summary["planned"]["add"]
    assert any("ann@acme.com" in cell for row in adds for cell in row)


def test_every_value_of_the_extract_is_shown_as_text(people_client: ListSyncClient, tmp_path: Path) -> None:
    summary = people_sync(people_client, tmp_path)
    html = Path(summary["report_path"]).read_text(encoding="utf-8")
    page = Page(html)

    # The last name is on the page as written, as text: no script element was made of it.
    assert any(SCRIPT in cell for row in page.table("add") for cell in row)
    assert "script" not in {tag for tag, _ in page.tags}
    assert "<script" not in html


def test_the_report_loads_nothing_from_elsewhere(people_client: ListSyncClient, tmp_path: Path) -> None:
    summary = people_sync(people_client, tmp_path)
    html = Path(summary["report_path"]).read_text(encoding="utf-8")
    page = Page(html)

    assert [tag for tag, attrs in page.tags if {"src", "href"} & set(attrs)] == []
    assert {"link", "img", "script", "iframe", "object"}.isdisjoint(tag for tag, _ in page.tags)
    [style] = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert "url(" not in style and "@import" not in style and "//" not in style


def test_a_rows_run_reports_its_counts_and_a_bounded_sample_of_its_plan(
    rows_emulator: LiveEmulator, tmp_path: Path
) -> None:
    names = [f"Account{number:02}" for number in range(SAMPLE_SIZE + 5)]

    summary = rows_upsert(rows_emulator, tmp_path, names)

    page = page_of(summary)
    assert summary["report_path"] == str(tmp_path / "accounts.plan.html")
    assert page.counts() == {name: summary[name] for name in count_names(RowsSummary)}
    assert page.counts()["added"] == len(rows_emulator.rows(ROWS_TABLE)) == len(names)
    # The first SAMPLE_SIZE adds of the plan, in its order, and how many there are.
    adds = page.table(f"add: the first {SAMPLE_SIZE} of {len(names)}")
    assert [row[0] for row in adds[1:]] == [f"{name.lower()}.io" for name in names[:SAMPLE_SIZE]]
    assert page.table("Rejected rows")[1][1] == "1"


def test_changes_show_their_values_before_and_after(rows_emulator: LiveEmulator, tmp_path: Path) -> None:
    rows_upsert(rows_emulator, tmp_path, ["Acme"])
    frame = pd.DataFrame([{"Domain": "acme.io", "Name": "Acme Inc"}], dtype=object)

    with rows_emulator.client(sleep=lambda seconds: None) as client:
        summary = upsert_rows(
            client,
            ROWS_TABLE,
            [frame],
            key_column="domain",
            column_map=ROWS_MAP,
            settings=SyncSettings(report_path=tmp_path / "renamed.html"),
        )

    # No plan file: the report named by report_path samples the plan itself.
    assert summary["plan_path"] is None and summary["report_path"] == str(tmp_path / "renamed.html")
    page = page_of(summary)
    [header, update] = page.table("update")
    assert summary["updated"] == 1
    assert update[header.index("changes")] == "name: Acme → Acme Inc"
    assert [row["name"] for row in rows_emulator.rows(ROWS_TABLE)] == ["Acme Inc"]


def test_what_failed_is_reported_with_the_summarys_reasons(
    people_client: ListSyncClient, people_emulator: LiveEmulator, tmp_path: Path
) -> None:
    contacts = tmp_path / "contacts.csv"
    contacts.write_text(CONTACTS.replace("acme.com,bob@", "ghost.example,bob@"), encoding="utf-8")

    summary = sync_people(
        people_client,
        PEOPLE_TABLE,
        read_extract(contacts),
        PEOPLE_MAP,
        settings=SyncSettings(
            fail_on_error=False, report_path=tmp_path / "run.html", outcomes_path=tmp_path / "outcomes.jsonl"
        ),
    )

    page = page_of(summary)
    assert summary["failed"] == 1 and len(people_in_list(people_emulator)["acme.com"]) == 1
    assert "1 failed" in page.text
    reasons = page.table("The most frequent reasons of failed")
    assert {row[0]: int(row[1]) for row in reasons[1:]} == summary["failure_reasons"]
    assert any("ghost.example" in reason for reason in summary["failure_reasons"])
    # The run's outcomes file, its records a row each, a column for each key.
    [header, *records] = page.table("Failed records")
    written = [json.loads(line) for line in (tmp_path / "outcomes.jsonl").read_text().splitlines()]
    assert header == list(written[0]) and len(records) == len(written) == 1
    assert any("ghost.example" in cell for cell in records[0])


def test_a_report_that_cannot_be_written_is_one_warning_and_the_run_succeeds(
    people_client: ListSyncClient,
    people_emulator: LiveEmulator,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()

    with caplog.at_level(logging.WARNING):
        summary = people_sync(people_client, tmp_path, report_path=folder)

    assert summary["report_path"] is None
    assert summary["added"] == len(people_in_list(people_emulator)["acme.com"]) == 2
    # One line of warning names the report and why (beside the lease's, which this run takes none of).
    [warning] = [
        record
        for record in caplog.records
        if record.levelno >= logging.WARNING and "report" in record.getMessage()
    ]
    assert warning.getMessage().startswith(f"The run's report was not written to {folder}: ")
    assert "directory" in warning.getMessage().lower() and "\n" not in warning.getMessage()


def test_a_dry_run_reports_beside_its_temporary_plan(people_client: ListSyncClient, tmp_path: Path) -> None:
    summary = people_sync(people_client, tmp_path, plan_path=None, dry_run=True)

    assert summary["report_path"] == str(Path(summary["plan_path"]).with_suffix(".html"))
    page = page_of(summary)
    assert "Dry run: planned, nothing written" in page.text
    assert page.counts()["added"] == 0 and len(page.table("add")) - 1 == summary["planned"]["add"] == 2
    Path(summary["plan_path"]).unlink()
    Path(summary["report_path"]).unlink()


def test_failed_records_are_shown_from_an_outcomes_file_a_column_a_key(tmp_path: Path) -> None:
    outcomes = tmp_path / "outcomes.jsonl"
    records = [
        {"identity": f"email:p{number}@acme.com", "action": "patch", "outcome": "refused", "curable": False}
        for number in range(SAMPLE_SIZE + 3)
    ]
    records[0]["answer"] = SCRIPT
    outcomes.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    summary = PeopleSummary(
        table_id="tbl", mode="upsert", delete_scope="list", normalization_version="1", failed=len(records)
    )
    now = datetime.now(timezone.utc)

    page = Page(render_report(summary, PlanSample(), started=now, finished=now, outcomes=outcomes))

    [header, *rows] = page.table("Failed records")
    assert header == ["identity", "action", "outcome", "curable", "answer"]
    assert len(rows) == SAMPLE_SIZE
    assert rows[0] == ["email:p0@acme.com", "patch", "refused", "False", SCRIPT]
    assert rows[1][-1] == "none"
    assert "… and 3 more in the file." in page.text
