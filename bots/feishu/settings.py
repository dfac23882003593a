"""Feishu/Lark's settings: the app's credentials, its domain, the ingress mode, edit pace,
how long files sent on their own wait for a request, whether plain group replies reach
the app (``FATHOM_FEISHU_GROUP_MESSAGES``; unset: asked of Feishu, ``bots.feishu.scopes``),
and where long reports' cloud documents go and who may read them
(``FATHOM_FEISHU_DOC_FOLDER``, ``FATHOM_FEISHU_DOC_SHARING``; ``bots.feishu.docs``)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from bots.chat.settings import PlatformSettings
from core.config import ConfigError, env, lowered


class FeishuSettings(PlatformSettings):
    app_id: str | None = Field(default=None, validation_alias=env("FEISHU_APP_ID"))
    app_secret: str | None = Field(default=None, validation_alias=env("FEISHU_APP_SECRET"))
    verification_token: str | None = Field(
        default=None, validation_alias=env("FEISHU_VERIFICATION_TOKEN")
    )
    encrypt_key: str | None = Field(default=None, validation_alias=env("FEISHU_ENCRYPT_KEY"))
    domain: str = Field(default="https://open.feishu.cn", validation_alias=env("FEISHU_DOMAIN"))
    mode: Literal["ws", "webhook"] = Field(default="ws", validation_alias=env("FEISHU_MODE"))
    edit_interval: float = Field(
        default=1.0, ge=0, le=60, validation_alias=env("FATHOM_FEISHU_EDIT_INTERVAL")
    )
    #: Seconds a file sent on its own waits for the next request in its thread (0: files
    #: sent on their own are not read).
    file_window: float = Field(
        default=600.0, ge=0, le=86_400, validation_alias=env("FATHOM_FEISHU_FILE_WINDOW")
    )
    #: Whether Feishu delivers group messages that do not mention the bot (the app holds
    #: ``im:message.group_msg``); None: Fathom asks Feishu's scope-status API.
    group_messages: bool | None = Field(
        default=None, validation_alias=env("FATHOM_FEISHU_GROUP_MESSAGES")
    )

    #: The folder (its token) where long reports' documents are made; empty: the app's own
    #: root space.
    doc_folder: str = Field(default="", validation_alias=env("FATHOM_FEISHU_DOC_FOLDER"))
    #: Who may read a report's document: the chat's members (``chat``), or also anyone in
    #: the tenant who has its link (``tenant``).
    doc_sharing: Literal["chat", "tenant"] = Field(
        default="chat", validation_alias=env("FATHOM_FEISHU_DOC_SHARING")
    )

    @field_validator("domain", mode="before")
    @classmethod
    def _domain(cls, value: object) -> object:
        """``feishu`` and ``lark`` name the two public endpoints; otherwise an origin
        (``https://host[:port]``, no path: the SDK refuses anything else at start-up)."""
        if isinstance(value, str):
            named = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}
            value = named.get(value.strip().lower(), value.strip()).rstrip("/")
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    "not feishu, lark or an http(s) origin like https://open.feishu.cn"
                )
            if parts.path or parts.query or parts.fragment:
                raise ValueError(
                    "an origin without a path (scheme and host only), e.g. https://open.feishu.cn"
                )
        return value

    @field_validator("mode", "doc_sharing", mode="before")
    @classmethod
    def _mode(cls, value: object) -> object:
        return lowered(value)

    @field_validator("doc_folder", mode="before")
    @classmethod
    def _doc_folder(cls, value: object) -> object:
        """A folder token (letters and digits, as Feishu makes them): nothing that could
        change the request it goes into."""
        if isinstance(value, str):
            value = value.strip()
            if value and not value.isalnum():
                raise ValueError("a folder token (letters and digits), or empty for the root")
        return value

    @field_validator("group_messages", mode="before")
    @classmethod
    def _group_messages(cls, value: object) -> object:
        """Empty or ``auto``: not said (asked of Feishu)."""
        if isinstance(value, str) and value.strip().lower() in ("", "auto"):
            return None
        return value

    @property
    def enabled(self) -> bool:
        return bool(self.app_id or self.app_secret)

    def check(self) -> None:
        if not self.app_id or not self.app_secret:
            raise ConfigError(
                "FEISHU_APP_ID and FEISHU_APP_SECRET must both be set (the app's credentials, "
                "from the developer console)"
            )
        if self.mode == "webhook" and not (self.verification_token and self.encrypt_key):
            raise ConfigError(
                "FEISHU_MODE=webhook needs FEISHU_VERIFICATION_TOKEN and FEISHU_ENCRYPT_KEY "
                "(Events and callbacks > Encryption strategy) to verify Feishu's requests"
            )
