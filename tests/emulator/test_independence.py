"""The emulator implements the spec on its own: importing and running it loads no client code."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
from starlette.testclient import TestClient
from listsync.emulator import create_app, demo_config
TestClient(create_app(demo_config())).get("/v1/lists", headers={"Authorization": "Bearer sk_demo_listsync"})
loaded = sorted(name for name in sys.modules if name.startswith("listsync.client"))
print(",".join(loaded))
"""


def test_the_emulator_never_imports_the_client():
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHECK], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""
