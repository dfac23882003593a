"""DingTalk's settings: the app's credentials and robot, the ingress mode, the progress card,
edit pace, and the follow-up window (DingTalk robots have no threads)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from bots.chat.settings import PlatformSettings
from core.config import ConfigError, env, lowered


class DingTalkSettings(PlatformSettings):
    client_id: str | None = Field(default=None, validation_alias=env("DINGTALK_CLIENT_ID"))
    client_secret: str | None = Field(default=None, validation_alias=env("DINGTALK_CLIENT_SECRET"))
    mode: Literal["stream", "http"] = Field(default="stream", validation_alias=env("DINGTALK_MODE"))
    api_url: str = Field(
        default="https://api.dingtalk.com", validation_alias=env("DINGTALK_API_URL")
    )
    robot_code: str | None = Field(default=None, validation_alias=env("DINGTALK_ROBOT_CODE"))
    card_template_id: str | None = Field(
        default=None, validation_alias=env("DINGTALK_CARD_TEMPLATE_ID")
    )
    #: HTTP mode: the public address of ``POST /dingtalk/card`` (card buttons call back there;
    #: unset, cards carry no buttons in HTTP mode).
    card_callback_url: str | None = Field(
        default=None, validation_alias=env("DINGTALK_CARD_CALLBACK_URL")
    )
    edit_interval: float = Field(
        default=1.0, ge=0, le=60, validation_alias=env("FATHOM_DINGTALK_EDIT_INTERVAL")
    )
    followup_window: float = Field(
        default=600.0, ge=0, le=86_400, validation_alias=env("FATHOM_DINGTALK_FOLLOWUP_WINDOW")
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: object) -> object:
        return lowered(value)

    @field_validator("api_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL; e.g. https://api.dingtalk.com")
        return value

    @field_validator("card_callback_url")
    @classmethod
    def _callback_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            raise ValueError(
                "not an http(s) URL without a query; e.g. https://fathom.example.com/dingtalk/card"
            )
        return value.strip()

    @property
    def enabled(self) -> bool:
        return bool(self.client_id or self.client_secret)

    @property
    def robot(self) -> str | None:
        """The robot messages are for: ``DINGTALK_ROBOT_CODE``, else the app's client id."""
        return self.robot_code or self.client_id

    def check(self) -> None:
        if not self.client_id or not self.client_secret:
            raise ConfigError(
                "DINGTALK_CLIENT_ID and DINGTALK_CLIENT_SECRET must both be set (the app's "
                "AppKey and AppSecret, from the developer console)"
            )
