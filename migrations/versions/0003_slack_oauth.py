"""Slack multi-workspace installs: the tables of slack_sdk's SQLAlchemy OAuth stores.

``bots/slack/oauth.py`` uses ``AsyncSQLAlchemyInstallationStore`` and
``AsyncSQLAlchemyOAuthStateStore`` on our engine. Their schema is the SDK's
(``build_installations_table``, ``build_bots_table``, ``build_oauth_states_table``),
copied column for column so the SDK's queries work; Alembic creates it instead of
the SDK's ``create_tables``. Timestamps are naive UTC, as the SDK writes them.
A test compares these tables with the SDK's own metadata.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _bot_columns() -> list[sa.Column[object]]:
    """Columns shared by slack_installations and slack_bots, in the SDK's order."""
    return [
        sa.Column("bot_token", sa.String(200)),
        sa.Column("bot_id", sa.String(32)),
        sa.Column("bot_user_id", sa.String(32)),
        sa.Column("bot_scopes", sa.String(1000)),
        sa.Column("bot_refresh_token", sa.String(200)),
        sa.Column("bot_token_expires_at", sa.DateTime()),
    ]


def upgrade() -> None:
    op.create_table(
        "slack_installations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("client_id", sa.String(32), nullable=False),
        sa.Column("app_id", sa.String(32), nullable=False),
        sa.Column("enterprise_id", sa.String(32)),
        sa.Column("enterprise_name", sa.String(200)),
        sa.Column("enterprise_url", sa.String(200)),
        sa.Column("team_id", sa.String(32)),
        sa.Column("team_name", sa.String(200)),
        *_bot_columns(),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("user_token", sa.String(200)),
        sa.Column("user_scopes", sa.String(1000)),
        sa.Column("user_refresh_token", sa.String(200)),
        sa.Column("user_token_expires_at", sa.DateTime()),
        sa.Column("incoming_webhook_url", sa.String(200)),
        sa.Column("incoming_webhook_channel", sa.String(200)),
        sa.Column("incoming_webhook_channel_id", sa.String(200)),
        sa.Column("incoming_webhook_configuration_url", sa.String(200)),
        sa.Column("is_enterprise_install", sa.Boolean(), nullable=False),
        sa.Column("token_type", sa.String(32)),
        sa.Column("installed_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_slack_installations"),
    )
    op.create_index(
        "slack_installations_idx",
        "slack_installations",
        ["client_id", "enterprise_id", "team_id", "user_id", "installed_at"],
    )
    op.create_table(
        "slack_bots",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("client_id", sa.String(32), nullable=False),
        sa.Column("app_id", sa.String(32), nullable=False),
        sa.Column("enterprise_id", sa.String(32)),
        sa.Column("enterprise_name", sa.String(200)),
        sa.Column("team_id", sa.String(32)),
        sa.Column("team_name", sa.String(200)),
        *_bot_columns(),
        sa.Column("is_enterprise_install", sa.Boolean(), nullable=False),
        sa.Column("installed_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_slack_bots"),
    )
    op.create_index(
        "slack_bots_idx",
        "slack_bots",
        ["client_id", "enterprise_id", "team_id", "installed_at"],
    )
    op.create_table(
        "slack_oauth_states",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("state", sa.String(200), nullable=False),
        sa.Column("expire_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_slack_oauth_states"),
    )


def downgrade() -> None:
    op.drop_table("slack_oauth_states")
    op.drop_index("slack_bots_idx", table_name="slack_bots")
    op.drop_table("slack_bots")
    op.drop_index("slack_installations_idx", table_name="slack_installations")
    op.drop_table("slack_installations")
