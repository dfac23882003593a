"""Text from outside (search results, pages, model answers, topics) is data, never markup.

Chat platforms turn certain text into actions: Slack's ``<!channel>``, ``<!here>``,
``<!everyone>``, ``<@U…>``, ``<!subteam^…>`` and ``<url|label>`` links; Feishu's ``<at …>``
tags; DingTalk's ``@all``; and plain ``@channel`` / ``@here`` / ``@everyone`` where a client
resolves them. :func:`neutralise` turns all of them into inert text that reads the same (a
word joiner after the ``@`` keeps any parser from seeing a mention), so one function serves
every platform. Search results pass through it where they enter, and every renderer applies
it again to whatever it posts.

:func:`remove_urls` drops web addresses (``http(s)://…`` and ``www.…``) that a caller does not
allow, wherever they stand in the text.

:func:`shown_name` is a name someone gave (a file's, a person's) as a report, its notes and
the replies show it: inert, on one line, bounded.

Untrusted text reaches a model only between two fence lines (:func:`fences`) that carry a
random tag made for that one request, so a page cannot close the fence early.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable

from core.text import clean_text

#: U+2060 WORD JOINER: invisible, and "@\u2060channel" is no mention on any platform.
WORD_JOINER = "\u2060"
_AT = "@" + WORD_JOINER

_SLACK_BROADCAST = re.compile(r"<!(channel|here|everyone|group)(?:\|[^>\n]*)?>", re.IGNORECASE)
_SLACK_SUBTEAM = re.compile(r"<!subteam\^[^|>\n]*(?:\|@?([^>\n]*))?>", re.IGNORECASE)
_SLACK_SPECIAL = re.compile(r"<![^|>\n]*(?:\|([^>\n]*))?>")  # <!date^…|fallback> and others
_SLACK_USER = re.compile(r"<@([^|>\s]+)(?:\|([^>\n]*))?>")
_SLACK_CHANNEL = re.compile(r"<#([^|>\s]+)(?:\|([^>\n]*))?>")
_SLACK_LINK = re.compile(r"<((?:https?|mailto|ftp|tel|slack):[^|>\s]+)(?:\|([^>\n]*))?>", re.I)
_FEISHU_AT = re.compile(r"<at\b[^>]*>(.*?)</at\s*>", re.IGNORECASE | re.DOTALL)
_FEISHU_AT_TAG = re.compile(r"</?at\b[^>]*>", re.IGNORECASE)
_BROADCAST_WORD = re.compile(
    r"(?<![\w@])[@＠](channel|here|everyone|all|所有人|全体成员)(?![\w])", re.IGNORECASE
)

_MARKDOWN_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_MARKDOWN_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
#: A web address: with a scheme, or starting with ``www.``.
URL = re.compile(r"(?:\bhttps?://|\bwww\.)[^\s<>\"'\])}|]+", re.IGNORECASE)
_TRAILING = ".,;:!?'\"”’)»"


def neutralise(text: str) -> str:
    """``text`` with every platform mention and link syntax made inert (see the module)."""
    if "<" not in text and "@" not in text and "＠" not in text:
        return text
    text = _SLACK_BROADCAST.sub(lambda m: _AT + m.group(1).lower(), text)
    text = _SLACK_SUBTEAM.sub(lambda m: _AT + (m.group(1) or "team"), text)
    text = _SLACK_SPECIAL.sub(lambda m: m.group(1) or "", text)
    text = _SLACK_USER.sub(lambda m: _AT + (m.group(2) or m.group(1)).lstrip("@"), text)
    text = _SLACK_CHANNEL.sub(lambda m: "#" + (m.group(2) or m.group(1)), text)
    text = _SLACK_LINK.sub(_plain_link, text)
    text = _FEISHU_AT.sub(lambda m: _AT + _FEISHU_AT_TAG.sub("", m.group(1)).lstrip("@"), text)
    text = _FEISHU_AT_TAG.sub(_AT, text)
    return _BROADCAST_WORD.sub(lambda m: _AT + m.group(1), text)


def _plain_link(match: re.Match[str]) -> str:
    url, label = match.group(1), (match.group(2) or "").strip()
    return f"{label} ({url})" if label and label != url else url


def remove_urls(text: str, allowed: Callable[[str], bool] = lambda url: False) -> str:
    """``text`` without the web addresses ``allowed`` refuses (by default: all of them);
    punctuation that ended a sentence stays."""

    def replace(match: re.Match[str]) -> str:
        raw = match.group(0)
        url = raw.rstrip(_TRAILING)
        return raw if allowed(url) else raw[len(url) :]

    return URL.sub(replace, text)


def without_markdown_links(text: str) -> str:
    """``text`` with Markdown images removed and Markdown links reduced to their text
    (``[official data](https://x)`` -> ``official data``): a person's words quoted in a
    report carry no link or image of their own."""
    return _MARKDOWN_LINK.sub(lambda m: m.group(1), _MARKDOWN_IMAGE.sub("", text))


def as_data(text: str) -> str:
    """Untrusted text for a title or snippet: inert, Markdown links reduced to their text,
    and without any web address."""
    text = _MARKDOWN_LINK.sub(lambda m: m.group(1), neutralise(text))
    return " ".join(remove_urls(text).split())


#: A file's name as notes and sources show it (user input: inert, bounded).
NAME_CHARS = 120


def shown_name(name: str) -> str:
    """A file's name as the report and its notes show it: inert (no mention, link or
    markup), on one line, bounded."""
    shown = " ".join(as_data(clean_text(name)).split())
    if len(shown) > NAME_CHARS:
        shown = shown[: NAME_CHARS - 1] + "…"
    return shown or "file"


def fences() -> dict[str, str]:
    """The fence lines around untrusted data in one request to a model (``fence`` and
    ``fence_end``, as a prompt template names them), with a tag no page can guess."""
    tag = secrets.token_hex(6)
    return {"fence": f"<<<untrusted-{tag}>>>", "fence_end": f"<<<end-untrusted-{tag}>>>"}
