"""Control from the chat.

- ``research_runs.stop_requested``: "Stop and write now" asks a running research to stop
  searching and write its report from what it found (``cancel_requested`` ends it without
  one). Like a cancel, the flag goes through the database, so any replica may set it and the
  one running the research sees it at its next checkpoint.
- ``thread_variables.guidance``: replies that steered a run while it ran (who, when, what).
- ``research_runs.tokens_by_model``: the run's tokens per model, which FATHOM_PRICES prices.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

JSON = sa.JSON().with_variant(JSONB(), "postgresql")

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(
            sa.Column("stop_requested", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch.add_column(sa.Column("tokens_by_model", JSON, nullable=True))
    with op.batch_alter_table("thread_variables") as batch:
        batch.add_column(sa.Column("guidance", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("thread_variables") as batch:
        batch.drop_column("guidance")
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("tokens_by_model")
        batch.drop_column("stop_requested")
