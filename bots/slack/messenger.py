"""Slack Web API calls for one workspace: post, edit, and post a long Markdown report."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack.render import REPORT_FILE_THRESHOLD, escape_mrkdwn, report_messages, report_title
from core.models import Source, ThreadKey

log = logging.getLogger(__name__)

#: Slack errors that mean "this markdown block was not accepted": post the chunk as text.
BLOCK_ERRORS = frozenset({"invalid_blocks", "invalid_blocks_format", "msg_blocks_too_long"})
PENDING_PREFIX = "pending-"


def make_web_client(token: str, api_url: str) -> AsyncWebClient:
    """A client that retries connection errors, 5xx and 429 (honouring ``Retry-After``)."""
    return AsyncWebClient(
        token=token,
        base_url=api_url,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(),
            AsyncRateLimitErrorRetryHandler(max_retry_count=2),
            AsyncServerErrorRetryHandler(max_retry_count=2),
        ],
    )


class SlackClients(Protocol):
    """Resolves the bot client of a workspace (one token, or the OAuth installation store)."""

    async def client_for(self, team_id: str) -> AsyncWebClient: ...


class StaticSlackClients:
    """Single-workspace install: the same client for every team."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def client_for(self, team_id: str) -> AsyncWebClient:
        return self.client


def thread_ts(thread: ThreadKey) -> str | None:
    """The Slack ``thread_ts`` of a thread key; None while a slash command's thread is pending."""
    return None if thread.thread.startswith(PENDING_PREFIX) else thread.thread


class SlackMessenger:
    """``core.progress.Messenger`` on Slack for one workspace client."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def post_message(self, thread: ThreadKey, text: str) -> str:
        """Post in the thread (top level in the channel while pending); returns the ``ts``."""
        response = await self._client.chat_postMessage(
            channel=thread.channel, text=text, thread_ts=thread_ts(thread), unfurl_links=False
        )
        return str(response["ts"])

    async def edit_message(self, thread: ThreadKey, message_id: str, text: str) -> None:
        await self._client.chat_update(channel=thread.channel, ts=message_id, text=text)

    async def post_report(
        self, thread: ThreadKey, markdown: str, sources: Sequence[Source] = ()
    ) -> None:
        """Post the report as markdown-block messages in order; long ones also as a file."""
        messages = report_messages(markdown, list(sources))
        for message in messages:
            await self._post_part(thread, message)
        if len(messages) > REPORT_FILE_THRESHOLD:
            await self._client.files_upload_v2(
                content=markdown,
                filename="report.md",
                title=report_title(markdown),
                channel=thread.channel,
                thread_ts=thread_ts(thread),
            )

    async def _post_part(self, thread: ThreadKey, message: dict[str, Any]) -> None:
        common: dict[str, Any] = {
            "channel": thread.channel,
            "thread_ts": thread_ts(thread),
            "unfurl_links": False,
        }
        try:
            await self._client.chat_postMessage(**common, **message)
        except SlackApiError as exc:
            if exc.response.get("error") not in BLOCK_ERRORS:
                raise
            log.warning("markdown block refused (%s); posting as text", exc.response.get("error"))
            text = escape_mrkdwn(str(message["blocks"][0]["text"]))
            await self._client.chat_postMessage(**common, text=text)
