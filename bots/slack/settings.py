"""Slack's settings: credentials, mode (HTTP or Socket Mode), OAuth install, edit pace."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator

from bots.chat.settings import PlatformSettings
from core.config import ConfigError, env

#: Slack shows at most four suggested prompts; a prompt's title is a short label.
MAX_SUGGESTED_PROMPTS = 4
PROMPT_TITLE_CHARS = 75


class SuggestedPrompt(BaseModel):
    """A prompt of the assistant pane: its label, and the message sent when it is chosen."""

    title: str = Field(min_length=1, max_length=PROMPT_TITLE_CHARS)
    message: str = Field(min_length=1, max_length=2_000)


class SlackSettings(PlatformSettings):
    bot_token: str | None = Field(default=None, validation_alias=env("SLACK_BOT_TOKEN"))
    signing_secret: str | None = Field(default=None, validation_alias=env("SLACK_SIGNING_SECRET"))
    app_token: str | None = Field(default=None, validation_alias=env("SLACK_APP_TOKEN"))
    api_url: str = Field(default="https://slack.com/api/", validation_alias=env("SLACK_API_URL"))
    client_id: str | None = Field(default=None, validation_alias=env("SLACK_CLIENT_ID"))
    client_secret: str | None = Field(default=None, validation_alias=env("SLACK_CLIENT_SECRET"))
    edit_interval: float = Field(
        default=1.0, ge=0, le=60, validation_alias=env("FATHOM_SLACK_EDIT_INTERVAL")
    )
    #: The assistant pane's suggested prompts: a JSON list of messages or of
    #: ``{"title", "message"}`` (at most four); unset: defaults in the user's language.
    suggested_prompts: list[SuggestedPrompt] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SUGGESTED_PROMPTS,
        validation_alias=env("FATHOM_SLACK_SUGGESTED_PROMPTS"),
    )

    #: What the conversation's members may do with a long report's canvas: read it (the
    #: default), or also edit it. Never shared beyond the conversation.
    canvas_access: Literal["read", "write"] = Field(
        default="read", validation_alias=env("FATHOM_SLACK_CANVAS_ACCESS")
    )

    @field_validator("suggested_prompts", mode="before")
    @classmethod
    def _prompts_from_messages(cls, value: Any) -> Any:
        """A bare message is its own title (cut to a label's length)."""
        if not isinstance(value, list):
            return value
        return [
            {"title": " ".join(v.split())[:PROMPT_TITLE_CHARS], "message": v}
            if isinstance(v, str)
            else v
            for v in value
        ]

    @field_validator("api_url")
    @classmethod
    def _slash_terminated(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL; e.g. https://slack.com/api/")
        value = value.strip()
        return value if value.endswith("/") else value + "/"

    @property
    def enabled(self) -> bool:
        """Slack is on when a token (single workspace) or OAuth client is configured."""
        return bool(self.bot_token or (self.client_id and self.client_secret))

    @property
    def oauth(self) -> bool:
        """Multi-workspace: installed through OAuth, tokens kept per workspace."""
        return bool(self.client_id and self.client_secret)

    @property
    def socket_mode(self) -> bool:
        """Events come over Socket Mode (one replica holds the connection)."""
        return bool(self.app_token)

    def check(self) -> None:
        if self.app_token:
            if not self.app_token.startswith("xapp-"):
                raise ConfigError("SLACK_APP_TOKEN must be an app-level token starting with xapp-")
        elif not self.signing_secret:
            raise ConfigError(
                "SLACK_SIGNING_SECRET is not set: HTTP mode needs it to verify Slack's requests "
                "(or set SLACK_APP_TOKEN for Socket Mode)"
            )
        if not self.oauth and not self.bot_token:
            raise ConfigError(
                "SLACK_BOT_TOKEN is not set: set it (single workspace) or SLACK_CLIENT_ID and "
                "SLACK_CLIENT_SECRET (multi-workspace OAuth install)"
            )
        if self.client_id and not self.client_secret:
            raise ConfigError("SLACK_CLIENT_SECRET is not set: SLACK_CLIENT_ID needs it")
