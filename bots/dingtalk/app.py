"""DingTalk in ``fathom serve``: both ingress modes, translated for the shared chat layer.

- ``DINGTALK_MODE=stream`` (default): the SDK's stream client (``bots.dingtalk.stream``); its
  handler returns once the request is recorded, so the acknowledgement goes out at once.
- ``DINGTALK_MODE=http``: ``POST /dingtalk/events`` through the shared gate (size first),
  then the ``timestamp``/``sign`` check, answered once the request is recorded.

A press on a card's button is a card callback: over the stream, or in HTTP mode at
``POST /dingtalk/card`` (the address registered from ``DINGTALK_CARD_CALLBACK_URL``, with its
key: ``bots.dingtalk.callbacks``). It becomes a ``bots.chat.controls.Press``; the answer goes
to the presser alone, as a one-to-one message from the robot.

A robot message becomes a :class:`~bots.chat.message.ChatMessage` for
``ChatCommands.receive``, which deduplicates by the message's ``msgId`` (and the stream's
``messageId``) in the database. Answers that are not a run are posted afterwards, as Markdown
through the message's session webhook.

**Follow-ups.** DingTalk robots have no threads. A message continues a research thread (its
topics and findings) when
- it quotes (replies to) the message that started that research, or one of Fathom's own
  messages of that research (wherever the quote arrives: ``repliedMsg`` at the top level or
  under ``text``; see ``bots.dingtalk.events.quote_of``), or
- it is a topic written *without* ``/research`` by the same user in the same conversation
  within ``FATHOM_DINGTALK_FOLLOWUP_WINDOW`` seconds (default 600; 0 turns this off) after
  their last research there finished.
``/research <topic>`` always starts a new research, and so does any request while the user's
last research there still runs.

**Quoted controls.** ``stop`` or ``cancel`` (without a run id) quoting a message acts on the
research that message is surely tied to (``DingTalkAdapter._quoted_research``: the request
it is, or one research whose topic or report title Fathom's quoted message shows), by the
buttons' rule; a quote tied to none, or to two alike, acts on nothing and says so
(``ChatMessage.quoted``). Never the sender's newest research instead.

**Files.** A file sent on its own (DingTalk delivers files in a one-to-one chat only) waits
for the same user's next research request in that conversation within the same window; a
request that quotes a file message reads that file (see ``bots.dingtalk.events``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bots.chat.background import Background
from bots.chat.connection import ConnectionSlot
from bots.chat.ids import InvalidId, log_refused
from bots.chat.inbound import ChatCommands
from bots.chat.message import Answer
from bots.chat.replies import MarkdownMarkup
from bots.chat.settings import RouteLimits
from bots.dingtalk.api import DingTalkApi, Space
from bots.dingtalk.callbacks import CardCallbacks
from bots.dingtalk.delivery import classify_error
from bots.dingtalk.events import (
    PLATFORM,
    DingTalkRequest,
    open_callback,
    translate,
    translate_card_press,
    webhook_allowed,
)
from bots.dingtalk.render import escape_text
from bots.dingtalk.send import Conversation, space_of
from bots.dingtalk.settings import DingTalkSettings
from bots.dingtalk.stream import DingTalkStream
from bots.http_gate import Rejected, parse_json, read_body, rejected_response
from core.chat.commands import CommandError
from core.chat.grammar import EXPLICIT, CancelCommand, ResearchCommand, StopCommand
from core.chat.stores import ChatStores, utcnow
from core.values import ThreadKey
from core.words.wording import Language, pick

log = logging.getLogger(__name__)

#: A user's research runs looked at for the follow-up rule.
FOLLOW_UP_CANDIDATES = 10


def _report_heading(markdown: str | None) -> str | None:
    match = re.search(r"^#{1,6}[ \t]+(.+)$", markdown or "", re.MULTILINE)
    return match.group(1).strip() if match else None


def _quoted_control(parsed: object) -> bool:
    """A ``stop`` or ``cancel`` that names no run id (an id names its run anywhere)."""
    return isinstance(parsed, StopCommand | CancelCommand) and parsed.run_id is None


def dingtalk_markup() -> MarkdownMarkup:
    """Replies as DingTalk Markdown; a DingTalk run lives in the conversation itself."""

    def where(thread: ThreadKey, language: Language) -> str:
        return pick(language, "in this conversation", "在本会话")

    return MarkdownMarkup(PLATFORM, escape_text, where)


class DingTalkAdapter:
    """The DingTalk side of ``fathom serve``: callback route, stream, answers."""

    def __init__(
        self,
        settings: DingTalkSettings,
        chat: ChatCommands,
        api: DingTalkApi,
        store: ChatStores,
        limits: RouteLimits,
        *,
        callbacks: CardCallbacks | None = None,
    ) -> None:
        self._settings = settings
        self._callbacks = callbacks
        self._chat = chat
        self._api = api
        self._store = store
        self._limits = limits
        self._background = Background()
        self._stream = ConnectionSlot(settings.mode)

    @property
    def mode(self) -> str:
        return self._settings.mode

    # -- inbound -----------------------------------------------------------------------------
    async def receive(self, data: dict[str, Any], delivery_id: str | None = None) -> None:
        """One robot message: recorded (and a run committed) when this returns."""
        try:
            request = translate(
                data, delivery_id=delivery_id, files_window=self._settings.followup_window
            )
        except InvalidId as refused:  # acknowledged and dropped: never taken, so never retried
            log_refused(PLATFORM, refused, "dropped")
            return
        if request is None:
            return
        if request.webhook and not webhook_allowed(request.webhook, self._settings.api_url):
            log.warning("dingtalk: a message's session webhook is not DingTalk's; not used")
            request = request.without_webhook()
        if request.files_only:  # kept for the sender's next request (answered if addressed)
            await self._chat.receive_files(request.message, self._answerer(request))
            return
        if not request.message.addressed:
            return
        if not request.readable:
            await self._chat.receive_unreadable(request.message, self._answerer(request))
            return
        parsed = self._chat.parse(request.message.text)  # once, for the follow-up rule too
        if isinstance(parsed, ResearchCommand | CommandError):  # a request, or steering text
            request = await self._follow_up(request)
        elif _quoted_control(parsed) and request.quote is not None:
            # Quoting a research is how a user points at it here: the stop or cancel acts on
            # that research alone (or, tied to none, on none), never on the newest.
            request = request.quoting(await self._quoted_research(request))
        await self._chat.receive(request.message, self._answerer(request), parsed)

    async def card_callback(self, data: dict[str, Any]) -> None:
        """A press on a card's button: decided when this returns (database only, before the
        stream's ack); the answer goes to the presser alone, as a one-to-one message from the
        robot (DingTalk has no private reply in a group), after the ack."""
        try:
            press = translate_card_press(data)
        except InvalidId as refused:
            log_refused(PLATFORM, refused, "dropped")
            return
        if press is None:
            return
        text = await self._chat.press(press)
        self._background.spawn(self._tell(press.user, text))

    async def _tell(self, user: str, text: str) -> None:
        try:
            await self._api.send_markdown(
                Space(group=False, conversation_id="", staff_id=user), "Fathom", text
            )
        except Exception as exc:
            log.warning("dingtalk answer to a press failed (%s)", classify_error(exc).reason)

    def _answerer(self, request: DingTalkRequest) -> Answer:
        """Answers to ``request``, posted after the acknowledgement."""

        async def answer(text: str) -> None:
            self._background.spawn(self._answer(request, text))

        return answer

    async def _follow_up(self, request: DingTalkRequest) -> DingTalkRequest:
        """The research request in the thread it follows up on, if any (see the module)."""
        message = request.message
        quoted = await self._quoted_thread(request)
        if quoted is not None:
            return request.in_thread(quoted)
        window = self._settings.followup_window
        if window <= 0 or EXPLICIT.match(message.text):
            return request
        runs = await self._store.runs.recent_runs_for_user(
            message.requested_by, FOLLOW_UP_CANDIDATES
        )
        for run in runs:  # newest first
            key = run.thread
            if (key.platform, key.workspace, key.channel) != (
                PLATFORM,
                message.workspace,
                message.channel,
            ):
                continue
            if not run.status.finished or run.finished_at is None:
                return request  # still running: a new research
            if utcnow() - run.finished_at <= timedelta(seconds=window):
                return request.in_thread(key.thread)
            return request
        return request

    async def _quoted_thread(self, request: DingTalkRequest) -> str | None:
        """The research thread a quote-reply continues: the one its quoted message started
        (or a follow-up request of it); for a quote of one of this robot's own messages, the
        newest research in this conversation whose topic or report title the quoted text
        shows, else the newest one here."""
        tied = await self._quoted_threads(request)
        if tied or request.quote is None or not request.quote.from_robot:
            return tied[0] if tied else None
        message = request.message
        runs = await self._store.runs.recent_runs_in_channel(
            PLATFORM, message.workspace, message.channel, 1
        )
        return runs[0].thread.thread if runs else None

    async def _quoted_research(self, request: DingTalkRequest) -> str | None:
        """The research thread a quoted message is surely tied to, for a control word: one
        thread, or None (tied to none, or to two alike: the same topic asked twice)."""
        tied = await self._quoted_threads(request)
        return tied[0] if len(tied) == 1 else None

    async def _quoted_threads(self, request: DingTalkRequest) -> list[str]:
        """The research threads a quoted message may be tied to, newest first: the research
        its ``msgId`` started, or the one whose request it is (a follow-up's, among this
        conversation's recent researches); for one of this robot's own messages (whose ids
        DingTalk does not give the robot when it sends), the researches whose topic or report
        title the quoted text shows, those with the longest such name only."""
        quote, message = request.quote, request.message
        if quote is None:
            return []
        if quote.msg_id:
            key = ThreadKey(
                platform=PLATFORM,
                workspace=message.workspace,
                channel=message.channel,
                thread=quote.msg_id,
            )
            if await self._store.threads.get_thread(str(key)) is not None:
                return [quote.msg_id]
        runs = await self._store.runs.recent_runs_in_channel(
            PLATFORM, message.workspace, message.channel, FOLLOW_UP_CANDIDATES
        )
        if quote.msg_id:
            asked = f"{PLATFORM}:msg:{message.workspace}:{quote.msg_id}"
            for run in runs:
                if run.dedupe_key == asked:  # a follow-up's request, in its thread
                    return [run.thread.thread]
        if not quote.from_robot:
            return []
        shown = quote.text.casefold()
        longest: dict[str, int] = {}  # thread -> its longest name the quote shows (in order)
        for run in runs:  # newest first
            for name in (run.topic, _report_heading(run.report_markdown)):
                if name and name.casefold() in shown:
                    thread = run.thread.thread
                    longest[thread] = max(longest.get(thread, 0), len(name))
        best = max(longest.values(), default=0)
        return [thread for thread, length in longest.items() if length == best]

    async def _answer(self, request: DingTalkRequest, text: str) -> None:
        message = request.message
        conversation = Conversation(
            self._api, space_of(message.context or {}, message.channel), webhook=request.webhook
        )
        try:
            await conversation.send("Fathom", text)
        except Exception as exc:
            log.warning("dingtalk answer to a request failed (%s)", classify_error(exc).reason)

    async def handle(self, request: Request) -> Response:
        """``POST /dingtalk/events`` (robot messages) and ``POST /dingtalk/card`` (presses)."""
        if self.mode != "http":
            return JSONResponse({"error": "DingTalk runs in stream mode here"}, 404)
        if request.url.path.endswith("/card"):
            return await self._handle_card(request)
        try:
            body = await read_body(request, self._limits.max_body_bytes, self._limits.body_timeout)
            payload = open_callback(
                body,
                {k.lower(): v for k, v in request.headers.items()},
                self._settings.client_secret or "",
            )
        except Rejected as rejection:
            return rejected_response(request, rejection)
        robot = str(payload.get("robotCode") or "")
        if robot and robot != self._settings.robot:
            # The sign covers only the timestamp: a body for another robot is not ours.
            return rejected_response(request, Rejected(403, "a message for another robot"))
        try:
            await self.receive(payload)
        except Exception:
            # Not recorded: DingTalk delivers it again (and the dedupe keeps that safe).
            log.exception("dingtalk callback could not be handled")
            return JSONResponse({"error": "temporarily unable to handle this message"}, 500)
        return JSONResponse({})

    async def _handle_card(self, request: Request) -> Response:
        """A card callback in HTTP mode: only with the key of the registered address
        (``bots.dingtalk.callbacks``), decided before the answer like the stream's."""
        callbacks = self._callbacks
        if callbacks is None or callbacks.address is None:
            return JSONResponse({"error": "card callbacks are not configured here"}, 404)
        try:
            if not callbacks.accepts(request.query_params.get("key")):
                raise Rejected(403, "not the registered card callback address")
            body = await read_body(request, self._limits.max_body_bytes, self._limits.body_timeout)
            try:
                data = parse_json(body)
            except ValueError:
                raise Rejected(400, "the card callback is not JSON") from None
            if not isinstance(data, dict):
                raise Rejected(400, "the card callback is not a JSON object")
        except Rejected as rejection:
            return rejected_response(request, rejection)
        try:
            await self.card_callback(data)
        except Exception:
            log.exception("dingtalk card callback could not be handled")
            return JSONResponse({"error": "temporarily unable to handle this press"}, 500)
        return JSONResponse({})

    # -- lifecycle ---------------------------------------------------------------------------
    async def connect(self) -> None:
        """Open the stream (on the replica that holds its election)."""
        await self._stream.open(
            DingTalkStream(
                self._settings.client_id or "",
                self._settings.client_secret or "",
                self._settings.api_url,
                self.receive,
                asyncio.get_running_loop(),
                on_card=self.card_callback,
            )
        )

    async def disconnect(self) -> None:
        await self._stream.close()

    def status(self) -> dict[str, object]:
        return self._stream.status()

    async def close(self) -> None:
        """Stop taking messages (the stream) and finish the answers in flight."""
        await self.disconnect()
        await self._background.drain()
