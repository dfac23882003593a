"""Where the bot may post in each Teams conversation: its own table, ``teams_conversations``
(migration 0019), kept on the platform contract's hook for a platform's own state
(:attr:`~bots.chat.platform.ChatPlatform.metadata`).

Teams names the service URL to post to only on the activities it sends, so a post that no
activity answers (a digest's firing, a run another replica took over without its request's
context, ``fathom digest add`` for a channel) needs the conversation's reference as it was
last seen. Each verified activity (the bot installed or added, a message, a press) records
it: service URL, kind, and when it was seen. The tenant and the conversation's part of
thread keys (:func:`~bots.teams.events.channel_key`) are the key. The
app removed from a conversation forgets it, and removed from a team (or the team deleted)
forgets every channel of that team.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Column, DateTime, MetaData, String, Table, delete, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bots.teams.events import Reference, channel_key
from storage.sql import upsert_for

#: Teams' tables (the contract's ``ChatPlatform.metadata``).
metadata = MetaData()

teams_conversations = Table(
    "teams_conversations",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("channel_key", String(100), primary_key=True),
    Column("conversation", String(300), nullable=False),
    Column("service_url", String(500), nullable=False),
    Column("kind", String(32), nullable=False),
    #: A channel's team: the app removed from a team forgets all its channels.
    Column("team", String(100), nullable=False, server_default=""),
    Column("seen_at", DateTime(timezone=True), nullable=False),
)


class ConversationReferences:
    """The references of the conversations the bot was addressed or installed in."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._upsert = upsert_for(engine.dialect.name)

    async def remember(self, reference: Reference) -> None:
        """Record (or refresh) ``reference``."""
        if not reference.conversation or len(reference.conversation) > 300:
            return
        values = {
            "tenant": reference.tenant[:64],
            "channel_key": channel_key(reference.conversation),
            "conversation": reference.conversation,
            "service_url": reference.service_url[:500],
            "kind": reference.kind[:32] or "channel",
            "team": reference.team[:100],
            "seen_at": datetime.now(UTC),
        }
        statement = self._upsert(teams_conversations).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=["tenant", "channel_key"],
            set_={
                k: statement.excluded[k]
                for k in ("conversation", "service_url", "kind", "team", "seen_at")
            },
        )
        async with self._engine.begin() as connection:
            await connection.execute(statement)

    async def forget(self, reference: Reference) -> None:
        """The bot was removed from ``reference``'s conversation: no post goes there."""
        table = teams_conversations
        async with self._engine.begin() as connection:
            await connection.execute(
                delete(table).where(
                    table.c.tenant == reference.tenant[:64],
                    table.c.channel_key == channel_key(reference.conversation),
                )
            )

    async def forget_team(self, tenant: str, team: str) -> list[str]:
        """The app was removed from ``team`` (or the team deleted): none of its channels is
        posted to any more. The channels forgotten (their conversation ids)."""
        table = teams_conversations
        if not team:
            return []
        where = (table.c.tenant == tenant[:64], table.c.team == team[:100])
        async with self._engine.begin() as connection:
            found = await connection.execute(select(table.c.conversation).where(*where))
            channels = [str(row.conversation) for row in found]
            await connection.execute(delete(table).where(*where))
        return channels

    async def find(self, tenant: str, key: str) -> Reference | None:
        """The reference of the conversation whose thread keys' channel part is ``key``."""
        table = teams_conversations
        query = select(table.c.service_url, table.c.kind, table.c.conversation, table.c.team).where(
            table.c.tenant == tenant, table.c.channel_key == key
        )
        async with self._engine.connect() as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            return None
        return Reference(row.service_url, row.conversation, tenant, row.kind, row.team)
