"""The repository facade the core talks to.

Every public method is one transaction and returns plain records. Races between
processes (retried platform deliveries, concurrent workers) are settled by unique
constraints through ``INSERT ... ON CONFLICT``, which keeps the transaction usable on
PostgreSQL (no aborted transaction to recover from) and works the same on SQLite.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias
from uuid import uuid4

from sqlalchemy import Select, delete, func, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from storage.db import Database
from storage.records import RunRecord, SourceRecord, ThreadRecord, ThreadSummary
from storage.tables import (
    ProcessedEvent,
    ResearchRun,
    RunSource,
    SearchCacheEntry,
    Thread,
    ThreadVariables,
    UTCDateTime,
    utcnow,
)

UNFINISHED_STATUSES = ("queued", "running")
FINISHED_STATUSES = ("succeeded", "failed", "cancelled")
USAGE_KEYS = ("llm_calls", "prompt_tokens", "completion_tokens", "searches")
# search_cache.query is VARCHAR(1024); longer queries are simply not cached.
MAX_CACHED_QUERY_BYTES = 1024
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RunNotFound(LookupError):
    """The run id names no run."""


class Store:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._sessions = database.sessionmaker

    # -- runs ---------------------------------------------------------------------------

    async def create_run(
        self,
        *,
        thread_key: str,
        platform: str,
        workspace: str,
        channel: str,
        thread_ref: str,
        topic: str,
        depth: int,
        strategy: str,
        requested_by: str | None = None,
        dedupe_key: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Queue a run in the (created on demand) thread.

        Returns ``(run, True)``, or ``(existing_run, False)`` when ``dedupe_key`` was
        already used: the same platform delivery seen twice yields one run.
        """
        now = utcnow()
        async with self._sessions.begin() as session:
            thread_stmt = self._insert(Thread).values(
                key=thread_key,
                platform=platform,
                workspace=workspace,
                channel=channel,
                thread_ref=thread_ref,
                created_at=now,
                updated_at=now,
            )
            thread_stmt = thread_stmt.on_conflict_do_update(
                index_elements=[Thread.key], set_={"updated_at": thread_stmt.excluded.updated_at}
            ).returning(Thread.id)
            thread_id = (await session.execute(thread_stmt)).scalar_one()

            run_id = uuid4().hex
            run_stmt = self._insert(ResearchRun).values(
                id=run_id,
                thread_id=thread_id,
                topic=topic,
                depth=depth,
                strategy=strategy,
                status="queued",
                requested_by=requested_by,
                dedupe_key=dedupe_key,
                notes=[],
                created_at=now,
            )
            if dedupe_key is not None:
                run_stmt = run_stmt.on_conflict_do_nothing(index_elements=[ResearchRun.dedupe_key])
            await session.execute(run_stmt)
            where = ResearchRun.id == run_id
            if dedupe_key is not None:
                where = ResearchRun.dedupe_key == dedupe_key
            record = await self._one_run(session, _RUNS.where(where))
            if record is None:  # pragma: no cover - the insert or the conflict guarantees a row
                raise RuntimeError("run vanished while being created")
            return record, record.id == run_id

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self._sessions.begin() as session:
            return await self._one_run(session, _RUNS.where(ResearchRun.id == run_id))

    async def start_run(self, run_id: str) -> RunRecord:
        """Mark a queued (or resumed) run running; a finished run is left as it is."""
        now = utcnow()
        async with self._sessions.begin() as session:
            await session.execute(
                update(ResearchRun)
                .where(ResearchRun.id == run_id, ResearchRun.status.in_(UNFINISHED_STATUSES))
                .values(
                    status="running",
                    started_at=func.coalesce(ResearchRun.started_at, literal(now, UTCDateTime())),
                    heartbeat_at=now,
                )
            )
            return await self._require_run(session, run_id)

    async def checkpoint(
        self,
        run_id: str,
        *,
        variables: Mapping[str, Any],
        rounds_done: int,
        usage: Mapping[str, int],
        notes: Sequence[str],
    ) -> None:
        """Persist one step: the thread's variables and the run's counters, atomically.

        ``variables`` uses the contract names (topics, nextSearchTopic, findings,
        shouldContinue); ``usage`` holds the run's running totals, not increments.
        """
        now = utcnow()
        async with self._sessions.begin() as session:
            thread_id = (
                await session.execute(
                    update(ResearchRun)
                    .where(ResearchRun.id == run_id)
                    .values(
                        rounds_done=rounds_done,
                        notes=list(notes),
                        heartbeat_at=now,
                        **_usage_values(usage),
                    )
                    .returning(ResearchRun.thread_id)
                )
            ).scalar_one_or_none()
            if thread_id is None:
                raise RunNotFound(run_id)
            stmt = self._insert(ThreadVariables).values(
                thread_id=thread_id,
                topics=list(variables.get("topics") or []),
                next_search_topic=variables.get("nextSearchTopic"),
                findings=list(variables.get("findings") or []),
                should_continue=bool(variables.get("shouldContinue", True)),
                version=1,
                updated_at=now,
            )
            copied = ("topics", "next_search_topic", "findings", "should_continue", "updated_at")
            await session.execute(
                stmt.on_conflict_do_update(
                    index_elements=[ThreadVariables.thread_id],
                    set_={name: stmt.excluded[name] for name in copied}
                    | {"version": ThreadVariables.version + 1},
                )
            )

    async def finish_run(
        self,
        run_id: str,
        *,
        status: str,
        report_markdown: str | None,
        sources: Sequence[tuple[int, str, str]],
        error: str | None,
        usage: Mapping[str, int],
        notes: Sequence[str],
    ) -> RunRecord:
        """Record the outcome, report and (replacing any earlier) sources of a run."""
        if status not in FINISHED_STATUSES:
            raise ValueError(
                f"finish_run status must be one of {FINISHED_STATUSES}, not {status!r}"
            )
        now = utcnow()
        async with self._sessions.begin() as session:
            found = (
                await session.execute(
                    update(ResearchRun)
                    .where(ResearchRun.id == run_id)
                    .values(
                        status=status,
                        report_markdown=report_markdown,
                        error=error,
                        notes=list(notes),
                        finished_at=now,
                        heartbeat_at=now,
                        **_usage_values(usage),
                    )
                    .returning(ResearchRun.id)
                )
            ).scalar_one_or_none()
            if found is None:
                raise RunNotFound(run_id)
            await session.execute(delete(RunSource).where(RunSource.run_id == run_id))
            if sources:
                await session.execute(
                    self._insert(RunSource).values(
                        [{"run_id": run_id, "n": n, "title": t, "url": u} for n, t, u in sources]
                    )
                )
            return await self._require_run(session, run_id)

    async def request_cancel(self, run_id: str) -> bool:
        """Flag an unfinished run for cancellation; False when finished or unknown."""
        async with self._sessions.begin() as session:
            hit = await session.execute(
                update(ResearchRun)
                .where(ResearchRun.id == run_id, ResearchRun.status.in_(UNFINISHED_STATUSES))
                .values(cancel_requested=True)
                .returning(ResearchRun.id)
            )
            return hit.scalar_one_or_none() is not None

    async def is_cancel_requested(self, run_id: str) -> bool:
        async with self._sessions.begin() as session:
            flag = await session.scalar(
                select(ResearchRun.cancel_requested).where(ResearchRun.id == run_id)
            )
            return bool(flag)

    async def set_progress_message(self, run_id: str, message_id: str) -> None:
        async with self._sessions.begin() as session:
            await session.execute(
                update(ResearchRun)
                .where(ResearchRun.id == run_id)
                .values(progress_message_id=message_id)
            )

    async def unfinished_runs(self, *, heartbeat_before: datetime | None = None) -> list[RunRecord]:
        """Queued/running runs, oldest first; with ``heartbeat_before`` only the stale ones."""
        stmt = _RUNS.where(ResearchRun.status.in_(UNFINISHED_STATUSES))
        if heartbeat_before is not None:
            last_seen = func.coalesce(ResearchRun.heartbeat_at, ResearchRun.created_at)
            stmt = stmt.where(last_seen < heartbeat_before)
        return await self._runs(stmt.order_by(ResearchRun.created_at, ResearchRun.id))

    async def active_runs_for_user(self, requested_by: str) -> list[RunRecord]:
        stmt = _RUNS.where(
            ResearchRun.requested_by == requested_by,
            ResearchRun.status.in_(UNFINISHED_STATUSES),
        )
        return await self._runs(stmt.order_by(ResearchRun.created_at, ResearchRun.id))

    async def recent_runs_for_user(self, requested_by: str, limit: int = 10) -> list[RunRecord]:
        stmt = _RUNS.where(ResearchRun.requested_by == requested_by)
        return await self._runs(_newest_first(stmt).limit(limit))

    async def latest_run_for_thread(self, thread_id: int) -> RunRecord | None:
        async with self._sessions.begin() as session:
            stmt = _newest_first(_RUNS.where(ResearchRun.thread_id == thread_id)).limit(1)
            return await self._one_run(session, stmt)

    async def thread_runs(self, thread_id: int) -> list[RunRecord]:
        stmt = _RUNS.where(ResearchRun.thread_id == thread_id)
        return await self._runs(stmt.order_by(ResearchRun.created_at, ResearchRun.id))

    async def run_sources(self, run_id: str) -> list[SourceRecord]:
        async with self._sessions.begin() as session:
            rows = await session.execute(
                select(RunSource.n, RunSource.title, RunSource.url)
                .where(RunSource.run_id == run_id)
                .order_by(RunSource.n)
            )
            return [SourceRecord(n=n, title=title, url=url) for n, title, url in rows]

    async def requeue_run(self, run_id: str) -> RunRecord:
        """Make an interrupted, failed or cancelled run resumable from its checkpoint.

        A succeeded run is left as it is (its report exists).
        """
        async with self._sessions.begin() as session:
            await session.execute(
                update(ResearchRun)
                .where(ResearchRun.id == run_id, ResearchRun.status != "succeeded")
                .values(status="queued", finished_at=None, error=None, cancel_requested=False)
            )
            return await self._require_run(session, run_id)

    async def release_run(self, run_id: str) -> None:
        """Hand an unfinished run back (graceful shutdown): queued, and stale at once.

        The epoch heartbeat makes the next start of any replica resume it right away.
        """
        async with self._sessions.begin() as session:
            await session.execute(
                update(ResearchRun)
                .where(ResearchRun.id == run_id, ResearchRun.status.in_(UNFINISHED_STATUSES))
                .values(status="queued", heartbeat_at=EPOCH)
            )

    async def touch_runs(self, run_ids: Sequence[str]) -> None:
        """Refresh the heartbeat of runs this process is working on."""
        if not run_ids:
            return
        async with self._sessions.begin() as session:
            await session.execute(
                update(ResearchRun)
                .where(
                    ResearchRun.id.in_(list(run_ids)),
                    ResearchRun.status.in_(UNFINISHED_STATUSES),
                )
                .values(heartbeat_at=utcnow())
            )

    async def mark_report_posted(self, run_id: str) -> bool:
        """Claim the posting of a run's report: True only for the first caller."""
        async with self._sessions.begin() as session:
            hit = await session.execute(
                update(ResearchRun)
                .where(ResearchRun.id == run_id, ResearchRun.report_posted_at.is_(None))
                .values(report_posted_at=utcnow())
                .returning(ResearchRun.id)
            )
            return hit.scalar_one_or_none() is not None

    async def unmark_report_posted(self, run_id: str) -> None:
        """Release the claim when posting failed, so a later attempt may post."""
        async with self._sessions.begin() as session:
            await session.execute(
                update(ResearchRun).where(ResearchRun.id == run_id).values(report_posted_at=None)
            )

    # -- platform events ----------------------------------------------------------------

    async def claim_event(self, key: str) -> bool:
        """Record a platform delivery; True the first time ``key`` is seen, else False."""
        async with self._sessions.begin() as session:
            stmt = (
                self._insert(ProcessedEvent)
                .values(key=key[:255], created_at=utcnow())
                .on_conflict_do_nothing(index_elements=[ProcessedEvent.key])
                .returning(ProcessedEvent.key)
            )
            return (await session.execute(stmt)).scalar_one_or_none() is not None

    async def prune_events(self, older_than: timedelta) -> int:
        async with self._sessions.begin() as session:
            result = await session.execute(
                delete(ProcessedEvent).where(ProcessedEvent.created_at < utcnow() - older_than)
            )
            return int(getattr(result, "rowcount", 0) or 0)

    # -- threads ------------------------------------------------------------------------

    async def rekey_thread(self, thread_id: int, *, key: str, thread_ref: str) -> ThreadRecord:
        """Give a thread its final key once the platform assigned its id (e.g. Slack ts)."""
        async with self._sessions.begin() as session:
            await session.execute(
                update(Thread)
                .where(Thread.id == thread_id)
                .values(key=key, thread_ref=thread_ref, updated_at=utcnow())
            )
            row = await session.get(Thread, thread_id)
            if row is None:
                raise LookupError(f"no thread {thread_id}")
            return _thread_record(row)

    async def get_thread(self, key: str) -> ThreadRecord | None:
        async with self._sessions.begin() as session:
            row = await session.scalar(select(Thread).where(Thread.key == key))
            return None if row is None else _thread_record(row)

    async def list_threads(self, limit: int = 50) -> list[ThreadSummary]:
        """Threads with their run count and latest run, most recently active first."""

        def latest(column: Any) -> Any:
            return (
                select(column)
                .where(ResearchRun.thread_id == Thread.id)
                .order_by(ResearchRun.created_at.desc(), ResearchRun.id.desc())
                .limit(1)
                .scalar_subquery()
            )

        count = (
            select(func.count(ResearchRun.id))
            .where(ResearchRun.thread_id == Thread.id)
            .scalar_subquery()
        )
        stmt = (
            select(
                Thread.key,
                count,
                latest(ResearchRun.topic),
                latest(ResearchRun.status),
                Thread.updated_at,
            )
            .order_by(Thread.updated_at.desc(), Thread.id.desc())
            .limit(limit)
        )
        async with self._sessions.begin() as session:
            rows = await session.execute(stmt)
            return [
                ThreadSummary(
                    key=key, runs=runs, last_topic=topic, last_status=status, updated_at=updated
                )
                for key, runs, topic, status, updated in rows
            ]

    async def load_variables(self, thread_id: int) -> dict[str, Any] | None:
        """The thread's variables under their contract names, or None if never written."""
        async with self._sessions.begin() as session:
            row = await session.get(ThreadVariables, thread_id)
            if row is None:
                return None
            return {
                "topics": list(row.topics),
                "nextSearchTopic": row.next_search_topic,
                "findings": list(row.findings),
                "shouldContinue": row.should_continue,
            }

    # -- search cache -------------------------------------------------------------------

    async def cache_get(
        self, provider: str, query: str, max_age: timedelta
    ) -> list[dict[str, Any]] | None:
        """Cached results younger than ``max_age``; None for a miss or a stale entry."""
        if not _cacheable(query):
            return None
        async with self._sessions.begin() as session:
            row = await session.get(SearchCacheEntry, (provider, query))
            if row is None or row.created_at < utcnow() - max_age:
                return None
            return list(row.results)

    async def cache_put(self, provider: str, query: str, results: Sequence[dict[str, Any]]) -> None:
        if not _cacheable(query):
            return
        async with self._sessions.begin() as session:
            stmt = self._insert(SearchCacheEntry).values(
                provider=provider, query=query, results=list(results), created_at=utcnow()
            )
            await session.execute(
                stmt.on_conflict_do_update(
                    index_elements=[SearchCacheEntry.provider, SearchCacheEntry.query],
                    set_={"results": stmt.excluded.results, "created_at": stmt.excluded.created_at},
                )
            )

    # -- helpers ------------------------------------------------------------------------

    def _insert(self, entity: Any) -> Any:
        """``INSERT`` with ``ON CONFLICT`` support for the connected dialect."""
        if self._db.dialect == "postgresql":
            return postgresql.insert(entity)
        return sqlite.insert(entity)

    async def _runs(self, stmt: RunSelect) -> list[RunRecord]:
        async with self._sessions.begin() as session:
            return [_run_record(run, key) for run, key in await session.execute(stmt)]

    @staticmethod
    async def _one_run(session: AsyncSession, stmt: RunSelect) -> RunRecord | None:
        row = (await session.execute(stmt)).first()
        return None if row is None else _run_record(row[0], row[1])

    async def _require_run(self, session: AsyncSession, run_id: str) -> RunRecord:
        record = await self._one_run(session, _RUNS.where(ResearchRun.id == run_id))
        if record is None:
            raise RunNotFound(run_id)
        return record


RunSelect: TypeAlias = "Select[ResearchRun, str]"  # a string: not evaluated at runtime
_RUNS: RunSelect = select(ResearchRun, Thread.key).join(Thread, Thread.id == ResearchRun.thread_id)


def _newest_first(stmt: RunSelect) -> RunSelect:
    return stmt.order_by(ResearchRun.created_at.desc(), ResearchRun.id.desc())


def _cacheable(query: str) -> bool:
    return len(query.encode("utf-8")) <= MAX_CACHED_QUERY_BYTES


def _usage_values(usage: Mapping[str, int]) -> dict[str, int]:
    unknown = set(usage) - set(USAGE_KEYS)
    if unknown:
        raise ValueError(f"unknown usage counters {sorted(unknown)}; known: {USAGE_KEYS}")
    return {name: int(value) for name, value in usage.items()}


def _thread_record(row: Thread) -> ThreadRecord:
    return ThreadRecord(
        id=row.id,
        key=row.key,
        platform=row.platform,
        workspace=row.workspace,
        channel=row.channel,
        thread_ref=row.thread_ref,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _run_record(row: ResearchRun, thread_key: str) -> RunRecord:
    return RunRecord(
        id=row.id,
        thread_id=row.thread_id,
        thread_key=thread_key,
        topic=row.topic,
        depth=row.depth,
        strategy=row.strategy,
        status=row.status,
        rounds_done=row.rounds_done,
        requested_by=row.requested_by,
        dedupe_key=row.dedupe_key,
        cancel_requested=row.cancel_requested,
        progress_message_id=row.progress_message_id,
        error=row.error,
        notes=list(row.notes),
        report_markdown=row.report_markdown,
        llm_calls=row.llm_calls,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        searches=row.searches,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        heartbeat_at=row.heartbeat_at,
        report_posted_at=row.report_posted_at,
    )
