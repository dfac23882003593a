"""Feishu/Lark deliveries in: the webhook's verification and decryption, and the translation
of an ``im.message.receive_v1`` event into the shared layer's :class:`ChatMessage` (pure).

Files: a ``file`` (or ``media``, a video) message carries ``{"file_key", "file_name"}`` and no
words, so it cannot mention the bot; a received ``post`` carries videos as ``media`` elements
(``file_key``, no name). Both become :class:`~core.models.Attachment` objects (``id`` the
``file_key``, ``message_id`` the message carrying it, for the message resource API). Shapes
after Feishu's "接收消息内容结构" (received message content: ``file``, ``media``, and the
``post`` tags text, a, at, img, media, emotion, code_block, hr). A message that is only files
goes to ``ChatCommands.receive_files`` under :func:`files_scope`, where the next request of
the same thread (of the same sender in a private chat) takes it.

Webhook requests are checked here before anything else looks at them (the SDK's own handler
answers every bad request with HTTP 500, which Feishu would retry): a URL challenge carries
the Verification Token; an event carries a valid ``X-Lark-Signature`` (plain SHA-256 of
timestamp + nonce + Encrypt Key + body) no older than :data:`MAX_SKEW` seconds, is encrypted
with the Encrypt Key (AES-256-CBC, decrypted with the SDK's cipher) and carries the token.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from lark_oapi.core.utils.decryptor import AESCipher

from bots.chat.controls import Press, control_of
from bots.chat.message import ChatMessage
from bots.http_gate import Rejected, parse_json
from core.models import Attachment

PLATFORM = "feishu"
MESSAGE_EVENT = "im.message.receive_v1"
#: A press on a card's button (new-style card callback, schema 2.0).
CARD_ACTION_EVENT = "card.action.trigger"
#: Signed requests older (or newer) than this are refused as replays (seconds).
MAX_SKEW = 3600
#: The key of a request's platform context (kept with its run) naming its chat's type,
#: ``p2p`` or ``group`` (a private chat needs no mention: ``bots.feishu.delivery``).
CHAT_TYPE = "chat_type"


@dataclass(frozen=True)
class Challenge:
    challenge: str


@dataclass(frozen=True)
class Event:
    payload: dict[str, Any]


def _json_object(data: bytes | str, what: str) -> dict[str, Any]:
    try:
        value = parse_json(data)
    except (ValueError, UnicodeDecodeError):
        raise Rejected(400, f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise Rejected(400, f"{what} is not a JSON object")
    return value


def _same(expected: str, given: object) -> bool:
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode())


def verify_signature(
    headers: dict[str, str], body: bytes, encrypt_key: str, *, now: float | None = None
) -> None:
    timestamp = headers.get("x-lark-request-timestamp", "")
    nonce = headers.get("x-lark-request-nonce", "")
    signature = headers.get("x-lark-signature", "")
    if not (timestamp and nonce and signature):
        raise Rejected(401, "the request is not signed")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise Rejected(401, "bad request timestamp")
    age = abs((time.time() if now is None else now) - int(timestamp))
    if age > MAX_SKEW:
        raise Rejected(401, "the request timestamp is too far from now")
    expected = hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()
    if not hmac.compare_digest(expected, signature.lower()):
        raise Rejected(401, "invalid signature")


#: An unsigned body can only be the URL check (Feishu does not sign it), which is a few
#: hundred bytes, encrypted or not: anything longer is refused before it is parsed.
MAX_CHALLENGE_BYTES = 4096


def open_delivery(
    body: bytes, headers: dict[str, str], *, verification_token: str, encrypt_key: str
) -> Challenge | Event:
    """A verified webhook delivery; raises :class:`Rejected` (4xx) for anything else.
    ``headers`` are lower-cased."""
    signed = "x-lark-signature" in headers
    if signed:
        verify_signature(headers, body, encrypt_key)
    elif len(body) > MAX_CHALLENGE_BYTES:
        raise Rejected(401, "the request is not signed")
    outer = _json_object(body, "the body")
    if "encrypt" in outer:
        try:
            plain = AESCipher(encrypt_key).decrypt_str(str(outer["encrypt"]))
        except (ValueError, binascii.Error, UnicodeDecodeError, TypeError):
            raise Rejected(400, "the body cannot be decrypted with the Encrypt Key") from None
        payload = _json_object(plain, "the decrypted body")
    else:
        payload = outer
    if payload.get("type") == "url_verification":
        if not _same(verification_token, payload.get("token")):
            raise Rejected(403, "invalid verification token")
        return Challenge(str(payload.get("challenge") or ""))
    if not signed:
        raise Rejected(401, "the request is not signed")
    if "encrypt" not in outer:
        raise Rejected(400, "events must be encrypted with the Encrypt Key")
    header = payload.get("header")
    token = header.get("token") if isinstance(header, dict) else payload.get("token")
    if not _same(verification_token, token):
        raise Rejected(403, "invalid verification token")
    return Event(payload)


# -- translation -------------------------------------------------------------------------


@dataclass(frozen=True)
class FeishuRequest:
    """A message for the bot: the neutral message, and the message to answer."""

    message: ChatMessage
    reply_to: str
    readable: bool = True  # text, rich text or files; anything else gets a short help answer
    #: No request in it, only files (a file message; a post of files without words or not
    #: addressed to the bot): kept for the next request (``ChatCommands.receive_files``).
    files_only: bool = False


#: The tags of a ``post`` whose ``text`` is words of the message.
POST_TEXT_TAGS = frozenset({"text", "a", "code_block", "md"})
#: The mention of everyone in a chat (a word to drop: it is nobody's request).
AT_ALL = "@_all"
#: Message types that are one downloadable file with a name: a file, a video. (An image, an
#: audio clip, a sticker or a folder is no file the research reads: a short help answer.)
FILE_MESSAGES = frozenset({"file", "media"})
#: The ``post`` tags that carry a file: ``media`` (a video, documented) and ``file`` (not in
#: the documented tags of a received post; read the same way should Feishu send one).
POST_FILE_TAGS = frozenset({"media", "file"})


def _post_body(content: dict[str, Any]) -> tuple[str, list[Any]]:
    """A post's title and paragraphs, received (``{"title", "content"}``) or localised
    (``{"zh_cn": {"title", "content"}, ...}``)."""
    if "content" not in content:
        body = next((v for v in content.values() if isinstance(v, dict)), {})
        content = body
    paragraphs = content.get("content")
    return str(content.get("title") or ""), paragraphs if isinstance(paragraphs, list) else []


def _post_at(element: dict[str, Any]) -> str:
    """An ``at`` element as the text of a ``text`` message has it: its mention key
    (``@_user_1``, matched against ``mentions`` like a text message's), or the name."""
    user_id = str(element.get("user_id") or "")
    if user_id.startswith("@_"):
        return f" {user_id} "
    name = str(element.get("user_name") or user_id)
    return f" @{name} " if name else " "


@dataclass(frozen=True)
class _Content:
    title: str
    text: str  # with mention keys (``@_user_1``) where the mentions stand
    files: tuple[tuple[str, str], ...] = ()  # (file_key, file_name)


def _file(element: dict[str, Any], default_name: str) -> tuple[str, str] | None:
    key = str(element.get("file_key") or "")
    if not key:
        return None
    return key, str(element.get("file_name") or "").strip() or default_name


def _read(message: dict[str, Any]) -> _Content | None:
    """The title (of a post), the plain text and the files of a ``text``, ``post``, ``file``
    or ``media`` message, with mention keys (``@_user_1``) where the mentions stand, for
    :func:`translate` to resolve; None for other kinds."""
    raw = message.get("content") or "{}"
    if not isinstance(raw, str):  # Feishu sends the content as a JSON string
        return None
    try:
        content = parse_json(raw)
    except ValueError:
        return None
    if not isinstance(content, dict):
        return None
    kind = message.get("message_type")
    if kind == "text":
        return _Content("", str(content.get("text") or ""))
    if kind in FILE_MESSAGES:
        found = _file(content, "video" if kind == "media" else "file")
        return _Content("", "", (found,)) if found else None
    if kind == "post":
        title, paragraphs = _post_body(content)
        lines = []
        files: list[tuple[str, str]] = []
        for paragraph in paragraphs:
            words = []
            for element in paragraph if isinstance(paragraph, list) else []:
                if not isinstance(element, dict):
                    continue
                tag = element.get("tag")
                if tag in POST_TEXT_TAGS:
                    words.append(str(element.get("text") or ""))
                elif tag == "at":
                    words.append(_post_at(element))
                elif tag in POST_FILE_TAGS:
                    found = _file(element, "video" if tag == "media" else "file")
                    if found:
                        files.append(found)
            lines.append("".join(words))
        text = "\n".join(line for line in lines if line.strip())
        return _Content(title, text, tuple(files))
    return None


def files_scope(tenant: str, chat: str, chat_type: object, user: str, root: str) -> str:
    """Where files sent on their own wait for the next request: in a private chat, the chat
    and its sender (every message there is to the bot); in a group, the thread the file was
    posted in (``root``: the thread's first message, the file's own id when it starts one),
    so a request in that thread, or replying to the file, takes it, and one in another
    thread does not."""
    if chat_type == "p2p":
        return f"feishu:{tenant}:{chat}:p2p:{user}"
    return f"feishu:{tenant}:{chat}:thread:{root}"


def _with_title(title: str, text: str) -> str:
    """A post's title is the start of its text (of the topic, after ``/research``)."""
    title = " ".join(title.split())
    if not title:
        return text
    command = re.match(r"/research\b", text, re.IGNORECASE)
    if command:
        return f"{text[: command.end()]} {title} {text[command.end() :]}".strip()
    return f"{title} {text}".strip()


def _obj(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _open_id(mention: dict[str, Any]) -> str:
    return str(_obj(mention, "id").get("open_id") or "")


def translate(
    payload: dict[str, Any], bot_open_id: str | None, *, file_window: float = 0.0
) -> FeishuRequest | None:
    """The request in an ``im.message.receive_v1`` event, or None when it is not for the bot
    (another event, a message from a bot or the bot itself). A group message without the
    bot's mention (delivered with ``im:message.group_msg``) is returned not ``addressed``:
    its files are kept unanswered, and a reply in a thread (``in_thread``: its ``root_id``
    is another message) may steer that thread's research (the chat layer decides). Its
    ``context`` names the chat's type (:data:`CHAT_TYPE`), kept with a run it starts.
    ``file_window``: seconds that files sent on their own wait for the next request (0:
    they are not kept)."""
    header, event = _obj(payload, "header"), _obj(payload, "event")
    if header.get("event_type") != MESSAGE_EVENT:
        return None
    sender, message = _obj(event, "sender"), _obj(event, "message")
    sender_ids = _obj(sender, "sender_id")
    user = str(sender_ids.get("open_id") or "")
    if sender.get("sender_type") != "user" or (bot_open_id and user == bot_open_id):
        return None
    mentions = [m for m in message.get("mentions") or [] if isinstance(m, dict)]

    def is_bot(mention: dict[str, Any]) -> bool:
        if mention.get("key") == AT_ALL:
            return False
        if bot_open_id:
            return _open_id(mention) == bot_open_id
        # Bot info not known yet: a bot's mention has no user_id (people have one).
        return not _obj(mention, "id").get("user_id")

    chat_type = message.get("chat_type")
    addressed = chat_type == "p2p" or any(is_bot(m) for m in mentions)
    read = _read(message)
    text: str | None = None
    if read is not None:
        text = read.text
        # Longest keys first: "@_user_1" must not eat the start of "@_user_12".
        for mention in sorted(mentions, key=lambda m: -len(str(m.get("key") or ""))):
            key = str(mention.get("key") or "")
            if key and key != AT_ALL:
                text = text.replace(
                    key, " " if is_bot(mention) else f"@{mention.get('name') or ''}"
                )
        text = _with_title(read.title, " ".join(w for w in text.split() if w != AT_ALL))
    message_id = str(message.get("message_id") or "")
    root = str(message.get("root_id") or "")
    tenant = str(header.get("tenant_key") or sender.get("tenant_key") or "")
    chat_id = str(message.get("chat_id") or "")
    event_id = str(header.get("event_id") or "")
    attachments = tuple(
        Attachment(id=key, name=name, attached_by=user, message_id=message_id)
        for key, name in (read.files if read is not None else ())
    )
    scope = (
        files_scope(tenant, chat_id, chat_type, user, root or message_id)
        if file_window > 0
        else None
    )
    files_only = bool(attachments) and not (addressed and (text or "").strip())
    chat = ChatMessage(
        platform=PLATFORM,
        workspace=tenant,
        channel=chat_id,
        thread=root or message_id,
        user=user,
        # A file sent on its own is answered in the language of its name.
        text=" ".join(a.name for a in attachments) if files_only else text or "",
        dedupe_key=f"feishu:msg:{tenant}:{message_id}",
        addressed=addressed,
        in_thread=bool(root and root != message_id),
        delivery_key=f"feishu:event:{event_id}" if event_id else None,
        context={CHAT_TYPE: "p2p" if chat_type == "p2p" else "group"},
        attachments=attachments,
        earlier_files=scope,
        earlier_window=file_window if scope is not None else 0.0,
    )
    return FeishuRequest(
        chat, reply_to=message_id, readable=text is not None, files_only=files_only
    )


def event_type(payload: dict[str, Any]) -> str:
    """A schema 2.0 delivery's ``header.event_type`` ("" for anything else)."""
    return str(_obj(payload, "header").get("event_type") or "")


def translate_press(payload: dict[str, Any]) -> Press | None:
    """The press in a ``card.action.trigger`` callback (who pressed which of our buttons, on
    which run, in which chat), or None when it is not a press on one of ours. The button's
    ``value`` is ``bots.feishu.render.button_value``; whether the press counts is decided
    from the stored run."""
    if event_type(payload) != CARD_ACTION_EVENT:
        return None
    header, event = _obj(payload, "header"), _obj(payload, "event")
    value = _obj(_obj(event, "action"), "value")
    control = control_of(value.get("action"))
    if control is None:
        return None
    operator, context = _obj(event, "operator"), _obj(event, "context")
    return Press(
        platform=PLATFORM,
        workspace=str(header.get("tenant_key") or operator.get("tenant_key") or ""),
        channel=str(context.get("open_chat_id") or ""),
        user=str(operator.get("open_id") or ""),
        run_id=str(value.get("run") or ""),
        control=control,
        language="zh" if value.get("lang") == "zh" else "en",
    )


def event_to_dict(event: object) -> dict[str, Any]:
    """An SDK event object (long connection) as the JSON dict Feishu sent."""
    import lark_oapi as lark

    data = json.loads(lark.JSON.marshal(event))
    return data if isinstance(data, dict) else {}
