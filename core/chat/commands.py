"""Validation of research requests, shared by every adapter and the CLI.

Errors say what is wrong and what is allowed, so adapters can show them verbatim.
"""

from __future__ import annotations

from core.engine.registry import STRATEGIES
from core.models import DEFAULT_STRATEGY
from core.text import clean_text, has_visible
from core.values import SourceChoice
from core.words.wording import Language

MAX_TOPIC_CHARS = 2000
#: The longest platform identifier (workspace, channel, user, thread) accepted. Real ones are
#: far shorter (Slack's about 11, Feishu's and DingTalk's under 70); with it, every thread key
#: and requester fits its column.
MAX_ID_CHARS = 100


class CommandError(ValueError):
    """The request is invalid; the message is meant for the person who made it.

    ``str(error)`` is English; ``error.text("zh")`` the Chinese wording when there is one."""

    def __init__(self, message: str, zh: str | None = None) -> None:
        super().__init__(message)
        self.zh = zh

    def text(self, language: Language) -> str:
        return self.zh if language == "zh" and self.zh else str(self)


def validate_topic(topic: str | None) -> str:
    """The topic with control and invisible characters removed and whitespace collapsed;
    refused when nothing visible is left or it is too long."""
    text = " ".join(clean_text(topic or "").split())
    if not has_visible(text):
        raise CommandError(
            "The topic is empty: say what to research, e.g. `AI chips depth=3`.",
            "主题为空：请说明要研究什么，例如 `AI 芯片 depth=3`。",
        )
    if len(text) > MAX_TOPIC_CHARS:
        raise CommandError(
            f"The topic is {len(text):,} characters long; at most {MAX_TOPIC_CHARS:,} are allowed.",
            f"主题长 {len(text):,} 个字符；最多允许 {MAX_TOPIC_CHARS:,} 个。",
        )
    return text


def validate_depth(value: int | str | None, *, default: int, maximum: int) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        depth = int(str(value).strip())
    except ValueError:
        raise CommandError(
            f"depth must be a whole number from 1 to {maximum}, not {str(value)!r}.",
            f"depth 必须是 1 到 {maximum} 之间的整数，不能是 {str(value)!r}。",
        ) from None
    if not 1 <= depth <= maximum:
        raise CommandError(
            f"depth must be from 1 to {maximum}; {depth} is not allowed.",
            f"depth 必须在 1 到 {maximum} 之间；不允许 {depth}。",
        )
    return depth


def validate_strategy(value: str | None, default: str = DEFAULT_STRATEGY) -> str:
    """The registered strategy named by ``value`` (``default`` when none is given)."""
    if value is None or not value.strip():
        return default
    name = value.strip().lower()
    if name not in STRATEGIES:
        allowed = ", ".join(STRATEGIES)
        raise CommandError(
            f"Unknown strategy {name!r}; available: {allowed}.",
            f"未知的策略 {name!r}；可用：{allowed}。",
        )
    return name


def validate_sources(
    value: str | SourceChoice | None, default: SourceChoice = SourceChoice.ALL
) -> SourceChoice:
    """Which sources a research searches (``sources=``, ``--sources``): ``web``, ``internal``
    (the team's MCP servers the channel may use) or ``all`` (``default`` when none is given).
    Whether the channel may use any internal source is checked where the request is taken."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    name = str(value).strip().lower()
    try:
        return SourceChoice(name)
    except ValueError:
        allowed = ", ".join(c.value for c in SourceChoice)
        raise CommandError(
            f"Unknown sources {name!r}; allowed: {allowed} (web: the public web only, "
            "internal: the team's own sources only, all: both).",
            f"未知的 sources {name!r}；可用：{allowed}（web：只搜公开网络，"
            "internal：只搜团队内部来源，all：两者都搜）。",
        ) from None


def validate_ids(**ids: str | None) -> None:
    """Refuse a request whose platform identifiers (``channel="C1"``, ...) are missing, too long
    or not printable: no run could be delivered for it."""
    for name, value in ids.items():
        if not value or not value.strip():
            raise CommandError(
                f"This request came without a {name}, so I cannot answer it.",
                f"这个请求缺少 {name}，无法回复。",
            )
        if len(value) > MAX_ID_CHARS or not value.isprintable():
            raise invalid_id(name)


def invalid_id(name: str) -> CommandError:
    """The answer to a request whose ``name`` (``channel``, ...) is not a valid id."""
    return CommandError(
        f"This request's {name} is not valid, so I cannot answer it.",
        f"这个请求的 {name} 无效，无法回复。",
    )
