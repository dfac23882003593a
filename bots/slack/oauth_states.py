"""Slack's own state beside the SDK's: its expired OAuth states pruned, and what it keeps of a
person (multi-workspace installs, ``bots.slack.tables``).

The tables belong to ``slack_sdk``'s OAuth stores, which write and read them; Fathom only
deletes the states nobody will use (Slack's chore in housekeeping,
:meth:`bots.slack.platform.SlackPlatform.housekeeping`) and counts a person's installations
for ``fathom forget`` (kept: uninstalling the app removes them).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bots.slack.tables import slack_installations, slack_oauth_states


class SlackOAuthStates:
    """The Slack SDK's OAuth states, pruned once they expire."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def prune_expired(self) -> int:
        """Delete the Slack OAuth states that have expired (each install page view stores one;
        the SDK only deletes a state when it is used)."""
        now = datetime.now(UTC).replace(tzinfo=None)  # the SDK stores naive UTC
        stmt = delete(slack_oauth_states).where(slack_oauth_states.c.expire_at < now)
        async with self._engine.begin() as conn:
            return int((await conn.execute(stmt)).rowcount or 0)


async def installations_by(engine: AsyncEngine, user_id: str) -> int:
    """How many installations of the app ``user_id`` made."""
    stmt = (
        select(func.count())
        .select_from(slack_installations)
        .where(slack_installations.c.user_id == user_id)
    )
    async with engine.connect() as conn:
        return int((await conn.execute(stmt)).scalar_one())
