"""A fake Feishu/Lark Open API (REST and the long connection) and webhook delivery builders.

The real ``lark-oapi`` clients talk to it over HTTP and WebSocket: the tenant token, bot
info, the app's scopes and whether the tenant granted them (``GET
/open-apis/application/v6/scopes``, "查询租户授权状态"), message reply/create,
interactive-card PATCH (``update_multi`` required, 30 KB card limit, 5 updates a second per
message), the files of users' messages (the message resource
API: the bytes with ``Content-Type`` and ``Content-Disposition`` to a valid tenant token and
``type=file`` only, Feishu's JSON errors otherwise), and ``/callback/ws/endpoint`` plus a WebSocket
speaking the SDK's protobuf frames, over which a test pushes real ``im.message.receive_v1``
events and reads the client's acknowledgements; and the cloud documents (docx) and drive
endpoints of long reports (``tests.fakes.feishu_docs``). Every call is recorded; 429s and 5xx are
given on demand. The webhook helpers build deliveries exactly as Feishu does: plain or
AES-256-CBC encrypted, signed with ``X-Lark-Signature``, and the URL challenge.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from Crypto.Cipher import AES
from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.fakes.feishu_docs import DOC_KINDS, DOCS_SCOPES, FakeDocs, doc_kind
from tests.fakes.server import BackgroundServer, Broken, broken_body

APP_ID = "cli_fathom_test"
APP_SECRET = "fake-app-secret"
TENANT = "tenant_1"
BOT_OPEN_ID = "ou_bot_fathom"
#: The scope that makes Feishu deliver every group message to the app ("获取群组中所有消息").
GROUP_MESSAGES_SCOPE = "im:message.group_msg"
#: The scopes docs/feishu.md asks for (all granted), without the optional group messages.
BASE_SCOPES = (
    "im:message:send_as_bot",
    "im:message.p2p_msg:readonly",
    "im:message.group_at_msg:readonly",
    "im:message:readonly",
)
MAX_CARD_BYTES = 30 * 1024
PATCHES_PER_SECOND = 5
RATE_LIMITED = 99991400
INVALID_CARD = 230099  # "Failed to create card content"
BUTTON_TYPES = frozenset(
    {
        "default",
        "primary",
        "danger",
        "text",
        "primary_text",
        "danger_text",
        "primary_filled",
        "danger_filled",
        "laser",
    }
)


@dataclass(frozen=True)
class FeishuCall:
    method: str
    path: str
    body: dict[str, Any]
    size: int  # bytes of the request body
    time: float = field(default_factory=time.time)
    token: str = ""  # the bearer token it carried
    query: dict[str, str] = field(default_factory=dict)


@dataclass
class _Failure:
    status: int
    code: int
    remaining: int
    after: bool = False  # the call takes effect, then its answer is the failure
    body: str | None = None  # a broken body (tests.fakes.server.BROKEN_BODIES)


@dataclass
class FeishuMessage:
    message_id: str
    chat_id: str
    msg_type: str
    content: str
    root_id: str = ""
    parent_id: str = ""
    uuid: str = ""
    versions: list[str] = field(default_factory=list)  # every content, PATCHes included

    @property
    def card(self) -> dict[str, Any]:
        return dict(json.loads(self.content))

    @property
    def markdown(self) -> str:
        """The card's markdown (all markdown elements of its body), or the text."""
        return card_markdown(self.content) if self.msg_type == "interactive" else self.content


@dataclass(frozen=True)
class FakeFile:
    """A file a user attached to a message: what the message resource API serves."""

    data: bytes
    name: str
    content_type: str = "application/octet-stream"
    chunked: bool = False  # sent in pieces without a Content-Length


def card_problem(content: str) -> str | None:
    """What card JSON 2.0 refuses among the parts Fathom sends (None: acceptable): the
    ``action`` module of 1.0, a button without plain text or with an unknown type, a callback
    behaviour without a value object."""
    try:
        card = json.loads(content)
    except ValueError:
        return "not JSON"
    if not isinstance(card, dict) or card.get("schema") != "2.0":
        return None  # only 2.0 cards are checked here

    def walk(elements: Any) -> str | None:
        for element in elements if isinstance(elements, list) else []:
            tag = element.get("tag") if isinstance(element, dict) else None
            if tag == "action":
                return "the action module is not supported in card JSON 2.0"
            if tag == "button":
                text = element.get("text")
                if not isinstance(text, dict) or text.get("tag") != "plain_text":
                    return "a button's text is plain_text"
                if element.get("type", "default") not in BUTTON_TYPES:
                    return f"unknown button type {element.get('type')!r}"
                for behavior in element.get("behaviors") or []:
                    if behavior.get("type") == "callback" and not isinstance(
                        behavior.get("value"), dict
                    ):
                        return "a callback behaviour needs a value object"
            if tag == "column_set":
                for column in element.get("columns") or []:
                    if (problem := walk(column.get("elements"))) is not None:
                        return problem
        return None

    return walk(card.get("body", {}).get("elements"))


def card_buttons(message: FeishuMessage) -> list[dict[str, Any]]:
    """The buttons of a card message, in order (inside column sets too)."""
    found: list[dict[str, Any]] = []

    def walk(elements: list[dict[str, Any]]) -> None:
        for element in elements:
            if element.get("tag") == "button":
                found.append(element)
            for column in element.get("columns") or []:
                walk(column.get("elements") or [])

    walk(message.card.get("body", {}).get("elements", []))
    return found


def card_action_event(
    message: FeishuMessage,
    action: str,
    *,
    operator: str = "ou_user_1",
    token: str = "",
    tenant: str = TENANT,
    value: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A press on the button of ``message`` whose callback value names ``action``
    (``fathom_stop``...), as Feishu calls back: ``card.action.trigger`` (schema 2.0) with the
    operator, the button's value, and the card's message and chat. ``value`` overrides the
    button's own (a forged press)."""
    button = next(
        b
        for b in card_buttons(message)
        for behavior in b.get("behaviors") or []
        if behavior.get("type") == "callback" and behavior["value"].get("action") == action
    )
    callback = next(b for b in button["behaviors"] if b.get("type") == "callback")
    return {
        "schema": "2.0",
        "header": {
            "event_id": uuid.uuid4().hex,
            "token": token,
            "create_time": str(int(time.time() * 1_000_000)),
            "event_type": "card.action.trigger",
            "tenant_key": tenant,
            "app_id": APP_ID,
        },
        "event": {
            "operator": {"tenant_key": tenant, "user_id": "u" + operator[-4:], "open_id": operator},
            "token": f"c-{uuid.uuid4().hex}",
            "action": {
                "value": callback["value"] if value is None else value,
                "tag": "button",
                "timezone": "Asia/Shanghai",
            },
            "host": "im_message",
            "context": {"open_message_id": message.message_id, "open_chat_id": message.chat_id},
        },
    }


def card_markdown(content: str) -> str:
    card = json.loads(content)
    if "text" in card:
        return str(card["text"])
    elements = card.get("body", {}).get("elements", [])
    return "\n".join(str(e.get("content", "")) for e in elements if e.get("tag") == "markdown")


class FakeFeishu:
    """State and behaviour of the fake; every method is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.base_url = "http://127.0.0.1"  # set by FakeFeishuServer.start()
        self._reset_state()

    def reset(self) -> None:
        """Forget everything a test did (the server stays up): its long connections are
        closed from the server's side first, and gone before the state is cleared."""
        self.drop_connection()
        deadline = time.monotonic() + 10
        while self.ws_open and time.monotonic() < deadline:
            time.sleep(0.005)
        with self._lock:
            self._reset_state()

    def _reset_state(self) -> None:
        #: Seconds every Open API call waits before it is answered (a round trip; benchmarks).
        self.latency = 0.0
        self.tokens: set[str] = set()
        self.calls: list[FeishuCall] = []
        self.messages: dict[str, FeishuMessage] = {}
        #: The chat of each user message delivered to the app (``saw``): a reply to one is
        #: in its chat, as on Feishu.
        self.user_chats: dict[str, str] = {}
        self.files: dict[tuple[str, str], FakeFile] = {}  # (message_id, file_key)
        self._by_uuid: dict[str, str] = {}
        self._failures: dict[str, deque[_Failure]] = {}
        self._patch_times: dict[str, deque[float]] = {}
        self._counter = 0
        # long connection
        self.ws_connections = 0  # ever accepted
        self.ws_open = 0  # open now
        self.ws_endpoint_calls = 0
        self.ws_endpoint_delays: list[float] = []  # the next endpoint calls hang this long
        self.ws_silent = False  # accept connections but never answer pings (a hung socket)
        self.ws_ping_interval = 120
        # Open connections, oldest first: (their loop, outbox, close signal).
        self._ws_conns: list[
            tuple[asyncio.AbstractEventLoop, asyncio.Queue[bytes], asyncio.Event]
        ] = []
        self.ws_acks: dict[str, dict[str, Any]] = {}
        #: The app's tenant scopes and whether each is granted (``grant_status`` 1, else 2),
        #: as the scope-status API lists them.
        self.scopes: dict[str, bool] = dict.fromkeys(BASE_SCOPES + DOCS_SCOPES, True)
        #: The app's cloud documents (``tests.fakes.feishu_docs``).
        self.docs = FakeDocs()
        #: Calls of these kinds hang until their event is set (or 30 s pass).
        self.holds: dict[str, threading.Event] = {}
        self.held: list[str] = []  # the kinds of the calls held so far

    # -- test controls ------------------------------------------------------------------
    def saw(self, payload: dict[str, Any]) -> None:
        """A message event delivered to the app: its message now exists in its chat."""
        message = payload.get("event", {}).get("message")
        if isinstance(message, dict) and message.get("message_id"):
            with self._lock:
                self.user_chats[str(message["message_id"])] = str(message.get("chat_id") or "")

    def fail_next(
        self,
        kind: str,
        status: int = 500,
        code: int = 0,
        times: int = 1,
        after: bool = False,
        body: str | None = None,
    ) -> None:
        """The next ``times`` calls of ``kind`` (``reply``, ``patch``, ``create``, ``token``,
        ``bot``, and the kinds of ``tests.fakes.feishu_docs.SCOPES``) get HTTP ``status`` with
        Feishu error ``code`` (429 → rate limited); with ``after``, the call takes effect first
        (the answer is lost on the way back); with ``body`` (one of ``BROKEN_BODIES``), that
        body instead of Feishu's JSON."""
        code = code or (RATE_LIMITED if status == 429 else 1)
        failure = _Failure(status, code, times, after, body)
        with self._lock:
            self._failures.setdefault(kind, deque()).append(failure)

    def add_file(
        self,
        message_id: str,
        file_key: str,
        data: bytes,
        name: str,
        content_type: str = "application/octet-stream",
        chunked: bool = False,
    ) -> None:
        """A file of a user's message (served by the message resource API)."""
        with self._lock:
            self.files[(message_id, file_key)] = FakeFile(data, name, content_type, chunked)

    def calls_to(self, kind: str) -> list[FeishuCall]:
        with self._lock:
            return [c for c in self.calls if _kind(c.method, c.path) == kind]

    def thread(self, root_id: str) -> list[FeishuMessage]:
        """The bot's messages in the thread of ``root_id`` (replies to it), in order."""
        with self._lock:
            return [m for m in self.messages.values() if m.root_id == root_id]

    # -- the API --------------------------------------------------------------------------
    def _take_failure(self, kind: str) -> _Failure | None:
        queue = self._failures.get(kind)
        if not queue:
            return None
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            queue.popleft()
        return failure

    def handle(
        self,
        method: str,
        path: str,
        body: dict[str, Any],
        size: int,
        auth: str,
        query: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any] | Broken, dict[str, str]]:
        kind = _kind(method, path)
        query = query or {}
        with self._lock:
            self.calls.append(
                FeishuCall(
                    method, path, body, size, token=auth.removeprefix("Bearer "), query=query
                )
            )
            failure = self._take_failure(kind)
            if failure is not None:
                if failure.after:
                    self._serve(kind, method, path, body, auth, query)
                if failure.body is not None:
                    return failure.status, Broken(failure.body), {}
                headers = {"x-ogw-ratelimit-reset": "1"} if failure.status == 429 else {}
                return failure.status, {"code": failure.code, "msg": "injected"}, headers
            return self._serve(kind, method, path, body, auth, query)

    def _serve(
        self,
        kind: str,
        method: str,
        path: str,
        body: dict[str, Any],
        auth: str,
        query: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """One call's effect (the lock is held by :meth:`handle`)."""
        if kind == "token":
            if body.get("app_id") != APP_ID or body.get("app_secret") != APP_SECRET:
                return 400, {"code": 10014, "msg": "app secret invalid"}, {}
            token = f"t-{uuid.uuid4().hex}"
            self.tokens.add(token)
            return (
                200,
                {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200},
                {},
            )
        if auth.removeprefix("Bearer ") not in self.tokens:
            return 400, {"code": 99991663, "msg": "Invalid access token for authorization."}, {}
        if kind == "bot":
            bot = {"open_id": BOT_OPEN_ID, "app_name": "Fathom", "activate_status": 2}
            return 200, {"code": 0, "msg": "ok", "bot": bot}, {}
        if kind == "scopes":  # the shape of Feishu's "查询租户授权状态" answer
            listed = [
                {"scope_name": name, "scope_type": "tenant", "grant_status": 1 if ok else 2}
                for name, ok in self.scopes.items()
            ]
            return 200, {"code": 0, "msg": "success", "data": {"scopes": listed}}, {}
        if kind in ("reply", "create"):
            return self._send(kind, path, body)
        if kind == "patch":
            return self._patch(path.rsplit("/", 1)[-1], body)
        if kind in DOC_KINDS:
            return self.docs.serve(kind, path, query or {}, body, self.scopes)
        return 404, {"code": 404, "msg": f"no such API {method} {path}"}, {}

    def _send(
        self, kind: str, path: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        msg_type, content = str(body.get("msg_type") or ""), str(body.get("content") or "")
        if msg_type not in ("text", "interactive", "post") or not content:
            return 400, {"code": 230001, "msg": "invalid msg_type or content"}, {}
        if msg_type == "interactive" and len(content.encode()) > MAX_CARD_BYTES:
            return 400, {"code": 230025, "msg": "message content too long"}, {}
        if msg_type == "interactive" and (problem := card_problem(content)):
            return 400, {"code": INVALID_CARD, "msg": f"invalid card: {problem}"}, {}
        key = str(body.get("uuid") or "")
        if len(key) > 50:
            return 400, {"code": 230001, "msg": "uuid longer than 50 characters"}, {}
        if key and key in self._by_uuid:  # the same send again: the same message
            return (
                200,
                {"code": 0, "msg": "ok", "data": self._data(self.messages[self._by_uuid[key]])},
                {},
            )
        if kind == "reply":
            parent = self.messages.get(path.split("/")[-2])
            parent_id = path.split("/")[-2]
            root = (parent.root_id or parent.message_id) if parent else parent_id
            chat = parent.chat_id if parent else self.user_chats.get(parent_id, "oc_chat")
        else:
            root, parent_id, chat = "", "", str(body.get("receive_id") or "")
        self._counter += 1
        message = FeishuMessage(
            f"om_bot_{self._counter}", chat, msg_type, content, root, parent_id, key, [content]
        )
        self.messages[message.message_id] = message
        if key:
            self._by_uuid[key] = message.message_id
        return 200, {"code": 0, "msg": "ok", "data": self._data(message)}, {}

    def _patch(
        self, message_id: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        message = self.messages.get(message_id)
        if message is None:
            return 400, {"code": 230011, "msg": "message not found"}, {}
        content = str(body.get("content") or "")
        if message.msg_type != "interactive":
            return 400, {"code": 230001, "msg": "only cards can be patched"}, {}
        if len(content.encode()) > MAX_CARD_BYTES:
            return 400, {"code": 230025, "msg": "card content too long"}, {}
        try:
            new = json.loads(content)
        except ValueError:
            return 400, {"code": 230001, "msg": "content is not JSON"}, {}
        if problem := card_problem(content):
            return 400, {"code": INVALID_CARD, "msg": f"invalid card: {problem}"}, {}
        if not (
            message.card.get("config", {}).get("update_multi")
            and new.get("config", {}).get("update_multi")
        ):
            return 400, {"code": 230099, "msg": "update_multi must be true before and after"}, {}
        now = time.monotonic()
        times = self._patch_times.setdefault(message_id, deque())
        while times and now - times[0] > 1.0:
            times.popleft()
        if len(times) >= PATCHES_PER_SECOND:
            return (
                429,
                {"code": RATE_LIMITED, "msg": "too many updates of this card"},
                {"x-ogw-ratelimit-reset": "1"},
            )
        times.append(now)
        message.content = content
        message.versions.append(content)
        return 200, {"code": 0, "msg": "ok"}, {}

    @staticmethod
    def _data(message: FeishuMessage) -> dict[str, Any]:
        return {
            "message_id": message.message_id,
            "root_id": message.root_id,
            "parent_id": message.parent_id,
            "chat_id": message.chat_id,
            "msg_type": message.msg_type,
            "body": {"content": message.content},
        }

    def resource(
        self, path: str, query: dict[str, str], auth: str
    ) -> tuple[int, dict[str, Any] | Broken | FakeFile, dict[str, str]]:
        """``GET /open-apis/im/v1/messages/:message_id/resources/:file_key?type=file``, as
        Feishu answers it ("获取消息中的资源文件"): the file's bytes, or its JSON error."""
        token = auth.removeprefix("Bearer ")
        with self._lock:
            self.calls.append(FeishuCall("GET", path, {}, 0, token=token, query=dict(query)))
            failure = self._take_failure("resource")
            if failure is not None:
                if failure.body is not None:
                    return failure.status, Broken(failure.body), {}
                headers = {"x-ogw-ratelimit-reset": "1"} if failure.status == 429 else {}
                return failure.status, {"code": failure.code, "msg": "injected"}, headers
            if token not in self.tokens:
                return 400, {"code": 99991663, "msg": "Invalid access token for authorization."}, {}
            parts = path.split(
                "/"
            )  # ['', 'open-apis', 'im', 'v1', 'messages', mid, 'resources', key]
            if query.get("type") not in ("file", "image"):
                return 400, {"code": 234001, "msg": "Invalid request param."}, {}
            found = self.files.get((parts[5], parts[7])) if len(parts) == 8 else None
            if found is None:
                return 400, {"code": 234003, "msg": "File not in message."}, {}
            disposition = f"attachment; filename*=UTF-8''{quote(found.name)}"
            return (
                200,
                found,
                {"Content-Type": found.content_type, "Content-Disposition": disposition},
            )

    # -- the long connection ----------------------------------------------------------------
    def push_event(self, event: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """Send an event over the open long connection; returns the client's answer
        (``{"code": 200, ...}`` when its handler returned)."""
        with self._lock:
            if not self._ws_conns:
                raise RuntimeError("no long connection is open")
            loop, outbox, _ = self._ws_conns[-1]  # the newest
        message_id = uuid.uuid4().hex
        frame = Frame(SeqID=1, LogID=1, service=1, method=1, payload=json.dumps(event).encode())
        for key, value in (
            ("type", "event"),
            ("message_id", message_id),
            ("sum", "1"),
            ("seq", "0"),
            ("trace_id", "t"),
        ):
            header = frame.headers.add()
            header.key, header.value = key, value
        asyncio.run_coroutine_threadsafe(outbox.put(frame.SerializeToString()), loop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if message_id in self.ws_acks:
                    return self.ws_acks[message_id]
            time.sleep(0.01)
        raise TimeoutError("the client did not acknowledge the event")

    def drop_connection(self) -> None:
        """Close every open long connection from the server side."""
        with self._lock:
            conns = list(self._ws_conns)
        for loop, _, closing in conns:
            loop.call_soon_threadsafe(closing.set)

    async def serve_ws(self, websocket: WebSocket) -> None:
        await websocket.accept()
        loop = asyncio.get_running_loop()
        outbox: asyncio.Queue[bytes] = asyncio.Queue()
        closing = asyncio.Event()
        with self._lock:
            self.ws_connections += 1
            self.ws_open += 1
            self._ws_conns.append((loop, outbox, closing))

        async def send() -> None:
            while True:
                await websocket.send_bytes(await outbox.get())

        sender = asyncio.create_task(send())
        closer = asyncio.create_task(closing.wait())
        try:
            while True:
                receive = asyncio.create_task(websocket.receive_bytes())
                done, _ = await asyncio.wait({receive, closer}, return_when=asyncio.FIRST_COMPLETED)
                if closer in done:
                    receive.cancel()
                    await websocket.close()
                    return
                frame = Frame()
                frame.ParseFromString(receive.result())
                headers = {h.key: h.value for h in frame.headers}
                if frame.method == 0 and headers.get("type") == "ping":
                    if not self.ws_silent:
                        pong = Frame(SeqID=0, LogID=0, service=frame.service, method=0)
                        header = pong.headers.add()
                        header.key, header.value = "type", "pong"
                        pong.payload = json.dumps({"PingInterval": self.ws_ping_interval}).encode()
                        await outbox.put(pong.SerializeToString())
                elif frame.method == 1:  # the client's answer to an event
                    with self._lock:
                        self.ws_acks[headers.get("message_id", "")] = json.loads(frame.payload)
        except (WebSocketDisconnect, RuntimeError):
            return
        finally:
            sender.cancel()
            closer.cancel()
            with self._lock:
                self.ws_open -= 1
                self._ws_conns = [c for c in self._ws_conns if c[1] is not outbox]


def _kind(method: str, path: str) -> str:
    if (docs := doc_kind(method, path)) is not None:
        return docs
    if path.endswith("/tenant_access_token/internal"):
        return "token"
    if path.endswith("/bot/v3/info") or path.endswith("/bot/v3/info/"):
        return "bot"
    if method == "GET" and path.rstrip("/").endswith("/application/v6/scopes"):
        return "scopes"
    if method == "POST" and path.endswith("/reply"):
        return "reply"
    if method == "POST" and path.rstrip("/").endswith("/im/v1/messages"):
        return "create"
    if method == "PATCH" and "/im/v1/messages/" in path:
        return "patch"
    if method == "GET" and "/im/v1/messages/" in path and "/resources/" in path:
        return "resource"
    return "other"


def build_feishu_app(fake: FakeFeishu) -> Starlette:
    async def api(request: Request) -> Response:
        kind = _kind(request.method, request.url.path)
        hold = fake.holds.get(kind)
        if hold is not None:  # a call that hangs until the test lets it go
            fake.held.append(kind)
            await asyncio.to_thread(hold.wait, 30)
        if fake.latency > 0:
            await asyncio.sleep(fake.latency)
        if _kind(request.method, request.url.path) == "resource":
            status, answer, headers = fake.resource(
                request.url.path,
                dict(request.query_params),
                request.headers.get("authorization", ""),
            )
            if isinstance(answer, Broken):
                return broken_body(answer.kind, status)
            if isinstance(answer, FakeFile):
                if answer.chunked:
                    data = answer.data

                    async def pieces() -> AsyncIterator[bytes]:
                        for start in range(0, len(data), 64 * 1024):
                            yield data[start : start + 64 * 1024]

                    return StreamingResponse(pieces(), status, headers=headers)
                return Response(answer.data, status, headers=headers)
            return JSONResponse(answer, status, headers=headers)
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return JSONResponse({"code": 9499, "msg": "bad json"}, 400)
        status, payload, headers = fake.handle(
            request.method,
            request.url.path,
            body,
            len(raw),
            request.headers.get("authorization", ""),
            dict(request.query_params),
        )
        if isinstance(payload, Broken):
            return broken_body(payload.kind, status)
        return JSONResponse(payload, status, headers=headers)

    async def endpoint(request: Request) -> Response:
        body = json.loads(await request.body() or b"{}")
        with fake._lock:
            fake.ws_endpoint_calls += 1
            delay = fake.ws_endpoint_delays.pop(0) if fake.ws_endpoint_delays else 0.0
        if delay:
            await asyncio.sleep(delay)
        if body.get("AppID") != APP_ID or body.get("AppSecret") != APP_SECRET:
            return JSONResponse({"code": 514, "msg": "auth failed"})
        ws = fake.base_url.replace("http://", "ws://")
        config = {
            "ReconnectCount": -1,
            "ReconnectInterval": 1,
            "ReconnectNonce": 0,
            "PingInterval": fake.ws_ping_interval,
        }
        data = {"URL": f"{ws}/ws?device_id=d1&service_id=7", "ClientConfig": config}
        return JSONResponse({"code": 0, "msg": "ok", "data": data})

    return Starlette(
        routes=[
            Route("/callback/ws/endpoint", endpoint, methods=["POST"]),
            WebSocketRoute("/ws", fake.serve_ws),
            Route("/open-apis/{path:path}", api, methods=["GET", "POST", "PATCH", "PUT", "DELETE"]),
        ]
    )


class FakeFeishuServer(BackgroundServer):
    def __init__(
        self, fake: FakeFeishu | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.fake = fake or FakeFeishu()
        super().__init__(build_feishu_app(self.fake), host, port)

    def start(self, timeout: float = 5.0) -> FakeFeishuServer:
        super().start(timeout)
        self.fake.base_url = self.url
        return self

    def reset(self) -> None:
        """The fake as it was when it started: ``FakeFeishu.reset``, and its address its own again
        (a test may point it elsewhere)."""
        self.fake.reset()
        self.fake.base_url = self.url


# -- deliveries, built as Feishu builds them ------------------------------------------------


def message_event(
    text: str | None = None,
    *,
    chat_type: str = "p2p",
    chat_id: str = "oc_chat_1",
    message_id: str | None = None,
    root_id: str = "",
    parent_id: str | None = None,
    thread_id: str = "",
    sender: str = "ou_user_1",
    sender_type: str = "user",
    mention_bot: bool = False,
    mentions: list[tuple[str, str]] = (),  # type: ignore[assignment]
    message_type: str = "text",
    content: dict[str, Any] | None = None,
    event_id: str | None = None,
    token: str = "",
    tenant: str = TENANT,
) -> dict[str, Any]:
    """An ``im.message.receive_v1`` event (schema 2.0). ``mention_bot`` puts ``@_user_1`` (the
    bot) before the text; ``mentions`` adds other people (open id, name). A reply has
    ``root_id`` (the first message of its reply tree), ``parent_id`` (the message it
    answers; the root unless given) and, inside a topic, ``thread_id`` (``omt_…``), as
    Feishu's "消息管理概述" describes them and the SDK's ``EventMessage`` carries them."""
    people: list[dict[str, Any]] = []
    prefix = ""
    if mention_bot:
        people.append(
            {
                "key": "@_user_1",
                "id": {"open_id": BOT_OPEN_ID, "union_id": "on_bot"},
                "name": "Fathom",
                "tenant_key": tenant,
            }
        )
        prefix = "@_user_1 "
    for open_id, name in mentions:
        key = f"@_user_{len(people) + 1}"
        people.append(
            {
                "key": key,
                "id": {"open_id": open_id, "user_id": "u" + open_id[-4:]},
                "name": name,
                "tenant_key": tenant,
            }
        )
    if content is None:
        content = {"text": prefix + (text or "")}
    message_id = message_id or f"om_{uuid.uuid4().hex[:16]}"
    message: dict[str, Any] = {
        "message_id": message_id,
        "root_id": root_id,
        "parent_id": root_id if parent_id is None else parent_id,
        "create_time": str(int(time.time() * 1000)),
        "chat_id": chat_id,
        "chat_type": chat_type,
        "message_type": message_type,
        "content": json.dumps(content, ensure_ascii=False),
    }
    if thread_id:
        message["thread_id"] = thread_id
    if people:
        message["mentions"] = people
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "event_type": "im.message.receive_v1",
            "create_time": str(int(time.time() * 1000)),
            "token": token,
            "app_id": APP_ID,
            "tenant_key": tenant,
        },
        "event": {
            "sender": {
                "sender_id": {
                    "open_id": sender,
                    "union_id": "on_" + sender,
                    "user_id": "u_" + sender,
                },
                "sender_type": sender_type,
                "tenant_key": tenant,
            },
            "message": message,
        },
    }


def file_event(
    file_key: str, file_name: str, *, message_type: str = "file", **kwargs: Any
) -> dict[str, Any]:
    """A file message (``message_type`` ``file``, or ``media`` for a video) as Feishu sends
    it: ``content`` is ``{"file_key", "file_name"}`` (a video's also has ``image_key`` and
    ``duration``), and no mentions (a file cannot mention anyone)."""
    content: dict[str, Any] = {"file_key": file_key, "file_name": file_name}
    if message_type == "media":
        content.update(image_key="img_v3_cover", duration=2000)
    return message_event(None, message_type=message_type, content=content, **kwargs)


def challenge_body(challenge: str, token: str) -> dict[str, Any]:
    return {"challenge": challenge, "token": token, "type": "url_verification"}


def encrypt(payload: dict[str, Any], encrypt_key: str, *, escaped: bool = False) -> dict[str, str]:
    """``{"encrypt": base64(iv + AES-256-CBC(sha256(key), PKCS7(json)))}``, as Feishu sends.
    ``escaped``: the JSON with every non-ASCII character as an escape (``"\\ud800"``: the
    only way a lone surrogate can be sent)."""
    data = json.dumps(payload, ensure_ascii=escaped).encode()
    pad = AES.block_size - len(data) % AES.block_size
    iv = os.urandom(AES.block_size)
    cipher = AES.new(hashlib.sha256(encrypt_key.encode()).digest(), AES.MODE_CBC, iv)
    return {"encrypt": base64.b64encode(iv + cipher.encrypt(data + bytes([pad]) * pad)).decode()}


def signed_headers(
    body: bytes, encrypt_key: str, timestamp: int | None = None, nonce: str = "n0nce"
) -> dict[str, str]:
    """``X-Lark-Request-Timestamp``, ``-Nonce`` and ``X-Lark-Signature`` (plain SHA-256 of
    timestamp + nonce + encrypt key + body)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = hashlib.sha256((ts + nonce + encrypt_key).encode() + body).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Lark-Request-Timestamp": ts,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": signature,
    }
