"""The run executor: runs become reports.

A runner claims a run and holds it with a lease (the research job,
:mod:`core.operations.job`, for ``fathom serve``'s in-process runner, a ``fathom worker`` and
the CLI alike) and calls ``execute_claimed``, which runs it to the end, checkpointing every
step, and always leaves the run in a finished state; if the process dies, the run stays
``running`` with a checkpoint that the next claim resumes from.

The run's strategy (looked up by its name) researches it, :mod:`core.research.writer` writes its
report, :mod:`core.research.steps` writes it down, :mod:`core.research.execution` is what the run
carries while it executes, and :mod:`core.research.outcome` is what it came to. What people ask
of runs (create, stop, cancel, steer, vote) is :mod:`core.research.requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from core.dates import zone
from core.engine.files import PlatformFiles
from core.engine.progress import NullProgress, ProgressKind, ProgressSink, search_executed_text
from core.engine.state import RunState, StopReason
from core.engine.strategy import Strategy
from core.models import Source, ThreadVariables
from core.research.executing import LocalRuns, WritingCancelled, unless_cancelled
from core.research.execution import RunExecution, claimed_state
from core.research.lease import LOST_CLAIM
from core.research.outcome import (
    Ending,
    RunOutcome,
    final_progress_text,
    outcome_of,
    stored_claims,
    stored_stop_reason,
    usage_of,
)
from core.research.policy import Clocks, Reading, RunPolicy, RunStores
from core.research.steps import (
    NoInternalSource,
    count_finished,
    delivers,
    finish,
    run_sources,
    spent_before_search,
    stopped_words,
)
from core.research.writer import ModelUnavailable, NoResults, ReportWriter, has_material
from core.values import RunStatus
from core.words import note_words, wording
from storage import Claim, ClaimLost, RunRecord, StorageUnavailable

if TYPE_CHECKING:
    from core.metrics import Metrics  # (prometheus-client is imported by `fathom serve` only)

log = logging.getLogger("core.service")  # (where these lines were always logged)

#: The error of a run whose task was cancelled without a cancel request (Ctrl-C, SIGTERM).
INTERRUPTED = "interrupted"


class RunExecutor:
    """Claimed runs executed: researched, written up and finished (see the module
    docstring)."""

    def __init__(
        self,
        stores: RunStores,
        strategies: Mapping[str, Strategy],
        writer: ReportWriter,
        *,
        policy: RunPolicy | None = None,
        clocks: Clocks | None = None,
        reading: Reading | None = None,
        local: LocalRuns | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """``stores``: where runs are read and written; ``strategies`` research a run by its
        strategy's name and ``writer`` writes its report; ``policy``: how runs execute here
        (its owner named once); ``clocks`` tell the time (tests pin them); ``reading``: what
        runs read besides search results; ``local``: the registry of the runs executing
        here, shared with the request service (a stop or cancel taken here reaches the run
        at once); ``metrics`` counts finished runs."""
        self._stores = stores
        self._strategies = dict(strategies)
        self._writer = writer
        self.policy = (policy or RunPolicy()).resolved()
        #: Names this process's claims (``policy.owner``), and the lease of its runs.
        self.owner: str = self.policy.owner or ""
        self.timing = self.policy.timing
        self._clocks = clocks or Clocks()
        self._reading = reading or Reading()
        self._local = local or LocalRuns()
        self._timezone = self.policy.zone
        self.metrics = metrics

    def cancel_here(self, run_id: str) -> None:
        """Cancel the run now if it executes in this process (a cancel its lease met)."""
        self._local.cancel(run_id)

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
        run = claim.run
        state = claimed_state(claim, await self._run_timezone(run), self._clocks.now)
        sink = progress or NullProgress()
        execution = RunExecution(
            claim,
            state,
            self._strategy(run),
            sink,
            self._stores,
            self.policy,
            self._clocks.monotonic,
        )
        self._local.started(run.id, execution.flags)
        try:
            ending = await self._research(execution, files, record_interruption)
        finally:
            self._local.ended(run.id, execution.flags)
        return await self._finish(execution, ending)

    async def _research(
        self, execution: RunExecution, files: PlatformFiles | None, record_interruption: bool
    ) -> Ending:
        """Search and write the report: how the run ended (not recorded yet). Whatever
        happens, it ends; only a lost claim or a database outage (not the run's fault: it
        stays running, for a takeover) and a cancellation of the task are raised."""
        reason: StopReason | None = None
        try:
            reason = await self._search(execution, files)
            return await self._report(execution, reason)
        except WritingCancelled:
            return Ending(RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
        except asyncio.CancelledError as exc:
            lost = bool(exc.args) and exc.args[0] == LOST_CLAIM
            if record_interruption and not lost:
                await self._interrupted(execution)
            raise
        except (ClaimLost, StorageUnavailable):
            raise
        except (NoResults, ModelUnavailable, NoInternalSource) as exc:
            return Ending(RunStatus.FAILED, stop_reason=reason, error=str(exc))
        except Exception as exc:
            log.exception("run %s failed", execution.run.id)
            error = f"{type(exc).__name__}: {exc}"[:500]
            return Ending(RunStatus.FAILED, stop_reason=reason, error=error)

    async def _search(self, execution: RunExecution, files: PlatformFiles | None) -> StopReason:
        """Read the request's files and run the strategy: why its searching ended."""
        run, state = execution.run, execution.state
        resumed_after = state.rounds_done if execution.resuming else None
        await execution.publish(
            ProgressKind.STARTED,
            wording.started_text(state.language, run.topic, run.depth, resumed_after=resumed_after),
        )
        state.sources = run_sources(self._reading.knowledge, run, state)
        await execution.read_files(self._reading.files, files)
        strategy = execution.strategy
        if strategy is None:
            raise RuntimeError(f"no strategy {run.strategy!r} is registered")
        reason = await strategy.run(state, execution.hooks())
        # The searching has ended: said with the state, so that a reply steering the run from
        # now on is answered that it is too late, and every reply kept before it is in the
        # state the writer reads (``storage.ThreadStore.add_guidance``).
        await execution.checkpoint(state, reason)
        return reason

    async def _report(self, execution: RunExecution, reason: StopReason) -> Ending:
        """The report written from what the searching found (a cancel, or "Stop and write
        now" before anything was found: no report, which is no failure)."""
        state, budget = execution.state, self.policy.budget
        if reason is StopReason.CANCELLED or (
            reason is StopReason.STOPPED and not has_material(state)
        ):
            return Ending(RunStatus.CANCELLED, stop_reason=reason)
        execution.research_notes = len(state.notes)
        for line in state.variables.guidance_for(execution.run.id):
            state.note(note_words.guidance_followed_words(state.language, line))
        if reason.stopped_early:
            assert execution.strategy is not None  # (it searched)
            searched = len(execution.strategy.run_topics(state))
            daily = self.policy.quota.tokens
            state.note(stopped_words(budget, state, reason, searched, daily))
        if reason is StopReason.TIME_BUDGET and not has_material(state):
            spent = spent_before_search(budget, state)
            if spent is not None:  # its time went before any search: nothing to write
                raise NoResults(spent)
        markdown, sources = await self._write(execution)
        return Ending(RunStatus.SUCCEEDED, markdown, sources, stop_reason=reason)

    async def _write(self, execution: RunExecution) -> tuple[str, list[Source]]:
        """Write the run's report (stopped when a cancel comes meanwhile)."""
        run, state, strategy = execution.run, execution.state, execution.strategy
        assert strategy is not None  # (it searched)
        rounds = state.rounds_done
        prefix = f"{search_executed_text(rounds, state.depth)} " if rounds else ""
        await execution.publish(
            ProgressKind.WRITING, prefix + wording.writing_words(state.language)
        )
        context, analysed = strategy.writer_context(state), strategy.analysed(state)
        checking = prefix + wording.checking_words(state.language)
        written = self._writer.write(
            run,
            state,
            context,
            analysed_before=analysed,
            checking=lambda: execution.publish(ProgressKind.CHECKING, checking),
            room=self.policy.budget.room(state.usage, execution.allowance),
        )
        return await unless_cancelled(written, execution.flags.cancelled)

    async def _interrupted(self, execution: RunExecution) -> None:
        """Record the run as cancelled by an interruption (Ctrl-C, SIGTERM), without its
        report's notes when it was being written (shielded: the task is being cancelled)."""
        state = execution.state
        if execution.research_notes is not None:  # interrupted while writing: no report
            del state.notes[execution.research_notes :]
        status, claims = RunStatus.CANCELLED, self._stores.claims
        with contextlib.suppress(ClaimLost):
            await asyncio.shield(
                finish(claims, execution.claim, state, status, None, [], INTERRUPTED)
            )

    async def _finish(self, execution: RunExecution, ending: Ending) -> RunOutcome:
        """Record how the run ended (fenced), count it, and show its final progress."""
        run, state, kept = execution.run, execution.state, execution.research_notes
        research = state.notes[:kept] if kept is not None else None
        if ending.status is not RunStatus.SUCCEEDED and research is not None:
            state.notes = research  # no report: none of its notes
        finished = await finish(
            self._stores.claims,
            execution.claim,
            state,
            ending.status,
            ending.report_markdown,
            ending.sources,
            ending.error,
            ending.stop_reason,
            notes_if_cancelled=research,
        )
        if finished.status != ending.status.value:  # a cancel came as the report was recorded
            ending = Ending(finished.status, stop_reason=StopReason.CANCELLED, error=ending.error)
            state.notes = list(finished.notes)
        if self.metrics is not None:
            count_finished(
                self.metrics,
                self.policy.prices,
                finished,
                state,
                ending.stop_reason,
                rounds_before=run.rounds_done,
                usage_before=usage_of(run),
            )
        ending = replace(
            ending,
            seconds=finished.seconds or (time.monotonic() - execution.started),
            claims=stored_claims(finished),
            writer_fallback=state.writer_fell_back and ending.report_markdown is not None,
        )
        outcome = outcome_of(finished, state, execution.strategy, ending, self.policy.prices)
        await execution.publish(ProgressKind.FINISHED, final_progress_text(outcome))
        return outcome

    def _strategy(self, run: RunRecord) -> Strategy | None:
        """The run's strategy (None: no strategy of its name is registered in this release)."""
        return self._strategies.get(run.strategy)

    async def _run_timezone(self, run: RunRecord) -> ZoneInfo:
        """The timezone of the run's dates: its digest's for a firing, else the service's."""
        if run.digest_id is None:
            return self._timezone
        digest = await self._stores.digests.get(run.digest_id)
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
        return await self._stores.claims.finish_run(
            claim,
            status=RunStatus.FAILED,
            report_markdown=None,
            sources=[],
            error=error,
            usage=usage.model_dump(),
            notes=run.notes,
            deliver=delivers(run),
        )

    async def stored_outcome(self, run: RunRecord) -> RunOutcome:
        """The outcome of a finished run, as stored."""
        raw = await self._stores.threads.load_variables(run.thread_id)
        variables = ThreadVariables.model_validate(raw) if raw else ThreadVariables()
        state = RunState(
            run.id, run.topic, run.depth, variables, run.rounds_done, usage_of(run), list(run.notes)
        )
        sources = [
            Source(
                n=s.n, title=s.title, url=s.url, published=s.published, kind=s.kind, server=s.server
            )
            for s in await self._stores.runs.run_sources(run.id)
        ]
        ending = Ending(
            run.status,
            run.report_markdown,
            sources,
            stored_stop_reason(run),
            run.error,
            run.seconds or 0.0,
            stored_claims(run),
        )
        return outcome_of(run, state, self._strategy(run), ending, self.policy.prices)
