"""The peak resident memory of the process a benchmark measures."""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mib() -> float:
    """This process's peak RSS since it started its program. (``ru_maxrss`` is not: Linux keeps
    across ``exec`` the peak a forked child inherited, that of the benchmark process that started it.)"""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
