"""One run's progress and outcome in a chat thread, for every platform.

A platform fills in a :class:`ThreadPoster` for one run: how a progress status looks, how to
post and edit the progress message, how the report splits into parts and how to post one,
how to post a notice, and how to judge a failed call. :class:`ChatDelivery` (a
``core.operations.job.Delivery``) owns the rest, the same on every platform:

- one progress message per run, posted by the first event and edited in place afterwards;
  its id is stored on the run, so a resumed run (on any replica) edits the same message;
- the progress message carries the run's buttons ("Stop and write now", "Cancel",
  ``bots.chat.controls``) while the run works, and none in its final state; a platform that
  can show the run's plan gets its steps (``core.engine.progress.ProgressTask``) with every
  rendering, the final state the steps the run finished;
- an optional :class:`Activity` beside the progress message sees every event (Slack's thread
  status), on its own: its failures never touch the progress message, nor the run;
- edits coalesced and paced by :class:`~bots.chat.throttle.EditThrottle` (per message and per
  workspace), retried on rate limits, and the final state always written; a progress message
  the platform refuses to edit for good (deleted: Teams' 403 ServiceError or 404, Slack's
  message_not_found) is not edited again, and its final state is posted once as a new
  message;
- the report's parts and the final status posted by ``core.operations.job`` exactly once each;
- with metrics (``ThreadPosters.metrics``), every call of the platform's API a poster makes
  counted by platform, method and outcome and timed (:class:`MeteredPoster`), progress
  edits included, whatever the caller then does with a failure.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from bots.chat.controls import Button, Control, run_buttons
from bots.chat.documents import (
    DocumentContent,
    DocumentRefused,
    DocumentStep,
    ReportDocuments,
    document_content,
)
from bots.chat.errors import judge_failure
from bots.chat.message import PENDING_PREFIX
from bots.chat.throttle import EditThrottle, WorkspaceLimiter, WorkspaceLimiters
from core.chat.stores import ChatStores, RunRecord
from core.documents.attachments import AttachmentRefused
from core.engine.progress import (
    ProgressEvent,
    ProgressKind,
    ProgressSink,
    ProgressTask,
    final_tasks,
)
from core.failures import PostFailure, judge
from core.logs import change_log_context
from core.models import Attachment
from core.research.outcome import RunOutcome
from core.timer import MONOTONIC, Timer
from core.values import ReportDocument, ThreadKey
from core.words.reasons import Reason
from core.words.wording import Language, pick, request_language

if TYPE_CHECKING:
    from core.metrics import Metrics

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How a run's stored progress message id says that its request's answer is posting it
#: (``bots.chat.announce``): this prefix and a token of that answer's own.
ANNOUNCING = "~announcing:"
#: How long a run's delivery waits for a progress message on the way before it posts its
#: own (seconds), and how often it looks meanwhile.
ANNOUNCE_WAIT = 10.0
ANNOUNCE_POLL = 0.05


def announcing(message_id: str | None) -> bool:
    """Whether a stored progress message id is only a message on the way."""
    return message_id is not None and message_id.startswith(ANNOUNCING)


def progress_elsewhere(language: Language) -> str:
    """Status of a progress message posted while its run's own was being posted too."""
    return pick(
        language,
        "This research's progress is shown in another message.",
        "这个研究的进度显示在另一条消息中。",
    )


def report_opener_status(language: Language) -> str:
    """Status of a progress message posted only so that a report has a thread to go to."""
    return pick(
        language,
        "Research done; the report is in this thread.",
        "研究完成；报告在这个话题里。",
    )


async def adopt_opener(
    store: ChatStores, run: RunRecord, thread: ThreadKey, message_id: str | None
) -> ThreadKey:
    """The thread of a run whose thread starts with its own progress message (a Slack slash
    command, a digest's firing): once that opener is posted (now, or by an earlier attempt of
    a resumed run), the thread row is re-keyed to it, and the new key is returned; before
    that, ``thread`` as it is (:meth:`ChatDelivery._adopt`)."""
    if message_id is None:
        return thread
    key = thread.model_copy(update={"thread": message_id})
    await store.threads.rekey_thread(run.thread_id, key)
    change_log_context("thread", str(key))
    return key


class ThreadPoster(ABC):
    """A platform's calls for one run's thread (what an adapter fills in): how the progress
    message looks, how to post and edit it, the report's parts and how to post one, and a
    notice. What most platforms share has its default here: the progress message can be
    edited (:meth:`can_edit`), a ``pending-…`` thread starts with the run's own progress
    message (:attr:`needs_opener`: :class:`ChatDelivery` re-keys the thread to it), files are
    not read (:meth:`download`), and a failed call is judged the way every platform's is
    (:meth:`classify`, ``bots.chat.errors``)."""

    #: Whether a ``pending-…`` thread (a Slack slash command's, a digest's firing) starts with
    #: the run's progress message; False on a platform without threads (DingTalk), whose
    #: messages go to the conversation.
    opens_threads: ClassVar[bool] = True
    #: How long a rate-limited call waits when the platform does not say (seconds).
    rate_limit_wait: ClassVar[float] = 1.0
    #: What a long report becomes on this platform (``canvas``, ``docx``: :meth:`create_document`
    #: and :meth:`summary_parts`); None: it stays the usual parts.
    document_kind: ClassVar[str | None] = None

    def __init__(self, run: RunRecord) -> None:
        self.run = run
        #: The run's thread; :class:`ChatDelivery` re-keys it to the opener once one is
        #: posted (:attr:`needs_opener`).
        self.thread: ThreadKey = run.thread
        #: The language of the run's request (its messages' language).
        self.language: Language = request_language(run.topic)

    @abstractmethod
    def render_progress(
        self,
        status: str,
        message_id: str | None,
        buttons: Sequence[Button] = (),
        tasks: Sequence[ProgressTask] = (),
    ) -> str:
        """The progress message showing ``status`` (``message_id``: the message it will
        replace, None for a new one), ``buttons`` (none in the final state) and, where the
        platform shows them, the plan's ``tasks``. Any string the platform's edit call takes:
        mrkdwn text, a card's JSON."""

    @abstractmethod
    async def post_progress(self, content: str) -> str:
        """Post the progress message in the thread; returns its message id."""

    @abstractmethod
    async def edit_progress(self, message_id: str, content: str) -> None: ...

    @abstractmethod
    def report_parts(self, outcome: RunOutcome) -> Sequence[Any]:
        """The report as the messages to post, in order; the same for the same outcome. The
        last one carries the feedback buttons (``bots.chat.controls.feedback_buttons``)
        where the platform can show them."""

    @abstractmethod
    async def post_report_part(self, part: Any) -> None: ...

    @abstractmethod
    async def post_notice(self, text: str) -> None:
        """A short plain-text message in the thread (the text is untrusted: escape it)."""

    def can_edit(self, message_id: str) -> bool:
        """Whether the progress message can be edited (DingTalk's fallback when cards are
        refused is a plain message: its final state is then posted as a new message)."""
        return True

    async def create_document(self, content: DocumentContent) -> ReportDocument:
        """Create the report's document (:attr:`document_kind`) holding ``content``, readable
        by the conversation's members only (wider only when the operator's setting says so);
        its kind, id and link. ``DocumentRefused`` when the platform refuses documents for
        good; any other error is judged by :meth:`classify` (a retryable one is tried again).
        Leaves nothing half-built behind when it raises."""
        raise DocumentRefused(f"{self.thread.platform} makes no documents")

    def summary_parts(
        self, outcome: RunOutcome, content: DocumentContent, document: ReportDocument
    ) -> Sequence[Any]:
        """The thread's summary of a report that became ``document`` (usually one message):
        the executive summary, the claim-check line, the document's link and the feedback
        buttons; posted by :meth:`post_report_part`."""
        raise NotImplementedError(f"{self.thread.platform} makes no documents")

    @property
    def needs_opener(self) -> bool:
        """The thread exists only once a progress message is posted (a Slack slash command,
        a digest's firing): its key is still ``pending-…``."""
        return self.opens_threads and self.thread.thread.startswith(PENDING_PREFIX)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """A file attached to the run's request, from the platform's own hosts with its
        credentials (see ``core.documents.attachments.FileSource``); by default none is read."""
        raise AttachmentRefused(Reason("files are not read on this platform", "这个平台不读取文件"))

    def classify(self, error: Exception) -> PostFailure:
        """Rate-limited (with a delay), retryable or permanent: the platform's judgement
        (``bots.chat.errors.judge_failure`` of its ``PlatformError``)."""
        return judge_failure(error, self.thread.platform, rate_limit_wait=self.rate_limit_wait)


def call_outcome(failure: PostFailure) -> str:
    """A failed call as ``fathom_platform_api_calls_total`` labels it: ``rate_limited`` (the
    platform asked to wait), ``error`` (worth another try: a 5xx, the network) or
    ``refused`` (final: the platform said it can never succeed)."""
    if failure.retry_after > 0:
        return "rate_limited"
    return "error" if failure.retryable else "refused"


class MeteredPoster(ThreadPoster):
    """A :class:`ThreadPoster` whose API calls (posts, edits, downloads) are counted and timed
    in ``metrics`` under ``platform``; everything else is the wrapped poster's (its thread
    too: a re-key reaches it)."""

    def __init__(self, poster: ThreadPoster, metrics: Metrics, platform: str) -> None:
        self._poster = poster
        self._metrics = metrics
        self._platform = platform

    @property  # type: ignore[override]
    def thread(self) -> ThreadKey:
        return self._poster.thread

    @thread.setter
    def thread(self, key: ThreadKey) -> None:
        self._poster.thread = key

    async def _call(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.monotonic()
        try:
            result = await call()
        except Exception as exc:
            outcome = call_outcome(judge(self._poster, exc))
            self._metrics.platform_call(self._platform, method, outcome, time.monotonic() - started)
            raise
        self._metrics.platform_call(self._platform, method, "ok", time.monotonic() - started)
        return result

    def render_progress(
        self,
        status: str,
        message_id: str | None,
        buttons: Sequence[Button] = (),
        tasks: Sequence[ProgressTask] = (),
    ) -> str:
        return self._poster.render_progress(status, message_id, buttons, tasks)

    async def post_progress(self, content: str) -> str:
        return await self._call("post_progress", lambda: self._poster.post_progress(content))

    async def edit_progress(self, message_id: str, content: str) -> None:
        await self._call("edit_progress", lambda: self._poster.edit_progress(message_id, content))

    def can_edit(self, message_id: str) -> bool:
        return self._poster.can_edit(message_id)

    @property
    def needs_opener(self) -> bool:
        return self._poster.needs_opener

    def report_parts(self, outcome: RunOutcome) -> Sequence[Any]:
        return self._poster.report_parts(outcome)

    async def post_report_part(self, part: Any) -> None:
        await self._call("post_report", lambda: self._poster.post_report_part(part))

    async def create_document(self, content: DocumentContent) -> ReportDocument:
        return await self._call("create_document", lambda: self._poster.create_document(content))

    def summary_parts(
        self, outcome: RunOutcome, content: DocumentContent, document: ReportDocument
    ) -> Sequence[Any]:
        return self._poster.summary_parts(outcome, content, document)

    async def post_notice(self, text: str) -> None:
        await self._call("post_notice", lambda: self._poster.post_notice(text))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await self._call("download", lambda: self._poster.download(attachment, max_bytes))

    def classify(self, error: Exception) -> PostFailure:
        return self._poster.classify(error)


class Activity(Protocol):
    """What a run is doing, shown beside its progress message (Slack's thread status)."""

    async def publish(self, event: ProgressEvent) -> None:
        """Show the event's step; the run's last event (``event.final``) ends the showing."""
        ...

    async def aclose(self) -> None:
        """Stop showing (the run is over here, or was taken over); idempotent."""
        ...


class ChatDelivery:
    """``core.operations.job.Delivery`` for one run in one chat thread; it is its own progress
    sink."""

    def __init__(
        self,
        run: RunRecord,
        poster: ThreadPoster,
        store: ChatStores,
        *,
        edit_interval: float,
        limiter: WorkspaceLimiter | None = None,
        activity: Activity | None = None,
        timer: Timer = MONOTONIC,
        documents: ReportDocuments | None = None,
    ) -> None:
        self._run = run
        self.poster = poster
        self._documents = documents
        #: What the run's long report became (recorded by its document step); None: no step
        #: taken yet.
        self.document: ReportDocument | None = run.report_document
        #: Report parts posted by earlier attempts (:meth:`claimed`).
        self._posted_before = run.report_parts_posted
        self._content: tuple[RunOutcome, DocumentContent] | None = None
        self._document_failures = 0
        self._store = store
        self._interval = edit_interval
        self._limiter = limiter
        self._activity = activity
        self._timer = timer
        self.language = request_language(run.topic)
        self.message_id = run.progress_message_id
        #: Whether the stored progress message was looked up since the run was read (a
        #: request's answer may have announced one meanwhile: ``bots.chat.announce``).
        self._looked = False
        self.buttons = run_buttons(run.id, self.language)
        self._throttle: EditThrottle | None = None
        self._final_posted: str | None = None  # the final state, posted as a new message
        self._submitted: str | None = None  # the last content handed to the throttle
        #: Why the platform refused the progress message for good (not posted again).
        self._refused: str | None = None
        #: Why the platform refused to edit the progress message for good (not edited again).
        self._gone: str | None = None
        #: The plan as the last event showed it (the final status shows its finished steps).
        self.tasks: tuple[ProgressTask, ...] = ()

    @property
    def progress(self) -> ProgressSink:
        return self

    async def publish(self, event: ProgressEvent) -> None:
        if event.tasks or event.final:
            self.tasks = final_tasks(event.tasks or self.tasks) if event.final else event.tasks
        try:
            final = event.kind is ProgressKind.FINISHED
            if self._refused is None or self.message_id is not None or final:
                await self._publish(event)
        except Exception as exc:  # progress must never break the research
            failure = self.poster.classify(exc)
            log.warning("progress of run %s not shown (%s)", self._run.id, failure.reason)
            if not failure.retryable and self.message_id is None:
                # The platform said the message can never be posted (the bot removed, the
                # channel gone): later steps do not ask again; the final state tries once.
                self._refused = failure.reason
        if self._activity is not None:
            try:
                await self._activity.publish(event)
            except Exception as exc:
                reason = self.poster.classify(exc).reason
                log.warning("activity of run %s not shown (%s)", self._run.id, reason)

    async def _publish(self, event: ProgressEvent) -> None:
        await self._await_announcement()
        await self._adopt(self.message_id)
        final = event.kind is ProgressKind.FINISHED
        if self.message_id is None:
            await self._post_progress(event.text, final=final)
            return
        if not self._editable(self.message_id):
            if final:
                await self._post_final(event.text)
            return
        buttons = () if final else self.buttons
        content = self.poster.render_progress(event.text, self.message_id, buttons, self.tasks)
        throttle = self._edits(self.message_id)
        if final:
            if not await throttle.flush_final(content) and throttle.refused is not None:
                await self._post_final(event.text)  # the message is gone: its end, once
        elif content != self._submitted:  # (a step of the plan changed nothing shown here)
            self._submitted = content
            await throttle.submit(content)

    def _editable(self, message_id: str) -> bool:
        """Whether the progress message can be edited: the platform allows it, and has not
        refused an edit of it for good (deleted, the bot removed)."""
        refused = self._throttle is not None and self._throttle.refused is not None
        return self.poster.can_edit(message_id) and not refused and self._gone is None

    def _edits(self, message_id: str) -> EditThrottle:
        if self._throttle is None:
            poster = self.poster

            async def edit(content: str) -> None:
                await poster.edit_progress(message_id, content)

            self._throttle = EditThrottle(
                edit,
                classify=poster.classify,
                interval=self._interval,
                limiter=self._limiter,
                timer=self._timer,
            )
        return self._throttle

    def report_parts(self, outcome: RunOutcome) -> Sequence[Any]:
        """The platform's parts; a long report on a platform that makes documents is its
        :class:`~bots.chat.documents.DocumentStep` and then, as the step recorded, the
        document's summary or (refused) the usual parts (``bots.chat.documents``)."""
        parts = self.poster.report_parts(outcome)
        if not self._as_document(parts):
            return parts
        content = self._document_content(outcome)
        step = DocumentStep(content)
        if self.document is None:
            return [step]
        if self.document.refused:
            return [step, *parts]
        return [step, *self.poster.summary_parts(outcome, content, self.document)]

    def _as_document(self, parts: Sequence[Any]) -> bool:
        """Whether the report goes as a document: the step was recorded already (by this
        delivery or an earlier one), or it is long enough and no part of it was posted yet
        (a delivery begun by a release before documents keeps its parts)."""
        if self._documents is None:
            return False
        if self.document is not None:
            return True
        return len(parts) >= self._documents.min_parts and self._posted_before == 0

    def claimed(self, run: RunRecord) -> None:
        self._posted_before = run.report_parts_posted
        self.document = self.document or run.report_document

    def _document_content(self, outcome: RunOutcome) -> DocumentContent:
        if self._content is None or self._content[0] is not outcome:
            self._content = (outcome, document_content(outcome, self.language))
        return self._content[1]

    async def post_report_part(self, part: Any) -> None:
        """Post one part in the run's thread; raises when the platform refused it."""
        await self._ensure_thread()
        if isinstance(part, DocumentStep):
            await self._document_step(part.content)
            return
        await self.poster.post_report_part(part)

    async def _document_step(self, content: DocumentContent) -> None:
        """Create the report's document and record it (or record that the platform refused
        documents, or that its document API kept failing: the report then goes as its usual
        parts). Recorded before anything follows, so it is done once per run."""
        if self.document is not None:  # (an earlier attempt recorded it)
            return
        assert self._documents is not None
        run_id = self._run.id
        try:
            made = await self.poster.create_document(content)
        except DocumentRefused as refused:
            if refused.first:
                log.warning(
                    "run %s: no %s for the report (%s); it goes as messages",
                    run_id,
                    self._documents.kind,
                    refused.reason,
                )
            made = ReportDocument(kind=ReportDocument.PARTS, reason=refused.reason)
        except Exception as exc:
            failure = self.poster.classify(exc)
            self._document_failures += 1
            if failure.retryable and self._document_failures < self._documents.tries:
                raise
            log.warning(
                "run %s: the %s was not created (%s); the report goes as messages",
                run_id,
                self._documents.kind,
                failure.reason,
            )
            made = ReportDocument(kind=ReportDocument.PARTS, reason=failure.reason)
        stored = await self._store.runs.record_report_document(run_id, made)
        self.document = stored or made
        if stored is not None and stored != made and not made.refused:
            await self._discard(made)

    async def _discard(self, document: ReportDocument) -> None:
        """Delete a document this delivery made after another's was recorded (best effort)."""
        assert self._documents is not None
        discard = self._documents.discard
        try:
            if discard is None:
                raise NotImplementedError("nothing deletes it")
            await discard(self.poster.thread, document)
        except Exception as exc:
            log.warning(
                "run %s: a second %s %s was made and is not deleted (%s)",
                self._run.id,
                document.kind,
                document.url or document.id,
                exc,
            )

    async def post_status(self, text: str) -> None:
        """The final status: edit the progress message (unless the throttle already wrote this
        very content), or post it; raises when the platform refused it. The activity ends
        (a run delivered by a replica that took it over after it ended)."""
        await self._end_activity(text)
        await self._await_announcement()
        await self._adopt(self.message_id)
        if self.message_id is None:
            await self._post_progress(text, final=True)
            return
        if not self._editable(self.message_id):
            await self._post_final(text)
            return
        content = self.poster.render_progress(text, self.message_id, (), self.tasks)
        if self._throttle is not None and self._throttle.written == content:
            return
        try:
            await self.poster.edit_progress(self.message_id, content)
        except Exception as exc:
            failure = self.poster.classify(exc)
            if failure.retryable:
                raise
            # Refused for good (the message deleted): the status is a new message, once.
            log.warning("progress of run %s not editable (%s)", self._run.id, failure.reason)
            self._gone = failure.reason
            await self._post_final(text)

    async def _end_activity(self, text: str) -> None:
        if self._activity is None:
            return
        run = self._run
        try:
            await self._activity.publish(
                ProgressEvent(run.id, ProgressKind.FINISHED, text, run.rounds_done, run.depth)
            )
        except Exception as exc:
            reason = self.poster.classify(exc).reason
            log.warning("activity of run %s not ended (%s)", run.id, reason)

    async def post_notice(self, text: str) -> None:
        await self._ensure_thread()
        await self.poster.post_notice(text)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await self.poster.download(attachment, max_bytes)

    def classify(self, error: Exception) -> PostFailure:
        return self.poster.classify(error)

    async def aclose(self) -> None:
        try:
            if self._throttle is not None:
                await self._throttle.aclose()
        finally:  # (the activity stops, also when the caller is cancelled meanwhile)
            if self._activity is not None:
                await self._activity.aclose()

    async def _ensure_thread(self) -> None:
        """Messages after the run need a thread: a run whose thread starts with its progress
        message, and which never managed to post one, posts one now."""
        await self._await_announcement()
        await self._adopt(self.message_id)
        if self.poster.needs_opener:
            await self._post_progress(report_opener_status(self.language), final=True)

    async def _await_announcement(self) -> None:
        """A progress message announced while the run was queued (by the request's answer:
        ``bots.chat.announce``) becomes this run's; one still on the way is waited for, at most
        :data:`ANNOUNCE_WAIT` seconds, then this delivery posts its own (the answer, finding
        its place taken, makes its message say so)."""
        if self.message_id is None and not self._looked:
            # Once, after the run was claimed: a message announced before the claim (on any
            # replica) is this run's; none can be announced after it.
            self._looked = True
            run = await self._store.runs.get_run(self._run.id)
            self.message_id = run.progress_message_id if run is not None else None
        if not announcing(self.message_id):
            return
        waited_since = self._timer.now()
        while True:
            run = await self._store.runs.get_run(self._run.id)
            stored = run.progress_message_id if run is not None else None
            if not announcing(stored):
                self.message_id = stored
                return
            if self._timer.now() - waited_since >= ANNOUNCE_WAIT:
                log.warning(
                    "run %s: its announced progress message did not come; posting one", self._run.id
                )
                self.message_id = None
                return
            await self._timer.sleep(ANNOUNCE_POLL)

    async def announce(self, marker: str, status: str) -> None:
        """Post the progress message of a run still queued, with ``status`` (its place in
        line) and a Cancel button, in place of ``marker`` (reserved by
        ``RunStore.reserve_progress_message``): the run's delivery then edits it. The marker
        is cleared when the post fails. Should the run's delivery have stopped waiting and
        posted its own meanwhile, this message says the progress is in that one."""
        cancel = tuple(b for b in self.buttons if b.control is Control.CANCEL)
        runs = self._store.runs
        try:
            message_id = await self.poster.post_progress(
                self.poster.render_progress(status, None, cancel, ())
            )
        except BaseException:
            await runs.settle_progress_message(self._run.id, marker, None)
            raise
        if await runs.settle_progress_message(self._run.id, marker, message_id):
            self.message_id = message_id
            await self._adopt(message_id)
            return
        moved = self.poster.render_progress(progress_elsewhere(self.language), message_id, (), ())
        await self.poster.edit_progress(message_id, moved)

    async def _post_final(self, status: str) -> None:
        """A progress message that cannot be edited ends with a new message, posted once."""
        content = self.poster.render_progress(status, None, (), self.tasks)
        if content != self._final_posted:
            await self.poster.post_progress(content)
            self._final_posted = content

    async def _post_progress(self, status: str, *, final: bool = False) -> None:
        buttons = () if final else self.buttons
        content = self.poster.render_progress(status, None, buttons, self.tasks)
        message_id = await self.poster.post_progress(content)
        self.message_id = message_id
        # Stored before anything else: a run resumed from here finds its message.
        await self._store.runs.set_progress_message(self._run.id, message_id)
        await self._adopt(message_id)

    async def _adopt(self, message_id: str | None) -> None:
        """Before every post, with the run's progress message id (None before one exists;
        after :meth:`_post_progress`, the new one): a run whose thread starts with its own
        progress message (:attr:`ThreadPoster.needs_opener`) adopts the thread that message
        started, once it is posted (now, or by an earlier attempt of a resumed run)."""
        poster = self.poster
        if poster.needs_opener:
            poster.thread = await adopt_opener(self._store, self._run, poster.thread, message_id)


class ThreadPosters(ABC):
    """A platform's outbound side, the one part of it a platform fills: the
    :class:`ThreadPoster` of each run's thread (:meth:`poster_for`) and, if it shows one, an
    :class:`Activity` beside it. Everything else of a delivery is :class:`ChatDelivery`'s; this
    class is the platform's ``core.operations.job.DeliveryFactory``.

    ``edit_interval``: the least time between two edits of one progress message;
    ``per_minute`` and ``burst``: how many calls one workspace may make (its limiter, shared by
    every run of this process in that workspace)."""

    def __init__(
        self,
        store: ChatStores,
        *,
        edit_interval: float = 1.0,
        per_minute: float = 50.0,
        burst: int = 10,
        timer: Timer = MONOTONIC,
        document_parts: int = 2,
    ) -> None:
        self._store = store
        self._interval = edit_interval
        self._timer = timer
        #: A report of at least this many parts becomes a document where the platform makes
        #: them (``FATHOM_REPORT_DOCUMENT_PARTS``); 0: never.
        self.document_parts = document_parts
        self._limiters = WorkspaceLimiters(per_minute, burst, timer)
        #: Where the posters' API calls are counted (set by ``ChatPlatform.start``); None:
        #: not counted.
        self.metrics: Metrics | None = None

    @abstractmethod
    async def poster_for(self, run: RunRecord) -> ThreadPoster:
        """The poster of ``run``'s thread; ``core.operations.job.Undeliverable`` when it can
        never be posted to (the bot is not installed in its workspace any more)."""

    def activity_for(self, run: RunRecord, poster: ThreadPoster) -> Activity | None:
        """What shows the run's activity beside its progress message (Slack's thread status);
        None: nothing."""
        return None

    async def for_run(self, run: RunRecord) -> ChatDelivery:
        poster = await self.poster_for(run)
        metered: ThreadPoster = poster
        if self.metrics is not None:
            metered = MeteredPoster(poster, self.metrics, run.thread.platform)
        return ChatDelivery(
            run,
            metered,
            self._store,
            edit_interval=self._interval,
            limiter=self._limiters.for_team(run.thread.workspace),
            activity=self.activity_for(run, poster),
            timer=self._timer,
            documents=ReportDocuments(
                poster.document_kind, self.document_parts, self.delete_document
            )
            if poster.document_kind is not None and self.document_parts > 0
            else None,
        )

    async def delete_document(self, thread: ThreadKey, document: ReportDocument) -> None:
        """Delete a document this platform made for a report in ``thread`` (``fathom forget``,
        retention); one already gone counts as deleted."""
        raise NotImplementedError(f"{thread.platform} makes no documents")

    async def aclose(self) -> None:  # noqa: B027 - most hold nothing of their own
        """Close what the posters hold of their own (once the job runner has stopped)."""
