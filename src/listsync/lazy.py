"""Names a package hands on from its modules, each module loaded when one of its names is first
used (PEP 562): a package's ``__init__`` does ::

    __getattr__, __dir__ = lazy_names(__name__, {"Name": "package.module", ...}, __all__)

so that importing the package, or one light module of it, loads none of the heavy ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, modules: Mapping[str, str], names: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``modules`` maps each name to the
    module that defines it; ``names`` (the package's ``__all__``) are listed by ``dir()``."""
    listed = sorted(names)

    def attribute(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def listing() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *listed})

    return attribute, listing
