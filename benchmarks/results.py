"""Where the benchmarks keep their figures: ``benchmarks/RESULTS.md``, a section a run."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def publish(text: str, record: bool) -> None:
    """Print a run's section of figures, and append it to RESULTS.md when ``record``."""
    print(text)
    if record:
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write(text)
