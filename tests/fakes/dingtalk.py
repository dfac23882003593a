"""A fake DingTalk OpenAPI (REST, the stream gateway, session webhooks) and request builders.

The real ``dingtalk-stream`` client opens its stream through ``/v1.0/gateway/connections/open``
and a WebSocket speaking the SDK's JSON frames, over which a test pushes real bot messages and
reads the acknowledgements (with the time each arrived). Fathom's OpenAPI calls (access token,
card create-and-deliver and update, robot group and one-to-one sends) and its posts to a
message's session webhook land here too; every call is recorded; 403 (a missing permission),
429 and 5xx are given on demand, and a session webhook can be made to expire. The HTTP
callback helpers sign requests exactly as DingTalk does.

Files: :meth:`FakeDingTalk.add_file` keeps a file under a ``downloadCode``; the robot's
file-download OpenAPI (``POST /v1.0/robot/messageFiles/download``) checks the access token
and the robot code and answers a ``downloadUrl`` on the fake's own host (``/files/<key>``),
which serves the bytes to a plain GET (refusing one that carries the access token or a
``Content-Type``, as a signed OSS address does). A code not issued, or expired, gets a JSON
refusal; the permission can be withdrawn; ``fail_next("file_code")`` / ``("file_get")``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.fakes.server import BackgroundServer, Broken, broken_body

CLIENT_ID = "dingfathomtest"
CLIENT_SECRET = "fake-dingtalk-secret"
CORP = "ding_corp_1"
BOT_TOPIC = "/v1.0/im/bot/messages/get"
CARD_TOPIC = "/v1.0/card/instances/callback"
BUTTON_CARD_TEMPLATE = "1366a1eb-bc54-4859-ac88-517c56a9acb1.schema"
MAX_BODY_BYTES = 20_000


@dataclass(frozen=True)
class DingTalkCall:
    method: str
    path: str
    body: dict[str, Any]
    size: int
    time: float = field(default_factory=time.time)
    token: str = ""  # the x-acs-dingtalk-access-token it carried


@dataclass
class _Failure:
    status: int
    code: str
    remaining: int
    body: str | None = None  # a broken body (tests.fakes.server.BROKEN_BODIES)


def _params_problem(params: dict[str, Any]) -> str | None:
    """What DingTalk refuses in a card's variables: every value a string, and the button
    card's ``sys_full_json_obj`` a JSON object whose ``msgButtons`` each have a text and
    either a link or a callback id."""
    if not all(isinstance(v, str) for v in params.values()):
        return "cardParamMap values are strings"
    raw = params.get("sys_full_json_obj")
    if raw is None:
        return None
    try:
        buttons = json.loads(raw).get("msgButtons")
    except (ValueError, AttributeError):
        return "sys_full_json_obj is a JSON object"
    for button in buttons if isinstance(buttons, list) else [None]:
        if not isinstance(button, dict) or not button.get("text"):
            return "a button has a text"
        if not (button.get("url") or (button.get("request") and button.get("id"))):
            return "a button opens a url or calls back with an id"
    return None


@dataclass
class FakeCard:
    out_track_id: str
    template_id: str
    open_space_id: str
    versions: list[dict[str, Any]] = field(default_factory=list)  # every cardParamMap
    #: Where presses go: "STREAM", or the callback route key it was created with.
    callback: str = "STREAM"

    @property
    def params(self) -> dict[str, Any]:
        return self.versions[-1]

    @property
    def button_ids(self) -> list[str]:
        """The callback ids of the buttons the card shows now."""
        raw = self.params.get("sys_full_json_obj")
        buttons = json.loads(raw).get("msgButtons", []) if raw else []
        return [str(b["id"]) for b in buttons if b.get("request")]


@dataclass
class Sent:
    """A message the bot sent: through a session webhook or the robot OpenAPI."""

    via: str  # "webhook", "group", "single"
    conversation: str
    msgtype: str
    title: str
    text: str
    at_user_ids: list[str]
    size: int


class FakeDingTalk:
    """State and behaviour of the fake; every method is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.base_url = "http://127.0.0.1"  # set by FakeDingTalkServer.start()
        self._reset_state()

    def reset(self) -> None:
        """Forget everything a test did (the server stays up): its streams are closed from
        the server's side first, and gone before the state is cleared."""
        self.drop_streams()
        deadline = time.monotonic() + 10
        while self.stream_open and time.monotonic() < deadline:
            time.sleep(0.005)
        with self._lock:
            self._reset_state()

    def _reset_state(self) -> None:
        self.tokens: set[str] = set()
        self.calls: list[DingTalkCall] = []
        self.cards: dict[str, FakeCard] = {}
        self.sent: list[Sent] = []
        self.webhooks: dict[str, tuple[str, float]] = {}  # id -> (conversation, expires at)
        self._failures: dict[str, deque[_Failure]] = {}
        self.cards_forbidden = False  # the app lacks the card permission
        self.card_routes: dict[str, str] = {}  # callbackRouteKey -> the registered address
        # files a user sent the robot: downloadCode -> bytes; what the storage served
        self.files: dict[str, bytes] = {}
        self.expired_codes: set[str] = set()
        self.files_forbidden = False  # the app lacks qyapi_robot_sendmsg
        self._file_keys: dict[str, str] = {}  # storage key -> downloadCode
        self.file_gets: list[dict[str, str]] = []  # the headers of every GET of a file
        # the stream
        self.stream_connections = 0
        self.stream_open = 0
        self.acks: dict[str, tuple[float, dict[str, Any]]] = {}  # messageId -> (time, ack)
        self._streams: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[str]]] = []
        self._closers: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    # -- test controls ---------------------------------------------------------------------
    def fail_next(
        self,
        kind: str,
        status: int = 500,
        code: str = "",
        times: int = 1,
        body: str | None = None,
    ) -> None:
        """The next ``times`` calls of ``kind`` (``token``, ``card_create``, ``card_update``,
        ``group``, ``single``, ``webhook``, ``gateway``) fail with HTTP ``status``; with
        ``body`` (one of ``BROKEN_BODIES``), that body instead of DingTalk's JSON."""
        code = code or ("Throttling.Api" if status == 429 else "ServiceUnavailable")
        with self._lock:
            self._failures.setdefault(kind, deque()).append(_Failure(status, code, times, body))

    def session_webhook(self, conversation: str, valid_for: float = 5400.0) -> tuple[str, int]:
        """A session webhook URL for ``conversation`` and its expiry (epoch ms)."""
        hook = uuid.uuid4().hex
        expires = time.time() + valid_for
        with self._lock:
            self.webhooks[hook] = (conversation, expires)
        return f"{self.base_url}/robot/sendBySession/{hook}", int(expires * 1000)

    def add_file(self, data: bytes, code: str | None = None) -> str:
        """Keep a file a user sent the robot; returns its ``downloadCode``."""
        code = code or f"dl{uuid.uuid4().hex}+/=="  # DingTalk's codes are base64
        with self._lock:
            self.files[code] = data
        return code

    def calls_to(self, kind: str) -> list[DingTalkCall]:
        with self._lock:
            return [c for c in self.calls if _kind(c.method, c.path) == kind]

    def sent_to(self, conversation: str) -> list[Sent]:
        with self._lock:
            return [s for s in self.sent if s.conversation == conversation]

    def _take_failure(self, kind: str) -> _Failure | None:
        queue = self._failures.get(kind)
        if not queue:
            return None
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            queue.popleft()
        return failure

    # -- the API -----------------------------------------------------------------------------
    def handle(
        self, method: str, path: str, body: dict[str, Any], size: int, token: str
    ) -> tuple[int, dict[str, Any] | Broken]:
        kind = _kind(method, path)
        with self._lock:
            self.calls.append(DingTalkCall(method, path, body, size, token=token))
            failure = self._take_failure(kind)
            if failure is not None and failure.body is not None:
                return failure.status, Broken(failure.body)
            if failure is not None:
                return failure.status, {"code": failure.code, "message": "injected"}
            if kind == "token":
                if body.get("appKey") != CLIENT_ID or body.get("appSecret") != CLIENT_SECRET:
                    return 400, {"code": "invalidClientIdOrSecret", "message": "bad app"}
                issued = f"tok{uuid.uuid4().hex}"
                self.tokens.add(issued)
                return 200, {"accessToken": issued, "expireIn": 7200}
            if kind == "webhook":
                return self._webhook(path.rsplit("/", 1)[-1], body, size)
            if token not in self.tokens:
                return 401, {"code": "InvalidAuthentication", "message": "token invalid"}
            if kind == "card_create":
                return self._create_card(body)
            if kind == "card_route":
                key, url = (
                    str(body.get("callbackRouteKey") or ""),
                    str(body.get("callbackUrl") or ""),
                )
                if not key or not url.startswith(("http://", "https://")):
                    return 400, {
                        "code": "param.invalid",
                        "message": "callbackRouteKey, callbackUrl",
                    }
                self.card_routes[key] = url
                return 200, {"success": True, "result": {"callbackUrl": url}}
            if kind == "card_update":
                card = self.cards.get(str(body.get("outTrackId")))
                if card is None:
                    return 404, {"code": "card.notExist", "message": "no such card"}
                params = dict(body.get("cardData", {}).get("cardParamMap", {}))
                if (problem := _params_problem(params)) is not None:
                    return 400, {"code": "param.invalid", "message": problem}
                card.versions.append({**card.params, **params})
                return 200, {"success": True}
            if kind in ("group", "single"):
                return self._robot_send(kind, body, size)
            if kind == "file_code":
                return self._file_code(body)
        return 404, {"code": "NotFound", "message": f"no such API {method} {path}"}

    def _file_code(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The file-download OpenAPI. DingTalk's exact codes for a bad code are not
        documented on the API page; these follow its JSON refusals (``code``, ``message``,
        ``requestid``) and its permission answer's shape."""
        if self.files_forbidden:
            return 403, {
                "code": "Forbidden.AccessDenied.AccessTokenPermissionDenied",
                "message": "没有调用该接口的权限",
                "requiredScopes": ["qyapi_robot_sendmsg"],
                "requestid": uuid.uuid4().hex,
            }
        if body.get("robotCode") != CLIENT_ID:
            return 400, {
                "code": "robot.not.exist",
                "message": "机器人不存在",
                "requestid": uuid.uuid4().hex,
            }
        code = str(body.get("downloadCode") or "")
        if code in self.expired_codes or code not in self.files:
            return 400, {
                "code": "invalidParameter.downloadCode.invalid",
                "message": "downloadCode 无效或已过期",
                "requestid": uuid.uuid4().hex,
            }
        key = uuid.uuid4().hex
        self._file_keys[key] = code
        url = f"{self.base_url}/files/ddmedia%2F{key}.file?x-oss-signature=sig{key[:8]}"
        return 200, {"downloadUrl": url}

    def serve_file(self, key: str, headers: dict[str, str]) -> tuple[int, bytes | Broken]:
        """A GET of a file's temporary address: the bytes, or OSS's XML refusal."""
        with self._lock:
            self.file_gets.append(headers)
            failure = self._take_failure("file_get")
            if failure is not None:
                return failure.status, Broken(failure.body or "html")
            code = self._file_keys.get(key.removeprefix("ddmedia/").removesuffix(".file"))
            signed = "x-acs-dingtalk-access-token" not in headers and "content-type" not in headers
            if code is None or not signed:
                return 403, b'<?xml version="1.0"?><Error><Code>AccessDenied</Code></Error>'
            return 200, self.files[code]

    def _create_card(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.cards_forbidden:
            return 403, {
                "code": "Forbidden.AccessDenied.AccessTokenPermissionDenied",
                "message": "没有调用该接口的权限",
                "requiredScopes": ["Card.Instance.Write"],
            }
        track = str(body.get("outTrackId") or "")
        space = str(body.get("openSpaceId") or "")
        if not track or not space.startswith(("dtv1.card//IM_GROUP.", "dtv1.card//IM_ROBOT.")):
            return 400, {"code": "param.invalid", "message": "outTrackId and openSpaceId"}
        params = dict(body.get("cardData", {}).get("cardParamMap", {}))
        if (problem := _params_problem(params)) is not None:
            return 400, {"code": "param.invalid", "message": problem}
        route = str(body.get("callbackRouteKey") or "")
        if body.get("callbackType") == "HTTP" and route not in self.card_routes:
            return 400, {"code": "param.invalid", "message": "callbackRouteKey not registered"}
        if track not in self.cards:
            template = str(body.get("cardTemplateId") or "")
            callback = route if body.get("callbackType") == "HTTP" else "STREAM"
            self.cards[track] = FakeCard(track, template, space, [params], callback)
        return 200, {"success": True, "result": {"outTrackId": track}}

    def _robot_send(self, kind: str, body: dict[str, Any], size: int) -> tuple[int, dict[str, Any]]:
        if size > MAX_BODY_BYTES:
            return 400, {"code": "invalidParameter.body.size", "message": "body too large"}
        try:
            param = json.loads(body.get("msgParam") or "{}")
        except ValueError:
            return 400, {"code": "invalidParameter.msgParam", "message": "msgParam is no JSON"}
        conversation = (
            str(body.get("openConversationId") or "")
            if kind == "group"
            else "single:" + ",".join(body.get("userIds") or [])
        )
        self.sent.append(
            Sent(
                kind,
                conversation,
                str(body.get("msgKey")),
                param.get("title", ""),
                param.get("text", ""),
                [],
                size,
            )
        )
        return 200, {"processQueryKey": uuid.uuid4().hex}

    def _webhook(self, hook: str, body: dict[str, Any], size: int) -> tuple[int, dict[str, Any]]:
        conversation, expires = self.webhooks.get(hook, ("", 0.0))
        if time.time() > expires:
            return 200, {"errcode": 300001, "errmsg": "session webhook expired"}
        if size > MAX_BODY_BYTES:
            return 200, {"errcode": 460101, "errmsg": "body 大小不合法"}
        msgtype = str(body.get("msgtype") or "")
        content = body.get(msgtype) or {}
        text = content.get("text") or content.get("content") or ""
        at = body.get("at") or {}
        self.sent.append(
            Sent(
                "webhook",
                conversation,
                msgtype,
                content.get("title", ""),
                text,
                list(at.get("atUserIds") or []),
                size,
            )
        )
        return 200, {"errcode": 0, "errmsg": "ok"}

    # -- the stream -------------------------------------------------------------------------------
    def push(
        self,
        data: dict[str, Any],
        *,
        message_id: str | None = None,
        timeout: float = 10.0,
        topic: str = BOT_TOPIC,
    ) -> dict[str, Any]:
        """A bot message (or, with ``topic`` :data:`CARD_TOPIC`, a card callback) over the
        open stream (the newest); returns the client's ack."""
        message_id = message_id or uuid.uuid4().hex
        frame = {
            "specVersion": "1.0",
            "type": "CALLBACK",
            "headers": {
                "appId": CLIENT_ID,
                "connectionId": "conn-1",
                "contentType": "application/json",
                "messageId": message_id,
                "time": str(int(time.time() * 1000)),
                "topic": topic,
            },
            "data": json.dumps(data, ensure_ascii=False),
        }
        with self._lock:
            if not self._streams:
                raise RuntimeError("no stream is open")
            loop, outbox = self._streams[-1]
        asyncio.run_coroutine_threadsafe(outbox.put(json.dumps(frame)), loop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if message_id in self.acks:
                    return self.acks[message_id][1]
            time.sleep(0.01)
        raise TimeoutError("the client did not acknowledge the message")

    def drop_streams(self) -> None:
        """Close every open stream from the server side."""
        with self._lock:
            closers = list(self._closers)
        for loop, closing in closers:
            loop.call_soon_threadsafe(closing.set)

    async def serve_stream(self, websocket: WebSocket) -> None:
        await websocket.accept()
        loop = asyncio.get_running_loop()
        outbox: asyncio.Queue[str] = asyncio.Queue()
        closing = asyncio.Event()
        with self._lock:
            self.stream_connections += 1
            self.stream_open += 1
            self._streams.append((loop, outbox))
            self._closers.append((loop, closing))

        async def close_when_told() -> None:
            await closing.wait()
            await websocket.close()

        closer = asyncio.create_task(close_when_told())

        async def send() -> None:
            while True:
                await websocket.send_text(await outbox.get())

        sender = asyncio.create_task(send())
        try:
            while True:
                ack = json.loads(await websocket.receive_text())
                message_id = str(ack.get("headers", {}).get("messageId", ""))
                with self._lock:
                    self.acks[message_id] = (time.time(), ack)
        except (WebSocketDisconnect, RuntimeError, ValueError):
            return
        finally:
            sender.cancel()
            closer.cancel()
            with self._lock:
                self.stream_open -= 1
                self._streams = [s for s in self._streams if s[1] is not outbox]
                self._closers = [c for c in self._closers if c[1] is not closing]


def _kind(method: str, path: str) -> str:
    if path == "/v1.0/oauth2/accessToken":
        return "token"
    if path == "/v1.0/gateway/connections/open":
        return "gateway"
    if path == "/v1.0/card/instances/createAndDeliver":
        return "card_create"
    if path == "/v1.0/card/callbacks/register":
        return "card_route"
    if path == "/v1.0/card/instances" and method == "PUT":
        return "card_update"
    if path == "/v1.0/robot/groupMessages/send":
        return "group"
    if path == "/v1.0/robot/oToMessages/batchSend":
        return "single"
    if path.startswith("/robot/sendBySession/"):
        return "webhook"
    if path == "/v1.0/robot/messageFiles/download":
        return "file_code"
    return "other"


def build_dingtalk_app(fake: FakeDingTalk) -> Starlette:
    async def api(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return JSONResponse({"code": "InvalidJson", "message": "bad json"}, 400)
        token = request.headers.get("x-acs-dingtalk-access-token", "")
        status, payload = fake.handle(request.method, request.url.path, body, len(raw), token)
        if isinstance(payload, Broken):
            return broken_body(payload.kind, status)
        return JSONResponse(payload, status)

    async def gateway(request: Request) -> Response:
        body = json.loads(await request.body() or b"{}")
        with fake._lock:
            fake.calls.append(DingTalkCall("POST", request.url.path, body, 0))
            failure = fake._take_failure("gateway")
        if failure is not None:
            return JSONResponse({"code": failure.code}, failure.status)
        if body.get("clientId") != CLIENT_ID or body.get("clientSecret") != CLIENT_SECRET:
            return JSONResponse({"code": "invalidClient", "message": "bad client"}, 401)
        endpoint = fake.base_url.replace("http://", "ws://") + "/stream"
        return JSONResponse({"endpoint": endpoint, "ticket": uuid.uuid4().hex})

    async def file(request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        status, payload = fake.serve_file(request.path_params["key"], headers)
        if isinstance(payload, Broken):
            return broken_body(payload.kind, status)
        kind = "application/octet-stream" if status == 200 else "application/xml"
        return Response(payload, status, media_type=kind)

    return Starlette(
        routes=[
            Route("/v1.0/gateway/connections/open", gateway, methods=["POST"]),
            Route("/files/{key:path}", file, methods=["GET"]),
            WebSocketRoute("/stream", fake.serve_stream),
            Route("/{path:path}", api, methods=["GET", "POST", "PUT"]),
        ]
    )


class FakeDingTalkServer(BackgroundServer):
    def __init__(
        self, fake: FakeDingTalk | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.fake = fake or FakeDingTalk()
        super().__init__(build_dingtalk_app(self.fake), host, port)

    def start(self, timeout: float = 5.0) -> FakeDingTalkServer:
        super().start(timeout)
        self.fake.base_url = self.url
        return self

    def reset(self) -> None:
        """The fake as it was when it started: ``FakeDingTalk.reset``, and its address its own again
        (a test may point it elsewhere)."""
        self.fake.reset()
        self.fake.base_url = self.url


# -- messages, built as DingTalk builds them ------------------------------------------------------


def bot_message(
    fake: FakeDingTalk,
    text: str | None,
    *,
    group: bool = False,
    conversation: str | None = None,
    msg_id: str | None = None,
    sender_staff_id: str = "staff_1",
    sender_nick: str = "Alice",
    at_bot: bool = True,
    message_type: str = "text",
    webhook_valid_for: float = 5400.0,
    replied_to: str | None = None,
    webhook: str | None = None,
    quote_under_text: bool = False,
    quoted_sender: str | None = None,
    quoted_text: str = "…",
    rich_text: list[dict[str, Any]] | None = None,
    file: tuple[str, str] | None = None,
    quoted_file: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A robot message (the stream's ``data`` and the HTTP callback's body). In a group the
    @bot part is already removed by DingTalk and the text starts with a space.

    A quote-reply (``replied_to``: the quoted msgId, or "" for a quote without one) carries
    ``repliedMsg`` at the top level, or with ``quote_under_text`` under ``text`` (as several
    public integrations receive it); ``quoted_sender`` is who sent the quoted message (the
    robot: ``"bot_user_1"``). ``rich_text`` makes a ``richText`` message of those parts.

    ``file`` (downloadCode, fileName) makes a ``file`` message, shaped as a real stream
    delivery (dingtalk-stream-sdk's Rust test resource ``cb_msg_file.json``: ``content`` with
    ``downloadCode``, ``fileId``, ``fileName``, ``spaceId``); ``quoted_file`` quotes one
    (``repliedMsg`` with ``msgType: "file"`` and that content, as third-party integrations
    receive it), sent by ``quoted_sender``."""
    conversation = conversation or ("cid_group_1" if group else "cid_single_1")
    hook, expires = fake.session_webhook(conversation, webhook_valid_for)
    data: dict[str, Any] = {
        "conversationId": conversation,
        "chatbotCorpId": CORP,
        "chatbotUserId": "bot_user_1",
        "msgId": msg_id or f"msg{uuid.uuid4().hex[:20]}",
        "senderNick": sender_nick,
        "isAdmin": False,
        "senderStaffId": sender_staff_id,
        "sessionWebhookExpiredTime": expires,
        "createAt": int(time.time() * 1000),
        "senderCorpId": CORP,
        "conversationType": "2" if group else "1",
        "senderId": "$:LWCP_v1:$" + sender_staff_id,
        "sessionWebhook": hook,
        "robotCode": CLIENT_ID,
        "msgtype": message_type,
        "isInAtList": at_bot if group else True,
    }
    if group:
        data["conversationTitle"] = "Research group"
    if webhook is not None:
        data["sessionWebhook"] = webhook
    quote: dict[str, Any] | None = None
    if quoted_file is not None and replied_to is None:
        replied_to = ""
    if replied_to is not None:  # a quote-reply
        quote = {"msgType": "text", "content": {"text": quoted_text}}
        if quoted_file is not None:
            quote = {
                "msgType": "file",
                "senderNick": "Bob",
                "content": {"downloadCode": quoted_file[0], "fileName": quoted_file[1]},
            }
        if replied_to:
            quote["msgId"] = replied_to
        if quoted_sender:
            quote["senderId"] = quoted_sender
    if quote is not None and not quote_under_text:
        data["isReplyMsg"] = True
        data["repliedMsg"] = quote
    if rich_text is not None:
        data["msgtype"] = "richText"
        data["content"] = {"richText": rich_text}
        if group and at_bot:
            data["atUsers"] = [{"dingtalkId": "bot_user_1"}]
    elif message_type == "text":
        data["text"] = {"content": (" " if group else "") + (text or "")}
        if quote is not None and quote_under_text:
            data["text"].update(isReplyMsg=True, repliedMsg=quote)
    elif message_type == "picture":
        data["content"] = {"downloadCode": "dl_1"}
    if file is not None:
        data.pop("text", None)
        data["msgtype"] = "file"
        data["content"] = {
            "downloadCode": file[0],
            "fileId": str(uuid.uuid4().int)[:12],
            "fileName": file[1],
            "spaceId": "28455378906",
        }
    return data


def signed_headers(secret: str = CLIENT_SECRET, timestamp_ms: int | None = None) -> dict[str, str]:
    """``timestamp`` (ms) and ``sign`` = base64(HMAC-SHA256(secret, timestamp + "\\n" + secret))."""
    ts = str(int(time.time() * 1000) if timestamp_ms is None else timestamp_ms)
    digest = hmac.new(secret.encode(), f"{ts}\n{secret}".encode(), hashlib.sha256).digest()
    return {
        "timestamp": ts,
        "sign": base64.b64encode(digest).decode(),
        "Content-Type": "application/json",
    }


def card_callback(
    card: FakeCard, action_id: str, *, user: str = "staff_1", corp: str = CORP
) -> dict[str, Any]:
    """A press on the button ``action_id`` of ``card``, as the stream's card callback
    carries it (``CardCallbackMessage``: outTrackId, corpId, userId, and ``content`` a JSON
    string of ``cardPrivateData`` with the pressed button's id)."""
    assert action_id in card.button_ids, (action_id, card.button_ids)
    content = {"cardPrivateData": {"actionIds": [action_id], "params": {}}}
    return {
        "extension": "{}",
        "corpId": corp,
        "type": "actionCallback",
        "userId": user,
        "content": json.dumps(content),
        "outTrackId": card.out_track_id,
    }
