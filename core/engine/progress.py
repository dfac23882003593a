"""How the engine reports progress.

The engine only knows :class:`ProgressSink`; chat platforms show the events through the
shared ``bots.chat.delivery.ChatDelivery``, the console through ``bots.console``. Besides its
text, an event carries the run's plan as it stands (:class:`ProgressTask`: each search of an
iterative run, each sub-question of a graph run), for platforms that can show it (Slack's
plan and task blocks).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class ProgressKind(enum.StrEnum):
    STARTED = "started"
    READING = "reading"  # the files attached to the request
    PLANNING = "planning"
    SEARCHING = "searching"
    SEARCHED = "searched"
    WRITING = "writing"
    #: The report's cited claims checked against their sources (before it is posted).
    CHECKING = "checking"
    FINISHED = "finished"


class TaskStatus(enum.StrEnum):
    """Where one step of the plan stands (the values of Slack's task cards)."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    ERROR = "error"


@dataclass(frozen=True)
class TaskSource:
    """A page a step's search returned (an address from the search, never from a model)."""

    title: str
    url: str


@dataclass(frozen=True)
class ProgressTask:
    """One step of a run's plan: a search (iterative) or a sub-question (graph)."""

    #: Unique within the run's plan (``search-1``, ``node-q2``).
    id: str
    #: The topic searched or the sub-question (untrusted: a model planned it).
    title: str
    status: TaskStatus
    #: How many results its search returned.
    found: int = 0
    #: The first few of them that have a web address.
    sources: tuple[TaskSource, ...] = ()

    @property
    def done(self) -> bool:
        return self.status in (TaskStatus.COMPLETE, TaskStatus.ERROR)


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
    #: The run's plan as it stands (empty: no step yet, or not known here).
    tasks: tuple[ProgressTask, ...] = ()
    #: How many result pages are being read meanwhile (0: none, or not known).
    pages: int = 0

    @property
    def final(self) -> bool:
        """The last event of a run (its text says how the run ended)."""
        return self.kind is ProgressKind.FINISHED


def final_tasks(tasks: Iterable[ProgressTask]) -> tuple[ProgressTask, ...]:
    """The plan of a run that has ended: the steps it finished (a step it never got to, or
    left unfinished when it was cancelled, is not shown)."""
    return tuple(t for t in tasks if t.done)


class ProgressSink(Protocol):
    async def publish(self, event: ProgressEvent) -> None: ...


class NullProgress:
    """Discards progress (background runs nobody watches)."""

    async def publish(self, event: ProgressEvent) -> None:
        return None


def search_executed_text(done: int, depth: int) -> str:
    """The contract text after the ``done``-th search: ``1/3th search executed.``"""
    return f"{done}/{depth}th search executed."
