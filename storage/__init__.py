"""Persistence for Fathom: SQLAlchemy 2 async repositories over SQLite or PostgreSQL."""

from __future__ import annotations

from storage.db import HEAD_REVISION, Database, normalize_url
from storage.records import RunRecord, SourceRecord, ThreadRecord, ThreadSummary
from storage.store import (
    FINISHED_STATUSES,
    UNFINISHED_STATUSES,
    USAGE_KEYS,
    RunNotFound,
    Store,
)

__all__ = [
    "FINISHED_STATUSES",
    "HEAD_REVISION",
    "UNFINISHED_STATUSES",
    "USAGE_KEYS",
    "Database",
    "RunNotFound",
    "RunRecord",
    "SourceRecord",
    "Store",
    "ThreadRecord",
    "ThreadSummary",
    "normalize_url",
]
