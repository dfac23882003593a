"""Slack Web API calls for one workspace: post, edit, and post the parts of a report."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack.errors import error_code
from bots.slack.refusals import SlackRefusals
from bots.slack.render import escape_mrkdwn, report_title, safe_markdown
from bots.slack.scopes import SlackScopes
from core.values import ThreadKey

log = logging.getLogger(__name__)

#: Slack errors that mean "this markdown block was not accepted": post the chunk as text.
BLOCK_ERRORS = frozenset({"invalid_blocks", "invalid_blocks_format", "msg_blocks_too_long"})
PENDING_PREFIX = "pending-"


def make_web_client(token: str, api_url: str) -> AsyncWebClient:
    """The Web API client of every Slack call Fathom makes (production and tests alike).

    It retries nothing itself (no SDK retry handlers, not even the default one for
    connection errors): each caller owns one retry policy. Progress edits are retried by
    ``bots.chat.throttle.EditThrottle`` (coalesced, honouring ``Retry-After``), report parts
    by the durable delivery step of ``core.operations.job`` (backoff, recorded attempts); a
    failed progress post is simply repeated by the next progress event.
    """
    return AsyncWebClient(token=token, base_url=api_url, retry_handlers=[])


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
    """The Slack calls of one run's delivery, for one workspace client (``team``: the
    workspace, whose refusals of plan blocks are remembered in ``refusals``, and its token's
    scopes, as its answers list them, in ``scopes``)."""

    def __init__(
        self,
        client: AsyncWebClient,
        team: str = "",
        refusals: SlackRefusals | None = None,
        scopes: SlackScopes | None = None,
    ) -> None:
        self._client = client
        self._team = team
        self._refusals = refusals or SlackRefusals()
        self._scopes = scopes or SlackScopes()

    @property
    def client(self) -> AsyncWebClient:
        return self._client

    def mention_needed(self, channel: str) -> bool:
        """Whether a reply in ``channel`` must mention the bot to reach it (the token lacks
        the history scopes of plain replies; see :mod:`bots.slack.scopes`)."""
        return self._scopes.mention_needed(self._team, channel)

    def _noted(self, response: Any) -> Any:
        self._scopes.note(self._team, getattr(response, "headers", None))
        return response

    def _blocks(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """The blocks to send: the plain ones where the workspace refused plan blocks."""
        if "plain_blocks" in message and self._refusals.plans_refused(self._team):
            return list(message["plain_blocks"])
        return list(message["blocks"])

    async def _with_plan_fallback(
        self, message: dict[str, Any], send: Callable[[list[dict[str, Any]]], Awaitable[Any]]
    ) -> Any:
        """``send`` the message's blocks; when Slack refuses a message with a plan block as
        blocks it does not take, the workspace is noted and the plain blocks are sent."""
        blocks = self._blocks(message)
        try:
            return await send(blocks)
        except SlackApiError as exc:
            code = error_code(exc)
            plain = message.get("plain_blocks")
            if code not in BLOCK_ERRORS or plain is None or blocks == plain:
                raise
            response = await send(list(plain))
            # Taken without the plan: the plan was what Slack refused.
            self._refusals.refuse_plans(self._team, code or "")
            return response

    async def post_message(self, thread: ThreadKey, text: str) -> str:
        """Post in the thread (top level in the channel while pending); returns the ``ts``."""
        response = await self._client.chat_postMessage(
            channel=thread.channel, text=text, thread_ts=thread_ts(thread), unfurl_links=False
        )
        return str(self._noted(response)["ts"])

    async def edit_message(self, thread: ThreadKey, message_id: str, text: str) -> None:
        await self._client.chat_update(channel=thread.channel, ts=message_id, text=text)

    async def post_progress(self, thread: ThreadKey, content: str) -> str:
        """Post a progress message (``render.progress_message``: its text and blocks)."""
        message = json.loads(content)

        async def post(blocks: list[dict[str, Any]]) -> Any:
            return await self._client.chat_postMessage(
                channel=thread.channel,
                text=message["text"],
                blocks=blocks or None,  # none yet: nothing to send
                thread_ts=thread_ts(thread),
                unfurl_links=False,
            )

        response = await self._with_plan_fallback(message, post)
        return str(self._noted(response)["ts"])

    async def edit_progress(self, thread: ThreadKey, message_id: str, content: str) -> None:
        """Edit a progress message; its blocks are always sent (Slack keeps the old ones when
        they are left out, and ``[]`` removes the buttons of the final state)."""
        message = json.loads(content)

        async def update(blocks: list[dict[str, Any]]) -> Any:
            return await self._client.chat_update(
                channel=thread.channel, ts=message_id, text=message["text"], blocks=blocks
            )

        self._noted(await self._with_plan_fallback(message, update))

    async def post_report_message(self, thread: ThreadKey, message: dict[str, Any]) -> None:
        """Post one report message (``chat.postMessage`` kwargs from ``render``) in the thread;
        a refused ``markdown`` block is posted again as escaped text (without the feedback
        buttons: with blocks, Slack would show them instead of the text)."""
        common: dict[str, Any] = {
            "channel": thread.channel,
            "thread_ts": thread_ts(thread),
            "unfurl_links": False,
        }
        try:
            await self._client.chat_postMessage(**common, **message)
        except SlackApiError as exc:
            code = error_code(exc)
            if code not in BLOCK_ERRORS:
                raise
            log.warning("markdown block refused (%s); posting as text", code)
            text = escape_mrkdwn(str(message["blocks"][0]["text"]))
            await self._client.chat_postMessage(**common, text=text)

    async def upload_report_file(self, thread: ThreadKey, markdown: str) -> None:
        """Upload the whole report as ``report.md`` in the thread."""
        await self._client.files_upload_v2(
            content=safe_markdown(markdown),
            filename="report.md",
            title=report_title(markdown),
            channel=thread.channel,
            thread_ts=thread_ts(thread),
        )
