"""Deciding whether a proposed search topic was (nearly) searched already."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from difflib import SequenceMatcher

_PUNCTUATION = re.compile(r"[\W_]+", re.UNICODE)
_STOPWORDS = frozenset(
    "a an the of in on for and or to about with by from at is are what how latest new".split()
)

#: Two topics whose word sets overlap this much (Jaccard) are the same search.
WORD_OVERLAP_THRESHOLD = 0.8
#: Two topics whose normalised texts are this similar are the same search.
TEXT_SIMILARITY_THRESHOLD = 0.9


def normalise_topic(topic: str) -> str:
    """Casefolded, punctuation-free, single-spaced form used for comparisons."""
    text = unicodedata.normalize("NFKC", topic).casefold()
    return " ".join(_PUNCTUATION.sub(" ", text).split())


def _words(normalised: str) -> frozenset[str]:
    words = [w for w in normalised.split() if w not in _STOPWORDS]
    if len(words) <= 1 and normalised and " " not in normalised:
        # Scripts written without spaces (Chinese, Japanese): compare character bigrams.
        return frozenset(normalised[i : i + 2] for i in range(max(1, len(normalised) - 1)))
    return frozenset(words)


def is_same_topic(a: str, b: str) -> bool:
    na, nb = normalise_topic(a), normalise_topic(b)
    if not na or not nb:
        return na == nb
    if na == nb:
        return True
    wa, wb = _words(na), _words(nb)
    if wa and wb and len(wa & wb) / len(wa | wb) >= WORD_OVERLAP_THRESHOLD:
        return True
    return SequenceMatcher(None, na, nb).ratio() >= TEXT_SIMILARITY_THRESHOLD


def find_duplicate(proposed: str, searched: Iterable[str]) -> str | None:
    """The already-searched topic that ``proposed`` repeats, if any."""
    for existing in searched:
        if is_same_topic(proposed, existing):
            return existing
    return None
