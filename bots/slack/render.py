"""What a run looks like in Slack: progress texts and report messages (pure, no I/O).

Progress messages are classic ``text`` (Slack mrkdwn), so user-provided text is escaped;
while a run works the same text is also a ``section`` block followed by an ``actions`` block
with its buttons (``bots.chat.controls``), and the final state has no blocks. The report's
last message carries the 👍/👎 buttons after its markdown block.
Reports go out as standard Markdown in one ``markdown`` block per message; Slack allows
12,000 characters of markdown blocks per message, so long reports are split at section
boundaries into several messages (``bots.chat.markdown``). Whatever is posted passes
``core.untrusted.neutralise`` here as well (the report was checked in core; this is the
renderer's own guarantee, also for reports stored before that check existed): no mention or
link syntax goes out live.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from bots.chat.controls import Button
from bots.chat.markdown import link_citations, split_report, status_lines
from core.models import Source
from core.untrusted import neutralise
from core.wording import Language, pick

#: Markdown characters per message (Slack: 12,000 cumulative per message; keep a margin).
MARKDOWN_LIMIT = 11_500
#: More report messages than this and the report is also uploaded as ``report.md``.
REPORT_FILE_THRESHOLD = 3
_TOPIC_CHARS = 300  # chat.update rejects long texts; progress stays short
_STATUS_CHARS = 1_000
_TITLE_CHARS = 200
#: A section block's text (Slack: 3,000 characters).
SECTION_CHARS = 3_000
#: The block id of a message's buttons.
CONTROLS_BLOCK = "fathom_controls"


def escape_mrkdwn(text: str) -> str:
    """Untrusted text for a mrkdwn ``text``: mentions made inert, then Slack's control
    characters ``&``, ``<``, ``>`` escaped."""
    text = neutralise(text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def safe_markdown(markdown: str) -> str:
    """A report (or part) for a ``markdown`` block or ``report.md``: mentions made inert."""
    return neutralise(markdown)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def progress_text(
    run_topic: str,
    depth: int,
    status: str,
    *,
    requester: str | None,
    opener: bool,
    language: Language = "en",
    digest_title: str | None = None,
) -> str:
    """The progress message: who asked (opener only) or which digest, what, and the engine's
    status line."""
    topic = escape_mrkdwn(_clip(run_topic, _TOPIC_CHARS))
    line = "\n".join(escape_mrkdwn(line) for line in status_lines(status, _STATUS_CHARS))
    if digest_title:
        title = escape_mrkdwn(_clip(digest_title, _TOPIC_CHARS + 40))
        return f"*{title}* (depth {depth})\n{line}"
    if opener and requester:
        head = pick(
            language,
            f"<@{requester}> asked me to research *{topic}* (depth {depth}).",
            f"<@{requester}> 请我研究 *{topic}*（深度 {depth}）。",
        )
    else:
        head = pick(
            language,
            f"Researching *{topic}* (depth {depth}).",
            f"正在研究 *{topic}*（深度 {depth}）。",
        )
    return f"{head}\n{line}"


def buttons_block(buttons: Sequence[Button]) -> dict[str, Any]:
    """An ``actions`` block of our buttons: the action id names what it does, the value the
    run (a press is checked against the stored run, never trusted for more)."""
    elements: list[dict[str, Any]] = []
    for button in buttons:
        element: dict[str, Any] = {
            "type": "button",
            "action_id": button.action_id,
            "value": button.run_id,
            "text": {"type": "plain_text", "text": button.label, "emoji": True},
        }
        if button.style:
            element["style"] = button.style
        elements.append(element)
    return {"type": "actions", "block_id": CONTROLS_BLOCK, "elements": elements}


def _section_text(text: str) -> str:
    """Mrkdwn cut to a section block's limit, never inside an ``&amp;``-style entity."""
    if len(text) <= SECTION_CHARS:
        return text
    cut = re.sub(r"&[a-z]*$", "", text[: SECTION_CHARS - 1])
    return cut + "…"


def progress_message(text: str, buttons: Sequence[Button]) -> str:
    """The progress message as the JSON of its ``text`` and ``blocks`` (what
    ``SlackMessenger.post_progress``/``edit_progress`` send): with buttons, the text again as
    a section followed by them; without, no blocks (an edit then removes the old ones)."""
    blocks: list[dict[str, Any]] = []
    if buttons:
        section = {"type": "section", "text": {"type": "mrkdwn", "text": _section_text(text)}}
        blocks = [section, buttons_block(buttons)]
    return json.dumps({"text": text, "blocks": blocks}, ensure_ascii=False)


def report_title(markdown: str) -> str:
    """The first heading (the report's ``# Title``), for fallbacks, notifications and files."""
    match = re.search(r"^#{1,6}[ \t]+(.+)$", markdown, re.MULTILINE)
    title = match.group(1).strip() if match else "Research report"
    return _clip(neutralise(title), _TITLE_CHARS)


def report_messages(
    markdown: str, sources: Sequence[Source], feedback: Sequence[Button] = ()
) -> list[dict[str, Any]]:
    """``chat.postMessage`` kwargs for each part of the report, in order; the last one
    carries the ``feedback`` buttons."""
    chunks = split_report(link_citations(safe_markdown(markdown), sources), MARKDOWN_LIMIT)
    title = escape_mrkdwn(report_title(markdown))
    total = len(chunks)
    messages: list[dict[str, Any]] = []
    for i, chunk in enumerate(chunks, 1):
        text = title if total == 1 else f"{title} (report part {i}/{total})"
        messages.append({"text": text, "blocks": [{"type": "markdown", "text": chunk}]})
    if messages and feedback:
        messages[-1]["blocks"].append(buttons_block(feedback))
    return messages
