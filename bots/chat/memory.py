"""An in-memory chat platform on the shared layer: the twin every adapter is measured against.

:class:`MemoryChat` keeps threads as lists of messages (with every version of an edited
message), answers requests through :class:`~bots.chat.inbound.ChatCommands` and delivers
runs through :class:`~bots.chat.delivery.ChatDelivery`, exactly as a real adapter does, with
nothing but translation left out. Calls can be made to fail (rate limits, outages, refusals),
so the shared layer's retry and final-state logic is tested without any platform; so can
building a run's delivery (a workspace the bot left, an installation store that did not
answer), and a report part can take a while (a post in flight when the runner stops). What a
run's delivery showed is kept per run (:meth:`MemoryChat.shown`), so the run lifecycle is
tested against the same twin, with several runners ("replicas") sharing one chat.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from bots.chat.controls import Button, Control, Press, feedback_buttons
from bots.chat.delivery import ThreadPoster, ThreadPosters
from bots.chat.documents import DocumentContent, DocumentRefused
from bots.chat.ids import InvalidId
from bots.chat.inbound import ChatCommands
from bots.chat.markdown import split_report
from bots.chat.message import ChatMessage, Reply
from bots.chat.replies import EMOJI_ICONS, Icon
from core.chat.stores import ChatStores, RunRecord
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge
from core.engine.progress import ProgressTask
from core.failures import PostFailure
from core.models import Attachment
from core.operations.job import Undeliverable
from core.research.outcome import RunOutcome
from core.timer import MONOTONIC, Timer
from core.untrusted import neutralise
from core.values import ReportDocument, ThreadKey
from core.words.reasons import Reason
from core.words.wording import Language, request_language

PLATFORM = "memory"
#: How a progress message's content lists its buttons (its last line).
BUTTONS_MARK = "⟦buttons⟧ "
Operation = Literal["post", "edit", "report", "notice", "answer", "download", "document", "delete"]
Kind = Literal["progress", "report", "notice", "answer"]


def _digest(text: str) -> str:
    """A message's words as part of its key (a key holds ids only, never the words)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class RateLimited(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limited, retry after {retry_after}s")
        self.retry_after = retry_after


class Outage(Exception):
    """A transient failure (a 5xx)."""


class Refusal(Exception):
    """A permanent failure (the bot was removed from the chat)."""


@dataclass
class MemoryMessage:
    id: str
    kind: Kind
    versions: list[str] = field(default_factory=list)
    run_id: str | None = None  # the run whose delivery posted it (None: an answer)
    #: The buttons each version showed (in step with :attr:`versions`).
    button_versions: list[tuple[Control, ...]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.versions[-1]

    @property
    def buttons(self) -> tuple[Control, ...]:
        """The buttons the message shows now."""
        return self.button_versions[-1] if self.button_versions else ()


@dataclass(frozen=True)
class RunShown:
    """What one run's delivery showed in its thread, in order."""

    progress: list[str]  # every status its progress message showed (without the topic line)
    parts: list[str]  # the report parts posted
    notices: list[str]


class MemoryMarkup:
    """Markdown replies: ``**bold**``, icons as emoji, thread hints as plain ids."""

    bold = "**"

    def escape(self, text: str) -> str:
        return neutralise(text)

    def icon(self, name: Icon) -> str:
        return EMOJI_ICONS[name]

    def thread_hint(self, thread: ThreadKey, language: Language) -> str:
        return f"{thread.channel}/{thread.thread}"


@dataclass
class MemoryDocument:
    """A document the chat made for a long report (``documents=True``)."""

    id: str
    thread: str
    title: str
    markdown: str


class MemoryChat:
    """A chat service in memory: threads by key, messages by id, failures on demand.

    ``report_limit``: the most characters in one report part; ``part_per_section``: post each
    ``## `` section as a part of its own instead (a short report still has several parts, for
    tests of a delivery interrupted between two); ``documents``: a long report becomes a
    document (:attr:`documents`) and a summary message, as on a platform that makes them
    (``bots.chat.documents``), unless :attr:`document_refusal` says why not.
    """

    def __init__(
        self, *, report_limit: int = 2_000, part_per_section: bool = False, documents: bool = False
    ) -> None:
        self.threads: dict[str, list[MemoryMessage]] = defaultdict(list)
        self.report_limit = report_limit
        self.part_per_section = part_per_section
        self.makes_documents = documents
        #: The documents made (by id), those deleted, and why documents are refused (None:
        #: they are not); a refusal is told once, then remembered as a platform would.
        self.documents: dict[str, MemoryDocument] = {}
        self.deleted: list[str] = []
        self.document_refusal: str | None = None
        self.refusal_told = False
        #: ``FATHOM_REPORT_DOCUMENT_PARTS`` of the posters :meth:`factory` makes.
        self.document_parts = 2
        self._ids = itertools.count(1)
        self._failures: dict[Operation, list[tuple[Exception, str | None]]] = defaultdict(list)
        self._by_run: dict[str, list[MemoryMessage]] = defaultdict(list)
        self.calls: list[tuple[Operation, str]] = []  # every attempted call, failed ones too
        self.changed = asyncio.Event()
        self.refuse_for_run: str | None = None  # building this run's delivery: Undeliverable
        self.for_run_errors: list[Exception] = []  # the next deliveries built raise these
        self.post_latency = 0.0  # seconds each report part takes (a post in flight can be cut)
        self.posting = asyncio.Event()  # set when a report part post has started
        #: The chat's files by id (what a run's delivery downloads), and the downloads that
        #: succeeded (every attempt is in :attr:`calls`).
        self.files: dict[str, bytes] = {}
        self.downloads: list[str] = []
        self.download_gate: asyncio.Event | None = None  # downloads wait for it when set
        self.report_gate: asyncio.Event | None = None  # report parts wait for it when set
        self.downloading = asyncio.Event()  # set when a download has started
        #: The answers to button presses, shown to the presser only: (user, text).
        self.private: list[tuple[str, str]] = []

    def fail(self, operation: Operation, *errors: Exception, when: str | None = None) -> None:
        """The next ``operation`` calls raise these, in order; with ``when``, only calls whose
        text (the message's content) contains it."""
        self._failures[operation].extend((error, when) for error in errors)

    def _call(self, operation: Operation, thread: ThreadKey, text: str = "") -> None:
        self.calls.append((operation, str(thread)))
        failures = self._failures[operation]
        for i, (error, when) in enumerate(failures):
            if when is None or when in text:
                del failures[i]
                raise error

    def _add(
        self,
        thread: ThreadKey,
        kind: Kind,
        text: str,
        run_id: str | None = None,
        buttons: tuple[Control, ...] = (),
    ) -> str:
        text, shown = _split_buttons(text, buttons)
        message = MemoryMessage(f"m{next(self._ids)}", kind, [text], run_id, [shown])
        self.threads[str(thread)].append(message)
        if run_id is not None:
            self._by_run[run_id].append(message)
        self.changed.set()
        return message.id

    def messages(self, thread: ThreadKey | str, kind: str | None = None) -> list[MemoryMessage]:
        return [m for m in self.threads[str(thread)] if kind is None or m.kind == kind]

    def shown(self, run_id: str) -> RunShown:
        """What the run's delivery showed, by whichever runner delivered it."""
        messages = self._by_run[run_id]
        return RunShown(
            progress=[
                MemoryThread.status_of(version)
                for m in messages
                if m.kind == "progress"
                for version in m.versions
            ],
            parts=[m.text for m in messages if m.kind == "report"],
            notices=[m.text for m in messages if m.kind == "notice"],
        )

    # -- inbound --------------------------------------------------------------------
    async def say(
        self,
        commands: ChatCommands,
        text: str,
        *,
        user: str = "U1",
        thread: str = "t1",
        key: str | None = None,
        addressed: bool = True,
        in_thread: bool = False,
        attachments: Sequence[Attachment] = (),
        readable: bool = True,
        earlier_files: str | None = None,
        earlier_window: float = 0.0,
    ) -> Reply | None:
        """A user writes to the bot in ``C1``; the answer (if any) is posted in the thread.
        ``attachments``: files attached (their bytes are in :attr:`files`, by id; an
        ``addressed`` message with files and no ``text`` is a file sent on its own, kept
        under ``earlier_files`` for the next request); not ``readable``: a message the bot cannot
        read (an image; ``text`` is what the platform shows of it, e.g. a file name)."""
        try:
            message = ChatMessage(
                platform=PLATFORM,
                workspace="W1",
                channel="C1",
                thread=thread,
                user=user,
                text=text,
                dedupe_key=key or f"memory:{thread}:{user}:{_digest(text)}",
                addressed=addressed,
                in_thread=in_thread,
                attachments=tuple(attachments),
                earlier_files=earlier_files,
                earlier_window=earlier_window,
            )
        except InvalidId:  # refused at the door, as every platform's adapter refuses it
            return None

        async def answer(reply: str) -> None:
            self._call("answer", message.thread_key, reply)
            self._add(message.thread_key, "answer", reply)

        if not readable:
            await commands.receive_unreadable(message, answer)
            return None
        if attachments and not text.strip() and addressed:
            await commands.receive_files(message, answer)
            return None
        # (a reply that does not address the bot, files and all, may only steer: Slack's
        # plain thread replies and Teams' channel replies go this way)
        return await commands.receive(message, answer)

    async def press(
        self,
        commands: ChatCommands,
        run_id: str,
        control: Control,
        *,
        user: str = "U1",
        channel: str = "C1",
        language: Language | None = None,
    ) -> str:
        """A user presses one of a run's buttons; the answer is shown to them only.
        ``language``: the pressed card's, as the press tells it (None: it does not)."""
        press = Press(PLATFORM, "W1", channel, user, run_id, control, language)
        text = await commands.press(press)
        self.private.append((user, text))
        return text

    # -- outbound -------------------------------------------------------------------
    def factory(self, store: ChatStores, *, edit_interval: float = 0.0) -> MemoryPosters:
        return MemoryPosters(
            self, store, edit_interval=edit_interval, document_parts=self.document_parts
        )


class MemoryThread(ThreadPoster):
    """``ThreadPoster`` for one run's thread in a :class:`MemoryChat` (its threads are never
    opened by a run's own message)."""

    opens_threads = False

    def __init__(self, chat: MemoryChat, run: RunRecord) -> None:
        super().__init__(run)
        self._chat = chat
        self._last_part: str | None = None

    def render_progress(
        self,
        status: str,
        message_id: str | None,
        buttons: Sequence[Button] = (),
        tasks: Sequence[ProgressTask] = (),
    ) -> str:
        content = f"{neutralise(self.run.topic)}\n{neutralise(status)}"
        if buttons:
            content += "\n" + BUTTONS_MARK + " ".join(b.control.value for b in buttons)
        return content

    @staticmethod
    def status_of(content: str) -> str:
        """The status a progress message shows, without its topic line."""
        return content.partition("\n")[2]

    async def post_progress(self, content: str) -> str:
        self._chat._call("post", self.thread, content)
        return self._chat._add(self.thread, "progress", content, self.run.id)

    async def edit_progress(self, message_id: str, content: str) -> None:
        self._chat._call("edit", self.thread, content)
        for message in self._chat.threads[str(self.thread)]:
            if message.id == message_id:
                text, shown = _split_buttons(content)
                message.versions.append(text)
                message.button_versions.append(shown)
                self._chat.changed.set()
                return
        raise Refusal(f"no message {message_id}")

    def report_parts(self, outcome: RunOutcome) -> Sequence[str]:
        report = neutralise(outcome.report_markdown or "")
        if self._chat.part_per_section:
            parts = [p for p in re.split(r"\n(?=## )", report.strip()) if p.strip()]
        else:
            parts = split_report(report, self._chat.report_limit)
        self._last_part = parts[-1] if parts else None
        return parts

    async def post_report_part(self, part: str) -> None:
        self._chat.posting.set()
        if self._chat.report_gate is not None:
            await self._chat.report_gate.wait()
        self._chat._call("report", self.thread, part)
        buttons: tuple[Control, ...] = ()
        if part == self._last_part:  # the last part carries the feedback buttons
            language = request_language(self.run.topic)
            buttons = tuple(b.control for b in feedback_buttons(self.run.id, language))
        self._chat._add(self.thread, "report", part, self.run.id, buttons)
        if self._chat.post_latency:  # the chat has it; its answer is on the way
            await asyncio.sleep(self._chat.post_latency)

    async def post_notice(self, text: str) -> None:
        self._chat._call("notice", self.thread, text)
        self._chat._add(self.thread, "notice", neutralise(text), self.run.id)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        self._chat._call("download", self.thread, attachment.id)
        self._chat.downloading.set()
        if self._chat.download_gate is not None:
            await self._chat.download_gate.wait()
        self._chat.downloads.append(attachment.id)
        data = self._chat.files.get(attachment.id)
        if data is None:
            raise AttachmentRefused(Reason("the file is gone", "文件已不存在"))
        if len(data) > max_bytes:
            raise AttachmentTooLarge.past(max_bytes)
        return data

    def classify(self, error: Exception) -> PostFailure:
        if isinstance(error, RateLimited):
            return PostFailure("rate limited", True, error.retry_after)
        return PostFailure(f"{type(error).__name__}: {error}", isinstance(error, Outage))


class MemoryDocumentThread(MemoryThread):
    """A :class:`MemoryThread` whose long reports become documents (``memo://<id>``)."""

    document_kind = "memo"

    async def create_document(self, content: DocumentContent) -> ReportDocument:
        chat = self._chat
        if chat.document_refusal is not None:
            first, chat.refusal_told = not chat.refusal_told, True
            raise DocumentRefused(chat.document_refusal, first=first)
        chat._call("document", self.thread, content.title)
        document_id = f"d{next(chat._ids)}"
        chat.documents[document_id] = MemoryDocument(
            document_id, str(self.thread), content.title, content.markdown
        )
        return ReportDocument(kind=self.document_kind, id=document_id, url=f"memo://{document_id}")

    def summary_parts(
        self, outcome: RunOutcome, content: DocumentContent, document: ReportDocument
    ) -> Sequence[str]:
        lines = [content.summary, content.claims_line or "", f"{content.title}: {document.url}"]
        summary = "\n\n".join(line for line in lines if line)
        self._last_part = summary
        return [summary]


def _split_buttons(
    content: str, buttons: tuple[Control, ...] = ()
) -> tuple[str, tuple[Control, ...]]:
    """A message's text without the line that lists its buttons, and those buttons."""
    head, _, last = content.rpartition("\n")
    if not last.startswith(BUTTONS_MARK):
        return content, buttons
    return head, tuple(Control(name) for name in last.removeprefix(BUTTONS_MARK).split())


class MemoryPosters(ThreadPosters):
    """The posters of the ``memory`` platform's threads."""

    def __init__(
        self,
        chat: MemoryChat,
        store: ChatStores,
        *,
        edit_interval: float = 0.0,
        timer: Timer = MONOTONIC,
        document_parts: int = 2,
    ) -> None:
        super().__init__(
            store, edit_interval=edit_interval, timer=timer, document_parts=document_parts
        )
        self._chat = chat

    async def poster_for(self, run: RunRecord) -> MemoryThread:
        if self._chat.for_run_errors:
            raise self._chat.for_run_errors.pop(0)
        if run.id == self._chat.refuse_for_run:
            raise Undeliverable("no installation for this workspace")
        if self._chat.makes_documents:
            return MemoryDocumentThread(self._chat, run)
        return MemoryThread(self._chat, run)

    async def delete_document(self, thread: ThreadKey, document: ReportDocument) -> None:
        self._chat._call("delete", thread, document.id)
        if self._chat.documents.pop(document.id, None) is not None:
            self._chat.deleted.append(document.id)
