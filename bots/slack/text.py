"""Pure text helpers of the Slack input side: message markup in, ephemeral replies out.

Kept apart from the Bolt wiring so they are trivially testable and the handlers stay short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bots.slack.render import escape_mrkdwn
from core.models import ThreadKey
from storage import RunRecord

HELP_HINT = "Type `/research help` to see what I understand."
PENDING_PREFIX = "pending-"
STATUS_RECENT = 5

# <@U123>, <@U123|name>, <#C123|name>, <#C123>, <!here>, <!subteam^S1|@team>, <url|label>, <url>
_MARKUP = re.compile(r"<([^<>]+)>")


def requested_by(team_id: str, user_id: str) -> str:
    return f"slack:{team_id}:{user_id}"


def thread_key(team_id: str, channel_id: str, thread: str) -> ThreadKey:
    return ThreadKey(platform="slack", workspace=team_id, channel=channel_id, thread=thread)


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


def error_reply(message: str) -> str:
    """What is wrong, and where to read what is allowed."""
    return f":warning: {message}\n{HELP_HINT}"


def not_allowed_reply() -> str:
    return (
        ":no_entry: Sorry, you can't start research here. Ask a Fathom admin to add you "
        "(or this channel) to the allowed list."
    )


def concurrency_reply(limit: int) -> str:
    plural = "research" if limit == 1 else "researches"
    return (
        f":hourglass: You already have {limit} {plural} running, the most allowed at once. "
        "Wait for one to finish, or stop one with `/research cancel`."
    )


def accepted_reply(topic: str, depth: int) -> str:
    return f":mag: On it: researching “{escape_mrkdwn(topic)}” with {depth} search rounds."


def rejected_reply(reason: str) -> str:
    return f":warning: {reason}"


def cancelled_reply(run: RunRecord) -> str:
    return f":octagonal_sign: Cancelling “{escape_mrkdwn(run.topic)}” (run `{run.id[:8]}`)."


def nothing_to_cancel_reply(run_id_prefix: str | None) -> str:
    if run_id_prefix:
        return f"You have no running research whose id starts with `{run_id_prefix}`."
    return "You have no running research here to cancel."


def thread_hint(key: str) -> str:
    """Where a run lives, without a permalink (which would need an API call)."""
    try:
        thread = ThreadKey.parse(key)
    except ValueError:
        return key
    if thread.platform != "slack":
        return key
    if thread.thread.startswith(PENDING_PREFIX):
        return f"in <#{thread.channel}> (starting)"
    return f"in <#{thread.channel}>, thread {thread.thread}"


def _run_line(run: RunRecord) -> str:
    return (
        f"• `{run.id[:8]}` “{escape_mrkdwn(_short(run.topic))}”: {run.status}, "
        f"{run.rounds_done}/{run.depth} searches, {thread_hint(run.thread_key)}"
    )


def status_reply(active: Sequence[RunRecord], recent: Sequence[RunRecord]) -> str:
    """The user's running research, then their latest finished ones."""
    active_ids = {r.id for r in active}
    finished = [r for r in recent if r.id not in active_ids][:STATUS_RECENT]
    if not active and not finished:
        return "You have no research yet. Start one with `/research <topic>`."
    lines = ["*Running*"] if active else ["Nothing running right now."]
    lines += [_run_line(r) for r in active]
    if finished:
        lines += ["*Recent*", *(_run_line(r) for r in finished)]
    return "\n".join(lines)


def _short(topic: str, limit: int = 80) -> str:
    return topic if len(topic) <= limit else topic[: limit - 1] + "…"
