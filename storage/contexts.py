"""What a conversation was opened from (``conversation_contexts``), kept for its runs.

Slack's assistant pane tells the app, when a thread starts and whenever the user moves, which
channel the user is viewing; a message in the thread does not say it again. The last context
of each thread is kept here (an upsert: an event delivered twice, or to two replicas, leaves
one row) and recorded with each run started in the thread. It is a record of where the user
was, never a grant: what a run may search is decided from the run's own thread
(``core.knowledge``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Table, delete, select
from sqlalchemy.engine import Connection

from storage.db import Database
from storage.sql import upsert_for
from storage.tables import ConversationContext, utcnow

_contexts = cast(Table, ConversationContext.__table__)


class ContextStore:
    """The last known context of each conversation."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._upsert = upsert_for(database.dialect)

    async def set_conversation_context(self, thread_key: str, context: dict[str, Any]) -> None:
        """Keep ``context`` as the thread's (replacing what it had)."""
        now = utcnow()
        insert = self._upsert(_contexts).values(
            thread_key=thread_key, context=context, updated_at=now
        )
        stmt = insert.on_conflict_do_update(
            index_elements=[_contexts.c.thread_key], set_={"context": context, "updated_at": now}
        )

        def work(conn: Connection) -> None:
            conn.execute(stmt)

        await self._db.run(work)

    async def conversation_context(self, thread_key: str) -> dict[str, Any] | None:
        stmt = select(_contexts.c.context).where(_contexts.c.thread_key == thread_key)

        def work(conn: Connection) -> dict[str, Any] | None:
            value = conn.execute(stmt).scalar()
            return dict(value) if isinstance(value, dict) else None

        return await self._db.run(work)

    async def prune_contexts(self, older_than: timedelta) -> int:
        """Forget the contexts not changed for ``older_than`` (a run in such a thread then
        records none)."""
        stmt = delete(_contexts).where(_contexts.c.updated_at < utcnow() - older_than)
        return await self._db.run(lambda conn: int(conn.execute(stmt).rowcount or 0))
