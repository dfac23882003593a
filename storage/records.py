"""Immutable rows handed to callers; ORM objects never leave the storage layer."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.values import DeliveryState, ReportDocument, RunStatus, SourceChoice, ThreadKey


class StopRequest(enum.StrEnum):
    """What asking a run to stop and write did (:meth:`storage.Store.request_stop`)."""

    #: It was running: it stops searching at its next step and writes its report.
    STOPPING = "stopping"
    #: It was queued, with nothing found to write from: it was cancelled.
    CANCELLED = "cancelled"
    #: It had ended, or was already asked to stop or cancel: nothing changed.
    ENDED = "ended"


class CancelRequest(enum.StrEnum):
    """What asking a run to cancel did (:meth:`storage.Store.request_cancel`), decided by
    the database: of two requests racing (two replicas, a press and a typed ``cancel``), one
    gets ``cancelling``, the other ``already``."""

    #: It was queued: it ended cancelled at once.
    CANCELLED = "cancelled"
    #: It was running: it stops at its next step, or its writer is stopped; no report.
    CANCELLING = "cancelling"
    #: It was already asked to cancel (it may have ended cancelled since, its outcome not
    #: posted yet): nothing more.
    ALREADY = "already"
    #: It had finished with its report, which is being posted: too late to cancel.
    POSTING = "posting"
    #: It had ended (or is unknown): nothing changed.
    ENDED = "ended"


class GuidanceTaken(enum.StrEnum):
    """What a reply steering a run came to (:meth:`storage.ThreadStore.add_guidance`),
    decided by the database against the run's own checkpoint that ends its searching."""

    #: Kept with the thread's variables before the run's searching ended: its next plan (if
    #: any) and its writer see it.
    KEPT = "kept"
    #: The run's searching has ended (its report is being written, or it is ending): the
    #: reply is not kept, as nothing of the run would read it any more.
    TOO_LATE = "too_late"
    #: The run has ended (or is unknown): not kept.
    ENDED = "ended"


class Renewal(enum.Enum):
    """What renewing a held run's heartbeat found (:meth:`storage.Store.renew_claim`)."""

    #: Another runner holds the run now (or the claim ended): stop working on it.
    LOST = "lost"
    #: Still held.
    HELD = "held"
    #: Still held, and a cancel was requested (perhaps by another replica) meanwhile.
    CANCEL_REQUESTED = "cancel requested"


@dataclass(frozen=True, slots=True)
class RunUsage:
    """One run's counters, for totals (``/research usage``)."""

    prompt_tokens: int
    completion_tokens: int
    searches: int
    tokens_by_model: dict[str, list[int]]
    #: When the run was made: a run counts once, by its start.
    created_at: datetime


@dataclass(frozen=True, slots=True)
class DailyQuota:
    """A requester's quota for the day that began at ``since`` (None: unlimited). Runs and
    tokens of their requests since then count (a digest's firings do not): a finished run its
    tokens, a queued or running one its token allowance or its tokens, whichever is more.

    A run admitted under ``tokens`` reserves its allowance: its request's estimate (the tokens
    per search round of the last succeeded runs, ``fallback_per_round`` when there are none,
    times its depth; at most ``run_tokens``, FATHOM_MAX_RUN_TOKENS), at most what is left of
    the day; a request is refused while less than ``least`` (or the whole quota, when that is
    smaller) is left."""

    since: datetime
    runs: int | None = None
    tokens: int | None = None
    run_tokens: int | None = None
    fallback_per_round: int = 10_000
    least: int = 2_000


@dataclass(frozen=True, slots=True)
class Admission:
    """The limits a new run is admitted under (:meth:`storage.RunStore.create_run`), counted
    in the transaction that inserts it: ``user_limit``, the most unfinished runs its requester
    may have (FATHOM_USER_CONCURRENCY); ``quota``, their quota of the day (None: unlimited)."""

    user_limit: int | None = None
    quota: DailyQuota | None = None


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    id: int
    key: str
    platform: str
    workspace: str
    channel: str
    thread_ref: str
    created_at: datetime
    updated_at: datetime


#: Where a run stands in the newest-first order of a list of runs: its ``created_at`` and
#: ``id`` (a keyset cursor: a run created or deleted meanwhile moves no other run's place).
RunPosition = tuple[datetime, str]


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: str
    thread_id: int
    thread_key: str
    #: ``thread_key`` parsed (once, where the row is read).
    thread: ThreadKey
    topic: str
    depth: int
    strategy: str
    status: RunStatus
    rounds_done: int
    requested_by: str | None
    dedupe_key: str | None
    cancel_requested: bool
    progress_message_id: str | None
    error: str | None
    notes: list[str]
    report_markdown: str | None
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    searches: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    report_posted_at: datetime | None = None
    owner: str | None = None
    fence: int = 0
    attempt: int = 0
    delivery: DeliveryState | None = None
    report_parts_posted: int = 0
    delivery_attempts: int = 0
    delivery_error: str | None = None
    #: What the run's platform needs to deliver it (e.g. DingTalk's conversation).
    platform_context: dict[str, Any] | None = None
    #: The digest this run is a firing of.
    digest_id: str | None = None
    #: Result pages read, and pages that could not be read or held nothing relevant.
    pages_read: int = 0
    pages_skipped: int = 0
    #: Files attached in the chat that were read.
    attachments_read: int = 0
    #: The files the request carried (``core.models.Attachment`` as JSON).
    attachments: list[dict[str, Any]] | None = None
    #: Calls to internal sources (MCP servers).
    internal_searches: int = 0
    #: Model name -> [prompt, completion] tokens.
    tokens_by_model: dict[str, list[int]] | None = None
    #: Step -> seconds spent in it (``core.models.Usage.seconds_by_step``).
    seconds_by_step: dict[str, float] | None = None
    #: Which sources the run searches.
    sources: SourceChoice = SourceChoice.ALL
    #: "Stop and write now" was asked: the run stops searching and writes its report.
    stop_requested: bool = False
    #: Why its searching ended (``core.engine.state.StopReason``), once it has finished.
    stop_reason: str | None = None
    #: The claim check's model calls and tokens (counted in the totals too).
    verifier_calls: int = 0
    verifier_prompt_tokens: int = 0
    verifier_completion_tokens: int = 0
    #: How the report's cited claims held (``core.claims.summary.CheckSummary`` as JSON).
    claim_check: dict[str, Any] | None = None
    #: Its share of its requester's daily token quota, reserved when it was admitted and
    #: grown while the day had room (None: no daily quota applies to it).
    token_allowance: int | None = None
    #: What its long report became on its platform (a document, or refused: parts); None: no
    #: document step was taken.
    report_document: ReportDocument | None = None

    @property
    def seconds(self) -> float | None:
        """Wall-clock duration, once the run has both started and finished."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


@dataclass(frozen=True, slots=True)
class SourceRecord:
    n: int
    title: str
    url: str
    published: str | None = None
    kind: str = "web"
    server: str | None = None


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    key: str
    runs: int
    last_topic: str | None
    last_status: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Claim:
    """This runner holds a run: the fencing token of every write it makes to the run.

    ``fence`` grows with every claim and never goes back, so a runner that lost the run
    (another one took it over after its heartbeat expired) holds a stale token and its writes
    change nothing (``storage.ClaimLost``).
    """

    run: RunRecord
    owner: str
    fence: int
    variables: dict[str, Any] | None = None
    variables_version: int = 0  # 0: the thread has no variables row yet

    @property
    def run_id(self) -> str:
        return self.run.id


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What one claim attempt found."""

    run: RunRecord | None  # the run after the attempt; None when there is no such run
    claim: Claim | None = None  # set when the caller now holds the run
    gave_up: bool = False  # the run had used up its attempts and was failed instead
    #: How a claimed run was taken: ``new``, ``resumed`` (queued again after an attempt that
    #: started it), ``taken_over`` (running, its runner gone), ``delivery`` (finished, its
    #: delivering runner gone) or ``gave_up``; None when nothing was claimed.
    how: str | None = None


@dataclass(frozen=True, slots=True)
class Checkpointed:
    """What a checkpoint returns: the cancel and stop flags as stored, and the variables' new
    version."""

    cancel_requested: bool
    variables_version: int
    stop_requested: bool = False


@dataclass(frozen=True, slots=True)
class DigestRecord:
    id: str
    platform: str
    workspace: str
    channel: str
    topic: str
    depth: int
    strategy: str
    cron: str
    timezone: str
    created_by: str
    enabled: bool
    created_at: datetime
    disabled_reason: str | None = None
    platform_context: dict[str, Any] | None = None
    sources: str = "all"


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    """One vote on a run's report, with what the run was about and where."""

    run_id: str
    voter: str
    value: str  # "up" or "down"
    topic: str
    thread_key: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """One state of an MCP run's progress (``mcp_progress``): its number in the run (from 1),
    its text and when it was written."""

    run_id: str
    seq: int
    text: str
    created_at: datetime
