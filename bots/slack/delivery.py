"""One run's progress and report in Slack (``core.operations.job.DeliveryFactory`` for ``slack``).

A slash command has no message to thread under, so its run starts in a ``pending-…``
thread: the first progress event posts a top-level opener, which becomes both the
progress message and the thread (the thread row is re-keyed to its ``ts``). Runs started
in a thread reply there. A resumed run edits the progress message it already has.

The report is posted as parts (``report_parts``): one message per section-bounded chunk,
then, for a long report, ``report.md``. ``core.operations.job`` posts them one at a time,
records each and retries the rest, so a retry never repeats a part. A report longer than one
message becomes a canvas instead (``bots.slack.canvas``: shared read-only with the
conversation) with one summary message in the thread (``render.summary_message``); a
workspace that refuses canvases gets the parts, and is not asked again by this process
(``SlackRefusals``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import httpx
from slack_sdk.web.async_client import AsyncWebClient

from bots.chat.controls import Button, feedback_buttons
from bots.chat.delivery import ThreadPoster, ThreadPosters
from bots.chat.documents import DocumentContent, DocumentRefused
from bots.slack.canvas import Audience, CanvasRefused, canvas_markdown, create_canvas, delete_canvas
from bots.slack.download import SlackDownloads, allowed_origins, download_client
from bots.slack.errors import classify_error
from bots.slack.messenger import SlackClients, SlackMessenger
from bots.slack.refusals import SlackRefusals
from bots.slack.render import (
    REPORT_FILE_THRESHOLD,
    escape_mrkdwn,
    progress_message,
    progress_text,
    report_messages,
    summary_message,
)
from bots.slack.scopes import SlackScopes
from bots.slack.sessions import session_title
from bots.slack.status import REFRESH_SECONDS, SessionStart, ThreadStatus
from core.chat.stores import ChatStores, RunRecord
from core.documents.attachments import AttachmentRefused
from core.engine.progress import ProgressTask
from core.failures import PostFailure
from core.models import Attachment
from core.operations.digests import heading_of
from core.research.outcome import RunOutcome
from core.timer import MONOTONIC, Timer
from core.values import ReportDocument, ThreadKey
from core.words.reasons import Reason

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportPart:
    """One message of the report (``chat.postMessage`` kwargs), or the ``report.md`` upload."""

    message: dict[str, Any] = field(default_factory=dict)
    file_markdown: str | None = None


def requester_user_id(requested_by: str | None) -> str | None:
    """``slack:<team>:<user>`` → ``<user>``."""
    parts = (requested_by or "").split(":")
    return parts[2] if len(parts) == 3 and parts[0] == "slack" and parts[2] else None


class SlackThread(ThreadPoster):
    """``bots.chat.delivery.ThreadPoster`` for one run's Slack thread (a slash command's
    ``pending-…`` thread is re-keyed to its opener by the shared delivery); its long report
    is a canvas, shared at ``canvas_access`` (``read``, or ``write`` where the operator said
    so) with the conversation's members."""

    document_kind: ClassVar[str | None] = "canvas"

    def __init__(
        self,
        run: RunRecord,
        messenger: SlackMessenger,
        downloads: SlackDownloads | None = None,
        *,
        refusals: SlackRefusals | None = None,
        canvas_access: str = "read",
    ) -> None:
        super().__init__(run)
        self._messenger = messenger
        self._downloads = downloads
        self._requester = requester_user_id(run.requested_by)
        self._refusals = refusals or SlackRefusals()
        self._canvas_access = canvas_access

    @property
    def client(self) -> AsyncWebClient:
        """The workspace's Web API client (the thread status posts through it too)."""
        return self._messenger.client

    def render_progress(
        self,
        status: str,
        message_id: str | None,
        buttons: Sequence[Button] = (),
        tasks: Sequence[ProgressTask] = (),
    ) -> str:
        # Who asked is said in the thread's top-level message (a slash command's opener).
        opener = self.needs_opener if message_id is None else message_id == self.thread.thread
        text = progress_text(
            self.run.topic,
            self.run.depth,
            status,
            requester=self._requester,
            opener=opener,
            language=self.language,
            digest_title=heading_of(self.run),
            mention_to_steer=bool(buttons) and self._messenger.mention_needed(self.thread.channel),
        )
        return progress_message(text, buttons, tasks, self.language)

    async def post_progress(self, content: str) -> str:
        return await self._messenger.post_progress(self.thread, content)

    async def edit_progress(self, message_id: str, content: str) -> None:
        await self._messenger.edit_progress(self.thread, message_id, content)

    def report_parts(self, outcome: RunOutcome) -> list[ReportPart]:
        markdown = outcome.report_markdown or ""
        feedback = feedback_buttons(self.run.id, self.language)
        messages = report_messages(markdown, outcome.sources, feedback)
        parts = [ReportPart(message=message) for message in messages]
        if len(messages) > REPORT_FILE_THRESHOLD:
            parts.append(ReportPart(file_markdown=markdown))
        return parts

    async def create_document(self, content: DocumentContent) -> ReportDocument:
        """The report as a canvas shared with the thread's conversation (``bots.slack.canvas``);
        ``DocumentRefused`` at once, without a call, in a workspace that refused canvases
        before."""
        team = self.thread.workspace
        if self._refusals.canvases_refused(team):
            raise DocumentRefused(f"workspace {team} refused canvases", first=False)
        markdown = canvas_markdown(
            content.markdown, content.sources, content.quotes, content.language
        )
        audience = Audience.of(self.thread.channel, self._requester)
        try:
            canvas = await create_canvas(
                self.client, content.title, markdown, audience, self._canvas_access
            )
        except CanvasRefused as refused:
            if refused.workspace:
                self._refusals.refuse_canvases(team)
            raise DocumentRefused(refused.code) from None
        return ReportDocument(kind="canvas", id=canvas.id, url=canvas.url)

    def summary_parts(
        self, outcome: RunOutcome, content: DocumentContent, document: ReportDocument
    ) -> list[ReportPart]:
        """One message: the executive summary, the claim-check line, the canvas's link and
        the feedback buttons."""
        message = summary_message(
            content.title,
            content.summary,
            content.claims_line,
            document.url,
            content.sources,
            feedback_buttons(self.run.id, self.language),
            content.language,
        )
        return [ReportPart(message=message)]

    async def post_report_part(self, part: ReportPart) -> None:
        if part.file_markdown is not None:
            await self._messenger.upload_report_file(self.thread, part.file_markdown)
        else:
            await self._messenger.post_report_message(self.thread, part.message)

    async def post_notice(self, text: str) -> None:
        await self._messenger.post_message(self.thread, escape_mrkdwn(text))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file from Slack's file host with the workspace's bot token
        (``bots.slack.download``)."""
        if self._downloads is None:
            raise AttachmentRefused(
                Reason("files are not read by this delivery", "此投递方式不读取文件")
            )
        return await self._downloads.download(attachment, max_bytes)

    def classify(self, error: Exception) -> PostFailure:
        return classify_error(error)


class SlackPosters(ThreadPosters):
    """The posters of thread keys ``slack:<team>:<channel>:<thread>``, with the thread status
    of Slack's agent surface beside each."""

    def __init__(
        self,
        clients: SlackClients,
        store: ChatStores,
        *,
        edit_interval: float = 1.0,
        api_url: str = "https://slack.com/api/",
        http: httpx.AsyncClient | None = None,
        refusals: SlackRefusals | None = None,
        scopes: SlackScopes | None = None,
        timer: Timer | None = None,
        status_refresh: float = REFRESH_SECONDS,
        canvas_access: str = "read",
    ) -> None:
        super().__init__(store, edit_interval=edit_interval, timer=timer or MONOTONIC)
        self._clients = clients
        #: What Slack refused for good, for every run of this process.
        self.refusals = refusals or SlackRefusals()
        #: The bot token's scopes per workspace, as Slack's answers list them.
        self.scopes = scopes or SlackScopes()
        self._status_timer = timer
        self._status_refresh = status_refresh
        self._origins = allowed_origins(api_url)
        self._http = http
        self._owns_http = http is None
        self._canvas_access = canvas_access

    def _download_http(self) -> httpx.AsyncClient:
        """One HTTP client for every run's downloads (made on first use, closed by
        :meth:`aclose`)."""
        if self._http is None:
            self._http = download_client()
        return self._http

    async def poster_for(self, run: RunRecord) -> SlackThread:
        team = run.thread.workspace
        client = await self._clients.client_for(team)
        downloads = SlackDownloads(client, self._download_http(), self._origins)
        messenger = SlackMessenger(client, team, self.refusals, self.scopes)
        return SlackThread(
            run, messenger, downloads, refusals=self.refusals, canvas_access=self._canvas_access
        )

    async def delete_document(self, thread: ThreadKey, document: ReportDocument) -> None:
        """Delete a report's canvas (``fathom forget``, retention); one already gone counts as
        deleted, a report that went as parts has none."""
        if document.refused:
            return
        if document.kind != "canvas":
            raise ValueError(f"Slack made no {document.kind} documents")
        client = await self._clients.client_for(thread.workspace)
        await delete_canvas(client, document.id)

    def activity_for(self, run: RunRecord, poster: ThreadPoster) -> ThreadStatus:
        thread = cast(SlackThread, poster)
        return ThreadStatus(
            thread.client,
            run.thread.workspace,
            lambda: thread.thread,
            self.refusals,
            language=thread.language,
            timer=self._status_timer,
            refresh=self._status_refresh,
            session=SessionStart(
                session_title(heading_of(run) or run.topic), requester_user_id(run.requested_by)
            ),
        )

    async def aclose(self) -> None:
        http, self._http = self._http, None
        if http is not None and self._owns_http:
            await http.aclose()
