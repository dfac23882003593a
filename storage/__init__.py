"""Persistence for Fathom: SQLAlchemy 2 async repositories over SQLite or PostgreSQL.

Every public method of a store is one transaction and returns plain records
(:mod:`storage.records`); ORM objects never leave this package. One store per job, each
built from a :class:`Database` alone:

- :class:`RunStore` (``storage/runs.py``): runs created (once per platform delivery, one
  active per thread), found, listed, counted, cancelled, requeued;
- :class:`ClaimStore` (``storage/claims.py``): a runner's lifecycle of a run it holds (claim,
  heartbeat, checkpoint, finish, delivery, release) and the sweep for runs nobody holds,
  every write fenced by the claim;
- :class:`ThreadStore` (``storage/threads.py``): threads and their variables;
- :class:`EventStore` (``storage/events.py``): processed platform events (dedupe of retries);
- :class:`CacheStore` (``storage/caches.py``): search results and page texts;
- :class:`DigestStore` (``storage/digests.py``): scheduled digests and their firings' history;
- :class:`LeaseStore` (``storage/leases.py``): named leases (one holder of a duty);
- :class:`FeedbackStore` (``storage/feedback.py``): votes on reports, one per person per run;
- :class:`ContextStore` (``storage/contexts.py``): what a conversation was opened from
  (Slack's assistant threads);
- :class:`ProgressStore` (``storage/progress.py``): the progress rows of runs asked for over
  MCP;
- :class:`RetentionStore` (``storage/retention.py``): pruning finished research past its
  retention;
- :class:`ForgetStore` (``storage/forget.py``): forgetting one person (a privacy request).

The rules they share are in ``storage/lifecycle.py`` (run statuses, delivery states, which
runs are delivered: :func:`outcome_is_delivered`, and the lease clock), the SQL helpers in
``storage/sql.py``, the exceptions in ``storage/errors.py``.

:class:`Store` *composes* the per-job stores over one database (``store.runs``,
``store.claims``, ``store.threads``, ...) and is only built where the process is put together
(``core/runtime.py``, the CLI); every other caller is handed the one or two stores it uses
(the report writer a ``DigestStore``, the job runner a ``ClaimStore``, the chat layer the
view ``core.chat.stores.ChatStores``). Composition rather than one class inheriting the stores as
mixins: each store keeps its own statements and state with no shared namespace to collide in,
a caller's dependencies are visible in its signature, and a twin of one store can stand in
for it without the others.
"""

from __future__ import annotations

from storage.caches import CacheStore
from storage.claims import USAGE_KEYS, ClaimStore
from storage.contexts import ContextStore
from storage.db import Database, StorageUnavailable, normalize_url
from storage.digests import DigestLimit, DigestStore
from storage.errors import (
    ClaimLost,
    QuotaReached,
    RunNotFound,
    ThreadBusy,
    UserBusy,
    VariablesConflict,
)
from storage.events import EventStore
from storage.feedback import FeedbackStore
from storage.files import FileStore
from storage.forget import ForgetStore, Forgotten, NotARequesterKey, Person
from storage.leases import LeaseStore
from storage.lifecycle import outcome_is_delivered
from storage.progress import ProgressStore
from storage.records import (
    Admission,
    CancelRequest,
    Checkpointed,
    Claim,
    ClaimResult,
    DailyQuota,
    DigestRecord,
    FeedbackRecord,
    GuidanceTaken,
    ProgressRecord,
    Renewal,
    RunRecord,
    RunUsage,
    SourceRecord,
    StopRequest,
    ThreadRecord,
    ThreadSummary,
)
from storage.retention import Pruned, RetentionStore
from storage.run_documents import RunDocument
from storage.runs import RunStore
from storage.schema import HEAD_REVISION, Schema, SchemaError, SchemaState
from storage.store import Store
from storage.threads import ThreadStore

__all__ = [
    "HEAD_REVISION",
    "USAGE_KEYS",
    "Admission",
    "CacheStore",
    "CancelRequest",
    "Checkpointed",
    "Claim",
    "ClaimLost",
    "ClaimResult",
    "ClaimStore",
    "ContextStore",
    "DailyQuota",
    "Database",
    "DigestLimit",
    "DigestRecord",
    "DigestStore",
    "EventStore",
    "FeedbackRecord",
    "FeedbackStore",
    "FileStore",
    "ForgetStore",
    "Forgotten",
    "GuidanceTaken",
    "LeaseStore",
    "NotARequesterKey",
    "Person",
    "ProgressRecord",
    "ProgressStore",
    "Pruned",
    "QuotaReached",
    "Renewal",
    "RetentionStore",
    "RunDocument",
    "RunNotFound",
    "RunRecord",
    "RunStore",
    "RunUsage",
    "Schema",
    "SchemaError",
    "SchemaState",
    "SourceRecord",
    "StopRequest",
    "StorageUnavailable",
    "Store",
    "ThreadBusy",
    "ThreadRecord",
    "ThreadStore",
    "ThreadSummary",
    "UserBusy",
    "VariablesConflict",
    "normalize_url",
    "outcome_is_delivered",
]
