"""What a platform's adapter hands the chat layer (:class:`ChatMessage`) and what it gets
back to show (:class:`Reply`), with no platform's types in either."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from bots.chat.ids import check_message
from core.chat.grammar import request_words
from core.models import Attachment
from core.values import ThreadKey
from core.words.wording import Language, request_language

#: A thread whose id the platform assigns only once the run posts its first message (a Slack
#: slash command has no message to thread under): ``pending-<request id>``.
PENDING_PREFIX = "pending-"


@dataclass(frozen=True)
class ChatMessage:
    """One request, as every platform's adapter hands it to the shared layer. Its ids are
    checked as it is made (``bots.chat.ids``): one that storage would refuse raises
    :class:`~bots.chat.ids.InvalidId`, so no such message reaches the layer."""

    platform: str
    workspace: str
    channel: str
    #: The thread the run belongs to (its key's last part): the message that started it.
    thread: str
    user: str
    #: The command text: the bot's mention and the platform's markup removed.
    text: str
    #: The identity of the request (the same for every redelivery of it): a run is created
    #: at most once per key, and a reply posted at most once.
    dedupe_key: str
    #: The bot was addressed (a DM, a mention, a slash command); other messages are ignored.
    addressed: bool = True
    #: Written inside an existing thread (``cancel`` then means that thread's run).
    in_thread: bool = False
    #: The platform's id of this delivery when it differs from ``dedupe_key`` (Feishu's
    #: ``event_id``); remembered too, so that a redelivery is dropped before any work.
    delivery_key: str | None = None
    #: The request's language when the platform knows it; else detected from ``text``.
    language: Language | None = None
    #: What the platform needs later to deliver a run of this request (kept with the run).
    context: dict[str, str] | None = None
    #: Files attached to the message, as the platform described them (the run reads them).
    attachments: tuple[Attachment, ...] = ()
    #: Where files sent on their own before this message wait for it (a scope the platform
    #: chooses: DingTalk's conversation and sender, Feishu's thread), and for how many
    #: seconds: a research request takes them (:meth:`ChatCommands.receive_files`).
    earlier_files: str | None = None
    earlier_window: float = 0.0
    #: Files the platform already knows cannot be read (deleted, a link to a file kept
    #: elsewhere, ...): (name, reason code, see ``Replies.files_left_out``); named in the
    #: same "Not read" reply as the files the screen leaves out.
    unreadable: tuple[tuple[str, str], ...] = ()
    #: The sender's name as the platform gives it with the message (Teams' ``from.name``;
    #: untrusted), shown instead of their id where people read who said something (the
    #: guidance a report followed); None where the platform gives only an id.
    user_name: str | None = None
    #: What the message quotes (replies to), where a quote is how a user points at a research
    #: (DingTalk, whose robots have no threads): ``"research"`` (``thread`` is the quoted
    #: research's, ``in_thread``), ``"other"`` (a message the platform ties to no research
    #: here). A ``stop`` or ``cancel`` in it acts on the quoted research alone, never on the
    #: sender's newest. None: it quotes nothing (or the platform does not say).
    quoted: Literal["research", "other"] | None = None

    def __post_init__(self) -> None:
        check_message(self)

    @property
    def lang(self) -> Language:
        return self.language or request_language(request_words(self.text))

    @property
    def requested_by(self) -> str:
        return f"{self.platform}:{self.workspace}:{self.user}"

    @property
    def thread_key(self) -> ThreadKey:
        return ThreadKey(
            platform=self.platform,
            workspace=self.workspace,
            channel=self.channel,
            thread=self.thread,
        )

    @property
    def event_keys(self) -> tuple[str, ...]:
        return (self.dedupe_key,) + ((self.delivery_key,) if self.delivery_key else ())


@dataclass(frozen=True)
class Reply:
    text: str
    started: bool = False  # a run was accepted: its progress message speaks for itself
    #: Files of the request that the run does not read: (name, why), see
    #: ``core.documents.attachments``.
    left_out: tuple[tuple[str, str], ...] = ()
    #: Nothing is answered: a message that did not address the bot and is neither guidance
    #: for a running research nor a control word.
    dropped: bool = False
    #: The run a research request made or found (``started``), for an answer that carries
    #: its buttons (Slack's acknowledgement of a slash command).
    run_id: str | None = None


#: Posts a reply in the request's thread (the adapter's translation of "answer this").
Answer = Callable[[str], Awaitable[None]]
