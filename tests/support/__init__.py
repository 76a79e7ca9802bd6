"""The suite's test kit: the fake clock, the live emulator, script loading and JSON-lines reading.

Plain modules, imported as ``tests.support``; their fixtures (``fake_clock``, ``live_emulator``)
are in :mod:`tests.support.plugin`, which ``tests/conftest.py`` registers for every folder.
"""

from .clock import FakeClock
from .emulator import SOLE_WRITER_PROFILES, LiveEmulator, serve_emulator
from .files import load_script, read_jsonl

__all__ = ["SOLE_WRITER_PROFILES", "FakeClock", "LiveEmulator", "load_script", "read_jsonl", "serve_emulator"]
