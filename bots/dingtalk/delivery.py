"""One run's progress and report in DingTalk (``core.operations.job.DeliveryFactory`` for
``dingtalk``): translation only, on the shared ``bots.chat.delivery.ChatDelivery``.

DingTalk has no threads and cannot edit a plain message, so:
- the progress message is a card instance delivered to the conversation (the template of
  ``DINGTALK_CARD_TEMPLATE_ID``, or the standard Markdown card) and updated in place; its
  ``outTrackId`` is derived from the run, so it is the same card whoever resumes the run. When
  DingTalk refuses cards (the app lacks the card permission) the progress falls back to a plain
  message at the start and one at the end, and the process logs once what to grant;
- messages (report parts, the fallback progress, notices) go through the request's session
  webhook while it is valid, and through the robot OpenAPI (group or one-to-one send) once it
  has expired or refuses; the first report part @-mentions the requester;
- a file of the request is read through the robot's file-download OpenAPI
  (``bots.dingtalk.files``);
- where presses reach the app (the stream, or the registered HTTP callback address:
  ``bots.dingtalk.callbacks``) and with the standard template, the progress card is the
  standard Markdown card *with buttons* ("Stop and write now", "Cancel"; removed in the
  final state), and a small card with 👍/👎 follows the report (``outTrackId``
  ``fathom_fb_<run>``). A custom template (``DINGTALK_CARD_TEMPLATE_ID``) gets its
  ``markdown`` only; where cards are refused there are no buttons (the typed ``stop`` and
  ``cancel`` still work).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bots.chat.controls import Button, feedback_buttons
from bots.chat.delivery import ThreadPoster, ThreadPosters
from bots.chat.errors import judge_failure
from bots.dingtalk import files
from bots.dingtalk.api import DingTalkApi, DingTalkError
from bots.dingtalk.callbacks import CardCallbacks
from bots.dingtalk.render import (
    FEEDBACK_TRACK,
    PROGRESS_TRACK,
    ReportMessage,
    card_buttons,
    escape_text,
    feedback_markdown,
    progress_markdown,
    progress_title,
    report_messages,
)
from bots.dingtalk.send import Conversation, space_of
from core.chat.stores import ChatStores, RunRecord
from core.engine.progress import ProgressTask
from core.failures import PostFailure
from core.models import Attachment
from core.operations.digests import heading_of
from core.research.outcome import RunOutcome

log = logging.getLogger(__name__)

#: The standard Markdown card (the template the official SDK uses), and its variable.
STANDARD_CARD_TEMPLATE = "589420e2-c1e2-46ef-a5ed-b8728e654da9.schema"
CARD_KEY = "markdown"
#: The standard Markdown card with buttons (the SDK's ``MarkdownButtonCardInstance``), and
#: the variable holding its buttons (``{"msgButtons": [...]}`` as a JSON string).
BUTTON_CARD_TEMPLATE = "1366a1eb-bc54-4859-ac88-517c56a9acb1.schema"
BUTTONS_KEY = "sys_full_json_obj"
#: The progress message id of the plain-message fallback (cards refused).
PLAIN = "plain"
#: DingTalk's permission for card instances (the console's permission list names it).
CARD_PERMISSION = "Card.Instance.Write"


def classify_error(error: Exception) -> PostFailure:
    """A failed dingtalk call judged the way every platform's is (``bots.chat.errors``)."""
    return judge_failure(error, "dingtalk", rate_limit_wait=2.0)


class CardsRefused:
    """Whether this process found DingTalk refusing cards (so it stops asking every run), and
    the one log line that says what to grant."""

    def __init__(self) -> None:
        self.refused = False

    def note(self, error: DingTalkError) -> None:
        if not self.refused:
            log.warning(
                "dingtalk refused the progress card (%s: %s); grant the app the %s permission "
                "(developer console: Permissions > card) and publish it; until then progress "
                "is posted as a message at the start and one at the end",
                error.code,
                error.message[:120],
                CARD_PERMISSION,
            )
        self.refused = True


@dataclass(frozen=True)
class FeedbackCard:
    """The last part of a report: the small card with 👍/👎."""

    out_track_id: str
    markdown: str
    buttons: Sequence[Button]


class DingTalkThread(ThreadPoster):
    """``bots.chat.delivery.ThreadPoster`` for one run's DingTalk conversation (no threads:
    a digest's messages go to the conversation, with no opener)."""

    opens_threads = False
    rate_limit_wait = 2.0

    def __init__(
        self,
        run: RunRecord,
        api: DingTalkApi,
        *,
        template_id: str | None,
        cards: CardsRefused,
        callbacks: CardCallbacks | None = None,
    ) -> None:
        super().__init__(run)
        self._api = api
        self._callbacks = callbacks
        #: Buttons only on our own template, and only where their presses reach the app.
        self._buttons = callbacks is not None and callbacks.enabled and template_id is None
        default = BUTTON_CARD_TEMPLATE if self._buttons else STANDARD_CARD_TEMPLATE
        self._template = template_id or default
        self._cards = cards
        context: dict[str, Any] = dict(run.platform_context or {})
        self._space = space_of(context, run.thread.channel)
        try:
            expires_ms = int(context.get("webhook_expires_ms") or 0)
        except ValueError:
            expires_ms = 0
        self._conversation = Conversation(
            api,
            self._space,
            # A digest's firing has no message of its own: always the robot OpenAPI.
            webhook=None if run.digest_id else (str(context.get("webhook") or "") or None),
            expires_ms=expires_ms,
            nick=str(context.get("nick") or ""),
        )
        self._title = heading_of(run)

    # -- progress ---------------------------------------------------------------------------
    def render_progress(
        self,
        status: str,
        message_id: str | None,
        buttons: Sequence[Button] = (),
        tasks: Sequence[ProgressTask] = (),
    ) -> str:
        """The card's variables as JSON (the Markdown, and the buttons where they are shown)."""
        content = progress_markdown(self.run.topic, self.run.depth, status, language=self.language)
        markdown = f"### {escape_text(self._title)}\n\n{content}" if self._title else content
        params = {CARD_KEY: markdown}
        if self._buttons:
            params[BUTTONS_KEY] = card_buttons(buttons)  # none: removes them
        return json.dumps(params, ensure_ascii=False)

    async def _card_params(self, content: str) -> dict[str, str]:
        """The card's variables; its buttons only once their presses can come back."""
        params: dict[str, str] = json.loads(content)
        if BUTTONS_KEY in params and not await self._callbacks_ready():
            del params[BUTTONS_KEY]
        return params

    async def _callbacks_ready(self) -> bool:
        return self._callbacks is not None and await self._callbacks.ready()

    @property
    def _route(self) -> str | None:
        return self._callbacks.route if self._callbacks is not None else None

    async def post_progress(self, content: str) -> str:
        params = await self._card_params(content)
        track = f"{PROGRESS_TRACK}{self.run.id}"
        if await self._create_card(track, params):
            return track
        await self._send(progress_title(self.language), params[CARD_KEY], mention=False)
        return PLAIN

    async def _create_card(self, track: str, params: dict[str, str]) -> bool:
        """Deliver a card to the conversation; False when DingTalk refuses cards (noted once
        for the process, which then stops asking)."""
        if self._cards.refused:
            return False
        try:
            await self._api.create_card(
                out_track_id=track,
                template_id=self._template,
                params=params,
                space=self._space,
                callback_route=self._route,
            )
        except DingTalkError as exc:
            if not exc.forbidden:
                raise
            self._cards.note(exc)
            return False
        return True

    async def edit_progress(self, message_id: str, content: str) -> None:
        await self._api.update_card(message_id, await self._card_params(content))

    def can_edit(self, message_id: str) -> bool:
        return message_id != PLAIN

    # -- messages ----------------------------------------------------------------------------
    def report_parts(self, outcome: RunOutcome) -> Sequence[ReportMessage | FeedbackCard]:
        parts: list[ReportMessage | FeedbackCard] = list(
            report_messages(outcome.report_markdown or "", outcome.sources)
        )
        if self._buttons:
            parts.append(
                FeedbackCard(
                    f"{FEEDBACK_TRACK}{self.run.id}",
                    feedback_markdown(self.language),
                    feedback_buttons(self.run.id, self.language),
                )
            )
        return parts

    async def post_report_part(self, part: ReportMessage | FeedbackCard) -> None:
        if isinstance(part, ReportMessage):
            await self._send(part.title, part.text, mention=part.mention)
            return
        if self._cards.refused or not await self._callbacks_ready():
            return  # no card, or no way back for a press: the report stands on its own
        params = {CARD_KEY: part.markdown, BUTTONS_KEY: card_buttons(part.buttons)}
        await self._create_card(part.out_track_id, params)

    async def post_notice(self, text: str) -> None:
        await self._send("Fathom", escape_text(text), mention=False)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file of the request (``bots.dingtalk.files``): its ``downloadCode`` exchanged
        through the robot OpenAPI, then read from DingTalk's storage within ``max_bytes``."""
        return await files.download(self._api, attachment, max_bytes)

    async def _send(self, title: str, text: str, *, mention: bool) -> None:
        await self._conversation.send(title, text, mention=mention)


class DingTalkPosters(ThreadPosters):
    """The posters of thread keys ``dingtalk:<corp>:<conversation>:<msgId>``."""

    def __init__(
        self,
        api: DingTalkApi,
        store: ChatStores,
        *,
        template_id: str | None = None,
        edit_interval: float = 1.0,
        callbacks: CardCallbacks | None = None,
    ) -> None:
        super().__init__(store, edit_interval=edit_interval, per_minute=600.0, burst=20)
        self._api = api
        self._template = template_id
        self.callbacks = callbacks
        self.cards = CardsRefused()

    async def poster_for(self, run: RunRecord) -> DingTalkThread:
        return DingTalkThread(
            run, self._api, template_id=self._template, cards=self.cards, callbacks=self.callbacks
        )
