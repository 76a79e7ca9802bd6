"""Checking a List request before anything is applied: the arrays and objects of its body and its
query parameters. A refusal is a 400 naming what is wrong."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listsync.emulator.store import ApiError


def bad_request(message: str) -> ApiError:
    """A 400 refusal saying ``message``."""
    return ApiError(400, message)


def body_array(body: Mapping[str, Any], name: str, cap: int) -> list[Any]:
    """The body's array ``name``: not empty, at most ``cap`` items."""
    items = body.get(name)
    if not isinstance(items, list) or not items:
        raise bad_request(f"{name} must be a non-empty array")
    if len(items) > cap:
        raise bad_request(f"Maximum {cap} {name} per request")
    return items


def body_object(value: object, path: str) -> dict[str, Any]:
    """``value``, given at ``path`` of the request, as the object it must be."""
    if not isinstance(value, dict):
        raise bad_request(f"{path} must be an object")
    return value


def int_param(params: Mapping[str, str], name: str, default: int, low: int, high: int | None) -> int:
    """Query parameter ``name``, an integer from ``low`` to ``high`` (None: no bound), else ``default``."""
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise bad_request(f"{name} must be an integer {bounds}")
    return value


def bool_param(params: Mapping[str, str], name: str) -> bool | None:
    """Query parameter ``name``, ``true`` or ``false`` (None: absent)."""
    raw = params.get(name)
    if raw is None:
        return None
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise bad_request(f"{name} must be true or false")
