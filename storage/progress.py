"""The progress of runs asked for over MCP (``mcp_progress``, migration 0022): each state
of a run's progress appended as a numbered row by the ``mcp`` platform's delivery, wherever
the run executes, and read in order by the request handler holding the caller's connection,
wherever that is.

A row's number is the run's last one plus one, taken in the transaction that writes it; two
writers racing for one number (a run taken over while its old runner still writes) are
settled by the primary key, the loser taking the next number. The rows are deleted with
their run (``ON DELETE CASCADE``: retention, ``fathom forget``).
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, func, insert, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from storage.db import Database
from storage.records import ProgressRecord
from storage.tables import McpProgress, ResearchRun, utcnow

_progress = cast(Table, McpProgress.__table__)
_runs = cast(Table, ResearchRun.__table__)

#: How many times a write that lost its number to another writer tries the next one.
_ATTEMPTS = 5


class ProgressStore:
    """The progress rows of MCP runs."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def append(self, run_id: str, text: str) -> int:
        """Append ``text`` as the run's next progress row; its number (the first is 1).
        ``KeyError`` when there is no such run."""

        def work(conn: Connection) -> int:
            if conn.execute(select(_runs.c.id).where(_runs.c.id == run_id)).first() is None:
                raise KeyError(f"no run {run_id!r}")
            last = conn.execute(
                select(func.max(_progress.c.seq)).where(_progress.c.run_id == run_id)
            ).scalar()
            seq = int(last or 0) + 1
            conn.execute(
                insert(_progress).values(run_id=run_id, seq=seq, text=text, created_at=utcnow())
            )
            return seq

        for attempt in range(_ATTEMPTS):
            try:
                return await self._db.run(work)
            except IntegrityError:
                if attempt == _ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def since(self, run_id: str, seq: int = 0) -> list[ProgressRecord]:
        """The run's rows numbered after ``seq``, in order (all of them: 0)."""
        stmt = (
            select(_progress)
            .where(_progress.c.run_id == run_id, _progress.c.seq > seq)
            .order_by(_progress.c.seq)
        )

        def work(conn: Connection) -> list[ProgressRecord]:
            return [
                ProgressRecord(
                    run_id=row.run_id, seq=row.seq, text=row.text, created_at=row.created_at
                )
                for row in conn.execute(stmt)
            ]

        return await self._db.run(work)
