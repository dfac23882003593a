"""The Feishu/Lark Open API calls Fathom makes, through the official ``lark-oapi`` SDK.

``FEISHU_DOMAIN`` (Feishu, Lark or a test server) is the base of every call. The SDK's own
token handling fetches tenant tokens with blocking ``requests`` on the event loop and caches
them process-wide per app id, so this client manages the tenant token itself (fetched with
the SDK's async call, cached until shortly before it expires, fetched again when Feishu says
it is invalid) and passes it per request (``enable_set_token``).

Every failure becomes a :class:`FeishuError` with the HTTP status, Feishu's error code and,
for rate limits, how long to wait; ``bots.feishu.delivery.classify_error`` judges it
(``bots.chat.errors.judge_failure``). The
SDK retries nothing; callers own retries (``bots.chat.throttle``, ``core.delivery``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import lark_oapi as lark
from lark_oapi.api.auth.v3 import (
    InternalTenantAccessTokenRequest,
    InternalTenantAccessTokenRequestBody,
)
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.enum import AccessTokenType, HttpMethod
from lark_oapi.core.model import BaseRequest, RawResponse, RequestOption

from bots.chat.errors import PlatformError

#: Feishu error codes of an invalid or expired tenant token.
TOKEN_INVALID = frozenset({99991663, 99991661, 99991664, 99991668})
#: Feishu's codes for "too many requests" (the gateway's, and the messaging API's own).
RATE_LIMITED = frozenset({99991400, 230020})
#: Feishu's codes that say a call can never succeed as made (the message APIs' error tables
#: and the generic server codes); any other code is retried.
FINAL_CODES = frozenset(
    {
        230001,  # invalid request parameter (e.g. a message id that does not exist)
        230002,  # the bot is not in the chat
        230006,  # the app's bot ability is not enabled
        230011,  # the message replied to was recalled
        230013,  # the user is outside the bot's availability
        230017,  # the bot does not own the message (a card it may not update)
        230027,  # lacking a necessary permission
        230035,  # sending is not allowed in this chat
        230110,  # the message was deleted
        230099,  # the card content was refused
        99991672,  # the app lacks a scope
        99991401,  # the caller's IP is not allowed
        10003,  # invalid app id
        10014,  # invalid app secret
    }
)
#: Renew the tenant token this long before Feishu says it expires.
TOKEN_MARGIN = 300.0


class FeishuError(PlatformError):
    """A refused or failed Open API call (final when Feishu's code is in :data:`FINAL_CODES`)."""

    code: int

    def __init__(self, status: int, code: int, message: str, retry_after: float = 0.0) -> None:
        super().__init__(
            status,
            code,
            message,
            retry_after,
            final=code in FINAL_CODES,
            shown=f"{message} (code {code}, HTTP {status})",
        )

    @property
    def rate_limited(self) -> bool:
        return self.status == 429 or self.code in RATE_LIMITED


def _error(raw: RawResponse | None, code: int | None, message: str | None) -> FeishuError:
    status = int(getattr(raw, "status_code", 0) or 0)
    headers = {k.lower(): v for k, v in (getattr(raw, "headers", None) or {}).items()}
    retry_after = 0.0
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        try:
            retry_after = max(retry_after, float(headers.get(name, 0)))
        except ValueError:
            pass
    return FeishuError(status, int(code if code is not None else -1), message or "", retry_after)


def _body(raw: RawResponse | None) -> dict[str, Any]:
    try:
        data = json.loads(raw.content or b"{}") if raw is not None else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def route_sdk_logs() -> None:
    """The SDK prints its log lines to stdout with a handler of its own; drop it, so they go
    through Fathom's handlers (format, level, redaction) like every other line."""
    sdk = logging.getLogger("Lark")
    for handler in list(sdk.handlers):
        sdk.removeHandler(handler)
    sdk.propagate = True


class FeishuApi:
    """The app's Open API client (a self-built app: one tenant token)."""

    def __init__(self, app_id: str, app_secret: str, domain: str, *, timeout: float = 10.0):
        route_sdk_logs()
        self._app_id = app_id
        self._app_secret = app_secret
        self.client = (
            lark.Client.builder()
            .app_id(app_id)
            .app_secret(app_secret)
            .domain(domain)
            .enable_set_token(True)
            .timeout(timeout)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()

    async def _tenant_token(self) -> str:
        async with self._lock:
            if self._token is not None and time.monotonic() < self._expires_at:
                return self._token
            request = (
                InternalTenantAccessTokenRequest.builder()
                .request_body(
                    InternalTenantAccessTokenRequestBody.builder()
                    .app_id(self._app_id)
                    .app_secret(self._app_secret)
                    .build()
                )
                .build()
            )
            response = await self._send(self.client.auth.v3.tenant_access_token.ainternal, request)
            data = _body(response.raw)
            token = str(data.get("tenant_access_token") or "")
            if not token:
                raise FeishuError(0, -1, "no tenant_access_token in Feishu's answer")
            expire = float(data.get("expire") or 7200)
            self._token, self._expires_at = token, time.monotonic() + expire - TOKEN_MARGIN
            return token

    @staticmethod
    async def _send(call: Any, request: Any, option: RequestOption | None = None) -> Any:
        """One SDK call; a non-zero code (or an unreadable answer) raises FeishuError."""
        try:
            response = await call(request, option) if option is not None else await call(request)
        except ValueError as exc:  # the answer was no JSON (a proxy's error page)
            raise FeishuError(502, -1, f"unreadable answer ({exc.__class__.__name__})") from exc
        if not response.success():
            raise _error(response.raw, response.code, response.msg)
        return response

    async def _authorized(self, call: Any, request: Any) -> Any:
        """A call with the tenant token; fetched again once when Feishu says it is invalid."""
        for attempt in (1, 2):
            option = RequestOption.builder().tenant_access_token(await self._tenant_token()).build()
            try:
                return await self._send(call, request, option)
            except FeishuError as exc:
                if exc.code not in TOKEN_INVALID or attempt == 2:
                    raise
                async with self._lock:
                    self._token = None
        raise AssertionError("unreachable")

    async def reply(
        self, message_id: str, msg_type: str, content: str, *, uuid: str, in_thread: bool = True
    ) -> str:
        """Reply to ``message_id`` (in its thread); returns the new message's id. The same
        ``uuid`` again (a retry) returns the message the first call created."""
        body = (
            ReplyMessageRequestBody.builder()
            .content(content)
            .msg_type(msg_type)
            .reply_in_thread(in_thread)
            .uuid(uuid[:50])
            .build()
        )
        request = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        response = await self._authorized(self.client.im.v1.message.areply, request)
        new_id = getattr(getattr(response, "data", None), "message_id", None)
        if not new_id:
            raise FeishuError(200, -1, "no message_id in Feishu's answer")
        return str(new_id)

    async def create_message(self, chat_id: str, msg_type: str, content: str, *, uuid: str) -> str:
        """A new top-level message in a chat (a digest's opener); returns its id."""
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(chat_id)
            .msg_type(msg_type)
            .content(content)
            .uuid(uuid[:50])
            .build()
        )
        request = (
            CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
        )
        response = await self._authorized(self.client.im.v1.message.acreate, request)
        new_id = getattr(getattr(response, "data", None), "message_id", None)
        if not new_id:
            raise FeishuError(200, -1, "no message_id in Feishu's answer")
        return str(new_id)

    async def patch_card(self, message_id: str, content: str) -> None:
        """Replace an interactive card (sent with ``update_multi``) by ``content``."""
        body = PatchMessageRequestBody.builder().content(content).build()
        request = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        await self._authorized(self.client.im.v1.message.apatch, request)

    async def bot_open_id(self) -> str:
        """The bot's own ``open_id`` (to tell its mentions from other people's)."""
        request = (
            BaseRequest.builder()
            .http_method(HttpMethod.GET)
            .uri("/open-apis/bot/v3/info")
            .token_types({AccessTokenType.TENANT})
            .build()
        )
        response = await self._authorized(self.client.arequest, request)
        open_id = _body(response.raw).get("bot", {}).get("open_id")
        if not open_id:
            raise FeishuError(200, -1, "no bot.open_id in Feishu's answer")
        return str(open_id)
