"""Run lifecycle for several replicas: owner and attempt, one active run per thread, delivery.

- ``owner`` records who holds a run and ``fence`` grows with every claim: together they fence
  every write of the holder (``storage.store``: a runner that lost its claim cannot write).
  ``attempt`` counts the attempts that count against ``FATHOM_MAX_ATTEMPTS``.
- A partial unique index allows one queued or running run per thread. Threads that already
  have several keep their newest; the older ones are failed with a note (before this
  revision nothing prevented them).
- ``delivery`` (``pending`` / ``posted`` / ``failed``), ``report_parts_posted``,
  ``delivery_attempts`` and ``delivery_error`` make posting a finished run's outcome its own
  durable, retried step. Runs finished before this revision are not delivered again.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ZERO = sa.text("0")
ACTIVE = "status IN ('queued', 'running')"
SUPERSEDED = "superseded by a newer run in the same thread (one active run per thread)"


def upgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(sa.Column("owner", sa.String(255), nullable=True))
        batch.add_column(sa.Column("fence", sa.Integer(), server_default=ZERO, nullable=False))
        batch.add_column(sa.Column("attempt", sa.Integer(), server_default=ZERO, nullable=False))
        batch.add_column(sa.Column("delivery", sa.String(16), nullable=True))
        batch.add_column(
            sa.Column("report_parts_posted", sa.Integer(), server_default=ZERO, nullable=False)
        )
        batch.add_column(
            sa.Column("delivery_attempts", sa.Integer(), server_default=ZERO, nullable=False)
        )
        batch.add_column(sa.Column("delivery_error", sa.Text(), nullable=True))
    bind = op.get_bind()
    now = datetime.now(UTC)
    if bind.dialect.name == "sqlite":
        now = now.replace(tzinfo=None)  # how storage.tables.UTCDateTime stores it there
    bind.execute(
        sa.text(
            f"""
            UPDATE research_runs SET status = 'failed', error = :why, finished_at = :now
            WHERE {ACTIVE} AND EXISTS (
                SELECT 1 FROM research_runs AS newer
                WHERE newer.thread_id = research_runs.thread_id
                  AND newer.{ACTIVE}
                  AND (newer.created_at > research_runs.created_at
                       OR (newer.created_at = research_runs.created_at
                           AND newer.id > research_runs.id))
            )
            """
        ),
        {"why": SUPERSEDED, "now": now},
    )
    bind.execute(
        sa.text("UPDATE research_runs SET delivery = 'posted' WHERE report_posted_at IS NOT NULL")
    )
    op.create_index("ix_research_runs_delivery", "research_runs", ["delivery"])
    op.create_index(
        "uq_research_runs_active_thread",
        "research_runs",
        ["thread_id"],
        unique=True,
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )


def downgrade() -> None:
    op.drop_index("uq_research_runs_active_thread", table_name="research_runs")
    op.drop_index("ix_research_runs_delivery", table_name="research_runs")
    with op.batch_alter_table("research_runs") as batch:
        for column in (
            "delivery_error",
            "delivery_attempts",
            "report_parts_posted",
            "delivery",
            "attempt",
            "fence",
            "owner",
        ):
            batch.drop_column(column)
