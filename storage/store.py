"""The aggregate store: every per-job store over one database, under one name.

``Store(database)`` builds the stores that each do one job and exposes them as attributes
(``runs``, ``claims``, ``threads``, ``events``, ``files``, ``caches``, ``digests``,
``leases``, ``feedback``, ``contexts``, ``progress``, ``retention``, ``forgetting``),
so code that needs one job is handed that store alone. It has no methods of its own to call:
what a caller uses shows in the store it names.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.engine import Connection

from storage.caches import CacheStore
from storage.claims import ClaimStore
from storage.contexts import ContextStore
from storage.db import Database
from storage.digests import DigestStore
from storage.events import EventStore
from storage.feedback import FeedbackStore
from storage.files import FileStore
from storage.forget import ForgetStore
from storage.leases import LeaseStore
from storage.progress import ProgressStore
from storage.retention import RetentionStore
from storage.runs import RunStore
from storage.threads import ThreadStore


class Store:
    """Every per-job store over one database."""

    def __init__(
        self, database: Database, *, on_new_run: Callable[[Connection, str], None] | None = None
    ) -> None:
        """``on_new_run(conn, run_id)`` runs in the transaction that creates a run (the job
        queue of ``FATHOM_QUEUE=procrastinate`` queues it there: committed means queued)."""
        self._db = database
        self.runs = RunStore(database, on_new_run=on_new_run)
        self.claims = ClaimStore(database)
        self.threads = ThreadStore(database)
        self.events = EventStore(database)
        self.files = FileStore(database)
        self.caches = CacheStore(database)
        self.digests = DigestStore(database)
        self.leases = LeaseStore(database)
        self.feedback = FeedbackStore(database)
        self.contexts = ContextStore(database)
        self.progress = ProgressStore(database)
        self.retention = RetentionStore(database)
        self.forgetting = ForgetStore(database)
