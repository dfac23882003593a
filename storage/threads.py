"""Chat threads and their conversation variables, as the rest of the code reads them.

A thread row is created on demand with its first run (:meth:`~storage.runs.RunStore.create_run`)
and its variables are written by its runs' checkpoints
(:meth:`~storage.claims.ClaimStore.checkpoint`); here they are found, listed, read, and
re-keyed once a platform assigned the thread its id.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.engine import Connection

from core.values import UNFINISHED_STATUSES, ThreadKey
from storage.db import Database
from storage.records import GuidanceTaken, ThreadRecord, ThreadSummary
from storage.sql import VARIABLE_COLUMNS, thread_record, upsert_for, variables_dict
from storage.tables import ResearchRun, Thread, ThreadVariables, utcnow

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_variables = cast(Table, ThreadVariables.__table__)
#: How many times adding guidance retries when a checkpoint changed the variables meanwhile.
GUIDANCE_ATTEMPTS = 20


class ThreadStore:
    """Threads and their variables, read (and re-keyed) outside a run's checkpoints."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def rekey_thread(self, thread_id: int, key: ThreadKey) -> ThreadRecord:
        """Give a thread its final key once the platform assigned its id (e.g. Slack ts, the
        key's thread part)."""
        stmt = (
            update(_threads)
            .where(_threads.c.id == thread_id)
            .values(key=str(key), thread_ref=key.thread, updated_at=utcnow())
            .returning(*_threads.c)
        )

        def work(conn: Connection) -> ThreadRecord:
            row = conn.execute(stmt).mappings().first()
            if row is None:
                raise LookupError(f"no thread {thread_id}")
            return thread_record(row)

        return await self._db.run(work)

    async def get_thread(self, key: str) -> ThreadRecord | None:
        stmt = select(_threads).where(_threads.c.key == key)

        def work(conn: Connection) -> ThreadRecord | None:
            row = conn.execute(stmt).mappings().first()
            return None if row is None else thread_record(row)

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

    async def add_guidance(self, run_id: str, entry: dict[str, Any]) -> GuidanceTaken:
        """Append one guidance entry (a reply steering the running ``run_id``) to its
        thread's variables, compare-and-swapped on their version like a checkpoint: the run's
        next checkpoint meets the new version and takes the entry in
        (``ThreadVariables.absorb``).

        Decided against the checkpoint that ends the run's searching (it records why, the
        run's ``stop_reason``, with the variables, in one transaction): the variables'
        version is read first, then the run, then the entry is swapped in on that version.
        A checkpoint committed before the run is read is seen (``too_late``); one committed
        after it changed the version, so the swap fails and the run is read again; and an
        entry swapped in first makes that checkpoint meet a new version and take it in
        before the report is written. So a kept entry is always read by the run's writer.
        ``ended`` when the run has ended or is unknown."""
        find = select(_runs.c.thread_id, _runs.c.status, _runs.c.stop_reason).where(
            _runs.c.id == run_id
        )
        load = select(_variables.c.guidance, _variables.c.version).where(
            _variables.c.thread_id == bindparam("tid")
        )
        upsert = upsert_for(self._db.dialect)
        first = (
            upsert(_variables)
            .values(
                thread_id=bindparam("tid"),
                topics=[],
                findings=[],
                should_continue=True,
                guidance=[entry],
                version=1,
                updated_at=utcnow(),
            )
            .on_conflict_do_nothing()
            .returning(_variables.c.version)
        )
        append = (
            update(_variables)
            .where(
                _variables.c.thread_id == bindparam("tid"),
                _variables.c.version == bindparam("expected"),
            )
            .values(
                guidance=bindparam("guidance"),
                version=_variables.c.version + 1,
                updated_at=utcnow(),
            )
            .returning(_variables.c.version)
        )

        def searching(conn: Connection) -> GuidanceTaken | None:
            """None while the run still searches; else why the entry is not kept."""
            run = conn.execute(find).first()
            if run is None or run.status not in UNFINISHED_STATUSES:
                return GuidanceTaken.ENDED
            return GuidanceTaken.TOO_LATE if run.stop_reason is not None else None

        def work(conn: Connection) -> GuidanceTaken:
            run = conn.execute(find).first()
            if run is None:
                return GuidanceTaken.ENDED
            tid = run.thread_id
            for _ in range(GUIDANCE_ATTEMPTS):
                row = conn.execute(load, {"tid": tid}).first()  # (the version before the run)
                if (refused := searching(conn)) is not None:
                    return refused
                if row is None:
                    if conn.execute(first, {"tid": tid}).first() is not None:
                        return GuidanceTaken.KEPT
                    continue  # a checkpoint wrote the first variables meanwhile
                kept = list(row[0] or [])
                if entry.get("key") and any(g.get("key") == entry["key"] for g in kept):
                    return GuidanceTaken.KEPT  # a redelivery of a reply already kept
                guidance = [*kept, entry]
                params = {"tid": tid, "expected": row[1], "guidance": guidance}
                if conn.execute(append, params).first() is not None:
                    return GuidanceTaken.KEPT
            raise RuntimeError("the thread's variables kept changing under the guidance")

        return await self._db.run(work)

    async def load_variables(self, thread_id: int) -> dict[str, Any] | None:
        """The thread's variables under their contract names, or None if never written."""
        stmt = select(*VARIABLE_COLUMNS).where(_variables.c.thread_id == thread_id)

        def work(conn: Connection) -> dict[str, Any] | None:
            row = conn.execute(stmt).mappings().first()
            return None if row is None else variables_dict(row)

        return await self._db.run(work)
