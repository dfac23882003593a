"""Processed platform events: each delivery of a chat platform is recorded once, so a retried
delivery (Slack and Feishu retry an event they think was lost) is recognised and dropped.

The dedupe lives in the database (a unique key, settled by ``INSERT ... ON CONFLICT``), not in
a process-local cache, so it holds across restarts and replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import cast

from sqlalchemy import Table, delete, select

from storage.db import Database
from storage.sql import fit_key, upsert_for
from storage.tables import ProcessedEvent, utcnow

_events = cast(Table, ProcessedEvent.__table__)


class EventStore:
    """The platform deliveries already seen, by their key."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._upsert = upsert_for(database.dialect)

    async def claim_event(self, key: str) -> bool:
        """Record a platform delivery; True the first time ``key`` is seen, else False."""
        stmt = (
            self._upsert(_events)
            .values(key=fit_key(key), created_at=utcnow())
            .on_conflict_do_nothing(index_elements=[_events.c.key])
            .returning(_events.c.key)
        )
        return await self._db.run(lambda conn: conn.execute(stmt).first() is not None)

    async def events_seen(self, keys: Sequence[str]) -> bool:
        """Whether any of these platform deliveries was recorded (:meth:`claim_event`)."""
        fitted = [fit_key(key) for key in keys]
        stmt = select(_events.c.key).where(_events.c.key.in_(fitted)).limit(1)
        return await self._db.run(lambda conn: conn.execute(stmt).first() is not None)

    async def prune_events(self, older_than: timedelta) -> int:
        stmt = delete(_events).where(_events.c.created_at < utcnow() - older_than)
        return await self._db.run(lambda conn: int(conn.execute(stmt).rowcount or 0))
