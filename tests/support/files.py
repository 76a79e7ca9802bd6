"""Reading the files the code under test writes, and the scripts of the repository."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def read_jsonl(path: str | Path) -> list[Any]:
    """The records of a JSON-lines file (a plan, a rejects file), in order."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def load_script(relative_path: str) -> ModuleType:
    """Import a script of the repository that is not in a package (``"examples/demo.py"``) by path.

    Its module is named after the path (``listsync_examples_demo``).
    """
    name = "_".join(("listsync", *Path(relative_path).with_suffix("").parts))
    spec = importlib.util.spec_from_file_location(name, REPO / relative_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up by name.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
