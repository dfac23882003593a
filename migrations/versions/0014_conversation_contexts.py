"""What a conversation was opened from: ``conversation_contexts``.

Slack's assistant pane names the channel the user was viewing when an assistant thread starts
(and when they move); a message in the thread does not. The last context of each thread is
kept here, by thread key, and recorded with the runs started in it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

JSON = sa.JSON().with_variant(JSONB(), "postgresql")

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversation_contexts",
        sa.Column("thread_key", sa.String(512), nullable=False),
        sa.Column("context", JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("thread_key", name="pk_conversation_contexts"),
    )
    op.create_index("ix_conversation_contexts_updated_at", "conversation_contexts", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_conversation_contexts_updated_at", table_name="conversation_contexts")
    op.drop_table("conversation_contexts")
