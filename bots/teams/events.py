"""Teams activities in: a ``message`` activity translated into the shared layer's
:class:`~bots.chat.message.ChatMessage`, an ``adaptiveCard/action`` invoke into a
:class:`~bots.chat.controls.Press`, and where the bot may post later (pure functions).

Shapes after Microsoft's "Channel and group chat conversations with a bot", "Conversation
basics", "Send and receive files" and "Universal Actions for Adaptive Cards".

Thread keys are ``teams:<tenant id>:<conversation>:<thread>``. ``<conversation>`` is the
channel's, group chat's or personal chat's id with ``%`` and ``:`` percent-encoded
(:func:`encode_conversation`: Teams' ids hold colons, ``19:...@thread.tacv2``, ``a:1...``),
or ``~`` and a digest of an id too long for the chat layer (a personal chat's:
:func:`channel_key`).
In a channel, ``<thread>`` is the id of the reply chain's first message (the ``messageid``
of the activity's conversation id); in chats, which have no reply chains, each request is a
thread of its own, named by its activity id.

The bot's mention is removed from the text wherever it stands; other people's mentions
become their names and address nobody. ``research <topic>``, as the app's command menu
writes it, is the shared grammar's ``/research <topic>``. Messages from bots (ids ``28:``)
are not requests.
A file a person sends in a personal chat arrives as a ``file.download.info`` attachment
(read from its pre-authenticated ``downloadUrl``); a file in a channel or group chat is a
``reference`` to SharePoint, which the bot cannot open with its own credentials: it is named
as not read.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from typing import Any

from bots.chat.controls import Press, control_of
from bots.chat.ids import MAX_CONTEXT_CHARS, check_ids
from bots.chat.message import ChatMessage
from core.chat.commands import MAX_ID_CHARS
from core.models import Attachment
from core.words.wording import Language

PLATFORM = "teams"
#: The invoke a press on an ``Action.Execute`` button sends.
ACTION_INVOKE = "adaptiveCard/action"
FILE_DOWNLOAD_INFO = "application/vnd.microsoft.teams.file.download.info"
#: How a channel's conversation id names its reply chain.
_CHAIN = ";messageid="
#: The app's command menu (``deploy/teams/manifest.json``) puts a command's title in front of
#: the text: ``research <topic>`` is the shared grammar's ``/research <topic>`` (``help``,
#: ``stop`` and ``usage`` are words the grammar knows already).
_MENU_RESEARCH = re.compile(r"^research(?=\s|$)", re.IGNORECASE)
_TAG = re.compile(r"<[^>]{0,200}>")
_AT = re.compile(r"<at>(.{0,200}?)</at>", re.IGNORECASE | re.DOTALL)


def encode_conversation(conversation: str) -> str:
    """``conversation`` as a thread key's part: no ``:``, and no two ids alike."""
    return conversation.replace("%", "%25").replace(":", "%3A")


def channel_key(conversation: str) -> str:
    """The conversation's part of thread keys: :func:`encode_conversation`, or, when that is
    longer than the chat layer's ids may be (a personal chat's id runs to some 130
    characters, ``a:1...``), ``~`` and a digest of the id. Where to post is never read
    back from it: the run's context or the stored reference has the conversation itself."""
    encoded = encode_conversation(conversation)
    if len(encoded) <= MAX_ID_CHARS:
        return encoded
    return "~" + hashlib.sha256(conversation.encode("utf-8")).hexdigest()[:40]


@dataclass(frozen=True)
class Reference:
    """Where the bot posts in a conversation: the service URL Teams named for it, the
    conversation (a channel's, a chat's), its tenant, and a channel's team."""

    service_url: str
    conversation: str
    tenant: str
    #: ``channel``, ``groupChat`` or ``personal``.
    kind: str
    #: The team of a channel ("" elsewhere, or when Teams did not say).
    team: str = ""

    def __post_init__(self) -> None:
        """Stored as the conversation's reference and with each run: checked like any id
        (``bots.chat.ids``), before either."""
        check_ids(MAX_CONTEXT_CHARS, service_url=self.service_url)
        check_ids(
            conversation=self.conversation, tenant=self.tenant, kind=self.kind, team=self.team
        )

    def context(self) -> dict[str, str]:
        """What a run keeps to post in its thread (``ChatMessage.context``)."""
        return {
            "service_url": self.service_url,
            "conversation": self.conversation,
            "tenant": self.tenant,
            "kind": self.kind,
            "team": self.team,
        }

    @classmethod
    def of_context(cls, context: dict[str, str] | None) -> Reference | None:
        if not context or not context.get("service_url") or not context.get("conversation"):
            return None
        return cls(
            context["service_url"],
            context["conversation"],
            context.get("tenant", ""),
            context.get("kind", "channel"),
            context.get("team", ""),
        )


@dataclass(frozen=True)
class TeamsRequest:
    """A message for the bot: the neutral message, and where to answer it."""

    message: ChatMessage
    reference: Reference
    #: The activity to answer (a reply in the request's chain).
    activity_id: str

    @property
    def files_only(self) -> bool:
        """Files and no words: kept for the sender's next request (a personal chat)."""
        message = self.message
        return not message.text and bool(message.attachments or message.unreadable)

    @property
    def answer_to(self) -> str:
        """The conversation an answer goes to: the request's reply chain in a channel."""
        reference = self.reference
        if reference.kind == "channel":
            return f"{reference.conversation};messageid={self.message.thread}"
        return reference.conversation


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def tenant_of(activity: dict[str, Any]) -> str:
    conversation = _dict(activity.get("conversation"))
    channel_data = _dict(activity.get("channelData"))
    return _str(conversation.get("tenantId")) or _str(_dict(channel_data.get("tenant")).get("id"))


def reference_of(activity: dict[str, Any]) -> Reference | None:
    """Where the bot may post in the activity's conversation (None: not a Teams activity the
    bot can answer: no service URL or conversation)."""
    service_url = _str(activity.get("serviceUrl"))
    conversation = _dict(activity.get("conversation"))
    full = _str(conversation.get("id"))
    if not service_url or not full:
        return None
    channel_data = _dict(activity.get("channelData"))
    channel = _dict(channel_data.get("channel"))
    kind = _str(conversation.get("conversationType"))
    if not kind:  # older activities name no type: a chain, a channel or a team says channel
        in_team = _CHAIN in full or channel.get("id") or channel_data.get("team")
        kind = "channel" if in_team else "groupChat" if conversation.get("isGroup") else "personal"
    base = full.split(_CHAIN, 1)[0]
    team = ""
    if kind == "channel":  # the channel itself (the chain is the thread)
        base = _str(channel.get("id")) or base
        team = _str(_dict(channel_data.get("team")).get("id"))
    return Reference(service_url, base, tenant_of(activity), kind, team)


def _words(activity: dict[str, Any], bot_id: str) -> tuple[str, bool]:
    """The activity's words without the bot's mention (other mentions as names), and whether
    the bot was mentioned."""
    text = _str(activity.get("text"))
    mentioned = False
    names: set[str] = set()  # how the bot is named in its <at> tags
    for entity in _list(activity.get("entities")):
        entity = _dict(entity)
        if entity.get("type") != "mention":
            continue
        who = _dict(entity.get("mentioned"))
        if _str(who.get("id")) == bot_id and bot_id:
            mentioned = True
            said = _str(entity.get("text"))
            if said:
                text = text.replace(said, " ")
                tag = _AT.fullmatch(said.strip())
                names.add(_name(tag.group(1) if tag else said))
            names.add(_name(_str(who.get("name"))))
    names.discard("")

    def shown(mention: re.Match[str]) -> str:
        # The bot's own tag where the entity's text differs from the message's (Microsoft's
        # samples write "<at>@Name</at>" in one and "<at>Name</at>" in the other): removed;
        # another person's mention: their name.
        return " " if _name(mention.group(1)) in names else mention.group(1)

    text = _AT.sub(shown, text)
    text = html.unescape(_TAG.sub(" ", text)).replace("\u00a0", " ")
    text = _MENU_RESEARCH.sub("/research", " ".join(text.split()), count=1)
    return text, mentioned


def _name(said: str) -> str:
    return " ".join(said.replace("@", " ").split()).casefold()


def _files(
    activity: dict[str, Any], who: str
) -> tuple[tuple[Attachment, ...], tuple[tuple[str, str], ...]]:
    files: list[Attachment] = []
    unreadable: list[tuple[str, str]] = []
    for item in _list(activity.get("attachments")):
        item = _dict(item)
        kind = _str(item.get("contentType"))
        name = _str(item.get("name")).strip() or "file"
        if kind == FILE_DOWNLOAD_INFO:
            content = _dict(item.get("content"))
            url = _str(content.get("downloadUrl"))
            if not url:
                unreadable.append((name, "unavailable"))
                continue
            files.append(
                Attachment(
                    id=_str(content.get("uniqueId")) or url,
                    name=name,
                    url=_str(item.get("contentUrl")) or None,
                    attached_by=who,
                    extra={"download_url": url},
                )
            )
        elif kind == "reference":  # a file kept in SharePoint or OneDrive
            unreadable.append((name, "external"))
        elif kind.startswith("image/"):  # a picture pasted in the message
            unreadable.append((_str(item.get("name")).strip() or "image", "type"))
    return tuple(files), tuple(unreadable)


def files_scope(tenant: str, key: str, user: str) -> str:
    """Where files sent on their own in a personal chat wait for the sender's next request
    (``key``: the chat's :func:`channel_key`)."""
    return f"{PLATFORM}:{tenant}:{key}:{user}"


def translate(
    activity: dict[str, Any], bot_id: str, *, file_window: float = 0.0
) -> TeamsRequest | None:
    """A ``message`` activity as a request (None: not a message for the bot to consider:
    another type, a bot's message, no conversation)."""
    if activity.get("type") != "message":
        return None
    sender = _dict(activity.get("from"))
    sender_id = _str(sender.get("id"))
    if not sender_id or sender_id.startswith("28:") or sender_id == bot_id:
        return None
    reference = reference_of(activity)
    activity_id = _str(activity.get("id"))
    if reference is None or not activity_id:
        return None
    tenant = reference.tenant or "tenant"
    full = _str(_dict(activity.get("conversation")).get("id"))
    text, mentioned = _words(activity, bot_id or _str(_dict(activity.get("recipient")).get("id")))
    root = full.split(_CHAIN, 1)[1] if _CHAIN in full else ""
    if reference.kind == "channel" and root:
        thread, in_thread = root, root != activity_id
    else:
        thread, in_thread = activity_id, False
    user = _str(sender.get("aadObjectId")) or sender_id
    who = _str(sender.get("name")) or user
    files, unreadable = _files(activity, who)
    personal = reference.kind == "personal"
    addressed = personal or mentioned
    key = channel_key(reference.conversation)
    scope = files_scope(tenant, key, user)
    chat = ChatMessage(
        platform=PLATFORM,
        workspace=tenant,
        channel=key,
        thread=thread,
        user=user,
        text=text,
        dedupe_key=f"teams:msg:{tenant}:{key}:{activity_id}",
        addressed=addressed,
        in_thread=in_thread,
        context=reference.context(),
        attachments=files,
        unreadable=unreadable,
        earlier_files=scope if personal and file_window > 0 else None,
        earlier_window=file_window if personal else 0.0,
        user_name=_str(sender.get("name")) or None,
    )
    return TeamsRequest(chat, reference, activity_id)


def translate_press(activity: dict[str, Any]) -> Press | None:
    """An ``adaptiveCard/action`` invoke on one of our buttons (None: not ours)."""
    if activity.get("type") != "invoke" or activity.get("name") != ACTION_INVOKE:
        return None
    action = _dict(_dict(activity.get("value")).get("action"))
    control = control_of(action.get("verb"))
    data = _dict(action.get("data"))
    run_id = _str(data.get("run"))
    reference = reference_of(activity)
    sender = _dict(activity.get("from"))
    user = _str(sender.get("aadObjectId")) or _str(sender.get("id"))
    if control is None or not run_id or reference is None or not user:
        return None
    language: Language = "zh" if data.get("lang") == "zh" else "en"
    return Press(
        platform=PLATFORM,
        workspace=reference.tenant or "tenant",
        channel=channel_key(reference.conversation),
        user=user,
        run_id=run_id,
        control=control,
        language=language,
    )
