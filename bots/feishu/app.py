"""Feishu/Lark in ``fathom serve``: both ingress modes, translated for the shared chat layer.

- ``FEISHU_MODE=ws`` (default): the SDK's long connection (``bots.feishu.ws``); its handler
  runs on the SDK's thread, hands the event to the app's loop and returns once the request is
  recorded (a run row committed), within Feishu's 3 seconds.
- ``FEISHU_MODE=webhook``: ``POST /feishu/events`` through the shared gate (size first), then
  ``bots.feishu.events.open_delivery`` (signature, decryption, token); answered once the
  request is recorded.

A press on a card's button is a ``card.action.trigger`` callback, through the same transport
(the long connection, or the same URL as the callback request address, verified the same
way); it becomes a ``bots.chat.controls.Press`` and is answered with a toast.

Either way an event becomes a :class:`~bots.chat.message.ChatMessage` and goes to
``ChatCommands.receive``, which deduplicates by message id and event id in the database. A
group message that does not mention the bot arrives only when the app holds
``im:message.group_msg`` (``bots.feishu.scopes``; the start-up line says whether it does): a
reply in a thread goes to the chat layer, which takes it as guidance for the thread's running
research or as a control word there (``stop``, ``cancel``, ``status``) and drops anything
else unread; a message outside a thread is dropped here. A
message that is only files (a file message) goes to ``ChatCommands.receive_files``, kept for
the next request of its thread (``bots.feishu.events.files_scope``) within
``FATHOM_FEISHU_FILE_WINDOW``. A request replying to a file message is in that file's
thread, so it takes the file the same way; the parent message is never fetched here.
Answers that are not a run (help, errors, status) are posted after the acknowledgement, as a
card replying in the request's thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bots.chat.background import Background
from bots.chat.connection import ConnectionSlot
from bots.chat.ids import InvalidId, log_refused
from bots.chat.inbound import ChatCommands
from bots.chat.replies import MarkdownMarkup
from bots.chat.settings import RouteLimits
from bots.feishu.api import FeishuApi
from bots.feishu.delivery import classify_error
from bots.feishu.events import (
    CARD_ACTION_EVENT,
    PLATFORM,
    Challenge,
    FeishuRequest,
    event_to_dict,
    event_type,
    open_delivery,
    translate,
    translate_press,
)
from bots.feishu.render import escape_text, reply_card
from bots.feishu.scopes import GroupMessages
from bots.feishu.settings import FeishuSettings
from bots.feishu.ws import LongConnection
from bots.http_gate import Rejected, read_body, rejected_response
from core.values import ThreadKey
from core.words.wording import Language, pick

log = logging.getLogger(__name__)

#: The long-connection handler waits this long for the request to be recorded; Feishu
#: re-pushes an event not acknowledged within 3 seconds (the dedupe then drops it).
ACK_WITHIN = 2.5
#: Try to learn the bot's open id again at most this often while it is unknown (seconds).
IDENTIFY_EVERY = 60.0


def feishu_markup() -> MarkdownMarkup:
    """Replies as card markdown; a Feishu thread is pointed at by its chat."""

    def where(thread: ThreadKey, language: Language) -> str:
        return pick(language, f"in chat {thread.channel}", f"在会话 {thread.channel}")

    return MarkdownMarkup("feishu", escape_text, where)


class FeishuAdapter:
    """The Feishu side of ``fathom serve``: webhook route, long connection, answers."""

    def __init__(
        self,
        settings: FeishuSettings,
        chat: ChatCommands,
        api: FeishuApi,
        limits: RouteLimits,
        *,
        group_messages: GroupMessages | None = None,
    ) -> None:
        self._settings = settings
        self._chat = chat
        self._api = api
        self._limits = limits
        self._group_messages = group_messages or GroupMessages(
            api.granted_scopes, settings.group_messages
        )
        self.bot_open_id: str | None = None
        self._identified_at = 0.0
        self._background = Background()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connection = ConnectionSlot(settings.mode)

    @property
    def mode(self) -> str:
        return self._settings.mode

    async def identify(self) -> None:
        """Learn the bot's open id (to tell its mentions apart); failures are retried later."""
        self._identified_at = time.monotonic()
        try:
            self.bot_open_id = await self._api.bot_open_id()
            log.info("feishu: bot %s", self.bot_open_id)
        except Exception as exc:
            log.warning("feishu bot info failed (%s); retried later", classify_error(exc).reason)

    # -- inbound -----------------------------------------------------------------------------
    async def receive(self, payload: dict[str, Any]) -> None:
        """One event: recorded (and a run committed) when this returns."""
        if self.bot_open_id is None and time.monotonic() - self._identified_at > IDENTIFY_EVERY:
            self._identified_at = time.monotonic()
            self._background.spawn(self.identify())  # not on the acknowledgement's path
        try:
            request = translate(payload, self.bot_open_id, file_window=self._settings.file_window)
        except InvalidId as refused:  # acknowledged and dropped: Feishu re-pushes anything else
            log_refused(PLATFORM, refused, "dropped")
            return
        if request is None:
            return

        async def answer(text: str) -> None:
            self._background.spawn(self._answer(request, text))

        if request.files_only:
            # Kept for the thread's next request (unless FATHOM_FEISHU_FILE_WINDOW is 0);
            # answered only in a private chat (a file posted in a group is not the bot's
            # business until someone asks).
            await self._chat.receive_files(request.message, answer)
            return
        if not request.message.addressed:
            # Delivered with im:message.group_msg. Only a reply in a thread may be for the
            # bot (guidance for the thread's research, or a control word there), which the
            # chat layer decides from the database; anything else is dropped unread.
            if request.message.in_thread and request.readable:
                await self._chat.receive(request.message, answer)
            return
        if not request.readable:
            await self._chat.receive_unreadable(request.message, answer)
            return
        await self._chat.receive(request.message, answer)

    async def press(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A ``card.action.trigger`` callback: the press decided (database only, within
        Feishu's 3 seconds), and the answer as the toast only the presser sees."""
        try:
            press = translate_press(payload)
        except InvalidId as refused:
            log_refused(PLATFORM, refused, "dropped")
            return {}
        if press is None:
            return {}  # not one of our buttons
        try:
            text = await self._chat.press(press, plain=True)
        except Exception:
            log.exception("feishu: a press on %s failed", press.control.action_id)
            text = self._chat.replies(press.language or "en").failure()
        return {"toast": {"type": "info", "content": text}}

    async def _answer(self, request: FeishuRequest, text: str) -> None:
        try:
            await self._api.reply(
                request.reply_to,
                "interactive",
                reply_card(text),
                uuid=f"answer:{request.reply_to}",
            )
        except Exception as exc:
            log.warning("feishu answer to a request failed (%s)", classify_error(exc).reason)

    async def handle(self, request: Request) -> Response:
        """``POST /feishu/events``."""
        if self.mode != "webhook":
            return JSONResponse({"error": "Feishu runs in long-connection mode here"}, 404)
        try:
            body = await read_body(request, self._limits.max_body_bytes, self._limits.body_timeout)
            delivery = open_delivery(
                body,
                {k.lower(): v for k, v in request.headers.items()},
                verification_token=self._settings.verification_token or "",
                encrypt_key=self._settings.encrypt_key or "",
            )
        except Rejected as rejection:
            return rejected_response(request, rejection)
        if isinstance(delivery, Challenge):
            return JSONResponse({"challenge": delivery.challenge})
        if event_type(delivery.payload) == CARD_ACTION_EVENT:
            return JSONResponse(await self.press(delivery.payload))
        try:
            await self.receive(delivery.payload)
        except Exception:
            # Not recorded: Feishu delivers it again (and the dedupe keeps that safe).
            log.exception("feishu event could not be handled")
            return JSONResponse({"error": "temporarily unable to handle this event"}, 500)
        return JSONResponse({})

    def on_ws_event(self, event: object) -> None:
        """The SDK's handler (on its thread): wait until the request is recorded, so that
        returning acknowledges it; raising makes the SDK answer 500 and Feishu re-push it."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the Feishu adapter is not running")
        future = asyncio.run_coroutine_threadsafe(self.receive(event_to_dict(event)), loop)
        try:
            future.result(timeout=ACK_WITHIN)
        except concurrent.futures.TimeoutError:
            log.warning(
                "feishu event not recorded within %.1fs; Feishu will re-push it", ACK_WITHIN
            )
            raise

    def on_ws_card_action(self, data: Any) -> Any:
        """The SDK's card-callback handler (on its thread): the press decided on the app's
        loop, answered with the toast (``P2CardActionTriggerResponse``) within the deadline."""
        from lark_oapi.event.callback.model.p2_card_action_trigger import (
            P2CardActionTriggerResponse,
        )

        loop = self._loop
        if loop is None:
            raise RuntimeError("the Feishu adapter is not running")
        future = asyncio.run_coroutine_threadsafe(self.press(event_to_dict(data)), loop)
        return P2CardActionTriggerResponse(future.result(timeout=ACK_WITHIN))

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.identify()
        await self._group_messages.refresh()
        log.info("%s", self._group_messages.start_up_line())

    async def connect(self) -> None:
        """Open the long connection (on the replica that holds its election)."""
        import lark_oapi as lark

        handler = (
            lark.EventDispatcherHandler.builder("", "")
            .register_p2_im_message_receive_v1(self.on_ws_event)
            .register_p2_card_action_trigger(self.on_ws_card_action)
            .build()
        )
        await self._connection.open(
            LongConnection(
                self._settings.app_id or "",
                self._settings.app_secret or "",
                self._settings.domain,
                handler,
            )
        )

    async def disconnect(self) -> None:
        await self._connection.close()

    def status(self) -> dict[str, object]:
        return self._connection.status()

    async def close(self) -> None:
        await self.disconnect()
        await self._background.drain()
