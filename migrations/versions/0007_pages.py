"""Reading result pages: a cache of pages' main text, and each run's page counters.

- ``page_cache``: the main text extracted from a page (never its HTML), keyed by the SHA-256 of
  its address, kept ``FATHOM_PAGE_CACHE_TTL``; a page read again within it is not fetched.
- ``research_runs.pages_read`` / ``pages_skipped``: how many result pages a run read, and how
  many it could not read or found nothing relevant on (``fathom research --json`` usage).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "page_cache",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("final_url", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_page_cache"),
    )
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(
            sa.Column("pages_read", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
        batch.add_column(
            sa.Column("pages_skipped", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("pages_skipped")
        batch.drop_column("pages_read")
    op.drop_table("page_cache")
