"""Feedback on reports, and where a run's time went.

- ``run_feedback``: one vote (``up`` or ``down``) per person per run, from the 👍 / 👎 on the
  report's last message; a second press changes the vote (``updated_at``).
- ``research_runs.seconds_by_step``: the seconds a run spent planning, searching, reading and
  writing (``--json`` usage).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

JSON = sa.JSON().with_variant(JSONB(), "postgresql")

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_feedback",
        sa.Column(
            "run_id",
            sa.String(32),
            sa.ForeignKey(
                "research_runs.id",
                ondelete="CASCADE",
                name="fk_run_feedback_run_id_research_runs",
            ),
            nullable=False,
        ),
        sa.Column("voter", sa.String(255), nullable=False),
        sa.Column("value", sa.String(8), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "voter", name="pk_run_feedback"),
    )
    op.create_index("ix_run_feedback_updated_at", "run_feedback", ["updated_at"])
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(sa.Column("seconds_by_step", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("seconds_by_step")
    op.drop_index("ix_run_feedback_updated_at", table_name="run_feedback")
    op.drop_table("run_feedback")
