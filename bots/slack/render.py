"""What a run looks like in Slack: progress texts and report messages (pure, no I/O).

Progress messages are classic ``text`` (Slack mrkdwn), so user-provided text is escaped;
while a run works the same text is also a ``section`` block followed by the run's plan (a
``plan`` block of ``task_card`` s: each search or sub-question, its status and the first
pages its search returned) and an ``actions`` block with its buttons
(``bots.chat.controls``). The final state keeps the text and the finished plan, without the
buttons. Where a workspace refuses plan blocks, the same message goes without them (see
``SlackMessenger``). The report's last message carries the 👍/👎 buttons after its markdown
block; a report that went to a canvas (``bots.slack.canvas``) has one message instead, its
summary (:func:`summary_message`).
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

from slack_sdk.models.blocks import PlanBlock, RichTextBlock, TaskCardBlock
from slack_sdk.models.blocks.block_elements import UrlSourceElement

from bots.chat.controls import Button, Control, run_buttons
from bots.chat.markdown import link_citations, split_report, status_lines
from core.engine.progress import ProgressTask, TaskStatus
from core.models import Source
from core.untrusted import neutralise, remove_urls
from core.words.wording import Language, pick

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
#: The steps a plan block shows (the latest ones), and the length of a step's title, of a
#: source's text and of a source's address.
PLAN_TASKS = 20
TASK_TITLE_CHARS = 150
SOURCE_TEXT_CHARS = 100
SOURCE_URL_CHARS = 2_000


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
    mention_to_steer: bool = False,
) -> str:
    """The progress message: who asked (opener only) or which digest, what, the engine's
    status line, and (``mention_to_steer``: plain replies do not reach the bot here) that a
    reply steering the research must mention the bot."""
    text = _progress_text(
        run_topic,
        depth,
        status,
        requester=requester,
        opener=opener,
        language=language,
        digest_title=digest_title,
    )
    if not mention_to_steer:
        return text
    hint = pick(
        language,
        "To steer this research, mention me in a reply in this thread.",
        "要引导这个研究，请在本话题的回复中 @我。",
    )
    return f"{text}\n{hint}"


def _progress_text(
    run_topic: str,
    depth: int,
    status: str,
    *,
    requester: str | None,
    opener: bool,
    language: Language,
    digest_title: str | None,
) -> str:
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


def acknowledgement_blocks(text: str, run_id: str, language: Language) -> list[dict[str, Any]]:
    """The blocks of a slash command's acknowledgement of a research: its text (which says
    its place in line while it waits) and the run's Cancel button (its progress message,
    with both buttons, is posted once a runner takes it)."""
    cancel = tuple(b for b in run_buttons(run_id, language) if b.control is Control.CANCEL)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": _section_text(text)}}
    return [section, buttons_block(cancel)]


def _section_text(text: str) -> str:
    """Mrkdwn cut to a section block's limit, never inside an ``&amp;``-style entity."""
    if len(text) <= SECTION_CHARS:
        return text
    cut = re.sub(r"&[a-z]*$", "", text[: SECTION_CHARS - 1])
    return cut + "…"


def _plain(text: str, limit: int) -> str:
    """Untrusted text for a plain-text field: no mention, no web address, one line."""
    return _clip(remove_urls(neutralise(text)), limit) or "…"


def _rich_text(text: str) -> RichTextBlock:
    section = {"type": "rich_text_section", "elements": [{"type": "text", "text": text}]}
    return RichTextBlock(elements=[section])


def _task_output(task: ProgressTask, language: Language) -> str | None:
    if task.status is TaskStatus.ERROR:
        return pick(language, "Nothing usable was found.", "没有找到可用的结果。")
    if task.status is not TaskStatus.COMPLETE:
        return None
    return pick(
        language,
        f"{task.found} result{'s' if task.found != 1 else ''} found",
        f"找到 {task.found} 条结果",
    )


def plan_block(tasks: Sequence[ProgressTask], language: Language = "en") -> dict[str, Any]:
    """The run's plan as Slack's ``plan`` block (slack-sdk's block classes): a task card per
    step, with its status, what its search found and, as sources, the first pages it returned
    (addresses from the search only)."""
    shown = list(tasks)[-PLAN_TASKS:]
    done = sum(1 for t in tasks if t.done)
    title = pick(
        language,
        f"Research plan ({done}/{len(tasks)} done)",
        f"研究计划（已完成 {done}/{len(tasks)}）",
    )
    cards = []
    for task in shown:
        output = _task_output(task, language)
        sources = [
            UrlSourceElement(url=s.url, text=_plain(s.title, SOURCE_TEXT_CHARS))
            for s in task.sources
            if len(s.url) <= SOURCE_URL_CHARS
        ]
        cards.append(
            TaskCardBlock(
                task_id=task.id[:64],
                title=_plain(task.title, TASK_TITLE_CHARS),
                status=task.status.value,
                output=_rich_text(output) if output else None,
                sources=sources or None,
            )
        )
    return PlanBlock(title=title, tasks=cards).to_dict()


def progress_message(
    text: str,
    buttons: Sequence[Button],
    tasks: Sequence[ProgressTask] = (),
    language: Language = "en",
) -> str:
    """The progress message as the JSON of its ``text``, its ``blocks`` and, when they hold a
    plan, its ``plain_blocks`` (the same without the plan, for a workspace that refuses plan
    blocks): the text again as a section, the plan, the buttons. Without buttons or plan, no
    blocks (an edit then removes the old ones)."""
    section = {"type": "section", "text": {"type": "mrkdwn", "text": _section_text(text)}}
    controls = [buttons_block(buttons)] if buttons else []
    plain: list[dict[str, Any]] = [section, *controls] if controls else []
    message: dict[str, Any] = {"text": text, "blocks": plain}
    if tasks:
        message["blocks"] = [section, plan_block(tasks, language), *controls]
        message["plain_blocks"] = plain
    return json.dumps(message, ensure_ascii=False)


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


def summary_message(
    title: str,
    summary: str,
    claims_line: str | None,
    url: str,
    sources: Sequence[Source],
    feedback: Sequence[Button] = (),
    language: Language = "en",
) -> dict[str, Any]:
    """``chat.postMessage`` kwargs of the thread's one message for a report that went to a
    canvas: its executive summary (citations linked as in the report), the claim-check line,
    the canvas's link (``url``: Slack's own permalink), then the ``feedback`` buttons."""
    read = pick(language, "Read the full report", "阅读完整报告")
    pieces = [link_citations(safe_markdown(summary.strip()), sources)]
    if claims_line:
        pieces.append(f"_{safe_markdown(claims_line.strip())}_")
    link = f"**[{read}]({url})**"
    room = MARKDOWN_LIMIT - len(link) - 4 * len(pieces)
    text = "\n\n".join(pieces)
    if len(text) > room:
        text = text[: room - 1].rstrip() + "…"
    blocks: list[dict[str, Any]] = [{"type": "markdown", "text": f"{text}\n\n{link}"}]
    if feedback:
        blocks.append(buttons_block(feedback))
    shown = escape_mrkdwn(_clip(title, _TITLE_CHARS))
    fallback = pick(language, f"{shown} (full report: {url})", f"{shown}（完整报告：{url}）")
    return {"text": fallback, "blocks": blocks}
