"""The summary's declaration and the views held to it: the README's keys, the history columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from listsync.sync.history import COUNT_COLUMNS
from listsync.sync.summary import (
    ListSyncSummary,
    PeopleSummary,
    RowsSummary,
    count_names,
    counts_of,
    upgraded,
)

README = Path(__file__).parents[2] / "README.md"
JOBS: dict[str, type[ListSyncSummary]] = {"people": PeopleSummary, "rows": RowsSummary}


def keys_table() -> str:
    """The README's list of summary keys, as the summaries declare them."""
    lines = ["| Key | Jobs | |", "|---|---|---|"]
    fields = {**PeopleSummary.model_fields, **RowsSummary.model_fields}
    for name, field in fields.items():
        jobs = [job for job, summary in JOBS.items() if name in summary.model_fields]
        lines.append(f"| `{name}` | {', '.join(jobs)} | {(field.description or '').replace('``', '`')} |")
    return "\n".join(lines)


def test_the_readme_lists_every_summary_key_as_declared() -> None:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- summary-keys -->\n(.*?)\n<!-- /summary-keys -->", text, re.S)
    assert found, "README.md has no <!-- summary-keys --> block"
    assert found.group(1) == keys_table(), (
        f"README's summary keys differ; the block should be:\n{keys_table()}"
    )


@pytest.mark.parametrize("job", JOBS)
def test_every_count_has_a_history_column(job: str) -> None:
    assert set(count_names(JOBS[job])) <= set(COUNT_COLUMNS)


def test_counts_both_jobs_keep_have_one_name() -> None:
    shared = set(count_names(PeopleSummary)) & set(count_names(RowsSummary))
    assert shared == set(count_names(ListSyncSummary))
    assert {"added", "updated", "deleted", "not_added", "not_updated", "resent"} <= shared


def test_a_summary_of_before_the_renames_is_read_with_the_names_of_today() -> None:
    old = {"rows_added": 2, "rows_updated": 1, "rows_deleted": 0, "rows_resent": 1, "requests": {"total": 3}}

    assert upgraded(old) == {"added": 2, "updated": 1, "deleted": 0, "resent": 1, "requests": {"total": 3}}
    assert counts_of(old) == {"added": 2, "updated": 1, "deleted": 0, "resent": 1, "requests_total": 3}
