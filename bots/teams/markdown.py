"""A report's Markdown as every Teams client shows it: the blocks Teams does not render in a
text message rewritten as text that reads the same on desktop, web, iOS and Android.

Microsoft's "Format your bot messages" (msteams-docs,
``msteams-platform/bots/how-to/format-your-bot-messages.md``, "Text-only messages"): bold,
italic, preformatted text, blockquotes and hyperlinks are rendered on desktop, iOS and
Android; headers (levels 1-3) and horizontal rules on none; unordered and ordered lists on
desktop only. So:

- a heading (ATX or setext) is a bold line of its own (``**Title**``);
- a list item is a paragraph of its own starting with ``•`` (``◦`` one level deeper, ``▪``
  below that: a paragraph's leading spaces are not shown, so depth is in the mark) or its
  own number (``3.``): on desktop a numbered item still renders as a list, on mobile it
  reads as the same line; each item being its own paragraph, no client runs two items into
  one line;
- a horizontal rule is dropped;
- everything else (paragraphs, code, quotes, link definitions) is kept as written.

The blocks are found by markdown-it's CommonMark parse (code fences are never read as
lists or headings), not by hand; the text inside them is not changed.
"""

from __future__ import annotations

from functools import cache
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

#: The marks of unordered items, outermost first.
BULLETS = ("•", "◦", "▪")
_LISTS = {"bullet_list_open": "bullet", "ordered_list_open": "ordered"}
_LIST_ENDS = ("bullet_list_close", "ordered_list_close")


@cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def _bold(text: str) -> str:
    """``text`` as one bold line (emphasis markers inside it would end the bold early)."""
    words = " ".join(text.replace("**", "").replace("__", "").split())
    return f"**{words}**" if words else ""


def _fence(token: Token) -> str:
    """A code block inside a list item, rebuilt as a fence at the left margin."""
    markup = token.markup if token.type == "fence" else "```"
    return f"{markup}{token.info}\n{token.content}{markup}"


def for_every_client(markdown: str) -> str:
    """``markdown`` with its headings as bold lines, its list items as paragraphs that read
    as items without list rendering, and its horizontal rules dropped."""
    tokens = _parser().parse(markdown)
    lines = markdown.split("\n")
    blocks: list[str] = []
    lists: list[str] = []  # the lists open around the current token, innermost last
    marker = ""  # what the next block of the current list item starts with
    shown_to = 0  # the source lines up to here are in ``blocks`` (or blank)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        kind = token.type
        i += 1
        if token.level == 0 and token.map is not None and token.nesting != -1:
            start, end = token.map  # lines no block holds (link definitions): as written
            skipped = "\n".join(lines[shown_to:start]).strip("\n")
            if skipped.strip():
                blocks.append(skipped)
            shown_to = end
        if kind in _LISTS:
            lists.append(_LISTS[kind])
            continue
        if kind in _LIST_ENDS:
            lists.pop()
            continue
        if kind == "list_item_open":
            depth = len(lists) - 1
            if lists[-1] == "ordered":
                symbol = f"{token.info}{token.markup}"
            else:
                symbol = BULLETS[min(depth, len(BULLETS) - 1)]
            marker = f"{symbol} "
            continue
        if kind == "list_item_close":
            marker = ""
            continue
        if token.map is None or token.nesting == -1 or kind == "inline":
            continue
        start, end = token.map
        if kind == "blockquote_open":  # kept whole, its inner blocks skipped
            depth_of_quote = token.level
            while i < len(tokens) and not (
                tokens[i].type == "blockquote_close" and tokens[i].level == depth_of_quote
            ):
                i += 1
            i += 1
            quoted = lines[start:end]
            text = "\n".join(line.strip() for line in quoted) if lists else "\n".join(quoted)
        elif kind == "hr":
            continue
        elif kind in ("heading_open", "paragraph_open"):
            inline = tokens[i].content if i < len(tokens) and tokens[i].type == "inline" else ""
            if kind == "heading_open":
                text = _bold(inline)
            elif lists:
                text = inline
            else:
                text = "\n".join(lines[start:end])
        elif lists and kind in ("fence", "code_block"):
            if marker.strip():  # an item that opens with code: its mark on a line of its own
                blocks.append(marker.rstrip())
            blocks.append(_fence(token))  # at the margin: an indented fence is no fence
            marker = ""
            continue
        else:  # code, HTML blocks: as written
            text = "\n".join(lines[start:end])
        if lists:
            text, marker = marker + text, ""
        if text.strip():
            blocks.append(text)
    rest = "\n".join(lines[shown_to:]).strip("\n")
    if rest.strip():
        blocks.append(rest)
    return "\n\n".join(blocks)


def sections(markdown: str) -> list[str]:
    """``markdown`` cut before each of its headings (found by the CommonMark parse: a ``#``
    line in code is no heading), every piece non-empty."""
    lines = markdown.split("\n")
    starts = [
        token.map[0]
        for token in _parser().parse(markdown)
        if token.type == "heading_open" and token.level == 0 and token.map is not None
    ]
    bounds = [0, *(start for start in starts if start > 0), len(lines)]
    pieces = ["\n".join(lines[a:b]).strip("\n") for a, b in pairwise(bounds)]
    return [piece for piece in pieces if piece.strip()]
