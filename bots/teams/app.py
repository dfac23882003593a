"""Teams in ``fathom serve``: ``POST /teams/messages``, translated for the shared chat layer.

Every activity is checked before anything else looks at it: the body within the route's
limits (``bots.http_gate``), then its bearer token (``bots.teams.auth``: signed by the Bot
Framework for this bot and for the activity's service URL). An unsigned or forged activity
gets 401 and nothing is stored; keys that cannot be fetched give 503 (Teams delivers again).
An activity of another channel of the Azure Bot (Web Chat, Direct Line: their clients write
the channel data and the sender) gets 403, and so does, for a single-tenant bot
(``TEAMS_APP_TENANT_ID``), one of another tenant.

Then:

- a ``message`` to the bot records the conversation's reference (``bots.teams.references``)
  and becomes a :class:`~bots.chat.message.ChatMessage` for ``ChatCommands.receive``
  (deduplicated by activity id in the database), or, when it holds only files,
  ``ChatCommands.receive_files``; answered 200 once the request is recorded, its reply
  (help, errors, status) posted afterwards in the request's chain. A message not addressed
  to the bot (the channel permission delivers them all) only steers a running research
  when it is a reply in its chain;
- an ``adaptiveCard/action`` invoke (a press on a card's button) records the reference too,
  and is decided at once (database only) and answered with the message Teams shows the
  presser;
- the bot being installed or added (``installationUpdate``, ``conversationUpdate``) only
  records the reference, so digests can post there; the app removed forgets it, and cancels
  the research running there (nothing of it could be posted), said in the log.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bots.chat.background import Background
from bots.chat.controls import Press
from bots.chat.ids import InvalidId, log_refused
from bots.chat.inbound import ChatCommands
from bots.chat.markdown import MARKDOWN_ENTITIES
from bots.chat.platform import HttpIngress
from bots.chat.replies import MarkdownMarkup
from bots.chat.settings import RouteLimits
from bots.http_gate import Rejected, parse_json, read_body, rejected_response
from bots.teams.api import TeamsApi
from bots.teams.auth import CHANNEL, ActivityAuth, Unauthenticated
from bots.teams.credentials import CredentialsCheck
from bots.teams.delivery import CancelRun, classify_error
from bots.teams.events import (
    ACTION_INVOKE,
    PLATFORM,
    TeamsRequest,
    channel_key,
    reference_of,
    tenant_of,
    translate,
    translate_press,
)
from bots.teams.references import ConversationReferences
from bots.teams.render import text_activity
from bots.teams.settings import TeamsSettings
from core.untrusted import WORD_JOINER, neutralise
from core.values import ThreadKey
from core.words.wording import Language, pick

log = logging.getLogger(__name__)

#: What an ``adaptiveCard/action`` answer is: a message Teams shows the presser.
MESSAGE_RESPONSE = "application/vnd.microsoft.activity.message"


def _ids(members: object) -> set[str]:
    listed = members if isinstance(members, list) else []
    return {str(m.get("id")) for m in listed if isinstance(m, dict)}


def _removed(activity: dict[str, Any], bot_id: str) -> bool:
    """The app or the bot taken out of the conversation, or the conversation gone
    ("Conversation events in your Teams bot")."""
    if activity.get("type") == "installationUpdate":
        return activity.get("action") in ("remove", "remove-upgrade")
    data = activity.get("channelData")
    event = data.get("eventType") if isinstance(data, dict) else None
    removed = bot_id in _ids(activity.get("membersRemoved"))
    return removed or event in ("channelDeleted", "teamDeleted")


def _added(activity: dict[str, Any], bot_id: str) -> bool:
    """The app installed, or the bot added to the conversation."""
    if activity.get("type") == "installationUpdate":
        return activity.get("action") in ("add", "add-upgrade")
    return bot_id in _ids(activity.get("membersAdded"))


#: Characters Markdown reads in untrusted text, as entities; ``&`` too, so that an entity in
#: the text stays as written.
_TEXT_ENTITIES = str.maketrans({"&": "&amp;", **MARKDOWN_ENTITIES})


def escape_text(text: str) -> str:
    """Untrusted text shown as itself in a Markdown message: no mention, tag, emphasis or
    link (an address is split by a word joiner, so Teams does not make it a link)."""
    shown = neutralise(text).translate(_TEXT_ENTITIES)
    return shown.replace("://", ":" + WORD_JOINER + "//").replace("www.", "www" + WORD_JOINER + ".")


def teams_markup() -> MarkdownMarkup:
    """Replies as Markdown messages; a Teams thread is pointed at by its reply chain."""

    def where(thread: ThreadKey, language: Language) -> str:
        return pick(language, "in its reply chain", "在它的回复链中")

    return MarkdownMarkup("teams", escape_text, where)


class TeamsAdapter(HttpIngress):
    """The Teams side of ``fathom serve``: the messaging endpoint and its answers."""

    def __init__(
        self,
        settings: TeamsSettings,
        chat: ChatCommands,
        api: TeamsApi,
        auth: ActivityAuth,
        references: ConversationReferences | None,
        limits: RouteLimits,
        *,
        cancel: CancelRun | None = None,
        credentials: CredentialsCheck | None = None,
    ) -> None:
        self._settings = settings
        self._chat = chat
        self._api = api
        self._auth = auth
        self._references = references
        self._limits = limits
        self._cancel = cancel
        self._credentials = credentials
        self._bot_id = f"28:{settings.app_id}"
        self._background = Background()

    def status(self) -> dict[str, object]:
        """Its mode, and whether the identity platform gives the bot its token
        (``bots.teams.credentials``)."""
        shown = super().status()
        if self._credentials is not None:
            shown = {**shown, **self._credentials.status()}
        return shown

    async def handle(self, request: Request) -> Response:
        """``POST /teams/messages``."""
        try:
            body = await read_body(request, self._limits.max_body_bytes, self._limits.body_timeout)
            try:
                activity = parse_json(body)
            except ValueError:
                raise Rejected(400, "the activity is not JSON") from None
            if not isinstance(activity, dict):
                raise Rejected(400, "the activity is not a JSON object")
            service_url = activity.get("serviceUrl")
            if not isinstance(service_url, str) or not service_url:
                raise Rejected(400, "the activity has no serviceUrl")
            try:
                await self._auth.verify(request.headers.get("authorization"), service_url)
            except Unauthenticated as exc:
                raise Rejected(401, str(exc)) from None
            if activity.get("channelId") != CHANNEL:
                # Another channel of the same Azure Bot (Web Chat, Direct Line) signs with the
                # same keys, and its client writes the channel data and sender.
                raise Rejected(403, "not an activity of the Microsoft Teams channel")
            tenant = self._settings.app_tenant_id
            if tenant and tenant_of(activity) != tenant:
                raise Rejected(403, "an activity of another tenant")
        except Rejected as rejection:
            return rejected_response(request, rejection)
        except httpx.HTTPError as exc:
            log.warning("teams: the signing keys could not be fetched (%s)", exc)
            return JSONResponse({"error": "cannot check the activity's token now"}, 503)
        try:
            return await self._dispatch(activity)
        except InvalidId as refused:  # a forged id: nothing stored, nothing to retry
            log_refused(PLATFORM, refused, "400")
            return JSONResponse({"error": "the activity has an invalid id"}, 400)
        except Exception:
            # Not recorded: Teams delivers it again (and the dedupe keeps that safe).
            log.exception("teams activity could not be handled")
            return JSONResponse({"error": "temporarily unable to handle this activity"}, 500)

    async def _dispatch(self, activity: dict[str, Any]) -> Response:
        kind = activity.get("type")
        if kind == "invoke" and activity.get("name") == ACTION_INVOKE:
            press = translate_press(activity)  # its ids checked before anything is stored
            await self._remember(activity)
            return JSONResponse(await self.press(activity, press))
        if kind == "message":
            await self.receive(activity)
        elif kind in ("installationUpdate", "conversationUpdate"):
            if _removed(activity, self._bot_id):
                await self._forget(activity)
            elif _added(activity, self._bot_id):
                await self._remember(activity)
        return JSONResponse({})

    async def _forget(self, activity: dict[str, Any]) -> None:
        """A channel deleted is forgotten; the app or bot removed from a team, or the team
        deleted, forgets every channel of the team; elsewhere, the conversation. The runs
        still working there are cancelled: nothing of theirs could be posted."""
        reference = reference_of(activity)
        if reference is None:
            return
        data = activity.get("channelData")
        event = data.get("eventType") if isinstance(data, dict) else None
        conversations = [reference.conversation]
        if self._references is not None:
            if reference.team and event != "channelDeleted":
                team = await self._references.forget_team(reference.tenant, reference.team)
                conversations += [c for c in team if c != reference.conversation]
            await self._references.forget(reference)
        await self._stop_runs(reference.tenant, conversations)

    async def _stop_runs(self, tenant: str, conversations: list[str]) -> None:
        """Cancel the unfinished runs of ``conversations`` (the bot was removed from them)."""
        if self._cancel is None:
            return
        workspace = tenant or "tenant"  # as events.translate keys a tenant-less activity
        for conversation in conversations:
            key = channel_key(conversation)
            runs = await self._chat.store.runs.active_runs_in_channel(PLATFORM, workspace, key)
            for run in runs:
                log.warning(
                    "teams: the bot was removed from %s: run %s is cancelled (nothing of it "
                    "could be posted there)",
                    key,
                    run.id,
                )
                await self._cancel(run.id)

    async def _remember(self, activity: dict[str, Any]) -> None:
        reference = reference_of(activity)
        if reference is not None and self._references is not None:
            await self._references.remember(reference)

    async def receive(self, activity: dict[str, Any]) -> None:
        """One message: recorded (and a run committed) when this returns. Where the bot may
        post is recorded for a message to the bot, not for every channel message the
        channel permission delivers."""
        request = translate(activity, self._bot_id, file_window=self._settings.file_window)
        if request is None:
            return
        if request.message.addressed:
            await self._remember(activity)

        async def answer(text: str) -> None:
            self._background.spawn(self._answer(request, text))

        if request.files_only and request.reference.kind == "personal":
            await self._chat.receive_files(request.message, answer)
            return
        await self._chat.receive(request.message, answer)

    async def press(self, activity: dict[str, Any], press: Press | None = None) -> dict[str, Any]:
        """A press on a card's button, decided now; the answer Teams shows the presser
        (``press``: the activity already translated)."""
        press = press or translate_press(activity)
        if press is None:
            return {"statusCode": 200, "type": MESSAGE_RESPONSE, "value": ""}
        try:
            text = await self._chat.press(press, plain=True)
        except Exception:
            log.exception("teams: a press on %s failed", press.control.action_id)
            text = self._chat.replies(press.language or "en").failure()
        return {"statusCode": 200, "type": MESSAGE_RESPONSE, "value": text}

    async def _answer(self, request: TeamsRequest, text: str) -> None:
        activity = text_activity(text)
        if request.reference.kind != "channel":
            activity["replyToId"] = request.activity_id
        try:
            await self._api.send(request.reference.service_url, request.answer_to, activity)
        except Exception as exc:
            log.warning("teams answer to a request failed (%s)", classify_error(exc).reason)

    async def close(self) -> None:
        await self._background.drain()
