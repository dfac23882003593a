"""The research service: requests become durable runs, runs become reports.

``submit`` writes the run row (deduplicated by the request's key) and returns at
once; ``execute`` runs it to the end, checkpointing every step, and always
leaves the run in a finished state (or, if the process dies, in ``running``
with a checkpoint that ``execute`` resumes from).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from core.engine.iterative import IterativeStrategy, JsonModel, RunState, StepHooks, StopReason
from core.jobs import SHUTDOWN
from core.llm import LLMError
from core.models import (
    ResearchRequest,
    RunStatus,
    Source,
    ThreadVariables,
    Usage,
)
from core.progress import (
    NullProgress,
    ProgressEvent,
    ProgressKind,
    ProgressSink,
    search_executed_text,
)
from core.prompts import FALLBACK_REPORT_INTRO, writer_messages
from core.report import (
    fallback_body,
    finalize_report,
    number_sources,
    report_language,
    writer_source_blocks,
)
from core.search import SearchProvider
from storage import RunRecord, Store

log = logging.getLogger(__name__)

#: At most this many sources (the most recent) are given to the writer.
MAX_WRITER_SOURCES = 60
#: The error of a run whose task was cancelled without a cancel request (Ctrl-C, SIGTERM).
INTERRUPTED = "interrupted"


def _interrupted(run: RunRecord) -> bool:
    return (
        run.status == RunStatus.CANCELLED.value
        and run.error == INTERRUPTED
        and not run.cancel_requested
    )


class TextModel(JsonModel, Protocol):
    async def complete(self, messages: list[dict[str, str]], *, usage: Usage) -> str: ...


@dataclass
class _CancelFlag:
    """Whether a cancel was requested for an executing run, as last seen."""

    requested: bool


class RunRejected(ValueError):
    """The request cannot start now (e.g. a run is already active in the thread)."""


class NoResults(Exception):
    """No search returned anything, so there is nothing to write a report from."""


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

    def as_json(self) -> dict[str, object]:
        """The ``fathom research --json`` contract (DESIGN.md)."""
        return {
            "run_id": self.run_id,
            "thread": self.thread,
            "status": self.status.value,
            "topics": self.topics,
            "report_markdown": self.report_markdown,
            "sources": [s.model_dump() for s in self.sources],
            "usage": self.usage.model_dump(),
            "seconds": round(self.seconds, 3),
            "stop_reason": self.stop_reason.value if self.stop_reason else None,
            "error": self.error,
            "notes": self.notes,
        }


def final_progress_text(outcome: RunOutcome) -> str:
    done, depth = len(outcome.topics), outcome.depth
    if outcome.status is RunStatus.FAILED:
        return f"Research failed after {done} of {depth} searches: {outcome.error}"
    if outcome.status is RunStatus.CANCELLED:
        return f"Research cancelled after {done} of {depth} searches."
    cited = f"{len(outcome.sources)} sources"
    if outcome.stop_reason in (StopReason.DEPTH_REACHED, None):
        return f"Research done: {done}/{depth} searches, {cited}."
    why = {
        StopReason.PLANNER_STOPPED: "the planner found nothing more worth searching",
        StopReason.PLANNER_FAILED: "the planner model failed",
        StopReason.DUPLICATE_TOPICS: "the planner only proposed topics already searched",
    }.get(outcome.stop_reason, str(outcome.stop_reason))
    return f"Research done, stopped early after {done} of {depth} searches ({why}); {cited}."


class ResearchService:
    def __init__(
        self,
        *,
        store: Store,
        planner: JsonModel,
        writer: TextModel,
        search: SearchProvider,
    ) -> None:
        self._store = store
        self._writer = writer
        self._strategy = IterativeStrategy(planner, search)
        # Runs executing in this process, with their cancel flag (see StepHooks.is_cancelled).
        self._executing: dict[str, _CancelFlag] = {}

    @property
    def store(self) -> Store:
        return self._store

    async def submit(
        self, request: ResearchRequest, *, new_thread: bool = False
    ) -> tuple[RunRecord, bool]:
        """Create the run row (or find the one this request already created).

        ``new_thread``: the caller made the thread key up for this request (a Slack slash
        command's ``pending-<trigger_id>``), so no other run can be active in it and the
        lookup is skipped; one transaction fewer on the acknowledgement path. A second
        delivery of the same request still finds its run through the dedupe key.
        """
        active = None if new_thread else await self._store.latest_run_in_thread(str(request.thread))
        if active is not None and not RunStatus(active.status).finished:
            if request.dedupe_key is not None and active.dedupe_key == request.dedupe_key:
                return active, False  # the same request delivered again
            raise RunRejected(
                f"A research is already running in this thread (run {active.id}); "
                "wait for it to finish or cancel it."
            )
        key = request.thread
        return await self._store.create_run(
            thread_key=str(key),
            platform=key.platform,
            workspace=key.workspace,
            channel=key.channel,
            thread_ref=key.thread,
            topic=request.topic,
            depth=request.depth,
            strategy=request.strategy.value,
            requested_by=request.requested_by,
            dedupe_key=request.dedupe_key,
        )

    async def execute(self, run_id: str, progress: ProgressSink | None = None) -> RunOutcome:
        """Run (or resume) a run to its end; returns the stored outcome if it already ended."""
        sink = progress or NullProgress()
        run = await self._store.get_run(run_id)
        if run is None:
            raise KeyError(f"no run {run_id!r}")
        if _interrupted(run):
            # Cancelled by an interruption, not by a person: resume it from its checkpoint.
            run = await self._store.requeue_run(run_id)
        elif RunStatus(run.status).finished:
            return await self._stored_outcome(run)
        resuming = run.status == RunStatus.RUNNING.value or run.rounds_done > 0
        run, raw = await self._store.begin_run(run_id)
        variables = ThreadVariables.model_validate(raw) if raw else ThreadVariables()
        if not resuming:
            variables.next_search_topic = None
            variables.should_continue = True
        state = RunState(
            run_id=run.id,
            topic=run.topic,
            depth=run.depth,
            variables=variables,
            searches_done=run.rounds_done,
            usage=Usage(
                llm_calls=run.llm_calls,
                prompt_tokens=run.prompt_tokens,
                completion_tokens=run.completion_tokens,
                searches=run.searches,
            ),
            notes=list(run.notes),
        )
        started = time.monotonic()

        async def publish(kind: ProgressKind, text: str, topic: str | None = None) -> None:
            event = ProgressEvent(run.id, kind, text, state.searches_done, state.depth, topic)
            try:
                await sink.publish(event)
            except Exception:  # showing progress must never break the research
                log.warning("progress sink failed for run %s", run.id, exc_info=True)

        cancel = _CancelFlag(run.cancel_requested)

        async def checkpoint(current: RunState) -> None:
            if await self._checkpoint(current):
                cancel.requested = True

        hooks = StepHooks(
            checkpoint=checkpoint, progress=publish, is_cancelled=lambda: cancel.requested
        )
        self._executing[run.id] = cancel
        status, error, reason = RunStatus.FAILED, None, None
        markdown: str | None = None
        sources: list[Source] = []
        try:
            verb = "Resuming" if resuming else "Researching"
            done = f" ({state.searches_done} of {state.depth} searches done)" if resuming else ""
            await publish(ProgressKind.STARTED, f"{verb} “{run.topic}”, depth {run.depth}{done}…")
            reason = await self._strategy.run(state, hooks)
            if reason is StopReason.CANCELLED:
                status = RunStatus.CANCELLED
            else:
                rounds = state.searches_done
                prefix = f"{search_executed_text(rounds, state.depth)} " if rounds else ""
                await publish(ProgressKind.WRITING, f"{prefix}Writing the report…")
                markdown, sources = await self._write(state)
                status = RunStatus.SUCCEEDED
        except asyncio.CancelledError as exc:
            if exc.args and exc.args[0] == SHUTDOWN:
                # A graceful shutdown: the checkpoint stays, any replica resumes the run.
                await asyncio.shield(self._store.release_run(run.id))
            else:
                status, error = RunStatus.CANCELLED, INTERRUPTED
                await asyncio.shield(self._finish(state, status, None, [], error))
            raise
        except NoResults as exc:
            error = str(exc)
        except Exception as exc:
            log.exception("run %s failed", run.id)
            error = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            if self._executing.get(run.id) is cancel:
                del self._executing[run.id]
        finished = await self._finish(state, status, markdown, sources, error)
        outcome = RunOutcome(
            run_id=run.id,
            thread=run.thread_key,
            status=status,
            topic=run.topic,
            depth=run.depth,
            topics=self._run_topics(state),
            report_markdown=markdown,
            sources=sources,
            usage=state.usage,
            seconds=finished.seconds or (time.monotonic() - started),
            stop_reason=reason,
            error=error,
            notes=state.notes,
        )
        await publish(ProgressKind.FINISHED, final_progress_text(outcome))
        return outcome

    async def resume(self, run_id: str, progress: ProgressSink | None = None) -> RunOutcome:
        """Run again from the checkpoint, also after a failure or a cancellation.

        A succeeded run is not repeated: its stored outcome is returned.
        """
        run = await self._store.get_run(run_id)
        if run is not None and run.status in (RunStatus.FAILED.value, RunStatus.CANCELLED.value):
            await self._store.requeue_run(run_id)
        return await self.execute(run_id, progress)

    async def cancel(self, run_id: str) -> bool:
        """Flag the run for cancellation; it stops at its next step (False: it has ended)."""
        requested = await self._store.request_cancel(run_id)
        flag = self._executing.get(run_id)
        if requested and flag is not None:
            flag.requested = True  # running here: no need to wait for its next checkpoint
        return requested

    # -- steps ----------------------------------------------------------------
    async def _checkpoint(self, state: RunState) -> bool:
        """Persist the state; True when a cancel has been requested for the run."""
        return await self._store.checkpoint(
            state.run_id,
            variables=state.variables.public_dict(),
            rounds_done=state.searches_done,
            usage=state.usage.model_dump(),
            notes=state.notes,
        )

    async def _finish(
        self,
        state: RunState,
        status: RunStatus,
        markdown: str | None,
        sources: list[Source],
        error: str | None,
    ) -> RunRecord:
        return await self._store.finish_run(
            state.run_id,
            status=status.value,
            report_markdown=markdown,
            sources=[(s.n, s.title, s.url) for s in sources],
            error=error,
            usage=state.usage.model_dump(),
            notes=state.notes,
        )

    async def _write(self, state: RunState) -> tuple[str, list[Source]]:
        findings = state.variables.findings
        numbered = number_sources(findings)[-MAX_WRITER_SOURCES:]
        if not numbered:
            errors = [f.error for f in findings if f.error]
            why = f" (last error: {errors[-1]})" if errors else ""
            raise NoResults(f"no search returned any results{why}")
        messages = writer_messages(
            topic=state.topic,
            language=report_language(state.topic),
            topics=state.variables.topics,
            sources=writer_source_blocks(numbered),
            notes=state.notes,
        )
        try:
            body = await self._writer.complete(messages, usage=state.usage)
        except LLMError as exc:
            log.warning("writer failed in run %s: %s", state.run_id, exc)
            state.note(f"The report writer model failed ({exc}); the raw findings are listed.")
            body = fallback_body(
                state.topic, findings, numbered, FALLBACK_REPORT_INTRO.format(reason=exc)
            )
        checked = finalize_report(body, numbered, state.topic, state.notes)
        if checked.removed_citations or checked.unlinked_urls:
            log.info(
                "run %s: removed %d citations to unknown sources, unlinked %d unknown URLs",
                state.run_id,
                checked.removed_citations,
                checked.unlinked_urls,
            )
        return checked.markdown, checked.sources

    @staticmethod
    def _run_topics(state: RunState) -> list[str]:
        topics = state.variables.topics
        return topics[len(topics) - state.searches_done :] if state.searches_done else []

    async def _stored_outcome(self, run: RunRecord) -> RunOutcome:
        raw = await self._store.load_variables(run.thread_id)
        variables = ThreadVariables.model_validate(raw) if raw else ThreadVariables()
        state = RunState(run.id, run.topic, run.depth, variables, run.rounds_done)
        sources = [
            Source(n=s.n, title=s.title, url=s.url) for s in await self._store.run_sources(run.id)
        ]
        return RunOutcome(
            run_id=run.id,
            thread=run.thread_key,
            status=RunStatus(run.status),
            topic=run.topic,
            depth=run.depth,
            topics=self._run_topics(state),
            report_markdown=run.report_markdown,
            sources=sources,
            usage=Usage(
                llm_calls=run.llm_calls,
                prompt_tokens=run.prompt_tokens,
                completion_tokens=run.completion_tokens,
                searches=run.searches,
            ),
            seconds=run.seconds or 0.0,
            error=run.error,
            notes=list(run.notes),
        )
