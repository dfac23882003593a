"""What a run came to: its outcome, as ``fathom research --json`` prints it and platforms
deliver it, and the last progress line, which says how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.claims.summary import CheckSummary
from core.engine.progress import ProgressTask, final_tasks
from core.engine.state import RunState, StopReason
from core.models import DEFAULT_STRATEGY, AttachedFile, Source, SourceKind, Usage
from core.values import RunStatus
from core.words import wording
from core.words.wording import request_language
from storage import RunRecord

if TYPE_CHECKING:
    from core.engine.strategy import Strategy
    from core.research.cost import Prices


@dataclass
class RunOutcome:
    run_id: str
    thread: str
    status: RunStatus
    topic: str
    depth: int
    topics: list[str]
    report_markdown: str | None
    sources: list[Source]
    usage: Usage
    seconds: float
    stop_reason: StopReason | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    strategy: str = DEFAULT_STRATEGY
    #: Rounds (iterative) or planner turns (graph) done.
    rounds_done: int = 0
    #: What its strategy adds to ``--json`` (``Strategy.details``: a graph run's ``nodes``).
    details: dict[str, Any] = field(default_factory=dict)
    #: The files attached in the thread that this run read.
    files: list[AttachedFile] = field(default_factory=list)
    #: What the run cost in US dollars (FATHOM_PRICES; None: no prices, or a model unpriced).
    cost: float | None = None
    #: The steps of its plan it finished (``core.engine.tasks``), for its final progress.
    tasks: tuple[ProgressTask, ...] = ()
    #: How its report's cited claims held against their sources, citing by the numbers of
    #: ``sources``, and its uncited factual sentences (None: not checked nor counted).
    claims: CheckSummary | None = None
    #: Its writer model failed, so its report is the findings listed (``fallback_body``);
    #: None: not known (an outcome read back from storage, which keeps only the note saying so).
    writer_fallback: bool | None = None

    def as_json(self) -> dict[str, object]:
        """The ``fathom research --json`` contract (README.md, "Using the CLI")."""
        data: dict[str, object] = {
            "run_id": self.run_id,
            "thread": self.thread,
            "status": self.status.value,
            "strategy": self.strategy,
            "topics": self.topics,
            "report_markdown": self.report_markdown,
            "sources": [s.model_dump() for s in self.sources],
            "usage": {**self.usage.model_dump(), "cost": self.cost},
            "seconds": round(self.seconds, 3),
            "stop_reason": self.stop_reason.value if self.stop_reason else None,
            "error": self.error,
            "notes": self.notes,
            "claims": (
                [c.model_dump() for c in self.claims.claims] if self.claims is not None else []
            ),
            "uncited_claims": self.claims.uncited if self.claims is not None else None,
            "claim_check": self.claims.as_json() if self.claims and self.claims.claims else None,
            "attachments": [
                f.model_dump(mode="json", exclude={"text", "run_id", "id"}) for f in self.files
            ],
        }
        return {**data, **self.details}


@dataclass(frozen=True)
class Ending:
    """How a run ended, beside what its state says (its usage, notes, rounds and files)."""

    status: RunStatus
    report_markdown: str | None = None
    sources: list[Source] = field(default_factory=list)
    stop_reason: StopReason | None = None
    error: str | None = None
    seconds: float = 0.0
    claims: CheckSummary | None = None
    writer_fallback: bool | None = None


def outcome_of(
    run: RunRecord,
    state: RunState,
    strategy: Strategy | None,
    ending: Ending,
    prices: Prices | None = None,
) -> RunOutcome:
    """The outcome of ``run`` (as recorded: its thread key is the one it ended in), which ended
    as ``ending`` with ``state``; ``strategy``: the run's (None: none of its name is
    registered), which names its topics, details and plan; ``prices`` (FATHOM_PRICES) price
    it. The one place an outcome is put together: a run executed here, or read back."""
    return RunOutcome(
        run_id=run.id,
        thread=run.thread_key,
        status=ending.status,
        topic=run.topic,
        depth=run.depth,
        topics=strategy.run_topics(state) if strategy is not None else [],
        report_markdown=ending.report_markdown,
        sources=ending.sources,
        usage=state.usage,
        seconds=ending.seconds,
        stop_reason=ending.stop_reason,
        error=ending.error,
        notes=state.notes,
        strategy=run.strategy,
        rounds_done=state.rounds_done,
        details=strategy.details(state) if strategy is not None else {},
        files=[f for f in state.variables.files if f.run_id == run.id],
        cost=prices.cost(state.usage) if prices is not None else None,
        tasks=final_tasks(strategy.tasks(state, None) if strategy is not None else ()),
        claims=ending.claims,
        writer_fallback=ending.writer_fallback,
    )


def usage_of(run: RunRecord) -> Usage:
    """A run's counters as stored."""
    return Usage(
        llm_calls=run.llm_calls,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        searches=run.searches,
        pages_read=run.pages_read,
        pages_skipped=run.pages_skipped,
        attachments_read=run.attachments_read,
        internal_searches=run.internal_searches,
        verifier_calls=run.verifier_calls,
        verifier_prompt_tokens=run.verifier_prompt_tokens,
        verifier_completion_tokens=run.verifier_completion_tokens,
        tokens_by_model={m: list(t) for m, t in (run.tokens_by_model or {}).items()},
        seconds_by_step=dict(run.seconds_by_step or {}),
    )


def stored_claims(run: RunRecord) -> CheckSummary | None:
    """How a finished run's report's claims held, as recorded with it (None: not checked,
    or recorded by a release that did not check)."""
    return CheckSummary.model_validate(run.claim_check) if run.claim_check is not None else None


def stored_stop_reason(run: RunRecord) -> StopReason | None:
    """Why a finished run's searching ended, as recorded with its outcome (None before
    migration 0015, or for a value this release does not know)."""
    try:
        return StopReason(run.stop_reason) if run.stop_reason else None
    except ValueError:
        return None


def stopped_with_nothing(status: RunStatus, reason: StopReason | None) -> bool:
    """Whether "Stop and write now" came before any search found anything: the run ended
    without a report (recorded ``cancelled``, stopped)."""
    return status is RunStatus.CANCELLED and reason is StopReason.STOPPED


def final_progress_text(outcome: RunOutcome) -> str:
    """The last status of a run, in the language of its topic: how it ended, then (unless it
    failed: its one line is the reason) how its report's cited claims held, when they were
    checked, and what it spent (``wording.usage_line``)."""
    if outcome.status is RunStatus.FAILED:
        return ending_text(outcome)
    usage, language = outcome.usage, request_language(outcome.topic)
    lines = [ending_text(outcome)]
    check = outcome.claims
    if check is not None and check.claims and outcome.report_markdown:
        lines.append(check.note(language))
    spent = wording.usage_line(
        language,
        searches=usage.searches,
        pages=usage.pages_read,
        tokens=usage.prompt_tokens + usage.completion_tokens,
        cost=outcome.cost,
        seconds=outcome.seconds,
    )
    return "\n".join([*lines, spent])


def ending_text(outcome: RunOutcome) -> str:
    """How a run ended, in one line in the language of its topic (why, if it failed)."""
    done, depth, language = outcome.rounds_done, outcome.depth, request_language(outcome.topic)
    if outcome.status is RunStatus.FAILED:
        return wording.failed_text(language, done, depth, outcome.error)
    if stopped_with_nothing(outcome.status, outcome.stop_reason):
        return wording.stopped_before_search_text(language, done, depth)
    if outcome.status is RunStatus.CANCELLED:
        return wording.cancelled_text(language, done, depth)
    sources, pages = len(outcome.sources), outcome.usage.pages_read
    files = outcome.usage.attachments_read
    internal = sum(1 for s in outcome.sources if s.kind == SourceKind.INTERNAL)
    if outcome.stop_reason in (StopReason.DEPTH_REACHED, None):
        return wording.done_text(language, done, depth, sources, pages, files, internal)
    why = str(outcome.stop_reason.value)
    return wording.stopped_early_text(language, done, depth, sources, why, pages, files, internal)
