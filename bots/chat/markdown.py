"""Platform-neutral Markdown for chat: citation links, text outside code, entities for untrusted
text, and splitting a report into parts.

A platform caps the size of one message (Slack: 12,000 characters of markdown blocks; Feishu:
30 KB of card JSON, where CJK text is 3 bytes a character). :func:`split_report` cuts a report
into parts within a budget measured the platform's way, at the coarsest boundary that fits:
level-2 headings, then level-3 headings, then paragraphs, and only as a last resort at a
line or word break, never inside a link; a code fence cut by a split is closed at the end of
one part and reopened in the next.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

from core.models import Source

Measure = Callable[[str], int]

#: Room kept in each part for closing and reopening a code fence cut by a split.
FENCE_MARGIN = 64

# A citation `[n]` that is not already a link (`[[n]](url)`, `[n](url)`) nor the number in
# front of a link in the sources list (`[n] [title](url)`).
_CITATION = re.compile(r"(?<!\[)\[(\d+)\](?![(\]])(?![ \t]*\[[^\]\n]*\]\()")
#: Code: a fenced block (to its end, or the text's) or an inline span.
CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]+`", re.DOTALL)
_LINK_SPAN = re.compile(r"\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\([^)\s]*\)")
_FENCE_LINE = re.compile(r"^[ \t]*```(.*)$", re.MULTILINE)
# Split points, coarsest first: level-2 headings, level-3 headings, paragraphs.
_BOUNDARIES = (re.compile(r"\n(?=## )"), re.compile(r"\n(?=### )"), re.compile(r"\n\s*\n"))


def status_lines(status: str, limit: int) -> list[str]:
    """A progress status as its lines (a graph turn lists its sub-questions, one per line):
    spaces collapsed within each line, empty lines dropped, at most ``limit`` characters in
    all (the last line kept is cut with an ellipsis)."""
    lines: list[str] = []
    left = limit
    for raw in status.splitlines():
        line = " ".join(raw.split())
        if not line:
            continue
        if len(line) > left:
            if left > 1:
                lines.append(line[: left - 1].rstrip() + "…")
            break
        lines.append(line)
        left -= len(line) + 1
    return lines


def utf8_size(text: str) -> int:
    """A budget measured in UTF-8 bytes (Feishu's card limit)."""
    return len(text.encode("utf-8"))


def link_citations(markdown: str, sources: Sequence[Source]) -> str:
    """``[n]`` → ``[[n]](url)`` for known sources, outside code; unknown numbers stay."""
    urls = {s.n: s.url for s in sources}

    def link(match: re.Match[str]) -> str:
        url = urls.get(int(match.group(1)))
        return f"[{match.group(0)}]({url})" if url else match.group(0)

    return outside_code(markdown, lambda prose: _CITATION.sub(link, prose))


def outside_code(markdown: str, change: Callable[[str], str], code: re.Pattern[str] = CODE) -> str:
    """``markdown`` with ``change`` applied to the text between its ``code`` spans."""
    out, last = [], 0
    for span in code.finditer(markdown):
        out.append(change(markdown[last : span.start()]))
        out.append(span.group(0))
        last = span.end()
    out.append(change(markdown[last:]))
    return "".join(out)


#: Characters Markdown reads, as numeric entities: untrusted text shown as written (no tag,
#: emphasis, code, link or heading).
MARKDOWN_ENTITIES = {
    "<": "&#60;",
    ">": "&#62;",
    "*": "&#42;",
    "_": "&#95;",
    "~": "&#126;",
    "`": "&#96;",
    "[": "&#91;",
    "]": "&#93;",
    "#": "&#35;",
}


def _fitting_prefix(text: str, budget: int, measure: Measure) -> int:
    """The longest prefix length (in characters) whose measure is within ``budget``."""
    if measure is len:
        return min(budget, len(text))
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return max(lo, 1)


def _hard_split(text: str, budget: int, measure: Measure) -> list[str]:
    """Last resort: cut at a line or word break, never inside a link."""
    pieces: list[str] = []
    while measure(text) > budget:
        limit = _fitting_prefix(text, budget, measure)
        cut = max(text.rfind("\n", 0, limit), text.rfind(" ", 0, limit))
        if cut < limit // 2:
            cut = limit
        for link in _LINK_SPAN.finditer(text, 0, min(len(text), cut + limit)):
            if link.start() < cut < link.end() and link.start() > 0:
                cut = link.start()
                break
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text]


def _split(text: str, budget: int, measure: Measure, level: int = 0) -> list[str]:
    """Pieces within ``budget`` whose concatenation is ``text``."""
    if measure(text) <= budget:
        return [text]
    if level == len(_BOUNDARIES):
        return _hard_split(text, budget, measure)
    parts, last = [], 0
    for match in _BOUNDARIES[level].finditer(text):
        parts.append(text[last : match.start()])
        last = match.start()
    parts.append(text[last:])
    chunks: list[str] = []
    current = ""
    for part in parts:
        if measure(current + part) <= budget:
            current += part
            continue
        if current:
            chunks.append(current)
        current = ""
        if measure(part) <= budget:
            current = part
        else:
            chunks.extend(_split(part, budget, measure, level + 1))
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


def split_report(markdown: str, limit: int, measure: Measure = len) -> list[str]:
    """Non-empty Markdown parts of at most ``limit`` (as ``measure`` counts: characters by
    default), split at section boundaries."""
    pieces = _split(markdown.strip(), max(limit - FENCE_MARGIN, 1), measure)
    chunks = [c.strip("\n") for c in _balance_fences(pieces)]
    return [c for c in chunks if c.strip()]


@cache
def _table_parser() -> MarkdownIt:
    """markdown-it's CommonMark with GFM tables (tables are found by its parse, not by hand);
    imported by the platforms that have no tables only."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table")


def tables_as_lists(markdown: str) -> str:
    """Every Markdown table as a list: one item per row, ``**column**: value`` joined by ``;``."""
    tokens = _table_parser().parse(markdown)
    lines = markdown.split("\n")
    replaced: list[tuple[int, int, list[str]]] = []
    i = 0
    while i < len(tokens):
        span = tokens[i].map
        if tokens[i].type != "table_open" or span is None:
            i += 1
            continue
        start, end = span
        header: list[str] = []
        rows: list[list[str]] = []
        row: list[str] = []
        in_head = False
        while tokens[i].type != "table_close":
            kind = tokens[i].type
            if kind == "thead_open":
                in_head = True
            elif kind == "thead_close":
                in_head = False
            elif kind == "tr_open":
                row = []
            elif kind == "inline":
                row.append(tokens[i].content.strip())
            elif kind == "tr_close":
                if in_head:
                    header = row
                else:
                    rows.append(row)
            i += 1
        items = []
        for cells in rows:
            pairs = [
                f"**{name}**: {value}" if name else value
                for name, value in zip(header + [""] * len(cells), cells, strict=False)
                if value
            ]
            items.append("- " + "; ".join(pairs) if pairs else "- —")
        replaced.append((start, end, items))
        i += 1
    for start, end, items in reversed(replaced):
        lines[start:end] = items
    return "\n".join(lines)
