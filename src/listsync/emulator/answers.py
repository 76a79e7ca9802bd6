"""The bodies of List answers as the profile words them.

The List endpoints (:mod:`~listsync.emulator.people_endpoints`,
:mod:`~listsync.emulator.rows_endpoints`) answer in the reference form (a people page as A13, write
results as A18); these functions turn that into the whole response body of the
profile's :class:`~listsync.emulator.profiles.Dialect`, so each wording knob is applied here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listsync.emulator.profiles import RENAMED_COUNTS, Dialect


def people_page_body(page: Mapping[str, Any], dialect: Dialect) -> dict[str, Any]:
    """GET targetable-people for a page in the A13 form (``people``, ``total``, ``limit``,
    ``offset``, ``hasMore``), per ``people_paging``, ``people_key`` and ``people_more_flag``."""
    paging = {"total": page["total"], "limit": page["limit"], "offset": page["offset"]}
    if dialect.people_more_flag is not None:
        paging[dialect.people_more_flag] = page["hasMore"]
    if dialect.people_paging == "beside":
        return {"success": True, "data": page["people"], **paging}
    return {"success": True, "data": {dialect.people_key: page["people"], **paging}}


def write_body(result: Mapping[str, Any], dialect: Dialect) -> dict[str, Any]:
    """A List write's answer for its A18 ``result``, per ``write_counts``: as is, with the counts
    renamed (new rows as ``rowIds`` in request order), or no ``data`` at all."""
    if dialect.write_counts == "none":
        return {"success": True}
    data = dict(result)
    if dialect.write_counts == "renamed":
        data = {RENAMED_COUNTS.get(name, name): value for name, value in data.items()}
        if "rows" in data:
            data["rowIds"] = [row["id"] for row in data.pop("rows")]
    return {"success": True, "data": data}
