"""Runs and threads as the chat layer and the platforms see them: the records (read-only
views of stored rows) and :class:`ChatRuns`, the store operations they may use.

``storage`` implements these (its ``Store`` is a ``ChatRuns``); ``bots/chat`` and every
platform import this module, never ``storage``, so dependencies point inward (platforms ->
chat layer -> core -> storage) and a platform's needs from the database are visible here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from storage.errors import UserBusy
from storage.lifecycle import DELIVERY_PENDING
from storage.records import CancelRequest, DigestRecord, RunRecord, StopRequest, ThreadRecord
from storage.tables import utcnow

__all__ = [
    "DELIVERY_PENDING",
    "CancelRequest",
    "ChatRuns",
    "DigestRecord",
    "RunRecord",
    "StopRequest",
    "ThreadRecord",
    "UserBusy",
    "utcnow",
]


class ChatRuns(Protocol):
    """What the chat layer reads and records of runs, threads and platform events."""

    async def claim_event(self, key: str) -> bool:
        """Record a platform delivery; True for the first to record it (every replica)."""
        ...

    async def events_seen(self, keys: Sequence[str]) -> bool:
        """Whether any of these deliveries was recorded already."""
        ...

    async def remember_files(self, scope: str, attachments: Sequence[dict[str, Any]]) -> None:
        """Keep files sent on their own for the next request in ``scope``."""
        ...

    async def take_files(self, scope: str, since: datetime) -> list[dict[str, Any]]:
        """The files kept in ``scope`` since ``since``, taken (removed) by this request."""
        ...

    async def get_thread(self, key: str) -> ThreadRecord | None: ...

    async def rekey_thread(self, thread_id: int, *, key: str, thread_ref: str) -> ThreadRecord:
        """Give a thread the key of the message that became its start (its opener)."""
        ...

    async def active_runs_for_user(self, requested_by: str) -> list[RunRecord]:
        """The user's queued and running runs, oldest first."""
        ...

    async def recent_runs_for_user(self, requested_by: str, limit: int = 10) -> list[RunRecord]:
        """The user's runs, newest first."""
        ...

    async def recent_runs_in_channel(
        self, platform: str, workspace: str, channel: str, limit: int = 10
    ) -> list[RunRecord]:
        """A channel's runs, newest first."""
        ...

    async def latest_run_in_thread(self, thread_key: str) -> RunRecord | None: ...

    async def active_run_in_thread(self, thread_key: str) -> RunRecord | None:
        """The thread's queued or running run; None if it has none."""
        ...

    async def thread_runs(self, thread_id: int) -> list[RunRecord]:
        """A thread's runs, oldest first."""
        ...

    async def get_run(self, run_id: str) -> RunRecord | None:
        """One run by id (a button press names its run)."""
        ...

    async def set_progress_message(self, run_id: str, message_id: str) -> None:
        """Remember the message showing a run's progress (a resumed run edits the same)."""
        ...

    async def set_conversation_context(self, thread_key: str, context: dict[str, Any]) -> None:
        """Keep what a conversation was opened from (Slack's assistant thread context)."""
        ...

    async def conversation_context(self, thread_key: str) -> dict[str, Any] | None:
        """The last context kept for a conversation (None: none)."""
        ...
