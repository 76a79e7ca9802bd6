"""Triggers of the listsync provider: waits that free a worker slot, and never write."""

from __future__ import annotations

from listsync.triggers.rate_limit import RateLimitWindowTrigger

__all__ = ["RateLimitWindowTrigger"]
