"""Following a run asked for over MCP, from the process holding the caller's connection:
its progress rows as they are written (by whichever process executes it), then its result.

:class:`RunFollower` reads the run's new ``mcp_progress`` rows and its row every
:data:`POLL` seconds, at once when this process wrote a row (``bots.mcp.delivery.Wakeup``),
and stops once the run has finished and its delivery ended (its last row, the final status,
is then written). So progress reaches the caller whether a worker or this process executes
the run, and a caller that comes back (a follow-up) finds the run as it is.

:func:`research_result` is what the caller gets back: the run's stored outcome (the same one
``fathom research --json`` prints, ``core.research.outcome.RunOutcome``) as the tool's
structured content (:class:`ResearchResult`, whose JSON Schema is the tool's
``outputSchema``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from pydantic import BaseModel, Field

from bots.mcp.delivery import Wakeup
from core.chat.stores import ChatProgress, ProgressRecord, RunRecord
from core.research.outcome import RunOutcome
from core.values import DeliveryState
from core.words.wording import request_language

#: How often a followed run's rows and row are read when nothing wakes the follower (seconds).
POLL = 0.15


class RunReader(Protocol):
    async def get_run(self, run_id: str) -> RunRecord | None: ...


class RunGone(LookupError):
    """The followed run is not stored any more (pruned, forgotten)."""


def ended(run: RunRecord) -> bool:
    """Whether the run has finished and its delivery ended (its final status row written)."""
    return run.status.finished and run.delivery != DeliveryState.PENDING


class RunFollower:
    """The progress rows of runs, as they come (see the module)."""

    def __init__(
        self,
        runs: RunReader,
        rows: ChatProgress,
        *,
        wakeup: Wakeup | None = None,
        poll: float = POLL,
    ) -> None:
        self._runs = runs
        self._rows = rows
        self._wakeup = wakeup
        self._poll = poll

    async def follow(self, run_id: str, after: int = 0) -> AsyncIterator[ProgressRecord]:
        """The run's rows numbered after ``after``, in order, as they are written, until the
        run has :func:`ended`; :class:`RunGone` when it is not stored."""
        woken = asyncio.Event()
        if self._wakeup is not None:
            self._wakeup.listen(run_id, woken)
        try:
            while True:
                woken.clear()
                run = await self._runs.get_run(run_id)  # first: rows written before it are read
                for row in await self._rows.since(run_id, after):
                    after = row.seq
                    yield row
                if run is None:
                    raise RunGone(run_id)
                if ended(run):
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), self._poll)
        finally:
            if self._wakeup is not None:
                self._wakeup.forget(run_id, woken)


class SourceEntry(BaseModel):
    """One numbered source of the report."""

    n: int
    title: str
    url: str
    published: str | None = None
    kind: str = "web"


class ClaimCheck(BaseModel):
    """How the report's cited claims held against their sources."""

    line: str = Field(description="The claim check in one line, in the report's language.")
    supported: int
    claims: int
    fixed: int
    unchecked: int
    partial: bool


class UsageEntry(BaseModel):
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    searches: int


class ResearchResult(BaseModel):
    """The ``research`` tool's structured content (its ``outputSchema``)."""

    run_id: str
    status: str = Field(description="succeeded, failed or cancelled.")
    thread: str = Field(description="Pass it back as `thread` to follow up in this research.")
    sources: list[SourceEntry] = Field(default_factory=list)
    claim_check: ClaimCheck | None = None
    usage: UsageEntry
    cost: float | None = Field(None, description="US dollars, when prices are configured.")


def result_of(outcome: RunOutcome) -> ResearchResult:
    """The structured content of a finished run's outcome."""
    check = outcome.claims
    claim_check = None
    if check is not None and check.claims:
        claim_check = ClaimCheck(
            line=check.note(request_language(outcome.topic)),
            supported=check.supported,
            claims=len(check.claims),
            fixed=check.fixed,
            unchecked=check.unchecked,
            partial=check.partial,
        )
    usage = outcome.usage
    return ResearchResult(
        run_id=outcome.run_id,
        status=outcome.status.value,
        thread=outcome.thread.rsplit(":", 1)[-1],
        sources=[
            SourceEntry(n=s.n, title=s.title, url=s.url, published=s.published, kind=s.kind)
            for s in outcome.sources
        ],
        claim_check=claim_check,
        usage=UsageEntry(
            llm_calls=usage.llm_calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            searches=usage.searches,
        ),
        cost=outcome.cost,
    )


Outcomes = Callable[[RunRecord], Awaitable[RunOutcome]]


async def research_result(
    runs: RunReader, outcomes: Outcomes, run_id: str
) -> tuple[RunOutcome, ResearchResult]:
    """The finished run's stored outcome (``outcomes``: ``ResearchJob.stored_outcome``)
    and its structured content; :class:`RunGone` when it is not stored."""
    run = await runs.get_run(run_id)
    if run is None:
        raise RunGone(run_id)
    outcome = await outcomes(run)
    return outcome, result_of(outcome)
