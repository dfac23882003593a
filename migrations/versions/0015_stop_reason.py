"""Why a run's searching ended: ``research_runs.stop_reason``.

A run that was stopped ("Stop and write now"), ran out of its token or time budget, or was
stopped before any search found anything ends with that reason in its last progress line
and its report's notes. The reason was only in the memory of the process that ran it: a
replica that delivers the run's outcome later (or ``fathom thread show``) read it back as
a run that simply ended. It is recorded with the run's outcome now.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("research_runs", sa.Column("stop_reason", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("stop_reason")
