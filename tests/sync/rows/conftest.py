"""The rows upsert tests' name for the kit's rows tenant (:mod:`tests.support.tenants`):
``emulator`` serves the rows List; a test that needs the List otherwise serves it with
``live_emulator(rows_config(...))``. DAGs defined in a test run with the suite's ``run_dag``
(tests/conftest.py).
"""

from __future__ import annotations

import pytest

from ...support import LiveEmulator


@pytest.fixture
def emulator(rows_emulator: LiveEmulator) -> LiveEmulator:
    return rows_emulator
