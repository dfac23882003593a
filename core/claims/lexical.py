"""The lexical pass: a claim whose cited source plainly says it is supported without asking a
model.

Plainly says: one sentence of a cited source's passages, among the :data:`CANDIDATES` passages
that BM25 ranks best for the claim (as pages are read), holds every number the claim states and
every phrase it quotes, and at least :data:`COVERAGE` of its words (for Chinese, of its
character pairs). One sentence, not the passage: a writer that takes a number from the next
sentence ("rose 12% in 2019" where 12% belongs to another finding) states what the passage
holds word by word, yet not what it says. A claim that fails this is not unsupported, only not
plainly supported: the verifier model judges it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from core.claims.split import sentences_of
from core.pages.extract import bm25_scores, terms

#: The share of a claim's words one passage must hold.
COVERAGE = 0.8
#: The passages of a source (the best for the claim by BM25) that are looked at.
CANDIDATES = 3
#: Words that say nothing of a claim's content.
_STOP = frozenset(
    "a an the and or but of to in on at by for with from as is are was were be been being "
    "it its this that these those which who whom whose what when where how than then there "
    "their they them he she his her we our you your i not no nor so such can could may might "
    "will would shall should do does did has have had also more most less least very into "
    "over under about after before between during while per each both all any some other "
    "same own only just up out".split()
)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_QUOTED = re.compile(r"[\"“”「『]([^\"“”「」『』]{4,200})[\"“”」』]")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class Evidence:
    """What source ``n`` gave the writer: its passages (a page's, a file's, an internal
    document's; its snippet when nothing else)."""

    n: int
    title: str
    url: str
    passages: tuple[str, ...]


def plainly_supported(statement: str, evidence: Sequence[Evidence]) -> bool:
    """Whether one passage of one of ``evidence`` (the sources a claim cites) plainly says
    ``statement``."""
    return any(_in_source(statement, source.passages) for source in evidence)


def _in_source(statement: str, passages: Sequence[str]) -> bool:
    if not passages:
        return False
    wanted = _words(statement)
    if not wanted:
        return False
    scores = bm25_scores([terms(p) or [""] for p in passages], terms(statement))
    ranked = sorted(range(len(passages)), key=lambda i: scores[i], reverse=True)
    numbers = _numbers(_normal(statement))
    quotes = [_normal(quote) for quote in _QUOTED.findall(statement)]
    for best in ranked[:CANDIDATES]:
        for sentence in map(_normal, sentences_of(passages[best])):
            if not numbers <= _numbers(sentence) or not all(q in sentence for q in quotes):
                continue
            if len(wanted & _words(sentence)) >= COVERAGE * len(wanted):
                return True
    return False


def _normal(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _numbers(text: str) -> set[str]:
    """The numbers of ``text``, written without thousands separators (``1,200`` is ``1200``;
    ``3.5`` stays ``3.5``)."""
    found = set()
    for number in _NUMBER.findall(text):
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+", number):
            number = number.replace(",", "")
        found.add(number)
    return found


def _words(text: str) -> set[str]:
    """Content words: Latin words (lower case, stop words left out) and pairs of adjacent
    Chinese characters."""
    normal = _normal(text)
    latin = {w for w in re.findall(r"[a-z][a-z'-]+", normal) if w not in _STOP}
    han = "".join(_CJK.findall(normal))
    pairs = {han[i : i + 2] for i in range(len(han) - 1)}
    return latin | pairs
