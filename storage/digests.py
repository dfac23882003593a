"""Scheduled digests: the ``digests`` table, and the runs that are their firings."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, and_, delete, func, insert, select, update
from sqlalchemy.engine import Connection

from core.values import RunStatus, SourceChoice
from storage.db import Database
from storage.records import DigestRecord, RunRecord
from storage.runs import lock_admission
from storage.sql import SELECT_RUNS, run_record
from storage.tables import Digest, ResearchRun, RunSource, utcnow

_digests = cast(Table, Digest.__table__)
_runs = cast(Table, ResearchRun.__table__)
_sources = cast(Table, RunSource.__table__)


class DigestLimit(Exception):
    """The channel already has the most schedules allowed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"this channel already has {limit} schedules")
        self.limit = limit


def _record(row: Mapping[Any, Any]) -> DigestRecord:
    return DigestRecord(
        id=row["id"],
        platform=row["platform"],
        workspace=row["workspace"],
        channel=row["channel"],
        topic=row["topic"],
        depth=row["depth"],
        strategy=row["strategy"],
        cron=row["cron"],
        timezone=row["timezone"],
        created_by=row["created_by"],
        enabled=bool(row["enabled"]),
        created_at=row["created_at"],
        disabled_reason=row["disabled_reason"],
        platform_context=row["platform_context"],
        sources=row["sources"],
    )


class DigestStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def add(
        self,
        *,
        platform: str,
        workspace: str,
        channel: str,
        topic: str,
        depth: int,
        strategy: str,
        cron: str,
        timezone: str,
        created_by: str,
        platform_context: dict[str, Any] | None,
        max_per_channel: int,
        sources: SourceChoice = SourceChoice.ALL,
        created_at: datetime | None = None,
    ) -> DigestRecord:
        """Store an enabled schedule; :class:`DigestLimit` when the channel is full.
        ``created_at``: when it was made on the caller's clock (default: now), from which its
        first slot is due. The channel's schedules are counted under the channel's admission
        lock (:func:`storage.runs.lock_admission`), so schedules added at once on any number of
        replicas never pass ``max_per_channel``."""
        where = and_(
            _digests.c.platform == platform,
            _digests.c.workspace == workspace,
            _digests.c.channel == channel,
        )
        values = {
            "id": secrets.token_hex(4),
            "platform": platform,
            "workspace": workspace,
            "channel": channel,
            "topic": topic,
            "depth": depth,
            "strategy": strategy,
            "cron": cron,
            "timezone": timezone,
            "created_by": created_by,
            "enabled": True,
            "created_at": created_at or utcnow(),
            "platform_context": platform_context,
            "sources": SourceChoice(sources).value,
        }

        # A key no user id can be (ids are printable; U+001F is not), so the lock is the
        # channel's alone.
        channel_key = "\x1f".join(("digests", platform, workspace, channel))
        dialect = self._db.dialect

        def work(conn: Connection) -> DigestRecord:
            lock_admission(conn, dialect, channel_key)
            count = conn.execute(select(func.count()).select_from(_digests).where(where))
            if int(count.scalar_one()) >= max_per_channel:
                raise DigestLimit(max_per_channel)
            conn.execute(insert(_digests).values(values))
            return _record(values | {"disabled_reason": None})

        return await self._db.run(work)

    async def in_channel(self, platform: str, workspace: str, channel: str) -> list[DigestRecord]:
        stmt = (
            select(_digests)
            .where(
                and_(
                    _digests.c.platform == platform,
                    _digests.c.workspace == workspace,
                    _digests.c.channel == channel,
                )
            )
            .order_by(_digests.c.created_at, _digests.c.id)
        )
        return await self._db.run(lambda c: [_record(r) for r in c.execute(stmt).mappings()])

    async def enabled(self, platforms: frozenset[str] | None = None) -> list[DigestRecord]:
        stmt = select(_digests).where(_digests.c.enabled.is_(True))
        if platforms is not None:
            stmt = stmt.where(_digests.c.platform.in_(sorted(platforms)))
        stmt = stmt.order_by(_digests.c.created_at, _digests.c.id)
        return await self._db.run(lambda c: [_record(r) for r in c.execute(stmt).mappings()])

    async def all(self) -> list[DigestRecord]:
        stmt = select(_digests).order_by(_digests.c.created_at, _digests.c.id)
        return await self._db.run(lambda c: [_record(r) for r in c.execute(stmt).mappings()])

    async def get(self, digest_id: str) -> DigestRecord | None:
        stmt = select(_digests).where(_digests.c.id == digest_id)

        def work(conn: Connection) -> DigestRecord | None:
            row = conn.execute(stmt).mappings().first()
            return None if row is None else _record(row)

        return await self._db.run(work)

    async def remove(self, digest_id: str) -> bool:
        stmt = delete(_digests).where(_digests.c.id == digest_id)
        return await self._db.run(lambda conn: bool(conn.execute(stmt).rowcount))

    async def disable(self, digest_id: str, reason: str) -> None:
        stmt = (
            update(_digests)
            .where(_digests.c.id == digest_id)
            .values(enabled=False, disabled_reason=reason[:500])
        )
        await self._db.run(lambda conn: conn.execute(stmt))

    async def runs(self, digest_id: str, limit: int = 20) -> list[RunRecord]:
        """The digest's runs, newest first."""
        stmt = (
            SELECT_RUNS.where(_runs.c.digest_id == digest_id)
            .order_by(_runs.c.created_at.desc(), _runs.c.id.desc())
            .limit(limit)
        )
        return await self._db.run(lambda c: [run_record(r) for r in c.execute(stmt).mappings()])

    async def history(self, digest_id: str, before: datetime) -> tuple[RunRecord | None, set[str]]:
        """For a digest's firing created at ``before``: the latest earlier firing that
        succeeded, and the identity of every source its earlier firings found: its URL, or
        its title when it has none (an attached file, an internal document without a link)."""
        earlier = _runs.c.digest_id == digest_id
        previous = (
            SELECT_RUNS.where(
                earlier, _runs.c.status == RunStatus.SUCCEEDED, _runs.c.created_at < before
            )
            .order_by(_runs.c.created_at.desc(), _runs.c.id.desc())
            .limit(1)
        )
        urls = (
            select(_sources.c.url, _sources.c.title)
            .join(_runs, _runs.c.id == _sources.c.run_id)
            .where(earlier, _runs.c.created_at < before)
            .distinct()
        )

        def work(conn: Connection) -> tuple[RunRecord | None, set[str]]:
            row = conn.execute(previous).mappings().first()
            return (
                None if row is None else run_record(row),
                {str(url or title) for (url, title) in conn.execute(urls)},
            )

        return await self._db.run(work)
