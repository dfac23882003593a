"""Scheduled digests: the digests table, runs linked to their digest, and named leases.

- ``digests``: a recurring research of a channel (cron in an IANA timezone, depth, strategy,
  who created it, enabled or disabled with the reason, what the platform needs to post).
- ``research_runs.digest_id``: a firing is a normal run linked to its digest; its dedupe key
  (``digest:<id>:<slot>``, unique) makes a slot post at most once, whatever races.
- ``leases``: one holder at a time of a named duty (the digest scheduler), renewed by
  heartbeat and taken over when it expires.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "digests",
        sa.Column("id", sa.String(16), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("workspace", sa.String(255), nullable=False),
        sa.Column("channel", sa.String(255), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(32), nullable=False),
        sa.Column("cron", sa.String(255), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("platform_context", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_digests"),
    )
    op.create_index("ix_digests_channel", "digests", ["platform", "workspace", "channel"])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("expires_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_leases"),
    )
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(sa.Column("digest_id", sa.String(16), nullable=True))
        batch.create_index("ix_research_runs_digest_id", ["digest_id"])


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_index("ix_research_runs_digest_id")
        batch.drop_column("digest_id")
    op.drop_table("leases")
    op.drop_index("ix_digests_channel", table_name="digests")
    op.drop_table("digests")
