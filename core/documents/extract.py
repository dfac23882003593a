"""A page's main text (trafilatura, never hand-written HTML parsing), split into passages, and
the passages that matter for a query within a token budget (BM25).

Extraction is CPU work: callers run :func:`main_text` in a worker thread. Page text is
untrusted: every passage passes ``core.text.clean_text`` (no control or invisible formatting
character) and ``core.untrusted.as_data`` (no mention, link or web address) before anyone sees
it.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.dates import parse_published
from core.text import clean_text
from core.untrusted import as_data

#: A passage holds about this many characters (paragraphs are joined or cut to it).
PASSAGE_CHARS = 700
_WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
#: The line around a code block in a page's text (its passages keep the block's lines).
FENCE = "```"
#: Documentation generators' heading anchors: Sphinx's "¶" after a heading, rustdoc's "§"
#: before it.
_ANCHOR_MARKS = re.compile(r"[ \t]*¶[ \t]*$|^[ \t]*§[ \t]*", re.MULTILINE)


@dataclass(frozen=True)
class Passage:
    text: str
    score: float


@dataclass(frozen=True)
class PageContent:
    """What is read of a page: its main text, the date it declares it was published
    (``YYYY-MM-DD``; None when it declares none or one that cannot be right), and, of a PDF
    read in part, which pages."""

    text: str
    published: str | None = None
    #: Of a long PDF read in part, which pages: ``read pages 1-50 of 311``.
    coverage: str | None = None


def preload() -> None:
    """Import trafilatura (and lxml) now: about 0.15 s of CPU that the first page read in a
    process would otherwise spend (``PageReader.warm`` does it on the reader's thread)."""
    import trafilatura  # noqa: F401


def main_text(html: str, url: str, content_type: str) -> str:
    """The main text of a page: article paragraphs without navigation, footers, cookie
    banners or comments; plain text as it is."""
    return read_page(html, url, content_type).text


def read_page(html: str, url: str, content_type: str) -> PageContent:
    """The page's main text (as :func:`main_text`) and its publication date, from its
    metadata (``article:published_time``, JSON-LD, ``<time>``...: trafilatura's, through
    htmldate, without guessing from the text)."""
    if content_type == "text/plain":
        return PageContent(html)
    import trafilatura

    document = trafilatura.bare_extraction(
        html,
        url=url,
        include_comments=False,
        include_tables=True,
        favor_precision=True,
        # Not ``deduplicate``: its cache of seen text is global to the process, so a page read
        # again (by another run, or after the page cache expired) would come out empty.
        deduplicate=False,
        with_metadata=True,
        date_extraction_params={"original_date": True, "extensive_search": False},
    )
    if document is None or isinstance(document, dict):
        return PageContent("")
    # (What ``trafilatura.extract`` returns: the same text, NFC-normalised.)
    text = _fence_code(document.text or "", document.body)
    text = _ANCHOR_MARKS.sub("", unicodedata.normalize("NFC", text))
    return PageContent(text, parse_published(document.date))


def _fence_code(text: str, body: Any) -> str:
    """``text`` with each code block of the extracted ``body`` (trafilatura's tree: a block
    is a ``code`` element of its own) between ```` ``` ```` lines, so that its passages keep
    its line breaks."""
    if body is None:
        return text
    for block in body.iterchildren("code"):
        code = "".join(block.itertext()).strip("\n")
        if "\n" in code and code in text:
            text = text.replace(code, f"{FENCE}\n{code}\n{FENCE}", 1)
    return text


def estimate_tokens(text: str) -> int:
    """A model's tokens, roughly: a CJK character is about one, other words about 1.3."""
    cjk = len(_CJK.findall(text))
    words = len(_WORD.findall(_CJK.sub(" ", text)))
    return cjk + math.ceil(words * 1.3)


def split_passages(text: str, size: int = PASSAGE_CHARS) -> list[str]:
    """Paragraphs joined up to ``size`` characters; a longer paragraph cut at sentences. A
    code block (between ``FENCE`` lines) is a piece of its own that keeps its lines (a
    longer one is cut between lines)."""
    pieces: list[str] = []
    for paragraph in _paragraphs(text):
        if paragraph.startswith(FENCE):
            pieces.extend(_code_pieces(paragraph, size))
            continue
        paragraph = " ".join(paragraph.split())
        if not paragraph:
            continue
        while len(paragraph) > size:
            cut = max(paragraph.rfind(". ", 0, size), paragraph.rfind("。", 0, size))
            cut = cut + 1 if cut > size // 3 else size
            pieces.append(paragraph[:cut].strip())
            paragraph = paragraph[cut:].strip()
        if paragraph:
            pieces.append(paragraph)
    passages: list[str] = []
    for piece in pieces:
        code = piece.startswith(FENCE) or (passages and passages[-1].startswith(FENCE))
        if passages and not code and len(passages[-1]) + 1 + len(piece) <= size:
            passages[-1] = f"{passages[-1]} {piece}"
        else:
            passages.append(piece)
    return passages


def _paragraphs(text: str) -> list[str]:
    """The lines of ``text``, but a code block (from a ``FENCE`` line to the next) as one."""
    paragraphs: list[str] = []
    block: list[str] | None = None
    for line in text.split("\n"):
        if block is not None:
            block.append(line)
            if line.strip() == FENCE:
                paragraphs.append("\n".join(block))
                block = None
        elif line.strip() == FENCE:
            block = [FENCE]
        else:
            paragraphs.append(line)
    if block is not None:  # never closed: its lines are text
        paragraphs.extend(block[1:])
    return paragraphs


def _code_pieces(block: str, size: int) -> list[str]:
    """A fenced code block as pieces of at most about ``size`` characters, cut between lines,
    each fenced."""
    lines = [line.rstrip() for line in block.split("\n")[1:-1]]
    pieces: list[list[str]] = [[]]
    for line in lines:
        if pieces[-1] and sum(len(x) + 1 for x in pieces[-1]) + len(line) > size:
            pieces.append([])
        pieces[-1].append(line[:size])
    return [f"{FENCE}\n" + "\n".join(piece) + f"\n{FENCE}" for piece in pieces if piece]


def passage_data(passage: str) -> str:
    """A passage as data (``core.untrusted.as_data``), line by line: a code block keeps its
    line breaks; empty lines go."""
    lines = (as_data(clean_text(line)) for line in passage.split("\n"))
    return "\n".join(line for line in lines if line)


def terms(text: str) -> list[str]:
    """Words (lower-cased) and single CJK characters."""
    return [w.lower() for w in _WORD.findall(_CJK.sub(" ", text))] + _CJK.findall(text)


def bm25_scores(
    corpus: Sequence[Sequence[str]],
    query: Sequence[str],
    *,
    k1: float = 1.5,
    b: float = 0.75,
    epsilon: float = 0.25,
) -> list[float]:
    """Okapi BM25 of each document of ``corpus`` (lists of terms) for ``query``.

    The classic formula, as rank-bm25's ``BM25Okapi`` computes it: idf = ln((N - n + 0.5) /
    (n + 0.5)), where a negative idf (a term in most documents) becomes ``epsilon`` times the
    mean idf, and each query term adds idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl /
    avgdl)). Written here because that package needs numpy (13 MB in every process) for a
    few dozen passages a page."""
    if not corpus:
        return []
    count = len(corpus)
    average_length = sum(len(doc) for doc in corpus) / count or 1.0
    frequency = Counter(term for doc in corpus for term in set(doc))
    idf = {t: math.log(count - n + 0.5) - math.log(n + 0.5) for t, n in frequency.items()}
    floor = epsilon * sum(idf.values()) / len(idf)
    idf = {t: value if value >= 0 else floor for t, value in idf.items()}
    scores = []
    for doc in corpus:
        tf = Counter(doc)
        norm = k1 * (1 - b + b * len(doc) / average_length)
        scores.append(sum(idf[q] * tf[q] * (k1 + 1) / (tf[q] + norm) for q in query if tf.get(q)))
    return scores


def select(passages: Sequence[str], query: str, budget_tokens: int) -> list[Passage]:
    """The passages most relevant to ``query`` (BM25) that fit in ``budget_tokens``, in the
    page's order; neutralised. Passages sharing no term with the query are never kept."""
    clean = [passage_data(p) for p in passages]
    clean = [p for p in clean if p]
    if not clean or budget_tokens <= 0:
        return []
    corpus = [terms(p) or [""] for p in clean]
    query_terms = terms(query)
    scores = bm25_scores(corpus, query_terms)
    shared = [bool(set(query_terms) & set(words)) for words in corpus]
    ranked = sorted(range(len(clean)), key=lambda i: scores[i], reverse=True)
    chosen: list[int] = []
    spent = 0
    for i in ranked:
        if not shared[i]:
            continue
        cost = estimate_tokens(clean[i])
        if spent + cost > budget_tokens:
            continue
        chosen.append(i)
        spent += cost
    return [Passage(clean[i], float(scores[i])) for i in sorted(chosen)]
