"""The command grammar every platform shares (``/research help`` shows it to users).

``/research <topic> [depth=N] [strategy=iterative|graph] [sources=web|internal|all]``,
``/research help``,
``/research status``, ``/research cancel [run-id]``. Adapters strip their own
syntax (mentions, links) first and hand the remaining text to :func:`parse_command`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.chat import schedule
from core.chat.commands import (
    CommandError,
    validate_depth,
    validate_sources,
    validate_strategy,
    validate_topic,
)
from core.engine.registry import STRATEGIES
from core.models import DEFAULT_STRATEGY
from core.text import clean_text
from core.values import SourceChoice
from core.words.wording import Language

RESEARCH_OPTIONS = ("depth", "strategy", "sources")
SCHEDULE_OPTIONS = ("cron", "depth", "tz", "strategy", "sources")
_OPTION = re.compile(r"(?<!\S)([a-z][a-z_]+)=(\"[^\"]*\"|“[^”]*”|\S*)")
#: A request that names the command (``/research ...``): in the thread of a running research,
#: only such a request (or a control word) is a command; any other reply steers it.
EXPLICIT = re.compile(r"^\s*/research\b", re.IGNORECASE)


@dataclass(frozen=True)
class ResearchCommand:
    topic: str
    depth: int
    strategy: str
    #: ``sources=``: the web, the internal sources the channel may use, or both (the default).
    sources: SourceChoice = SourceChoice.ALL


@dataclass(frozen=True)
class HelpCommand:
    pass


@dataclass(frozen=True)
class StatusCommand:
    pass


@dataclass(frozen=True)
class CancelCommand:
    run_id: str | None = None


@dataclass(frozen=True)
class UsageCommand:
    """``/research usage`` (``用量``): the requester's runs, tokens and cost today and this
    month, and the channel's this month."""


@dataclass(frozen=True)
class StopCommand:
    """``/research stop [run-id]`` (or ``write now``, ``停止``, ``现在写``): stop searching and
    write the report from what was found."""

    run_id: str | None = None


#: Whole messages that mean "stop and write now" (lower-cased, end punctuation dropped).
STOP_PHRASES = frozenset(
    {
        "stop",
        "write now",
        "stop and write",
        "stop and write now",
        "停止",
        "停",
        "停下",
        "现在写",
        "立即撰写",
        "停止并撰写",
        "立即停止并撰写",
    }
)
#: What a run id (prefix) looks like: ``stop <id>``; ``stop smoking`` is a topic.
_RUN_ID = re.compile(r"[0-9a-f]{4,32}")
_END_PUNCTUATION = ".!。！?？,，"


@dataclass(frozen=True)
class ScheduleCommand:
    """``/research schedule <topic> cron="…" [depth=N] [tz=Area/City] [strategy=S]
    [sources=web|internal|all]``."""

    topic: str
    cron: str
    timezone: str
    depth: int
    strategy: str
    sources: SourceChoice = SourceChoice.ALL


@dataclass(frozen=True)
class DigestsCommand:
    """``/research digests``: this channel's schedules."""


@dataclass(frozen=True)
class UnscheduleCommand:
    digest_id: str


Command = (
    ResearchCommand
    | HelpCommand
    | StatusCommand
    | CancelCommand
    | StopCommand
    | UsageCommand
    | ScheduleCommand
    | DigestsCommand
    | UnscheduleCommand
)


def strategy_lines(language: Language) -> str:
    """One help line for each registered strategy other than the default, ending in a newline."""
    lines = []
    for name, entry in STRATEGIES.items():
        if name == DEFAULT_STRATEGY:
            continue
        if language == "zh":
            lines.append(f"• 加上 `strategy={name}`：{entry.help['zh']}\n")
        else:
            lines.append(f"• Add `strategy={name}` to {entry.help['en']}\n")
    return "".join(lines)


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
            f"{strategy_lines(language)}"
            "• `sources=web|internal|all`：只搜公开网络、只搜本频道可用的团队内部来源，"
            "或两者都搜（默认 `all`；定时摘要同样适用）\n"
            "• 在群里 @我 并写上主题，或直接私聊我；"
            "在研究话题里再次 @我，会基于已有结果继续深入。\n"
            "• `/research status`（或 `状态`）：你正在进行和最近的研究\n"
            "• `/research stop`（或在话题里回复 `停止`、`现在写`）：停止搜索，"
            "用已找到的内容立即撰写报告\n"
            "• `/research cancel`（或 `取消`）：取消你正在进行的研究，不写报告"
            "（在话题里：该话题的研究）\n"
            "• `/research usage`（或 `用量`）：你今天和本月的研究次数、token 与费用，"
            "以及本频道本月的\n"
            '• `/research schedule <主题> cron="0 9 * * MON" [tz=Asia/Shanghai]`：定时摘要；'
            "`/research digests` 列出本频道的定时摘要，`/research unschedule <id>` 删除\n"
            "• `/research help`（或 `帮助`）：本说明"
        )
    return (
        f"{name} researches a topic on the web and replies with a cited report.\n"
        f"• `/research <topic> [depth=N]`: N search rounds, 1 to {max_depth} "
        f"(default {default_depth}), e.g. `/research solid-state batteries depth=3`\n"
        f"{strategy_lines(language)}"
        "• `sources=web|internal|all`: the public web only, only the team's internal "
        "sources this channel may use, or both (default `all`; schedules take it too)\n"
        "• Mention me with a topic in a channel or thread, or write to me directly; "
        "mention me again in a research thread to dig deeper from what is known.\n"
        "• `/research status`: your running and recent research\n"
        "• `/research stop` (or `stop`, `write now` in its thread): stop searching and write "
        "the report now from what was found\n"
        "• `/research cancel`: cancel your running research without a report (in a thread: "
        "that thread's)\n"
        "• `/research usage`: your researches, tokens and cost today and this month, and "
        "this channel's this month\n"
        '• `/research schedule <topic> cron="0 9 * * MON" [tz=Asia/Shanghai]`: a recurring '
        "digest in this channel; `/research digests` lists them, "
        "`/research unschedule <id>` removes one\n"
        "• `/research help`: this message"
    )


def request_words(text: str) -> str:
    """The words of a request without ``/research`` and ``name=value`` options: what its
    language is judged on (``/research 帮助`` is a Chinese request)."""
    return _OPTION.sub(" ", EXPLICIT.sub("", text or "", count=1))


def parse_command(
    text: str,
    *,
    default_depth: int,
    max_depth: int,
    default_strategy: str = DEFAULT_STRATEGY,
) -> Command:
    """Parse command text; raises :class:`CommandError` saying what is wrong and allowed."""
    body = EXPLICIT.sub("", clean_text(text or ""), count=1).strip()
    words = body.split()
    first = words[0].lower() if words else ""
    if first in ("help", "-h", "--help", "?", "帮助", "？") and len(words) == 1:
        return HelpCommand()
    if first in ("status", "状态") and len(words) == 1:
        return StatusCommand()
    if first in ("usage", "用量") and len(words) == 1:
        return UsageCommand()
    if first in ("cancel", "取消") and len(words) <= 2:
        return CancelCommand(words[1] if len(words) == 2 else None)
    if " ".join(words).lower().rstrip(_END_PUNCTUATION) in STOP_PHRASES:
        return StopCommand()
    if first in ("stop", "停止") and len(words) == 2 and _RUN_ID.fullmatch(words[1].lower()):
        return StopCommand(words[1].lower())
    if first in ("digests", "schedules") and len(words) == 1:
        return DigestsCommand()
    if first == "unschedule":
        if len(words) != 2:
            raise CommandError(
                "Say which schedule to remove: `/research unschedule <id>` (the ids are in "
                "`/research digests`).",
                "请说明要删除哪个定时摘要：`/research unschedule <id>`"
                "（id 见 `/research digests`）。",
            )
        return UnscheduleCommand(words[1])
    if first == "schedule":
        return _schedule(
            body[len(words[0]) :],
            default_depth=default_depth,
            max_depth=max_depth,
            default_strategy=default_strategy,
        )

    options = _options(body, RESEARCH_OPTIONS)
    topic = " ".join(_OPTION.sub(" ", body).split())
    _refuse_empty(options, max_depth)
    return ResearchCommand(
        topic=validate_topic(topic),
        depth=validate_depth(options.get("depth"), default=default_depth, maximum=max_depth),
        strategy=validate_strategy(options.get("strategy"), default_strategy),
        sources=validate_sources(options.get("sources")),
    )


def _refuse_empty(options: dict[str, str], max_depth: int) -> None:
    """``depth=`` and ``sources=`` given without a value: refused (not silently the
    default), saying what is allowed."""
    if "depth" in options and not options["depth"]:
        raise CommandError(
            f"depth must be a whole number from 1 to {max_depth}.",
            f"depth 必须是 1 到 {max_depth} 之间的整数。",
        )
    if "sources" in options and not options["sources"]:
        raise CommandError(
            "sources must be web, internal or all.", "sources 必须是 web、internal 或 all。"
        )


def _options(body: str, allowed_names: tuple[str, ...]) -> dict[str, str]:
    options: dict[str, str] = {}
    for match in _OPTION.finditer(body):
        name, value = match.group(1), match.group(2).strip('"“”')
        if name not in allowed_names:
            allowed = ", ".join(f"`{o}=`" for o in allowed_names)
            raise CommandError(
                f"Unknown option `{name}=`; allowed options: {allowed}.",
                f"未知的选项 `{name}=`；可用的选项：{allowed}。",
            )
        if name in options:
            raise CommandError(
                f"The option `{name}=` is given twice.", f"选项 `{name}=` 出现了两次。"
            )
        options[name] = value
    return options


def _schedule(
    body: str, *, default_depth: int, max_depth: int, default_strategy: str
) -> ScheduleCommand:
    """``schedule <topic> cron="…" …``: cron and timezone checked here (the shortest gap
    between firings is checked where the clock and the settings are). Every refusal shows a
    valid example."""
    try:
        return _parse_schedule(
            body,
            default_depth=default_depth,
            max_depth=max_depth,
            default_strategy=default_strategy,
        )
    except CommandError as exc:
        if schedule.EXAMPLE in str(exc):
            raise
        raise CommandError(
            f"{exc} A valid schedule: {schedule.EXAMPLE}",
            f"{exc.text('zh')} 有效的写法：{schedule.EXAMPLE}",
        ) from None


def _parse_schedule(
    body: str, *, default_depth: int, max_depth: int, default_strategy: str
) -> ScheduleCommand:
    options = _options(body, SCHEDULE_OPTIONS)
    topic = " ".join(_OPTION.sub(" ", body).split()).strip("\"“”'")
    tz = schedule.timezone(options.get("tz"))
    cron = " ".join(options.get("cron", "").split())
    schedule.trigger(cron, tz)
    _refuse_empty(options, max_depth)
    return ScheduleCommand(
        topic=validate_topic(topic),
        cron=cron,
        timezone=tz.key,
        depth=validate_depth(options.get("depth"), default=default_depth, maximum=max_depth),
        strategy=validate_strategy(options.get("strategy"), default_strategy),
        sources=validate_sources(options.get("sources")),
    )
