"""The run executor: runs become reports.

A runner ``claim``s a run (``fathom serve``'s in-process runner, a ``fathom worker``'s job,
the CLI), holds it with a :class:`~core.research.lease.Lease` and calls ``execute_claimed``, which
runs it to the end, checkpointing every step, and always leaves the run in a finished state;
if the process dies, the run stays ``running`` with a checkpoint that the next claim resumes
from. ``execute`` does all three for callers that run one research themselves (the CLI).

The run's strategy (looked up by its name) researches it, :mod:`core.research.writer` writes its
report, :mod:`core.research.steps` writes it down, and :mod:`core.research.outcome` is what it came
to. What people ask of runs (create, stop, cancel, steer, vote) is :mod:`core.research.requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from core.dates import Clock, utcnow, zone
from core.engine.budget import RunBudget, StepMeter
from core.engine.files import FileReader, PlatformFiles
from core.engine.progress import (
    NullProgress,
    ProgressEvent,
    ProgressKind,
    ProgressSink,
    ProgressTask,
    final_tasks,
    search_executed_text,
)
from core.engine.state import RunState, StepHooks, StopReason
from core.engine.strategy import Strategy
from core.models import CONSOLE_PLATFORM, Attachment, Source, ThreadVariables, Usage
from core.research.cost import Prices
from core.research.executing import LocalRuns, RunFlags, WritingCancelled, unless_cancelled
from core.research.lease import (
    LOST_CLAIM,
    Lease,
    LeaseTiming,
    holder_is_gone,
    release_quietly,
    runner_identity,
)
from core.research.outcome import (
    RunOutcome,
    final_progress_text,
    stored_claims,
    stored_stop_reason,
    usage_of,
)
from core.research.requests import UserQuota, day_of, rejected
from core.research.steps import (
    InternalSources,
    NoInternalSource,
    count_finished,
    delivers,
    finish,
    run_sources,
    save_checkpoint,
    spent_before_search,
    stopped_words,
)
from core.research.writer import ModelUnavailable, NoResults, ReportWriter, has_material
from core.untrusted import shown_name
from core.values import RunStatus
from core.words import note_words, wording
from storage import (
    Claim,
    ClaimLost,
    ClaimResult,
    ClaimStore,
    DigestStore,
    RunRecord,
    RunStore,
    StorageUnavailable,
    ThreadBusy,
    ThreadStore,
)

if TYPE_CHECKING:
    from core.metrics import Metrics  # (prometheus-client is imported by `fathom serve` only)

log = logging.getLogger("core.service")  # (where these lines were always logged)

#: The error of a run whose task was cancelled without a cancel request (Ctrl-C, SIGTERM).
INTERRUPTED = "interrupted"


def _seconds_before(run: RunRecord) -> float:
    """How long ago the claimed ``run`` first started (its claim stamped ``heartbeat_at``)."""
    if run.started_at is None or run.heartbeat_at is None:
        return 0.0
    return max(0.0, (run.heartbeat_at - run.started_at).total_seconds())


def _interrupted(run: RunRecord) -> bool:
    return (
        run.status == RunStatus.CANCELLED.value
        and run.error == INTERRUPTED
        and not run.cancel_requested
    )


class RunBusy(RuntimeError):
    """Another live runner holds the run; it is taken over only if that runner stops."""

    def __init__(self, run: RunRecord) -> None:
        super().__init__(
            f"run {run.id} is being worked on by {run.owner or 'another process'}; "
            "it is taken over automatically if that process stops"
        )
        self.run = run


class RunExecutor:
    """Runs executed: claimed, held, researched, written up and finished (see the module
    docstring)."""

    def __init__(
        self,
        *,
        runs: RunStore,
        claims: ClaimStore,
        threads: ThreadStore,
        digests: DigestStore,
        strategies: Mapping[str, Strategy],
        writer: ReportWriter,
        local: LocalRuns | None = None,
        owner: str | None = None,
        timing: LeaseTiming | None = None,
        max_attempts: int = 3,
        files: FileReader | None = None,
        knowledge: InternalSources | None = None,
        budget: RunBudget | None = None,
        quota: UserQuota | None = None,
        timezone: str | ZoneInfo = "UTC",
        clock: Clock = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
        prices: Prices | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """The stores it reads and writes runs through; ``strategies`` research a run by its
        strategy's name and ``writer`` writes its report; ``local``: the registry of the runs
        executing here, shared with the request service (a stop or cancel taken here reaches
        the run at once). ``owner`` names this process's claims (default: host, pid and a
        random part); ``timing`` sets the lease (FATHOM_STALE_RUN_AFTER); a run is claimed
        at most ``max_attempts`` times before it fails (FATHOM_MAX_ATTEMPTS). ``files``
        reads the files attached to a run's request (None: they are noted as not read).
        ``knowledge``: the internal sources (MCP servers); which of them a run searches is
        decided from the run's own thread key when it executes (None: the web only).
        ``budget``: the tokens and seconds a run's searching may take (FATHOM_MAX_RUN_TOKENS,
        FATHOM_MAX_RUN_SECONDS; None: unlimited), its seconds on ``monotonic``; ``quota``
        (FATHOM_USER_DAILY_TOKENS): a chat run's share of its requester's day (its
        ``token_allowance``) caps its budget, and grows while the day has room.
        ``timezone`` (FATHOM_TIMEZONE) is that of today's date in the prompts and reports (a
        digest's firing: its digest's); ``clock`` tells the time (tests pin it). ``prices``
        (FATHOM_PRICES) price the outcome; ``metrics`` counts finished runs."""
        self._runs = runs
        self._claims = claims
        self._threads = threads
        self._digests = digests
        self._strategies = dict(strategies)
        self._writer = writer
        self._local = local or LocalRuns()
        self.owner = owner or runner_identity()
        self.timing = timing or LeaseTiming()
        self._max_attempts = max_attempts
        self._files = files
        self._knowledge = knowledge
        self._budget = budget or RunBudget()
        self._quota = quota or UserQuota()
        self._timezone = timezone if isinstance(timezone, ZoneInfo) else zone(timezone)
        self._clock = clock
        self._monotonic = monotonic
        self._prices = prices
        self.metrics = metrics

    # -- the run lifecycle ------------------------------------------------------
    async def claim(self, run_id: str, *, from_dead_owner: str | None = None) -> ClaimResult:
        """Try to take the run for this process (see ``Store.claim_run``).

        ``from_dead_owner``: take it now, without waiting for the lease, but only while that
        owner (known to be dead) still holds it.
        """
        result = await self._claims.claim_run(
            run_id,
            self.owner,
            stale_after=0.0 if from_dead_owner else self.timing.stale_after,
            max_attempts=self._max_attempts,
            from_owner=from_dead_owner,
            console_platform=CONSOLE_PLATFORM,
        )
        if result.claim is not None and result.how is not None and self.metrics is not None:
            self.metrics.claims_taken.labels(result.how).inc()
        return result

    def lease(self, claim: Claim) -> Lease:
        """``async with executor.lease(claim):`` keeps the claim alive while the body runs; a
        cancel requested meanwhile (by any replica) reaches the run here at the next
        heartbeat, also while no step checks for it (its report being written)."""
        return Lease(
            self._claims,
            claim,
            self.timing,
            on_cancel_requested=lambda: self._local.cancel(claim.run_id),
        )

    async def execute(
        self,
        run_id: str,
        progress: ProgressSink | None = None,
        files: PlatformFiles | None = None,
    ) -> RunOutcome:
        """Claim the run, hold it and run it to its end (or resume it from its checkpoint).

        For callers that run one research themselves (the CLI, tests). A finished run is
        not repeated: its stored outcome is returned. Raises :class:`RunBusy` when a live
        runner holds it. A chat run finished here is handed back at once, so that a
        ``fathom serve`` replica delivers its outcome to the thread.
        """
        run = await self._runs.get_run(run_id)
        if run is None:
            raise KeyError(f"no run {run_id!r}")
        if _interrupted(run):
            # Cancelled by an interruption, not by a person: resume it from its checkpoint.
            await self._requeue(run_id)
        elif run.status.finished:
            return await self.stored_outcome(run)
        result = await self.claim(run_id)
        holder = result.run.owner if result.run is not None else None
        if result.claim is None and holder_is_gone(holder, self.owner):  # killed a moment ago
            result = await self.claim(run_id, from_dead_owner=holder)
        claim = result.claim
        if claim is None:
            if result.run is not None and result.run.status.finished:
                return await self.stored_outcome(result.run)
            raise RunBusy(result.run or run)
        if claim.run.status.finished:  # finished meanwhile: only its delivery was due
            await release_quietly(self._claims, claim)
            return await self.stored_outcome(claim.run)
        async with self.lease(claim):
            outcome = await self.execute_claimed(claim, progress, files=files)
        if delivers(claim.run):
            await release_quietly(self._claims, claim)
        return outcome

    async def resume(
        self,
        run_id: str,
        progress: ProgressSink | None = None,
        files: PlatformFiles | None = None,
    ) -> RunOutcome:
        """Run again from the checkpoint, also after a failure or a cancellation.

        A succeeded run is not repeated: its stored outcome is returned.
        """
        run = await self._runs.get_run(run_id)
        if run is not None and run.status in (RunStatus.FAILED.value, RunStatus.CANCELLED.value):
            await self._requeue(run_id)
        return await self.execute(run_id, progress, files)

    async def _requeue(self, run_id: str) -> None:
        try:
            await self._runs.requeue_run(run_id)
        except ThreadBusy as busy:
            raise rejected(
                busy,
                "Another research is active in this run's thread{run}; "
                "resume this one when it has finished.",
            ) from None

    async def execute_claimed(
        self,
        claim: Claim,
        progress: ProgressSink | None = None,
        *,
        record_interruption: bool = True,
        files: PlatformFiles | None = None,
    ) -> RunOutcome:
        """Run a claimed, unfinished run to its end, resuming from its checkpoint.

        Every write is fenced by ``claim``: when another runner has taken the run over,
        :class:`storage.ClaimLost` is raised and nothing more is written. When the task is
        cancelled (not through a cancel request), ``record_interruption`` records the run
        as cancelled ("interrupted"; the CLI's Ctrl-C); otherwise the checkpoint is left as
        it is for the caller to hand the run back (a job runner shutting down). ``files``:
        where the files attached to the run's request are downloaded from (its platform's
        delivery).
        """
        sink = progress or NullProgress()
        run = claim.run
        variables = (
            ThreadVariables.model_validate(claim.variables)
            if claim.variables
            else ThreadVariables()
        )
        # Worked on before (a plan or a search was checkpointed): continue, do not re-plan.
        resuming = run.rounds_done > 0 or run.llm_calls > 0 or run.searches > 0
        if not resuming:
            variables.next_search_topic = None
            variables.should_continue = True
        state = RunState(
            run_id=run.id,
            topic=run.topic,
            depth=run.depth,
            variables=variables,
            rounds_done=run.rounds_done,
            usage=usage_of(run),
            notes=list(run.notes),
            variables_version=claim.variables_version,
            files_saved=[f.id for f in variables.files] if claim.variables_version else [],
            timezone=await self._run_timezone(run),
            clock=self._clock,
        )
        started = time.monotonic()

        async def publish(
            kind: ProgressKind, text: str, topic: str | None = None, *, pages: int = 0
        ) -> None:
            try:
                searching = topic if kind is ProgressKind.SEARCHING else None
                tasks = self._plan(run, state, searching)
                event = ProgressEvent(
                    run.id, kind, text, state.rounds_done, state.depth, topic, tasks, pages
                )
                await sink.publish(event)
            except Exception:  # showing progress must never break the research
                log.warning("progress sink failed for run %s", run.id, exc_info=True)

        cancel = RunFlags(run.cancel_requested, run.stop_requested)
        # The run's share of its requester's daily tokens (None: no daily quota applies), and
        # the size of its steps.
        allowance = run.token_allowance
        steps = StepMeter()

        async def checkpoint(current: RunState, searching_ended: StopReason | None = None) -> None:
            nonlocal allowance
            stored = await save_checkpoint(
                self._claims, claim, current, searching_ended=searching_ended
            )
            if stored.cancel_requested:
                cancel.cancel()
            cancel.stop = cancel.stop or stored.stop_requested
            allowance = await self._grown(run, current, allowance, steps.look(current.usage))

        # The time budget counts from the run's first start: the time of earlier attempts (on
        # the database's clock, as the claim stamped both), then this one's.
        earlier = _seconds_before(run)
        began = self._monotonic()

        def stop_reason() -> StopReason | None:
            if cancel.stop:
                return StopReason.STOPPED
            elapsed = earlier + self._monotonic() - began
            return self._budget.spent(state.usage, elapsed, allowance, steps.look(state.usage))

        hooks = StepHooks(
            checkpoint=checkpoint,
            progress=publish,
            is_cancelled=lambda: cancel.requested,
            stop_reason=stop_reason,
        )
        self._local.started(run.id, cancel)
        status, error, reason = RunStatus.FAILED, None, None
        # How many notes the run had before the report's own were added (none are kept
        # when it ends without a report).
        research_notes: int | None = None
        markdown: str | None = None
        sources: list[Source] = []
        try:
            resumed_after = state.rounds_done if resuming else None
            await publish(
                ProgressKind.STARTED,
                wording.started_text(
                    state.language, run.topic, run.depth, resumed_after=resumed_after
                ),
            )
            state.sources = run_sources(self._knowledge, run, state)
            await self._read_files(run, state, files, publish, checkpoint, lambda: cancel.requested)
            strategy = self._strategy(run)
            if strategy is None:
                raise RuntimeError(f"no strategy {run.strategy!r} is registered")
            reason = await strategy.run(state, hooks)
            # The searching has ended: said with the state, so that a reply steering the run
            # from now on is answered that it is too late, and every reply kept before it is
            # in the state the writer reads (``storage.ThreadStore.add_guidance``).
            await checkpoint(state, reason)
            if reason is StopReason.CANCELLED:
                status = RunStatus.CANCELLED
            elif reason is StopReason.STOPPED and not has_material(state):
                # "Stop and write now" before any search found anything: nothing to write
                # from, which is no failure.
                status = RunStatus.CANCELLED
            else:
                research_notes = len(state.notes)
                for line in state.variables.guidance_for(run.id):
                    state.note(note_words.guidance_followed_words(state.language, line))
                if reason.stopped_early:
                    searched = len(strategy.run_topics(state))
                    daily = self._quota.tokens
                    state.note(stopped_words(self._budget, state, reason, searched, daily))
                spent = None
                if reason is StopReason.TIME_BUDGET and not has_material(state):
                    spent = spent_before_search(self._budget, state)
                if spent is not None:  # its time went before any search: nothing to write
                    raise NoResults(spent)
                rounds = state.rounds_done
                prefix = f"{search_executed_text(rounds, state.depth)} " if rounds else ""
                await publish(ProgressKind.WRITING, prefix + wording.writing_words(state.language))
                context, analysed = strategy.writer_context(state), strategy.analysed(state)
                checking = prefix + wording.checking_words(state.language)
                written = self._writer.write(
                    run,
                    state,
                    context,
                    analysed_before=analysed,
                    checking=lambda: publish(ProgressKind.CHECKING, checking),
                    room=self._budget.room(state.usage, allowance),
                )
                markdown, sources = await unless_cancelled(written, cancel.cancelled)
                status = RunStatus.SUCCEEDED
        except WritingCancelled:
            status, reason = RunStatus.CANCELLED, StopReason.CANCELLED
        except asyncio.CancelledError as exc:
            lost = bool(exc.args) and exc.args[0] == LOST_CLAIM
            if record_interruption and not lost:
                status, error = RunStatus.CANCELLED, INTERRUPTED
                if research_notes is not None:  # interrupted while writing: no report
                    del state.notes[research_notes:]
                with contextlib.suppress(ClaimLost):
                    await asyncio.shield(
                        finish(self._claims, claim, state, status, None, [], error)
                    )
            raise
        except (ClaimLost, StorageUnavailable):
            raise  # not the run's fault: it stays running, for a takeover
        except (NoResults, ModelUnavailable, NoInternalSource) as exc:
            error = str(exc)
        except Exception as exc:
            log.exception("run %s failed", run.id)
            error = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            self._local.ended(run.id, cancel)
        research = state.notes[:research_notes] if research_notes is not None else None
        if status is not RunStatus.SUCCEEDED and research is not None:
            state.notes = research  # no report: none of its notes
        finished = await finish(
            self._claims,
            claim,
            state,
            status,
            markdown,
            sources,
            error,
            reason,
            notes_if_cancelled=research,
        )
        if finished.status != status.value:  # a cancel came as the report was recorded
            status, markdown, sources = finished.status, None, []
            reason, state.notes = StopReason.CANCELLED, list(finished.notes)
        if self.metrics is not None:
            count_finished(
                self.metrics,
                self._prices,
                finished,
                state,
                reason,
                rounds_before=run.rounds_done,
                usage_before=usage_of(run),
            )
        outcome = RunOutcome(
            run_id=run.id,
            thread=finished.thread_key,
            status=status,
            topic=run.topic,
            depth=run.depth,
            topics=self._run_topics(run, state),
            report_markdown=markdown,
            sources=sources,
            usage=state.usage,
            seconds=finished.seconds or (time.monotonic() - started),
            stop_reason=reason,
            error=error,
            notes=state.notes,
            strategy=run.strategy,
            rounds_done=state.rounds_done,
            details=self._details(run, state),
            files=[f for f in state.variables.files if f.run_id == run.id],
            cost=self._cost(state.usage),
            tasks=final_tasks(self._plan(run, state)),
            claims=stored_claims(finished),
            writer_fallback=state.writer_fell_back and markdown is not None,
        )
        await publish(ProgressKind.FINISHED, final_progress_text(outcome))
        return outcome

    async def _grown(
        self, run: RunRecord, state: RunState, allowance: int | None, next_step: int
    ) -> int | None:
        """The run's daily allowance, grown (by its first reservation, as far as its
        requester's day has room) when its searching has spent its share of it or its next
        step would; unchanged while not, or when its own budget is the lower limit."""
        budget, daily = self._budget, self._quota.tokens
        if allowance is None or daily is None or run.requested_by is None:
            return allowance
        if not budget.quota_binds(allowance):
            return allowance
        if not budget.tokens_short(state.usage, allowance, next_step):
            return allowance
        day = self._quota.day(day_of(run.created_at, self._timezone), budget.tokens)
        more = max(run.token_allowance or 0, 1)
        grown = await self._runs.extend_allowance(run.id, run.requested_by, day, more)
        return allowance if grown is None else grown

    def _plan(
        self, run: RunRecord, state: RunState, searching: str | None = None
    ) -> tuple[ProgressTask, ...]:
        """The run's plan as its strategy sees it now (none for an unknown strategy)."""
        strategy = self._strategy(run)
        return tuple(strategy.tasks(state, searching)) if strategy is not None else ()

    def _strategy(self, run: RunRecord) -> Strategy | None:
        """The run's strategy (None: no strategy of its name is registered in this release)."""
        return self._strategies.get(run.strategy)

    def _details(self, run: RunRecord, state: RunState) -> dict[str, Any]:
        """What the run's strategy adds to its outcome."""
        strategy = self._strategy(run)
        return strategy.details(state) if strategy is not None else {}

    async def _read_files(
        self,
        run: RunRecord,
        state: RunState,
        files: PlatformFiles | None,
        publish: Callable[[ProgressKind, str], Awaitable[None]],
        checkpoint: Callable[[RunState], Awaitable[None]],
        is_cancelled: Callable[[], bool],
    ) -> None:
        """Read the files attached to the run's request that the thread has not read yet."""
        attachments = []
        for raw in run.attachments or ():
            try:
                attachments.append(Attachment.model_validate(raw))
            except ValueError:
                log.warning("run %s: an attachment's description is not valid; skipped", run.id)
        if not attachments:
            return
        if self._files is None:
            for attachment in attachments:
                name = shown_name(attachment.name)
                state.note(note_words.file_not_read_words(state.language, name, None))
            return
        unread = self._files.unread(state, attachments)
        if unread:
            await publish(ProgressKind.READING, wording.reading_files_words(state.language, unread))
            await self._files.read(state, unread, files, checkpoint, is_cancelled)

    async def _run_timezone(self, run: RunRecord) -> ZoneInfo:
        """The timezone of the run's dates: its digest's for a firing, else the service's."""
        if run.digest_id is None:
            return self._timezone
        digest = await self._digests.get(run.digest_id)
        if digest is None:  # (the schedule was removed since)
            return self._timezone
        try:
            return zone(digest.timezone)
        except ValueError:
            log.warning("digest %s: unknown timezone %r", run.digest_id, digest.timezone)
            return self._timezone

    async def fail_claimed(self, claim: Claim, error: str) -> RunRecord:
        """End a claimed, unfinished run as failed without working on it (e.g. its outcome
        could never be delivered, so researching it would be wasted)."""
        run = claim.run
        usage = usage_of(run)
        return await self._claims.finish_run(
            claim,
            status=RunStatus.FAILED,
            report_markdown=None,
            sources=[],
            error=error,
            usage=usage.model_dump(),
            notes=run.notes,
            deliver=delivers(run),
        )

    def _cost(self, usage: Usage) -> float | None:
        """What ``usage`` cost (None without FATHOM_PRICES)."""
        return self._prices.cost(usage) if self._prices is not None else None

    def _run_topics(self, run: RunRecord, state: RunState) -> list[str]:
        """The topics this run searched (a graph run: its sub-questions)."""
        strategy = self._strategy(run)
        return strategy.run_topics(state) if strategy is not None else []

    async def stored_outcome(self, run: RunRecord) -> RunOutcome:
        """The outcome of a finished run, as stored."""
        raw = await self._threads.load_variables(run.thread_id)
        variables = ThreadVariables.model_validate(raw) if raw else ThreadVariables()
        state = RunState(run.id, run.topic, run.depth, variables, run.rounds_done)
        sources = [
            Source(
                n=s.n,
                title=s.title,
                url=s.url,
                published=s.published,
                kind=s.kind,
                server=s.server,
            )
            for s in await self._runs.run_sources(run.id)
        ]
        return RunOutcome(
            run_id=run.id,
            thread=run.thread_key,
            status=run.status,
            topic=run.topic,
            depth=run.depth,
            topics=self._run_topics(run, state),
            report_markdown=run.report_markdown,
            sources=sources,
            usage=usage_of(run),
            seconds=run.seconds or 0.0,
            stop_reason=stored_stop_reason(run),
            error=run.error,
            notes=list(run.notes),
            strategy=run.strategy,
            rounds_done=run.rounds_done,
            details=self._details(run, state),
            files=[f for f in variables.files if f.run_id == run.id],
            cost=self._cost(usage_of(run)),
            tasks=final_tasks(self._plan(run, state)),
            claims=stored_claims(run),
        )
