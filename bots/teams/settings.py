"""Microsoft Teams' settings: the Azure Bot's app registration, where its tokens are checked
and obtained, and the edit pace of progress cards."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from bots.chat.settings import PlatformSettings
from core.config import ConfigError, env

#: The Bot Framework's OpenID metadata: the issuer and the signing keys of the tokens on the
#: activities Teams sends (the "Connector to bot" authentication).
BOT_FRAMEWORK_METADATA = "https://login.botframework.com/v1/.well-known/openidconfiguration"
#: Where a multi-tenant bot gets its tokens for the Bot Connector (a single-tenant bot uses
#: its tenant's endpoint instead, see :attr:`TeamsSettings.token_endpoint`).
LOGIN = "https://login.microsoftonline.com"
MULTI_TENANT = "botframework.com"


def _http_url(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    value = value.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


class TeamsSettings(PlatformSettings):
    #: The bot's Microsoft App ID (the Azure Bot's app registration); Teams is on when set.
    app_id: str | None = Field(default=None, validation_alias=env("TEAMS_APP_ID"))
    #: The app registration's client secret.
    app_password: str | None = Field(default=None, validation_alias=env("TEAMS_APP_PASSWORD"))
    #: The tenant of a single-tenant bot (empty: multi-tenant).
    app_tenant_id: str | None = Field(default=None, validation_alias=env("TEAMS_APP_TENANT_ID"))
    openid_metadata_url: str = Field(
        default=BOT_FRAMEWORK_METADATA, validation_alias=env("TEAMS_OPENID_METADATA_URL")
    )
    #: Default: the Microsoft identity platform's token endpoint of the bot's tenant.
    token_url: str | None = Field(default=None, validation_alias=env("TEAMS_TOKEN_URL"))
    edit_interval: float = Field(
        default=1.0, ge=0, le=60, validation_alias=env("FATHOM_TEAMS_EDIT_INTERVAL")
    )
    #: Seconds a file sent on its own in a personal chat waits for the next request there
    #: (0: files sent on their own are not read).
    file_window: float = Field(
        default=600.0, ge=0, le=86_400, validation_alias=env("FATHOM_TEAMS_FILE_WINDOW")
    )

    @field_validator("openid_metadata_url")
    @classmethod
    def _metadata_url(cls, value: str) -> str:
        checked = _http_url(value)
        if checked is None:
            raise ValueError("empty; the default is " + BOT_FRAMEWORK_METADATA)
        return checked

    @field_validator("token_url")
    @classmethod
    def _token_url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @field_validator("app_id", "app_password", "app_tenant_id")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @property
    def enabled(self) -> bool:
        return bool(self.app_id)

    @property
    def token_endpoint(self) -> str:
        """Where the bot's tokens for the Bot Connector come from."""
        if self.token_url:
            return self.token_url
        tenant = self.app_tenant_id or MULTI_TENANT
        return f"{LOGIN}/{tenant}/oauth2/v2.0/token"

    def check(self) -> None:
        if not self.app_id or not self.app_password:
            raise ConfigError(
                "TEAMS_APP_ID and TEAMS_APP_PASSWORD must both be set (the Azure Bot's "
                "Microsoft App ID and a client secret of its app registration)"
            )
