"""Slack input: ``/research``, @-mentions and DMs become runs, presses on a run's buttons
and Slack's own Stop on an agent session reach it (Bolt wiring and listeners).

The listeners only translate: a Slack delivery becomes a ``bots.chat.message.ChatMessage``
(a button press a ``bots.chat.controls.Press``) for the shared ``ChatCommands`` (access,
grammar, help/status/cancel, per-user limit, the dedupe-aware submit and enqueue; database
only). The slash command is acknowledged, with the answer, after the run row is committed;
events and presses are acknowledged at once and handled in lazy listeners, their answers
sent as ephemeral messages. Retried deliveries are dropped through the database
(``Store.claim_event`` and the run's dedupe key).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from slack_bolt import BoltResponse
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.requests import Request
from starlette.responses import Response

from bots.chat.controls import ACTION_PREFIX, Press, control_of
from bots.chat.ids import InvalidId, check_ids, log_refused
from bots.chat.inbound import ChatCommands
from bots.chat.message import PENDING_PREFIX, ChatMessage
from bots.chat.settings import RouteLimits
from bots.slack.assistant import AssistantPane
from bots.slack.errors import describe_error
from bots.slack.files import SlackFiles, attached_by, describe_files, describe_pending
from bots.slack.http import SlackEndpoint
from bots.slack.markup import clean_text
from bots.slack.messenger import SlackClients, StaticSlackClients, make_web_client
from bots.slack.oauth import (
    InstallationAuthorize,
    InstallationClients,
    TokenAuthorize,
    installation_store,
    oauth_settings,
)
from bots.slack.render import acknowledgement_blocks
from bots.slack.sessions import ENDED, set_session
from bots.slack.settings import SlackSettings
from core.chat.commands import invalid_id
from core.chat.grammar import ResearchCommand, StopCommand
from core.values import RunStatus
from core.words.wording import request_language

log = logging.getLogger(__name__)


#: Message subtypes that are a person writing to the bot (a message with files is
#: ``file_share``; a reply also sent to the channel is ``thread_broadcast``).
PERSON_SUBTYPES = frozenset({None, "", "file_share", "thread_broadcast"})
#: Files sent without a request (a DM of files only; a mention with files and no topic) wait
#: this many seconds for the sender's next request in the same conversation.
EARLIER_FILES_WINDOW = 600.0


def earlier_files_scope(team: str, channel: str, user: str) -> str:
    """Where files sent on their own wait: the sender in one conversation of one workspace."""
    return f"slack:{team}:{channel}:{user}"


def _message(
    *,
    team: str,
    user: str,
    channel: str,
    thread: str,
    text: str,
    key: str,
    in_thread: bool,
    files: SlackFiles | None = None,
    addressed: bool = True,
) -> ChatMessage:
    files = files or SlackFiles()
    return ChatMessage(
        addressed=addressed,
        platform="slack",
        workspace=team,
        channel=channel,
        thread=thread,
        user=user,
        text=text,
        dedupe_key=key,
        in_thread=in_thread,
        attachments=files.attachments,
        unreadable=files.unreadable,
        earlier_files=earlier_files_scope(team, channel, user),
        earlier_window=EARLIER_FILES_WINDOW,
    )


def command_message(command: dict[str, Any]) -> ChatMessage:
    """The neutral message of a ``/research`` slash command (its thread is pending until the
    opener is posted; the trigger id names the delivery)."""
    trigger = command.get("trigger_id") or ""
    team = command.get("team_id") or ""
    return _message(
        team=team,
        user=command.get("user_id") or "",
        channel=command.get("channel_id") or "",
        thread=f"{PENDING_PREFIX}{trigger}",
        # Slack escapes &, < and > in command text and may send link markup.
        text=clean_text(command.get("text") or ""),
        key=f"slack:cmd:{team}:{trigger}",
        in_thread=False,
    )


def is_for_the_bot(event: dict[str, Any], bot_user_id: str | None) -> bool:
    """An ``app_mention`` not by a bot, or a person's message in a DM with the bot (files
    too); not an edit, a join, another bot's message or the bot's own."""
    if event.get("bot_id") or event.get("user") == bot_user_id:
        return False  # other bots (and the bot itself) do not start research
    if event.get("type") == "app_mention":
        return True
    return (
        event.get("channel_type") == "im"
        and event.get("subtype") in PERSON_SUBTYPES
        and bool(event.get("user"))
    )


def is_plain_thread_reply(event: dict[str, Any], bot_user_id: str | None) -> bool:
    """A person's reply in a channel or group thread that does not mention the bot
    (``message.channels``, ``message.groups``): it may steer the thread's running research
    (:meth:`ChatCommands.receive` drops it otherwise, unstored). One that mentions the bot
    arrives as an ``app_mention`` too, and is handled as that."""
    if event.get("bot_id") or not event.get("user") or event.get("user") == bot_user_id:
        return False
    if event.get("channel_type") not in ("channel", "group"):
        return False
    if event.get("subtype") not in PERSON_SUBTYPES:
        return False
    parent, ts = event.get("thread_ts"), event.get("ts")
    if not parent or parent == ts:
        return False
    return not (bot_user_id and f"<@{bot_user_id}" in str(event.get("text") or ""))


def event_message(
    event: dict[str, Any],
    body: dict[str, Any],
    *,
    team: str,
    bot_user_id: str | None,
    files: SlackFiles | None = None,
) -> ChatMessage:
    """The neutral message of a mention or a DM (:func:`is_for_the_bot`): the bot's mention
    removed, Slack's markup undone, the thread it belongs to, the delivery's identity."""
    channel, ts = str(event.get("channel") or ""), str(event.get("ts") or "")
    event_id = body.get("event_id") or f"{team}:{channel}:{ts}"
    parent = event.get("thread_ts")
    return _message(
        team=team,
        user=str(event.get("user") or ""),
        channel=channel,
        thread=str(parent or ts),
        text=clean_text(str(event.get("text") or ""), bot_user_id),
        key=f"slack:event:{event_id}",
        in_thread=bool(parent and parent != ts),
        files=files,
        addressed=event.get("type") == "app_mention" or event.get("channel_type") == "im",
    )


class SlackCommands:
    """Bolt listeners: each translates a Slack delivery for the shared ``ChatCommands``
    (the assistant pane's events for :class:`~bots.slack.assistant.AssistantPane`)."""

    def __init__(self, chat: ChatCommands, pane: AssistantPane | None = None) -> None:
        self.chat = chat
        self.pane = pane or AssistantPane(chat.store.contexts)

    async def on_command(self, ack: AsyncAck, command: dict[str, Any]) -> None:
        """``/research …``: everything happens before ``ack`` (DB only), then one ack. A
        command with an id no platform sends (``bots.chat.ids``) is told so, nothing stored."""
        try:
            message = command_message(command)
        except InvalidId as refused:
            log_refused("slack", refused, "answered")
            error = invalid_id(refused.name.replace("_", " "))
            await ack(text=self.chat.replies("en").error(str(error)), response_type="ephemeral")
            return
        try:
            reply = await self.chat.handle(message)
        except Exception:
            log.exception("slash command from %s failed", message.user)
            await ack(text=self.chat.replies(message.lang).failure(), response_type="ephemeral")
            return
        if reply.started and reply.run_id:  # (its place in line, and Cancel until it starts)
            blocks = acknowledgement_blocks(reply.text, reply.run_id, message.lang)
            await ack(text=reply.text, blocks=blocks, response_type="ephemeral")
            return
        await ack(text=reply.text, response_type="ephemeral")

    async def on_mention(
        self, event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        if is_for_the_bot(event, context.bot_user_id):
            with _dropped_if_invalid():
                await self._on_event(event, body, context)

    async def on_message(
        self, event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """DMs (with files too), and plain replies in channel threads (which only steer a
        running research there); edits, joins, bot messages and the bot's own messages are
        ignored, and so is every other channel message, unread."""
        bot = context.bot_user_id
        with _dropped_if_invalid():
            if is_for_the_bot(event, bot):
                await self._on_event(event, body, context)
            elif is_plain_thread_reply(event, bot):
                await self._on_plain_reply(event, body, context)

    async def _on_plain_reply(
        self, event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """A reply in a channel thread without a mention: steering for the thread's running
        research, or nothing. Its files are only named (from the event, nothing is fetched):
        a research reads the files of its own request, so the answer says they are not read."""
        team = context.team_id or body.get("team_id") or ""
        files = describe_files(event)
        if files.pending:  # Slack Connect stubs, not looked up: named as files not read
            stubs = tuple(("file", "steering") for _ in files.pending)
            files = SlackFiles(files.attachments, files.unreadable + stubs)
        message = event_message(
            event, body, team=team, bot_user_id=context.bot_user_id, files=files
        )
        if not message.text.strip() and not files:
            return
        channel, parent = message.channel, event.get("thread_ts")

        async def answer(text: str) -> None:
            await _ephemeral(context, channel=channel, user=message.user, thread=parent, text=text)

        await self.chat.receive(message, answer)

    async def _on_event(
        self, event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        team = context.team_id or body.get("team_id") or ""
        channel, parent = str(event.get("channel") or ""), event.get("thread_ts")
        files = describe_files(event)
        if files.pending:  # Slack Connect stubs: files.info, now that Slack has its ack
            files = await describe_pending(files, context.client, attached_by(event))
        message = event_message(
            event, body, team=team, bot_user_id=context.bot_user_id, files=files
        )

        if event.get("channel_type") == "im":  # the assistant pane's threads are DMs
            message = await self.pane.with_context(message)

        async def answer(text: str) -> None:
            await _ephemeral(context, channel=channel, user=message.user, thread=parent, text=text)

        if files and not message.text.strip():
            # Files and no topic (a DM of files; a mention with files only): kept for the
            # sender's next request in this conversation, and said so.
            await self.chat.receive_files(message, answer)
            return
        parsed = self.chat.parse(message.text)
        reply = await self.chat.receive(message, answer, parsed)
        if reply is not None and reply.started and isinstance(parsed, ResearchCommand):
            await self.pane.set_title(context.client, message, parsed.topic)

    async def on_assistant_thread_started(
        self, event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """A new thread in the assistant pane: greeted, with suggested prompts."""
        team = context.team_id or body.get("team_id") or ""
        with _dropped_if_invalid():
            check_ids(workspace=team)  # a key part of the context kept
            await self.pane.thread_started(team, event, context.client)

    async def on_assistant_thread_context_changed(
        self, event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """The user moved to another channel with the pane open: the new context is kept."""
        team = context.team_id or body.get("team_id") or ""
        with _dropped_if_invalid():
            check_ids(workspace=team)
            await self.pane.context_changed(team, event)

    async def on_app_home_opened(
        self, event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """The user opened the app's Messages tab (an agent's DM): suggested prompts there."""
        await self.pane.messages_opened(event, context.client)

    async def on_agent_session_stopped(
        self, event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        """Slack's own Stop on a thread's agent session (``agent_session_stopped``): the
        typed ``stop`` in that thread, through the shared layer (only its requester or an
        admin stops its run, a redelivery acts once, a thread with no running research is
        told so), answered privately. A research still waiting in line there is not what
        the session showed (only a running research's delivery makes it ``processing``): it
        is left alone. A session left ``processing`` with nothing running there (a run that
        ended without moving it) is moved to ``active`` here, since Slack leaves that to the
        app."""
        team = context.team_id or body.get("team_id") or ""
        with _dropped_if_invalid():
            message = await self._stop_message(event, body, team)
            if message is None:
                return

            async def answer(text: str) -> None:
                await _ephemeral(
                    context,
                    channel=message.channel,
                    user=message.user,
                    thread=message.thread,
                    text=text,
                )

            runs = self.chat.store.runs
            waiting = await runs.active_run_in_thread(str(message.thread_key))
            if waiting is not None and waiting.status == RunStatus.QUEUED:
                if await self.chat.store.events.claim_event(message.dedupe_key):  # (once)
                    await answer(self.chat.replies(message.lang).nothing_running_in_thread())
                await self._end_session(context.client, message)
                return
            await self.chat.receive(message, answer, StopCommand())
            if await runs.active_run_in_thread(str(message.thread_key)) is None:
                await self._end_session(context.client, message)

    async def _stop_message(
        self, event: dict[str, Any], body: dict[str, Any], team: str
    ) -> ChatMessage | None:
        """The ``stop`` an ``agent_session_stopped`` event means, in the language of the
        thread's running research (None: the event names no thread)."""
        channel, user, thread = (event.get(k) for k in ("channel", "user", "thread_ts"))
        if not (isinstance(channel, str) and isinstance(user, str) and isinstance(thread, str)):
            log.info("slack: an agent_session_stopped event without its thread was dropped")
            return None
        event_id = body.get("event_id") or f"{team}:{channel}:{thread}:{event.get('event_ts')}"
        message = ChatMessage(
            platform="slack",
            workspace=team,
            channel=channel,
            thread=thread,
            user=user,
            text="stop",
            dedupe_key=f"slack:event:{event_id}",
            in_thread=True,
        )
        run = await self.chat.store.runs.active_run_in_thread(str(message.thread_key))
        if run is None:
            return message
        return dataclasses.replace(message, language=request_language(run.topic))

    @staticmethod
    async def _end_session(client: AsyncWebClient | None, message: ChatMessage) -> None:
        """The thread's session out of ``processing`` (nothing runs there to move it)."""
        if client is None:
            return
        try:
            await set_session(client, message.channel, message.thread, ENDED)
        except Exception as exc:
            log.info("slack: agent session not moved to active (%s)", describe_error(exc))

    async def on_action(self, body: dict[str, Any], context: AsyncBoltContext) -> None:
        """A press on one of a run's buttons (``block_actions``, acknowledged at once): the
        shared layer decides, and the presser alone sees the answer (ephemeral, in the
        pressed message's thread)."""
        actions = body.get("actions")
        action = actions[0] if isinstance(actions, list) and actions else None
        if not isinstance(action, dict) or (control := control_of(action.get("action_id"))) is None:
            return
        user = _field(body, "user", "id")
        channel = _field(body, "channel", "id") or _field(body, "container", "channel_id")
        team = context.team_id or _field(body, "team", "id") or _field(body, "user", "team_id")
        label = action.get("text")
        words = label.get("text") if isinstance(label, dict) else None
        language = request_language(words) if isinstance(words, str) else "en"
        run_id = str(action.get("value") or "")
        try:
            press = Press("slack", team, channel, user, run_id, control, language)
        except InvalidId as refused:
            log_refused("slack", refused, "dropped")
            return
        try:
            text = await self.chat.press(press)
        except Exception:
            log.exception("a press on %s by %s failed", control.action_id, user)
            text = self.chat.replies(press.language or "en").failure()
        thread = _field(body, "message", "thread_ts") or _field(body, "message", "ts") or None
        await _ephemeral(context, channel=channel, user=user, thread=thread, text=text)


@contextlib.contextmanager
def _dropped_if_invalid() -> Iterator[None]:
    """A delivery with an id no platform sends (``bots.chat.ids``): acknowledged already (Slack
    retries anything but a 2xx), dropped with one log line before anything is stored."""
    try:
        yield
    except InvalidId as refused:
        log_refused("slack", refused, "dropped")


def _field(body: dict[str, Any], name: str, key: str) -> str:
    """``body[name][key]`` as a string, or "" (a payload's parts may be missing or null)."""
    part = body.get(name)
    value = part.get(key) if isinstance(part, dict) else None
    return value if isinstance(value, str) else ""


async def _ephemeral(
    context: AsyncBoltContext, *, channel: str, user: str, thread: str | None, text: str
) -> None:
    """An answer only ``user`` sees, in the thread; a failure is logged, nothing more."""
    if context.client is None or not (channel and user):
        return
    try:
        await context.client.chat_postEphemeral(
            channel=channel, user=user, thread_ts=thread, text=text
        )
    except Exception as exc:
        log.warning("ephemeral reply in %s failed (%s)", channel, describe_error(exc))


async def _ack_event(ack: AsyncAck) -> None:
    """Events are acknowledged at once; the lazy listener does the work afterwards."""
    await ack()


async def _unhandled_delivery(error: Exception, body: dict[str, Any]) -> BoltResponse:
    """Bolt or a listener failed on a verified delivery (a payload shape nobody expected, or
    a bug): one log line (the traceback at DEBUG), and 400 so Slack does not retry it."""
    kind = body.get("type") or body.get("command") or "unknown"
    log.warning(
        "slack: could not handle a %.40s delivery (%s: %.200s)", kind, type(error).__name__, error
    )
    log.debug("slack delivery error", exc_info=error)
    return BoltResponse(status=400, body={"error": "could not handle this Slack delivery"})


class _TokenFromEnvNoise(logging.Filter):
    """Bolt reads SLACK_BOT_TOKEN from the environment and warns that our ``client`` wins;
    it does on purpose (``authorize`` supplies the token), so the warning is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "`token` will be unused" not in record.getMessage()


def build_bolt_app(
    settings: SlackSettings,
    commands: SlackCommands,
    *,
    client: AsyncWebClient,
    authorize: AsyncAuthorize,
    oauth: AsyncOAuthSettings | None = None,
) -> AsyncApp:
    """The Bolt app: verified requests (5-minute window), no self events, our listeners."""
    bolt_log = logging.getLogger("bots.slack.bolt")
    if not any(isinstance(f, _TokenFromEnvNoise) for f in bolt_log.filters):
        bolt_log.addFilter(_TokenFromEnvNoise())
    app = AsyncApp(
        client=client,
        signing_secret=settings.signing_secret or "",
        authorize=authorize,  # type: ignore[arg-type]  # an AsyncAuthorize is accepted
        oauth_settings=oauth,
        request_verification_enabled=True,
        ignoring_self_events_enabled=True,
        # Listeners answer Slack themselves: the slash command acks after its (DB-only)
        # work, events ack at once and are handled in lazy listeners. This skips Bolt's
        # 10 ms ack-polling loop per request.
        process_before_response=True,
        raise_error_for_unhandled_request=False,
        logger=bolt_log,
    )
    app.error(_unhandled_delivery)
    app.command(re.compile(r"^/.+"))(commands.on_command)  # whatever the app names it
    app.event("app_mention")(ack=_ack_event, lazy=[commands.on_mention])
    app.event("message")(ack=_ack_event, lazy=[commands.on_message])
    # The assistant pane (manifest features.assistant_view, retired in February 2027; an app on
    # features.agent_view gets neither event).
    app.event("assistant_thread_started")(
        ack=_ack_event, lazy=[commands.on_assistant_thread_started]
    )
    app.event("assistant_thread_context_changed")(
        ack=_ack_event, lazy=[commands.on_assistant_thread_context_changed]
    )
    # An agent (manifest features.agent_view): Slack's own Stop on a thread's session, and its
    # DM opened (suggested prompts, in place of the pane's assistant_thread_started).
    app.event("agent_session_stopped")(ack=_ack_event, lazy=[commands.on_agent_session_stopped])
    app.event("app_home_opened")(ack=_ack_event, lazy=[commands.on_app_home_opened])
    # Buttons (interactivity arrives at the same Request URL, and over Socket Mode).
    app.action(re.compile(f"^{re.escape(ACTION_PREFIX)}"))(
        ack=_ack_event, lazy=[commands.on_action]
    )
    if oauth is not None:
        # app_uninstalled / tokens_revoked delete the workspace's stored tokens; its runs
        # then fail as undeliverable instead of calling Slack with a dead token.
        app.enable_token_revocation_listeners()
    return app


def bolt_client(settings: SlackSettings) -> AsyncWebClient:
    """Bolt's base client: no token of its own (``authorize`` supplies one per request),
    every call (``auth.test``, ``oauth.v2.access``, replies) to ``SLACK_API_URL``."""
    client = make_web_client("", settings.api_url)
    client.token = None
    return client


@dataclass(frozen=True)
class SlackAuth:
    """Who the bot is per request (``authorize``), the clients its runs post with, and the
    OAuth install flow (multi-workspace only)."""

    authorize: AsyncAuthorize
    clients: SlackClients
    oauth: AsyncOAuthSettings | None = None


async def slack_auth(settings: SlackSettings, engine: AsyncEngine) -> SlackAuth:
    """One token (its identity learned now, retried per request when Slack does not answer),
    or the installations stored by the OAuth flow."""
    api = settings.api_url
    if settings.oauth:
        store = installation_store(settings, engine)
        return SlackAuth(
            InstallationAuthorize(store),
            InstallationClients(store, api),
            oauth_settings(settings, store, engine),
        )
    bot = make_web_client(settings.bot_token or "", api)
    authorize = TokenAuthorize(bot)
    try:
        me = await authorize.identify()
        log.info("slack: bot %s in workspace %s", me.get("user_id"), me.get("team_id"))
    except Exception as exc:
        why = describe_error(exc)
        log.warning("slack auth.test failed at start-up (%s); retried per request", why)
    return SlackAuth(authorize, StaticSlackClients(bot))


class SlackIngress:
    """Slack's side of ``fathom serve``: the Bolt app behind its gated endpoint
    (``/slack/events`` and the OAuth routes), and Socket Mode when ``SLACK_APP_TOKEN`` is set
    (opened on the replica holding its election)."""

    def __init__(
        self, settings: SlackSettings, auth: SlackAuth, chat: ChatCommands, limits: RouteLimits
    ) -> None:
        self._settings = settings
        self.app = build_bolt_app(
            settings,
            SlackCommands(chat, AssistantPane(chat.store.contexts, settings.suggested_prompts)),
            client=bolt_client(settings),
            authorize=auth.authorize,
            oauth=auth.oauth,
        )
        self._endpoint = SlackEndpoint(
            self.app,
            signing_secret=settings.signing_secret,
            max_body_bytes=limits.max_body_bytes,
            body_timeout=limits.body_timeout,
        )
        self._socket: AsyncSocketModeHandler | None = None

    async def handle(self, request: Request) -> Response:
        return await self._endpoint(request)

    async def connect(self) -> None:
        """Open Socket Mode."""
        settings = self._settings
        self._socket = socket = AsyncSocketModeHandler(
            self.app, settings.app_token, web_client=bolt_client(settings)
        )
        await socket.connect_async()  # type: ignore[no-untyped-call]
        log.info("slack: connected in Socket Mode")

    async def disconnect(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close_async()  # type: ignore[no-untyped-call]

    def status(self) -> dict[str, object]:
        return {"mode": "socket" if self._settings.socket_mode else "http"}

    async def close(self) -> None:
        await self.disconnect()
