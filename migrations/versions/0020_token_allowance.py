"""A chat run's share of its requester's daily token quota: ``research_runs.token_allowance``.

``FATHOM_USER_DAILY_TOKENS`` was checked only when a request came in: a running research could
spend past it, and simultaneous requests all passed it (issue 53, item 2). A run admitted under
the quota now reserves its share in the transaction that admits it (an estimate of what it
needs, at most what is left of the day), the day counts a queued or running run at its
reservation or its spending, whichever is more, and the run stops searching when it has spent
its share and the day has no more for it. NULL: no daily quota applied (the console, a
digest's firing, no FATHOM_USER_DAILY_TOKENS, a run made before this revision).

Expand only, so release N-1 runs on this schema (it does not know the column).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("research_runs", sa.Column("token_allowance", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("token_allowance")
