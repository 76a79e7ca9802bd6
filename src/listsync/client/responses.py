"""Reading the service's answers, tolerantly (docs/assumptions.md): any 2xx is success, ``data``
may be an object or a list, a page's paging fields may sit in ``data``, beside it or in a
``pagination`` object, and List writes may return an empty body.

An answer that cannot be read raises :class:`UnexpectedResponseError` (the service answered, but
not in a shape the client knows); a write's answer that cannot be read raises
:class:`OutcomeUnknownError`, as whether it was applied cannot be told from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import httpx
import msgspec
from pydantic import BaseModel, ValidationError

from listsync.client.errors import NotJsonError, OutcomeUnknownError, UnexpectedResponseError
from listsync.client.models import WriteResult

ResponseT = TypeVar("ResponseT", bound=BaseModel)


def unexpected(response: httpx.Response, detail: str) -> UnexpectedResponseError:
    """The error for a 2xx answer to ``response``'s request that cannot be read, saying why."""
    return UnexpectedResponseError(
        response.status_code, response.request.method, response.request.url.path, detail
    )


def body_of(response: httpx.Response) -> Any:
    """The decoded body; ``None`` for an empty one."""
    if not response.content.strip():
        return None
    try:
        return msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        request = response.request
        raise NotJsonError(
            response.status_code, request.method, request.url.path, "the body is not JSON"
        ) from None


def data_of(response: httpx.Response) -> Any:
    """The ``data`` of the success envelope; a body without the envelope is taken as the data."""
    body = body_of(response)
    if isinstance(body, Mapping) and ("data" in body or "success" in body):
        if body.get("success") is False:
            raise unexpected(response, f"success is false: {body.get('error', '')}")
        return body.get("data")
    return body


def items_of(data: Any, *keys: str) -> list[Any]:
    """A list of items from ``data`` given as a list or as an object holding one under ``keys``."""
    if data is None:
        return []
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        for key in keys:
            value = data.get(key)
            if isinstance(value, list):
                return value
    return []


#: Objects a service may keep a page's paging fields in, beside ``data`` or inside it (A13).
_PAGING_OBJECTS = ("pagination", "paging", "meta")
#: The paging fields read out of such an object: the names :class:`PeoplePage` and
#: :class:`RowsPage` accept.
_PAGING_FIELDS = (
    "total",
    "totalMatched",
    "totalCount",
    "hasMore",
    "has_more",
    "truncated",
    "limit",
    "offset",
    "returned",
)


def _with_paging(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` and the paging fields of a ``pagination``, ``paging`` or ``meta`` object among
    them, lifted beside the rest; a field given directly wins over one in such an object."""
    lifted = dict(fields)
    for name in _PAGING_OBJECTS:
        nested = fields.get(name)
        if isinstance(nested, Mapping):
            for key in _PAGING_FIELDS:
                if key in nested:
                    lifted.setdefault(key, nested[key])
    return lifted


def page_of(response: httpx.Response, *item_keys: str) -> tuple[list[Any], dict[str, Any]]:
    """A page's items and its other fields (paging metadata), wherever the service puts them.

    The items are ``data`` itself when it is a list, else the list under the first of
    ``item_keys`` that ``data`` holds; the other fields come from ``data`` and from beside it
    in the envelope, those of ``data`` first, and at each level from a ``pagination``,
    ``paging`` or ``meta`` object too (``_PAGING_OBJECTS``). An answer without such a list
    is refused: read as an empty page, it would make a List look empty.
    """
    body = body_of(response)
    if isinstance(body, list):
        return body, {}
    if not isinstance(body, Mapping):
        raise unexpected(response, "the page is not a JSON object")
    if body.get("success") is False:
        raise unexpected(response, f"success is false: {body.get('error', '')}")
    enveloped = "data" in body or "success" in body
    data = body.get("data") if enveloped else body
    beside = _with_paging(
        {key: value for key, value in body.items() if key not in ("data", "success")} if enveloped else {}
    )
    if isinstance(data, list):
        return data, beside
    if isinstance(data, Mapping):
        for key in item_keys:
            if key in data:
                if not isinstance(data[key], list):
                    raise unexpected(response, f"{key} is not a list")
                inside = _with_paging({name: v for name, v in data.items() if name != key})
                return data[key], {**beside, **inside}
    raise unexpected(response, f"the answer holds no list of {item_keys[0]}")


def parse(model: type[ResponseT], data: Any, response: httpx.Response) -> ResponseT:
    """``data`` read as ``model``; :raises UnexpectedResponseError: it is not one."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise unexpected(response, f"cannot read {model.__name__}: {exc.errors()[0]['msg']}") from None


def write_result(response: httpx.Response) -> WriteResult:
    """What a 2xx answer to a List write says (A18, read tolerantly).

    Any answer with a readable envelope is success; counts and row ids are read under the names
    :class:`WriteResult` lists, and are ``None`` (unknown) when absent.

    :raises OutcomeUnknownError: a 2xx whose body is empty, not JSON, not an object, or says
        ``success: false``: whether the write was applied cannot be told from it.
    """
    request = response.request
    try:
        body = body_of(response)
    except UnexpectedResponseError:
        body = None
    if not isinstance(body, Mapping) or body.get("success") is False:
        what = "an empty body" if not response.content.strip() else "a body that is not a success envelope"
        raise OutcomeUnknownError(
            f"{request.method} {request.url.path}: answered {response.status_code} with {what}; "
            "whether the write was applied is unknown"
        )
    data = body.get("data") if ("data" in body or "success" in body) else body
    result: dict[str, Any] = {"status_code": response.status_code}
    if isinstance(data, Mapping):
        result.update({key: value for key, value in data.items() if key not in ("rows", "rowIds", "ids")})
    rows = items_of(data, "rows")
    result["row_ids"] = [
        row["id"] for row in rows if isinstance(row, Mapping) and isinstance(row.get("id"), str)
    ]
    for key in ("rowIds", "ids"):
        if isinstance(data, Mapping) and isinstance(data.get(key), list):
            result["row_ids"] = [str(row_id) for row_id in data[key]]
    return parse(WriteResult, result, response)
