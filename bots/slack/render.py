"""What a run looks like in Slack: progress texts and report messages (pure, no I/O).

Progress messages are classic ``text`` (Slack mrkdwn), so user-provided text is escaped.
Reports go out as standard Markdown in one ``markdown`` block per message; Slack allows
12,000 characters of markdown blocks per message, so long reports are split at section
boundaries into several messages. Whatever is posted passes ``core.untrusted.neutralise``
here as well (the report was checked in core; this is the renderer's own guarantee, also
for reports stored before that check existed): no mention or link syntax goes out live.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from core.models import Source
from core.untrusted import neutralise

#: Markdown characters per message (Slack: 12,000 cumulative per message; keep a margin).
MARKDOWN_LIMIT = 11_500
#: More report messages than this and the report is also uploaded as ``report.md``.
REPORT_FILE_THRESHOLD = 3
#: Room kept in each chunk for closing and reopening a code fence cut by a split.
_FENCE_MARGIN = 64
_TOPIC_CHARS = 300  # chat.update rejects long texts; progress stays short
_STATUS_CHARS = 1_000
_TITLE_CHARS = 200

# A citation `[n]` that is not already a link (`[[n]](url)`, `[n](url)`) nor the number in
# front of a link in the sources list (`[n] [title](url)`).
_CITATION = re.compile(r"(?<!\[)\[(\d+)\](?![(\]])(?![ \t]*\[[^\]\n]*\]\()")
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)
_LINK_SPAN = re.compile(r"\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\([^)\s]*\)")
_FENCE_LINE = re.compile(r"^[ \t]*```(.*)$", re.MULTILINE)
# Split points, coarsest first: level-2 headings, level-3 headings, paragraphs.
_BOUNDARIES = (re.compile(r"\n(?=## )"), re.compile(r"\n(?=### )"), re.compile(r"\n\s*\n"))


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
    run_topic: str, depth: int, status: str, *, requester: str | None, opener: bool
) -> str:
    """The progress message: who asked (opener only), what, and the engine's status line."""
    topic = escape_mrkdwn(_clip(run_topic, _TOPIC_CHARS))
    line = escape_mrkdwn(_clip(status, _STATUS_CHARS))
    if opener and requester:
        return f"<@{requester}> asked me to research *{topic}* (depth {depth}).\n{line}"
    return f"Researching *{topic}* (depth {depth}).\n{line}"


def link_citations(markdown: str, sources: Sequence[Source]) -> str:
    """``[n]`` → ``[[n]](url)`` for known sources, outside code; unknown numbers stay."""
    urls = {s.n: s.url for s in sources}

    def link(match: re.Match[str]) -> str:
        url = urls.get(int(match.group(1)))
        return f"[{match.group(0)}]({url})" if url else match.group(0)

    out, last = [], 0
    for code in _CODE.finditer(markdown):
        out.append(_CITATION.sub(link, markdown[last : code.start()]))
        out.append(code.group(0))
        last = code.end()
    out.append(_CITATION.sub(link, markdown[last:]))
    return "".join(out)


def _hard_split(text: str, budget: int) -> list[str]:
    """Last resort: cut at a line or word break, never inside a link."""
    pieces: list[str] = []
    while len(text) > budget:
        cut = max(text.rfind("\n", 0, budget), text.rfind(" ", 0, budget))
        if cut < budget // 2:
            cut = budget
        for link in _LINK_SPAN.finditer(text, 0, min(len(text), cut + budget)):
            if link.start() < cut < link.end() and link.start() > 0:
                cut = link.start()
                break
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text]


def _split(text: str, budget: int, level: int = 0) -> list[str]:
    """Pieces of at most ``budget`` chars whose concatenation is ``text``."""
    if len(text) <= budget:
        return [text]
    if level == len(_BOUNDARIES):
        return _hard_split(text, budget)
    parts, last = [], 0
    for match in _BOUNDARIES[level].finditer(text):
        parts.append(text[last : match.start()])
        last = match.start()
    parts.append(text[last:])
    chunks: list[str] = []
    current = ""
    for part in parts:
        if len(current) + len(part) <= budget:
            current += part
            continue
        if current:
            chunks.append(current)
        current = ""
        if len(part) <= budget:
            current = part
        else:
            chunks.extend(_split(part, budget, level + 1))
    if current:
        chunks.append(current)
    return chunks


def _balance_fences(chunks: list[str]) -> list[str]:
    """A code block cut by a split is closed at the end of one chunk and reopened in the next."""
    out: list[str] = []
    reopen: str | None = None
    for chunk in chunks:
        text = f"{reopen}\n{chunk}" if reopen is not None else chunk
        reopen = None
        for fence in _FENCE_LINE.finditer(text):
            reopen = None if reopen is not None else "```" + fence.group(1).strip()[:20]
        if reopen is not None:
            text += "\n```"
        out.append(text)
    return out


def report_title(markdown: str) -> str:
    """The first heading (the report's ``# Title``), for fallbacks, notifications and files."""
    match = re.search(r"^#{1,6}[ \t]+(.+)$", markdown, re.MULTILINE)
    title = match.group(1).strip() if match else "Research report"
    return _clip(neutralise(title), _TITLE_CHARS)


def split_report(markdown: str, limit: int = MARKDOWN_LIMIT) -> list[str]:
    """Non-empty Markdown chunks of at most ``limit`` chars, split at section boundaries."""
    pieces = _split(markdown.strip(), max(limit - _FENCE_MARGIN, 1))
    chunks = [c.strip("\n") for c in _balance_fences(pieces)]
    return [c for c in chunks if c.strip()]


def report_messages(markdown: str, sources: Sequence[Source]) -> list[dict[str, Any]]:
    """``chat.postMessage`` kwargs for each part of the report, in order."""
    chunks = split_report(link_citations(safe_markdown(markdown), sources))
    title = escape_mrkdwn(report_title(markdown))
    total = len(chunks)
    messages: list[dict[str, Any]] = []
    for i, chunk in enumerate(chunks, 1):
        text = title if total == 1 else f"{title} (report part {i}/{total})"
        messages.append({"text": text, "blocks": [{"type": "markdown", "text": chunk}]})
    return messages
