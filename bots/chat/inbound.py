"""Requests from any chat platform: one neutral message in, what to answer out.

An adapter turns a platform delivery (a Slack slash command or event, a Feishu message
event, ...) into a :class:`ChatMessage` with the bot's own mention and the platform's markup
already removed, and calls :meth:`ChatCommands.handle` (when the platform needs the answer in
its acknowledgement) or :meth:`ChatCommands.receive` (when the answer is posted afterwards).

Everything here touches only the database: access lists, the shared grammar, help, status and
cancel, the per-user limit, and the dedupe-aware submit and enqueue. A run's own progress
message is its answer; any other answer (help, an error) is a :class:`Reply` the adapter shows.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from bots.chat.announce import QueueAnnouncer
from bots.chat.controls import Control, Press
from bots.chat.greetings import is_greeting
from bots.chat.message import PENDING_PREFIX, Answer, ChatMessage, Reply
from bots.chat.replies import STATUS_RECENT, Markup, PlainMarkup, Replies
from bots.chat.settings import ChatPolicy
from core.chat.commands import CommandError, validate_ids
from core.chat.grammar import (
    EXPLICIT,
    CancelCommand,
    Command,
    DigestsCommand,
    HelpCommand,
    ResearchCommand,
    ScheduleCommand,
    StatusCommand,
    StopCommand,
    UnscheduleCommand,
    UsageCommand,
    parse_command,
    request_words,
)
from core.chat.stores import (
    CancelRequest,
    ChatStores,
    GuidanceTaken,
    RunRecord,
    StopRequest,
    UserBusy,
    utcnow,
)
from core.documents.attachments import Screened, screen
from core.models import Attachment
from core.operations.digests import DigestService
from core.operations.runners import JobRunner
from core.research.requests import DailyLimitReached, ResearchRequest, RunRejected, RunRequests
from core.values import DeliveryState, RunStatus, SourceChoice, ThreadKey, Vote
from core.words.wording import Language, request_language

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Refusal:
    """Why a cancel or stop has no run to act on."""

    #: "nothing_in_thread", "not_theirs", "nothing", "finished" (the quoted research has
    #: ended) or "untied" (the quoted message is tied to no research here)
    why: str
    prefix: str | None = None

    def text(self, replies: Replies, *, stop: bool) -> str:
        if self.why == "nothing_in_thread":
            return replies.nothing_running_in_thread()
        if self.why == "finished":
            return replies.already_finished()
        if self.why == "untied":
            return replies.quote_untied(stop=stop)
        if self.why == "not_theirs":
            return replies.only_starter_can_stop() if stop else replies.only_starter_can_cancel()
        return (
            replies.nothing_to_stop(self.prefix) if stop else replies.nothing_to_cancel(self.prefix)
        )


class NamedSource(Protocol):
    """An internal source as the chat layer sees it: its configured name only."""

    @property
    def name(self) -> str: ...


class InternalSources(Protocol):
    """The process's internal sources (``core.knowledge.Knowledge``), as far as the chat
    layer needs them: which of them a thread's channel may use (by configuration, whatever
    their state). The layer only refuses ``sources=internal`` where none may be used; which
    sources a run searches is decided again where it executes (``core.research.executor``)."""

    def allowed(self, thread_key: str) -> Sequence[NamedSource]: ...


#: A request's text parsed once: its command, or why it is not one.
Parsed = Command | CommandError


class ChatCommands:
    """The platform-neutral logic behind every chat entry point."""

    def __init__(
        self,
        policy: ChatPolicy,
        requests: RunRequests,
        store: ChatStores,
        runner: JobRunner,
        markup: Markup,
        digests: DigestService | None = None,
        knowledge: InternalSources | None = None,
        announcer: QueueAnnouncer | None = None,
    ) -> None:
        """``announcer``: posts the progress message of a research accepted while it waits
        in line (``bots.chat.announce``; None: the run's delivery posts it when it starts)."""
        self._policy = policy
        self._requests = requests
        self._store = store
        self._runner = runner
        self._markup = markup
        self._digests = digests
        self._knowledge = knowledge
        self._announcer = announcer

    @property
    def store(self) -> ChatStores:
        """The store the layer records in (an adapter keeps its conversations' context)."""
        return self._store

    def replies(self, language: Language) -> Replies:
        return Replies(self._markup, language)

    def parse(self, text: str) -> Parsed:
        """A request's command (or the error to answer), under this deployment's limits."""
        policy = self._policy
        try:
            return parse_command(
                text,
                default_depth=policy.default_depth,
                max_depth=policy.max_depth,
                default_strategy=policy.strategy,
            )
        except CommandError as exc:
            return exc

    async def receive(
        self, message: ChatMessage, answer: Answer, parsed: Parsed | None = None
    ) -> Reply | None:
        """Handle a delivery whose answer is posted afterwards (events, messages), at most
        once per request whatever the redeliveries and replicas: a request already handled
        is dropped before any work, a run is created once (its dedupe key), and the answer
        goes out only from the delivery that records the request first. A crash before that
        record leaves the request to the platform's redelivery. ``parsed``: the message's
        text already parsed by the adapter (:meth:`parse`), so it is parsed once."""
        if parsed is None:
            parsed = self.parse(message.text)
        if not message.addressed and not await self._heard_unaddressed(message, parsed):
            return None  # dropped at the door: nothing stored, its words not logged
        if await self._store.events.events_seen(message.event_keys):
            return None  # a redelivery of a request already handled
        # A command with an effect beyond a run (cancel stops whatever run is active when it
        # is handled; schedule and unschedule change the channel's digests) is recorded
        # first: handled at most once (two deliveries must not cancel two runs or store two
        # schedules).
        once = isinstance(parsed, CancelCommand | StopCommand | ScheduleCommand | UnscheduleCommand)
        if once and not await self._claim(message):
            return None
        reply = await self.handle(message, parsed)
        if reply.dropped:
            return None
        if not once and not await self._claim(message):
            return None  # another delivery of it (another replica) answered meanwhile
        if not reply.started:
            await answer(reply.text)
        elif reply.left_out:
            await answer(self._left_out(reply.left_out, message.lang))
        return reply

    def _left_out(self, left_out: Sequence[tuple[str, str]], language: Language) -> str:
        policy = self._policy
        return self.replies(language).files_left_out(
            left_out,
            max_bytes=policy.attachment_max_bytes,
            per_request=policy.attachments_per_request,
        )

    async def receive_files(self, message: ChatMessage, answer: Answer) -> None:
        """Files sent on their own (no request in the message): kept under the message's
        ``earlier_files`` scope for the sender's next research request there, within its
        window. Answered (what will be read, what not) only when the bot was addressed, or
        in the thread of a running research (which reads the files of its own request only,
        so the answer says they wait for the next one): a file posted elsewhere in a group is
        not the bot's business until someone asks."""
        if not (message.attachments or message.unreadable):
            return
        if not self._policy.is_allowed(message.user, message.channel):
            return
        running = await self._in_running_thread(message)
        answering = message.addressed or running
        if message.earlier_files is None:  # files cannot wait here (the window is off)
            if answering and await self._claim(message):
                language = await self._language_of(message)
                if running:
                    files = [(a.name, "steering") for a in message.attachments]
                    await answer(self._left_out(files + list(message.unreadable), language))
                else:
                    await answer(self.replies(language).files_need_request())
            return
        if not await self._claim(message):
            return  # a redelivery
        screened = self._screen(_attached_by_sender(message))
        await self._store.files.remember_files(
            message.earlier_files, [a.model_dump(mode="json") for a in screened.accepted]
        )
        if not answering:
            return
        language = await self._language_of(message)
        replies = self.replies(language)
        rejected = message.unreadable + _named(screened.rejected)
        if rejected:
            await answer(self._left_out(rejected, language))
        if screened.accepted:
            minutes = max(1, round(message.earlier_window / 60))
            names = [a.name for a in screened.accepted]
            if running:
                await answer(replies.files_kept_after_research(names, minutes))
            else:
                await answer(replies.files_kept(names, minutes))

    def _screen(self, attachments: Sequence[Attachment]) -> Screened:
        policy = self._policy
        return screen(
            attachments,
            max_bytes=policy.attachment_max_bytes,
            per_request=policy.attachments_per_request,
        )

    async def _attachments(self, message: ChatMessage) -> list[Attachment]:
        """The request's own files, after those sent on their own just before it (taken)."""
        earlier: list[Attachment] = []
        if message.earlier_files is not None and message.earlier_window > 0:
            since = utcnow() - timedelta(seconds=message.earlier_window)
            for raw in await self._store.files.take_files(message.earlier_files, since):
                try:
                    earlier.append(Attachment.model_validate(raw))
                except ValueError:
                    log.warning("a kept file's description is not valid; dropped")
        return earlier + _attached_by_sender(message)

    async def receive_unreadable(self, message: ChatMessage, answer: Answer) -> None:
        """A message the bot cannot read (an image, a file): a short help answer, once, in
        the request's language: its own words (a file's name) when it has any, else the
        language of the sender's last research."""
        if message.addressed and await self._claim(message):
            language = await self._language_of(message)
            await answer(self.replies(language).unsupported_message())

    async def _language_of(self, message: ChatMessage) -> Language:
        """The language to answer a message that is not a request in: its own words' (a
        file's name) when it has any, else that of the sender's last research."""
        if message.language is not None:
            return message.language
        if request_words(message.text).strip():
            return message.lang
        recent = await self._store.runs.recent_runs_for_user(message.requested_by, 1)
        return request_language(recent[0].topic) if recent else "en"

    async def _claim(self, message: ChatMessage) -> bool:
        """Record the request; True for the delivery that recorded it first."""
        if not await self._store.events.claim_event(message.dedupe_key):
            return False
        if message.delivery_key:
            await self._store.events.claim_event(message.delivery_key)
        return True

    async def handle(self, message: ChatMessage, parsed: Parsed | None = None) -> Reply:
        """What to answer to one request; a research request becomes a queued run.
        ``parsed``: its text already parsed (:meth:`parse`)."""
        if parsed is None:
            parsed = self.parse(message.text)
        policy = self._policy
        replies = self.replies(message.lang)
        try:
            validate_ids(workspace=message.workspace, channel=message.channel, user=message.user)
            validate_ids(thread=message.thread.removeprefix(PENDING_PREFIX))
        except CommandError as exc:
            return Reply(replies.error(exc.text(replies.language)))
        if not policy.is_allowed(message.user, message.channel):
            return Reply(replies.not_allowed())
        if message.in_thread and steers(message.text, parsed):
            # Decided before any limit: guidance is not a run, and the requester's own
            # concurrency or daily quota never keeps them from steering their research.
            steered = await self._steer(message, replies)
            if steered is not None:
                return steered
        if not message.addressed and isinstance(parsed, ResearchCommand | CommandError):
            # Not guidance (its research ended meanwhile, or it said nothing readable): a
            # message that does not address the bot never starts a research or gets an error.
            return Reply("", dropped=True)
        if isinstance(parsed, CommandError):
            return Reply(replies.error(parsed.text(replies.language)))
        command = HelpCommand() if greets(parsed) else parsed
        if isinstance(command, HelpCommand):
            return Reply(
                replies.help(default_depth=policy.default_depth, max_depth=policy.max_depth)
            )
        if isinstance(command, StatusCommand):
            return Reply(await self._status(message, replies))
        if isinstance(command, CancelCommand):
            return Reply(await self._cancel(message, command.run_id, replies))
        if isinstance(command, StopCommand):
            return Reply(await self._stop(message, command.run_id, replies))
        if isinstance(command, UsageCommand):
            report = await self._requests.usage_report(message.requested_by, message.thread_key)
            return Reply(replies.usage(report))
        if isinstance(command, ScheduleCommand | DigestsCommand | UnscheduleCommand):
            try:
                return Reply(await self._digest_command(message, command, replies))
            except CommandError as exc:
                return Reply(replies.error(exc.text(replies.language)))
        return await self._research(message, command, replies)

    async def _digest_command(
        self,
        message: ChatMessage,
        command: ScheduleCommand | DigestsCommand | UnscheduleCommand,
        replies: Replies,
    ) -> str:
        digests = self._digests
        if digests is None:
            return replies.digests_unavailable()
        where = message.thread_key
        if isinstance(command, DigestsCommand):
            found = await digests.digests.in_channel(where.platform, where.workspace, where.channel)
            return replies.digests(await digests.views(found, replies.language))
        if isinstance(command, UnscheduleCommand):
            removed = await digests.remove(
                command.digest_id,
                by=message.requested_by,
                is_admin=self._policy.is_admin(message.user),
                channel=where,
            )
            return replies.unscheduled(removed)
        if not self._may_search(command.sources, where):
            return replies.no_internal_source()
        digest = await digests.add(
            command, thread=where, created_by=message.requested_by, platform_context=message.context
        )
        (view,) = await digests.views([digest], replies.language)
        return replies.scheduled(view)

    def _may_search(self, sources: SourceChoice, thread: ThreadKey) -> bool:
        """False for ``sources=internal`` where the thread's channel may use no internal
        source (nothing is created then; ``web`` and ``all`` always run)."""
        if sources is not SourceChoice.INTERNAL:
            return True
        return self._knowledge is not None and bool(self._knowledge.allowed(str(thread)))

    async def _research(
        self, message: ChatMessage, command: ResearchCommand, replies: Replies
    ) -> Reply:
        if not self._may_search(command.sources, message.thread_key):
            return Reply(replies.no_internal_source())  # before any file is taken
        by = message.requested_by
        attachments = await self._attachments(message)
        screened = self._screen(attachments)
        request = ResearchRequest(
            topic=command.topic,
            depth=command.depth,
            strategy=command.strategy,
            thread=message.thread_key,
            requested_by=by,
            dedupe_key=message.dedupe_key,
            platform_context=message.context,
            attachments=screened.accepted,
            sources=command.sources,
        )
        try:
            # One transaction: the per-user limit, the dedupe key, the thread's one active
            # run and (with the procrastinate queue) the job.
            run, created = await self._requests.submit(
                request, user_limit=self._policy.user_concurrency
            )
        except UserBusy as busy:
            await self._keep(message, attachments)
            return Reply(replies.concurrency(busy.limit))
        except DailyLimitReached as reached:
            await self._keep(message, attachments)
            return Reply(
                replies.daily_limit(
                    reached.kind, reached.limit, reached.resets_at, reached.reserved
                )
            )
        except RunRejected as exc:  # (an explicit `/research` in a busy thread)
            await self._keep(message, attachments)
            return Reply(replies.thread_busy(exc.active))
        except BaseException:  # the database failed: the files wait for the retried request
            with contextlib.suppress(Exception):
                await self._keep(message, attachments)
            raise
        announcing = None
        if created:
            if self._announcer is not None and not message.thread.startswith(PENDING_PREFIX):
                # Reserved before the runner has it: announced unless a runner took it first.
                announcing = await self._announcer.reserve(run)
            await self._runner.enqueue(run.id)
            if announcing is not None and self._announcer is not None:
                self._announcer.announce(run, announcing)
        else:  # another delivery of this request made the run: what this one took waits on
            await self._keep(message, attachments)
        left_out = message.unreadable + _named(screened.rejected) if created else ()
        # Its place in line, told here when no progress message tells it (a Slack slash
        # command's acknowledgement: its thread starts with the run's progress message).
        place = None
        if created and announcing is None:
            place = await self._store.runs.queue_place(run.id)
        return Reply(
            replies.accepted(run.topic, run.depth, place),
            started=True,
            left_out=left_out,
            run_id=run.id,
        )

    async def aclose(self) -> None:
        """Finish what is being announced (before the process stops taking requests)."""
        if self._announcer is not None:
            await self._announcer.aclose()

    async def _heard_unaddressed(self, message: ChatMessage, parsed: Parsed) -> bool:
        """Whether a message that does not address the bot (a plain reply in a thread, where
        the platform delivers those) is handled: in the thread of a running research, which
        it steers like any reply there (or a control word acts on); and a control word
        (``stop``, ``cancel``, ``status``) in any research's thread, answered even when the
        research has ended (too late, nothing running). Anything else, and a message whose
        ids ``handle`` would refuse (empty, too long: nothing is looked up with them), is
        not read."""
        if not _thread_to_look_up(message):
            return False
        thread = str(message.thread_key)
        if await self._store.runs.active_run_in_thread(thread) is not None:
            return True
        if isinstance(parsed, StopCommand | CancelCommand | StatusCommand):
            return await self._store.runs.latest_run_in_thread(thread) is not None
        return False

    async def _in_running_thread(self, message: ChatMessage) -> bool:
        """Whether ``message`` is in the thread of a running research."""
        if not _thread_to_look_up(message):
            return False
        thread = str(message.thread_key)
        return await self._store.runs.active_run_in_thread(thread) is not None

    async def _steer(self, message: ChatMessage, replies: Replies) -> Reply | None:
        """A reply in the thread of a running research, kept as guidance for it (its raw
        text), or answered that it is too late once the research's searching has ended
        (nothing of it would read the reply); None when the thread has no running research
        (or nothing readable was said, and no file attached), so that the reply is handled as
        a request. Files on it are not read, and the answer says so."""
        run = await self._store.runs.active_run_in_thread(str(message.thread_key))
        if run is None:
            return None
        taken = await self._requests.add_guidance(
            run,
            message.requested_by,
            message.text,
            key=message.dedupe_key,
            name=message.user_name,
        )
        files = [(a.name, "steering") for a in message.attachments] + list(message.unreadable)
        if taken is GuidanceTaken.ENDED or (taken is None and not files):
            return None
        if message.language is None and not request_words(message.text).strip():
            # Files and no words: answered in the language of the research they were sent to.
            replies = self.replies(request_language(run.topic))
        said = []
        if taken is GuidanceTaken.KEPT:
            said.append(replies.guidance_noted())
        elif taken is GuidanceTaken.TOO_LATE:
            said.append(replies.guidance_too_late())
        if files:
            said.append(self._left_out(files, replies.language))
        return Reply("\n".join(said))

    async def _keep(self, message: ChatMessage, attachments: Sequence[Attachment]) -> None:
        """A request refused for now: the files it took wait for the next one again."""
        taken = [a for a in attachments if a not in message.attachments]
        if message.earlier_files is not None and taken:
            await self._store.files.remember_files(
                message.earlier_files, [a.model_dump(mode="json") for a in taken]
            )

    async def _status(self, message: ChatMessage, replies: Replies) -> str:
        by = message.requested_by
        active = await self._store.runs.active_runs_for_user(by)
        recent = await self._store.runs.recent_runs_for_user(by, STATUS_RECENT + len(active))
        return replies.status(list(reversed(active)), recent)

    async def _cancel(self, message: ChatMessage, prefix: str | None, replies: Replies) -> str:
        run = await self._target(message, prefix)
        if isinstance(run, _Refusal):
            return run.text(replies, stop=False)
        return _cancel_answer(await self._cancel_run(run), run, replies)

    async def _cancel_run(self, run: RunRecord) -> CancelRequest:
        """Cancel ``run``; one that waited in line ends at once, and its announced progress
        message says so."""
        answer = await self._requests.cancel(run.id)
        if answer is CancelRequest.CANCELLED and self._announcer is not None:
            self._announcer.cancelled(run)
        return answer

    async def _stop(self, message: ChatMessage, prefix: str | None, replies: Replies) -> str:
        """Stop and write now, typed (``stop``, ``write now``, ``停止``, ...)."""
        run = await self._target(message, prefix)
        if isinstance(run, _Refusal):
            return run.text(replies, stop=True)
        answer = await self._requests.stop(run.id)
        if answer is StopRequest.STOPPING:
            return replies.stopping(run)
        if answer is StopRequest.CANCELLED:  # queued: nothing found yet to write from
            if self._announcer is not None:
                self._announcer.cancelled(run)
            return replies.cancelled(run)
        return await self._not_taken(run.id, replies)

    async def press(self, press: Press, *, plain: bool = False) -> str:
        """A press on one of a run's buttons (database only, within any platform's
        acknowledgement deadline); the answer is shown to the presser only (``plain``: as
        plain text, for a toast). Stop and cancel are the requester's or an admin's; a vote
        is anyone's who may use the bot here. A repeated or late press changes nothing and
        says so."""

        def replies_in(language: Language) -> Replies:
            return Replies(PlainMarkup(), language) if plain else self.replies(language)

        answer = await self._press(press, replies_in)
        return answer.replace("`", "") if plain else answer

    async def _press(self, press: Press, replies_in: Callable[[Language], Replies]) -> str:
        try:
            validate_ids(workspace=press.workspace, user=press.user, run=press.run_id)
            if press.channel is not None:
                validate_ids(channel=press.channel)
        except CommandError:  # (nothing of it is looked up: its words are the card's)
            return replies_in(press.language or "en").button_unknown()
        run = await self._store.runs.get_run(press.run_id)
        thread = _thread_of(run)
        if run is None or thread is None or not _belongs(thread, press):
            return replies_in(await self._press_language(press)).button_unknown()
        replies = replies_in(request_language(run.topic))
        if not self._policy.is_allowed(press.user, thread.channel):
            return replies.not_allowed()
        if press.control.is_vote:
            return await self._vote(run, press, replies)
        if run.requested_by != press.requested_by and not self._policy.is_admin(press.user):
            stop = press.control is Control.STOP
            return replies.only_starter_can_stop() if stop else replies.only_starter_can_cancel()
        if press.control is Control.CANCEL:  # (decided by the database, not by `run` as read)
            return _cancel_answer(await self._cancel_run(run), run, replies)
        if run.status.finished:  # Stop and write now
            return replies.already_finished()
        answer = await self._requests.stop(run.id)
        if answer is StopRequest.STOPPING:
            return replies.stopping(run)
        if answer is StopRequest.CANCELLED:
            if self._announcer is not None:
                self._announcer.cancelled(run)
            return replies.cancelled(run)
        return await self._not_taken(run.id, replies)

    async def _press_language(self, press: Press) -> Language:
        """The language of an answer to a press on no run here: the pressed card's, as the
        press tells it, else that of the presser's last research (DingTalk's callbacks
        tell none), else English."""
        if press.language is not None:
            return press.language
        recent = await self._store.runs.recent_runs_for_user(press.requested_by, 1)
        return request_language(recent[0].topic) if recent else "en"

    async def _not_taken(self, run_id: str, replies: Replies) -> str:
        """Why a stop or cancel changed nothing, read after the attempt (a press delivered
        twice races its twin, so the run read before it can be stale): the run has ended,
        or it was already asked to stop."""
        run = await self._store.runs.get_run(run_id)
        if run is None or run.status.finished:
            return replies.already_finished()
        return replies.already_stopping()

    async def _vote(self, run: RunRecord, press: Press, replies: Replies) -> str:
        if run.status != RunStatus.SUCCEEDED or not run.report_markdown:
            return replies.nothing_to_rate()
        vote = Vote.UP if press.control is Control.UP else Vote.DOWN
        before = await self._requests.record_feedback(run, press.requested_by, vote)
        return replies.vote_recorded(vote, before)

    async def _target(self, message: ChatMessage, prefix: str | None) -> RunRecord | _Refusal:
        """The run a cancel or stop means: in a thread, that thread's (its requester's or an
        admin's to end); a quote of a research (``ChatMessage.quoted``), that research's,
        with the same rule; a quote of anything else, none; elsewhere the sender's newest
        active run (matching ``prefix``)."""
        by = message.requested_by
        if message.quoted == "other" and prefix is None:
            return _Refusal("untied")
        if message.in_thread and prefix is None:
            thread = str(message.thread_key)
            run = await self._store.runs.active_run_in_thread(thread) or await self._posting_in(
                thread
            )
            if run is None or (run.status.finished and not _posting(run)):
                quoted_ended = run is not None and message.quoted == "research"
                return _Refusal("finished" if quoted_ended else "nothing_in_thread")
            if run.requested_by != by and not self._policy.is_admin(message.user):
                return _Refusal("not_theirs")
            return run
        picked = self._pick(await self._store.runs.active_runs_for_user(by), message, prefix)
        return _Refusal("nothing", prefix) if picked is None else picked

    async def _posting_in(self, thread: str) -> RunRecord | None:
        """With no active run in the thread: its newest run posting its report (a resumed
        run can be older than a follow-up that ended), else its newest run."""
        latest = await self._store.runs.latest_run_in_thread(thread)
        if latest is None or _posting(latest):
            return latest
        posting = [r for r in await self._store.runs.thread_runs(latest.thread_id) if _posting(r)]
        return posting[-1] if posting else latest

    @staticmethod
    def _pick(
        active: list[RunRecord], message: ChatMessage, prefix: str | None
    ) -> RunRecord | None:
        """The newest active run matching the id prefix, else the newest in this channel."""
        if prefix:
            wanted = prefix.lower()
            matches = [run for run in active if run.id.startswith(wanted)]
        else:
            matches = [r for r in active if r.thread.channel == message.channel]
        return matches[-1] if matches else None


def _thread_to_look_up(message: ChatMessage) -> bool:
    """Whether ``message`` is in a thread whose runs may be looked up: a reply in a thread,
    with ids ``handle`` would take (empty or too long ones are never looked up)."""
    if not message.in_thread:
        return False
    try:
        validate_ids(
            workspace=message.workspace,
            channel=message.channel,
            user=message.user,
            thread=message.thread,
        )
    except CommandError:
        return False
    return True


def _posting(run: RunRecord) -> bool:
    """Whether ``run`` finished and its outcome is being posted now: its report, or its
    cancellation (a second cancel is then told it is already cancelling)."""
    if run.delivery != DeliveryState.PENDING:
        return False
    cancelled = run.status == RunStatus.CANCELLED.value and run.cancel_requested
    return run.status == RunStatus.SUCCEEDED.value or cancelled


def _thread_of(run: RunRecord | None) -> ThreadKey | None:
    if run is None:
        return None
    try:
        return run.thread
    except ValueError:
        return None


def _belongs(thread: ThreadKey, press: Press) -> bool:
    """Whether the pressed run is in the platform, workspace and channel of the press."""
    where = (thread.platform, thread.workspace)
    if where != (press.platform, press.workspace):
        return False
    return press.channel is None or thread.channel == press.channel


def _cancel_answer(answer: CancelRequest, run: RunRecord, replies: Replies) -> str:
    """What a cancel did, as the canceller is told (typed or pressed alike)."""
    if answer in (CancelRequest.CANCELLED, CancelRequest.CANCELLING):
        return replies.cancelled(run)
    if answer is CancelRequest.ALREADY:
        return replies.already_cancelling()
    if answer is CancelRequest.POSTING:
        return replies.posting_report()
    return replies.already_finished()


def steers(text: str, parsed: Parsed) -> bool:
    """Whether a reply in a thread is steering text, not a command: anything but a control
    word (``stop``, ``cancel``, ``help``, ``status``, ``usage``, the schedule commands) or a
    request that starts with ``/research``. Its words are never read by the grammar: ``a=b``,
    a URL with a query or 10 KB of text are guidance, not an unknown option or a long topic."""
    if isinstance(parsed, ResearchCommand | CommandError):
        return EXPLICIT.match(text) is None
    return False


def greets(parsed: Parsed) -> bool:
    """Whether a request is only a greeting ("hi", "你好"): answered with the help, never a
    research on the word (``bots.chat.greetings``)."""
    return isinstance(parsed, ResearchCommand) and is_greeting(parsed.topic)


def _named(rejected: Sequence[tuple[Attachment, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((attachment.name, why) for attachment, why in rejected)


def _attached_by_sender(message: ChatMessage) -> list[Attachment]:
    """The message's files, each naming who attached it by their platform id (the sender,
    unless the platform named another: a file in a quoted message), beside any display name
    in ``attached_by``: ``fathom forget`` finds a person's files by that id."""
    return [
        a if a.attacher_id else a.model_copy(update={"attacher_id": message.user})
        for a in message.attachments
    ]
