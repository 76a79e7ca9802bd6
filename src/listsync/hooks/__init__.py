"""Airflow hooks of the provider."""

from listsync.hooks.listsync import ListSyncHook

__all__ = ["ListSyncHook"]
