"""Runs and threads as the chat layer and the platforms see them: the records (read-only
views of stored rows) and :class:`ChatStores`, the stores they may use.

``storage`` implements these (its ``Store`` holds every store of a ``ChatStores``); ``bots/chat``
and every platform import this module, never ``storage``, so dependencies point inward (platforms ->
chat layer -> core -> storage) and a platform's needs from the database are visible here.
"""

from __future__ import annotations

from typing import Protocol

from storage.contexts import ContextStore
from storage.errors import UserBusy
from storage.events import EventStore
from storage.files import FileStore
from storage.records import (
    CancelRequest,
    DigestRecord,
    GuidanceTaken,
    RunRecord,
    StopRequest,
    ThreadRecord,
)
from storage.runs import RunStore
from storage.tables import utcnow
from storage.threads import ThreadStore

__all__ = [
    "CancelRequest",
    "ChatStores",
    "ContextStore",
    "DigestRecord",
    "GuidanceTaken",
    "RunRecord",
    "StopRequest",
    "ThreadRecord",
    "UserBusy",
    "utcnow",
]


class ChatStores(Protocol):
    """The stores the chat layer and the platforms use, each for its own job (``storage.Store``
    holds them all; a platform is handed this view, never the database).

    - ``runs``: a user's and a channel's runs, one by id, the progress message of a run;
    - ``threads``: a thread by key, and re-keying one to the message that opened it;
    - ``events``: platform deliveries recorded once across replicas;
    - ``files``: files sent on their own, kept for the next request;
    - ``contexts``: what a conversation was opened from (Slack's assistant threads).
    """

    @property
    def runs(self) -> RunStore: ...

    @property
    def threads(self) -> ThreadStore: ...

    @property
    def events(self) -> EventStore: ...

    @property
    def files(self) -> FileStore: ...

    @property
    def contexts(self) -> ContextStore: ...
