"""Files attached in the chat, and the sources' publication dates.

- ``research_runs.attachments``: the files a request carried, as the platform described them
  (name, type, size, the platform's id and link; never their contents), read when the run
  executes. What was read is kept with the thread's variables (``files``), so follow-ups
  reuse it.
- ``thread_variables.files``: the attached files as read (their text), for every later run
  of the thread.
- ``research_runs.attachments_read``: the run's usage counter of files read.
- ``chat_files``: a file sent to the bot on its own, kept for a short while for the request
  that follows it (DingTalk has no threads: the same user's ``/research`` soon after it).
- ``run_sources.published``: a source's publication date (``YYYY-MM-DD``) when its search
  provider or its page gave one; ``run_sources.kind``: ``web`` or ``file`` (an attached file).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "chat_files",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("attachment", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_chat_files_scope", "chat_files", ["scope"])
    op.create_index("ix_chat_files_created_at", "chat_files", ["created_at"])
    with op.batch_alter_table("thread_variables") as batch:
        batch.add_column(sa.Column("files", JSON, nullable=True))
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(sa.Column("attachments", JSON, nullable=True))
        batch.add_column(
            sa.Column("attachments_read", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
    with op.batch_alter_table("run_sources") as batch:
        batch.add_column(sa.Column("published", sa.String(length=32), nullable=True))
        batch.add_column(
            sa.Column("kind", sa.String(length=16), server_default=sa.text("'web'"), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("run_sources") as batch:
        batch.drop_column("kind")
        batch.drop_column("published")
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("attachments_read")
        batch.drop_column("attachments")
    with op.batch_alter_table("thread_variables") as batch:
        batch.drop_column("files")
    op.drop_index("ix_chat_files_created_at", table_name="chat_files")
    op.drop_index("ix_chat_files_scope", table_name="chat_files")
    op.drop_table("chat_files")
