"""One run's progress and report in Teams (``core.operations.job.DeliveryFactory`` for
``teams``): translation only, on the shared ``bots.chat.delivery.ChatDelivery``.

In a channel the run's messages go to the request's reply chain (the conversation
``<channel>;messageid=<root>``); in a chat they go to the chat, as replies to the request.
The progress card is updated in place (``PUT .../activities/<id>``); a card Teams took
without saying its id (``202`` with no body) cannot be, and its final state is a new card
(:data:`UNNAMED`). A digest's firing has no chain yet: its progress card is a new post in the
channel (``POST /v3/conversations``), and the thread is re-keyed to it. Where to post comes
from the run's request (its context) or, failing that, the conversation's stored reference
(``bots.teams.references``); with neither, the run is undeliverable. Files a person sent in
a personal chat are read from their pre-authenticated download URL.

When Teams answers that the bot cannot post in the conversation any more (removed from it,
blocked, disabled, the conversation gone: ``TeamsError.bot_gone``), the run is cancelled and
its thread makes no call after that one: said in the log, nothing more asked of Teams.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from bots.chat.controls import Button, feedback_buttons
from bots.chat.delivery import ThreadPoster, ThreadPosters
from bots.chat.errors import judge_failure
from bots.teams.api import TeamsApi, TeamsError
from bots.teams.events import Reference
from bots.teams.references import ConversationReferences
from bots.teams.render import ReportPart, notice_activity, progress_activity, report_parts
from core.chat.stores import ChatStores, RunRecord
from core.claims.quotes import source_quotes
from core.documents.attachments import AttachmentRefused
from core.engine.progress import ProgressTask
from core.failures import PostFailure
from core.models import Attachment
from core.operations.digests import heading_of
from core.operations.job import Undeliverable
from core.research.outcome import RunOutcome
from core.words.reasons import Reason

log = logging.getLogger(__name__)

#: Teams allows a bot about 7 messages a second and 60 in 30 seconds in one conversation.
CALLS_PER_MINUTE = 100.0
BURST = 7
#: The id kept for a progress card Teams posted without saying its id: it cannot be edited
#: (its steps are not shown; its final state is a new card, posted once).
UNNAMED = "posted-without-id"

T = TypeVar("T")
#: Cancels a run (``core.research.requests.RunRequests.cancel``).
CancelRun = Callable[[str], Awaitable[object]]


def classify_error(error: Exception) -> PostFailure:
    """A failed Teams call judged the way every platform's is (``bots.chat.errors``)."""
    return judge_failure(error, "teams", rate_limit_wait=1.0)


class TeamsThread(ThreadPoster):
    """``bots.chat.delivery.ThreadPoster`` for one run's Teams thread (a digest's card opens a
    reply chain: the shared delivery re-keys the ``pending-…`` thread to it)."""

    def __init__(
        self,
        run: RunRecord,
        api: TeamsApi,
        reference: Reference,
        cancel: CancelRun | None = None,
    ) -> None:
        super().__init__(run)
        self._api = api
        self._reference = reference
        self._cancel = cancel
        self._title = heading_of(run)
        #: Teams' answer that the bot cannot post in the conversation any more.
        self._gone: TeamsError | None = None

    async def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        """One Bot Connector call of this run, unless Teams said the bot cannot post in the
        conversation any more: then that answer again, and no call."""
        if self._gone is not None:
            raise self._gone
        try:
            return await make()
        except TeamsError as error:
            if error.bot_gone:
                self._gone = error
                await self._stop_run(error)
            raise

    async def _stop_run(self, error: TeamsError) -> None:
        """The bot cannot post in the run's conversation: the research is cancelled (none
        of its work could be shown), once."""
        log.warning(
            "teams: run %s cannot post in its conversation any more (%s %s): it is "
            "cancelled and nothing more is posted there",
            self.run.id,
            error.status,
            error.code,
        )
        if self._cancel is None:
            return
        try:
            await self._cancel(self.run.id)
        except Exception as exc:  # the delivery's own failure is what the job acts on
            log.warning("teams: run %s could not be cancelled (%s)", self.run.id, exc)

    @property
    def _conversation(self) -> str:
        """Where the run's messages go: the reply chain in a channel, else the chat."""
        reference = self._reference
        if reference.kind == "channel":
            return f"{reference.conversation};messageid={self.thread.thread}"
        return reference.conversation

    def _addressed(self, activity: dict[str, Any]) -> dict[str, Any]:
        if self._reference.kind != "channel" and not self.needs_opener:
            return {**activity, "replyToId": self.thread.thread}
        return activity

    async def _send(self, activity: dict[str, Any]) -> str:
        addressed = self._addressed(activity)
        return await self._call(
            lambda: self._api.send(self._reference.service_url, self._conversation, addressed)
        )

    def render_progress(
        self,
        status: str,
        message_id: str | None,
        buttons: Sequence[Button] = (),
        tasks: Sequence[ProgressTask] = (),
    ) -> str:
        activity = progress_activity(
            self.run.topic,
            self.run.depth,
            status,
            language=self.language,
            title=self._title,
            buttons=buttons,
            tasks=tasks,
        )
        return json.dumps(activity, ensure_ascii=False)

    async def post_progress(self, content: str) -> str:
        activity = json.loads(content)
        reference = self._reference
        if self.needs_opener and reference.kind == "channel":
            # A digest: its card opens a new reply chain in the channel.
            return await self._call(
                lambda: self._api.create_channel_post(
                    reference.service_url, reference.conversation, reference.tenant, activity
                )
            )
        if self.needs_opener:  # a digest in a chat: a new message in it, the thread's name
            posted = await self._call(
                lambda: self._api.send(reference.service_url, reference.conversation, activity)
            )
            if not posted:
                raise TeamsError(202, "no_activity_id", "Teams did not say which message it posted")
            return posted
        posted = await self._send(activity)
        if posted:
            return posted
        log.warning(
            "teams: the progress card of run %s was posted without an id (HTTP 202): its "
            "steps are not shown, its final state is posted as a new card",
            self.run.id,
        )
        return UNNAMED

    async def edit_progress(self, message_id: str, content: str) -> None:
        activity = json.loads(content)
        await self._call(
            lambda: self._api.update(
                self._reference.service_url, self._conversation, message_id, activity
            )
        )

    def can_edit(self, message_id: str) -> bool:
        return message_id != UNNAMED

    def report_parts(self, outcome: RunOutcome) -> Sequence[ReportPart]:
        feedback = feedback_buttons(self.run.id, self.language)
        markdown = outcome.report_markdown or ""
        quotes = source_quotes(outcome.claims)
        return report_parts(markdown, outcome.sources, feedback, self.language, quotes)

    async def post_report_part(self, part: ReportPart) -> None:
        await self._send(part.activity)

    async def post_notice(self, text: str) -> None:
        await self._send(notice_activity(text))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        url = attachment.extra.get("download_url")
        if not url:
            raise AttachmentRefused(
                Reason("Teams gave no download address", "Teams 没有给出下载地址")
            )
        return await self._api.download(url, max_bytes)


class TeamsPosters(ThreadPosters):
    """The posters of thread keys ``teams:<tenant>:<conversation>:<thread>``."""

    def __init__(
        self,
        api: TeamsApi,
        store: ChatStores,
        references: ConversationReferences | None,
        *,
        edit_interval: float = 1.0,
        cancel: CancelRun | None = None,
    ) -> None:
        super().__init__(
            store, edit_interval=edit_interval, per_minute=CALLS_PER_MINUTE, burst=BURST
        )
        self._api = api
        self._references = references
        self._cancel = cancel

    async def reference_of(self, run: RunRecord) -> Reference | None:
        """Where ``run`` posts: its request's context, else the stored reference."""
        reference = Reference.of_context(run.platform_context)
        if reference is not None:
            return reference
        if self._references is None:
            return None
        thread = run.thread
        return await self._references.find(thread.workspace, thread.channel)

    async def poster_for(self, run: RunRecord) -> TeamsThread:
        reference = await self.reference_of(run)
        if reference is None:
            raise Undeliverable(
                f"no Teams conversation reference for {run.thread_key}: the bot was never "
                "addressed or installed there"
            )
        return TeamsThread(run, self._api, reference, self._cancel)
