"""The job queue of ``FATHOM_QUEUE=procrastinate``: procrastinate's schema, on PostgreSQL.

procrastinate keeps its jobs in PostgreSQL tables and functions of its own; this revision
applies the schema of the installed procrastinate (``procrastinate.schema``) once, so that
``fathom db upgrade`` prepares the queue with everything else. SQLite has no queue (the
in-process runner needs none): nothing to do there.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    exists = bind.execute(sa.text("SELECT to_regclass('procrastinate_jobs')")).scalar()
    if exists is None:
        from procrastinate.schema import SchemaManager

        # Straight to the driver, without parameters: the schema's % are its own.
        cursor = bind.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(SchemaManager.get_schema())
        finally:
            cursor.close()


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    op.execute(
        "DROP TABLE IF EXISTS procrastinate_events, procrastinate_periodic_defers, "
        "procrastinate_jobs, procrastinate_workers CASCADE"
    )
    # The types take the functions that use them along (CASCADE).
    op.execute(
        "DROP TYPE IF EXISTS procrastinate_job_event_type, procrastinate_job_status, "
        "procrastinate_job_to_defer_v1 CASCADE"
    )
    op.execute(
        "DO $$ DECLARE f record; BEGIN FOR f IN SELECT p.oid::regprocedure AS sig FROM pg_proc p "
        "WHERE p.proname LIKE 'procrastinate%' LOOP EXECUTE 'DROP FUNCTION ' || f.sig || "
        "' CASCADE'; END LOOP; END $$"
    )
