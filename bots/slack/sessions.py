"""Slack's agent sessions (``agents.sessions.setStatus`` and ``agents.sessions.rename``): a
run's thread as a session, ``processing`` with the research topic as its title while the run
works (Slack shows its own Stop button then), ``active`` once the run has ended (the thread
takes a follow-up).

What Slack documents (docs.slack.dev/ai/agent-sessions and the methods' reference pages):
sessions are thread-based, in channels and DMs; only apps declared as agents create them
(the manifest's ``features.agent_view``), with ``chat:write``; ``setStatus`` creates the
session or updates its status (one of ``active``, ``processing``, ``suspended``, ``closed``),
its ``title`` (at most 200 characters) and ``initiator_user_id`` count on creation only;
``rename`` changes the title. The session does not leave ``processing`` by itself, not even
when the user presses Stop (``agent_session_stopped``): the app moves it.

Here: the helpers :mod:`bots.slack.status` (the delivery's side) and :mod:`bots.slack.app`
(a Stop with nothing running) call, and how Slack's refusals of them are judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bots.slack.errors import error_code, http_status
from core.untrusted import neutralise, remove_urls

#: The session while the run works: Slack shows a loading indicator and its Stop button.
WORKING = "processing"
#: The session once the run has ended (a report, a failure, a cancel): the thread is open
#: for a follow-up. (``suspended`` is for an agent waiting on the user, ``closed`` for a
#: session that takes nothing more; neither is a research's end.)
ENDED = "active"
#: ``title`` of ``agents.sessions.setStatus`` and ``rename``: "max 200 characters".
MAX_TITLE_CHARS = 200

#: Answers about one channel: the sessions of its threads are not asked for again, the
#: workspace's other channels keep them.
CHANNEL_REFUSALS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "channel_is_archived",
        "not_allowed",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
    }
)
#: Answers that may name the initiator (who "must be a member of the channel"): the session
#: is asked for once more without it before anything is refused.
INITIATOR_REFUSALS = frozenset({"invalid_arguments", "user_not_found", "user_not_in_channel"})
#: ``ok: false`` codes of a Slack that is failing, not refusing: tried again later.
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)


def session_title(topic: str) -> str:
    """A research topic as a session's title: one line, no mention, no address, at most
    :data:`MAX_TITLE_CHARS` characters."""
    title = " ".join(remove_urls(neutralise(topic)).split())
    if len(title) <= MAX_TITLE_CHARS:
        return title
    return title[: MAX_TITLE_CHARS - 1].rstrip() + "…"


def is_refusal(exc: BaseException) -> bool:
    """Whether Slack answered ``ok: false`` on purpose (not a 429, a 5xx, a body that is no
    JSON, a broken connection): the same call would be refused again. Any such code counts,
    known or not, because the assistant methods remain for a workspace that refuses
    sessions, while asking again every few seconds would only add calls."""
    code = error_code(exc)
    status = http_status(exc)
    if code is None or code in TRANSIENT_ERRORS:
        return False
    return status is None or (status < 500 and status != 429)


def warnings_of(answer: Mapping[str, Any]) -> list[str]:
    """The warnings in one of Slack's ``ok`` answers (``warning``, comma-separated, and
    ``response_metadata.warnings``), e.g. ``missing_agent_session_stopped_event_subscription``
    from ``agents.sessions.setStatus`` while the app does not subscribe to the Stop event."""
    found: list[str] = []
    warning = answer.get("warning")
    if isinstance(warning, str):
        found.extend(w.strip() for w in warning.split(","))
    metadata = answer.get("response_metadata")
    listed = metadata.get("warnings") if isinstance(metadata, Mapping) else None
    if isinstance(listed, Iterable) and not isinstance(listed, str):
        found.extend(str(w).strip() for w in listed)
    return [w for w in dict.fromkeys(found) if w]


async def set_session(
    client: AsyncWebClient,
    channel: str,
    thread_ts: str,
    status: str,
    *,
    title: str | None = None,
    initiator: str | None = None,
) -> Mapping[str, Any]:
    """``agents.sessions.setStatus`` for one thread (the session is created when it does not
    exist; ``title`` and ``initiator`` count then only); Slack's answer."""
    answer = await client.agents_sessions_setStatus(
        channel_id=channel,
        thread_ts=thread_ts,
        status=status,
        title=title or None,
        initiator_user_id=initiator or None,
    )
    data = answer.data
    return data if isinstance(data, Mapping) else {}


async def rename_session(
    client: AsyncWebClient, channel: str, thread_ts: str, title: str
) -> Mapping[str, Any]:
    """``agents.sessions.rename``: a session that already existed (an earlier research in the
    same thread) takes the new research's topic as its title."""
    answer = await client.agents_sessions_rename(
        channel_id=channel, thread_ts=thread_ts, title=title
    )
    data = answer.data
    return data if isinstance(data, Mapping) else {}
