"""Persistence for Fathom: SQLAlchemy 2 async repositories over SQLite or PostgreSQL."""

from __future__ import annotations

from storage.claims import USAGE_KEYS
from storage.db import HEAD_REVISION, Database, StorageUnavailable, normalize_url
from storage.digests import DigestLimit, DigestStore
from storage.errors import ClaimLost, RunNotFound, ThreadBusy, UserBusy, VariablesConflict
from storage.leases import LeaseStore
from storage.lifecycle import (
    DELIVERY_FAILED,
    DELIVERY_PENDING,
    DELIVERY_POSTED,
    FINISHED_STATUSES,
    UNFINISHED_STATUSES,
    outcome_is_delivered,
)
from storage.records import (
    Checkpointed,
    Claim,
    ClaimResult,
    DigestRecord,
    RunRecord,
    SourceRecord,
    ThreadRecord,
    ThreadSummary,
)
from storage.store import Store

__all__ = [
    "DELIVERY_FAILED",
    "DELIVERY_PENDING",
    "DELIVERY_POSTED",
    "FINISHED_STATUSES",
    "HEAD_REVISION",
    "UNFINISHED_STATUSES",
    "USAGE_KEYS",
    "Checkpointed",
    "Claim",
    "ClaimLost",
    "ClaimResult",
    "Database",
    "DigestLimit",
    "DigestRecord",
    "DigestStore",
    "LeaseStore",
    "RunNotFound",
    "RunRecord",
    "SourceRecord",
    "StorageUnavailable",
    "Store",
    "ThreadBusy",
    "ThreadRecord",
    "ThreadSummary",
    "UserBusy",
    "VariablesConflict",
    "normalize_url",
    "outcome_is_delivered",
]
