"""The README's install line resolves on a fresh machine, to the versions the constraints file pins.

pip resolves the line as the README gives it, with ``--dry-run --ignore-installed`` so that
nothing here counts as installed and nothing is written, against the package index (PyPI).
Skipped where PyPI does not answer, except under ``CI=true``.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
CONSTRAINTS = REPO / "deploy" / "constraints-3.11.txt"
PYPI = "https://pypi.org/simple/"


def readme_install_line() -> list[str]:
    """The first ``pip install`` command of the README's installation section, as arguments."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Installation into an existing Airflow", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"^pip install .*$", section, flags=re.MULTILINE)
    assert match is not None, "the installation section shows no pip install line"
    return shlex.split(match[0])


def pinned() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            pins[canonical(requirement.name)] = str(requirement.specifier).removeprefix("==")
    return pins


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_readme_installs_with_the_projects_constraints_file():
    arguments = readme_install_line()
    assert arguments[:2] == ["pip", "install"]
    assert arguments[arguments.index("--constraint") + 1] == str(CONSTRAINTS.relative_to(REPO))


def test_the_constraints_hold_celery_below_the_release_that_breaks_the_celery_provider():
    pins = pinned()
    assert pins["celery"].startswith("5.6.")
    assert pins["apache-airflow"] == "3.3.2"
    # Every extra's provider is pinned, so an install with any of them is reproducible.
    for provider in ("postgres", "mysql", "snowflake", "google", "celery"):
        assert f"apache-airflow-providers-{provider}" in pins


def test_the_readme_install_line_resolves_to_the_pinned_versions(tmp_path, service_missing):
    try:
        httpx.get(PYPI + "pip/", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        service_missing(f"PyPI not reachable at {PYPI}: {exc.__class__.__name__}: {exc}")
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", *readme_install_line()]
    # python -m pip install <options> <the README's arguments>; nothing is installed anywhere.
    command[4:4] = ["--dry-run", "--ignore-installed", "--target", str(tmp_path / "target")]
    command[4:4] = ["--quiet", "--report", str(report)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)

    assert result.returncode == 0, result.stderr[-3000:]
    resolved = {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    pins = pinned()
    assert resolved["apache-airflow"] == "3.3.2"
    assert resolved["celery"] == pins["celery"]
    assert "apache-airflow-providers-postgres" in resolved
    assert {
        name: version for name, version in resolved.items() if name in pins and pins[name] != version
    } == {}
