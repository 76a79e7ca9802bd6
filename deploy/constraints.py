"""Write the constraints file from a ``pip install --dry-run --report`` resolution (``make constraints``).

    python deploy/constraints.py RESOLUTION.json deploy/constraints-3.11.txt

Every package the resolution would install is pinned (``name==version``), but this one.
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import date
from pathlib import Path

OWN_NAME = "airflow-provider-listsync"

HEADER = """\
# Constraints for installing this provider with Airflow on Python {python} (Linux): one set of
# versions known to work together, for `pip install --constraint`.
#
# What it is: not Airflow's own constraints file, but the resolution pip made on {today}
# for `.[test,postgres,mysql,snowflake,bigquery]` (this package, its test tools and the
# providers of every warehouse extra), with celery and kombu held below 5.7: celery 5.7.0
# breaks the Celery provider's scheduler and workers ("cannot import name 'retry' from
# 'celery.backends.database'"). `make test`, the cluster test included, passes on it.
# `make constraints` makes it again.
#
# With internet access you may take the Airflow part from Airflow's official constraints of the
# release instead; keep celery below 5.7:
#   pip install "apache-airflow==3.3.2" ".[postgres]" "celery<5.7" \\
#     --constraint "https://raw.githubusercontent.com/apache/airflow/constraints-3.3.2/constraints-{python}.txt"
"""


def pins(report: dict) -> list[str]:
    """``name==version`` of every package in a pip report's ``install`` list but this one, by name."""
    installs = [item["metadata"] for item in report["install"] if item["metadata"]["name"] != OWN_NAME]
    return [
        f"{meta['name']}=={meta['version']}" for meta in sorted(installs, key=lambda m: m["name"].lower())
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python deploy/constraints.py RESOLUTION.json CONSTRAINTS.txt", file=sys.stderr)
        return 2
    report = json.loads(Path(argv[0]).read_text())
    python = ".".join(platform.python_version_tuple()[:2])
    text = HEADER.format(python=python, today=date.today().isoformat())
    Path(argv[1]).write_text(text + "".join(f"{pin}\n" for pin in pins(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
