"""How the engine reports progress.

The engine only knows :class:`ProgressSink`; chat platforms show the events through the
shared ``bots.chat.delivery.ChatDelivery``, the console through ``bots.console``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class ProgressKind(enum.StrEnum):
    STARTED = "started"
    READING = "reading"  # the files attached to the request
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
    #: Rounds (iterative) or planner turns (graph) done so far.
    rounds_done: int
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
