"""The chat layer's settings and the policy it applies to every platform's requests.

:class:`ChatSettings` reads what only the chat layer uses (who may ask, how many runs a user
may have at once, what a platform route accepts); :class:`ChatPolicy` is the small, frozen
view of those plus core's depth and strategy defaults that ``ChatCommands`` needs, built once
by the composition root (``bots.composition``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, field_validator

from core.config import CommaList, EnvSettings, env, load, split_commas
from core.settings import Settings


class ChatSettings(EnvSettings):
    # Access and fairness
    allowed_users: CommaList = Field(
        default_factory=list, validation_alias=env("FATHOM_ALLOWED_USERS")
    )
    allowed_channels: CommaList = Field(
        default_factory=list, validation_alias=env("FATHOM_ALLOWED_CHANNELS")
    )
    admins: CommaList = Field(default_factory=list, validation_alias=env("FATHOM_ADMINS"))
    user_concurrency: int = Field(
        default=2, ge=1, le=100, validation_alias=env("FATHOM_USER_CONCURRENCY")
    )
    #: A report of at least this many messages becomes one document (a Slack canvas, a
    #: Feishu cloud document) and a summary in the thread; 0: never (``bots.chat.documents``).
    report_document_parts: int = Field(
        default=2, ge=0, le=1000, validation_alias=env("FATHOM_REPORT_DOCUMENT_PARTS")
    )

    # HTTP routes
    max_body_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        validation_alias=env("FATHOM_MAX_BODY_BYTES"),
    )
    #: Seconds a platform route waits for a request's whole body (then 408).
    body_timeout: float = Field(
        default=10.0, gt=0, le=300, validation_alias=env("FATHOM_BODY_TIMEOUT")
    )
    #: Seconds ``fathom serve`` waits for a request's head (request line and headers) from
    #: the connection's opening: then 408 and closed, or closed when nothing came
    #: (``bots.header_deadline``).
    header_timeout: float = Field(
        default=5.0, gt=0, le=300, validation_alias=env("FATHOM_HEADER_TIMEOUT")
    )

    @field_validator("allowed_users", "allowed_channels", "admins", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        return split_commas(value)

    @property
    def route_limits(self) -> RouteLimits:
        return RouteLimits(self.max_body_bytes, self.body_timeout)


@dataclass(frozen=True)
class RouteLimits:
    """What a platform's HTTP route accepts: body size, and how long it waits for it."""

    max_body_bytes: int
    body_timeout: float


@dataclass(frozen=True)
class ChatPolicy:
    """What the chat layer decides with: depth and strategy defaults, access, fairness."""

    default_depth: int
    max_depth: int
    strategy: str
    allowed_users: tuple[str, ...] = ()
    allowed_channels: tuple[str, ...] = ()
    admins: tuple[str, ...] = ()
    user_concurrency: int = 2
    #: Files attached to a request: the largest read, and how many one request may carry.
    attachment_max_bytes: int = 20 * 1024 * 1024
    attachments_per_request: int = 5
    #: A report of at least this many messages becomes a document where the platform makes
    #: them (``FATHOM_REPORT_DOCUMENT_PARTS``); 0: never.
    document_parts: int = 2

    @classmethod
    def of(cls, settings: Settings, chat: ChatSettings) -> ChatPolicy:
        return cls(
            default_depth=settings.default_depth,
            max_depth=settings.max_depth,
            strategy=settings.strategy,
            allowed_users=tuple(chat.allowed_users),
            allowed_channels=tuple(chat.allowed_channels),
            admins=tuple(chat.admins),
            user_concurrency=chat.user_concurrency,
            attachment_max_bytes=settings.attachment_max_bytes,
            attachments_per_request=settings.attachments_per_request,
            document_parts=chat.report_document_parts,
        )

    @classmethod
    def load(cls, **overrides: object) -> ChatPolicy:
        """The policy read from the environment (``overrides`` by variable name), as the
        composition root builds it; ``ConfigError`` with one line."""
        return cls.of(load(Settings, **overrides), load(ChatSettings, **overrides))

    def is_admin(self, user: str | None) -> bool:
        return bool(user) and user in self.admins

    def is_allowed(self, user: str | None, channel: str | None) -> bool:
        """Access control; an empty allow-list admits everyone. Admins are always allowed."""
        if self.is_admin(user):
            return True
        if self.allowed_users and (user is None or user not in self.allowed_users):
            return False
        return not (
            self.allowed_channels and (channel is None or channel not in self.allowed_channels)
        )


class PlatformSettings(EnvSettings):
    """The base of a chat platform's settings (each platform's package has its subclass)."""

    @property
    def enabled(self) -> bool:
        """Whether the operator configured this platform (some credential of it is set)."""
        raise NotImplementedError

    def check(self) -> None:
        """``ConfigError`` (one clear line) when the platform is half-configured."""
