"""How a report's cited claims held against their sources, and what checking them cost:
``research_runs.claim_check`` and the ``verifier_*`` counters.

Every report's cited claims are checked before it is finished (:mod:`core.claims`). The
final progress line says how many held and ``fathom research --json`` lists them; a replica
that delivers the run later reads them back from here, so every replica shows the same. The
verifier's calls and tokens are counted apart from (and within) the run's totals.

Expand only, so release N-1 runs on this schema: the new columns default to nothing checked.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
COUNTERS = ("verifier_calls", "verifier_prompt_tokens", "verifier_completion_tokens")


def upgrade() -> None:
    for name in COUNTERS:
        op.add_column(
            "research_runs",
            sa.Column(name, sa.Integer(), nullable=False, server_default=sa.text("0")),
        )
    op.add_column("research_runs", sa.Column("claim_check", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("research_runs") as batch:
        batch.drop_column("claim_check")
        for name in reversed(COUNTERS):
            batch.drop_column(name)
