"""Retention: finished research is kept for ``FATHOM_RUN_RETENTION_DAYS``, then pruned.

:meth:`RetentionStore.prune` deletes, in batches of :data:`BATCH` rows (each its own short
transaction, so replicas serving requests never wait long on a lock):

- finished runs (succeeded, failed, cancelled) that finished before the cut-off, with their
  sources and the votes on them (``ON DELETE CASCADE``), except a run whose outcome is still
  to be posted, and each digest's newest successful firing (the next firing's "What's new"
  compares with it);
- threads untouched since the cut-off that have no run left, with their variables.

Queued and running runs are never pruned, however old. Housekeeping calls it every hour on
the one replica holding its lease; ``fathom prune`` calls it by hand (or counts, dry). The
documents a platform made for the pruned runs' reports (a Slack canvas, a Feishu cloud
document) are returned (:attr:`Pruned.documents`, read in the transaction that deletes their
runs): the caller deletes them on their platform, or names those it could not.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, and_, delete, exists, func, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.selectable import NamedFromClause

from core.values import FINISHED_STATUSES, DeliveryState
from storage.db import Database
from storage.run_documents import RunDocument, documents_of
from storage.tables import Digest, ResearchRun, RunFeedback, RunSource, Thread, ThreadVariables

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_variables = cast(Table, ThreadVariables.__table__)
_sources = cast(Table, RunSource.__table__)
_feedback = cast(Table, RunFeedback.__table__)
_digests = cast(Table, Digest.__table__)

#: Rows deleted per transaction.
BATCH = 500


@dataclass(frozen=True)
class Pruned:
    """What a prune deleted (or, dry, would delete)."""

    runs: int = 0
    sources: int = 0
    votes: int = 0
    threads: int = 0
    #: The documents the pruned runs' reports became on their platform (to delete there).
    documents: tuple[RunDocument, ...] = ()

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def describe(self) -> str:
        """``12 runs (40 sources, 3 votes) and 5 threads``; ``…, 2 documents)`` when the
        runs' reports became documents."""
        documents = f", {len(self.documents)} documents" if self.documents else ""
        return (
            f"{self.runs} runs ({self.sources} sources, {self.votes} votes{documents}) "
            f"and {self.threads} threads"
        )


def prunable_run(runs: NamedFromClause, before: datetime) -> ColumnElement[bool]:
    """Whether a row of ``runs`` (the runs table or an alias of it) may be pruned with the
    cut-off ``before`` (see the module docstring)."""
    newer = _runs.alias("newer_firing")
    newest_firing = and_(
        runs.c.digest_id.is_not(None),
        runs.c.status == "succeeded",
        runs.c.digest_id.in_(select(_digests.c.id)),
        ~exists().where(
            newer.c.digest_id == runs.c.digest_id,
            newer.c.status == "succeeded",
            or_(
                newer.c.created_at > runs.c.created_at,
                and_(newer.c.created_at == runs.c.created_at, newer.c.id > runs.c.id),
            ),
        ),
    )
    return and_(
        runs.c.status.in_(FINISHED_STATUSES),
        runs.c.finished_at < before,
        or_(runs.c.delivery.is_(None), runs.c.delivery != DeliveryState.PENDING),
        ~newest_firing,
    )


def _untouched_thread(before: datetime) -> ColumnElement[bool]:
    """A thread nobody used since ``before`` (its runs aside)."""
    return and_(
        _threads.c.updated_at < before,
        ~exists().where(_variables.c.thread_id == _threads.c.id, _variables.c.updated_at >= before),
    )


class RetentionStore:
    """Pruning of finished research older than a cut-off."""

    def __init__(self, database: Database, *, batch: int = BATCH) -> None:
        self._db = database
        self._batch = batch

    async def prune(self, before: datetime, *, dry_run: bool = False) -> Pruned:
        """Delete what is older than ``before`` (see the module docstring), batch by batch
        until nothing is left; ``dry_run`` counts it instead, deleting nothing."""
        if dry_run:
            return await self._db.run(lambda conn: _count(conn, before))
        total = Pruned()
        while True:
            pruned = await self._db.run(lambda conn: self._runs_batch(conn, before))
            total += pruned
            if pruned.runs < self._batch:
                break
        while True:
            threads = await self._db.run(lambda conn: self._threads_batch(conn, before))
            total += Pruned(threads=threads)
            if threads < self._batch:
                break
        return total

    def _runs_batch(self, conn: Connection, before: datetime) -> Pruned:
        ids = pick_runs(conn, before, self._batch)
        return prune_picked(conn, ids, before) if ids else Pruned()

    def _threads_batch(self, conn: Connection, before: datetime) -> int:
        ids = pick_threads(conn, before, self._batch)
        return delete_threads(conn, ids, before) if ids else 0


def pick_runs(conn: Connection, before: datetime, limit: int) -> list[str]:
    """Up to ``limit`` runs to prune, the oldest first."""
    pick = (
        select(_runs.c.id)
        .where(prunable_run(_runs, before))
        .order_by(_runs.c.finished_at)
        .limit(limit)
    )
    return [str(i) for i in conn.execute(pick).scalars()]


def prune_picked(conn: Connection, ids: list[str], before: datetime) -> Pruned:
    """The picked runs that may still be pruned deleted (:func:`delete_runs`), with what they
    held: their sources and votes counted, and the documents of those deleted."""
    sources = _count_of(conn, _sources, _sources.c.run_id.in_(ids))
    votes = _count_of(conn, _feedback, _feedback.c.run_id.in_(ids))
    documents = documents_of(conn, _runs.c.id.in_(ids))
    deleted = deleted_runs(conn, ids, before)
    # (a run changed since the pick stays, and its document with it)
    kept = tuple(documents[i] for i in deleted if i in documents)
    return Pruned(runs=len(deleted), sources=sources, votes=votes, documents=kept)


def deleted_runs(conn: Connection, ids: list[str], before: datetime) -> list[str]:
    """Delete the picked runs that may still be pruned: the conditions again in the DELETE
    itself, so a run changed since the pick is judged by its new state (on PostgreSQL a row
    changed meanwhile is re-checked against them). The ids of those deleted."""
    stmt = (
        delete(_runs).where(_runs.c.id.in_(ids), prunable_run(_runs, before)).returning(_runs.c.id)
    )
    return [str(i) for i in conn.execute(stmt).scalars()]


def delete_runs(conn: Connection, ids: list[str], before: datetime) -> int:
    """:func:`deleted_runs`, counted."""
    return len(deleted_runs(conn, ids, before))


def _empty_thread(before: datetime) -> ColumnElement[bool]:
    return and_(_untouched_thread(before), ~exists().where(_runs.c.thread_id == _threads.c.id))


def pick_threads(conn: Connection, before: datetime, limit: int) -> list[int]:
    """Up to ``limit`` threads untouched since ``before`` with no run left."""
    pick = (
        select(_threads.c.id)
        .where(_empty_thread(before))
        .order_by(_threads.c.updated_at)
        .limit(limit)
    )
    return [int(i) for i in conn.execute(pick).scalars()]


def delete_threads(conn: Connection, ids: list[int], before: datetime) -> int:
    """Delete the picked threads still untouched and empty: a request since the pick made
    a run in the thread (and bumped its ``updated_at``), and the thread stays with it."""
    stmt = delete(_threads).where(_threads.c.id.in_(ids), _empty_thread(before))
    return int(conn.execute(stmt).rowcount)


def _count_of(conn: Connection, table: Table, where: ColumnElement[bool]) -> int:
    return int(conn.execute(select(func.count()).select_from(table).where(where)).scalar_one())


def _count(conn: Connection, before: datetime) -> Pruned:
    """What :meth:`RetentionStore.prune` would delete now."""
    doomed = select(_runs.c.id).where(prunable_run(_runs, before))
    kept = _runs.alias("kept_run")
    threads = and_(
        _untouched_thread(before),
        ~exists().where(kept.c.thread_id == _threads.c.id, ~prunable_run(kept, before)),
    )
    counts: dict[str, Any] = {
        "runs": _count_of(conn, _runs, prunable_run(_runs, before)),
        "sources": _count_of(conn, _sources, _sources.c.run_id.in_(doomed)),
        "votes": _count_of(conn, _feedback, _feedback.c.run_id.in_(doomed)),
        "threads": _count_of(conn, _threads, threads),
        "documents": tuple(documents_of(conn, prunable_run(_runs, before)).values()),
    }
    return Pruned(**counts)
