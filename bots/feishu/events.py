"""Feishu/Lark deliveries in: the webhook's verification and decryption, and the translation
of an ``im.message.receive_v1`` event into the shared layer's :class:`ChatMessage` (pure).

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

from bots.chat.inbound import ChatMessage
from bots.http_gate import Rejected

PLATFORM = "feishu"
MESSAGE_EVENT = "im.message.receive_v1"
#: Signed requests older (or newer) than this are refused as replays (seconds).
MAX_SKEW = 3600


@dataclass(frozen=True)
class Challenge:
    challenge: str


@dataclass(frozen=True)
class Event:
    payload: dict[str, Any]


def _json_object(data: bytes | str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
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


def open_delivery(
    body: bytes, headers: dict[str, str], *, verification_token: str, encrypt_key: str
) -> Challenge | Event:
    """A verified webhook delivery; raises :class:`Rejected` (4xx) for anything else.
    ``headers`` are lower-cased."""
    signed = "x-lark-signature" in headers
    if signed:
        verify_signature(headers, body, encrypt_key)
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
    readable: bool = True  # text or rich text; anything else gets a short help answer


#: The tags of a ``post`` whose ``text`` is words of the message.
POST_TEXT_TAGS = frozenset({"text", "a", "code_block", "md"})
#: The mention of everyone in a chat (a word to drop: it is nobody's request).
AT_ALL = "@_all"


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


def _text_of(message: dict[str, Any]) -> tuple[str, str] | None:
    """The title (of a post) and the plain text of a ``text`` or ``post`` message, with
    mention keys (``@_user_1``) where the mentions stand, for :func:`translate` to resolve;
    None for other kinds."""
    try:
        content = json.loads(message.get("content") or "{}")
    except ValueError:
        return None
    if not isinstance(content, dict):
        return None
    kind = message.get("message_type")
    if kind == "text":
        return "", str(content.get("text") or "")
    if kind == "post":
        title, paragraphs = _post_body(content)
        lines = []
        for paragraph in paragraphs:
            words = []
            for element in paragraph if isinstance(paragraph, list) else []:
                if not isinstance(element, dict):
                    continue
                if element.get("tag") in POST_TEXT_TAGS:
                    words.append(str(element.get("text") or ""))
                elif element.get("tag") == "at":
                    words.append(_post_at(element))
            lines.append("".join(words))
        return title, "\n".join(line for line in lines if line.strip())
    return None


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


def translate(payload: dict[str, Any], bot_open_id: str | None) -> FeishuRequest | None:
    """The request in an ``im.message.receive_v1`` event, or None when it is not for the bot
    (another event, a message from a bot or the bot itself, a group message without its
    mention)."""
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
    read = _text_of(message)
    text: str | None = None
    if read is not None:
        title, text = read
        # Longest keys first: "@_user_1" must not eat the start of "@_user_12".
        for mention in sorted(mentions, key=lambda m: -len(str(m.get("key") or ""))):
            key = str(mention.get("key") or "")
            if key and key != AT_ALL:
                text = text.replace(
                    key, " " if is_bot(mention) else f"@{mention.get('name') or ''}"
                )
        text = _with_title(title, " ".join(w for w in text.split() if w != AT_ALL))
    message_id = str(message.get("message_id") or "")
    root = str(message.get("root_id") or "")
    tenant = str(header.get("tenant_key") or sender.get("tenant_key") or "")
    event_id = str(header.get("event_id") or "")
    chat = ChatMessage(
        platform=PLATFORM,
        workspace=tenant,
        channel=str(message.get("chat_id") or ""),
        thread=root or message_id,
        user=user,
        text=text or "",
        dedupe_key=f"feishu:msg:{tenant}:{message_id}",
        addressed=addressed,
        in_thread=bool(root and root != message_id),
        delivery_key=f"feishu:event:{event_id}" if event_id else None,
    )
    return FeishuRequest(chat, reply_to=message_id, readable=text is not None)


def event_to_dict(event: object) -> dict[str, Any]:
    """An SDK event object (long connection) as the JSON dict Feishu sent."""
    import lark_oapi as lark

    data = json.loads(lark.JSON.marshal(event))
    return data if isinstance(data, dict) else {}
