"""The aggregate store: every per-job store over one database, under one name.

``Store(database)`` builds the stores that each do one job and exposes them as attributes
(``runs``, ``claims``, ``threads``, ``events``, ``files``, ``caches``, ``digests``,
``slack_oauth_states``, ``leases``, ``feedback``), so code that needs one job can depend on that
store alone. The method names callers used before the split are the per-job stores' own bound
methods, assigned once here: one implementation, no copies to keep in step.
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
from storage.retention import RetentionStore
from storage.runs import RunStore
from storage.slack_oauth import SlackOAuthStates
from storage.threads import ThreadStore


class Store:
    """Every per-job store over one database, and the names callers knew before the split."""

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
        self.slack_oauth_states = SlackOAuthStates(database)
        self.leases = LeaseStore(database)
        self.feedback = FeedbackStore(database)
        self.contexts = ContextStore(database)
        self.retention = RetentionStore(database)
        self.forgetting = ForgetStore(database)
        # The names callers used before the split: the per-job stores' own bound methods.
        self.create_run = self.runs.create_run
        self.get_run = self.runs.get_run
        self.request_cancel = self.runs.request_cancel
        self.request_stop = self.runs.request_stop
        self.usage_since = self.runs.usage_since
        self.requeue_run = self.runs.requeue_run
        self.set_progress_message = self.runs.set_progress_message
        self.active_runs_for_user = self.runs.active_runs_for_user
        self.recent_runs_for_user = self.runs.recent_runs_for_user
        self.recent_runs_in_channel = self.runs.recent_runs_in_channel
        self.latest_run_in_thread = self.runs.latest_run_in_thread
        self.active_run_in_thread = self.runs.active_run_in_thread
        self.thread_runs = self.runs.thread_runs
        self.run_sources = self.runs.run_sources
        self.count_runs = self.runs.count_runs
        self.claim_run = self.claims.claim_run
        self.renew_claim = self.claims.renew_claim
        self.release_run = self.claims.release_run
        self.runs_to_sweep = self.claims.runs_to_sweep
        self.checkpoint = self.claims.checkpoint
        self.finish_run = self.claims.finish_run
        self.report_parts_posted = self.claims.report_parts_posted
        self.count_delivery_failure = self.claims.count_delivery_failure
        self.finish_delivery = self.claims.finish_delivery
        self.rekey_thread = self.threads.rekey_thread
        self.get_thread = self.threads.get_thread
        self.list_threads = self.threads.list_threads
        self.load_variables = self.threads.load_variables
        self.add_guidance = self.threads.add_guidance
        self.claim_event = self.events.claim_event
        self.record_feedback = self.feedback.record_feedback
        self.feedback_since = self.feedback.feedback_since
        self.set_conversation_context = self.contexts.set_conversation_context
        self.conversation_context = self.contexts.conversation_context
        self.events_seen = self.events.events_seen
        self.prune_events = self.events.prune_events
        self.remember_files = self.files.remember_files
        self.take_files = self.files.take_files
        self.cache_get = self.caches.cache_get
        self.cache_put = self.caches.cache_put
        self.page_get = self.caches.page_get
        self.page_put = self.caches.page_put
        self.prune_caches = self.caches.prune_caches
        self.digest_history = self.digests.history
        self.prune_oauth_states = self.slack_oauth_states.prune_expired

    @property
    def queues_new_runs(self) -> bool:
        """Whether a new run is queued by the transaction that creates it (``on_new_run``)."""
        return self.runs.queues_new_runs
