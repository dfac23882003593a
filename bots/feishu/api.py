"""The Feishu/Lark Open API calls Fathom makes, through the official ``lark-oapi`` SDK.

``FEISHU_DOMAIN`` (Feishu, Lark or a test server) is the base of every call. The SDK's own
token handling fetches tenant tokens with blocking ``requests`` on the event loop and caches
them process-wide per app id, so this client manages the tenant token itself (fetched with
the SDK's async call, cached until shortly before it expires, fetched again when Feishu says
it is invalid) and passes it per request (``enable_set_token``).

Files attached to messages are downloaded with the message resource API
(``GET /open-apis/im/v1/messages/:message_id/resources/:file_key?type=file``, the tenant
token) over httpx rather than the SDK: the SDK's ``message_resource.aget`` reads the whole
answer (up to Feishu's 100 MB) into memory, while :meth:`FeishuApi.download_resource` streams
it from ``FEISHU_DOMAIN`` only and stops past the limit.

Every failure becomes a :class:`FeishuError` with the HTTP status, Feishu's error code and,
for rate limits, how long to wait; ``bots.feishu.delivery.classify_error`` judges it
(``bots.chat.errors.judge_failure``). The
SDK retries nothing; callers own retries (``bots.chat.throttle``, ``core.operations.job``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any
from urllib.parse import quote

import httpx
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
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge
from core.words.reasons import Reason

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

#: The message resource API's answers that say a file can never be downloaded as asked, and
#: how the requester is told ("获取消息中的资源文件", error codes); 234037 is Feishu's own
#: 100 MB limit. Others (234002 unauthorized, 234019 "retry", 234042 storage) are retried.
RESOURCE_REFUSED = {
    230110: Reason("the message was deleted", "消息已被删除"),
    234001: Reason("Feishu refused the request for it", "飞书拒绝了获取它的请求"),
    234003: Reason("the file is not in that message", "该消息中没有这个文件"),
    234004: Reason("the bot is not in that chat", "机器人不在该会话中"),
    234009: Reason("files of external chats cannot be read", "无法读取外部会话的文件"),
    234038: Reason("the chat is in restricted mode", "该会话处于保密模式"),
    234040: Reason("the message is not visible to the bot", "机器人看不到该消息"),
    234041: Reason("the tenant's encryption key was deleted", "租户的加密密钥已被删除"),
    234043: Reason("not a message whose files can be read", "不是可以读取文件的消息"),
    230002: Reason("the bot is not in that chat", "机器人不在该会话中"),
    230027: Reason("the app lacks a permission", "应用缺少权限"),
    99991672: Reason(
        "the app lacks the permission to read messages (im:message:readonly)",
        "应用缺少读取消息的权限（im:message:readonly）",
    ),
}
RESOURCE_TOO_LARGE = 234037
#: What a ``message_id`` and a ``file_key`` look like (``om_…``, ``file_v3_…-…g``): nothing
#: that could change the path of the request.
RESOURCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,199}")
#: The longest a download may take, and how much of an error answer is read.
DOWNLOAD_TIMEOUT = 120.0
ERROR_BODY_LIMIT = 64 * 1024


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


def response_body(response: Any) -> dict[str, Any]:
    """An SDK response's JSON body as Feishu sent it (every field, whatever the SDK's model
    keeps of it)."""
    return _body(getattr(response, "raw", None))


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
        self._domain = domain.rstrip("/")
        self._timeout = timeout
        self._http: httpx.AsyncClient | None = None  # downloads; opened on the first one
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
            code, message = response.code, response.msg
            if code is None:  # a raw request's failure: the SDK parsed no body
                data = _body(response.raw)
                code = data.get("code") if isinstance(data.get("code"), int) else None
                message = str(data.get("msg") or "")
            raise _error(response.raw, code, message)
        return response

    async def call(self, call: Any, request: Any) -> Any:
        """One SDK call (``call``: a method of :attr:`client`) with the tenant token; a
        non-zero code raises :class:`FeishuError` (``bots.feishu.docs`` makes its calls so)."""
        return await self._authorized(call, request)

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

    async def granted_scopes(self) -> frozenset[str]:
        """The app's tenant scopes that the tenant has granted: Feishu's scope-status API
        ("查询租户授权状态", ``GET /open-apis/application/v6/scopes``, no scope needed to call
        it; each listed scope has ``grant_status`` 1 granted or 2 not)."""
        request = (
            BaseRequest.builder()
            .http_method(HttpMethod.GET)
            .uri("/open-apis/application/v6/scopes")
            .token_types({AccessTokenType.TENANT})
            .build()
        )
        response = await self._authorized(self.client.arequest, request)
        data = _body(response.raw).get("data")
        listed = data.get("scopes") if isinstance(data, dict) else None
        if not isinstance(listed, list):
            raise FeishuError(200, -1, "no data.scopes in Feishu's answer")
        return frozenset(
            str(scope["scope_name"])
            for scope in listed
            if isinstance(scope, dict)
            and isinstance(scope.get("scope_name"), str)
            and scope.get("grant_status") == 1
            and scope.get("scope_type", "tenant") == "tenant"
        )

    # -- files of messages ---------------------------------------------------------------
    def _files_client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self._domain,
                timeout=httpx.Timeout(30.0, connect=self._timeout),
                follow_redirects=False,  # only FEISHU_DOMAIN answers
                headers={"User-Agent": "fathom-bot/0.1"},
            )
        return self._http

    async def download_resource(
        self, message_id: str, file_key: str, max_bytes: int, *, html: bool = False
    ) -> bytes:
        """The file ``file_key`` of the message ``message_id`` (a user's file message or a
        post's video), read up to ``max_bytes``: :class:`AttachmentTooLarge` past it,
        :class:`AttachmentRefused` when Feishu's answer says it can never be had; any other
        failure is a :class:`FeishuError` (or httpx's) that ``classify_error`` judges. An
        HTML page answered for a file that is no HTML (``html``) is a proxy's page (a
        sign-in, an outage), not the file: retried."""
        if not (RESOURCE_ID.fullmatch(message_id) and RESOURCE_ID.fullmatch(file_key)):
            raise AttachmentRefused(Reason("not a Feishu message file", "不是飞书消息中的文件"))
        path = (
            f"/open-apis/im/v1/messages/{quote(message_id, safe='')}"
            f"/resources/{quote(file_key, safe='')}"
        )
        async with asyncio.timeout(DOWNLOAD_TIMEOUT):
            for attempt in (1, 2):
                token = await self._tenant_token()
                try:
                    return await self._stream(path, token, max_bytes, html)
                except FeishuError as exc:
                    if exc.code not in TOKEN_INVALID or attempt == 2:
                        raise _refusal(exc) or exc from None
                    async with self._lock:
                        if self._token == token:
                            self._token = None
        raise AssertionError("unreachable")

    async def _stream(self, path: str, token: str, max_bytes: int, html: bool) -> bytes:
        client = self._files_client()
        headers = {"Authorization": f"Bearer {token}"}
        async with client.stream("GET", path, params={"type": "file"}, headers=headers) as answer:
            if answer.status_code != 200:
                raise await _answer_error(answer)
            if not html and answer.headers.get("content-type", "").startswith("text/html"):
                raise _error_of(answer, -1, "an HTML page instead of the file")
            declared = answer.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise AttachmentTooLarge.past(max_bytes)
            data = bytearray()
            async for chunk in answer.aiter_bytes():
                data.extend(chunk)
                if len(data) > max_bytes:
                    raise AttachmentTooLarge.past(max_bytes)
        if answer.headers.get("content-type", "").startswith("application/json"):
            failed = _json_failure(bytes(data))
            if failed is not None:  # a 200 whose body is Feishu's error, not the file
                raise _error_of(answer, *failed)
        return bytes(data)

    async def aclose(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()


def _json_failure(body: bytes) -> tuple[int, str] | None:
    """Feishu's ``{"code": <non-zero>, "msg": ...}`` in a body, else None."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(data, dict) and isinstance(data.get("code"), int) and data["code"] != 0:
        return int(data["code"]), str(data.get("msg") or "")
    return None


def _error_of(answer: httpx.Response, code: int, message: str) -> FeishuError:
    retry_after = 0.0
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        try:
            retry_after = max(retry_after, float(answer.headers.get(name, 0)))
        except ValueError:
            pass
    return FeishuError(answer.status_code, code, message, retry_after)


async def _answer_error(answer: httpx.Response) -> FeishuError:
    """A non-200 answer as a FeishuError: Feishu's code when the body is its JSON, else -1
    (a proxy's page, an empty or cut-off body: retried)."""
    body = bytearray()
    async for chunk in answer.aiter_bytes():
        body.extend(chunk)
        if len(body) > ERROR_BODY_LIMIT:
            break
    failed = _json_failure(bytes(body))
    if failed is None:
        return _error_of(answer, -1, f"unreadable answer (HTTP {answer.status_code})")
    return _error_of(answer, *failed)


def _refusal(error: FeishuError) -> AttachmentRefused | None:
    """The final answers of the message resource API, as the requester is told them."""
    if error.code == RESOURCE_TOO_LARGE:
        return AttachmentTooLarge(
            Reason("larger than Feishu's 100 MB limit", "超过飞书 100 MB 的上限")
        )
    reason = RESOURCE_REFUSED.get(error.code)
    if reason is None and error.final:
        reason = Reason(
            f"Feishu refused it (code {error.code})", f"飞书拒绝提供（错误码 {error.code}）"
        )
    return AttachmentRefused(reason) if reason is not None else None
