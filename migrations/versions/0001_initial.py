"""Initial schema: threads, thread variables, research runs, run sources, search cache.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
ZERO = sa.text("0")


def upgrade() -> None:
    op.create_table(
        "threads",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("workspace", sa.String(255), nullable=False),
        sa.Column("channel", sa.String(255), nullable=False),
        sa.Column("thread_ref", sa.String(255), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_threads"),
        sa.UniqueConstraint("key", name="uq_threads_key"),
    )
    op.create_table(
        "thread_variables",
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("topics", JSON, nullable=False),
        sa.Column("next_search_topic", sa.Text(), nullable=True),
        sa.Column("findings", JSON, nullable=False),
        sa.Column("should_continue", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("version", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("thread_id", name="pk_thread_variables"),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name="fk_thread_variables_thread_id_threads",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "research_runs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("thread_id", sa.Integer(), nullable=False),
        sa.Column("topic", sa.Text(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("rounds_done", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("requested_by", sa.String(255), nullable=True),
        sa.Column("dedupe_key", sa.String(255), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("progress_message_id", sa.String(255), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("notes", JSON, nullable=False),
        sa.Column("report_markdown", sa.Text(), nullable=True),
        sa.Column("llm_calls", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("completion_tokens", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("searches", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("started_at", TIMESTAMP, nullable=True),
        sa.Column("finished_at", TIMESTAMP, nullable=True),
        sa.Column("heartbeat_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_research_runs"),
        sa.ForeignKeyConstraint(
            ["thread_id"],
            ["threads.id"],
            name="fk_research_runs_thread_id_threads",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("dedupe_key", name="uq_research_runs_dedupe_key"),
    )
    op.create_index("ix_research_runs_thread_id", "research_runs", ["thread_id"])
    op.create_index("ix_research_runs_status", "research_runs", ["status"])
    op.create_index("ix_research_runs_requested_by", "research_runs", ["requested_by"])
    op.create_table(
        "run_sources",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_run_sources"),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["research_runs.id"],
            name="fk_run_sources_run_id_research_runs",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("run_id", "n", name="uq_run_sources_run_id_n"),
    )
    op.create_table(
        "search_cache",
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("query", sa.String(1024), nullable=False),
        sa.Column("results", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("provider", "query", name="pk_search_cache"),
    )


def downgrade() -> None:
    op.drop_table("search_cache")
    op.drop_table("run_sources")
    op.drop_index("ix_research_runs_requested_by", table_name="research_runs")
    op.drop_index("ix_research_runs_status", table_name="research_runs")
    op.drop_index("ix_research_runs_thread_id", table_name="research_runs")
    op.drop_table("research_runs")
    op.drop_table("thread_variables")
    op.drop_table("threads")
