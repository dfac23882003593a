"""The types every research strategy shares: the run's state, the hooks between its steps,
and why it stopped (the models it calls: :mod:`core.llm.protocols`)."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol, TypeVar
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from core.claims.summary import CheckSummary
from core.dates import UTC_ZONE, Clock, today_in, utcnow
from core.engine.progress import ProgressKind
from core.llm import LLMError
from core.models import ThreadVariables, Usage
from core.search.base import SearchProvider
from core.words.wording import Language, request_language

T = TypeVar("T", bound=BaseModel)


@dataclass
class RunSources:
    """What a run searches: the web (unless ``sources=internal``) and the internal sources
    (MCP servers, :mod:`core.knowledge`) its thread's channel may use, decided by the service
    from the run's own thread key when the run executes. Each is a :class:`SearchProvider`
    whose results carry its ``server`` name."""

    web: bool = True
    internal: tuple[SearchProvider, ...] = ()
    #: The internal sources left out for the rest of this run (they failed again).
    given_up: set[str] = field(default_factory=set)
    #: How many times in a row each internal source failed in this run (a timeout too).
    failures: dict[str, int] = field(default_factory=dict)
    #: The note of each internal source's first failure in a row (its place among the run's
    #: notes): a second failure replaces it with one note that it was left out.
    failure_notes: dict[str, int] = field(default_factory=dict)


class StopReason(enum.StrEnum):
    DEPTH_REACHED = "depth_reached"
    PLANNER_STOPPED = "planner_stopped"
    PLANNER_FAILED = "planner_failed"
    DUPLICATE_TOPICS = "duplicate_topics"
    CANCELLED = "cancelled"
    #: "Stop and write now": the searching ended early and the report is written.
    STOPPED = "stopped"
    #: The run's token budget (FATHOM_MAX_RUN_TOKENS, less the writer's reserve) is spent.
    TOKEN_BUDGET = "token_budget"
    #: The run's time budget (FATHOM_MAX_RUN_SECONDS) is spent.
    TIME_BUDGET = "time_budget"
    #: The requester's daily token quota (FATHOM_USER_DAILY_TOKENS) left the run no more,
    #: less the writer's reserve.
    TOKEN_QUOTA = "token_quota"

    @property
    def stopped_early(self) -> bool:
        """Whether the searching was ended before the planner or the depth ended it (the
        report is still written)."""
        return self in (
            StopReason.STOPPED,
            StopReason.TOKEN_BUDGET,
            StopReason.TIME_BUDGET,
            StopReason.TOKEN_QUOTA,
        )


@dataclass
class RunState:
    """Mutable state of one run; the variables belong to the run's thread."""

    run_id: str
    topic: str
    depth: int
    variables: ThreadVariables
    #: Rounds (iterative) or planner turns (graph) done; the run's ``rounds_done`` column.
    rounds_done: int = 0
    usage: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)
    #: The version of the thread's variables this state is based on (0: none stored yet).
    variables_version: int = 0
    #: The ids of the thread's files as last stored (a checkpoint writes them again only
    #: when they changed).
    files_saved: list[str] = field(default_factory=list)
    #: Whether a planner (or sub-question) call of this attempt answered.
    model_answered: bool = False
    #: The last model call of this attempt that failed.
    model_failure: LLMError | None = None
    #: The run's timezone: a digest's firing, its digest's; else ``FATHOM_TIMEZONE``.
    timezone: ZoneInfo = UTC_ZONE
    #: The current instant (the service's clock; tests pin it).
    clock: Clock = utcnow
    #: What this run searches (the service sets it from the run's thread when it executes).
    sources: RunSources = field(default_factory=RunSources)
    #: How the report's cited claims held against their sources and how many of its sentences
    #: state a number uncited (None: the writer wrote no report; no claims: none checked).
    claims: CheckSummary | None = None
    #: The writer model failed and the report is its findings listed (``fallback_body``).
    writer_fell_back: bool = False

    @property
    def today(self) -> date:
        """Today's date in the run's timezone, read when asked: every prompt is told it, and a
        run that goes on past midnight is told the new day."""
        return today_in(self.timezone, self.clock)

    @property
    def language(self) -> Language:
        """The language of the bot's words for this run (that of its topic)."""
        return request_language(self.topic)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


class Progress(Protocol):
    """Publish a step (``pages``: how many result pages are being read meanwhile)."""

    async def __call__(
        self, kind: ProgressKind, text: str, topic: str | None = None, *, pages: int = 0
    ) -> None: ...


@dataclass(frozen=True)
class StepHooks:
    """What the strategy calls between steps; the service supplies them.

    ``is_cancelled`` answers from memory, not from the database: the service keeps the flag
    from the run's start and from every checkpoint (which returns it), plus cancels made
    through this process. A cancel from elsewhere is seen at the next checkpoint, which
    precedes both places where the strategy asks.

    ``stop_reason`` answers the same way whether the searching must end now, and why: a
    "Stop and write now" request, or a spent budget. The strategy then starts no search
    (one in flight finishes and is used) and returns that reason; the report is written.
    """

    checkpoint: Callable[[RunState], Awaitable[None]]
    progress: Progress
    is_cancelled: Callable[[], bool]
    stop_reason: Callable[[], StopReason | None] = lambda: None
