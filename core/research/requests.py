"""The request side of research: what people ask of runs.

:class:`ResearchRequest` is a request to research a topic in a thread (its strategy a registered
one). :class:`RunRequests` creates runs (deduplicated by the request's key, one active per
thread, within the requester's limits), stops and cancels them, records the replies that
steer them and the votes on their reports, and reports usage. It never executes a run:
that is :class:`core.research.executor.RunExecutor`, usually in another process. A stop or cancel is
stored on the run's row for whichever runner holds it; when the run executes in this very
process, :class:`core.research.executing.LocalRuns` reaches it at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as dt_time
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from core.dates import Clock, utcnow, zone
from core.engine.registry import StrategyName
from core.models import (
    CONSOLE_PLATFORM,
    DEFAULT_STRATEGY,
    Attachment,
    Guidance,
    Usage,
)
from core.research.cost import Prices
from core.research.executing import LocalRuns
from core.text import clean_text, has_visible
from core.untrusted import neutralise, without_markdown_links
from core.values import SourceChoice, ThreadKey, Vote
from storage import (
    Admission,
    CancelRequest,
    DailyQuota,
    GuidanceTaken,
    QuotaReached,
    RunRecord,
    RunUsage,
    StopRequest,
    ThreadBusy,
)

if TYPE_CHECKING:
    from core.metrics import Metrics  # (prometheus-client is imported by `fathom serve` only)

#: At most this much of one guidance reply is kept (like a topic, it is the user's words).
MAX_GUIDANCE_CHARS = 500
#: At most this much of a steering person's name (as their platform gives it) is kept.
MAX_NAME_CHARS = 80


class ResearchRequest(BaseModel):
    """A validated request to research a topic in a thread.

    Built by an adapter (or the CLI) from the shared command grammar; the service
    turns it into a durable run row before anything slow happens.
    """

    topic: str
    depth: int
    strategy: StrategyName = DEFAULT_STRATEGY
    thread: ThreadKey
    requested_by: str | None = None
    dedupe_key: str | None = None
    #: What the platform needs to deliver the run (kept with it; e.g. DingTalk's conversation).
    platform_context: dict[str, Any] | None = None
    #: The digest this run is a firing of.
    digest_id: str | None = None
    #: The files the request carried (read when the run executes).
    attachments: list[Attachment] = Field(default_factory=list)
    #: Which sources the run searches; the internal ones are those its thread's channel may
    #: use when it executes (:mod:`core.knowledge`).
    sources: SourceChoice = SourceChoice.ALL


class RequestRuns(Protocol):
    """What :class:`RunRequests` asks of the runs (``storage.RunStore``, or its twin in
    memory ``storage.memory.MemoryRuns``; the chat layer's view ``core.chat.stores.ChatRuns``
    extends it)."""

    async def create_run(
        self,
        *,
        thread: ThreadKey,
        topic: str,
        depth: int,
        strategy: str,
        requested_by: str | None = None,
        dedupe_key: str | None = None,
        platform_context: dict[str, Any] | None = None,
        digest_id: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
        sources: SourceChoice = SourceChoice.ALL,
        admission: Admission | None = None,
    ) -> tuple[RunRecord, bool]: ...

    async def request_cancel(
        self, run_id: str, *, console_platform: str = CONSOLE_PLATFORM
    ) -> CancelRequest: ...

    async def request_stop(
        self, run_id: str, *, console_platform: str = CONSOLE_PLATFORM
    ) -> StopRequest: ...

    async def usage_since(
        self,
        since: datetime,
        *,
        requested_by: str | None = None,
        channel: tuple[str, str, str] | None = None,
    ) -> list[RunUsage]: ...


class RequestThreads(Protocol):
    """Where :class:`RunRequests` keeps the replies steering a run (``storage.ThreadStore``)."""

    async def add_guidance(self, run_id: str, entry: dict[str, Any]) -> GuidanceTaken: ...


class Votes(Protocol):
    """Where :class:`RunRequests` keeps the votes on reports (``storage.FeedbackStore``)."""

    async def record_feedback(self, run_id: str, voter: str, value: Vote) -> Vote | None: ...


class RunRejected(ValueError):
    """The request cannot start now: a run is already active in the thread (``active``,
    when known)."""

    def __init__(self, message: str, active: RunRecord | None = None) -> None:
        super().__init__(message)
        self.active = active


def rejected(busy: ThreadBusy, message: str) -> RunRejected:
    """``message`` with ``{run}`` naming the thread's active run (when known)."""
    run = f" (run {busy.active.id})" if busy.active is not None else ""
    return RunRejected(message.format(run=run), busy.active)


#: A run's token estimate when no run has succeeded yet: this many tokens per search round
#: (a planner call, a round's share of the writer's sources and of the claim check).
TOKENS_PER_ROUND = 10_000
#: A request is refused while less than this much of its requester's daily tokens is left
#: (or the whole quota, when it is smaller): too little to plan, search and write a report.
LEAST_RUN_TOKENS = 2_000


@dataclass(frozen=True)
class UserQuota:
    """What one chat user may start per day (FATHOM_USER_DAILY_RUNS, _TOKENS; None:
    unlimited). The console and a digest's firings are not counted against a user."""

    runs: int | None = None
    tokens: int | None = None

    def day(self, since: datetime, run_tokens: int | None = None) -> DailyQuota:
        """The quota of the day that began at ``since`` (``run_tokens``: FATHOM_MAX_RUN_TOKENS,
        the most one run reserves)."""
        return DailyQuota(
            since=since,
            runs=self.runs,
            tokens=self.tokens,
            run_tokens=run_tokens,
            fallback_per_round=TOKENS_PER_ROUND,
            least=LEAST_RUN_TOKENS,
        )


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
    ``limit``, and when it resets (midnight in FATHOM_TIMEZONE, an aware datetime);
    ``reserved``: of the tokens counted, those their queued and running researches hold
    (what these do not spend is freed when they end)."""

    def __init__(self, kind: str, limit: int, resets_at: datetime, reserved: int = 0) -> None:
        super().__init__(f"today's {kind} quota ({limit}) is used; it resets at {resets_at}")
        self.kind = kind
        self.limit = limit
        self.resets_at = resets_at
        self.reserved = reserved


def midnight_after(day: datetime, timezone: ZoneInfo) -> datetime:
    """The midnight (in ``timezone``) that ends the day ``day`` began."""
    resets = day.astimezone(timezone) + timedelta(days=1)
    return datetime.combine(resets.date(), dt_time(), timezone)


def day_of(moment: datetime, timezone: ZoneInfo) -> datetime:
    """The midnight (in ``timezone``) that began the day of ``moment``."""
    return datetime.combine(moment.astimezone(timezone).date(), dt_time(), timezone)


async def submit_run(
    runs: RequestRuns,
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
        return await runs.create_run(
            thread=key,
            topic=request.topic,
            depth=request.depth,
            strategy=request.strategy,
            requested_by=request.requested_by,
            dedupe_key=request.dedupe_key,
            platform_context=request.platform_context,
            digest_id=request.digest_id,
            attachments=[a.model_dump(mode="json") for a in request.attachments],
            sources=request.sources,
            admission=Admission(user_limit=user_limit, quota=quota),
        )
    except ThreadBusy as busy:
        raise rejected(
            busy,
            "A research is already running in this thread{run}; "
            "wait for it to finish or cancel it.",
        ) from None


class RunRequests:
    """What people ask of runs (see the module docstring)."""

    def __init__(
        self,
        *,
        runs: RequestRuns,
        threads: RequestThreads,
        feedback: Votes,
        local: LocalRuns | None = None,
        timezone: str | ZoneInfo = "UTC",
        clock: Clock = utcnow,
        quota: UserQuota | None = None,
        prices: Prices | None = None,
        metrics: Metrics | None = None,
        run_tokens: int | None = None,
    ) -> None:
        """``local``: the runs executing in this process (a stop or cancel reaches them at
        once); ``timezone`` (FATHOM_TIMEZONE) is that of the days of quotas and usage;
        ``quota``: what a chat user may start per day; ``prices`` (FATHOM_PRICES) price the
        usage report; ``metrics`` counts the votes; ``run_tokens`` (FATHOM_MAX_RUN_TOKENS):
        the most a run reserves of its requester's daily tokens."""
        self._runs = runs
        self._threads = threads
        self._feedback = feedback
        self._local = local or LocalRuns()
        self._timezone = timezone if isinstance(timezone, ZoneInfo) else zone(timezone)
        self._clock = clock
        self._quota = quota or UserQuota()
        self._prices = prices
        self.metrics = metrics
        self._run_tokens = run_tokens

    async def submit(
        self, request: ResearchRequest, *, user_limit: int | None = None
    ) -> tuple[RunRecord, bool]:
        """Create the run row (or find the one this request already created); see
        :func:`submit_run`. :class:`DailyLimitReached` when a chat user has used today's
        quota."""
        quota = self._daily_quota(request)
        try:
            return await submit_run(self._runs, request, user_limit=user_limit, quota=quota)
        except QuotaReached as reached:
            assert quota is not None
            midnight = midnight_after(quota.since, self._timezone)
            raise DailyLimitReached(
                reached.kind, reached.limit, midnight, reached.reserved
            ) from None

    def _daily_quota(self, request: ResearchRequest) -> DailyQuota | None:
        """Today's quota of the request's user (None: unlimited, the console, a digest)."""
        quota = self._quota
        if quota.runs is None and quota.tokens is None:
            return None
        if request.digest_id is not None or request.thread.platform == CONSOLE_PLATFORM:
            return None
        return quota.day(day_of(self._clock(), self._timezone), self._run_tokens)

    async def usage_report(self, user: str, thread: ThreadKey) -> UsageReport:
        """What ``user`` spent today and this month, and what ``thread``'s channel spent
        this month."""
        now = self._clock().astimezone(self._timezone)
        day = datetime.combine(now.date(), dt_time(), self._timezone)
        month = day.replace(day=1)
        mine = await self._runs.usage_since(month, requested_by=user)
        theirs = await self._runs.usage_since(
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
        self, run: RunRecord, by: str, text: str, *, key: str | None = None, name: str | None = None
    ) -> GuidanceTaken | None:
        """Record a reply steering the running ``run`` (its thread's variables keep it; the
        run takes it in at its next checkpoint and shows it to its next plan and to the
        writer): ``kept``, or ``too_late`` once the run's searching has ended (nothing of it
        would read the reply), or ``ended`` when the run has ended meanwhile; None when the
        reply says nothing readable. ``key``: the delivery's dedupe key (a redelivered reply
        is kept once); ``name``: the person's name as the platform gave it, shown instead of
        their id."""
        words = without_markdown_links(neutralise(clean_text(text)))
        words = " ".join(words.split())[:MAX_GUIDANCE_CHARS]
        if not has_visible(words):
            return None
        if run.status.finished:
            return GuidanceTaken.ENDED
        shown = " ".join(neutralise(clean_text(name or "")).split())[:MAX_NAME_CHARS]
        entry = Guidance(
            run_id=run.id, by=by, at=self._clock(), text=words, key=key, name=shown or None
        )
        return await self._threads.add_guidance(run.id, entry.model_dump(mode="json"))

    async def record_feedback(self, run: RunRecord, by: str, vote: Vote) -> Vote | None:
        """Store ``by``'s vote on ``run``'s report (a second press changes it); returns their
        vote before this one (None: their first). A vote that changes something is counted
        in ``fathom_feedback_total``."""
        before = await self._feedback.record_feedback(run.id, by, vote)
        if self.metrics is not None and before is not vote:
            self.metrics.feedback.labels(vote.value).inc()
        return before

    async def stop(self, run_id: str) -> StopRequest:
        """Stop and write now: a running run stops searching at its next step and writes
        its report from what it found (a queued one, with nothing found, is cancelled);
        ``ended`` when it had ended or was already asked (nothing changed)."""
        answer = await self._runs.request_stop(run_id, console_platform=CONSOLE_PLATFORM)
        if answer is StopRequest.STOPPING:
            self._local.stop(run_id)  # running here: seen before the next search
        return answer

    async def cancel(self, run_id: str) -> CancelRequest:
        """Cancel the run (see :class:`CancelRequest`): a running one stops at its next step,
        or, while its report is being written, at once (no report)."""
        answer = await self._runs.request_cancel(run_id, console_platform=CONSOLE_PLATFORM)
        if answer in (CancelRequest.CANCELLING, CancelRequest.ALREADY):
            # Running here: no need to wait for its next checkpoint or heartbeat.
            self._local.cancel(run_id)
        return answer
