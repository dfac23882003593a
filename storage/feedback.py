"""Votes on reports (👍 / 👎 on the report's last message): one per person per run.

A vote is an upsert on the primary key ``(run_id, voter)``: a second press by the same person
changes their vote, and a press delivered twice (or by two replicas) leaves one row.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection

from core.values import Vote
from storage.db import Database
from storage.records import FeedbackRecord
from storage.sql import fit_key, upsert_for
from storage.tables import ResearchRun, RunFeedback, Thread, utcnow

_feedback = cast(Table, RunFeedback.__table__)
_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)

VALUES = frozenset(Vote)


class FeedbackStore:
    """The votes on runs' reports."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._upsert = upsert_for(database.dialect)

    async def record_feedback(self, run_id: str, voter: str, value: Vote) -> Vote | None:
        """Store ``voter``'s vote on the run; returns their vote before this one (None: their
        first)."""
        if value not in VALUES:
            raise ValueError(f"a vote is 'up' or 'down', not {value!r}")
        vote = Vote(value).value
        voter = fit_key(voter)
        now = utcnow()
        insert = self._upsert(_feedback).values(
            run_id=run_id, voter=voter, value=vote, created_at=now, updated_at=now
        )
        stmt = insert.on_conflict_do_update(
            index_elements=[_feedback.c.run_id, _feedback.c.voter],
            set_={"value": vote, "updated_at": now},
        )
        before = select(_feedback.c.value).where(
            _feedback.c.run_id == run_id, _feedback.c.voter == voter
        )

        def work(conn: Connection) -> Vote | None:
            previous = conn.execute(before).scalar()
            conn.execute(stmt)
            return None if previous is None else Vote(previous)

        return await self._db.run(work)

    async def feedback_since(self, since: datetime | None = None) -> list[FeedbackRecord]:
        """Every vote last changed at or after ``since`` (all of them: None), newest first."""
        stmt = (
            select(
                _feedback.c.run_id,
                _feedback.c.voter,
                _feedback.c.value,
                _feedback.c.created_at,
                _feedback.c.updated_at,
                _runs.c.topic,
                _threads.c.key.label("thread_key"),
            )
            .join(_runs, _runs.c.id == _feedback.c.run_id)
            .join(_threads, _threads.c.id == _runs.c.thread_id)
            .order_by(_feedback.c.updated_at.desc(), _feedback.c.run_id, _feedback.c.voter)
        )
        if since is not None:
            stmt = stmt.where(_feedback.c.updated_at >= since)

        def work(conn: Connection) -> list[FeedbackRecord]:
            return [
                FeedbackRecord(
                    run_id=row.run_id,
                    voter=row.voter,
                    value=row.value,
                    topic=row.topic,
                    thread_key=row.thread_key,
                    created_at=row.created_at,
                    updated_at=row.updated_at,
                )
                for row in conn.execute(stmt)
            ]

        return await self._db.run(work)
