"""The progress of runs asked for over MCP: ``mcp_progress``.

A research asked for over MCP (``fathom mcp``, ``/mcp`` in ``fathom serve``) may execute in
another process than the one holding the caller's connection (a ``fathom worker`` with
``FATHOM_QUEUE=procrastinate``). The ``mcp`` platform's delivery (``bots/mcp/delivery.py``)
writes each state of the run's progress as a row here, numbered from 1 in the order written;
the request handler that holds the caller's connection reads them and sends them on as the
protocol's progress notifications. The rows go with their run (``ON DELETE CASCADE``:
retention, ``fathom forget``).

Expand only, so release N-1 runs on this schema (it does not know the table).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_progress",
        sa.Column(
            "run_id",
            sa.String(32),
            sa.ForeignKey(
                "research_runs.id",
                ondelete="CASCADE",
                name="fk_mcp_progress_run_id_research_runs",
            ),
            nullable=False,
        ),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_mcp_progress"),
    )


def downgrade() -> None:
    op.drop_table("mcp_progress")
