"""The command grammar shared by every platform (DESIGN.md, "Command grammar").

``/research <topic> [depth=N] [strategy=iterative|graph]``, ``/research help``,
``/research status``, ``/research cancel [run-id]``. Adapters strip their own
syntax (mentions, links) first and hand the remaining text to :func:`parse_command`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.commands import CommandError, validate_depth, validate_strategy, validate_topic
from core.models import Strategy
from core.text import clean_text
from core.wording import Language

RESEARCH_OPTIONS = ("depth", "strategy")
_OPTION = re.compile(r"(?<!\S)([a-z][a-z_]+)=(\"[^\"]*\"|“[^”]*”|\S*)")
_PREFIX = re.compile(r"^\s*/research\b", re.IGNORECASE)
_NOT_YET = ("schedule", "digests", "unschedule")


@dataclass(frozen=True)
class ResearchCommand:
    topic: str
    depth: int
    strategy: Strategy


@dataclass(frozen=True)
class HelpCommand:
    pass


@dataclass(frozen=True)
class StatusCommand:
    pass


@dataclass(frozen=True)
class CancelCommand:
    run_id: str | None = None


Command = ResearchCommand | HelpCommand | StatusCommand | CancelCommand


def help_text(
    *, default_depth: int, max_depth: int, language: Language = "en", bold: str = "*"
) -> str:
    """Help, shown for ``/research help`` and unknown input (``bold``: the platform's bold
    marker, ``*`` in Slack mrkdwn, ``**`` in Markdown)."""
    name = f"{bold}Fathom{bold}"
    if language == "zh":
        return (
            f"{name} 在网上研究一个主题，并回复一份带引用的报告。\n"
            f"• `/research <主题> [depth=N]`：N 轮搜索，1 到 {max_depth}（默认 {default_depth}），"
            "例如 `/research 固态电池 depth=3`\n"
            "• 在群里 @我 并写上主题，或直接私聊我；"
            "在研究话题里再次 @我，会基于已有结果继续深入。\n"
            "• `/research status`（或 `状态`）：你正在进行和最近的研究\n"
            "• `/research cancel`（或 `取消`）：停止你正在进行的研究（在话题里：该话题的研究）\n"
            "• `/research help`（或 `帮助`）：本说明"
        )
    return (
        f"{name} researches a topic on the web and replies with a cited report.\n"
        f"• `/research <topic> [depth=N]`: N search rounds, 1 to {max_depth} "
        f"(default {default_depth}), e.g. `/research solid-state batteries depth=3`\n"
        "• Mention me with a topic in a channel or thread, or write to me directly; "
        "mention me again in a research thread to dig deeper from what is known.\n"
        "• `/research status`: your running and recent research\n"
        "• `/research cancel`: stop your running research (in a thread: that thread's)\n"
        "• `/research help`: this message"
    )


def request_words(text: str) -> str:
    """The words of a request without ``/research`` and ``name=value`` options: what its
    language is judged on (``/research 帮助`` is a Chinese request)."""
    return _OPTION.sub(" ", _PREFIX.sub("", text or "", count=1))


def parse_command(text: str, *, default_depth: int, max_depth: int) -> Command:
    """Parse command text; raises :class:`CommandError` saying what is wrong and allowed."""
    body = _PREFIX.sub("", clean_text(text or ""), count=1).strip()
    words = body.split()
    first = words[0].lower() if words else ""
    if first in ("help", "-h", "--help", "?", "帮助", "？") and len(words) == 1:
        return HelpCommand()
    if first in ("status", "状态") and len(words) == 1:
        return StatusCommand()
    if first in ("cancel", "取消") and len(words) <= 2:
        return CancelCommand(words[1] if len(words) == 2 else None)
    if first in _NOT_YET:
        raise CommandError(
            f"`{first}` (scheduled digests) is not available yet.",
            f"`{first}`（定时摘要）暂不可用。",
        )

    options: dict[str, str] = {}
    for match in _OPTION.finditer(body):
        name, value = match.group(1), match.group(2).strip('"“”')
        if name not in RESEARCH_OPTIONS:
            allowed = ", ".join(f"`{o}=`" for o in RESEARCH_OPTIONS)
            raise CommandError(
                f"Unknown option `{name}=`; allowed options: {allowed}.",
                f"未知的选项 `{name}=`；可用的选项：{allowed}。",
            )
        if name in options:
            raise CommandError(
                f"The option `{name}=` is given twice.", f"选项 `{name}=` 出现了两次。"
            )
        options[name] = value
    topic = " ".join(_OPTION.sub(" ", body).split())
    if "depth" in options and not options["depth"]:
        raise CommandError(
            f"depth must be a whole number from 1 to {max_depth}.",
            f"depth 必须是 1 到 {max_depth} 之间的整数。",
        )
    return ResearchCommand(
        topic=validate_topic(topic),
        depth=validate_depth(options.get("depth"), default=default_depth, maximum=max_depth),
        strategy=validate_strategy(options.get("strategy")),
    )
