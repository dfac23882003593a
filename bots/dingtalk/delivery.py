"""One run's progress and report in DingTalk (``core.delivery.DeliveryFactory`` for
``dingtalk``): translation only, on the shared ``bots.chat.delivery.ChatDelivery``.

DingTalk has no threads and cannot edit a plain message, so:
- the progress message is a card instance delivered to the conversation (the template of
  ``DINGTALK_CARD_TEMPLATE_ID``, or the standard Markdown card) and updated in place; its
  ``outTrackId`` is derived from the run, so it is the same card whoever resumes the run. When
  DingTalk refuses cards (the app lacks the card permission) the progress falls back to a plain
  message at the start and one at the end, and the process logs once what to grant;
- messages (report parts, the fallback progress, notices) go through the request's session
  webhook while it is valid, and through the robot OpenAPI (group or one-to-one send) once it
  has expired or refuses; the first report part @-mentions the requester.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import httpx

from bots.chat.delivery import ChatDelivery
from bots.chat.throttle import WorkspaceLimiters
from bots.dingtalk.api import DingTalkApi, DingTalkError, Space
from bots.dingtalk.render import (
    ReportMessage,
    escape_text,
    progress_markdown,
    progress_title,
    report_messages,
)
from core.delivery import PostFailure
from core.digests import heading_of
from core.models import ThreadKey
from core.service import RunOutcome
from core.wording import request_language
from storage import RunRecord, Store

log = logging.getLogger(__name__)

#: The standard Markdown card (the template the official SDK uses), and its variable.
STANDARD_CARD_TEMPLATE = "589420e2-c1e2-46ef-a5ed-b8728e654da9.schema"
CARD_KEY = "markdown"
#: The progress message id of the plain-message fallback (cards refused).
PLAIN = "plain"
#: A session webhook is not used in the last minute of its life.
WEBHOOK_MARGIN_MS = 60_000
#: DingTalk's permission for card instances (the console's permission list names it).
CARD_PERMISSION = "Card.Instance.Write"


def classify_error(error: Exception) -> PostFailure:
    """Rate-limited (wait), final (DingTalk's own answer says so: ``DingTalkError.final``),
    or worth another try: any other code, a 5xx or a body that was no DingTalk answer (HTML,
    empty, cut off), the network, any other exception."""
    if isinstance(error, DingTalkError):
        if error.rate_limited:
            return PostFailure("dingtalk: rate limited", True, error.retry_after or 2.0)
        reason = f"dingtalk {error.code}: {error.message[:120]}"
        return PostFailure(reason, not error.final)
    if isinstance(error, (httpx.TransportError, OSError, TimeoutError)):
        return PostFailure(f"dingtalk unreachable ({type(error).__name__})", True)
    return PostFailure(f"{type(error).__name__}: {str(error)[:120]}", True)


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


class DingTalkThread:
    """``bots.chat.delivery.ThreadPoster`` for one run's DingTalk conversation."""

    def __init__(
        self,
        run: RunRecord,
        api: DingTalkApi,
        *,
        template_id: str | None,
        cards: CardsRefused,
    ) -> None:
        self._run = run
        self._api = api
        self._template = template_id or STANDARD_CARD_TEMPLATE
        self._cards = cards
        context: dict[str, Any] = dict(run.platform_context or {})
        key = ThreadKey.parse(run.thread_key)
        self._space = Space(
            group=context.get("conversation_type") == "group",
            conversation_id=str(context.get("conversation_id") or key.channel),
            staff_id=str(context.get("staff_id") or ""),
        )
        self._nick = str(context.get("nick") or "")
        # A digest's firing has no message of its own: always the robot OpenAPI.
        self._webhook = None if run.digest_id else (str(context.get("webhook") or "") or None)
        self._title = heading_of(run)
        try:
            self._webhook_expires_ms = int(context.get("webhook_expires_ms") or 0)
        except ValueError:
            self._webhook_expires_ms = 0
        self.language = request_language(run.topic)

    # -- progress ---------------------------------------------------------------------------
    def render_progress(self, status: str, message_id: str | None) -> str:
        content = progress_markdown(
            self._run.topic, self._run.depth, status, language=self.language
        )
        return f"### {escape_text(self._title)}\n\n{content}" if self._title else content

    async def post_progress(self, content: str) -> str:
        if not self._cards.refused:
            track = f"fathom_{self._run.id}"
            try:
                await self._api.create_card(
                    out_track_id=track,
                    template_id=self._template,
                    params={CARD_KEY: content},
                    space=self._space,
                )
                return track
            except DingTalkError as exc:
                if not exc.forbidden:
                    raise
                self._cards.note(exc)
        await self._send(progress_title(self.language), content, mention=False)
        return PLAIN

    async def edit_progress(self, message_id: str, content: str) -> None:
        await self._api.update_card(message_id, {CARD_KEY: content})

    def can_edit(self, message_id: str) -> bool:
        return message_id != PLAIN

    async def resume(self, message_id: str | None) -> None:
        return None

    @property
    def needs_opener(self) -> bool:
        return False

    # -- messages ----------------------------------------------------------------------------
    def report_parts(self, outcome: RunOutcome) -> Sequence[ReportMessage]:
        return report_messages(outcome.report_markdown or "", outcome.sources)

    async def post_report_part(self, part: ReportMessage) -> None:
        await self._send(part.title, part.text, mention=part.mention)

    async def post_notice(self, text: str) -> None:
        await self._send("Fathom", escape_text(text), mention=False)

    def classify(self, error: Exception) -> PostFailure:
        return classify_error(error)

    def _webhook_valid(self) -> bool:
        expires = self._webhook_expires_ms - WEBHOOK_MARGIN_MS
        return self._webhook is not None and time.time() * 1000 < expires

    async def _send(self, title: str, text: str, *, mention: bool) -> None:
        """Through the session webhook while it is valid; through the OpenAPI otherwise, or
        when the webhook refuses (a rate limit or an outage is raised: retried later)."""
        staff = self._space.staff_id
        if self._webhook is not None and self._webhook_valid():
            body: dict[str, Any] = {
                "msgtype": "markdown",
                "markdown": {
                    "title": title,
                    "text": f"@{staff}\n\n{text}" if mention and staff else text,
                },
            }
            if mention and staff:
                body["at"] = {"atUserIds": [staff], "isAtAll": False}
            try:
                await self._api.post_webhook(self._webhook, body)
                return
            except DingTalkError as exc:
                if exc.rate_limited or exc.status >= 500:
                    raise
                log.info("dingtalk session webhook refused (%s); using the OpenAPI", exc.code)
                self._webhook = None
            except httpx.HTTPError as exc:  # unreachable or malformed: the OpenAPI instead
                log.info(
                    "dingtalk session webhook failed (%s); using the OpenAPI", type(exc).__name__
                )
                self._webhook = None
        # The mention on a line of its own: a report's first line is its heading.
        shown = f"@{escape_text(self._nick)}\n\n{text}" if mention and self._nick else text
        await self._api.send_markdown(self._space, title, shown)


class DingTalkDeliveryFactory:
    """``core.delivery.DeliveryFactory`` for keys ``dingtalk:<corp>:<conversation>:<msgId>``."""

    def __init__(
        self,
        api: DingTalkApi,
        store: Store,
        *,
        template_id: str | None = None,
        edit_interval: float = 1.0,
    ) -> None:
        self._api = api
        self._store = store
        self._template = template_id
        self._interval = edit_interval
        self._limiters = WorkspaceLimiters(per_minute=600.0, burst=20)
        self.cards = CardsRefused()

    async def for_run(self, run: RunRecord) -> ChatDelivery:
        corp = ThreadKey.parse(run.thread_key).workspace
        poster = DingTalkThread(run, self._api, template_id=self._template, cards=self.cards)
        return ChatDelivery(
            run,
            poster,
            self._store,
            edit_interval=self._interval,
            limiter=self._limiters.for_team(corp),
        )
