"""The chat layer's stores in memory: a twin of :class:`core.chat.stores.ChatStores` with no
database (slack-machine's ``MemoryStorage`` idea).

:class:`MemoryStores` fills every store of the view (``runs``, ``threads``, ``events``,
``files``, ``contexts``, ``feedback``, ``progress``) with the SQL stores' answers: a delivery
key recorded once, one active run per thread, a redelivery finding its run, the per-user limit
and the daily quota counted before a run is admitted (and the token allowance it reserves),
stop and cancel decided on the run as it is, guidance refused once the run's searching ended,
a file taken by one request only, an MCP run's progress rows numbered in order. Each decision
is made under one :class:`asyncio.Lock`, so concurrent calls in one event loop are decided
one after another, as the database's locks decide them across replicas.
``tests/test_store_contract.py`` holds the twin and the SQL stores to the same answers; the
chat layer's tests that need no run executed use the twin.

What a runner writes (``storage.ClaimStore``: claims, checkpoints, outcomes, deliveries) is
not part of the view: a test standing in for a runner changes a run's record with
:meth:`MemoryRuns.write`. Not to be confused with ``bots.chat.memory``, the in-memory chat
*platform*.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from uuid import uuid4

from core.values import (
    FINISHED_STATUSES,
    UNFINISHED_STATUSES,
    DeliveryState,
    ReportDocument,
    RunStatus,
    SourceChoice,
    ThreadKey,
    Vote,
)
from storage.errors import QuotaReached, ThreadBusy, UserBusy
from storage.lifecycle import CONSOLE_PLATFORM, EPOCH
from storage.records import (
    Admission,
    CancelRequest,
    DailyQuota,
    GuidanceTaken,
    ProgressRecord,
    RunPosition,
    RunRecord,
    RunUsage,
    SourceRecord,
    StopRequest,
    ThreadRecord,
    ThreadSummary,
)
from storage.sql import fit_key
from storage.tables import utcnow

#: How many succeeded runs a new run's token estimate is taken from (``storage.runs``).
_RECENT = 20


@dataclass
class _Thread:
    record: ThreadRecord
    variables: dict[str, Any] | None = None
    version: int = 0


@dataclass
class _Memory:
    """What every store of one twin shares: its rows and its lock."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    threads: dict[int, _Thread] = field(default_factory=dict)
    runs: dict[str, RunRecord] = field(default_factory=dict)
    sources: dict[str, list[SourceRecord]] = field(default_factory=dict)
    events: dict[str, datetime] = field(default_factory=dict)
    files: list[tuple[int, str, dict[str, Any], datetime]] = field(default_factory=list)
    contexts: dict[str, tuple[dict[str, Any], datetime]] = field(default_factory=dict)
    votes: dict[tuple[str, str], Vote] = field(default_factory=dict)
    progress: dict[str, list[ProgressRecord]] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def thread_by_key(self, key: str) -> _Thread | None:
        return next((t for t in self.threads.values() if t.record.key == key), None)

    def run(self, run: RunRecord) -> RunRecord:
        """The run as read: its thread's key now (a thread re-keyed moves its runs)."""
        key = self.threads[run.thread_id].record.key
        if key == run.thread_key:
            return run
        return replace(run, thread_key=key, thread=ThreadKey.parse(key))

    def all_runs(self) -> list[RunRecord]:
        return [self.run(r) for r in self.runs.values()]

    def oldest_first(self, runs: list[RunRecord]) -> list[RunRecord]:
        return sorted(runs, key=lambda r: (r.created_at, r.id))

    def newest_first(self, runs: list[RunRecord]) -> list[RunRecord]:
        return sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True)

    def active_in(self, thread_id: int) -> RunRecord | None:
        return next(
            (
                self.run(r)
                for r in self.runs.values()
                if r.thread_id == thread_id and r.status in UNFINISHED_STATUSES
            ),
            None,
        )

    def in_channel(self, platform: str, workspace: str, channel: str) -> list[RunRecord]:
        where = (platform, workspace, channel)
        return [r for r in self.all_runs() if _channel(self.threads[r.thread_id].record) == where]


class MemoryRuns:
    """:class:`core.chat.stores.ChatRuns` in memory (``storage.RunStore``'s answers)."""

    def __init__(self, memory: _Memory) -> None:
        self._m = memory

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
    ) -> tuple[RunRecord, bool]:
        """See ``storage.RunStore.create_run``: decided under the twin's lock, every limit
        counted before anything is written (a refused request changes nothing)."""
        m = self._m
        key = str(thread)
        if dedupe_key is not None:
            dedupe_key = fit_key(dedupe_key)
        user_limit = admission.user_limit if admission is not None else None
        quota = admission.quota if admission is not None else None
        async with m.lock:
            now = utcnow()
            seen = next((r for r in m.runs.values() if r.dedupe_key == dedupe_key), None)
            if dedupe_key is None:
                seen = None
            allowance = None
            if quota is not None and requested_by is not None and seen is None:
                allowance = self._check_quota(quota, requested_by, depth)
            if user_limit is not None and requested_by is not None and seen is None:
                unfinished = sum(
                    1
                    for r in m.runs.values()
                    if r.requested_by == requested_by and r.status in UNFINISHED_STATUSES
                )
                if unfinished >= user_limit:
                    raise UserBusy(unfinished, user_limit)
            held = m.thread_by_key(key)
            if seen is None and held is not None:
                active = m.active_in(held.record.id)
                if active is not None:
                    raise ThreadBusy(active)
            if held is None:
                tid = next(m.ids)
                record = ThreadRecord(
                    id=tid,
                    key=key,
                    platform=thread.platform,
                    workspace=thread.workspace,
                    channel=thread.channel,
                    thread_ref=thread.thread,
                    created_at=now,
                    updated_at=now,
                )
                held = m.threads[tid] = _Thread(record)
            else:
                held.record = replace(held.record, updated_at=now)
            if seen is not None:
                return m.run(seen), False
            run = RunRecord(
                id=uuid4().hex,
                thread_id=held.record.id,
                thread_key=key,
                thread=ThreadKey.parse(key),
                topic=topic,
                depth=depth,
                strategy=strategy,
                status=RunStatus.QUEUED,
                rounds_done=0,
                requested_by=requested_by,
                dedupe_key=dedupe_key,
                cancel_requested=False,
                progress_message_id=None,
                error=None,
                notes=[],
                report_markdown=None,
                llm_calls=0,
                prompt_tokens=0,
                completion_tokens=0,
                searches=0,
                created_at=now,
                started_at=None,
                finished_at=None,
                heartbeat_at=now,
                platform_context=platform_context,
                digest_id=digest_id,
                attachments=attachments or None,
                sources=SourceChoice(sources),
                token_allowance=allowance,
            )
            m.runs[run.id] = run
            return run, True

    def _check_quota(self, quota: DailyQuota, requested_by: str, depth: int) -> int | None:
        """``storage.runs._check_quota`` over the runs in memory."""
        if quota.runs is None and quota.tokens is None:
            return None
        todays = [
            r
            for r in self._m.runs.values()
            if r.requested_by == requested_by
            and r.created_at >= quota.since
            and r.digest_id is None
        ]
        spent = sum(_spent(r) for r in todays)
        charged = sum(_charged(r) for r in todays)
        if quota.runs is not None and len(todays) >= quota.runs:
            raise QuotaReached("runs", len(todays), quota.runs)
        if quota.tokens is None:
            return None
        left = quota.tokens - charged
        least = min(quota.least, quota.tokens)
        if left < least:
            raise QuotaReached("tokens", charged, quota.tokens, charged - spent)
        return max(min(self._estimate(quota, depth), left), least)

    def _estimate(self, quota: DailyQuota, depth: int) -> int:
        succeeded = [
            r
            for r in self._m.runs.values()
            if r.status == RunStatus.SUCCEEDED and r.depth > 0 and r.finished_at is not None
        ]
        recent = sorted(succeeded, key=lambda r: r.finished_at or EPOCH, reverse=True)[:_RECENT]
        depths = sum(r.depth for r in recent)
        per_round = sum(_spent(r) for r in recent) / depths if depths else quota.fallback_per_round
        estimate = max(1, math.ceil(per_round * max(1, depth)))
        return estimate if quota.run_tokens is None else min(estimate, quota.run_tokens)

    def _cancel_queued(self, run: RunRecord, console_platform: str) -> None:
        platform = self._m.threads[run.thread_id].record.platform
        self._m.runs[run.id] = replace(
            run,
            status=RunStatus.CANCELLED,
            cancel_requested=True,
            finished_at=utcnow(),
            owner=None,
            heartbeat_at=EPOCH,
            delivery=None if platform == console_platform else DeliveryState.PENDING,
        )

    async def request_cancel(
        self, run_id: str, *, console_platform: str = CONSOLE_PLATFORM
    ) -> CancelRequest:
        """See ``storage.RunStore.request_cancel``."""
        async with self._m.lock:
            run = self._m.runs.get(run_id)
            if run is None:
                return CancelRequest.ENDED
            status, flagged, delivery = run.status, run.cancel_requested, run.delivery
            if status == RunStatus.QUEUED:
                self._cancel_queued(run, console_platform)
                return CancelRequest.ALREADY if flagged else CancelRequest.CANCELLED
            if flagged and status == RunStatus.RUNNING:
                return CancelRequest.ALREADY
            if flagged and status == RunStatus.CANCELLED and delivery == DeliveryState.PENDING:
                return CancelRequest.ALREADY
            if status == RunStatus.RUNNING:
                self._m.runs[run_id] = replace(run, cancel_requested=True)
                return CancelRequest.CANCELLING
            if status == RunStatus.SUCCEEDED and delivery == DeliveryState.PENDING:
                return CancelRequest.POSTING
            return CancelRequest.ENDED

    async def request_stop(
        self, run_id: str, *, console_platform: str = CONSOLE_PLATFORM
    ) -> StopRequest:
        """See ``storage.RunStore.request_stop``."""
        async with self._m.lock:
            run = self._m.runs.get(run_id)
            if run is None:
                return StopRequest.ENDED
            if run.status not in UNFINISHED_STATUSES or run.cancel_requested or run.stop_requested:
                return StopRequest.ENDED
            if run.status == RunStatus.QUEUED and run.started_at is None:
                self._cancel_queued(run, console_platform)
                return StopRequest.CANCELLED
            self._m.runs[run_id] = replace(run, stop_requested=True)
            return StopRequest.STOPPING

    async def set_progress_message(self, run_id: str, message_id: str) -> None:
        async with self._m.lock:
            run = self._m.runs.get(run_id)
            if run is not None:
                self._m.runs[run_id] = replace(run, progress_message_id=message_id)

    async def record_report_document(
        self, run_id: str, document: ReportDocument
    ) -> ReportDocument | None:
        async with self._m.lock:
            run = self._m.runs.get(run_id)
            if run is None:
                return None
            if run.report_document is None:
                run = self._m.runs[run_id] = replace(run, report_document=document)
            return run.report_document

    async def reserve_progress_message(self, run_id: str, marker: str) -> bool:
        async with self._m.lock:
            run = self._m.runs.get(run_id)
            if run is None or run.status != RunStatus.QUEUED or run.progress_message_id:
                return False
            self._m.runs[run_id] = replace(run, progress_message_id=marker)
            return True

    async def settle_progress_message(
        self, run_id: str, marker: str, message_id: str | None
    ) -> bool:
        async with self._m.lock:
            run = self._m.runs.get(run_id)
            if run is None or run.progress_message_id != marker:
                return False
            self._m.runs[run_id] = replace(run, progress_message_id=message_id)
            return True

    async def queue_place(self, run_id: str) -> int | None:
        run = self._m.runs.get(run_id)
        if run is None or run.status != RunStatus.QUEUED:
            return None
        mine = (run.created_at, run.id)
        return 1 + sum(
            1
            for r in self._m.runs.values()
            if r.status == RunStatus.QUEUED and (r.created_at, r.id) < mine
        )

    async def get_run(self, run_id: str) -> RunRecord | None:
        run = self._m.runs.get(run_id)
        return None if run is None else self._m.run(run)

    async def active_runs_for_user(self, requested_by: str) -> list[RunRecord]:
        runs = [
            r
            for r in self._m.all_runs()
            if r.requested_by == requested_by and r.status in UNFINISHED_STATUSES
        ]
        return self._m.oldest_first(runs)

    async def recent_runs_for_user(
        self, requested_by: str, limit: int = 10, before: RunPosition | None = None
    ) -> list[RunRecord]:
        runs = [
            r
            for r in self._m.all_runs()
            if r.requested_by == requested_by and (before is None or (r.created_at, r.id) < before)
        ]
        return self._m.newest_first(runs)[:limit]

    async def recent_runs_in_channel(
        self, platform: str, workspace: str, channel: str, limit: int = 10
    ) -> list[RunRecord]:
        return self._m.newest_first(self._m.in_channel(platform, workspace, channel))[:limit]

    async def active_runs_in_channel(
        self, platform: str, workspace: str, channel: str
    ) -> list[RunRecord]:
        runs = self._m.in_channel(platform, workspace, channel)
        return self._m.oldest_first([r for r in runs if r.status in UNFINISHED_STATUSES])

    async def usage_since(
        self,
        since: datetime,
        *,
        requested_by: str | None = None,
        channel: tuple[str, str, str] | None = None,
    ) -> list[RunUsage]:
        runs = [r for r in self._m.all_runs() if r.created_at >= since]
        if requested_by is not None:
            runs = [r for r in runs if r.requested_by == requested_by]
        if channel is not None:
            where = set(r.id for r in self._m.in_channel(*channel))
            runs = [r for r in runs if r.id in where]
        return [
            RunUsage(
                r.prompt_tokens,
                r.completion_tokens,
                r.searches,
                dict(r.tokens_by_model or {}),
                r.created_at,
            )
            for r in runs
        ]

    async def latest_run_in_thread(self, thread_key: str) -> RunRecord | None:
        runs = [r for r in self._m.all_runs() if r.thread_key == thread_key]
        return next(iter(self._m.newest_first(runs)), None)

    async def active_run_in_thread(self, thread_key: str) -> RunRecord | None:
        held = self._m.thread_by_key(thread_key)
        return None if held is None else self._m.active_in(held.record.id)

    async def thread_runs(self, thread_id: int) -> list[RunRecord]:
        return self._m.oldest_first([r for r in self._m.all_runs() if r.thread_id == thread_id])

    async def run_sources(self, run_id: str) -> list[SourceRecord]:
        return sorted(self._m.sources.get(run_id, []), key=lambda s: s.n)

    async def count_runs(
        self, statuses: Sequence[RunStatus] | None = None
    ) -> list[tuple[str, str, int]]:
        wanted = None if statuses is None else {RunStatus(s) for s in statuses}
        counts: dict[tuple[str, str], int] = {}
        for run in self._m.all_runs():
            if wanted is None or run.status in wanted:
                key = (run.status.value, run.thread.platform)
                counts[key] = counts.get(key, 0) + 1
        return [(status, platform, n) for (status, platform), n in sorted(counts.items())]

    def write(
        self, run_id: str, *, sources: Sequence[SourceRecord] | None = None, **changes: Any
    ) -> RunRecord:
        """Change a run's record as its runner would (``storage.ClaimStore`` is not part of the
        view): ``status=RunStatus.RUNNING, started_at=...``, a finished run's ``delivery``, its
        ``stop_reason``; ``sources`` replaces its sources. Returns the run as read."""
        run = self._m.runs[run_id]
        if "status" in changes:
            changes["status"] = RunStatus(changes["status"])
            if changes["status"] in FINISHED_STATUSES and "finished_at" not in changes:
                changes["finished_at"] = utcnow()
        self._m.runs[run_id] = changed = replace(run, **changes)
        if sources is not None:
            self._m.sources[run_id] = list(sources)
        return self._m.run(changed)


class MemoryThreads:
    """:class:`core.chat.stores.ChatThreads` in memory (``storage.ThreadStore``'s answers)."""

    def __init__(self, memory: _Memory) -> None:
        self._m = memory

    async def rekey_thread(self, thread_id: int, key: ThreadKey) -> ThreadRecord:
        async with self._m.lock:
            held = self._m.threads.get(thread_id)
            if held is None:
                raise LookupError(f"no thread {thread_id}")
            other = self._m.thread_by_key(str(key))
            if other is not None and other is not held:
                raise ValueError(f"thread key {key} is taken")
            held.record = replace(
                held.record, key=str(key), thread_ref=key.thread, updated_at=utcnow()
            )
            return held.record

    async def get_thread(self, key: str) -> ThreadRecord | None:
        held = self._m.thread_by_key(key)
        return None if held is None else held.record

    async def list_threads(self, limit: int = 50) -> list[ThreadSummary]:
        threads = sorted(
            self._m.threads.values(),
            key=lambda t: (t.record.updated_at, t.record.id),
            reverse=True,
        )[:limit]
        summaries = []
        for held in threads:
            runs = self._m.newest_first(
                [r for r in self._m.runs.values() if r.thread_id == held.record.id]
            )
            latest = runs[0] if runs else None
            summaries.append(
                ThreadSummary(
                    key=held.record.key,
                    runs=len(runs),
                    last_topic=latest.topic if latest else None,
                    last_status=latest.status.value if latest else None,
                    updated_at=held.record.updated_at,
                )
            )
        return summaries

    async def add_guidance(self, run_id: str, entry: dict[str, Any]) -> GuidanceTaken:
        """See ``storage.ThreadStore.add_guidance``: kept while the run still searches (no
        ``stop_reason`` recorded yet), once per delivery key."""
        async with self._m.lock:
            run = self._m.runs.get(run_id)
            if run is None or run.status not in UNFINISHED_STATUSES:
                return GuidanceTaken.ENDED
            if run.stop_reason is not None:
                return GuidanceTaken.TOO_LATE
            held = self._m.threads[run.thread_id]
            if held.variables is None:
                held.variables = {
                    "topics": [],
                    "nextSearchTopic": None,
                    "findings": [],
                    "shouldContinue": True,
                    "strategyState": {},
                    "files": [],
                    "guidance": [dict(entry)],
                }
                held.version = 1
                return GuidanceTaken.KEPT
            kept = held.variables["guidance"]
            if entry.get("key") and any(g.get("key") == entry["key"] for g in kept):
                return GuidanceTaken.KEPT  # a redelivery of a reply already kept
            held.variables["guidance"] = [*kept, dict(entry)]
            held.version += 1
            return GuidanceTaken.KEPT

    async def load_variables(self, thread_id: int) -> dict[str, Any] | None:
        held = self._m.threads.get(thread_id)
        if held is None or held.variables is None:
            return None
        return {
            k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
            for k, v in held.variables.items()
        }


class MemoryEvents:
    """:class:`core.chat.stores.ChatEvents` in memory."""

    def __init__(self, memory: _Memory) -> None:
        self._m = memory

    async def claim_event(self, key: str) -> bool:
        async with self._m.lock:
            key = fit_key(key)
            if key in self._m.events:
                return False
            self._m.events[key] = utcnow()
            return True

    async def events_seen(self, keys: Sequence[str]) -> bool:
        return any(fit_key(key) in self._m.events for key in keys)

    async def prune_events(self, older_than: timedelta) -> int:
        async with self._m.lock:
            cutoff = utcnow() - older_than
            old = [k for k, at in self._m.events.items() if at < cutoff]
            for key in old:
                del self._m.events[key]
            return len(old)


class MemoryFiles:
    """:class:`core.chat.stores.ChatFiles` in memory: a take removes what it returns."""

    def __init__(self, memory: _Memory) -> None:
        self._m = memory

    async def remember_files(self, scope: str, attachments: Sequence[dict[str, Any]]) -> None:
        async with self._m.lock:
            now = utcnow()
            for attachment in attachments:
                self._m.files.append((next(self._m.ids), fit_key(scope), dict(attachment), now))

    async def take_files(self, scope: str, since: datetime) -> list[dict[str, Any]]:
        async with self._m.lock:
            key = fit_key(scope)
            taken = [f for f in self._m.files if f[1] == key and f[3] >= since]
            self._m.files = [f for f in self._m.files if f not in taken]
            return [dict(f[2]) for f in sorted(taken, key=lambda f: f[0])]

    async def prune_files(self, older_than: timedelta) -> int:
        async with self._m.lock:
            cutoff = utcnow() - older_than
            kept = [f for f in self._m.files if f[3] >= cutoff]
            pruned = len(self._m.files) - len(kept)
            self._m.files = kept
            return pruned


class MemoryContexts:
    """:class:`core.chat.stores.ChatContexts` in memory: the last context of each thread."""

    def __init__(self, memory: _Memory) -> None:
        self._m = memory

    async def set_conversation_context(self, thread_key: str, context: dict[str, Any]) -> None:
        async with self._m.lock:
            self._m.contexts[thread_key] = (dict(context), utcnow())

    async def conversation_context(self, thread_key: str) -> dict[str, Any] | None:
        kept = self._m.contexts.get(thread_key)
        return None if kept is None else dict(kept[0])

    async def prune_contexts(self, older_than: timedelta) -> int:
        async with self._m.lock:
            cutoff = utcnow() - older_than
            old = [k for k, (_, at) in self._m.contexts.items() if at < cutoff]
            for key in old:
                del self._m.contexts[key]
            return len(old)


class MemoryFeedback:
    """:class:`core.chat.stores.ChatFeedback` in memory: one vote per person and run."""

    def __init__(self, memory: _Memory) -> None:
        self._m = memory

    async def record_feedback(self, run_id: str, voter: str, value: Vote) -> Vote | None:
        async with self._m.lock:
            key = (run_id, fit_key(voter))
            before = self._m.votes.get(key)
            self._m.votes[key] = Vote(value)
            return before


class MemoryProgress:
    """:class:`core.chat.stores.ChatProgress` in memory: each run's rows numbered from 1."""

    def __init__(self, memory: _Memory) -> None:
        self._m = memory

    async def append(self, run_id: str, text: str) -> int:
        async with self._m.lock:
            if run_id not in self._m.runs:
                raise KeyError(f"no run {run_id!r}")  # (the SQL store's foreign key)
            rows = self._m.progress.setdefault(run_id, [])
            rows.append(ProgressRecord(run_id, len(rows) + 1, text, utcnow()))
            return len(rows)

    async def since(self, run_id: str, seq: int = 0) -> list[ProgressRecord]:
        return [row for row in self._m.progress.get(run_id, []) if row.seq > seq]


class MemoryStores:
    """Every store of :class:`core.chat.stores.ChatStores`, in memory (see the module
    docstring); one instance is one database's worth of rows."""

    def __init__(self) -> None:
        memory = _Memory()
        self.runs = MemoryRuns(memory)
        self.threads = MemoryThreads(memory)
        self.events = MemoryEvents(memory)
        self.files = MemoryFiles(memory)
        self.contexts = MemoryContexts(memory)
        self.feedback = MemoryFeedback(memory)
        self.progress = MemoryProgress(memory)


def _spent(run: RunRecord) -> int:
    return run.prompt_tokens + run.completion_tokens


def _charged(run: RunRecord) -> int:
    """What a run counts against its requester's day (``storage.runs._CHARGED``)."""
    spent = _spent(run)
    allowance = run.token_allowance
    if run.status in UNFINISHED_STATUSES and allowance is not None and allowance > spent:
        return allowance
    return spent


def _channel(thread: ThreadRecord) -> tuple[str, str, str]:
    return thread.platform, thread.workspace, thread.channel
