"""The DAG of ``benchmarks/sharded_cluster.py``: one List's people sync from an extract file, split
once, then mapped over shards, and a task adding up the split's and the shards' summaries.

The benchmark copies this file into a DAG folder of its own and describes the sync in the
environment of every Airflow component, as JSON in ``LISTSYNC_SHARDED_BENCHMARK``: ``source``
(the extract), ``table_id``, ``column_map``, ``shards`` (how many), ``shards_at_once`` (at most
this many shards run at once; null: as many as the workers' slots) and ``output_dir`` (where the
split writes the parts and the rejects, and each shard its plan file). It is
``dags/sharded_people_sync.py`` with the extract
read from a file instead of the warehouse, the List's account rows already in place, and no
retries: a retried shard would send its writes twice and blur the request count.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from airflow.sdk import dag, task

from listsync.operators import SplitPeopleOperator, SyncTargetablePeopleOperator

log = logging.getLogger(__name__)

DAG_ID = "sharded_cluster_benchmark"
SETTINGS_VARIABLE = "LISTSYNC_SHARDED_BENCHMARK"
# Parsed only in the benchmark's deployment, which always sets it.
SETTINGS: dict[str, Any] = json.loads(os.environ[SETTINGS_VARIABLE])
PARTS_DIR = SETTINGS["output_dir"] + "/parts"
# "shard-1-of-8": each map index renders its own shard into its file names.
SHARD_FILE = SETTINGS["output_dir"] + "/shard-{{ task.shard | replace('/', '-of-') }}"


@dag(dag_id=DAG_ID, schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["benchmark"])
def sharded_cluster_benchmark() -> None:
    split = SplitPeopleOperator(
        task_id="split_people",
        table_id=SETTINGS["table_id"],
        source=SETTINGS["source"],
        column_map=SETTINGS["column_map"],
        shards=SETTINGS["shards"],
        parts_path=PARTS_DIR,
        rejects_path=SETTINGS["output_dir"] + "/people.rejects.jsonl",
        retries=0,
    )
    people = SyncTargetablePeopleOperator.partial(
        task_id="sync_targetable_people",
        table_id=SETTINGS["table_id"],
        parts_path=PARTS_DIR,
        column_map=SETTINGS["column_map"],
        mode="mirror",
        delete_scope="accounts_in_source",
        plan_path=f"{SHARD_FILE}.plan.jsonl",
        map_index_template="shard {{ task.shard }}",
        retries=0,
        max_active_tis_per_dagrun=SETTINGS["shards_at_once"],
    ).expand(shard=[f"{index}/{SETTINGS['shards']}" for index in range(SETTINGS["shards"])])

    split >> people

    @task(retries=0)
    def report(split: dict[str, Any], summaries: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """Add up the split's and the shards' summaries into one summary of the sync."""
        from listsync.sync.steps import combine_summaries

        summary = combine_summaries(summaries, split=split)
        log.info("Summary of the sharded sync:\n%s", json.dumps(summary, indent=2))
        return summary

    report(split.output, people.output)  # type: ignore[arg-type]


sharded_cluster_benchmark()
