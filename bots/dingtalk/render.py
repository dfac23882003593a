"""What a run looks like in DingTalk: Markdown in DingTalk's subset, pure, no I/O.

DingTalk's Markdown has headings, quotes, bold, italics, links, images and lists, but no tables
(and code blocks only on desktop clients). So tables become lists (found with markdown-it-py,
never by hand), each row a list item naming its columns. A message body may be 20,000 bytes:
the report is split at section boundaries into parts whose JSON-encoded text stays under
:data:`PART_BUDGET` bytes. Untrusted text passes ``core.untrusted.neutralise`` (no ``@all``
goes out live); topics also lose link syntax.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bots.chat.controls import Button
from bots.chat.markdown import (
    link_citations,
    split_report,
    status_lines,
    tables_as_lists,
    utf8_size,
)
from core.models import Source
from core.untrusted import neutralise
from core.words.wording import Language, pick

#: Bytes of JSON-encoded Markdown per message (DingTalk refuses bodies over 20,000 bytes).
PART_BUDGET = 16_000
_TOPIC_CHARS = 300
_STATUS_CHARS = 1_000
_TITLE_CHARS = 60


@dataclass(frozen=True)
class ReportMessage:
    """One Markdown message of a report; the first one @-mentions the requester."""

    number: int
    title: str
    text: str
    mention: bool


def escape_text(text: str) -> str:
    """Untrusted text shown as itself: no mention, and no link or image syntax."""
    return neutralise(text).replace("[", "［").replace("]", "］")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def progress_markdown(topic: str, depth: int, status: str, *, language: Language) -> str:
    """The progress card's (or message's) Markdown: what is researched, and the status line."""
    shown = escape_text(_clip(topic, _TOPIC_CHARS))
    lines = [escape_text(line) for line in status_lines(status, _STATUS_CHARS)]
    head = pick(
        language,
        f"Researching **{shown}** (depth {depth})",
        f"正在研究 **{shown}**（深度 {depth}）",
    )
    # A status of several lines (a graph turn's sub-questions) keeps them: hard line breaks.
    return f"{head}\n\n" + "  \n".join(lines)


#: ``outTrackId`` prefixes: a run's progress card, and the card with its report's 👍/👎.
PROGRESS_TRACK = "fathom_"
FEEDBACK_TRACK = "fathom_fb_"


def run_of_track(out_track_id: str) -> str | None:
    """The run a card belongs to, from its ``outTrackId`` (None: not one of ours)."""
    for prefix in (FEEDBACK_TRACK, PROGRESS_TRACK):  # the longer prefix first
        if out_track_id.startswith(prefix):
            return out_track_id.removeprefix(prefix) or None
    return None


#: DingTalk's button colours for our styles.
_BUTTON_COLOURS = {"primary": "blue", "danger": "red", None: "gray"}


def card_buttons(buttons: Sequence[Button]) -> str:
    """The ``sys_full_json_obj`` of the standard Markdown-with-buttons card: its
    ``msgButtons``, each a callback ("request") button whose id is our action id (a press
    comes back as a card callback naming it, with the card's ``outTrackId``). No buttons:
    an empty list, which removes them."""
    shown = [
        {
            "text": button.label,
            "color": _BUTTON_COLOURS[button.style],
            "id": button.action_id,
            "request": True,
        }
        for button in buttons
    ]
    return json.dumps({"msgButtons": shown}, ensure_ascii=False)


def feedback_markdown(language: Language) -> str:
    """The text of the small card with the report's 👍/👎 (posted after the report)."""
    return pick(language, "Was this report useful?", "这份报告有用吗？")


def progress_title(language: Language) -> str:
    return pick(language, "Fathom research", "Fathom 研究")


def report_title(markdown: str) -> str:
    match = re.search(r"^#{1,6}[ \t]+(.+)$", markdown, re.MULTILINE)
    return _clip(neutralise(match.group(1).strip()) if match else "Research report", _TITLE_CHARS)


def _json_size(text: str) -> int:
    return utf8_size(json.dumps(text, ensure_ascii=False))


def report_messages(markdown: str, sources: Sequence[Source]) -> list[ReportMessage]:
    """The report as Markdown messages in DingTalk's subset, in order, each within budget."""
    title = report_title(markdown)
    body = tables_as_lists(link_citations(neutralise(markdown), sources))
    chunks = split_report(body, PART_BUDGET, _json_size)
    total = len(chunks)
    return [
        ReportMessage(
            number=i,
            title=title if total == 1 else f"{title} ({i}/{total})",
            text=chunk,
            mention=i == 1,
        )
        for i, chunk in enumerate(chunks, 1)
    ]
