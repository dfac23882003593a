"""The iterative research strategy: plan one search, run it, repeat up to ``depth``.

Each round the planner model reads the topic, the findings so far and the topics
already searched and answers ``{"nextSearchTopic", "shouldContinue"}``. A topic
that repeats an earlier one (normalised or nearly the same) is never searched
again. The state is checkpointed after the plan and after the search, so a run
that is interrupted resumes without repeating a finished search or plan.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from pydantic import BaseModel

from core.engine.topics import find_duplicate
from core.llm import LLMError
from core.models import Finding, PlannerDecision, SearchResult, ThreadVariables, Usage
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

    @property
    def language(self) -> Language:
        """The language of the bot's words for this run (that of its topic)."""
        return request_language(self.topic)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


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


class IterativeStrategy:
    def __init__(self, planner: JsonModel, search: SearchProvider) -> None:
        self._planner = planner
        self._search = search

    async def run(self, state: RunState, hooks: StepHooks) -> StopReason:
        variables = state.variables
        while state.searches_done < state.depth:
            if hooks.is_cancelled():
                return StopReason.CANCELLED
            topic = self._pending_topic(variables)
            if topic is None:
                planned = await self._plan(state)
                if isinstance(planned, StopReason):
                    variables.should_continue = False
                    variables.next_search_topic = None
                    await hooks.checkpoint(state)
                    return planned
                topic = planned
                variables.next_search_topic = topic
                variables.should_continue = True
                await hooks.checkpoint(state)
                if hooks.is_cancelled():
                    return StopReason.CANCELLED
            await hooks.progress(ProgressKind.SEARCHING, searching_text(state, topic), topic)
            finding = await self._run_search(state, topic)
            variables.findings.append(finding)
            variables.topics.append(topic)
            state.searches_done += 1
            await hooks.checkpoint(state)
            text = search_executed_text(state.searches_done, state.depth)
            if finding.error:
                text += f" {search_failed_words(state.language)}"
            await hooks.progress(ProgressKind.SEARCHED, text, topic)
        return StopReason.DEPTH_REACHED

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
                return self._fallback_topic(state, f"The planner model failed ({exc}).")
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
        state.usage.searches += 1
        try:
            results: list[SearchResult] = await self._search.search(topic)
        except SearchError as exc:
            state.note(f'The search for "{topic}" failed: {exc}.')
            return Finding(topic=topic, error=str(exc))
        except Exception as exc:  # a broken provider must not kill the run
            log.exception("search provider crashed on %r", topic)
            state.note(f'The search for "{topic}" failed: {type(exc).__name__}.')
            return Finding(topic=topic, error=type(exc).__name__)
        return Finding(topic=topic, results=results)
