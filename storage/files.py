"""Files sent to the bot on their own, kept for the request that follows them.

A DingTalk group @-message carries no file, and a Feishu file message carries no mention: the
file arrives first, the request a moment later. The file's description (never its contents) is
kept here under a ``scope`` the platform chooses (the conversation and the sender, or the
thread) and taken, once, by the next request in that scope within the platform's window. The
take is one transaction that deletes what it returns, so two replicas handling two requests
never attach one file twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.engine import Connection

from storage.db import Database
from storage.sql import fit_key
from storage.tables import ChatFile, utcnow

_files = cast(Table, ChatFile.__table__)


class FileStore:
    """Files waiting for a request, by scope."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def remember_files(self, scope: str, attachments: Sequence[dict[str, Any]]) -> None:
        """Keep these file descriptions for the next request in ``scope``."""
        if not attachments:
            return
        now = utcnow()
        rows = [
            {"scope": fit_key(scope), "attachment": dict(a), "created_at": now} for a in attachments
        ]
        await self._db.run(lambda conn: conn.execute(insert(_files), rows))

    async def take_files(self, scope: str, since: datetime) -> list[dict[str, Any]]:
        """The files kept in ``scope`` since ``since``, oldest first, removed as they are
        taken (a file is attached to one request only)."""
        key = fit_key(scope)

        def work(conn: Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                select(_files.c.id, _files.c.attachment)
                .where(_files.c.scope == key, _files.c.created_at >= since)
                .order_by(_files.c.id)
                .with_for_update()
            ).all()
            if not rows:
                return []
            ids = [row.id for row in rows]
            taken = conn.execute(delete(_files).where(_files.c.id.in_(ids))).rowcount
            if taken != len(ids):  # another request took some meanwhile: none for this one
                raise _Raced()
            return [dict(row.attachment) for row in rows]

        try:
            return await self._db.run(work)
        except _Raced:
            return []

    async def prune_files(self, older_than: timedelta) -> int:
        stmt = delete(_files).where(_files.c.created_at < utcnow() - older_than)
        return await self._db.run(lambda conn: int(conn.execute(stmt).rowcount or 0))


class _Raced(Exception):
    """Rolls the take back: another transaction deleted some of the rows first."""
