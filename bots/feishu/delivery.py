"""One run's progress and report in Feishu/Lark (``core.operations.job.DeliveryFactory`` for
``feishu``): translation only, on the shared ``bots.chat.delivery.ChatDelivery``.

The progress card is a reply, in its thread, to the thread's root message (the request, or
the message a follow-up's thread started from) and is updated in place by PATCH. The report
follows as cards in the same thread. While the run works, a group's progress card says to
mention the bot in a reply unless plain replies reach the app (``bots.feishu.scopes``, asked
again at most every ten minutes as runs start). Every send carries a ``uuid`` derived from the run
(``<run id>:progress``, ``<run id>:r<n>``), so a retried or resumed send that Feishu already
accepted returns the same message instead of showing it twice. Files attached to the request
are downloaded from the messages that carried them (``FeishuApi.download_resource``).

A report longer than one card becomes a cloud document (``bots.feishu.docs``: in the app's
space, or ``FATHOM_FEISHU_DOC_FOLDER``; readable by the chat's members, or in a private chat
the requester, and by the tenant through its link only with ``FATHOM_FEISHU_DOC_SHARING=
tenant``) and the thread gets one summary card linking it (``<run id>:summary``); a tenant
whose Feishu refuses documents gets the usual cards (``bots.chat.documents``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bots.chat.controls import Button, feedback_buttons
from bots.chat.delivery import ThreadPoster, ThreadPosters
from bots.chat.documents import DocumentContent, DocumentRefused
from bots.chat.errors import judge_failure
from bots.feishu.api import FeishuApi
from bots.feishu.docs import Audience, DocsRefused, FeishuDocs
from bots.feishu.events import CHAT_TYPE
from bots.feishu.render import notice_card, progress_card, report_cards, summary_card
from bots.feishu.scopes import GroupMessages
from core.chat.stores import ChatStores, RunRecord
from core.documents.attachments import AttachmentRefused, attachment_kind
from core.engine.progress import ProgressTask
from core.failures import PostFailure
from core.models import Attachment
from core.operations.digests import heading_of
from core.research.outcome import RunOutcome
from core.values import ReportDocument, ThreadKey
from core.words.reasons import Reason

log = logging.getLogger(__name__)

#: Feishu's limits: 5 updates a second of one card, 1,000 calls a minute for the app.
MIN_EDIT_INTERVAL = 0.2
APP_CALLS_PER_MINUTE = 900.0


def classify_error(error: Exception) -> PostFailure:
    """A failed feishu call judged the way every platform's is (``bots.chat.errors``)."""
    return judge_failure(error, "feishu", rate_limit_wait=1.0)


@dataclass(frozen=True)
class ReportCard:
    number: int
    content: str
    #: What its send's ``uuid`` says after the run id (``r<number>`` unless given).
    key: str = ""


def requester_open_id(requested_by: str | None) -> str:
    """``feishu:<tenant>:<open id>`` → ``<open id>`` (empty when it is not one)."""
    parts = (requested_by or "").split(":")
    ok = len(parts) == 3 and parts[0] == "feishu" and parts[2].startswith("ou_")
    return parts[2] if ok else ""


class FeishuThread(ThreadPoster):
    """``bots.chat.delivery.ThreadPoster`` for one run's Feishu thread (a digest's card opens
    a new thread in the chat: the shared delivery re-keys the ``pending-…`` thread to it)."""

    document_kind = "docx"

    def __init__(
        self,
        run: RunRecord,
        api: FeishuApi,
        group_messages: GroupMessages | None = None,
        docs: FeishuDocs | None = None,
    ) -> None:
        super().__init__(run)
        self._api = api
        self._group_messages = group_messages
        self._docs = docs
        self._title = heading_of(run)

    @property
    def _mention_needed(self) -> bool:
        """Whether a reply in this run's thread must mention the bot to reach it: in a group
        (a private chat's every message reaches it), unless plain replies are heard."""
        in_private = (self.run.platform_context or {}).get(CHAT_TYPE) == "p2p"
        heard = self._group_messages is not None and self._group_messages.heard
        return not (in_private or heard)

    @property
    def root(self) -> str:
        """The message the run's messages reply to (the thread's first message)."""
        return self.thread.thread

    def _uuid(self, what: str) -> str:
        return f"{self.run.id}:{what}"

    def render_progress(
        self,
        status: str,
        message_id: str | None,
        buttons: Sequence[Button] = (),
        tasks: Sequence[ProgressTask] = (),
    ) -> str:
        return progress_card(
            self.run.topic,
            self.run.depth,
            status,
            language=self.language,
            title=self._title,
            buttons=buttons,
            mention_to_steer=bool(buttons) and self._mention_needed,
        )

    async def post_progress(self, content: str) -> str:
        if self.needs_opener:  # a digest: its card opens a new thread in the chat
            return await self._api.create_message(
                self.thread.channel, "interactive", content, uuid=self._uuid("progress")
            )
        return await self._api.reply(self.root, "interactive", content, uuid=self._uuid("progress"))

    async def edit_progress(self, message_id: str, content: str) -> None:
        await self._api.patch_card(message_id, content)

    def report_parts(self, outcome: RunOutcome) -> Sequence[ReportCard]:
        feedback = feedback_buttons(self.run.id, self.language)
        cards = report_cards(outcome.report_markdown or "", outcome.sources, feedback)
        return [ReportCard(number, content) for number, content in enumerate(cards, 1)]

    async def post_report_part(self, part: ReportCard) -> None:
        await self._api.reply(
            self.root, "interactive", part.content, uuid=self._uuid(part.key or f"r{part.number}")
        )

    async def create_document(self, content: DocumentContent) -> ReportDocument:
        """The report as a cloud document readable by this chat (``bots.feishu.docs``); a
        refusal Feishu gave before for this tenant is :class:`DocumentRefused` at once,
        without a call, and not logged again."""
        if self._docs is None:
            raise DocumentRefused("cloud documents are not set up for this Feishu app")
        in_private = (self.run.platform_context or {}).get(CHAT_TYPE) == "p2p"
        audience = Audience(
            self.thread.channel, requester_open_id(self.run.requested_by), private=in_private
        )
        try:
            published = await self._docs.publish(
                self.thread.workspace,
                content.title,
                content.markdown,
                content.sources,
                content.quotes,
                content.language,
                audience,
            )
        except DocsRefused as refused:
            raise DocumentRefused(refused.reason, first=refused.first) from refused
        return ReportDocument(kind="docx", id=published.document_id, url=published.url)

    def summary_parts(
        self, outcome: RunOutcome, content: DocumentContent, document: ReportDocument
    ) -> Sequence[ReportCard]:
        """One card: the executive summary, the claim-check line, the document's button and
        the feedback buttons."""
        card = summary_card(
            content.title,
            content.summary,
            content.sources,
            content.claims_line,
            document.url,
            language=content.language,
            feedback=feedback_buttons(self.run.id, self.language),
        )
        return [ReportCard(1, card, key="summary")]

    async def post_notice(self, text: str) -> None:
        await self._api.reply(self.root, "interactive", notice_card(text), uuid=self._uuid("n"))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file from the message that carried it (the message resource API, the tenant
        token, ``FEISHU_DOMAIN`` only)."""
        if not attachment.message_id:
            raise AttachmentRefused(
                Reason("the message carrying the file is not known", "不知道携带该文件的消息")
            )
        return await self._api.download_resource(
            attachment.message_id,
            attachment.id,
            max_bytes,
            html=attachment_kind(attachment.name, attachment.mime) == "html",
        )


class FeishuPosters(ThreadPosters):
    """The posters of thread keys ``feishu:<tenant>:<chat>:<root>``."""

    def __init__(
        self,
        api: FeishuApi,
        store: ChatStores,
        *,
        edit_interval: float = 1.0,
        group_messages: GroupMessages | None = None,
        docs: FeishuDocs | None = None,
    ) -> None:
        super().__init__(
            store,
            edit_interval=max(edit_interval, MIN_EDIT_INTERVAL),
            per_minute=APP_CALLS_PER_MINUTE,
            burst=20,
        )
        self._api = api
        self._group_messages = group_messages
        self._docs = docs

    async def poster_for(self, run: RunRecord) -> FeishuThread:
        if self._group_messages is not None:
            await self._group_messages.refresh()  # at most every CHECK_EVERY seconds
        return FeishuThread(run, self._api, self._group_messages, self._docs)

    async def delete_document(self, thread: ThreadKey, document: ReportDocument) -> None:
        """Move a report's cloud document to the recycle bin (``fathom forget``, retention, a
        second one a resumed delivery made); one already gone counts as deleted."""
        if document.kind != "docx" or not document.id:
            return
        docs = self._docs or FeishuDocs(self._api)
        await docs.delete(document.id)
