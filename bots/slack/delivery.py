"""One run's progress and report in Slack (``core.delivery.DeliveryFactory`` for ``slack``).

A slash command has no message to thread under, so its run starts in a ``pending-…``
thread: the first progress event posts a top-level opener, which becomes both the
progress message and the thread (the thread row is re-keyed to its ``ts``). Runs started
in a thread reply there. A resumed run edits the progress message it already has.

The report is posted as parts (``report_parts``): one message per section-bounded chunk,
then, for a long report, ``report.md``. ``core.delivery`` posts them one at a time,
records each and retries the rest, so a retry never repeats a part.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from bots.chat.throttle import EditThrottle, WorkspaceLimiter, WorkspaceLimiters
from bots.slack.errors import classify_error, describe_error
from bots.slack.messenger import SlackClients, SlackMessenger, thread_ts
from bots.slack.render import (
    REPORT_FILE_THRESHOLD,
    escape_mrkdwn,
    progress_text,
    report_messages,
)
from core.delivery import PostFailure
from core.models import ThreadKey
from core.progress import ProgressEvent, ProgressKind, ProgressSink
from core.service import RunOutcome
from storage import RunRecord, Store

log = logging.getLogger(__name__)

#: Status of an opener posted only so that a report has a thread to go to.
REPORT_OPENER_STATUS = "Research done; the report is in this thread."


@dataclass(frozen=True)
class ReportPart:
    """One message of the report (``chat.postMessage`` kwargs), or the ``report.md`` upload."""

    message: dict[str, Any] = field(default_factory=dict)
    file_markdown: str | None = None


def requester_user_id(requested_by: str | None) -> str | None:
    """``slack:<team>:<user>`` → ``<user>``."""
    parts = (requested_by or "").split(":")
    return parts[2] if len(parts) == 3 and parts[0] == "slack" and parts[2] else None


class SlackDelivery:
    """``core.delivery.Delivery`` for one run: it is its own progress sink."""

    def __init__(
        self,
        run: RunRecord,
        messenger: SlackMessenger,
        store: Store,
        *,
        edit_interval: float,
        limiter: WorkspaceLimiter | None = None,
    ) -> None:
        self._run = run
        self._messenger = messenger
        self._store = store
        self._interval = edit_interval
        self._limiter = limiter
        self._requester = requester_user_id(run.requested_by)
        self.thread = ThreadKey.parse(run.thread_key)
        self.message_id = run.progress_message_id
        self._throttle: EditThrottle | None = None

    @property
    def progress(self) -> ProgressSink:
        return self

    @property
    def _opener(self) -> bool:
        """The progress message is the thread's top-level message (slash command runs)."""
        return self.message_id is not None and self.message_id == self.thread.thread

    async def publish(self, event: ProgressEvent) -> None:
        try:
            await self._publish(event)
        except Exception as exc:  # progress must never break the research
            log.warning("slack progress for run %s failed (%s)", self._run.id, describe_error(exc))

    async def _publish(self, event: ProgressEvent) -> None:
        await self._adopt_pending_thread()
        if self.message_id is None:
            await self._post_progress(event.text)
            return
        text = self._text(event.text)
        if self._throttle is None:
            message_id, thread = self.message_id, self.thread

            async def edit(value: str) -> None:
                await self._messenger.edit_message(thread, message_id, value)

            self._throttle = EditThrottle(
                edit, classify=classify_error, interval=self._interval, limiter=self._limiter
            )
        if event.kind is ProgressKind.FINISHED:
            await self._throttle.flush_final(text)
        else:
            await self._throttle.submit(text)

    def report_parts(self, outcome: RunOutcome) -> list[ReportPart]:
        markdown = outcome.report_markdown or ""
        messages = report_messages(markdown, outcome.sources)
        parts = [ReportPart(message=message) for message in messages]
        if len(messages) > REPORT_FILE_THRESHOLD:
            parts.append(ReportPart(file_markdown=markdown))
        return parts

    async def post_report_part(self, part: ReportPart) -> None:
        """Post one part in the run's thread; raises when Slack refused it."""
        await self._ensure_thread()
        if part.file_markdown is not None:
            await self._messenger.upload_report_file(self.thread, part.file_markdown)
        else:
            await self._messenger.post_report_message(self.thread, part.message)

    async def post_status(self, text: str) -> None:
        """The final status: edit the progress message (unless the throttle already wrote this
        very text), or post it; raises when Slack refused it."""
        await self._adopt_pending_thread()
        if self.message_id is None:
            await self._post_progress(text)
            return
        rendered = self._text(text)
        if self._throttle is not None and self._throttle.written == rendered:
            return
        await self._messenger.edit_message(self.thread, self.message_id, rendered)

    async def post_notice(self, text: str) -> None:
        await self._ensure_thread()
        await self._messenger.post_message(self.thread, escape_mrkdwn(text))

    def classify(self, error: Exception) -> PostFailure:
        return classify_error(error)

    async def aclose(self) -> None:
        if self._throttle is not None:
            await self._throttle.aclose()

    async def _ensure_thread(self) -> None:
        """Messages after the run need a thread: a slash-command run that never managed to
        post its opener posts one now."""
        await self._adopt_pending_thread()
        if thread_ts(self.thread) is None:
            await self._post_progress(REPORT_OPENER_STATUS)

    def _text(self, status: str) -> str:
        return progress_text(
            self._run.topic, self._run.depth, status, requester=self._requester, opener=self._opener
        )

    async def _post_progress(self, status: str) -> None:
        pending = thread_ts(self.thread) is None
        text = progress_text(
            self._run.topic, self._run.depth, status, requester=self._requester, opener=pending
        )
        ts = await self._messenger.post_message(self.thread, text)
        self.message_id = ts
        # Stored before the re-key: a run resumed in between still finds its opener.
        await self._store.set_progress_message(self._run.id, ts)
        if pending:
            await self._rekey(ts)

    async def _adopt_pending_thread(self) -> None:
        """A resumed slash-command run whose opener was posted but whose thread kept its
        pending key: the opener's ``ts`` is the thread."""
        if self.message_id is not None and thread_ts(self.thread) is None:
            await self._rekey(self.message_id)

    async def _rekey(self, ts: str) -> None:
        key = self.thread.model_copy(update={"thread": ts})
        await self._store.rekey_thread(self._run.thread_id, key=str(key), thread_ref=ts)
        self.thread = key


class SlackDeliveryFactory:
    """``core.delivery.DeliveryFactory`` for thread keys ``slack:<team>:<channel>:<thread>``."""

    def __init__(
        self,
        clients: SlackClients,
        store: Store,
        *,
        edit_interval: float = 1.0,
        limiters: WorkspaceLimiters | None = None,
    ) -> None:
        self._clients = clients
        self._store = store
        self._interval = edit_interval
        self._limiters = limiters or WorkspaceLimiters()

    async def for_run(self, run: RunRecord) -> SlackDelivery:
        team = ThreadKey.parse(run.thread_key).workspace
        client = await self._clients.client_for(team)
        return SlackDelivery(
            run,
            SlackMessenger(client),
            self._store,
            edit_interval=self._interval,
            limiter=self._limiters.for_team(team),
        )
