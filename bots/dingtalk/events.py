"""DingTalk deliveries in: the HTTP callback's signature check, and the translation of a robot
message (the SDK's ``ChatbotMessage``) into the shared layer's :class:`ChatMessage` (pure).

An HTTP callback carries ``timestamp`` (ms) and ``sign`` = base64(HMAC-SHA256(app secret,
timestamp + "\\n" + app secret)); a wrong sign or a timestamp more than an hour off is refused
before the body is parsed.

DingTalk robots have no threads. A request's thread is the request itself
(``dingtalk:<corpId>:<conversationId>:<msgId>``); the adapter decides follow-ups (see
``bots.dingtalk.app``). What a run needs later to reach the conversation (its type, the
requester, the message's session webhook and when it expires) travels with the run as its
platform context.

Files. A ``file`` message carries ``content: {downloadCode, fileName, fileId, spaceId}`` (a
real stream delivery: dingtalk-stream-sdk's Rust test resource ``cb_msg_file.json``); the
``downloadCode`` is exchanged for the bytes when the run reads it (``bots.dingtalk.files``).
DingTalk delivers files only in a one-to-one chat with the robot (its file-download API page:
a group @-message carries no file), and a message has one file. So a file arrives on its own
and waits, under the conversation and its sender (:func:`files_scope`), for that sender's next
research request there; or a request quotes the file message (``repliedMsg`` with
``msgType: "file"`` and the file's ``content``, as third-party integrations receive it),
and that file is attached to it directly.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass, replace
from typing import Any

import httpx

from bots.chat.controls import Press, control_of
from bots.chat.ids import check_ids
from bots.chat.message import ChatMessage
from bots.dingtalk.render import run_of_track
from bots.http_gate import Rejected, parse_json
from core.models import UNKNOWN_ATTACHER, Attachment
from core.words.wording import Language, request_language

PLATFORM = "dingtalk"
#: The stream topic of card callbacks (a press on a card's button).
CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"
#: Signed callbacks older (or newer) than this are refused as replays (milliseconds).
MAX_SKEW_MS = 3_600_000


def expected_sign(timestamp: str, secret: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def verify_sign(headers: dict[str, str], secret: str, *, now_ms: float | None = None) -> None:
    """``headers`` lower-cased; raises :class:`Rejected` (401) unless signed and fresh."""
    timestamp, sign = headers.get("timestamp", ""), headers.get("sign", "")
    if not (timestamp and sign):
        raise Rejected(401, "the request is not signed")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 16):
        raise Rejected(401, "bad request timestamp")
    now = time.time() * 1000 if now_ms is None else now_ms
    if abs(now - int(timestamp)) > MAX_SKEW_MS:
        raise Rejected(401, "the request timestamp is too far from now")
    if not hmac.compare_digest(expected_sign(timestamp, secret).encode(), sign.encode()):
        raise Rejected(401, "invalid signature")


def open_callback(body: bytes, headers: dict[str, str], secret: str) -> dict[str, Any]:
    """A verified HTTP callback's robot message; :class:`Rejected` (4xx) for anything else."""
    verify_sign(headers, secret)
    try:
        payload = parse_json(body)
    except (ValueError, UnicodeDecodeError):
        raise Rejected(400, "the body is not JSON") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("msgId"), str):
        raise Rejected(400, "the body is not a robot message")
    return payload


# -- translation -------------------------------------------------------------------------


def webhook_allowed(url: str, api_url: str) -> bool:
    """A session webhook Fathom will post to: DingTalk's own (``https://*.dingtalk.com``) or
    one at the configured API's origin (a test server). Anything else in a message is ignored
    and the robot OpenAPI is used instead."""
    try:
        target, api = httpx.URL(url), httpx.URL(api_url)
    except (httpx.InvalidURL, TypeError):
        return False
    if target.scheme == "https" and (
        target.host == "dingtalk.com" or target.host.endswith(".dingtalk.com")
    ):
        return True
    return (target.scheme, target.host, target.port) == (api.scheme, api.host, api.port)


@dataclass(frozen=True)
class DingTalkRequest:
    """A robot message for the bot: the neutral message and how to answer it."""

    message: ChatMessage
    readable: bool  # text, rich text or a file; anything else gets a short help answer
    webhook: str | None  # the message's session webhook (answers go there)
    robot_code: str = ""
    quote: Quote | None = None  # the message it quotes (a quote-reply), if any

    @property
    def files_only(self) -> bool:
        """A file sent on its own (a ``file`` message): kept for the sender's next request."""
        return bool(self.message.attachments) and not self.message.text

    @property
    def replied_to(self) -> str | None:
        """The msgId of the message it quotes, if DingTalk gave one."""
        return self.quote.msg_id if self.quote is not None else None

    def without_webhook(self) -> DingTalkRequest:
        context = dict(self.message.context or {}, webhook="", webhook_expires_ms="0")
        return replace(self, webhook=None, message=replace(self.message, context=context))

    def in_thread(self, thread: str) -> DingTalkRequest:
        """The same request, continuing the thread that started with message ``thread``."""
        return replace(self, message=replace(self.message, thread=thread, in_thread=True))

    def quoting(self, thread: str | None) -> DingTalkRequest:
        """The same request pointed at the research its quote is tied to (the thread that
        started with message ``thread``), or, tied to none (None), at no research: a control
        word in it then acts on nothing (``ChatMessage.quoted``)."""
        if thread is None:
            return replace(self, message=replace(self.message, quoted="other"))
        message = replace(self.message, thread=thread, in_thread=True, quoted="research")
        return replace(self, message=message)


@dataclass(frozen=True)
class Quote:
    """The message a quote-reply quotes: its id, who sent it, its text (as far as DingTalk
    shows it), and whether it is one of this robot's own messages."""

    msg_id: str | None
    text: str
    from_robot: bool
    #: The quoted message's file (a quote of a ``file`` message), attached to the request.
    file: Attachment | None = None


def _strings(value: Any) -> list[str]:
    """The texts in a quoted message's ``content``: a string, ``{"text": ...}``, or rich text
    (``{"richText": [{"text": ...} | {"content": ...}, ...]}``)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        texts = [v for k, v in value.items() if k in ("text", "content", "title")]
        rich = value.get("richText")
        items = rich if isinstance(rich, list) else []
        return [t for v in [*texts, *items] for t in _strings(v)]
    return []


def quote_of(data: dict[str, Any]) -> Quote | None:
    """The quoted message of a robot message, in every shape it arrives: ``repliedMsg`` at the
    top level (with ``isReplyMsg``), or nested under ``text`` (``text.isReplyMsg`` with
    ``text.repliedMsg``) or under a rich text's ``content``; the quoted id is its ``msgId``
    (or ``originalMsgId``) wherever the quote stands."""
    places = [data]
    places += [data[k] for k in ("text", "content") if isinstance(data.get(k), dict)]
    for place in places:
        replied = place.get("repliedMsg")
        if isinstance(replied, str):  # some deliveries carry it as a JSON string
            try:
                replied = parse_json(replied)
            except ValueError:
                replied = None
        if not isinstance(replied, dict):
            continue
        msg_id = replied.get("msgId") or replied.get("originalMsgId") or place.get("originalMsgId")
        sender = str(replied.get("senderId") or replied.get("senderStaffId") or "")
        robots = {str(data.get("chatbotUserId") or ""), str(data.get("robotCode") or "")} - {""}
        text = " ".join(" ".join(_strings(replied.get("content"))).split())[:2000]
        file = None
        if replied.get("msgType") == "file":
            who = replied.get("senderNick") or replied.get("senderStaffId") or sender
            attacher = str(replied.get("senderStaffId") or sender) or UNKNOWN_ATTACHER
            file = file_of(replied.get("content"), str(who or ""), attacher)
        return Quote(
            msg_id=str(msg_id) if isinstance(msg_id, str | int) and msg_id else None,
            text=text,
            from_robot=bool(sender) and sender in robots,
            file=file,
        )
    return None


def file_of(content: Any, attached_by: str, attacher_id: str = "") -> Attachment | None:
    """The file of a ``file`` message's ``content`` (``{"downloadCode", "fileName", ...}``),
    or None when it names none. Its ``downloadCode`` is the id the download exchanges; DingTalk
    gives the robot no link a reader of the report could open (``url`` stays None)."""
    if not isinstance(content, dict):
        return None
    code, name = content.get("downloadCode"), content.get("fileName")
    if not isinstance(code, str) or not code.strip():
        return None
    name = " ".join(str(name).split())[:200] if isinstance(name, str) else ""
    extra = {k: str(content[k])[:100] for k in ("fileId", "spaceId") if content.get(k)}
    return Attachment(
        id=code.strip(),
        name=name or "file",
        attached_by=attached_by[:100],
        attacher_id=attacher_id[:255],
        extra=extra,
    )


def files_scope(corp: str, conversation: str, user: str) -> str:
    """Where files sent on their own wait: the conversation and the sender (DingTalk has no
    threads; another user's request there does not take them)."""
    return f"{PLATFORM}:{corp}:{conversation}:{user}"


def _text(message: Any) -> str | None:
    """The text of a ``text`` or ``richText`` message; None for anything else."""
    kind = getattr(message, "message_type", None)
    if kind == "text" and message.text is not None:
        return str(message.text.content or "")
    if kind == "richText" and message.rich_text_content is not None:
        parts = message.rich_text_content.rich_text_list
        if not isinstance(parts, list):
            return None
        return " ".join(
            str(part["text"])
            for part in parts
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return None


def _without_robot_mention(text: str, message: Any, group: bool) -> str:
    """A text message's content arrives without the robot's @-mention; rich text may keep it
    as words ("@Fathom topic": not confirmed by DingTalk's docs, which show no such sample).
    In a group message addressed to the robot, a leading "@word" is taken to be it and
    dropped; a rich text that starts with another person's mention loses that word only."""
    robot = str(message.chatbot_user_id or "")
    mentioned = {str(getattr(u, "dingtalk_id", "") or "") for u in message.at_users or []}
    words = text.split()
    addressed = bool(message.is_in_at_list) or robot in mentioned
    if group and addressed and words and words[0].startswith("@"):
        return " ".join(words[1:])
    return text


def translate(
    data: dict[str, Any], *, delivery_id: str | None = None, files_window: float = 0.0
) -> DingTalkRequest | None:
    """The request in a robot message (the stream's ``data`` or the HTTP callback's body), or
    None when it is not for the bot (a group message without its @-mention, the bot itself).
    ``files_window``: how long a file sent on its own waits for the sender's next request
    (``FATHOM_DINGTALK_FOLLOWUP_WINDOW``; 0: files are read only when a request quotes them)."""
    from dingtalk_stream import ChatbotMessage

    try:
        message = ChatbotMessage.from_dict(data)
        text = _text(message)
        if text is not None and message.message_type == "richText":
            text = _without_robot_mention(text, message, str(message.conversation_type) == "2")
    except Exception:  # a shape the SDK cannot read: not a robot message
        return None
    user = str(message.sender_staff_id or message.sender_id or "")
    if not user or not message.message_id:
        return None
    if message.chatbot_user_id and message.sender_id == message.chatbot_user_id:
        return None
    group = str(message.conversation_type) == "2"
    corp = str(message.chatbot_corp_id or message.sender_corp_id or "")
    conversation = str(message.conversation_id or "")
    msg_id = str(message.message_id or "")
    webhook = str(message.session_webhook or "") or None
    nick = str(message.sender_nick or "")[:100]
    attachments: tuple[Attachment, ...] = ()
    quote = quote_of(data)
    if quote is not None:  # looked up (the thread it continues) before anything is stored
        check_ids(quoted_message=quote.msg_id)
    language: Language | None = None
    if message.message_type == "file":
        file = file_of(data.get("content"), nick or user, user)
        if file is not None:
            attachments, text = (file,), ""
            language = "zh" if request_language(file.name) == "zh" else None
    elif quote is not None and quote.file is not None:
        attachments = (quote.file,)
    context = {
        "conversation_type": "group" if group else "single",
        "conversation_id": conversation,
        "staff_id": str(message.sender_staff_id or ""),
        "nick": nick,
        "webhook": webhook or "",
        "webhook_expires_ms": str(message.session_webhook_expired_time or 0),
    }
    chat = ChatMessage(
        platform=PLATFORM,
        workspace=corp,
        channel=conversation,
        thread=msg_id,
        user=user,
        text=" ".join((text or "").split()),
        dedupe_key=f"dingtalk:msg:{corp}:{msg_id}",
        addressed=not group or bool(message.is_in_at_list),
        delivery_key=f"dingtalk:stream:{delivery_id}" if delivery_id else None,
        language=language,
        context=context,
        attachments=attachments,
        earlier_files=files_scope(corp, conversation, user) if files_window > 0 else None,
        earlier_window=files_window,
    )
    return DingTalkRequest(
        chat,
        readable=text is not None,
        webhook=webhook,
        robot_code=str(message.robot_code or ""),
        quote=quote,
    )


def translate_card_press(data: dict[str, Any]) -> Press | None:
    """The press in a card callback (the stream's ``/v1.0/card/instances/callback``): which
    of our buttons (``content.cardPrivateData.actionIds``), on whose card (``outTrackId``,
    which names the run), by whom (``userId``) in which organisation (``corpId``); None when
    it is not a press on one of ours. The callback names no conversation: the card's
    ``outTrackId`` binds the press to its run (``Press.channel`` None)."""
    run_id = run_of_track(str(data.get("outTrackId") or ""))
    content: Any = data.get("content")
    if isinstance(content, str):
        try:
            content = parse_json(content)
        except ValueError:
            return None
    private = content.get("cardPrivateData") if isinstance(content, dict) else None
    actions = private.get("actionIds") if isinstance(private, dict) else None
    if run_id is None or not isinstance(actions, list) or not actions:
        return None
    control = control_of(actions[0])
    if control is None:
        return None
    return Press(
        platform=PLATFORM,
        workspace=str(data.get("corpId") or ""),
        channel=None,
        user=str(data.get("userId") or ""),
        run_id=run_id,
        control=control,
    )
