"""The research job: claim a run, execute it, and deliver its outcome to its chat thread.

Platform adapters register a :class:`DeliveryFactory` under their platform name (the first
part of the thread key). The job itself is platform-neutral and is what a job runner
executes, in-process or on a queue worker. For one run it:

1. builds the run's :class:`Delivery` first: when the platform says it never can
   (:class:`Undeliverable`), the run is failed at once and no LLM or search call is spent on
   an outcome nobody could see; any other error leaves the run to a later sweep;
2. claims the run (``Store.claim_run``) and holds it with a :class:`~core.research.lease.Lease`;
3. executes it (or resumes it from its checkpoint), publishing progress;
4. delivers the outcome as its own durable step: the report's parts (for a run that did not
   succeed, its final status) are posted in order, each one recorded once posted, retried
   with backoff while the platform fails, until all are posted or the retry budget runs out
   (then the thread gets a short notice and the run records why). A runner that takes the
   run over continues with the first missing part.

A job cancelled by its runner (shutdown), cut off from the database or whose lease ran out
hands the run back (a no-op unless it still holds it), so any replica continues it.

``fathom research`` and ``fathom resume`` run through the same claim, lease and execution
(:meth:`ResearchJob.attend`) with the console's delivery; the command shows the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from core.documents.attachments import AttachmentRefused
from core.engine.files import NOT_CONNECTED, PlatformFiles
from core.engine.progress import NullProgress, ProgressEvent, ProgressKind, ProgressSink
from core.failures import PostFailure, judge
from core.logs import Changing, log_context
from core.models import CONSOLE_PLATFORM, Attachment
from core.research.executor import INTERRUPTED, RunExecutor
from core.research.lease import Lease, holder_is_gone, release_quietly
from core.research.outcome import RunOutcome, final_progress_text
from core.research.requests import rejected
from core.research.service import Research
from core.research.steps import delivers
from core.timer import MONOTONIC, Timer
from core.values import UNFINISHED_STATUSES, DeliveryState, RunStatus
from core.words import wording
from core.words.wording import request_language
from storage import (
    Claim,
    ClaimLost,
    ClaimResult,
    ClaimStore,
    RunRecord,
    RunStore,
    StorageUnavailable,
    ThreadBusy,
)
from storage.tables import utcnow

log = logging.getLogger(__name__)

#: How long a cancelled job still waits for the part it is posting (see _post_and_record).
PART_GRACE = 15.0
#: How ``delivery_error`` starts when the platform can never take the run's posts: it
#: refused them for good (the channel is gone), or it has no delivery for the run at all.
REFUSED = "refused by the platform: "
UNDELIVERABLE = "cannot deliver to "


def delivery_refused(error: str | None) -> bool:
    """Whether a run's ``delivery_error`` says its channel can never be posted to."""
    return bool(error) and str(error).startswith((REFUSED, UNDELIVERABLE))


class Delivery(Protocol):
    """Where one run's progress and outcome go (one platform thread)."""

    @property
    def progress(self) -> ProgressSink: ...

    def report_parts(self, outcome: RunOutcome) -> Sequence[Any]:
        """The report as the messages to post, in order: the same for the same outcome and
        the same parts posted. Asked again after each part is posted, so a part may decide
        what follows it (a document step: the document's summary, or the usual parts when
        the platform refused the document); the parts already posted never change."""
        ...

    async def post_report_part(self, part: Any) -> None:
        """Post one part in the thread; raises when the platform refused it."""
        ...

    def claimed(self, run: RunRecord) -> None:
        """The run as this runner claimed it, before its outcome is delivered: what earlier
        attempts recorded (the parts posted, a report's document) is fresher here than in the
        record the delivery was made from."""
        ...

    async def post_status(self, text: str) -> None:
        """Show the run's final status in its thread: edit the progress message, or post it
        when there is none. Raises when the platform refused it."""
        ...

    async def post_notice(self, text: str) -> None:
        """Post a short plain-text message in the thread."""
        ...

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file attached to the run's request (``core.documents.attachments.FileSource``)."""
        ...

    def classify(self, error: Exception) -> PostFailure: ...

    async def aclose(self) -> None:
        """Stop anything still running for the run (e.g. throttled progress edits)."""
        ...


class AttendedDelivery:
    """The :class:`Delivery` of a run attended by its caller, which shows the outcome itself
    (the console, ``fathom eval``, the benchmark): its progress goes to ``progress``, its
    attached files come from ``files`` (None: none can be downloaded), and nothing is
    posted."""

    def __init__(
        self, progress: ProgressSink | None = None, files: PlatformFiles | None = None
    ) -> None:
        self._progress = progress or NullProgress()
        self._files = files

    @property
    def progress(self) -> ProgressSink:
        return self._progress

    def report_parts(self, outcome: RunOutcome) -> Sequence[Any]:
        """None: the caller shows the report."""
        return ()

    async def post_report_part(self, part: Any) -> None:
        """Nothing is posted (the caller shows the outcome)."""

    def claimed(self, run: RunRecord) -> None:
        """Nothing is posted: nothing earlier attempts recorded matters here."""

    async def post_status(self, text: str) -> None:
        """Nothing is posted (the caller shows the outcome)."""

    async def post_notice(self, text: str) -> None:
        """Nothing is posted (the caller shows the outcome)."""

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        if self._files is None:
            raise AttachmentRefused(NOT_CONNECTED)
        return await self._files.download(attachment, max_bytes)

    def classify(self, error: Exception) -> PostFailure:
        if self._files is None:
            return PostFailure(type(error).__name__, retryable=False)
        return self._files.classify(error)

    async def aclose(self) -> None:
        """Nothing runs for the run here."""


class Undeliverable(Exception):
    """Raised by a :class:`DeliveryFactory` when the run can never be delivered (e.g. the
    bot is not installed in its workspace any more). Any other error is taken as passing."""


class DeliveryFactory(Protocol):
    async def for_run(self, run: RunRecord) -> Delivery: ...


@dataclass(frozen=True)
class DeliveryPolicy:
    """How long a report is retried: ``attempts`` failed posts in all, waiting
    ``first_delay`` seconds after the first, doubling up to ``max_delay`` (a platform's own
    rate-limit delay wins when longer)."""

    attempts: int = 8
    first_delay: float = 5.0
    max_delay: float = 300.0

    def backoff(self, failures: int) -> float:
        return min(self.first_delay * 2.0 ** max(failures - 1, 0), self.max_delay)


def undelivered_notice(outcome: RunOutcome, failures: int, reason: str) -> str:
    """What the thread is told when the run's outcome could not be posted there (in the
    language of its topic; ``reason``: the platform's judgement, as it is)."""
    return wording.undelivered_words(
        request_language(outcome.topic),
        succeeded=outcome.status is RunStatus.SUCCEEDED,
        status=outcome.status.value,
        reason=reason,
        failures=failures,
        thread=str(outcome.thread),
    )


async def publish_final(progress: ProgressSink, outcome: RunOutcome) -> None:
    """Write the final state of the progress message (a takeover repeats it: idempotent)."""
    event = ProgressEvent(
        outcome.run_id,
        ProgressKind.FINISHED,
        final_progress_text(outcome),
        len(outcome.topics),
        outcome.depth,
        tasks=outcome.tasks,
    )
    try:
        await progress.publish(event)
    except Exception:
        log.warning("final progress of run %s failed", outcome.run_id, exc_info=True)


def _has_work(run: RunRecord) -> bool:
    return run.status in UNFINISHED_STATUSES or run.delivery == DeliveryState.PENDING


def _interrupted(run: RunRecord) -> bool:
    """Whether the run was cancelled by an interruption (Ctrl-C, SIGTERM), not by a person."""
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


class ResearchJob:
    """``await job(run_id)``: run (or resume) it, then deliver its outcome exactly once."""

    def __init__(
        self,
        executor: RunExecutor,
        runs: RunStore,
        claims: ClaimStore,
        factories: Mapping[str, DeliveryFactory] | None = None,
        *,
        policy: DeliveryPolicy | None = None,
        chat_platforms: Mapping[str, str] | None = None,
        timer: Timer = MONOTONIC,
    ) -> None:
        self._executor = executor
        #: Names this process's claims; ``timing``: their lease.
        self.owner, self.timing = executor.owner, executor.policy.timing
        self._max_attempts = executor.policy.max_attempts
        self._runs = runs
        self._claims = claims
        self._factories = dict(factories or {})
        self._policy = policy or DeliveryPolicy()
        self._timer = timer  # the back-off between two posts is slept on it
        self._chat_platforms = dict(chat_platforms or {})

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
        metrics = self._executor.metrics
        if result.claim is not None and result.how is not None and metrics is not None:
            metrics.claims_taken.labels(result.how).inc()
        return result

    def lease(self, claim: Claim) -> Lease:
        """``async with job.lease(claim):`` keeps the claim alive while the body runs; a
        cancel requested meanwhile (by any replica) reaches the run here at the next
        heartbeat, also while no step checks for it (its report being written)."""
        return Lease(
            self._claims,
            claim,
            self.timing,
            on_cancel_requested=lambda: self._executor.cancel_here(claim.run_id),
        )

    async def stored_outcome(self, run: RunRecord) -> RunOutcome:
        """The outcome of a finished run, as stored (what ``fathom research --json`` prints
        of it; the MCP tool's result, ``bots.mcp.follow``)."""
        return await self._executor.stored_outcome(run)

    def register(self, platform: str, factory: DeliveryFactory) -> None:
        self._factories[platform] = factory

    @property
    def platforms(self) -> frozenset[str]:
        """The platforms this process can deliver to: the only runs its sweep takes."""
        return frozenset(self._factories)

    @property
    def deliverable(self) -> frozenset[str]:
        """The platforms some process of this deployment may deliver to: every chat platform
        the code has (``chat_platforms``: name -> what people call it, from the composition
        root's registry), and those registered here. A run of any other platform is ended by
        the job as undeliverable (the runners' sweeps hand such orphans to it)."""
        return frozenset(self._chat_platforms) | self.platforms

    async def __call__(self, run_id: str) -> None:
        run = await self._runs.get_run(run_id)
        if run is None:
            log.warning("job for unknown run %s dropped", run_id)
            return
        if not _has_work(run):
            return
        # The thread's key changes once a slash command's opener is posted (``pending-...``
        # -> the opener's id): the lines after that carry the new one.
        with log_context(run_id=run_id, thread=Changing(run.thread_key)):
            await self._run(run)

    async def _run(self, run: RunRecord) -> None:
        run_id = run.id
        platform = run.thread.platform
        factory = self._factories.get(platform)
        if factory is None:
            reason = never_deliverable(run, platform, self.timing.stale_after, self._chat_platforms)
            if reason is None:
                log.warning(
                    "run %s: no %s delivery in this process; left for one that has it",
                    run_id,
                    platform,
                )
                return
            log.error(
                "run %s: no %s delivery in this process or any other: %s", run_id, platform, reason
            )
            await self._undeliverable(run_id, f"{UNDELIVERABLE}{platform}: {reason}"[:500])
            return
        try:
            delivery = await factory.for_run(run)
        except Undeliverable as exc:
            log.error("run %s: cannot deliver to %s (%s)", run_id, platform, exc)
            await self._undeliverable(run_id, f"{UNDELIVERABLE}{platform}: {exc}"[:500])
            return
        except Exception:  # e.g. the installation store did not answer: the sweep tries again
            log.exception(
                "run %s: no %s delivery for now; left for a later sweep", run_id, platform
            )
            return
        try:
            await self._work(run_id, delivery)
        except ClaimLost:
            log.warning("run %s: this runner lost it (taken over, or cut off); stopped", run_id)
        finally:
            await delivery.aclose()

    async def _claim(self, run_id: str) -> Claim | None:
        """Claim the run; a cancellation that arrives meanwhile hands a fresh claim back."""
        claiming = asyncio.ensure_future(self.claim(run_id))
        try:
            return (await asyncio.shield(claiming)).claim
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                claim = (await claiming).claim
                if claim is not None:
                    await release_quietly(self._claims, claim, self._executor.metrics)
            raise

    async def _work(self, run_id: str, delivery: Delivery) -> None:
        claim = await self._claim(run_id)
        if claim is None:
            return  # another runner holds it, or there is nothing left to do
        await self._hold(claim, delivery)

    async def _hold(
        self, claim: Claim, delivery: Delivery, *, attended: bool = False
    ) -> RunOutcome:
        """The run's life past its claim, for every runner: held with a lease, executed (or
        its stored outcome taken: it was finished by a runner that stopped before
        delivering, or given up now) and delivered.

        ``attended``: the caller shows the outcome (the console): a cancellation of the task
        (Ctrl-C) is recorded on the run as an interruption, nothing is posted, and a chat run
        finished here is handed back, so that a ``fathom serve`` replica delivers it.
        Otherwise a job that is cancelled (its runner is stopping: nothing else cancels a
        job), whose lease ran out or whose database failed hands the run back (a no-op
        unless it is still ours), so that a runner continues it without waiting for the
        lease to expire.
        """
        try:
            async with self.lease(claim) as lease:
                if claim.run.status in UNFINISHED_STATUSES:
                    outcome = await self._executor.execute_claimed(
                        claim, delivery.progress, record_interruption=attended, files=delivery
                    )
                else:
                    outcome = await self._executor.stored_outcome(claim.run)
                    if outcome.status is RunStatus.SUCCEEDED:
                        await publish_final(delivery.progress, outcome)
                if not attended:
                    await self._deliver(claim, lease, delivery, outcome)
        except (asyncio.CancelledError, ClaimLost, StorageUnavailable):
            if not attended:
                await release_quietly(self._claims, claim, self._executor.metrics)
            raise
        if attended and delivers(claim.run):
            await release_quietly(self._claims, claim, self._executor.metrics)
        return outcome

    async def attend(self, run_id: str, delivery: Delivery, *, again: bool = False) -> RunOutcome:
        """Run (or resume from its checkpoint) one run in this process for a caller that
        shows its outcome itself (``fathom research``, ``fathom resume``: the console's
        delivery); ``again``: also a failed or cancelled run (``fathom resume``).

        A finished run is not repeated: its stored outcome is returned. A run interrupted
        here before (Ctrl-C) is resumed; one whose holder ran on this host and is gone is
        taken over at once. Raises :class:`RunBusy` when a live runner holds it.
        """
        claimed = await self._attended_claim(run_id, again)
        if isinstance(claimed, RunOutcome):
            return claimed
        return await self._hold(claimed, delivery, attended=True)

    async def _attended_claim(self, run_id: str, again: bool) -> Claim | RunOutcome:
        """The claim of a run to attend, or its stored outcome when it is finished."""
        run = await self._runs.get_run(run_id)
        if run is None:
            raise KeyError(f"no run {run_id!r}")
        if _interrupted(run) or (
            again and run.status in (RunStatus.FAILED.value, RunStatus.CANCELLED.value)
        ):
            await self._requeue(run_id)
        elif run.status.finished:
            return await self._executor.stored_outcome(run)
        result = await self.claim(run_id)
        holder = result.run.owner if result.run is not None else None
        if result.claim is None and holder_is_gone(holder, self.owner):  # killed a moment ago
            result = await self.claim(run_id, from_dead_owner=holder)
        claim = result.claim
        if claim is None:
            if result.run is not None and result.run.status.finished:
                return await self._executor.stored_outcome(result.run)
            raise RunBusy(result.run or run)
        if claim.run.status.finished:  # finished meanwhile: only its delivery was due
            await release_quietly(self._claims, claim)
            return await self._executor.stored_outcome(claim.run)
        return claim

    async def _requeue(self, run_id: str) -> None:
        try:
            await self._runs.requeue_run(run_id)
        except ThreadBusy as busy:
            raise rejected(
                busy,
                "Another research is active in this run's thread{run}; "
                "resume this one when it has finished.",
            ) from None

    async def _deliver(
        self, claim: Claim, lease: Lease, delivery: Delivery, outcome: RunOutcome
    ) -> None:
        """Post what is not posted yet, part by part, with retries; then end the delivery.

        A succeeded run's parts are its report; any other run's only part is its final
        status (the progress message, which must not keep saying "2/3th search executed.").
        """
        delivery.claimed(claim.run)
        post: Callable[[Any], Awaitable[None]]
        parts: Callable[[], Sequence[Any]]
        if outcome.status is RunStatus.SUCCEEDED and outcome.report_markdown:
            parts, post = (lambda: delivery.report_parts(outcome)), delivery.post_report_part
        else:
            status = [final_progress_text(outcome)]
            parts, post = (lambda: status), delivery.post_status
        posted = min(claim.run.report_parts_posted, len(parts()))
        failures = claim.run.delivery_attempts
        if posted < len(parts()) and failures >= self._policy.attempts:  # its runners kept dying
            await self._give_up(claim, delivery, outcome, failures, claim.run.delivery_error)
            return
        # The parts are asked again after each one: a part may decide what follows it (a
        # document step: the document's summary, or the usual parts if it was refused).
        while posted < len(parts()):
            if lease.lost:
                raise ClaimLost(claim.run_id)
            try:
                await self._post_and_record(claim, post, parts()[posted], posted + 1)
            except (ClaimLost, StorageUnavailable):
                raise
            except Exception as exc:
                failure = judge(delivery, exc)
                self._count(claim, "error")
                failures = await self._claims.count_delivery_failure(claim, failure.reason)
                if not failure.retryable or failures >= self._policy.attempts:
                    await self._give_up(
                        claim,
                        delivery,
                        outcome,
                        failures,
                        failure.reason,
                        refused=not failure.retryable,
                    )
                    return
                wait = max(failure.retry_after, self._policy.backoff(failures))
                log.warning(
                    "run %s: part %d/%d not posted (%s); retry %d in %.1fs",
                    claim.run_id,
                    posted + 1,
                    len(parts()),
                    failure.reason,
                    failures,
                    wait,
                )
                await self._timer.sleep(wait)
                continue
            posted += 1
        await self._claims.finish_delivery(claim, posted=True)
        self._count(claim, "delivered")

    def _count(self, claim: Claim, outcome: str) -> None:
        metrics = self._executor.metrics
        if metrics is not None:
            platform = claim.run.thread.platform
            metrics.platform_calls.labels(platform, outcome).inc()

    async def _post_and_record(
        self, claim: Claim, post: Callable[[Any], Awaitable[None]], part: Any, number: int
    ) -> None:
        """Post one part and record it, as one unit: a cancellation (shutdown, lost lease)
        waits for the part in flight (at most ``PART_GRACE`` seconds), so that a part the
        platform accepted is recorded and never posted again by a successor."""

        async def step() -> None:
            await post(part)
            await self._claims.report_parts_posted(claim, number)

        task = asyncio.ensure_future(step())
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task}, timeout=PART_GRACE)
            raise

    async def _give_up(
        self,
        claim: Claim,
        delivery: Delivery,
        outcome: RunOutcome,
        failures: int,
        reason: str | None,
        *,
        refused: bool = False,
    ) -> None:
        """Stop posting: one notice in the thread, and the reason recorded (``refused``: the
        platform refused for good, e.g. the channel is gone: :data:`REFUSED` leads it)."""
        reason = reason or "unknown error"
        log.error(
            "run %s: giving up on its delivery after %d failures (%s)",
            claim.run_id,
            failures,
            reason,
        )
        try:
            await delivery.post_notice(undelivered_notice(outcome, failures, reason))
        except Exception as exc:
            log.error(
                "run %s: the failure notice was not posted either (%s)",
                claim.run_id,
                judge(delivery, exc).reason,
            )
        error = f"not posted after {failures} failures: {reason}"
        await self._claims.finish_delivery(
            claim, posted=False, error=f"{REFUSED}{error}" if refused else error
        )
        self._count(claim, "failed")

    async def _undeliverable(self, run_id: str, reason: str) -> None:
        """Fail a run whose delivery can never be built, before anything is spent on it (a
        console run has no delivery to end: its terminal shows the outcome)."""
        claim = await self._claim(run_id)
        if claim is None:
            return
        run = claim.run
        if run.status in UNFINISHED_STATUSES:
            run = await self._executor.fail_claimed(claim, reason)
        if run.delivery == DeliveryState.PENDING:
            await self._claims.finish_delivery(claim, posted=False, error=reason)


async def run_attended(
    research: Research,
    run_id: str,
    progress: ProgressSink | None = None,
    *,
    again: bool = False,
) -> RunOutcome:
    """Run one run of ``research`` in this process (or resume it: ``again``, as ``fathom
    resume``) through the research job, as the console does, and return its outcome, its
    progress shown on ``progress`` (``fathom eval``, the benchmark, tests; see
    :meth:`ResearchJob.attend`)."""
    store = research.store
    job = ResearchJob(research.executor, store.runs, store.claims)
    return await job.attend(run_id, AttendedDelivery(progress), again=again)


def never_deliverable(
    run: RunRecord, platform: str, stale_after: float, chat_platforms: Mapping[str, str]
) -> str | None:
    """Why no process will ever deliver ``run`` (None: one that serves ``platform`` may).

    A chat platform's run waits for a replica that serves it. A console run is delivered
    only by the ``fathom`` process that started it, to its terminal: once that process has
    left it (not claimed or heartbeating for ``stale_after`` seconds) nobody will. A run of
    any other platform (a digest for a ``cli:`` or ``irc:`` channel) has nowhere to go.
    """
    if platform in chat_platforms:
        return None
    if platform == CONSOLE_PLATFORM and run.digest_id is None:
        last_seen = run.heartbeat_at or run.created_at
        if last_seen > utcnow() - timedelta(seconds=stale_after):
            return None  # its fathom process may be about to claim it, or holds it
        return (
            "a console run is shown only in the terminal of the fathom process that started "
            f"it, and that process left it; finish it with `fathom resume {run.id}`"
        )
    names = ", ".join(chat_platforms) or "none here"
    return f"{platform!r} is not a chat platform (runs are posted to {names})"
