"""A report's claims: each sentence (or list item, or table row) that cites sources.

The report cites as ``[n]`` only (``core.claims.citations`` makes every other form so first).
Headings, lines without a citation, code blocks, block quotes without a citation and a
sources or references section the writer wrote itself are not claims. Sentences end at
``.``, ``!`` or ``?`` followed by a space (not after an abbreviation or inside a number) and at
``。``, ``！`` or ``？``; a citation written after the full stop (``… rose.[3] Then …``)
belongs to the sentence before it. Each claim keeps where it stands in the report, so a fix
rewrites exactly that sentence.

A paragraph (or list item) whose citations all sit at its end (``A. B. C. [1][2]``, or
``A. B. C [1][2].``) cites them for each of its sentences: each sentence before the last is a
claim of its own citing them (``shared``), except a question, which states nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

#: A citation ``[n]`` (as ``core.research.report`` reads them).
CITATION = re.compile(r"\[(\d{1,4})\]")
#: The end of a sentence: its mark, the citations after it, then a space or the line's end
#: (Chinese marks end one without a space).
_END = re.compile(r"(?:[.!?](?:\s*\[\d{1,4}\])*(?=\s|$)|[。！？](?:\s*\[\d{1,4}\])*)")
#: Words after which a full stop ends no sentence.
_ABBREVIATIONS = frozenset(
    "e.g i.e etc vs cf al fig figs no nos dr mr mrs ms prof st jr sr inc ltd co corp "
    "jan feb mar apr jun jul aug sep sept oct nov dec approx est u.s u.k e.u".split()
)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_ITEM = re.compile(r"^(\s*(?:[-*+]|\d{1,3}[.)])\s+)")
_QUOTE = re.compile(r"^\s{0,3}>\s?")
#: Sections whose lines are no claims: a list of sources the writer wrote anyway.
_SOURCES = re.compile(
    r"^\s{0,3}#{1,6}\s*(sources|references|bibliography|citations|来源|参考文献|参考资料|引用)\s*$",
    re.IGNORECASE,
)
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)")
_WORD = re.compile(r"[^\W_]")
#: The citations that end a sentence: before or after its closing mark.
_TRAILING_CITATIONS = re.compile(r"(?:\s*\[\d{1,4}\])+\s*[.!?。！？]?\s*$")


@dataclass(frozen=True)
class Claim:
    """One cited sentence: ``index`` (0-based, in the report's order), its ``text`` as written
    (citations included), the sources it ``cites`` in order, and where it stands in the
    report (``start``/``end``: character offsets)."""

    index: int
    text: str
    cites: tuple[int, ...]
    start: int
    end: int
    #: It cites its paragraph's citations, written at the paragraph's end, not in its text.
    shared: bool = False

    @property
    def statement(self) -> str:
        """What it says: the text without its citations and emphasis, spaces collapsed."""
        plain = _EMPHASIS.sub("", CITATION.sub("", self.text)).replace("|", " ")
        plain = re.sub(r"\n\s*>\s?", " ", plain)
        return " ".join(plain.split()).replace(" .", ".").replace(" ,", ",")


def claims_of(markdown: str) -> list[Claim]:
    """The claims of ``markdown`` in order."""
    claims: list[Claim] = []
    for text, start, cites, shared in statements(markdown, _SOURCES):
        if cites:
            claims.append(Claim(len(claims), text, cites, start, start + len(text), shared))
    return claims


def statements(
    markdown: str, skipped: re.Pattern[str]
) -> Iterator[tuple[str, int, tuple[int, ...], bool]]:
    """Every sentence, list item and table row of ``markdown`` that says something (not only
    citations), outside sections whose heading ``skipped`` matches: its text as written, where
    it starts, the sources it cites (its own, or its paragraph's) and whether they are its
    paragraph's (``shared``)."""
    for begin, end, row in _blocks(markdown, skipped):
        body = markdown[begin:end]
        spans = [(0, len(body))] if row else _sentences(body)
        closing = () if row else _closing_citations(body, spans)
        for a, b in spans:
            piece = body[a:b]
            text = piece.strip()
            if not _WORD.search(CITATION.sub("", text)):  # only citations and marks
                continue
            cites = tuple(dict.fromkeys(int(n) for n in CITATION.findall(text)))
            shared = not cites and bool(closing) and not text.endswith(("?", "？"))
            at = begin + a + len(piece) - len(piece.lstrip())
            yield text, at, closing if shared else cites, shared


def _closing_citations(body: str, spans: list[tuple[int, int]]) -> tuple[int, ...]:
    """The citations of a paragraph of more than one sentence when they all sit at its end,
    after the text of its last sentence (nothing but its closing mark after them); else ()."""
    if len(spans) < 2:
        return ()
    last = body[spans[-1][0] : spans[-1][1]]
    trailing = _TRAILING_CITATIONS.search(last)
    if trailing is None or CITATION.search(body, 0, spans[-1][0] + trailing.start()):
        return ()
    return tuple(dict.fromkeys(int(n) for n in CITATION.findall(trailing.group(0))))


def _blocks(markdown: str, skipped: re.Pattern[str]) -> list[tuple[int, int, bool]]:
    """Where each paragraph, list item, block quote and table row of ``markdown`` starts and
    ends (after a list marker or ``>``), and whether it is a table row; not headings, code
    blocks, or a section whose heading ``skipped`` matches (up to the next heading of its
    level or above)."""
    blocks: list[tuple[int, int, bool]] = []
    current: list[int] | None = None  # [start, end] of the open block
    offset = 0
    fenced = False
    skipping = 0  # the level of the heading of the section skipped (0: none)

    def close() -> None:
        nonlocal current
        if current is not None:
            blocks.append((current[0], current[1], False))
            current = None

    for line in markdown.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        end = start + len(line.rstrip("\r\n"))
        if _FENCE.match(line):
            close()
            fenced = not fenced
            continue
        if fenced:
            continue
        if _HEADING.match(line):
            close()
            level = len(line.strip()) - len(line.strip().lstrip("#"))
            if skipping and level > skipping:
                continue
            skipping = level if skipped.match(line.strip()) else 0
            continue
        if skipping:
            continue
        if not line.strip():
            close()
            continue
        if line.lstrip().startswith("|"):
            close()
            blocks.append((start, end, True))
            continue
        marker = _ITEM.match(line)
        opening = marker or (_QUOTE.match(line) if current is None else None)
        if opening is not None:
            close()
            current = [start + opening.end(), end]
        elif current is not None:
            current[1] = end
        else:
            current = [start, end]
    close()
    return blocks


def sentences_of(text: str) -> list[str]:
    """The sentences of plain ``text`` (a passage of a source), as :func:`claims_of` ends
    them."""
    return [text[start:end].strip() for start, end in _sentences(text) if text[start:end].strip()]


def _sentences(text: str) -> list[tuple[int, int]]:
    """Where each sentence of ``text`` starts and ends."""
    spans: list[tuple[int, int]] = []
    begin = 0
    for match in _END.finditer(text):
        end = match.end()
        if text[match.start()] == "." and _abbreviation_before(text, match.start()):
            continue
        spans.append((begin, end))
        begin = end
    if text[begin:].strip():
        spans.append((begin, len(text)))
    return spans


def _abbreviation_before(text: str, dot: int) -> bool:
    """Whether the full stop at ``dot`` ends an abbreviation (``e.g.``, ``Fig.``, ``U.S.``) or
    a single letter (an initial), not a sentence."""
    word = re.search(r"([A-Za-z][A-Za-z.]*)$", text[:dot])
    if word is None:
        return False
    token = word.group(1).lower().rstrip(".")
    return token in _ABBREVIATIONS or len(token) == 1
