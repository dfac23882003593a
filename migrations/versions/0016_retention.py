"""Indexes for retention: ``research_runs.finished_at`` and ``threads.updated_at``.

Housekeeping prunes finished runs and untouched threads older than
``FATHOM_RUN_RETENTION_DAYS`` (``storage.retention``) in batches, every hour, on one replica;
``fathom prune`` does the same by hand. Each batch picks its rows by these times: without the
indexes every batch would read the whole table. Indexes only: release N-1 runs on this
schema.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_research_runs_finished_at", "research_runs", ["finished_at"])
    op.create_index("ix_threads_updated_at", "threads", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_threads_updated_at", table_name="threads")
    op.drop_index("ix_research_runs_finished_at", table_name="research_runs")
