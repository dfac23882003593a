"""How the engine reports progress, and how a chat platform is asked to show it.

The engine only knows :class:`ProgressSink`. A platform adapter implements
:class:`Messenger` (post in a thread, edit a message, post a long report) and
wraps it in :class:`MessengerProgress`, so the progress texts are the same on
every platform.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from core.models import ThreadKey


class ProgressKind(enum.StrEnum):
    STARTED = "started"
    PLANNING = "planning"
    SEARCHING = "searching"
    SEARCHED = "searched"
    WRITING = "writing"
    FINISHED = "finished"


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a run, with the platform-neutral text to show for it."""

    run_id: str
    kind: ProgressKind
    text: str
    searches_done: int
    depth: int
    topic: str | None = None

    @property
    def final(self) -> bool:
        """The last event of a run (its text says how the run ended)."""
        return self.kind is ProgressKind.FINISHED


class ProgressSink(Protocol):
    async def publish(self, event: ProgressEvent) -> None: ...


class NullProgress:
    """Discards progress (background runs nobody watches)."""

    async def publish(self, event: ProgressEvent) -> None:
        return None


def search_executed_text(done: int, depth: int) -> str:
    """The contract text after the ``done``-th search: ``1/3th search executed.``"""
    return f"{done}/{depth}th search executed."


class Messenger(Protocol):
    """What core needs from a chat platform; ids are the platform's message ids."""

    async def post_message(self, thread: ThreadKey, text: str) -> str: ...

    async def edit_message(self, thread: ThreadKey, message_id: str, text: str) -> None: ...

    async def post_report(self, thread: ThreadKey, markdown: str) -> None: ...


class MessengerProgress:
    """Shows progress as one message in the thread, edited in place.

    ``message_id`` may be given when the adapter already posted the progress
    message (its id is stored on the run row so a resumed run edits the same one).
    """

    def __init__(
        self, messenger: Messenger, thread: ThreadKey, message_id: str | None = None
    ) -> None:
        self._messenger = messenger
        self._thread = thread
        self.message_id = message_id

    async def publish(self, event: ProgressEvent) -> None:
        if self.message_id is None:
            self.message_id = await self._messenger.post_message(self._thread, event.text)
        else:
            await self._messenger.edit_message(self._thread, self.message_id, event.text)
