"""Named leases: one process at a time holds a duty (the digest scheduler), renewed by
heartbeat, taken over by another once it expires.

Times come from the caller's clock (aware UTC datetimes), so the holder and the tests choose
it; replicas are expected to keep their clocks in step (NTP), and leases are tens of seconds
long.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from sqlalchemy import Table, and_, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from storage.db import Database
from storage.tables import Lease

_leases = cast(Table, Lease.__table__)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class LeaseStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def acquire(self, name: str, owner: str, ttl: float, now: datetime) -> bool:
        """Take or renew the lease ``name`` for ``ttl`` seconds: True while ``owner`` holds it
        (it held it already, or it had expired), False while another owner does."""
        expires = now + timedelta(seconds=ttl)
        take = (
            update(_leases)
            .where(
                and_(
                    _leases.c.name == name,
                    or_(_leases.c.owner == owner, _leases.c.expires_at < now),
                )
            )
            .values(owner=owner, expires_at=expires)
        )

        def work(conn: Connection) -> bool:
            if conn.execute(take).rowcount:
                return True
            try:
                with conn.begin_nested():
                    conn.execute(insert(_leases).values(name=name, owner=owner, expires_at=expires))
            except IntegrityError:
                # Someone created the row meanwhile: ours (a concurrent call of this owner) or
                # another owner's; the row decides.
                return bool(conn.execute(take).rowcount)
            return True

        return await self._db.run(work)

    async def release(self, name: str, owner: str) -> None:
        """Give the lease up at once (a no-op unless ``owner`` holds it)."""
        stmt = (
            update(_leases)
            .where(and_(_leases.c.name == name, _leases.c.owner == owner))
            .values(expires_at=EPOCH)
        )
        await self._db.run(lambda conn: conn.execute(stmt))

    async def holder(self, name: str, now: datetime) -> str | None:
        """Who holds the lease now (None: nobody, or it expired)."""

        stmt = select(_leases.c.owner, _leases.c.expires_at).where(_leases.c.name == name)

        def work(conn: Connection) -> str | None:
            row = conn.execute(stmt).first()
            return None if row is None or row.expires_at < now else str(row.owner)

        return await self._db.run(work)
