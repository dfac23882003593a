"""Microsoft Teams' own table: where the bot may post in each conversation
(``teams_conversations``: tenant, the conversation's key in thread keys, the conversation,
service URL, kind, a channel's team, when it was last seen).

Teams names the service URL to post to only on the activities it sends; a digest's firing or
a run delivered without its request's context posts with the reference kept here
(``bots.teams.references``).

Expand only, so release N-1 runs on this schema (it does not know the table).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "teams_conversations",
        sa.Column("tenant", sa.String(64), primary_key=True),
        sa.Column("channel_key", sa.String(100), primary_key=True),
        sa.Column("conversation", sa.String(300), nullable=False),
        sa.Column("service_url", sa.String(500), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("team", sa.String(100), nullable=False, server_default=""),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("teams_conversations")
