"""Delivery bookkeeping: processed platform events and the report-posted mark.

``processed_events`` makes a retried platform delivery (Slack's X-Slack-Retry-Num,
Feishu's and DingTalk's redeliveries) a no-op across restarts and replicas: the
first insert of an event key wins. ``research_runs.report_posted_at`` lets a
resumed run post its report exactly once.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "processed_events",
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_processed_events"),
    )
    op.create_index("ix_processed_events_created_at", "processed_events", ["created_at"])
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(sa.Column("report_posted_at", TIMESTAMP, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("report_posted_at")
    op.drop_index("ix_processed_events_created_at", table_name="processed_events")
    op.drop_table("processed_events")
