"""What a run's long report became on its platform: ``research_runs.report_document``.

A report longer than one message becomes one document (a Slack canvas, a Feishu cloud
document) with a summary in the thread (issue 56). The document is created by one durable
step of the delivery, recorded here before the summary is posted, so a resumed delivery (on
any replica) never creates a second one; a platform that refused documents is recorded too
(``{"kind": "parts", ...}``) and the report goes as its usual parts. ``fathom forget`` and
retention read it to delete what Fathom created on the platform. NULL: no document step was
taken (a short report, a platform without documents, a run made before this revision).

Expand only, so release N-1 runs on this schema (it does not know the column).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("research_runs", sa.Column("report_document", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("report_document")
