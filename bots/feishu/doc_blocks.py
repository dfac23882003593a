"""A report as a Feishu cloud document's blocks: pure, no I/O (``bots.feishu.docs`` sends them).

Feishu builds a document from blocks ("Markdown/HTML 内容转换为文档块": the convert API turns
Markdown into blocks with temporary ids, ``first_level_block_ids`` giving their order; "创建
嵌套块" inserts them, at most :data:`MAX_BLOCKS` a call). The report's body goes through the
convert API as Markdown made safe the Feishu way (:func:`body_markdown`: mentions inert, no
HTML tag, no image, citations linked to their sources as the cards do); what comes back is
checked again block by block (:func:`safe_blocks`: a link to an address that is not a
source's becomes plain text, a mention or an image is dropped, tables lose the read-only
``merge_info`` that the insert refuses). The sources list is not converted: its blocks are
made here (:func:`source_blocks`), each source a list item linked to its own address only,
each of its quotes a quote block holding the quote as literal text (a text run is never
read as markup).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from bots.chat.documents import without_sources
from bots.chat.markdown import link_citations, outside_code
from core.engine.sources import is_link
from core.models import Source
from core.untrusted import as_data, neutralise, remove_urls
from core.words.wording import Language, sources_heading

Block = dict[str, Any]

#: Blocks one insert ("创建嵌套块") may carry.
MAX_BLOCKS = 1000
#: Block types (the convert page's ``block_type`` list).
TEXT, HEADING2, BULLET, QUOTE, IMAGE, TABLE = 2, 4, 12, 15, 27, 31
#: The keys under which a block keeps its text elements.
_TEXT_KEYS = (
    "page",
    "text",
    "bullet",
    "ordered",
    "quote",
    "code",
    "todo",
    *(f"heading{n}" for n in range(1, 10)),
)
#: What a block sent to the insert keeps of what the convert answered (ids are temporary).
_DROPPED = ("parent_id", "revision_id")
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\([^)\n]*\)")
_TITLE_LINE = re.compile(r"\A\s*#[ \t]+[^\n]*\n?")
_ANGLE = re.compile(r"([<>])")


@dataclass(frozen=True)
class BlockTree:
    """Blocks to insert: the first-level ids in document order, every block by its id."""

    first: list[str]
    blocks: dict[str, Block]

    def subtree(self, block_id: str) -> list[Block]:
        block = self.blocks[block_id]
        found = [block]
        for child in block.get("children") or []:
            found.extend(self.subtree(child))
        return found

    def __add__(self, other: BlockTree) -> BlockTree:
        return BlockTree(self.first + other.first, {**self.blocks, **other.blocks})


def split_sources(markdown: str) -> str:
    """The report without its title line (the document's title shows it) and without its
    generated sources list (``## Sources``, the report's last section: its blocks are made
    by :func:`source_blocks`)."""
    return _TITLE_LINE.sub("", without_sources(markdown), count=1).strip()


def body_markdown(body: str, sources: Sequence[Source]) -> str:
    """The report's body as Markdown for the convert API: mentions inert, ``<`` and ``>``
    escaped outside code (no HTML tag reaches the converter), images reduced to their alt
    text (a document image would be an upload of its own), and citations ``[n]`` linked to
    their sources (``bots.chat.markdown.link_citations``)."""

    def prose(text: str) -> str:
        text = _IMAGE.sub(lambda m: m.group(1), text)
        return _ANGLE.sub(r"\\\1", text)

    return link_citations(outside_code(neutralise(body), prose), sources)


def _run(content: str, url: str | None = None) -> Block:
    style: dict[str, Any] = {}
    if url:
        style["link"] = {"url": quote(url, safe="")}
    return {"text_run": {"content": content, "text_element_style": style}}


def _text_block(block_id: str, kind: int, key: str, runs: list[Block]) -> Block:
    return {"block_id": block_id, "block_type": kind, key: {"elements": runs}, "children": []}


def source_blocks(
    sources: Sequence[Source], quotes: Mapping[int, Sequence[str]], language: Language
) -> BlockTree:
    """The sources list as blocks: its heading, each source a list item (``[n]``, its title
    linked to its own address when it is a web address, its date), and under it each of its
    quotes (“…”) as a quote block of literal text."""
    if not sources:
        return BlockTree([], {})
    blocks: dict[str, Block] = {}
    first: list[str] = []

    def add(block: Block) -> None:
        blocks[block["block_id"]] = block
        first.append(block["block_id"])

    add(_text_block("fathom-sources", HEADING2, "heading2", [_run(sources_heading(language))]))
    for source in sources:
        title = as_data(source.title) or source.url
        runs = [_run(f"[{source.n}] "), _run(title, source.url if is_link(source.url) else None)]
        if source.published:
            runs.append(_run(f" ({source.published})"))
        add(_text_block(f"fathom-source-{source.n}", BULLET, "bullet", runs))
        for i, text in enumerate(quotes.get(source.n, ()), 1):
            shown = as_data(text)
            if not shown:
                continue
            add(_text_block(f"fathom-quote-{source.n}-{i}", QUOTE, "quote", [_run(f"“{shown}”")]))
    return BlockTree(first, blocks)


def _elements(block: Block) -> list[Block] | None:
    for key in _TEXT_KEYS:
        body = block.get(key)
        if isinstance(body, dict) and isinstance(body.get("elements"), list):
            return list(body["elements"])
    return None


def _safe_elements(elements: Iterable[Block], allowed: frozenset[str]) -> list[Block]:
    """Text elements with links only to ``allowed`` addresses and no other address in their
    text; mentions of people or documents, reminders and the like (anything but a text run)
    dropped."""
    kept: list[Block] = []
    for element in elements:
        run = element.get("text_run") if isinstance(element, dict) else None
        if not isinstance(run, dict):
            continue
        run = copy.deepcopy(run)
        style = run.get("text_element_style")
        if isinstance(style, dict):
            link = style.get("link")
            if isinstance(link, dict) and unquote(str(link.get("url") or "")) not in allowed:
                style.pop("link")
        text = neutralise(str(run.get("content") or ""))
        run["content"] = remove_urls(text, allowed=lambda url: url in allowed)
        kept.append({"text_run": run})
    return kept


def safe_blocks(
    first: Sequence[str], blocks: Iterable[Block], allowed_urls: Iterable[str]
) -> BlockTree:
    """The convert API's answer as blocks fit to insert: only the blocks reachable from
    ``first`` (in order), images dropped (with their place among their parent's children),
    the read-only ``merge_info`` of tables removed, each text element checked again
    (:func:`_safe_elements`: links only to ``allowed_urls``, no mention)."""
    allowed = frozenset(allowed_urls)
    given = {str(b.get("block_id")): b for b in blocks if isinstance(b, dict)}
    kept: dict[str, Block] = {}

    def visit(block_id: str) -> bool:
        source = given.get(block_id)
        if source is None or source.get("block_type") == IMAGE or block_id in kept:
            return False
        block = {k: copy.deepcopy(v) for k, v in source.items() if k not in _DROPPED}
        kept[block_id] = block
        children = [c for c in block.get("children") or [] if visit(str(c))]
        block["children"] = children
        table = block.get("table")
        if isinstance(table, dict):
            if isinstance(table.get("property"), dict):
                table["property"].pop("merge_info", None)
            if isinstance(table.get("cells"), list):
                table["cells"] = [c for c in table["cells"] if c in kept]
        elements = _elements(block)
        if elements is not None:
            for key in _TEXT_KEYS:
                if isinstance(block.get(key), dict):
                    block[key]["elements"] = _safe_elements(elements, allowed)
                    break
        return True

    order = [str(b) for b in first if visit(str(b))]
    return BlockTree(order, kept)


def batches(tree: BlockTree, limit: int = MAX_BLOCKS) -> list[tuple[list[str], list[Block]]]:
    """The tree as inserts, in document order: each a run of whole first-level subtrees of
    at most ``limit`` blocks (a subtree larger than that alone, for Feishu to refuse)."""
    found: list[tuple[list[str], list[Block]]] = []
    ids: list[str] = []
    descendants: list[Block] = []
    for block_id in tree.first:
        subtree = tree.subtree(block_id)
        if ids and len(descendants) + len(subtree) > limit:
            found.append((ids, descendants))
            ids, descendants = [], []
        ids.append(block_id)
        descendants.extend(subtree)
    if ids:
        found.append((ids, descendants))
    return found
