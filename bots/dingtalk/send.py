"""Sending one Markdown message into a DingTalk conversation: through the message's session
webhook while it is usable, through the robot OpenAPI (group or one-to-one send) otherwise.

Used for a run's messages (``bots.dingtalk.delivery``) and for the answers to requests
(``bots.dingtalk.app``), so both fall back the same way: a webhook that refuses, or cannot be
reached, is dropped for the OpenAPI; a rate limit or an outage of the webhook is raised (the
caller retries it later, and DingTalk's answer says nothing about the OpenAPI).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx

from bots.dingtalk.api import DingTalkApi, DingTalkError, Space
from bots.dingtalk.render import escape_text

log = logging.getLogger("bots.dingtalk.delivery")  # the log lines it always had

#: A session webhook is not used in the last minute of its life.
WEBHOOK_MARGIN_MS = 60_000


def space_of(context: Mapping[str, Any], channel: str) -> Space:
    """Where a message of a request (its ``platform_context``) goes for the OpenAPI."""
    return Space(
        group=context.get("conversation_type") == "group",
        conversation_id=str(context.get("conversation_id") or channel),
        staff_id=str(context.get("staff_id") or ""),
    )


class Conversation:
    """One DingTalk conversation to send Markdown into.

    ``webhook``: the request's session webhook (None: the OpenAPI only); ``expires_ms``: when
    DingTalk says it expires (None: it is fresh, as while answering the request itself);
    ``nick``: how the requester is @-mentioned through the OpenAPI.
    """

    def __init__(
        self,
        api: DingTalkApi,
        space: Space,
        *,
        webhook: str | None,
        expires_ms: int | None = None,
        nick: str = "",
    ) -> None:
        self._api = api
        self.space = space
        self._webhook = webhook
        self._expires_ms = expires_ms
        self._nick = nick

    def _webhook_usable(self) -> bool:
        if self._webhook is None:
            return False
        if self._expires_ms is None:
            return True
        return time.time() * 1000 < self._expires_ms - WEBHOOK_MARGIN_MS

    async def send(self, title: str, text: str, *, mention: bool = False) -> None:
        """Through the session webhook while it is usable; through the OpenAPI otherwise, or
        when the webhook refuses (a rate limit or an outage is raised: retried later)."""
        staff = self.space.staff_id
        if self._webhook is not None and self._webhook_usable():
            body: dict[str, Any] = {
                "msgtype": "markdown",
                "markdown": {
                    "title": title,
                    "text": f"@{staff}\n\n{text}" if mention and staff else text,
                },
            }
            if mention and staff:
                body["at"] = {"atUserIds": [staff], "isAtAll": False}
            try:
                await self._api.post_webhook(self._webhook, body)
                return
            except DingTalkError as exc:
                if exc.rate_limited or exc.status >= 500:
                    raise
                log.info("dingtalk session webhook refused (%s); using the OpenAPI", exc.code)
                self._webhook = None
            except httpx.HTTPError as exc:  # unreachable or malformed: the OpenAPI instead
                log.info(
                    "dingtalk session webhook failed (%s); using the OpenAPI", type(exc).__name__
                )
                self._webhook = None
        # The mention on a line of its own: a report's first line is its heading.
        shown = f"@{escape_text(self._nick)}\n\n{text}" if mention and self._nick else text
        await self._api.send_markdown(self.space, title, shown)
