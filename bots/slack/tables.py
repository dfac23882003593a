"""Slack's own tables: those of ``slack_sdk``'s SQLAlchemy OAuth stores (multi-workspace
installs), created by migration 0003 and used through the SDK's stores, never through an ORM.

They are declared here, on a metadata of their own (:attr:`SlackPlatform.metadata
<bots.slack.platform.SlackPlatform.metadata>`), so schema comparisons know them; a test
checks that they equal the SDK's own ``build_*_table`` definitions.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, Column, DateTime, Index, Integer, MetaData, String, Table

#: Slack's tables (the contract's ``ChatPlatform.metadata``).
metadata = MetaData()


def _slack_table(name: str, *columns: Column[Any], index: tuple[str, ...] = ()) -> Table:
    table = Table(
        name,
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        *columns,
    )
    if index:
        Index(f"{name}_idx", *(table.c[c] for c in index))
    return table


def _slack_bot_columns(*, installation: bool) -> list[Column[Any]]:
    head = [
        Column("client_id", String(32), nullable=False),
        Column("app_id", String(32), nullable=False),
        Column("enterprise_id", String(32)),
        Column("enterprise_name", String(200)),
    ]
    if installation:
        head.append(Column("enterprise_url", String(200)))
    return [
        *head,
        Column("team_id", String(32)),
        Column("team_name", String(200)),
        Column("bot_token", String(200)),
        Column("bot_id", String(32)),
        Column("bot_user_id", String(32)),
        Column("bot_scopes", String(1000)),
        Column("bot_refresh_token", String(200)),
        Column("bot_token_expires_at", DateTime),
    ]


slack_installations = _slack_table(
    "slack_installations",
    *_slack_bot_columns(installation=True),
    Column("user_id", String(32), nullable=False),
    Column("user_token", String(200)),
    Column("user_scopes", String(1000)),
    Column("user_refresh_token", String(200)),
    Column("user_token_expires_at", DateTime),
    Column("incoming_webhook_url", String(200)),
    Column("incoming_webhook_channel", String(200)),
    Column("incoming_webhook_channel_id", String(200)),
    Column("incoming_webhook_configuration_url", String(200)),
    Column("is_enterprise_install", Boolean, nullable=False),
    Column("token_type", String(32)),
    Column("installed_at", DateTime, nullable=False),
    index=("client_id", "enterprise_id", "team_id", "user_id", "installed_at"),
)
slack_bots = _slack_table(
    "slack_bots",
    *_slack_bot_columns(installation=False),
    Column("is_enterprise_install", Boolean, nullable=False),
    Column("installed_at", DateTime, nullable=False),
    index=("client_id", "enterprise_id", "team_id", "installed_at"),
)
slack_oauth_states = _slack_table(
    "slack_oauth_states",
    Column("state", String(200), nullable=False),
    Column("expire_at", DateTime, nullable=False),
)
