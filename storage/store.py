"""The repository facade the core talks to.

Every public method is one transaction and returns plain records. Races between
processes (retried platform deliveries, concurrent workers) are settled by unique
constraints through ``INSERT ... ON CONFLICT``, which keeps the transaction usable on
PostgreSQL (no aborted transaction to recover from) and works the same on SQLite.

Transactions are plain functions of a Core ``Connection`` run by :meth:`Database.run`
(no ORM session: less CPU per call). The statements of the per-round hot path (checkpoint,
run start and finish) are built once with bind parameters, so each call skips building
and cache-keying them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from uuid import uuid4

from sqlalchemy import (
    Select,
    Table,
    bindparam,
    case,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection, RowMapping

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

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_variables = cast(Table, ThreadVariables.__table__)
_sources = cast(Table, RunSource.__table__)
_cache = cast(Table, SearchCacheEntry.__table__)
_events = cast(Table, ProcessedEvent.__table__)

#: A run with its thread's key: the columns of a RunRecord.
_RUNS: Select[Any] = select(*_runs.c, _threads.c.key.label("thread_key")).join(
    _threads, _threads.c.id == _runs.c.thread_id
)
_VARIABLE_COLUMNS = (
    _variables.c.thread_id.label("variables_thread_id"),
    _variables.c.topics,
    _variables.c.next_search_topic,
    _variables.c.findings,
    _variables.c.should_continue,
)
_RUN_BY_ID = _RUNS.where(_runs.c.id == bindparam("run_id"))
_RUN_WITH_VARIABLES_BY_ID = (
    _RUNS.add_columns(*_VARIABLE_COLUMNS)
    .outerjoin(_variables, _variables.c.thread_id == _runs.c.thread_id)
    .where(_runs.c.id == bindparam("run_id"))
)
_LATEST_RUN_IN_THREAD = (
    _RUNS.where(_threads.c.key == bindparam("thread_key"))
    .order_by(_runs.c.created_at.desc(), _runs.c.id.desc())
    .limit(1)
)
_RUN_BY_DEDUPE_KEY = _RUNS.where(_runs.c.dedupe_key == bindparam("dedupe_key"))
#: How many unfinished runs a user has, and how many of them carry a given dedupe key.
_ACTIVE_RUN_COUNT = select(
    func.count(),
    func.count(case((_runs.c.dedupe_key == bindparam("dedupe_key"), 1))),
).where(
    _runs.c.requested_by == bindparam("requested_by"),
    _runs.c.status.in_(UNFINISHED_STATUSES),
)
_NOW = bindparam("now", type_=UTCDateTime())
_START_RUN = (
    update(_runs)
    .where(_runs.c.id == bindparam("run_id"), _runs.c.status.in_(UNFINISHED_STATUSES))
    .values(status="running", started_at=func.coalesce(_runs.c.started_at, _NOW), heartbeat_at=_NOW)
)
# SET columns come from the parameters of each call (the usage counters vary).
_UPDATE_RUN = update(_runs).where(_runs.c.id == bindparam("run_id"))
_CHECKPOINT_RUN = _UPDATE_RUN.returning(_runs.c.thread_id, _runs.c.cancel_requested)
_FINISH_RUN = _UPDATE_RUN.returning(_runs.c.id)
_DELETE_SOURCES = delete(_sources).where(_sources.c.run_id == bindparam("run_id"))
_VARIABLES_COPIED = ("topics", "next_search_topic", "findings", "should_continue", "updated_at")


class RunNotFound(LookupError):
    """The run id names no run."""


class _Statements:
    """The dialect's ``INSERT ... ON CONFLICT`` statements of the hot path, built once."""

    def __init__(self, dialect: str) -> None:
        self.upsert = upsert = _upsert_for(dialect)
        thread = upsert(_threads)
        self.upsert_thread = thread.on_conflict_do_update(
            index_elements=[_threads.c.key], set_={"updated_at": thread.excluded.updated_at}
        ).returning(_threads.c.id)
        # RETURNING the new row saves create_run a SELECT (a round trip on PostgreSQL).
        self.insert_run = insert(_runs).returning(*_runs.c)
        self.insert_run_once = (
            upsert(_runs)
            .on_conflict_do_nothing(index_elements=[_runs.c.dedupe_key])
            .returning(*_runs.c)
        )
        variables = upsert(_variables)
        self.upsert_variables = variables.on_conflict_do_update(
            index_elements=[_variables.c.thread_id],
            set_={name: variables.excluded[name] for name in _VARIABLES_COPIED}
            | {"version": _variables.c.version + 1},
        )


class Store:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._sql = _Statements(database.dialect)

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
        run_id = uuid4().hex
        thread = {
            "key": thread_key,
            "platform": platform,
            "workspace": workspace,
            "channel": channel,
            "thread_ref": thread_ref,
            "created_at": now,
            "updated_at": now,
        }
        run = {
            "id": run_id,
            "topic": topic,
            "depth": depth,
            "strategy": strategy,
            "status": "queued",
            "requested_by": requested_by,
            "dedupe_key": dedupe_key,
            "notes": [],
            "created_at": now,
        }
        insert_run = self._sql.insert_run if dedupe_key is None else self._sql.insert_run_once

        def work(conn: Connection) -> tuple[RunRecord, bool]:
            thread_id = conn.execute(self._sql.upsert_thread, thread).scalar_one()
            row = conn.execute(insert_run, {**run, "thread_id": thread_id}).mappings().first()
            if row is not None:  # inserted
                return _run_record({**row, "thread_key": thread_key}), True
            # The dedupe key was used already: that delivery's run.
            record = _one_run(conn, _RUN_BY_DEDUPE_KEY, dedupe_key=dedupe_key)
            if record is None:  # pragma: no cover - the conflict guarantees a row
                raise RuntimeError("run vanished while being created")
            return record, False

        return await self._db.run(work)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._db.run(lambda conn: _one_run(conn, _RUN_BY_ID, run_id=run_id))

    async def begin_run(self, run_id: str) -> tuple[RunRecord, dict[str, Any] | None]:
        """Mark a queued (or resumed) run running and load its thread's variables, together.

        What executing a run needs first. A finished run is left as it is; a resume keeps
        the original ``started_at``.
        """

        def work(conn: Connection) -> tuple[RunRecord, dict[str, Any] | None]:
            conn.execute(_START_RUN, {"run_id": run_id, "now": utcnow()})
            row = conn.execute(_RUN_WITH_VARIABLES_BY_ID, {"run_id": run_id}).mappings().first()
            if row is None:
                raise RunNotFound(run_id)
            variables = None if row["variables_thread_id"] is None else _variables_dict(row)
            return _run_record(row), variables

        return await self._db.run(work)

    async def checkpoint(
        self,
        run_id: str,
        *,
        variables: Mapping[str, Any],
        rounds_done: int,
        usage: Mapping[str, int],
        notes: Sequence[str],
    ) -> bool:
        """Persist one step: the thread's variables and the run's counters, atomically.

        ``variables`` uses the contract names (topics, nextSearchTopic, findings,
        shouldContinue); ``usage`` holds the run's running totals, not increments.
        Returns the run's ``cancel_requested`` flag as stored now, so noticing a cancel
        request costs the engine no query of its own.
        """
        now = utcnow()
        run = {
            "run_id": run_id,
            "rounds_done": rounds_done,
            "notes": list(notes),
            "heartbeat_at": now,
            **_usage_values(usage),
        }
        state = {
            "topics": list(variables.get("topics") or []),
            "next_search_topic": variables.get("nextSearchTopic"),
            "findings": list(variables.get("findings") or []),
            "should_continue": bool(variables.get("shouldContinue", True)),
            "version": 1,
            "updated_at": now,
        }

        def work(conn: Connection) -> bool:
            row = conn.execute(_CHECKPOINT_RUN, run).first()
            if row is None:
                raise RunNotFound(run_id)
            thread_id, cancel_requested = row
            conn.execute(self._sql.upsert_variables, {**state, "thread_id": thread_id})
            return bool(cancel_requested)

        return await self._db.run(work)

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
        run = {
            "run_id": run_id,
            "status": status,
            "report_markdown": report_markdown,
            "error": error,
            "notes": list(notes),
            "finished_at": now,
            "heartbeat_at": now,
            **_usage_values(usage),
        }
        rows = [{"run_id": run_id, "n": n, "title": t, "url": u} for n, t, u in sources]

        def work(conn: Connection) -> RunRecord:
            if conn.execute(_FINISH_RUN, run).first() is None:
                raise RunNotFound(run_id)
            conn.execute(_DELETE_SOURCES, {"run_id": run_id})
            if rows:
                conn.execute(insert(_sources), rows)
            return _require_run(conn, run_id)

        return await self._db.run(work)

    async def request_cancel(self, run_id: str) -> bool:
        """Flag an unfinished run for cancellation; False when finished or unknown."""
        stmt = (
            update(_runs)
            .where(_runs.c.id == run_id, _runs.c.status.in_(UNFINISHED_STATUSES))
            .values(cancel_requested=True)
            .returning(_runs.c.id)
        )
        return await self._db.run(lambda conn: conn.execute(stmt).first() is not None)

    async def set_progress_message(self, run_id: str, message_id: str) -> None:
        stmt = update(_runs).where(_runs.c.id == run_id).values(progress_message_id=message_id)
        await self._db.run(lambda conn: conn.execute(stmt))

    async def unfinished_runs(self, *, heartbeat_before: datetime | None = None) -> list[RunRecord]:
        """Queued/running runs, oldest first; with ``heartbeat_before`` only the stale ones."""
        stmt = _RUNS.where(_runs.c.status.in_(UNFINISHED_STATUSES))
        if heartbeat_before is not None:
            last_seen = func.coalesce(_runs.c.heartbeat_at, _runs.c.created_at)
            stmt = stmt.where(last_seen < heartbeat_before)
        return await self._runs(stmt.order_by(_runs.c.created_at, _runs.c.id))

    async def active_runs_for_user(self, requested_by: str) -> list[RunRecord]:
        stmt = _RUNS.where(
            _runs.c.requested_by == requested_by,
            _runs.c.status.in_(UNFINISHED_STATUSES),
        )
        return await self._runs(stmt.order_by(_runs.c.created_at, _runs.c.id))

    async def count_active_runs(
        self, requested_by: str, *, dedupe_key: str | None = None
    ) -> tuple[int, bool]:
        """How many unfinished runs ``requested_by`` has, and whether one of them carries
        ``dedupe_key`` (the same delivery seen again).

        One aggregate query, for the per-user limit on the acknowledgement path: loading
        the full records (:meth:`active_runs_for_user`) costs a join and a row each.
        """
        params = {"requested_by": requested_by, "dedupe_key": dedupe_key}

        def work(conn: Connection) -> tuple[int, bool]:
            total, seen = conn.execute(_ACTIVE_RUN_COUNT, params).one()
            return int(total), bool(seen)

        return await self._db.run(work)

    async def recent_runs_for_user(self, requested_by: str, limit: int = 10) -> list[RunRecord]:
        stmt = _RUNS.where(_runs.c.requested_by == requested_by)
        return await self._runs(_newest_first(stmt).limit(limit))

    async def latest_run_in_thread(self, thread_key: str) -> RunRecord | None:
        """The newest run of the thread with this key; None if it has none (or no thread)."""
        return await self._db.run(
            lambda conn: _one_run(conn, _LATEST_RUN_IN_THREAD, thread_key=thread_key)
        )

    async def thread_runs(self, thread_id: int) -> list[RunRecord]:
        stmt = _RUNS.where(_runs.c.thread_id == thread_id)
        return await self._runs(stmt.order_by(_runs.c.created_at, _runs.c.id))

    async def run_sources(self, run_id: str) -> list[SourceRecord]:
        stmt = (
            select(_sources.c.n, _sources.c.title, _sources.c.url)
            .where(_sources.c.run_id == run_id)
            .order_by(_sources.c.n)
        )

        def work(conn: Connection) -> list[SourceRecord]:
            return [SourceRecord(n=n, title=title, url=url) for n, title, url in conn.execute(stmt)]

        return await self._db.run(work)

    async def requeue_run(self, run_id: str) -> RunRecord:
        """Make an interrupted, failed or cancelled run resumable from its checkpoint.

        A succeeded run is left as it is (its report exists).
        """
        stmt = (
            update(_runs)
            .where(_runs.c.id == run_id, _runs.c.status != "succeeded")
            .values(status="queued", finished_at=None, error=None, cancel_requested=False)
        )

        def work(conn: Connection) -> RunRecord:
            conn.execute(stmt)
            return _require_run(conn, run_id)

        return await self._db.run(work)

    async def release_run(self, run_id: str) -> None:
        """Hand an unfinished run back (graceful shutdown): queued, and stale at once.

        The epoch heartbeat makes the next start of any replica resume it right away.
        """
        stmt = (
            update(_runs)
            .where(_runs.c.id == run_id, _runs.c.status.in_(UNFINISHED_STATUSES))
            .values(status="queued", heartbeat_at=EPOCH)
        )
        await self._db.run(lambda conn: conn.execute(stmt))

    async def touch_runs(self, run_ids: Sequence[str]) -> None:
        """Refresh the heartbeat of runs this process is working on."""
        if not run_ids:
            return
        stmt = (
            update(_runs)
            .where(_runs.c.id.in_(list(run_ids)), _runs.c.status.in_(UNFINISHED_STATUSES))
            .values(heartbeat_at=utcnow())
        )
        await self._db.run(lambda conn: conn.execute(stmt))

    async def mark_report_posted(self, run_id: str) -> bool:
        """Claim the posting of a run's report: True only for the first caller."""
        stmt = (
            update(_runs)
            .where(_runs.c.id == run_id, _runs.c.report_posted_at.is_(None))
            .values(report_posted_at=utcnow())
            .returning(_runs.c.id)
        )
        return await self._db.run(lambda conn: conn.execute(stmt).first() is not None)

    async def unmark_report_posted(self, run_id: str) -> None:
        """Release the claim when posting failed, so a later attempt may post."""
        stmt = update(_runs).where(_runs.c.id == run_id).values(report_posted_at=None)
        await self._db.run(lambda conn: conn.execute(stmt))

    # -- platform events ----------------------------------------------------------------

    async def claim_event(self, key: str) -> bool:
        """Record a platform delivery; True the first time ``key`` is seen, else False."""
        stmt = (
            self._sql.upsert(_events)
            .values(key=key[:255], created_at=utcnow())
            .on_conflict_do_nothing(index_elements=[_events.c.key])
            .returning(_events.c.key)
        )
        return await self._db.run(lambda conn: conn.execute(stmt).first() is not None)

    async def prune_events(self, older_than: timedelta) -> int:
        stmt = delete(_events).where(_events.c.created_at < utcnow() - older_than)
        return await self._db.run(lambda conn: int(conn.execute(stmt).rowcount or 0))

    # -- threads ------------------------------------------------------------------------

    async def rekey_thread(self, thread_id: int, *, key: str, thread_ref: str) -> ThreadRecord:
        """Give a thread its final key once the platform assigned its id (e.g. Slack ts)."""
        stmt = (
            update(_threads)
            .where(_threads.c.id == thread_id)
            .values(key=key, thread_ref=thread_ref, updated_at=utcnow())
            .returning(*_threads.c)
        )

        def work(conn: Connection) -> ThreadRecord:
            row = conn.execute(stmt).mappings().first()
            if row is None:
                raise LookupError(f"no thread {thread_id}")
            return _thread_record(row)

        return await self._db.run(work)

    async def get_thread(self, key: str) -> ThreadRecord | None:
        stmt = select(_threads).where(_threads.c.key == key)

        def work(conn: Connection) -> ThreadRecord | None:
            row = conn.execute(stmt).mappings().first()
            return None if row is None else _thread_record(row)

        return await self._db.run(work)

    async def list_threads(self, limit: int = 50) -> list[ThreadSummary]:
        """Threads with their run count and latest run, most recently active first."""

        def latest(column: Any) -> Any:
            return (
                select(column)
                .where(_runs.c.thread_id == _threads.c.id)
                .order_by(_runs.c.created_at.desc(), _runs.c.id.desc())
                .limit(1)
                .scalar_subquery()
            )

        count = (
            select(func.count(_runs.c.id))
            .where(_runs.c.thread_id == _threads.c.id)
            .scalar_subquery()
        )
        stmt = (
            select(
                _threads.c.key,
                count,
                latest(_runs.c.topic),
                latest(_runs.c.status),
                _threads.c.updated_at,
            )
            .order_by(_threads.c.updated_at.desc(), _threads.c.id.desc())
            .limit(limit)
        )

        def work(conn: Connection) -> list[ThreadSummary]:
            return [
                ThreadSummary(
                    key=key, runs=runs, last_topic=topic, last_status=status, updated_at=updated
                )
                for key, runs, topic, status, updated in conn.execute(stmt)
            ]

        return await self._db.run(work)

    async def load_variables(self, thread_id: int) -> dict[str, Any] | None:
        """The thread's variables under their contract names, or None if never written."""
        stmt = select(*_VARIABLE_COLUMNS).where(_variables.c.thread_id == thread_id)

        def work(conn: Connection) -> dict[str, Any] | None:
            row = conn.execute(stmt).mappings().first()
            return None if row is None else _variables_dict(row)

        return await self._db.run(work)

    # -- search cache -------------------------------------------------------------------

    async def cache_get(
        self, provider: str, query: str, max_age: timedelta
    ) -> list[dict[str, Any]] | None:
        """Cached results younger than ``max_age``; None for a miss or a stale entry."""
        if not _cacheable(query):
            return None
        stmt = select(_cache.c.results, _cache.c.created_at).where(
            _cache.c.provider == provider, _cache.c.query == query
        )

        def work(conn: Connection) -> list[dict[str, Any]] | None:
            row = conn.execute(stmt).first()
            if row is None or row.created_at < utcnow() - max_age:
                return None
            return list(row.results)

        return await self._db.run(work)

    async def cache_put(self, provider: str, query: str, results: Sequence[dict[str, Any]]) -> None:
        if not _cacheable(query):
            return
        insert_entry = self._sql.upsert(_cache).values(
            provider=provider, query=query, results=list(results), created_at=utcnow()
        )
        stmt = insert_entry.on_conflict_do_update(
            index_elements=[_cache.c.provider, _cache.c.query],
            set_={
                "results": insert_entry.excluded.results,
                "created_at": insert_entry.excluded.created_at,
            },
        )
        await self._db.run(lambda conn: conn.execute(stmt))

    # -- helpers ------------------------------------------------------------------------

    async def _runs(self, stmt: Select[Any]) -> list[RunRecord]:
        def work(conn: Connection) -> list[RunRecord]:
            return [_run_record(row) for row in conn.execute(stmt).mappings()]

        return await self._db.run(work)


def _upsert_for(dialect: str) -> Callable[[Table], Any]:
    """``INSERT`` with ``ON CONFLICT`` support for the connected dialect."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def _one_run(conn: Connection, stmt: Select[Any], **params: Any) -> RunRecord | None:
    row = conn.execute(stmt, params).mappings().first()
    return None if row is None else _run_record(row)


def _require_run(conn: Connection, run_id: str) -> RunRecord:
    record = _one_run(conn, _RUN_BY_ID, run_id=run_id)
    if record is None:
        raise RunNotFound(run_id)
    return record


def _newest_first(stmt: Select[Any]) -> Select[Any]:
    return stmt.order_by(_runs.c.created_at.desc(), _runs.c.id.desc())


def _cacheable(query: str) -> bool:
    return len(query.encode("utf-8")) <= MAX_CACHED_QUERY_BYTES


def _usage_values(usage: Mapping[str, int]) -> dict[str, int]:
    unknown = set(usage) - set(USAGE_KEYS)
    if unknown:
        raise ValueError(f"unknown usage counters {sorted(unknown)}; known: {USAGE_KEYS}")
    return {name: int(value) for name, value in usage.items()}


def _variables_dict(row: RowMapping) -> dict[str, Any]:
    return {
        "topics": list(row["topics"]),
        "nextSearchTopic": row["next_search_topic"],
        "findings": list(row["findings"]),
        "shouldContinue": row["should_continue"],
    }


def _thread_record(row: RowMapping) -> ThreadRecord:
    return ThreadRecord(
        id=row["id"],
        key=row["key"],
        platform=row["platform"],
        workspace=row["workspace"],
        channel=row["channel"],
        thread_ref=row["thread_ref"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _run_record(row: Mapping[Any, Any]) -> RunRecord:
    return RunRecord(
        id=row["id"],
        thread_id=row["thread_id"],
        thread_key=row["thread_key"],
        topic=row["topic"],
        depth=row["depth"],
        strategy=row["strategy"],
        status=row["status"],
        rounds_done=row["rounds_done"],
        requested_by=row["requested_by"],
        dedupe_key=row["dedupe_key"],
        cancel_requested=bool(row["cancel_requested"]),
        progress_message_id=row["progress_message_id"],
        error=row["error"],
        notes=list(row["notes"]),
        report_markdown=row["report_markdown"],
        llm_calls=row["llm_calls"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        searches=row["searches"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        heartbeat_at=row["heartbeat_at"],
        report_posted_at=row["report_posted_at"],
    )
