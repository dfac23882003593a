"""Slack's assistant pane (Agents & AI Apps): the greeting and suggested prompts of a new
assistant thread, the channel the user is viewing, and the thread's title; and the suggested
prompts of an agent's DM.

- ``assistant_thread_started``: the thread gets a greeting and up to four suggested prompts
  (``FATHOM_SLACK_SUGGESTED_PROMPTS``, or defaults in the user's language, read from their
  Slack locale), and its context is kept;
- ``assistant_thread_context_changed``: the context kept is replaced;
- a message in the thread is a DM (``bots.slack.app``): it starts a research whose run records
  the context's channel (``context_channel``) and the thread's title becomes the topic;
- ``app_home_opened`` on the Messages tab: for an app on ``features.agent_view``, which gets
  neither assistant thread event (docs.slack.dev/ai/migrating-to-agent-messaging), the DM
  gets the same suggested prompts, without a greeting (Slack sends the event each time the
  tab is opened) and without ``thread_ts`` (which makes the call "silently fail" for an
  agent, docs.slack.dev/reference/methods/assistant.threads.setSuggestedPrompts).

The context is a record of where the user was, never a grant: what a run may search is decided
from its own thread (a DM) where it executes. Every call here is best effort: a workspace
without the feature (or the ``assistant:write`` scope) answers an error, which is logged, and
the DM works as before.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bots.chat.message import ChatMessage
from bots.slack.errors import describe_error
from bots.slack.settings import MAX_SUGGESTED_PROMPTS, SuggestedPrompt
from core.chat.stores import ChatContexts
from core.untrusted import neutralise, remove_urls
from core.values import ThreadKey
from core.words.wording import Language, pick

log = logging.getLogger(__name__)

#: What is kept of a context, and what a run records (``platform_context``).
CONTEXT_CHANNEL = "context_channel"
CONTEXT_TEAM = "context_team"
#: Marks a thread as an assistant thread (its title may be set).
ASSISTANT_THREAD = "assistant_thread"
_TITLE_CHARS = 120


def default_prompts(language: Language) -> list[SuggestedPrompt]:
    """The pane's prompts when none are configured."""
    if language == "zh":
        pairs = [
            ("最新进展", "固态电池的最新进展"),
            ("比较方案", "小团队选 PostgreSQL 还是 MySQL depth=2"),
            ("深入研究", "热泵在寒冷气候下的表现 depth=5"),
            ("怎么用", "help"),
        ]
    else:
        pairs = [
            ("Latest developments", "Latest developments in solid-state batteries"),
            ("Compare options", "PostgreSQL or MySQL for a small team depth=2"),
            ("Go deep", "How well do heat pumps work in cold climates? depth=5"),
            ("How to use Fathom", "help"),
        ]
    return [SuggestedPrompt(title=t, message=m) for t, m in pairs]


def greeting(language: Language) -> str:
    return pick(
        language,
        "Hi! Send me a topic and I will research it on the web and write a report that cites "
        "its sources. Add `depth=N` for more searches, `help` for everything else.",
        "你好！发给我一个主题，我会在网上研究它，并写一份注明来源的报告。加上 `depth=N` "
        "可以多搜几轮，发送 `help` 查看全部用法。",
    )


def _language_of(locale: Any) -> Language:
    return "zh" if isinstance(locale, str) and locale.lower().startswith("zh") else "en"


def thread_title(topic: str) -> str:
    """A topic as the thread's title: one line, no mention, no address."""
    title = " ".join(remove_urls(neutralise(topic)).split())
    return title if len(title) <= _TITLE_CHARS else title[: _TITLE_CHARS - 1].rstrip() + "…"


#: A Slack id (channel, team, user) and a message timestamp, as Slack writes them.
_ID = re.compile(r"[A-Za-z0-9]{1,64}")
_TS = re.compile(r"\d{1,12}\.\d{1,9}")


def _thread_of(event: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]] | None:
    """(user, channel, thread_ts, context) of an assistant thread event, or None."""
    thread = event.get("assistant_thread")
    if not isinstance(thread, dict):
        return None
    user, channel = thread.get("user_id"), thread.get("channel_id")
    ts, context = thread.get("thread_ts"), thread.get("context")
    if not (_is_id(channel) and isinstance(ts, str) and _TS.fullmatch(ts)):
        return None
    user = user if _is_id(user) else ""
    return str(user), str(channel), ts, context if isinstance(context, dict) else {}


def _is_id(value: object) -> bool:
    """Whether ``value`` has the shape of a Slack id (``C0123ABCD``, ``T0001``): anything else
    (a NUL, markup, 10 kB) is not stored or used."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def kept_context(context: dict[str, Any]) -> dict[str, str]:
    """What is kept of a thread context: the channel (and its workspace) the user views,
    when they are ids (anything else is left out)."""
    kept = {ASSISTANT_THREAD: "true"}
    channel, team = context.get("channel_id"), context.get("team_id")
    if _is_id(channel):
        kept[CONTEXT_CHANNEL] = str(channel)
    if _is_id(team):
        kept[CONTEXT_TEAM] = str(team)
    return kept


class AssistantPane:
    """The assistant thread events, and what a message in such a thread adds to its run."""

    def __init__(
        self, contexts: ChatContexts, prompts: list[SuggestedPrompt] | None = None
    ) -> None:
        self._contexts = contexts
        self._prompts = prompts

    def prompts(self, language: Language) -> list[SuggestedPrompt]:
        return (self._prompts or default_prompts(language))[:MAX_SUGGESTED_PROMPTS]

    async def thread_started(
        self, team: str, event: dict[str, Any], client: AsyncWebClient | None
    ) -> None:
        """Keep the thread's context, then greet and suggest prompts (best effort)."""
        found = await self._keep(team, event)
        if found is None or client is None:
            return
        user, channel, ts = found
        language = await self._language(client, user)
        prompts = [p.model_dump() for p in self.prompts(language)]
        title = pick(language, "Try one of these:", "试试这些：")
        try:
            await client.chat_postMessage(channel=channel, thread_ts=ts, text=greeting(language))
            await client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=ts, title=title, prompts=prompts
            )
        except Exception as exc:
            log.warning("slack: assistant thread %s not greeted (%s)", ts, describe_error(exc))

    async def messages_opened(self, event: dict[str, Any], client: AsyncWebClient | None) -> None:
        """An agent's DM opened (``app_home_opened`` with ``tab: "messages"``): its suggested
        prompts, in the user's language (best effort)."""
        user, channel = event.get("user"), event.get("channel")
        if event.get("tab") != "messages" or client is None:
            return
        if not (_is_id(user) and _is_id(channel)):
            return
        language = await self._language(client, str(user))
        prompts = [p.model_dump() for p in self.prompts(language)]
        title = pick(language, "Try one of these:", "试试这些：")
        try:
            await client.assistant_threads_setSuggestedPrompts(
                channel_id=str(channel), title=title, prompts=prompts
            )
        except Exception as exc:
            log.warning("slack: no suggested prompts in %s (%s)", channel, describe_error(exc))

    async def context_changed(self, team: str, event: dict[str, Any]) -> None:
        await self._keep(team, event)

    async def _keep(self, team: str, event: dict[str, Any]) -> tuple[str, str, str] | None:
        """Keep an assistant thread event's context; its (user, channel, thread_ts)."""
        found = _thread_of(event)
        if found is None:
            return None
        user, channel, ts, context = found
        key = ThreadKey(platform="slack", workspace=team, channel=channel, thread=ts)
        await self._contexts.set_conversation_context(str(key), kept_context(context))
        return user, channel, ts

    async def with_context(self, message: ChatMessage) -> ChatMessage:
        """The message, recording the thread's context with its run when it was written in
        an assistant thread (a DM reply)."""
        if not message.in_thread:
            return message
        kept = await self._contexts.conversation_context(str(message.thread_key))
        if not kept:
            return message
        context = {k: str(v) for k, v in kept.items() if k in (CONTEXT_CHANNEL, CONTEXT_TEAM)}
        context[ASSISTANT_THREAD] = "true"
        return dataclasses.replace(message, context={**(message.context or {}), **context})

    @staticmethod
    async def set_title(client: AsyncWebClient | None, message: ChatMessage, topic: str) -> None:
        """The assistant thread's title becomes the research topic (best effort)."""
        if client is None or not (message.context or {}).get(ASSISTANT_THREAD):
            return
        title = thread_title(topic)
        if not title:
            return
        try:
            await client.assistant_threads_setTitle(
                channel_id=message.channel, thread_ts=message.thread, title=title
            )
        except Exception as exc:
            log.warning("slack: assistant thread title not set (%s)", describe_error(exc))

    @staticmethod
    async def _language(client: AsyncWebClient, user: str) -> Language:
        """The user's language from their Slack locale (English when it cannot be read)."""
        if not user:
            return "en"
        try:
            info = await client.users_info(user=user, include_locale=True)
        except Exception as exc:
            log.info("slack: locale of %s not read (%s)", user, describe_error(exc))
            return "en"
        profile = info.get("user") if isinstance(info.get("user"), dict) else {}
        return _language_of((profile or {}).get("locale"))
