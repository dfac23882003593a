"""The quote a supported claim keeps of the source that supported it (issue 56, item 3).

A quote is the source's own text, verbatim but for its spacing (whitespace collapsed) and its
control and invisible formatting characters (removed, :func:`core.text.clean_text`): the
sentence that holds the claim, whole when it fits in :data:`QUOTE_CHARS` characters, else the
part of it that holds most of the claim's words, cut at word boundaries (Chinese and Japanese
between any two characters) with "…" where it was cut. A model never writes one: the check
names the sentence (the lexical pass's, or the best of the passages shown to the verifier) and
:func:`quote_from` takes it from the source's text and checks that every piece of it is there.
A quote is data, never markup: a ``<@U123>`` or ``[x](http://evil)`` in it stays as text, and
each platform renders it inert.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from core.claims.split import sentences_of
from core.claims.summary import QUOTE_CHARS
from core.documents.extract import terms
from core.text import clean_text

#: What marks where a quote was cut.
ELLIPSIS = "…"
#: The share of a claim's distinct words a sentence must hold to be quoted for it: less is no
#: evidence a reader would recognise (the verifier may have read the claim across sentences).
MIN_SHARE = 0.4

_CJK_RANGES = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
_CJK = re.compile(f"[{_CJK_RANGES}]")
#: A Chinese or Japanese character, a word of other letters, or a number.
_UNIT = re.compile(f"[{_CJK_RANGES}]|(?:(?![{_CJK_RANGES}])[^\\W\\d_])+|\\d+")


@dataclass(frozen=True)
class Quote:
    """A supported claim's quote (``text``) and the number of the source it is from."""

    source: int
    text: str


def plain(text: str) -> str:
    """``text`` as a quote keeps it: control and invisible characters removed, whitespace
    collapsed."""
    return " ".join(clean_text(text).split())


def quote_from(source: int, statement: str, sentence: str, passages: Sequence[str]) -> Quote | None:
    """The quote of ``sentence`` (of source ``source``, whose text is ``passages``) for a claim
    that says ``statement``; None when nothing is left of it, or when a piece of it is not
    verbatim in the passages (the check never quotes what the source did not say)."""
    text = quote_of(statement, sentence)
    if not text or not verbatim(text, passages):
        return None
    return Quote(source, text)


def quote_of(statement: str, sentence: str, limit: int = QUOTE_CHARS) -> str:
    """``sentence`` (:func:`plain`) when it fits in ``limit`` characters, else its part that
    holds most of ``statement``'s words, centred on them and cut at word boundaries, "…"
    marking each cut (counted in ``limit``)."""
    text = plain(sentence)
    if len(text) <= limit:
        return text
    budget = limit - 2 * len(ELLIPSIS)
    low, high = _densest(text, set(terms(statement)), budget)
    middle = (low + high) // 2
    start = max(0, min(middle - budget // 2, len(text) - budget))
    end = start + budget
    cut_start, cut_end = start, end
    while cut_start > 0 and cut_start < end and not _boundary(text, cut_start):
        cut_start += 1
    while cut_end < len(text) and cut_end > cut_start and not _boundary(text, cut_end):
        cut_end -= 1
    if cut_end <= cut_start:  # one word longer than the whole budget: cut inside it
        cut_start, cut_end = start, end
    piece = text[cut_start:cut_end].strip()
    head = ELLIPSIS if cut_start > 0 else ""
    tail = ELLIPSIS if cut_end < len(text) else ""
    return f"{head}{piece}{tail}"


def verbatim(quote: str, passages: Sequence[str]) -> bool:
    """Whether each piece of ``quote`` (between its "…" marks) stands in one of ``passages``
    (as :func:`plain` gives them)."""
    pieces = [p.strip() for p in quote.split(ELLIPSIS) if p.strip()]
    if not pieces:
        return False
    if all(any(piece in text for text in passages) for piece in pieces):
        return True  # (a page's passages are spaced so already)
    texts = [plain(p) for p in passages]
    return all(any(piece in text for text in texts) for piece in pieces)


def best_sentence(statement: str, passages: Sequence[str]) -> tuple[str, float] | None:
    """The sentence of ``passages`` that holds most of ``statement``'s distinct words, and the
    share it holds (the first of equals); None when none holds :data:`MIN_SHARE` of them."""
    wanted = set(terms(statement))
    if not wanted:
        return None
    best: tuple[str, float] | None = None
    for passage in passages:
        for sentence in sentences_of(passage):
            share = len(wanted & set(terms(sentence))) / len(wanted)
            if share >= MIN_SHARE and (best is None or share > best[1]):
                best = sentence, share
    return best


def _densest(text: str, wanted: set[str], budget: int) -> tuple[int, int]:
    """Where the span of ``text`` of at most ``budget`` characters that holds most of the
    claim's distinct words (``wanted``) starts and ends (the narrowest of equals); the start of
    ``text`` when it holds none. Words are counted as :func:`core.documents.extract.terms`
    counts them: a Chinese or Japanese character apart."""
    hits = [
        (m.start(), m.end(), m.group(0).lower())
        for m in _UNIT.finditer(text)
        if m.group(0).lower() in wanted
    ]
    best, span = 0, (0, 0)
    for first, (start, _, _) in enumerate(hits):
        seen: set[str] = set()
        held, end = 0, start
        for _, stop, word in hits[first:]:
            if stop - start > budget:
                break
            if word not in seen:
                seen.add(word)
                held, end = len(seen), stop
        if held > best or (held == best and held and end - start < span[1] - span[0]):
            best, span = held, (start, end)
    return span


def _boundary(text: str, at: int) -> bool:
    """Whether ``text`` may be cut before ``text[at]``: at a space, or beside a Chinese or
    Japanese character (their words are not spaced)."""
    before, after = text[at - 1], text[at]
    return (
        before.isspace() or after.isspace() or bool(_CJK.match(before)) or bool(_CJK.match(after))
    )
