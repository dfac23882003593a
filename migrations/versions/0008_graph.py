"""The graph strategy's sub-questions, kept per thread with the other variables.

``thread_variables.graph``: a JSON list of nodes (name, question, the nodes it comes after,
the turn and run that planned it, status, answer and why it failed), so an interrupted graph
run resumes without searching an answered node again and a follow-up may extend the graph.
Threads researched only by the iterative strategy keep it empty.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("thread_variables") as batch:
        batch.add_column(sa.Column("graph", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("thread_variables") as batch:
        batch.drop_column("graph")
