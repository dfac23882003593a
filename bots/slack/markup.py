"""Slack's markup on the input side (mentions and links in, :class:`SlackMarkup` for the
shared replies out). Pure functions, kept apart from the Bolt wiring."""

from __future__ import annotations

import re

from bots.chat.message import PENDING_PREFIX
from bots.chat.replies import Icon
from bots.slack.render import escape_mrkdwn
from core.values import ThreadKey
from core.words.wording import Language, pick

# <@U123>, <@U123|name>, <#C123|name>, <#C123>, <!here>, <!subteam^S1|@team>, <url|label>, <url>
_MARKUP = re.compile(r"<([^<>]+)>")


def clean_text(text: str, bot_user_id: str | None = None) -> str:
    """The command text of a mention or DM: the bot's mentions removed, Slack markup undone.

    ``<https://x|label>`` → ``label`` (``<https://x>`` → the URL), ``<#C1|name>`` → ``#name``,
    ``<@U1>`` → ``@U1``, ``<!here>`` → ``@here``; HTML entities are decoded.
    """

    def replace(match: re.Match[str]) -> str:
        inner = match.group(1)
        target, _, label = inner.partition("|")
        if target.startswith("@"):
            if bot_user_id and target[1:] == bot_user_id:
                return " "
            return f"@{label or target[1:]}"
        if target.startswith("#"):
            return f"#{label or target[1:]}"
        if target.startswith("!"):
            if label:
                return label if label.startswith("@") else f"@{label}"
            return f"@{target[1:].split('^', 1)[0]}"
        return label or target

    plain = _MARKUP.sub(replace, text or "")
    plain = plain.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return " ".join(plain.split())


_ICONS: dict[Icon, str] = {
    "warning": ":warning: ",
    "no_entry": ":no_entry: ",
    "hourglass": ":hourglass: ",
    "mag": ":mag: ",
    "stop": ":octagonal_sign: ",
    "paperclip": ":paperclip: ",
}


class SlackMarkup:
    """``bots.chat.replies.Markup`` for Slack mrkdwn."""

    bold = "*"

    def escape(self, text: str) -> str:
        return escape_mrkdwn(text)

    def icon(self, name: Icon) -> str:
        return _ICONS[name]

    def thread_hint(self, thread: ThreadKey, language: Language) -> str:
        """Where a run lives, without a permalink (which would need an API call)."""
        if thread.platform != "slack":
            return str(thread)
        if thread.thread.startswith(PENDING_PREFIX):
            return pick(
                language, f"in <#{thread.channel}> (starting)", f"在 <#{thread.channel}>（启动中）"
            )
        return pick(
            language,
            f"in <#{thread.channel}>, thread {thread.thread}",
            f"在 <#{thread.channel}>，话题 {thread.thread}",
        )
