"""Housekeeping of the Slack SDK's ``slack_oauth_states`` table (multi-workspace installs).

The table belongs to ``slack_sdk``'s OAuth state store, which writes and reads it; Fathom
only deletes the states nobody will use: Slack's chore in housekeeping
(:meth:`bots.slack.platform.SlackPlatform.housekeeping`).
"""

from __future__ import annotations

from sqlalchemy import delete

from storage import Database
from storage.tables import slack_oauth_states, utcnow


class SlackOAuthStates:
    """The Slack SDK's OAuth states, pruned once they expire."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def prune_expired(self) -> int:
        """Delete the Slack OAuth states that have expired (each install page view stores one;
        the SDK only deletes a state when it is used)."""
        now = utcnow().replace(tzinfo=None)  # the SDK stores naive UTC
        stmt = delete(slack_oauth_states).where(slack_oauth_states.c.expire_at < now)
        return await self._db.run(lambda conn: int(conn.execute(stmt).rowcount or 0))
