"""The research service: requests become durable runs, runs become reports.

``submit`` writes the run row (deduplicated by the request's key; one active run per
thread) and returns at once. A runner then ``claim``s the run, holds it with a
:class:`~core.lease.Lease` and calls ``execute_claimed``, which runs it to the end,
checkpointing every step, and always leaves the run in a finished state; if the process
dies, the run stays ``running`` with a checkpoint that the next claim resumes from.
``execute`` does all three for callers that run one research themselves (the CLI).

This module is the run's lifecycle. The run's strategy (looked up by its name in
:mod:`core.engine.strategy`) researches it, :mod:`core.writer` writes its report, and
:mod:`core.outcome` is what it came to; their public names are importable from here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as dt_time
from typing import TYPE_CHECKING, Protocol, TypeVar
from zoneinfo import ZoneInfo

from core import wording
from core.attachments import shown_name
from core.cost import Prices
from core.dates import Clock, utcnow, zone
from core.engine.budget import RunBudget
from core.engine.files import FileReader, PlatformFiles
from core.engine.state import RunSources, RunState, StepHooks, StopReason, TextModel
from core.engine.strategy import build_strategies
from core.lease import (
    LOST_CLAIM,
    Lease,
    LeaseTiming,
    holder_is_gone,
    release_quietly,
    runner_identity,
)
from core.models import (
    CONSOLE_PLATFORM,
    Attachment,
    Guidance,
    ResearchRequest,
    RunStatus,
    Source,
    SourceChoice,
    Strategy,
    ThreadKey,
    ThreadVariables,
    Usage,
    Vote,
)
from core.outcome import (
    RunOutcome,
    final_progress_text,
    stopped_with_nothing,
    stored_stop_reason,
    usage_of,
)
from core.pages.reader import PageReader
from core.progress import (
    NullProgress,
    ProgressEvent,
    ProgressKind,
    ProgressSink,
    ProgressTask,
    final_tasks,
    search_executed_text,
)
from core.search import SearchProvider
from core.text import clean_text, has_visible
from core.untrusted import neutralise, without_markdown_links
from core.writer import (
    ModelUnavailable,
    NoResults,
    ReportWriter,
    has_material,
    model_unavailable,
)
from storage import (
    CancelRequest,
    Checkpointed,
    Claim,
    ClaimLost,
    ClaimResult,
    DailyQuota,
    QuotaReached,
    RunRecord,
    RunUsage,
    SourceRecord,
    StopRequest,
    StorageUnavailable,
    Store,
    ThreadBusy,
    VariablesConflict,
    outcome_is_delivered,
)

if TYPE_CHECKING:
    from core.metrics import Metrics  # (prometheus-client is imported by `fathom serve` only)

__all__ = [
    "DailyLimitReached",
    "ModelUnavailable",
    "NoResults",
    "ResearchService",
    "RunBusy",
    "RunOutcome",
    "RunRejected",
    "UsageReport",
    "UsageTotal",
    "UserQuota",
    "final_progress_text",
    "model_unavailable",
    "submit_run",
    "usage_of",
]

log = logging.getLogger(__name__)

#: The error of a run whose task was cancelled without a cancel request (Ctrl-C, SIGTERM).
INTERRUPTED = "interrupted"
#: How often a checkpoint is retried after the thread's variables changed under it.
CHECKPOINT_ATTEMPTS = 5


def _delivers(run: RunRecord) -> bool:
    """Whether the run's outcome has to be delivered to a chat thread once it finishes."""
    return outcome_is_delivered(ThreadKey.parse(run.thread_key).platform)


#: At most this much of one guidance reply is kept (like a topic, it is the user's words).
MAX_GUIDANCE_CHARS = 500


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


T = TypeVar("T")


class _CancelFlag:
    """Whether a cancel (``requested``) or a "Stop and write now" (``stop``) was requested for
    an executing run, as last seen; ``cancelled`` is set with a cancel, for a step that
    waits on it (the writer)."""

    def __init__(self, requested: bool, stop: bool = False) -> None:
        self.stop = stop
        self.cancelled = asyncio.Event()
        if requested:
            self.cancelled.set()

    @property
    def requested(self) -> bool:
        return self.cancelled.is_set()

    def cancel(self) -> None:
        self.cancelled.set()


class _WritingCancelled(Exception):
    """A cancel came while the report was being written: the writer was stopped."""


async def _unless_cancelled(work: Awaitable[T], cancelled: asyncio.Event) -> T:
    """``work``'s result; :class:`_WritingCancelled` (``work`` stopped) when ``cancelled`` is
    set first. A cancellation of the caller stops ``work`` too."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(cancelled.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        raise _WritingCancelled
    return task.result()


class RunRejected(ValueError):
    """The request cannot start now: a run is already active in the thread (``active``,
    when known)."""

    def __init__(self, message: str, active: RunRecord | None = None) -> None:
        super().__init__(message)
        self.active = active


def _rejected(busy: ThreadBusy, message: str) -> RunRejected:
    """``message`` with ``{run}`` naming the thread's active run (when known)."""
    run = f" (run {busy.active.id})" if busy.active is not None else ""
    return RunRejected(message.format(run=run), busy.active)


class RunBusy(RuntimeError):
    """Another live runner holds the run; it is taken over only if that runner stops."""

    def __init__(self, run: RunRecord) -> None:
        super().__init__(
            f"run {run.id} is being worked on by {run.owner or 'another process'}; "
            "it is taken over automatically if that process stops"
        )
        self.run = run


@dataclass(frozen=True)
class UserQuota:
    """What one chat user may start per day (FATHOM_USER_DAILY_RUNS, _TOKENS; None:
    unlimited). The console and a digest's firings are not counted against a user."""

    runs: int | None = None
    tokens: int | None = None


@dataclass(frozen=True)
class UsageTotal:
    """Runs, tokens and (with FATHOM_PRICES, every model priced) the cost of some runs."""

    runs: int
    tokens: int
    cost: float | None


@dataclass(frozen=True)
class UsageReport:
    """``/research usage``: the requester's runs today and this month, and their channel's
    this month (days and months in FATHOM_TIMEZONE)."""

    today: UsageTotal
    month: UsageTotal
    channel_month: UsageTotal
    priced: bool


class DailyLimitReached(Exception):
    """The requester has used today's quota: ``kind`` (``runs`` or ``tokens``), its
    ``limit``, and when it resets (midnight in FATHOM_TIMEZONE, an aware datetime)."""

    def __init__(self, kind: str, limit: int, resets_at: datetime) -> None:
        super().__init__(f"today's {kind} quota ({limit}) is used; it resets at {resets_at}")
        self.kind = kind
        self.limit = limit
        self.resets_at = resets_at


async def submit_run(
    store: Store,
    request: ResearchRequest,
    *,
    user_limit: int | None = None,
    quota: DailyQuota | None = None,
) -> tuple[RunRecord, bool]:
    """Create the run row (or find the one this request already created).

    One transaction. A second delivery of the same request finds its run through the
    dedupe key; a request in a thread whose research is still queued or running is
    refused (:class:`RunRejected`), settled by the database when two requests race. With
    ``user_limit``, a requester who already has that many unfinished runs is refused
    (``storage.UserBusy``) in the same transaction.
    """
    key = request.thread
    try:
        return await store.create_run(
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
            platform_context=request.platform_context,
            digest_id=request.digest_id,
            user_limit=user_limit,
            attachments=[a.model_dump(mode="json") for a in request.attachments],
            sources=request.sources.value,
            quota=quota,
        )
    except ThreadBusy as busy:
        raise _rejected(
            busy,
            "A research is already running in this thread{run}; "
            "wait for it to finish or cancel it.",
        ) from None


class InternalSources(Protocol):
    """The internal sources of the process (:class:`core.knowledge.Knowledge`)."""

    def allowed(self, thread_key: str) -> Sequence[SearchProvider]:
        """The internal sources a thread's channel may use (by configuration, whatever their
        state), each a provider whose results carry its ``server`` name."""
        ...


class NoInternalSource(Exception):
    """A ``sources=internal`` run in a channel that may use no internal source."""


def forget_other_servers(variables: ThreadVariables, permitted: set[str]) -> int:
    """Drop the thread's stored results of internal sources that are not in ``permitted``
    (the channel may no longer use them: the configuration changed); how many were dropped.
    A channel's stored findings never outlive its permission to see them."""
    dropped = 0
    for i, finding in enumerate(variables.findings):
        kept = [r for r in finding.results if r.server is None or r.server in permitted]
        if len(kept) != len(finding.results):
            dropped += len(finding.results) - len(kept)
            variables.findings[i] = finding.model_copy(update={"results": kept})
    return dropped


class ResearchService:
    def __init__(
        self,
        *,
        store: Store,
        planner: TextModel,
        writer: TextModel,
        search: SearchProvider,
        owner: str | None = None,
        timing: LeaseTiming | None = None,
        max_attempts: int = 3,
        reader: PageReader | None = None,
        max_parallel_searches: int = 10,
        graph_max_nodes: int = 12,
        metrics: Metrics | None = None,
        files: FileReader | None = None,
        timezone: str | ZoneInfo = "UTC",
        clock: Clock = utcnow,
        knowledge: InternalSources | None = None,
        budget: RunBudget | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        quota: UserQuota | None = None,
        prices: Prices | None = None,
    ) -> None:
        """``owner`` names this process's claims (default: host, pid and a random part);
        ``timing`` sets the lease (FATHOM_STALE_RUN_AFTER); a run is claimed at most
        ``max_attempts`` times before it fails (FATHOM_MAX_ATTEMPTS); ``reader`` reads the
        best result pages of every search (None: snippets only); the graph strategy searches
        at most ``max_parallel_searches`` sub-questions of a run at once and plans at most
        ``graph_max_nodes`` per run. Sub-questions are answered by the planner's model.
        ``files`` reads the files attached to a run's request (None: they are noted as not
        read). ``timezone`` (FATHOM_TIMEZONE) is that of today's date in the prompts and
        reports (a digest's firing: its digest's); ``clock`` tells the time (tests pin it).
        ``knowledge``: the internal sources (MCP servers); which of them a run searches is
        decided from the run's own thread key when it executes (None: the web only).
        ``budget``: the tokens and seconds a run's searching may take (FATHOM_MAX_RUN_TOKENS,
        FATHOM_MAX_RUN_SECONDS; None: unlimited), its seconds on ``monotonic``."""
        self._store = store
        self._budget = budget or RunBudget()
        self._quota = quota or UserQuota()
        self._prices = prices
        self._monotonic = monotonic
        self._knowledge = knowledge
        self._files = files
        self._timezone = timezone if isinstance(timezone, ZoneInfo) else zone(timezone)
        self._clock = clock
        self._writer = ReportWriter(writer, store)
        self.metrics = metrics
        self._strategies = build_strategies(
            planner=planner,
            search=search,
            reader=reader,
            max_parallel_searches=max_parallel_searches,
            graph_max_nodes=graph_max_nodes,
        )
        self.owner = owner or runner_identity()
        self.timing = timing or LeaseTiming()
        self._max_attempts = max_attempts
        # Runs executing in this process, with their cancel flag (see StepHooks.is_cancelled).
        self._executing: dict[str, _CancelFlag] = {}

    @property
    def store(self) -> Store:
        return self._store

    async def submit(
        self, request: ResearchRequest, *, user_limit: int | None = None
    ) -> tuple[RunRecord, bool]:
        """Create the run row (or find the one this request already created); see
        :func:`submit_run`. :class:`DailyLimitReached` when a chat user has used today's
        quota."""
        quota = self._daily_quota(request)
        try:
            return await submit_run(self._store, request, user_limit=user_limit, quota=quota)
        except QuotaReached as reached:
            assert quota is not None
            resets = quota.since.astimezone(self._timezone) + timedelta(days=1)
            midnight = datetime.combine(resets.date(), dt_time(), self._timezone)
            raise DailyLimitReached(reached.kind, reached.limit, midnight) from None

    def _daily_quota(self, request: ResearchRequest) -> DailyQuota | None:
        """Today's quota of the request's user (None: unlimited, the console, a digest)."""
        quota = self._quota
        if quota.runs is None and quota.tokens is None:
            return None
        if request.digest_id is not None or request.thread.platform == CONSOLE_PLATFORM:
            return None
        today = self._clock().astimezone(self._timezone).date()
        since = datetime.combine(today, dt_time(), self._timezone)
        return DailyQuota(since=since, runs=quota.runs, tokens=quota.tokens)

    # -- the run lifecycle ------------------------------------------------------
    async def claim(self, run_id: str, *, from_dead_owner: str | None = None) -> ClaimResult:
        """Try to take the run for this process (see ``Store.claim_run``).

        ``from_dead_owner``: take it now, without waiting for the lease, but only while that
        owner (known to be dead) still holds it.
        """
        return await self._store.claim_run(
            run_id,
            self.owner,
            stale_after=0.0 if from_dead_owner else self.timing.stale_after,
            max_attempts=self._max_attempts,
            from_owner=from_dead_owner,
            console_platform=CONSOLE_PLATFORM,
        )

    def lease(self, claim: Claim) -> Lease:
        """``async with service.lease(claim):`` keeps the claim alive while the body runs; a
        cancel requested meanwhile (by any replica) reaches the run here at the next
        heartbeat, also while no step checks for it (its report being written)."""
        return Lease(
            self._store, claim, self.timing, on_cancel_requested=lambda: self._cancel_here(claim)
        )

    def _cancel_here(self, claim: Claim) -> None:
        """Stop the run of ``claim`` if this process executes it."""
        flag = self._executing.get(claim.run_id)
        if flag is not None:
            flag.cancel()

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
        run = await self._store.get_run(run_id)
        if run is None:
            raise KeyError(f"no run {run_id!r}")
        if _interrupted(run):
            # Cancelled by an interruption, not by a person: resume it from its checkpoint.
            await self._requeue(run_id)
        elif RunStatus(run.status).finished:
            return await self.stored_outcome(run)
        result = await self.claim(run_id)
        holder = result.run.owner if result.run is not None else None
        if result.claim is None and holder_is_gone(holder, self.owner):  # killed a moment ago
            result = await self.claim(run_id, from_dead_owner=holder)
        claim = result.claim
        if claim is None:
            if result.run is not None and RunStatus(result.run.status).finished:
                return await self.stored_outcome(result.run)
            raise RunBusy(result.run or run)
        if RunStatus(claim.run.status).finished:  # finished meanwhile: only its delivery was due
            await release_quietly(self._store, claim)
            return await self.stored_outcome(claim.run)
        async with self.lease(claim):
            outcome = await self.execute_claimed(claim, progress, files=files)
        if _delivers(claim.run):
            await release_quietly(self._store, claim)
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
        run = await self._store.get_run(run_id)
        if run is not None and run.status in (RunStatus.FAILED.value, RunStatus.CANCELLED.value):
            await self._requeue(run_id)
        return await self.execute(run_id, progress, files)

    async def _requeue(self, run_id: str) -> None:
        try:
            await self._store.requeue_run(run_id)
        except ThreadBusy as busy:
            raise _rejected(
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

        cancel = _CancelFlag(run.cancel_requested, run.stop_requested)

        async def checkpoint(current: RunState) -> None:
            stored = await self._checkpoint(claim, current)
            if stored.cancel_requested:
                cancel.cancel()
            cancel.stop = cancel.stop or stored.stop_requested

        # The time budget counts from the run's first start: the time of earlier attempts (on
        # the database's clock, as the claim stamped both), then this one's.
        earlier = _seconds_before(run)
        began = self._monotonic()

        def stop_reason() -> StopReason | None:
            if cancel.stop:
                return StopReason.STOPPED
            return self._budget.spent(state.usage, earlier + self._monotonic() - began)

        hooks = StepHooks(
            checkpoint=checkpoint,
            progress=publish,
            is_cancelled=lambda: cancel.requested,
            stop_reason=stop_reason,
        )
        self._executing[run.id] = cancel
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
            state.sources = self._run_sources(run, state)
            await self._read_files(run, state, files, publish, checkpoint, lambda: cancel.requested)
            strategy = self._strategies[Strategy(run.strategy)]
            reason = await strategy.run(state, hooks)
            if reason is StopReason.CANCELLED:
                status = RunStatus.CANCELLED
            elif reason is StopReason.STOPPED and not has_material(state):
                # "Stop and write now" before any search found anything: nothing to write
                # from, which is no failure.
                status = RunStatus.CANCELLED
            else:
                research_notes = len(state.notes)
                for line in state.variables.guidance_for(run.id):
                    state.note(wording.guidance_followed_words(state.language, line))
                if reason.stopped_early:
                    searched = len(strategy.run_topics(state))
                    state.note(self._stopped_words(state, reason, searched))
                rounds = state.rounds_done
                prefix = f"{search_executed_text(rounds, state.depth)} " if rounds else ""
                await publish(ProgressKind.WRITING, prefix + wording.writing_words(state.language))
                written = self._writer.write(run, state, strategy.writer_graph(state))
                markdown, sources = await _unless_cancelled(written, cancel.cancelled)
                status = RunStatus.SUCCEEDED
        except _WritingCancelled:
            status, reason = RunStatus.CANCELLED, StopReason.CANCELLED
        except asyncio.CancelledError as exc:
            lost = bool(exc.args) and exc.args[0] == LOST_CLAIM
            if record_interruption and not lost:
                status, error = RunStatus.CANCELLED, INTERRUPTED
                if research_notes is not None:  # interrupted while writing: no report
                    del state.notes[research_notes:]
                with contextlib.suppress(ClaimLost):
                    await asyncio.shield(self._finish(claim, state, status, None, [], error))
            raise
        except (ClaimLost, StorageUnavailable):
            raise  # not the run's fault: it stays running, for a takeover
        except (NoResults, ModelUnavailable, NoInternalSource) as exc:
            error = str(exc)
        except Exception as exc:
            log.exception("run %s failed", run.id)
            error = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            if self._executing.get(run.id) is cancel:
                del self._executing[run.id]
        research = state.notes[:research_notes] if research_notes is not None else None
        if status is not RunStatus.SUCCEEDED and research is not None:
            state.notes = research  # no report: none of its notes
        finished = await self._finish(
            claim, state, status, markdown, sources, error, reason, notes_if_cancelled=research
        )
        if finished.status != status.value:  # a cancel came as the report was recorded
            status, markdown, sources = RunStatus(finished.status), None, []
            reason, state.notes = StopReason.CANCELLED, list(finished.notes)
        self._count(
            finished, state, reason, rounds_before=run.rounds_done, usage_before=usage_of(run)
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
            strategy=Strategy(run.strategy),
            rounds_done=state.rounds_done,
            nodes=[n for n in state.variables.graph if n.run_id == run.id],
            files=[f for f in state.variables.files if f.run_id == run.id],
            cost=self._cost(state.usage),
            tasks=final_tasks(self._plan(run, state)),
        )
        await publish(ProgressKind.FINISHED, final_progress_text(outcome))
        return outcome

    def _plan(
        self, run: RunRecord, state: RunState, searching: str | None = None
    ) -> tuple[ProgressTask, ...]:
        """The run's plan as its strategy sees it now (none for an unknown strategy)."""
        try:
            strategy = self._strategies[Strategy(run.strategy)]
        except (KeyError, ValueError):
            return ()
        return tuple(strategy.tasks(state, searching))

    def _run_sources(self, run: RunRecord, state: RunState) -> RunSources:
        """What the run searches, decided here, where it executes, from its own thread key
        (a follow-up, a resumed run and a digest's firing alike): the web unless
        ``sources=internal``, and the internal sources its channel may use unless
        ``sources=web``. Stored results of internal sources the channel may no longer use are
        dropped from the thread first. :class:`NoInternalSource` for ``sources=internal``
        where none may be used."""
        allowed = list(self._knowledge.allowed(run.thread_key)) if self._knowledge else []
        dropped = forget_other_servers(state.variables, {s.name for s in allowed})
        if dropped:
            state.note(wording.forgotten_internal_words(state.language, dropped))
        try:
            choice = SourceChoice(run.sources)
        except ValueError:
            choice = SourceChoice.ALL
        if choice is SourceChoice.INTERNAL and not allowed:
            raise NoInternalSource(wording.no_internal_source_words(state.language))
        return RunSources(
            web=choice is not SourceChoice.INTERNAL,
            internal=() if choice is SourceChoice.WEB else tuple(allowed),
        )

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
                state.note(f'The attached file "{shown_name(attachment.name)}" was not read.')
            return
        unread = self._files.unread(state, attachments)
        if unread:
            await publish(ProgressKind.READING, wording.reading_files_words(state.language, unread))
            await self._files.read(state, unread, files, checkpoint, is_cancelled)

    async def _run_timezone(self, run: RunRecord) -> ZoneInfo:
        """The timezone of the run's dates: its digest's for a firing, else the service's."""
        if run.digest_id is None:
            return self._timezone
        digest = await self._store.digests.get(run.digest_id)
        if digest is None:  # (the schedule was removed since)
            return self._timezone
        try:
            return zone(digest.timezone)
        except ValueError:
            log.warning("digest %s: unknown timezone %r", run.digest_id, digest.timezone)
            return self._timezone

    def _count(
        self,
        run: RunRecord,
        state: RunState,
        reason: StopReason | None,
        *,
        rounds_before: int,
        usage_before: Usage,
    ) -> None:
        """Count a finished attempt of a run in the process's metrics (a run stopped before
        anything was found as ``stopped``)."""
        if self.metrics is None:
            return
        usage = state.usage
        status = RunStatus(run.status)
        self.metrics.run_finished(
            status="stopped" if stopped_with_nothing(status, reason) else status.value,
            platform=run.thread_key.split(":", 1)[0],
            strategy=run.strategy,
            seconds=run.seconds,
            rounds_done=max(0, state.rounds_done - rounds_before),
            pages_read=max(0, usage.pages_read - usage_before.pages_read),
            pages_skipped=max(0, usage.pages_skipped - usage_before.pages_skipped),
        )
        if self._prices is not None:
            self.metrics.run_cost(self._prices.cost_by_model(usage, usage_before))

    async def fail_claimed(self, claim: Claim, error: str) -> RunRecord:
        """End a claimed, unfinished run as failed without working on it (e.g. its outcome
        could never be delivered, so researching it would be wasted)."""
        run = claim.run
        usage = usage_of(run)
        return await self._store.finish_run(
            claim,
            status=RunStatus.FAILED.value,
            report_markdown=None,
            sources=[],
            error=error,
            usage=usage.model_dump(),
            notes=run.notes,
            deliver=_delivers(run),
        )

    def _stopped_words(self, state: RunState, reason: StopReason, searches: int) -> str:
        """The note saying why the searching ended early (the report then says it)."""
        if reason is StopReason.TOKEN_BUDGET:
            return wording.token_budget_words(state.language, searches, self._budget.tokens or 0)
        if reason is StopReason.TIME_BUDGET:
            seconds = self._budget.seconds or 0.0
            return wording.time_budget_words(state.language, searches, seconds)
        return wording.stopped_early_words(state.language, searches)

    async def usage_report(self, user: str, thread: ThreadKey) -> UsageReport:
        """What ``user`` spent today and this month, and what ``thread``'s channel spent
        this month."""
        now = self._clock().astimezone(self._timezone)
        day = datetime.combine(now.date(), dt_time(), self._timezone)
        month = day.replace(day=1)
        mine = await self._store.usage_since(month, requested_by=user)
        theirs = await self._store.usage_since(
            month, channel=(thread.platform, thread.workspace, thread.channel)
        )
        # Today's runs are this month's (one read): a run made or grown between two reads
        # can never show today above this month.
        today = [r for r in mine if r.created_at >= day]
        return UsageReport(
            today=self._total(today),
            month=self._total(mine),
            channel_month=self._total(theirs),
            priced=self._prices is not None,
        )

    def _total(self, runs: Sequence[RunUsage]) -> UsageTotal:
        costs = [
            self._cost(
                Usage(
                    prompt_tokens=r.prompt_tokens,
                    completion_tokens=r.completion_tokens,
                    searches=r.searches,
                    tokens_by_model=r.tokens_by_model,
                )
            )
            for r in runs
        ]
        priced = [c for c in costs if c is not None]
        # No prices, or a run with an unpriced model: no cost (a part would look like all).
        whole = self._prices is not None and len(priced) == len(costs)
        return UsageTotal(
            runs=len(runs),
            tokens=sum(r.prompt_tokens + r.completion_tokens for r in runs),
            cost=round(sum(priced), 6) if whole else None,
        )

    def _cost(self, usage: Usage) -> float | None:
        """What ``usage`` cost (None without FATHOM_PRICES)."""
        return self._prices.cost(usage) if self._prices is not None else None

    async def add_guidance(
        self, run: RunRecord, by: str, text: str, *, key: str | None = None
    ) -> bool:
        """Record a reply steering the running ``run`` (its thread's variables keep it; the
        run takes it in at its next checkpoint and shows it to its next plan and to the
        writer). False when the run has ended meanwhile. ``key``: the delivery's dedupe key
        (a redelivered reply is kept once)."""
        words = without_markdown_links(neutralise(clean_text(text)))
        words = " ".join(words.split())[:MAX_GUIDANCE_CHARS]
        if RunStatus(run.status).finished or not has_visible(words):
            return False
        entry = Guidance(run_id=run.id, by=by, at=self._clock(), text=words, key=key)
        return await self._store.add_guidance(run.thread_key, entry.model_dump(mode="json"))

    async def record_feedback(self, run: RunRecord, by: str, vote: Vote) -> Vote | None:
        """Store ``by``'s vote on ``run``'s report (a second press changes it); returns their
        vote before this one (None: their first). A vote that changes something is counted
        in ``fathom_feedback_total``."""
        previous = await self._store.record_feedback(run.id, by, vote.value)
        before = Vote(previous) if previous is not None else None
        if self.metrics is not None and before is not vote:
            self.metrics.feedback.labels(vote.value).inc()
        return before

    async def stop(self, run_id: str) -> StopRequest:
        """Stop and write now: a running run stops searching at its next step and writes
        its report from what it found (a queued one, with nothing found, is cancelled);
        ``ended`` when it had ended or was already asked (nothing changed)."""
        answer = await self._store.request_stop(run_id, console_platform=CONSOLE_PLATFORM)
        flag = self._executing.get(run_id)
        if answer is StopRequest.STOPPING and flag is not None:
            flag.stop = True  # running here: seen before the next search
        return answer

    async def cancel(self, run_id: str) -> CancelRequest:
        """Cancel the run (see :class:`CancelRequest`): a running one stops at its next step,
        or, while its report is being written, at once (no report)."""
        answer = await self._store.request_cancel(run_id, console_platform=CONSOLE_PLATFORM)
        flag = self._executing.get(run_id)
        if answer in (CancelRequest.CANCELLING, CancelRequest.ALREADY) and flag is not None:
            flag.cancel()  # running here: no need to wait for its next checkpoint or heartbeat
        return answer

    # -- steps ----------------------------------------------------------------
    async def _checkpoint(self, claim: Claim, state: RunState) -> Checkpointed:
        """Persist the state; the run's cancel and stop flags as stored.

        The variables are compare-and-swapped on their version. If another writer changed
        them meanwhile, its topics and findings are taken in and the checkpoint is retried,
        so no update is lost.
        """
        for _ in range(CHECKPOINT_ATTEMPTS):
            variables = state.variables.public_dict()
            files = [f.id for f in state.variables.files]
            if files == state.files_saved:
                del variables["files"]  # unchanged: their text is not written again
            try:
                result = await self._store.checkpoint(
                    claim,
                    variables=variables,
                    variables_version=state.variables_version,
                    rounds_done=state.rounds_done,
                    usage=state.usage.model_dump(),
                    notes=state.notes,
                )
            except VariablesConflict as conflict:
                log.warning(
                    "run %s: thread variables changed under it (now version %d); merging",
                    state.run_id,
                    conflict.version,
                )
                state.variables.absorb(ThreadVariables.model_validate(conflict.variables))
                state.variables_version = conflict.version
                state.files_saved = [f["id"] for f in conflict.variables.get("files") or []]
                continue
            state.variables_version = result.variables_version
            state.files_saved = files
            return result
        raise RuntimeError("the thread's variables kept changing under the run")

    async def _finish(
        self,
        claim: Claim,
        state: RunState,
        status: RunStatus,
        markdown: str | None,
        sources: list[Source],
        error: str | None,
        reason: StopReason | None = None,
        *,
        notes_if_cancelled: list[str] | None = None,
    ) -> RunRecord:
        return await self._store.finish_run(
            claim,
            status=status.value,
            report_markdown=markdown,
            sources=[
                SourceRecord(s.n, s.title, s.url, s.published, s.kind, s.server) for s in sources
            ],
            error=error,
            usage=state.usage.model_dump(),
            notes=state.notes,
            deliver=_delivers(claim.run),
            stop_reason=reason.value if reason is not None else None,
            notes_if_cancelled=notes_if_cancelled,
            stop_reason_if_cancelled=StopReason.CANCELLED.value,
        )

    def _run_topics(self, run: RunRecord, state: RunState) -> list[str]:
        """The topics this run searched (a graph run: its sub-questions)."""
        return self._strategies[Strategy(run.strategy)].run_topics(state)

    async def stored_outcome(self, run: RunRecord) -> RunOutcome:
        """The outcome of a finished run, as stored."""
        raw = await self._store.load_variables(run.thread_id)
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
            for s in await self._store.run_sources(run.id)
        ]
        return RunOutcome(
            run_id=run.id,
            thread=run.thread_key,
            status=RunStatus(run.status),
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
            strategy=Strategy(run.strategy),
            rounds_done=run.rounds_done,
            nodes=[n for n in variables.graph if n.run_id == run.id],
            files=[f for f in variables.files if f.run_id == run.id],
            cost=self._cost(usage_of(run)),
            tasks=final_tasks(self._plan(run, state)),
        )
