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


def help_text(*, default_depth: int, max_depth: int) -> str:
    """Platform-neutral Markdown help, shown for ``/research help`` and unknown input."""
    return (
        "*Fathom* researches a topic on the web and replies with a cited report.\n"
        f"• `/research <topic> [depth=N]`: N search rounds, 1 to {max_depth} "
        f"(default {default_depth}), e.g. `/research solid-state batteries depth=3`\n"
        "• Mention me with a topic in a channel or thread, or write to me directly; "
        "mention me again in a research thread to dig deeper from what is known.\n"
        "• `/research status`: your running and recent research\n"
        "• `/research cancel`: stop your running research (in a thread: that thread's)\n"
        "• `/research help`: this message"
    )


def parse_command(text: str, *, default_depth: int, max_depth: int) -> Command:
    """Parse command text; raises :class:`CommandError` saying what is wrong and allowed."""
    body = _PREFIX.sub("", clean_text(text or ""), count=1).strip()
    words = body.split()
    first = words[0].lower() if words else ""
    if first in ("help", "-h", "--help", "?") and len(words) == 1:
        return HelpCommand()
    if first == "status" and len(words) == 1:
        return StatusCommand()
    if first == "cancel" and len(words) <= 2:
        return CancelCommand(words[1] if len(words) == 2 else None)
    if first in _NOT_YET:
        raise CommandError(f"`{first}` (scheduled digests) is not available yet.")

    options: dict[str, str] = {}
    for match in _OPTION.finditer(body):
        name, value = match.group(1), match.group(2).strip('"“”')
        if name not in RESEARCH_OPTIONS:
            allowed = ", ".join(f"`{o}=`" for o in RESEARCH_OPTIONS)
            raise CommandError(f"Unknown option `{name}=`; allowed options: {allowed}.")
        if name in options:
            raise CommandError(f"The option `{name}=` is given twice.")
        options[name] = value
    topic = " ".join(_OPTION.sub(" ", body).split())
    if "depth" in options and not options["depth"]:
        raise CommandError(f"depth must be a whole number from 1 to {max_depth}.")
    return ResearchCommand(
        topic=validate_topic(topic),
        depth=validate_depth(options.get("depth"), default=default_depth, maximum=max_depth),
        strategy=validate_strategy(options.get("strategy")),
    )
