"""What a run looks like in Teams: activities with Adaptive Cards and Markdown, pure, no I/O.

- The progress message is an Adaptive Card (schema 1.4): what is researched, the engine's
  status line, the plan's steps, and while the run works "Stop and write now" and "Cancel" as
  ``Action.Execute`` buttons (verb: the control's action id, data: the run and the card's
  language); a press comes back as an ``adaptiveCard/action`` invoke. The final state has no
  buttons. Untrusted text (a topic, a status, a step) is a ``TextRun`` of a
  ``RichTextBlock``, which Adaptive Cards show as written (a ``TextBlock`` would read it as
  Markdown), with mentions made inert (``core.untrusted.neutralise``).
- The report is Markdown text messages (``textFormat: markdown``). Teams renders emphasis,
  links and code in them on every client, lists on desktop only, headings and tables nowhere:
  tables become lists (``bots.chat.markdown.tables_as_lists``), then headings bold lines and
  list items paragraphs that read as items anywhere (``bots.teams.markdown``); citations link
  to the sources found, mentions are inert and ``<``/``>`` outside code are entities (no
  ``<at>`` tag works). Each part carries Teams' AI label and the citations of the sources
  it cites, the supporting quote as each one's abstract (``bots.teams.citations``; those
  citations' markers stay ``[n]``, as Teams matches them, the other sources' are links).
  Teams refuses an activity over about 28 KB, so the report is split at section boundaries
  into parts whose JSON, citations included, stays under :data:`PART_BUDGET` bytes; 👍/👎
  follow in a small card of their own (an activity with text and a card is split by Teams,
  and answered without an id).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bots.chat.controls import Button
from bots.chat.markdown import (
    link_citations,
    outside_code,
    split_report,
    status_lines,
    tables_as_lists,
    utf8_size,
)
from bots.teams.citations import citations_of, message_entity
from bots.teams.markdown import for_every_client, sections
from core.engine.progress import ProgressTask, TaskStatus
from core.models import Source
from core.untrusted import neutralise
from core.words.wording import Language, pick

#: Bytes of JSON per report part (Teams refuses activities over about 28 KB).
PART_BUDGET = 24_000
CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_VERSION = "1.4"
_TOPIC_CHARS = 300
_STATUS_CHARS = 1_000
_TASK_CHARS = 200
_TASKS_SHOWN = 12
#: Code, as CommonMark reads it: a backtick escaped with a backslash opens none.
_CODE = re.compile(r"(?<!\\)```.*?(?:```|\Z)|(?<!\\)`[^`\n]+`", re.DOTALL)
#: A Markdown link whose target is not a web address (``//host``, an entity, a scheme).
_ODD_LINK = re.compile(r"\]\((?!\s*https?://)")
_TASK_MARKS = {
    TaskStatus.PENDING: "○",
    TaskStatus.IN_PROGRESS: "◐",
    TaskStatus.COMPLETE: "●",
    TaskStatus.ERROR: "✕",
}


@dataclass(frozen=True)
class ReportPart:
    number: int
    activity: dict[str, Any]


def run(text: str, **style: Any) -> dict[str, Any]:
    """Untrusted text as a ``TextRun`` (shown as written: no Markdown, no mention)."""
    return {"type": "TextRun", "text": neutralise(text), **style}


def rich(*inlines: dict[str, Any], **style: Any) -> dict[str, Any]:
    return {"type": "RichTextBlock", "inlines": list(inlines), **style}


def safe_markdown(markdown: str) -> str:
    """A report for a Markdown message: mentions inert; outside code, ``&``, ``<`` and ``>``
    escaped (no tag, no entity spelling a link) and links only to web addresses (the report
    keeps those of the sources found; ``[x](//host)`` is shown as written)."""
    return outside_code(neutralise(markdown), _escape_prose, _CODE)


def _escape_prose(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _ODD_LINK.sub("]\\(", text)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _actions(buttons: Sequence[Button]) -> list[dict[str, Any]]:
    return [
        {
            "type": "Action.Execute",
            "title": button.label,
            "verb": button.action_id,
            "data": {"run": button.run_id, "lang": button.language},
            **_style(button),
        }
        for button in buttons
    ]


def _style(button: Button) -> dict[str, str]:
    if button.style is None:
        return {}
    return {"style": "positive" if button.style == "primary" else "destructive"}


def card(body: list[dict[str, Any]], buttons: Sequence[Button] = ()) -> dict[str, Any]:
    """An Adaptive Card attachment (``buttons`` as its actions)."""
    content: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": CARD_VERSION,
        "body": body,
    }
    if buttons:
        content["actions"] = _actions(buttons)
    return {"contentType": CARD_CONTENT_TYPE, "content": content}


def progress_activity(
    topic: str,
    depth: int,
    status: str,
    *,
    language: Language,
    title: str | None = None,
    buttons: Sequence[Button] = (),
    tasks: Sequence[ProgressTask] = (),
) -> dict[str, Any]:
    """The progress message: a card with the topic, the status line, the plan and, while the
    run works, its ``buttons`` (``title``: a digest's heading)."""
    shown = run(_clip(topic, _TOPIC_CHARS), weight="Bolder")
    depth_words = pick(language, f" (depth {depth})", f"（深度 {depth}）")
    body = [
        rich(run(_clip(title or "Fathom", 150), weight="Bolder", size="Medium")),
        rich(run(pick(language, "Researching ", "正在研究 ")), shown, run(depth_words)),
    ]
    for line in status_lines(status, _STATUS_CHARS):
        body.append(rich(run(line), spacing="Small"))
    for task in list(tasks)[:_TASKS_SHOWN]:
        mark = _TASK_MARKS.get(task.status, "○")
        shown_task = run(f"{mark} {_clip(task.title, _TASK_CHARS)}", size="Small")
        if task.done:
            shown_task["isSubtle"] = True
        body.append(rich(shown_task, spacing="None"))
    return {"type": "message", "attachments": [card(body, buttons)]}


def text_activity(markdown: str) -> dict[str, Any]:
    """A Markdown message (its text already safe)."""
    return {"type": "message", "textFormat": "markdown", "text": markdown}


def notice_activity(text: str) -> dict[str, Any]:
    """A short plain message (untrusted text shown as itself)."""
    return {"type": "message", "attachments": [card([rich(run(text))])]}


def feedback_prompt(language: Language) -> str:
    return pick(language, "Was this report useful?", "这份报告有用吗？")


def vote_activity(feedback: Sequence[Button], language: Language) -> dict[str, Any]:
    """The 👍/👎 card after a report: a message of its own. Teams splits an activity holding
    text and a card into two messages and answers without an id (``bots.teams.api.send``),
    so the card never rides on a report part."""
    return {
        "type": "message",
        "attachments": [card([rich(run(feedback_prompt(language), isSubtle=True))], feedback)],
    }


def report_activity(
    markdown: str,
    sources: Sequence[Source],
    quotes: Mapping[int, Sequence[str]],
    language: Language,
) -> dict[str, Any]:
    """One report part (``markdown``: its safe text) as a Markdown message with the AI label
    and the citations of the sources it cites; the other sources' markers are links."""
    citations = citations_of(markdown, {s.n: s for s in sources}, quotes, language)
    carried = {citation["position"] for citation in citations}
    text = link_citations(markdown, [s for s in sources if s.n not in carried])
    return {**text_activity(text), "entities": [message_entity(citations)]}


def report_parts(
    markdown: str,
    sources: Sequence[Source],
    feedback: Sequence[Button],
    language: Language,
    quotes: Mapping[int, Sequence[str]] | None = None,
) -> list[ReportPart]:
    """The report as Markdown messages in order, each under the budget with its citations
    (``quotes``: a source's number -> the quotes that supported the claims citing it), then
    the ``feedback`` buttons in a card of their own (when there are any)."""
    quotes = quotes or {}
    budget = PART_BUDGET - 200

    def size(chunk: str) -> int:
        activity = report_activity(chunk, sources, quotes, language)
        return utf8_size(json.dumps(activity, ensure_ascii=False))

    chunks: list[str] = []
    for section in sections(tables_as_lists(safe_markdown(markdown))):
        shown = for_every_client(section)  # each list item a paragraph: cut at paragraphs
        pieces = [shown] if size(shown) <= budget else split_report(shown, budget, size)
        for piece in pieces:  # sections packed into parts while they fit
            joined = f"{chunks[-1]}\n\n{piece}" if chunks else piece
            if chunks and size(joined) <= budget:
                chunks[-1] = joined
            else:
                chunks.append(piece)
    parts = [
        ReportPart(number, report_activity(chunk, sources, quotes, language))
        for number, chunk in enumerate(chunks, 1)
    ]
    if feedback:
        parts.append(ReportPart(len(parts) + 1, vote_activity(feedback, language)))
    return parts
