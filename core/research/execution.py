"""One run while it executes here: what the executor (:mod:`core.research.executor`) carries
from the run's start to its end, in one object (:class:`RunExecution`): its claim and state,
its flags (cancel, "Stop and write now"), where its progress goes, its checkpoint, and why its
searching must end now (a stop, or a spent budget).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from zoneinfo import ZoneInfo

from core.dates import Clock
from core.engine.budget import StepMeter
from core.engine.files import FileReader, PlatformFiles
from core.engine.progress import (
    ProgressEvent,
    ProgressKind,
    ProgressSink,
    ProgressTask,
)
from core.engine.state import RunState, StepHooks, StopReason
from core.engine.strategy import Strategy
from core.models import Attachment, ThreadVariables
from core.research.executing import RunFlags
from core.research.outcome import usage_of
from core.research.policy import RunPolicy, RunStores
from core.research.requests import day_of
from core.research.steps import save_checkpoint
from core.untrusted import shown_name
from core.words import note_words, wording
from storage import Claim, RunRecord

log = logging.getLogger("core.service")  # (where these lines were always logged)


def seconds_before(run: RunRecord) -> float:
    """How long ago the claimed ``run`` first started (its claim stamped ``heartbeat_at``)."""
    if run.started_at is None or run.heartbeat_at is None:
        return 0.0
    return max(0.0, (run.heartbeat_at - run.started_at).total_seconds())


def resumed_state(claim: Claim, state: RunState) -> bool:
    """Set ``state`` up to continue the claimed run; whether it was worked on before (a plan
    or a search was checkpointed: it continues, it does not plan again)."""
    run = claim.run
    resuming = run.rounds_done > 0 or run.llm_calls > 0 or run.searches > 0
    if not resuming:
        state.variables.next_search_topic = None
        state.variables.should_continue = True
    return resuming


def claimed_state(claim: Claim, timezone: ZoneInfo, clock: Clock) -> RunState:
    """The state of a claimed run as its last checkpoint left it, its dates in ``timezone``
    on ``clock``."""
    run = claim.run
    variables = (
        ThreadVariables.model_validate(claim.variables) if claim.variables else ThreadVariables()
    )
    return RunState(
        run_id=run.id,
        topic=run.topic,
        depth=run.depth,
        variables=variables,
        rounds_done=run.rounds_done,
        usage=usage_of(run),
        notes=list(run.notes),
        variables_version=claim.variables_version,
        files_saved=[f.id for f in variables.files] if claim.variables_version else [],
        timezone=timezone,
        clock=clock,
    )


class RunExecution:
    """One claimed run executing here (see the module docstring). ``strategy``: the run's
    (None: no strategy of its name is registered); ``sink``: where its progress goes;
    ``policy``: its budget and its requester's daily quota; ``monotonic``: the clock of its
    time budget."""

    def __init__(
        self,
        claim: Claim,
        state: RunState,
        strategy: Strategy | None,
        sink: ProgressSink,
        stores: RunStores,
        policy: RunPolicy,
        monotonic: Callable[[], float],
    ) -> None:
        self.claim = claim
        self.run = claim.run
        self.state = state
        self.strategy = strategy
        self.flags = RunFlags(self.run.cancel_requested, self.run.stop_requested)
        self.resuming = resumed_state(claim, state)
        #: How many notes the run had before the report's own were added (None: its report
        #: is not being written; none of its notes are kept when it ends without one).
        self.research_notes: int | None = None
        self.started = time.monotonic()
        self._sink = sink
        self._stores = stores
        self._policy = policy
        # The run's share of its requester's daily tokens (None: no daily quota applies),
        # and the size of its steps.
        self.allowance = self.run.token_allowance
        self._steps = StepMeter()
        # The time budget counts from the run's first start: the time of earlier attempts
        # (on the database's clock, as the claim stamped both), then this one's.
        self._monotonic = monotonic
        self._earlier = seconds_before(self.run)
        self._began = monotonic()

    @property
    def cancelled(self) -> bool:
        """Whether a cancel was requested (as last seen)."""
        return self.flags.requested

    def hooks(self) -> StepHooks:
        """What the strategy calls between its steps."""
        return StepHooks(
            checkpoint=self.checkpoint,
            progress=self.publish,
            is_cancelled=lambda: self.cancelled,
            stop_reason=self.stop_reason,
        )

    def plan(self, searching: str | None = None) -> tuple[ProgressTask, ...]:
        """The run's plan as its strategy sees it now (none for an unknown strategy)."""
        if self.strategy is None:
            return ()
        return tuple(self.strategy.tasks(self.state, searching))

    async def publish(
        self, kind: ProgressKind, text: str, topic: str | None = None, *, pages: int = 0
    ) -> None:
        """Show the run's progress (a failure to show it never breaks the research)."""
        state = self.state
        try:
            tasks = self.plan(topic if kind is ProgressKind.SEARCHING else None)
            event = ProgressEvent(
                self.run.id, kind, text, state.rounds_done, state.depth, topic, tasks, pages
            )
            await self._sink.publish(event)
        except Exception:
            log.warning("progress sink failed for run %s", self.run.id, exc_info=True)

    async def checkpoint(
        self, current: RunState, searching_ended: StopReason | None = None
    ) -> None:
        """Write the state down (fenced by the claim), and take in the flags stored."""
        stored = await save_checkpoint(
            self._stores.claims, self.claim, current, searching_ended=searching_ended
        )
        if stored.cancel_requested:
            self.flags.cancel()
        self.flags.stop = self.flags.stop or stored.stop_requested
        self.allowance = await self._grown(current, self._steps.look(current.usage))

    def stop_reason(self) -> StopReason | None:
        """Why the searching must end now (None: it goes on)."""
        if self.flags.stop:
            return StopReason.STOPPED
        elapsed = self._earlier + self._monotonic() - self._began
        usage = self.state.usage
        return self._policy.budget.spent(usage, elapsed, self.allowance, self._steps.look(usage))

    async def _grown(self, state: RunState, next_step: int) -> int | None:
        """The run's daily allowance, grown (by its first reservation, as far as its
        requester's day has room) when its searching has spent its share of it or its next
        step would; unchanged while not, or when its own budget is the lower limit."""
        run, allowance = self.run, self.allowance
        budget, quota = self._policy.budget, self._policy.quota
        if allowance is None or quota.tokens is None or run.requested_by is None:
            return allowance
        if not budget.quota_binds(allowance):
            return allowance
        if not budget.tokens_short(state.usage, allowance, next_step):
            return allowance
        day = quota.day(day_of(run.created_at, self._policy.zone), budget.tokens)
        more = max(run.token_allowance or 0, 1)
        grown = await self._stores.runs.extend_allowance(run.id, run.requested_by, day, more)
        return allowance if grown is None else grown

    async def read_files(self, reader: FileReader | None, files: PlatformFiles | None) -> None:
        """Read the files attached to the run's request that the thread has not read yet
        (``reader`` None: each is noted as not read)."""
        run, state = self.run, self.state
        attachments = []
        for raw in run.attachments or ():
            try:
                attachments.append(Attachment.model_validate(raw))
            except ValueError:
                log.warning("run %s: an attachment's description is not valid; skipped", run.id)
        if not attachments:
            return
        if reader is None:
            for attachment in attachments:
                name = shown_name(attachment.name)
                state.note(note_words.file_not_read_words(state.language, name, None))
            return
        unread = reader.unread(state, attachments)
        if unread:
            await self.publish(
                ProgressKind.READING, wording.reading_files_words(state.language, unread)
            )
            await reader.read(state, unread, files, self.checkpoint, lambda: self.cancelled)
