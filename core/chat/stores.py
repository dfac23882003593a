"""Runs and threads as the chat layer and the platforms see them: the records (read-only
views of stored rows) and :class:`ChatStores`, the stores they may use, each a Protocol of
the methods they call.

``storage`` implements these twice: its SQL stores (``storage.Store`` holds every store of a
``ChatStores``) and the in-memory twin ``storage.memory.MemoryStores`` (no database; the
store-contract suite, ``tests/test_store_contract.py``, holds both to the same answers).
``bots/chat`` and every platform import this module, never ``storage``, so dependencies point
inward (platforms -> chat layer -> core -> storage) and a platform's needs from the database
are visible here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from core.research.requests import RequestRuns, RequestThreads, Votes
from core.values import ReportDocument, RunStatus, ThreadKey
from storage.errors import UserBusy
from storage.records import (
    Admission,
    CancelRequest,
    DigestRecord,
    GuidanceTaken,
    ProgressRecord,
    RunPosition,
    RunRecord,
    SourceRecord,
    StopRequest,
    ThreadRecord,
    ThreadSummary,
)
from storage.tables import utcnow

__all__ = [
    "Admission",
    "CancelRequest",
    "ChatContexts",
    "ChatEvents",
    "ChatFeedback",
    "ChatFiles",
    "ChatProgress",
    "ChatRuns",
    "ChatStores",
    "ChatThreads",
    "DigestRecord",
    "GuidanceTaken",
    "ProgressRecord",
    "RunPosition",
    "RunRecord",
    "StopRequest",
    "ThreadRecord",
    "UserBusy",
    "utcnow",
]


class ChatRuns(RequestRuns, Protocol):
    """Runs as the chat layer sees them: created (once per delivery, one active per thread,
    within the requester's limits), found, listed, stopped and cancelled, and the progress
    message each is shown in (``storage.RunStore``); what the request service asks of them
    is ``core.research.requests.RequestRuns``."""

    async def set_progress_message(self, run_id: str, message_id: str) -> None: ...

    async def reserve_progress_message(self, run_id: str, marker: str) -> bool: ...

    async def record_report_document(
        self, run_id: str, document: ReportDocument
    ) -> ReportDocument | None: ...

    async def settle_progress_message(
        self, run_id: str, marker: str, message_id: str | None
    ) -> bool: ...

    async def queue_place(self, run_id: str) -> int | None: ...

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def active_runs_for_user(self, requested_by: str) -> list[RunRecord]: ...

    async def recent_runs_for_user(
        self, requested_by: str, limit: int = 10, before: RunPosition | None = None
    ) -> list[RunRecord]:
        """``requested_by``'s newest runs, newest first (by creation, then id); with
        ``before``, only those after that position in this order (a page's keyset cursor)."""
        ...

    async def recent_runs_in_channel(
        self, platform: str, workspace: str, channel: str, limit: int = 10
    ) -> list[RunRecord]: ...

    async def active_runs_in_channel(
        self, platform: str, workspace: str, channel: str
    ) -> list[RunRecord]: ...

    async def latest_run_in_thread(self, thread_key: str) -> RunRecord | None: ...

    async def active_run_in_thread(self, thread_key: str) -> RunRecord | None: ...

    async def thread_runs(self, thread_id: int) -> list[RunRecord]: ...

    async def run_sources(self, run_id: str) -> list[SourceRecord]: ...

    async def count_runs(
        self, statuses: Sequence[RunStatus] | None = None
    ) -> list[tuple[str, str, int]]: ...


class ChatThreads(RequestThreads, Protocol):
    """Threads by key, re-keyed to the message that opened them, their variables, and the
    replies that steer their runs (``storage.ThreadStore``)."""

    async def rekey_thread(self, thread_id: int, key: ThreadKey) -> ThreadRecord: ...

    async def get_thread(self, key: str) -> ThreadRecord | None: ...

    async def list_threads(self, limit: int = 50) -> list[ThreadSummary]: ...

    async def load_variables(self, thread_id: int) -> dict[str, Any] | None: ...


class ChatEvents(Protocol):
    """Platform deliveries recorded once across replicas (``storage.EventStore``)."""

    async def claim_event(self, key: str) -> bool: ...

    async def events_seen(self, keys: Sequence[str]) -> bool: ...

    async def prune_events(self, older_than: timedelta) -> int: ...


class ChatFiles(Protocol):
    """Files sent on their own, kept for the next request in their scope
    (``storage.FileStore``)."""

    async def remember_files(self, scope: str, attachments: Sequence[dict[str, Any]]) -> None: ...

    async def take_files(self, scope: str, since: datetime) -> list[dict[str, Any]]: ...

    async def prune_files(self, older_than: timedelta) -> int: ...


class ChatContexts(Protocol):
    """What a conversation was opened from (``storage.ContextStore``)."""

    async def set_conversation_context(self, thread_key: str, context: dict[str, Any]) -> None: ...

    async def conversation_context(self, thread_key: str) -> dict[str, Any] | None: ...

    async def prune_contexts(self, older_than: timedelta) -> int: ...


class ChatFeedback(Votes, Protocol):
    """Votes on reports (``storage.FeedbackStore``)."""


class ChatProgress(Protocol):
    """The progress of runs asked for over MCP, as numbered rows (``storage.ProgressStore``):
    written by the ``mcp`` platform's delivery, read by the request handler of the caller."""

    async def append(self, run_id: str, text: str) -> int: ...

    async def since(self, run_id: str, seq: int = 0) -> list[ProgressRecord]: ...


class ChatStores(Protocol):
    """The stores the chat layer and the platforms use, each for its own job (``storage.Store``
    holds them all, ``storage.memory.MemoryStores`` is their twin in memory; a platform is
    handed this view, never the database).

    - ``runs``: runs created, a user's and a channel's runs, one by id, stop and cancel, the
      progress message of a run;
    - ``threads``: a thread by key, and re-keying one to the message that opened it; the
      replies steering its run;
    - ``events``: platform deliveries recorded once across replicas;
    - ``files``: files sent on their own, kept for the next request;
    - ``contexts``: what a conversation was opened from (Slack's assistant threads);
    - ``feedback``: votes on reports;
    - ``progress``: the progress rows of runs asked for over MCP.
    """

    @property
    def runs(self) -> ChatRuns: ...

    @property
    def threads(self) -> ChatThreads: ...

    @property
    def events(self) -> ChatEvents: ...

    @property
    def files(self) -> ChatFiles: ...

    @property
    def contexts(self) -> ChatContexts: ...

    @property
    def feedback(self) -> ChatFeedback: ...

    @property
    def progress(self) -> ChatProgress: ...
