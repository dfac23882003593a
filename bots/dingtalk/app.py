"""DingTalk in ``fathom serve``: both ingress modes, translated for the shared chat layer.

- ``DINGTALK_MODE=stream`` (default): the SDK's stream client (``bots.dingtalk.stream``); its
  handler returns once the request is recorded, so the acknowledgement goes out at once.
- ``DINGTALK_MODE=http``: ``POST /dingtalk/events`` through the shared gate (size first),
  then the ``timestamp``/``sign`` check, answered once the request is recorded.

A robot message becomes a :class:`~bots.chat.inbound.ChatMessage` for
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
"""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import timedelta
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bots.chat.background import Background
from bots.chat.inbound import Answer, ChatCommands
from bots.chat.replies import EMOJI_ICONS, Icon
from bots.dingtalk.api import DingTalkApi, DingTalkError, Space
from bots.dingtalk.delivery import DingTalkDeliveryFactory, classify_error
from bots.dingtalk.events import (
    PLATFORM,
    DingTalkRequest,
    open_callback,
    translate,
    webhook_allowed,
)
from bots.dingtalk.render import escape_text
from bots.dingtalk.stream import DingTalkStream
from bots.http_gate import Rejected, read_body, rejected_response
from core.commands import CommandError
from core.config import Settings
from core.delivery import ResearchJob
from core.grammar import ResearchCommand, parse_command
from core.jobs import JobRunner
from core.models import RunStatus, ThreadKey
from core.runtime import Runtime
from core.wording import Language, pick
from storage import Store
from storage.tables import utcnow

log = logging.getLogger(__name__)

#: A user's research runs looked at for the follow-up rule.
FOLLOW_UP_CANDIDATES = 10
#: ``/research <topic>``: always a new research.
EXPLICIT = re.compile(r"^\s*/research\b", re.IGNORECASE)


def _report_heading(markdown: str | None) -> str | None:
    match = re.search(r"^#{1,6}[ \t]+(.+)$", markdown or "", re.MULTILINE)
    return match.group(1).strip() if match else None


class DingTalkMarkup:
    """``bots.chat.replies.Markup`` for DingTalk Markdown."""

    bold = "**"

    def escape(self, text: str) -> str:
        return escape_text(text)

    def icon(self, name: Icon) -> str:
        return EMOJI_ICONS[name]

    def thread_hint(self, thread: ThreadKey, language: Language) -> str:
        if thread.platform != PLATFORM:
            return str(thread)
        return pick(language, "in this conversation", "在本会话")


class DingTalkAdapter:
    """The DingTalk side of ``fathom serve``: callback route, stream, answers."""

    def __init__(
        self,
        settings: Settings,
        chat: ChatCommands,
        api: DingTalkApi,
        store: Store,
        http: httpx.AsyncClient,
    ) -> None:
        self._settings = settings
        self._http = http
        self._chat = chat
        self._api = api
        self._store = store
        self._background = Background()
        self.stream: DingTalkStream | None = None

    @property
    def mode(self) -> str:
        return self._settings.dingtalk_mode

    # -- inbound -----------------------------------------------------------------------------
    async def receive(self, data: dict[str, Any], delivery_id: str | None = None) -> None:
        """One robot message: recorded (and a run committed) when this returns."""
        request = translate(data, delivery_id=delivery_id)
        if request is None or not request.message.addressed:
            return
        if request.webhook and not webhook_allowed(
            request.webhook, self._settings.dingtalk_api_url
        ):
            log.warning("dingtalk: a message's session webhook is not DingTalk's; not used")
            request = request.without_webhook()
        if not request.readable:
            await self._chat.receive_unreadable(request.message, self._answerer(request))
            return
        request = await self._follow_up(request)
        await self._chat.receive(request.message, self._answerer(request))

    def _answerer(self, request: DingTalkRequest) -> Answer:
        """Answers to ``request``, posted after the acknowledgement."""

        async def answer(text: str) -> None:
            self._background.spawn(self._answer(request, text))

        return answer

    async def _follow_up(self, request: DingTalkRequest) -> DingTalkRequest:
        """The request in the thread it follows up on, if any (see the module)."""
        message = request.message
        if not self._is_research(message.text):
            return request
        quoted = await self._quoted_thread(request)
        if quoted is not None:
            return request.in_thread(quoted)
        window = self._settings.dingtalk_followup_window
        if window <= 0 or EXPLICIT.match(message.text):
            return request
        runs = await self._store.recent_runs_for_user(message.requested_by, FOLLOW_UP_CANDIDATES)
        for run in runs:  # newest first
            key = ThreadKey.parse(run.thread_key)
            if (key.platform, key.workspace, key.channel) != (
                PLATFORM,
                message.workspace,
                message.channel,
            ):
                continue
            if not RunStatus(run.status).finished or run.finished_at is None:
                return request  # still running: a new research
            if utcnow() - run.finished_at <= timedelta(seconds=window):
                return request.in_thread(key.thread)
            return request
        return request

    async def _quoted_thread(self, request: DingTalkRequest) -> str | None:
        """The research thread a quote-reply continues: the one its quoted message started,
        or, for a quote of one of this robot's own messages (whose ids DingTalk does not
        give the robot when it sends), the research in this conversation that the quoted
        text shows (its topic or its report's title), else the newest one here."""
        quote, message = request.quote, request.message
        if quote is None:
            return None
        if quote.msg_id:
            key = ThreadKey(
                platform=PLATFORM,
                workspace=message.workspace,
                channel=message.channel,
                thread=quote.msg_id,
            )
            if await self._store.get_thread(str(key)) is not None:
                return quote.msg_id
        if not quote.from_robot:
            return None
        runs = await self._store.recent_runs_in_channel(
            PLATFORM, message.workspace, message.channel, FOLLOW_UP_CANDIDATES
        )
        shown = quote.text.casefold()
        for run in runs:  # newest first
            names = (run.topic, _report_heading(run.report_markdown))
            if any(name and name.casefold() in shown for name in names):
                return ThreadKey.parse(run.thread_key).thread
        return ThreadKey.parse(runs[0].thread_key).thread if runs else None

    def _is_research(self, text: str) -> bool:
        settings = self._settings
        try:
            command = parse_command(
                text,
                default_depth=settings.default_depth,
                max_depth=settings.max_depth,
                default_strategy=settings.strategy,
            )
        except CommandError:
            return False
        return isinstance(command, ResearchCommand)

    async def _answer(self, request: DingTalkRequest, text: str) -> None:
        body = {"msgtype": "markdown", "markdown": {"title": "Fathom", "text": text}}
        try:
            if request.webhook:
                try:
                    await self._api.post_webhook(request.webhook, body)
                    return
                except DingTalkError as exc:
                    if exc.rate_limited or exc.status >= 500:
                        raise
            context = request.message.context or {}
            space = Space(
                group=context.get("conversation_type") == "group",
                conversation_id=request.message.channel,
                staff_id=str(context.get("staff_id") or ""),
            )
            await self._api.send_markdown(space, "Fathom", text)
        except Exception as exc:
            log.warning("dingtalk answer to a request failed (%s)", classify_error(exc).reason)

    async def callback(self, request: Request) -> Response:
        """``POST /dingtalk/events``."""
        if self.mode != "http":
            return JSONResponse({"error": "DingTalk runs in stream mode here"}, 404)
        try:
            body = await read_body(
                request, self._settings.max_body_bytes, self._settings.body_timeout
            )
            payload = open_callback(
                body,
                {k.lower(): v for k, v in request.headers.items()},
                self._settings.dingtalk_client_secret or "",
            )
        except Rejected as rejection:
            return rejected_response(request, rejection)
        robot = str(payload.get("robotCode") or "")
        expected = self._settings.dingtalk_robot_code or self._settings.dingtalk_client_id
        if robot and robot != expected:
            # The sign covers only the timestamp: a body for another robot is not ours.
            return rejected_response(request, Rejected(403, "a message for another robot"))
        try:
            await self.receive(payload)
        except Exception:
            # Not recorded: DingTalk delivers it again (and the dedupe keeps that safe).
            log.exception("dingtalk callback could not be handled")
            return JSONResponse({"error": "temporarily unable to handle this message"}, 500)
        return JSONResponse({})

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Nothing to open here: the stream is opened by the replica holding its lease."""

    @property
    def long_lived(self) -> bool:
        """Whether messages come over the stream (one replica holds it)."""
        return self.mode == "stream"

    async def connect(self) -> None:
        """Open the stream (on the replica that holds its lease)."""
        stream = DingTalkStream(
            self._settings.dingtalk_client_id or "",
            self._settings.dingtalk_client_secret or "",
            self._settings.dingtalk_api_url,
            self.receive,
            asyncio.get_running_loop(),
        )
        self.stream = stream
        await stream.start()

    async def disconnect(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            await stream.close()

    def status(self) -> dict[str, object]:
        if self.stream is not None:
            return self.stream.status()
        return {"mode": self.mode}

    async def close(self) -> None:
        """Stop taking messages (the stream) and finish the answers in flight."""
        await self.disconnect()
        await self._background.drain()

    async def release(self) -> None:
        """Close the HTTP client, once the job runner has stopped (its running jobs post
        through it during their grace period)."""
        await self._http.aclose()


async def open_dingtalk(
    settings: Settings, runtime: Runtime, job: ResearchJob, runner: JobRunner
) -> DingTalkAdapter:
    """Wire DingTalk in and out; opens the stream in ``stream`` mode."""
    settings.require_dingtalk()
    http = httpx.AsyncClient(timeout=10.0, headers={"User-Agent": "fathom-bot/0.1"})
    api = DingTalkApi(
        http,
        client_id=settings.dingtalk_client_id or "",
        client_secret=settings.dingtalk_client_secret or "",
        api_url=settings.dingtalk_api_url,
        robot_code=settings.dingtalk_robot_code,
    )
    chat = ChatCommands(
        settings, runtime.service, runtime.store, runner, DingTalkMarkup(), runtime.digests
    )
    job.register(
        "dingtalk",
        DingTalkDeliveryFactory(
            api,
            runtime.store,
            template_id=settings.dingtalk_card_template_id,
            edit_interval=settings.dingtalk_edit_interval,
        ),
    )
    adapter = DingTalkAdapter(settings, chat, api, runtime.store, http)
    await adapter.start()
    return adapter
