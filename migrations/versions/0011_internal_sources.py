"""Internal sources: team knowledge through MCP servers (core.knowledge).

- ``research_runs.sources``: which sources the run searches (``web``, ``internal`` or
  ``all``); the internal ones are decided from the run's thread when it executes.
- ``research_runs.internal_searches``: the run's usage counter of calls to internal sources.
- ``run_sources.server``: the MCP server an internal source came from; ``run_sources.kind``
  becomes ``web``, ``attachment`` (was ``file``) or ``internal``.
- ``digests.sources``: which sources a digest's firings search.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(
            sa.Column(
                "sources", sa.String(length=16), server_default=sa.text("'all'"), nullable=False
            )
        )
        batch.add_column(
            sa.Column(
                "internal_searches", sa.Integer(), server_default=sa.text("0"), nullable=False
            )
        )
    with op.batch_alter_table("run_sources") as batch:
        batch.add_column(sa.Column("server", sa.String(length=255), nullable=True))
    op.execute("UPDATE run_sources SET kind = 'attachment' WHERE kind = 'file'")
    with op.batch_alter_table("digests") as batch:
        batch.add_column(
            sa.Column(
                "sources", sa.String(length=16), server_default=sa.text("'all'"), nullable=False
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("digests") as batch:
        batch.drop_column("sources")
    op.execute("UPDATE run_sources SET kind = 'file' WHERE kind = 'attachment'")
    with op.batch_alter_table("run_sources") as batch:
        batch.drop_column("server")
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("internal_searches")
        batch.drop_column("sources")
