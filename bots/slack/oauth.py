"""Who the bot is in a workspace: one token, or multi-workspace installs via OAuth.

Bolt's own authorizers call ``auth.test`` on Slack for every (multi-workspace) request
before the listener runs, which would put a Web API round trip in front of every ack.
These resolve the bot without calling Slack: the single-workspace identity is learned
once at start-up, installed workspaces are read from slack_sdk's SQLAlchemy installation
store on our database (tables created by migration 0003, never by ``create_tables``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.oauth.installation_store.sqlalchemy import AsyncSQLAlchemyInstallationStore
from slack_sdk.oauth.state_store.sqlalchemy import AsyncSQLAlchemyOAuthStateStore
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncEngine

from bots.slack.messenger import make_web_client
from bots.slack.settings import SlackSettings
from core.operations.job import Undeliverable

log = logging.getLogger(__name__)

#: Bot scopes requested at install time (keep in step with deploy/slack/manifest*.yaml).
BOT_SCOPES = (
    "app_mentions:read",
    "assistant:write",
    "canvases:write",
    "channels:history",
    "chat:write",
    "chat:write.public",
    "commands",
    "files:read",
    "files:write",
    "groups:history",
    "im:history",
)
STATE_EXPIRATION_SECONDS = 600


class NotInstalled(Undeliverable, LookupError):
    """No installation (bot token) is stored for this workspace: its runs cannot be delivered."""


def installation_store(
    settings: SlackSettings, engine: AsyncEngine
) -> AsyncSQLAlchemyInstallationStore:
    return AsyncSQLAlchemyInstallationStore(client_id=settings.client_id or "", engine=engine)


def oauth_settings(
    settings: SlackSettings, store: AsyncSQLAlchemyInstallationStore, engine: AsyncEngine
) -> AsyncOAuthSettings:
    """``/slack/install`` and ``/slack/oauth_redirect`` with our stores.

    The token exchange (``oauth.v2.access``) and its ``auth.test`` use the AsyncApp's
    client, which points at ``SLACK_API_URL`` (Bolt hands its client to the OAuth flow).
    ``SLACK_REDIRECT_URI`` is read by Bolt from the environment when set.
    """
    return AsyncOAuthSettings(
        client_id=settings.client_id,
        client_secret=settings.client_secret,
        scopes=list(BOT_SCOPES),
        user_scopes=[],
        installation_store=store,
        installation_store_bot_only=True,
        state_store=AsyncSQLAlchemyOAuthStateStore(
            expiration_seconds=STATE_EXPIRATION_SECONDS, engine=engine
        ),
        state_expiration_seconds=STATE_EXPIRATION_SECONDS,
    )


class InstallationClients:
    """``bots.slack.messenger.SlackClients`` for OAuth installs: the team's stored bot token."""

    def __init__(self, store: AsyncSQLAlchemyInstallationStore, api_url: str) -> None:
        self._store = store
        self._api_url = api_url

    async def client_for(self, team_id: str) -> AsyncWebClient:
        bot = await self._store.async_find_bot(enterprise_id=None, team_id=team_id)
        if bot is None or not bot.bot_token:
            raise NotInstalled(f"Fathom is not installed in Slack workspace {team_id}")
        return make_web_client(bot.bot_token, self._api_url)


class InstallationAuthorize(AsyncAuthorize):
    """Bolt ``authorize`` from the installation store: no ``auth.test`` per request."""

    def __init__(self, store: AsyncSQLAlchemyInstallationStore) -> None:
        self._store = store

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        **_actor: Any,
    ) -> AuthorizeResult | None:
        bot = await self._store.async_find_bot(
            enterprise_id=enterprise_id,
            team_id=team_id,
            is_enterprise_install=context.is_enterprise_install,
        )
        if bot is None:
            log.warning("request from workspace %s, where Fathom is not installed", team_id)
            return None
        return AuthorizeResult(
            enterprise_id=bot.enterprise_id,
            team_id=bot.team_id,
            bot_user_id=bot.bot_user_id,
            bot_id=bot.bot_id,
            bot_token=bot.bot_token,
            bot_scopes=bot.bot_scopes,
            user_id=user_id,
        )


class TokenAuthorize(AsyncAuthorize):
    """Bolt ``authorize`` for one workspace: ``auth.test`` once (at start-up), then cached."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self._identity: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

    async def identify(self) -> dict[str, Any]:
        """The bot's team and ids; call at start-up so no request waits for it."""
        async with self._lock:
            if self._identity is None:
                response = await self._client.auth_test()
                self._identity = dict(response.data) if isinstance(response.data, dict) else {}
            return self._identity

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        **_actor: Any,
    ) -> AuthorizeResult | None:
        me = await self.identify()
        return AuthorizeResult(
            enterprise_id=me.get("enterprise_id"),
            team_id=me.get("team_id"),
            bot_user_id=me.get("user_id"),
            bot_id=me.get("bot_id"),
            bot_token=self._client.token,
            user_id=user_id,
        )
