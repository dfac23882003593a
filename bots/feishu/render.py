"""What a run looks like in Feishu/Lark: interactive cards (card JSON 2.0), pure, no I/O.

Every bot message is a card with one ``markdown`` element, so replies, the progress message
and the report render the same Markdown. Cards are sent with ``config.update_multi`` so the
progress card can be updated in place (PATCH). Untrusted text passes
``core.untrusted.neutralise`` (no ``<at>`` mention goes out live) and Feishu's markdown tags
(``<font>``, ``<link>``, ``<at>``) are made inert by escaping ``<`` and ``>`` as HTML entities,
which card markdown shows as the characters; topics also lose link and emphasis syntax.

While a run works, its progress card carries "Stop and write now" and "Cancel" buttons
(``bots.chat.controls``; a press comes back as a ``card.action.trigger`` callback with the
button's ``value``), the final state none; the report's last card carries 👍 and 👎.

A card may be 30 KB (UTF-8, CJK text takes 3 bytes a character): the report is split at
section boundaries so that each card's JSON stays under :data:`CARD_BUDGET` bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from bots.chat.controls import Button
from bots.chat.markdown import (
    MARKDOWN_ENTITIES,
    link_citations,
    outside_code,
    split_report,
    status_lines,
    utf8_size,
)
from core.models import Source
from core.untrusted import neutralise
from core.words.wording import Language, pick

#: Bytes of card JSON per card (Feishu's limit is 30 KB; the rest is margin).
CARD_BUDGET = 28_000
_TOPIC_CHARS = 300
_STATUS_CHARS = 1_000
_TITLE_CHARS = 100
_TEXT_ENTITIES = str.maketrans(MARKDOWN_ENTITIES)


def escape_text(text: str) -> str:
    """Untrusted text shown as itself in card markdown: no mention, tag, link or emphasis."""
    return neutralise(text).translate(_TEXT_ENTITIES)


def safe_markdown(markdown: str) -> str:
    """A report for card markdown: mentions inert, and ``<``/``>`` outside code escaped so that
    no ``<at>``, ``<font>`` or ``<link>`` tag works (Markdown itself stays Markdown)."""
    return outside_code(neutralise(markdown), _escape_tags)


def _escape_tags(text: str) -> str:
    return text.replace("<", "&#60;").replace(">", "&#62;")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


#: Feishu's button types for our styles (no style: ``default``).
_BUTTON_TYPES = {"primary": "primary", "danger": "danger", None: "default"}


def button_value(button: Button) -> dict[str, str]:
    """What a press calls back with (``event.action.value``): which control, which run, and
    the card's language."""
    return {"action": button.action_id, "run": button.run_id, "lang": button.language}


def buttons_row(buttons: Sequence[Button]) -> dict[str, Any]:
    """The buttons side by side (card JSON 2.0 has no ``action`` module: a ``column_set`` of
    one button per column), each calling back with :func:`button_value`."""
    columns = [
        {
            "tag": "column",
            "width": "auto",
            "elements": [
                {
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": button.label},
                    "type": _BUTTON_TYPES[button.style],
                    "behaviors": [{"type": "callback", "value": button_value(button)}],
                }
            ],
        }
        for button in buttons
    ]
    return {"tag": "column_set", "horizontal_spacing": "8px", "columns": columns}


def card(
    markdown: str,
    *,
    title: str | None = None,
    template: str = "blue",
    buttons: Sequence[Button] = (),
) -> str:
    """A card JSON 2.0 string with one markdown element (and a header when ``title``, a row
    of ``buttons`` under the text when there are any)."""
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": markdown}]
    if buttons:
        elements.append(buttons_row(buttons))
    data: dict[str, Any] = {
        "schema": "2.0",
        "config": {"update_multi": True, "width_mode": "fill"},
        "body": {"elements": elements},
    }
    if title:
        data["header"] = {
            "title": {"tag": "plain_text", "content": _clip(neutralise(title), _TITLE_CHARS)},
            "template": template,
        }
    return json.dumps(data, ensure_ascii=False)


def reply_card(text: str) -> str:
    """An answer to a request (help, an error, status): its text is already card markdown."""
    return card(text)


def notice_card(text: str) -> str:
    return card(escape_text(text))


def progress_card(
    topic: str,
    depth: int,
    status: str,
    *,
    language: Language,
    title: str | None = None,
    buttons: Sequence[Button] = (),
    mention_to_steer: bool = False,
) -> str:
    """The progress card: what is researched, the engine's status line and, while the run
    works, its ``buttons`` (``title``: a digest's heading, in the card's header) and, when a
    reply must mention the bot to reach it (``mention_to_steer``: the app lacks
    ``im:message.group_msg``, ``bots.feishu.scopes``), a line that says so."""
    shown = escape_text(_clip(topic, _TOPIC_CHARS))
    line = "\n".join(escape_text(line) for line in status_lines(status, _STATUS_CHARS))
    head = pick(
        language,
        f"Researching **{shown}** (depth {depth})",
        f"正在研究 **{shown}**（深度 {depth}）",
    )
    text = f"{head}\n{line}"
    if mention_to_steer:
        text += "\n" + pick(
            language,
            "To steer this research, or to type stop or cancel, mention me in a reply in "
            "this thread.",
            "要引导这个研究，或输入“停止”“取消”，请在本话题的回复中 @我。",
        )
    return card(text, title=title or "Fathom", template="blue", buttons=buttons)


def report_title(markdown: str) -> str:
    match = re.search(r"^#{1,6}[ \t]+(.+)$", markdown, re.MULTILINE)
    return _clip(match.group(1).strip() if match else "Research report", _TITLE_CHARS)


def _card_size(markdown: str) -> int:
    return utf8_size(json.dumps(markdown, ensure_ascii=False))


def report_cards(
    markdown: str, sources: Sequence[Source], feedback: Sequence[Button] = ()
) -> list[str]:
    """The report as cards, in order: section-bounded parts, each card under the budget; the
    last one carries the ``feedback`` buttons."""
    title = report_title(markdown)
    overhead = utf8_size(card("", title=f"{title} (99/99)", template="green", buttons=feedback))
    chunks = split_report(
        link_citations(safe_markdown(markdown), sources), CARD_BUDGET - overhead, _card_size
    )
    total = len(chunks)
    return [
        card(
            chunk,
            title=title if total == 1 else f"{title} ({i}/{total})",
            template="green",
            buttons=feedback if i == total else (),
        )
        for i, chunk in enumerate(chunks, 1)
    ]


def open_url_button(label: str, url: str) -> dict[str, Any]:
    """A button that opens ``url`` (card JSON 2.0 "按钮": an ``open_url`` behaviour, its
    ``default_url`` on every client)."""
    return {
        "tag": "button",
        "text": {"tag": "plain_text", "content": label},
        "type": "primary",
        "behaviors": [{"type": "open_url", "default_url": url}],
    }


def summary_card(
    title: str,
    summary: str,
    sources: Sequence[Source],
    claims_line: str | None,
    url: str,
    *,
    language: Language,
    feedback: Sequence[Button] = (),
) -> str:
    """The thread's card for a report that became a cloud document: its title, its executive
    summary (card markdown made safe, citations linked to their sources), the claim-check
    line, a button that opens the document (``url``), and the ``feedback`` buttons; the
    summary is cut at a paragraph (or a line) when the card would pass :data:`CARD_BUDGET`."""
    opener = open_url_button(pick(language, "Open the full report", "打开完整报告"), url)
    note = pick(
        language,
        "The full report, with each source's supporting quotes, is in the document.",
        "完整报告（含每个来源的支持引文）在文档中。",
    )
    tail = [escape_text(claims_line)] if claims_line else []
    tail.append(f"*{note}*")
    text = link_citations(safe_markdown(summary), sources)

    def build(body: str) -> str:
        elements: list[dict[str, Any]] = [
            {"tag": "markdown", "content": "\n\n".join([body, *tail] if body else tail)},
            {
                "tag": "column_set",
                "columns": [{"tag": "column", "width": "auto", "elements": [opener]}],
            },
        ]
        if feedback:
            elements.append(buttons_row(feedback))
        data: dict[str, Any] = {
            "schema": "2.0",
            "config": {"update_multi": True, "width_mode": "fill"},
            "header": {
                "title": {"tag": "plain_text", "content": _clip(neutralise(title), _TITLE_CHARS)},
                "template": "green",
            },
            "body": {"elements": elements},
        }
        return json.dumps(data, ensure_ascii=False)

    content = build(text)
    while utf8_size(content) > CARD_BUDGET and text:
        text = text.rsplit("\n", 1)[0] if "\n" in text else ""
        content = build(text)
    return content
