"""The iterative research strategy: plan one search, run it, repeat up to ``depth``.

Each round the planner model reads the topic, the findings so far and the topics
already searched and answers ``{"nextSearchTopic", "shouldContinue"}``. A topic
that repeats an earlier one (normalised or nearly the same) is never searched
again. The state is checkpointed after the plan and after the search, so a run
that is interrupted resumes without repeating a finished search or plan.

With a page reader, the best result pages of each search are read while the planner plans the
next round (the planner works from snippets, so it need not wait for them); once the plan is
checkpointed, their passages are attached to the round's finding and checkpointed too, before
the next search. A run interrupted before its pages were attached reads them when it resumes
(cheaply: read pages are cached).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel

from core.engine.topics import find_duplicate
from core.llm import LLMError
from core.models import (
    Finding,
    NodeStatus,
    PageExcerpt,
    PlannerDecision,
    SearchResult,
    ThreadVariables,
    Usage,
)
from core.pages.reader import PageReader, RoundReading
from core.progress import ProgressKind, search_executed_text
from core.prompts import planner_duplicate_message, planner_messages
from core.search import SearchError, SearchProvider
from core.wording import Language, request_language, search_failed_words, searching_words

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

#: How much of the findings the planner sees each round (keeps prompts bounded).
DIGEST_RESULTS_PER_FINDING = 3
DIGEST_SNIPPET_CHARS = 160
DIGEST_MAX_LINES = 36


class JsonModel(Protocol):
    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: type[T],
        *,
        usage: Usage,
        schema_name: str = "answer",
    ) -> T: ...


class StopReason(enum.StrEnum):
    DEPTH_REACHED = "depth_reached"
    PLANNER_STOPPED = "planner_stopped"
    PLANNER_FAILED = "planner_failed"
    DUPLICATE_TOPICS = "duplicate_topics"
    CANCELLED = "cancelled"


@dataclass
class RunState:
    """Mutable state of one run; the variables belong to the run's thread."""

    run_id: str
    topic: str
    depth: int
    variables: ThreadVariables
    searches_done: int = 0
    usage: Usage = field(default_factory=Usage)
    notes: list[str] = field(default_factory=list)
    #: The version of the thread's variables this state is based on (0: none stored yet).
    variables_version: int = 0
    #: Whether a planner (or sub-question) call of this attempt answered.
    model_answered: bool = False
    #: The last model call of this attempt that failed.
    model_failure: LLMError | None = None

    @property
    def language(self) -> Language:
        """The language of the bot's words for this run (that of its topic)."""
        return request_language(self.topic)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def analysis_obtained(self) -> bool:
        """Whether the model analysed anything for this run: a planner or sub-question call
        answered in this attempt, or (a resumed run) its checkpoint shows one did before.

        Only the planner proposes a topic other than the run's own, and only an answer marks
        a sub-question answered.
        """
        if self.model_answered:
            return True
        own = [n for n in self.variables.graph if n.run_id == self.run_id]
        if own:
            return any(n.status is NodeStatus.ANSWERED or n.question != self.topic for n in own)
        topics = self.variables.topics[-self.searches_done :] if self.searches_done else []
        planned = self.variables.next_search_topic
        return any(t != self.topic for t in topics) or planned not in (None, self.topic)


@dataclass(frozen=True)
class StepHooks:
    """What the strategy calls between steps; the service supplies them.

    ``is_cancelled`` answers from memory, not from the database: the service keeps the flag
    from the run's start and from every checkpoint (which returns it), plus cancels made
    through this process. A cancel from elsewhere is seen at the next checkpoint, which
    precedes both places where the strategy asks.
    """

    checkpoint: Callable[[RunState], Awaitable[None]]
    progress: Callable[[ProgressKind, str, str | None], Awaitable[None]]
    is_cancelled: Callable[[], bool]


def findings_digest(findings: list[Finding]) -> list[str]:
    lines: list[str] = []
    for finding in findings:
        if finding.error and not finding.results:
            lines.append(f"[{finding.topic}] (search failed)")
        for result in finding.results[:DIGEST_RESULTS_PER_FINDING]:
            snippet = result.snippet[:DIGEST_SNIPPET_CHARS]
            lines.append(f"[{finding.topic}] {result.title}: {snippet}".rstrip(": "))
    return lines[-DIGEST_MAX_LINES:]


def searching_text(state: RunState, topic: str) -> str:
    """Keeps the last ``i/depth th search executed.`` visible while the next search runs.

    Platforms coalesce edits of the progress message, so every status after the i-th
    search repeats its line; whichever edit lands, the count is shown.
    """
    done = state.searches_done
    prefix = f"{search_executed_text(done, state.depth)} " if done else ""
    return f"{prefix}{searching_words(state.language, topic)}"


class PageReading:
    """The page reading of findings, running in the background until :meth:`attach`."""

    def __init__(self, reader: PageReader, topic: str, findings: list[Finding]) -> None:
        self._findings = findings
        self._tasks = [
            asyncio.create_task(
                reader.read([r.url for r in finding.results], f"{topic} {finding.topic}")
            )
            for finding in findings
        ]

    async def attach(self, state: RunState) -> None:
        """Wait for the pages and keep their passages in the findings (and count them)."""
        for finding, task in zip(self._findings, self._tasks, strict=True):
            try:
                reading = await task
            except Exception as exc:  # reading is a bonus: a run never fails because of it
                log.warning("reading the pages of %r failed", finding.topic, exc_info=True)
                reading = RoundReading()
                state.note(
                    f'The result pages of "{finding.topic}" could not be read '
                    f"({type(exc).__name__}); its snippets were used."
                )
            finding.pages = [PageExcerpt(url=p.url, passages=p.passages) for p in reading.pages]
            state.usage.pages_read += reading.read
            state.usage.pages_skipped += len(reading.skipped)
            if reading.skipped:
                skipped = "; ".join(f"{_host(s.url)} ({s.reason})" for s in reading.skipped)
                state.note(f'Result pages left out for "{finding.topic}": {skipped}.')

    async def cancel(self) -> None:
        """Stop the reading and wait until it has stopped."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


_HOST = re.compile(r"[a-z0-9.-]{1,100}")


def _host(url: str) -> str:
    """The page's host for a note (notes reach the writer outside the fence): only when it
    looks like one."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return "a page"
    return host if _HOST.fullmatch(host) else "a page"


class IterativeStrategy:
    def __init__(
        self, planner: JsonModel, search: SearchProvider, reader: PageReader | None = None
    ) -> None:
        self._planner = planner
        self._search = search
        self._reader = reader

    async def run(self, state: RunState, hooks: StepHooks) -> StopReason:
        reading = self._read(state, self._unread(state))
        try:
            reason = await self._rounds(state, hooks, reading)
        finally:
            for pending in reading:
                await pending.cancel()
        return reason

    async def _rounds(
        self, state: RunState, hooks: StepHooks, reading: list[PageReading]
    ) -> StopReason:
        """The rounds; ``reading`` holds the page reading in progress (at most one)."""
        variables = state.variables

        async def attach_pages() -> None:
            while reading:  # removed only once attached: the caller cancels what is left
                await reading[-1].attach(state)
                reading.pop()

        while state.searches_done < state.depth:
            if hooks.is_cancelled():
                return StopReason.CANCELLED
            topic = self._pending_topic(variables)
            if topic is None:
                planned = await self._plan(state)  # meanwhile, the last round's pages are read
                if isinstance(planned, StopReason):
                    variables.should_continue = False
                    variables.next_search_topic = None
                    await attach_pages()
                    await hooks.checkpoint(state)
                    return planned
                topic = planned
                variables.next_search_topic = topic
                variables.should_continue = True
                await hooks.checkpoint(state)  # the plan is kept while the pages finish
                if hooks.is_cancelled():
                    return StopReason.CANCELLED
            if reading:
                await attach_pages()
                await hooks.checkpoint(state)
            await hooks.progress(ProgressKind.SEARCHING, searching_text(state, topic), topic)
            finding = await self._run_search(state, topic)
            variables.findings.append(finding)
            variables.topics.append(topic)
            state.searches_done += 1
            reading += self._read(state, [finding])
            await hooks.checkpoint(state)
            text = search_executed_text(state.searches_done, state.depth)
            if finding.error:
                text += f" {search_failed_words(state.language)}"
            await hooks.progress(ProgressKind.SEARCHED, text, topic)
        if reading:
            await attach_pages()
            await hooks.checkpoint(state)
        return StopReason.DEPTH_REACHED

    def _read(self, state: RunState, findings: list[Finding]) -> list[PageReading]:
        """Start reading the pages of ``findings`` (nothing when reading is off)."""
        findings = [f for f in findings if f.results]
        if self._reader is None or self._reader.pages <= 0 or not findings:
            return []
        return [PageReading(self._reader, state.topic, findings)]

    @staticmethod
    def _unread(state: RunState) -> list[Finding]:
        """This run's findings whose pages were not read before it was interrupted."""
        if state.searches_done == 0:
            return []
        own = state.variables.findings[-state.searches_done :]
        return [f for f in own if f.pages is None and f.results]

    @staticmethod
    def _pending_topic(variables: ThreadVariables) -> str | None:
        """A topic planned before an interruption and not searched yet."""
        topic = variables.next_search_topic
        if topic and variables.should_continue and topic not in variables.topics:
            return topic
        return None

    async def _plan(self, state: RunState) -> str | StopReason:
        variables = state.variables
        messages = planner_messages(
            topic=state.topic,
            round_number=state.searches_done + 1,
            depth=state.depth,
            topics=variables.topics,
            findings_digest=findings_digest(variables.findings),
        )
        for attempt in range(2):
            try:
                decision = await self._planner.complete_json(
                    messages, PlannerDecision, usage=state.usage, schema_name="planner_decision"
                )
            except LLMError as exc:
                log.warning("planner failed in run %s: %s", state.run_id, exc)
                state.model_failure = exc
                return self._fallback_topic(state, f"The planner model failed ({exc}).")
            state.model_answered = True
            proposed = decision.next_search_topic
            if not decision.should_continue or proposed is None:
                if not any(f.results for f in variables.findings):
                    # Nothing known yet: stopping would leave nothing to report on.
                    return self._fallback_topic(state, None)
                return StopReason.PLANNER_STOPPED
            duplicate = find_duplicate(proposed, variables.topics)
            if duplicate is None:
                return proposed
            log.info("planner proposed %r again (same as %r)", proposed, duplicate)
            if attempt == 0:
                messages = [
                    *messages,
                    {"role": "assistant", "content": decision.model_dump_json(by_alias=True)},
                    planner_duplicate_message(proposed, duplicate),
                ]
        state.note("The planner kept proposing topics that were already searched, so it stopped.")
        return StopReason.DUPLICATE_TOPICS

    def _fallback_topic(self, state: RunState, note: str | None) -> str | StopReason:
        """Search the user's own topic when the planner gives nothing and it is unsearched."""
        if state.searches_done == 0 and find_duplicate(state.topic, state.variables.topics) is None:
            if note:
                state.note(note + " The topic itself was searched instead.")
            return state.topic
        if note:
            state.note(note + " Research stopped early.")
        return StopReason.PLANNER_FAILED

    async def _run_search(self, state: RunState, topic: str) -> Finding:
        return await search_topic(self._search, state, topic)


async def search_topic(search: SearchProvider, state: RunState, topic: str) -> Finding:
    """Search ``topic`` (query only): its results, or a finding that says why there are none
    (noted for the report); a run never fails because of a search."""
    state.usage.searches += 1
    try:
        results: list[SearchResult] = await search.search(topic)
    except SearchError as exc:
        state.note(f'The search for "{topic}" failed: {exc}.')
        return Finding(topic=topic, error=str(exc))
    except Exception as exc:  # a broken provider must not kill the run
        log.exception("search provider crashed on %r", topic)
        state.note(f'The search for "{topic}" failed: {type(exc).__name__}.')
        return Finding(topic=topic, error=type(exc).__name__)
    return Finding(topic=topic, results=results)
