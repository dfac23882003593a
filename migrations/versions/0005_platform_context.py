"""A run's platform context: what its platform needs to deliver it, recorded with the request.

DingTalk has no threads and no message to reply to later: a run's progress card and report go
to the request's conversation through the request's session webhook (valid about 90 minutes)
or the robot OpenAPI, which need the conversation type, the requester's staff id and the
webhook. ``platform_context`` holds such values (a small JSON object) for any platform; runs of
platforms that need nothing keep it empty.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.add_column(sa.Column("platform_context", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("platform_context")
