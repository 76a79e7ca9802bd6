"""Cluster policies of the cluster test's deployment: the example DAGs at the test's pace.

The test's emulator counts rate limits in windows of a few seconds instead of a minute, so the
threshold above which IngestSignalsOperator defers a wait (by default one window and a margin) is
scaled down the same way: the waits for a window to reopen are slept through in the worker, and a
longer Retry-After defers. A retry follows its failure after two seconds instead of a minute.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

DEFER_AFTER_SECONDS = 3.0
RETRY_DELAY = timedelta(seconds=2)


def task_policy(task: Any) -> None:
    task.retry_delay = RETRY_DELAY
    if task.task_type == "IngestSignalsOperator":
        task.defer_after_seconds = DEFER_AFTER_SECONDS
