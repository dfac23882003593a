"""A report's claims: each sentence (or list item, or table row) that cites sources.

Headings, lines without a citation, code blocks, block quotes without a citation and a
sources or references section the writer wrote itself are not claims. Sentences end at
``.``, ``!`` or ``?`` followed by a space (not after an abbreviation or inside a number) and at
``。``, ``！`` or ``？``; a citation written after the full stop (``… rose.[3] Then …``)
belongs to the sentence before it. Each claim keeps where it stands in the report, so a fix
rewrites exactly that sentence.
"""

from __future__ import annotations

import re
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

    @property
    def statement(self) -> str:
        """What it says: the text without its citations and emphasis, spaces collapsed."""
        plain = _EMPHASIS.sub("", CITATION.sub("", self.text)).replace("|", " ")
        plain = re.sub(r"\n\s*>\s?", " ", plain)
        return " ".join(plain.split()).replace(" .", ".").replace(" ,", ",")


def claims_of(markdown: str) -> list[Claim]:
    """The claims of ``markdown`` in order."""
    claims: list[Claim] = []
    for begin, end, row in _blocks(markdown):
        body = markdown[begin:end]
        if not CITATION.search(body):
            continue
        for a, b in [(0, len(body))] if row else _sentences(body):
            piece = body[a:b]
            text = piece.strip()
            cites = tuple(dict.fromkeys(int(n) for n in CITATION.findall(text)))
            if not cites or not CITATION.sub("", text).strip(" .。,，;；:：|-*>\n"):
                continue
            at = begin + a + len(piece) - len(piece.lstrip())
            claims.append(Claim(len(claims), text, cites, at, at + len(text)))
    return claims


def _blocks(markdown: str) -> list[tuple[int, int, bool]]:
    """Where each paragraph, list item, block quote and table row of ``markdown`` starts and
    ends (after a list marker or ``>``), and whether it is a table row; not headings, code
    blocks, or a sources section the writer wrote."""
    blocks: list[tuple[int, int, bool]] = []
    current: list[int] | None = None  # [start, end] of the open block
    offset = 0
    fenced = in_sources = False

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
            in_sources = _SOURCES.match(line.strip()) is not None
            continue
        if in_sources:
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
