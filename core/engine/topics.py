"""Deciding whether a proposed search topic was (nearly) searched already.

Two topics are the same search when they differ only in case, punctuation, spacing,
word order, filler words or small spelling variants (plurals, typos) of the same
words. A topic that adds or swaps a real word ("... outlook" after "... overview",
"2025" after "2024") is a different search, however long the shared part is: a
whole-string similarity would call every aspect of a long topic a duplicate.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from difflib import SequenceMatcher

_PUNCTUATION = re.compile(r"[\W_]+", re.UNICODE)
_LETTER_DIGIT = re.compile(r"(?<=[a-z])(?=[0-9])|(?<=[0-9])(?=[a-z])")
_STOPWORDS = frozenset(
    "a an the of in on for and or to about with by from at is are what how latest new".split()
)

#: Two unspaced (Chinese, Japanese) topics whose character bigrams overlap this much
#: (Jaccard) are the same search.
WORD_OVERLAP_THRESHOLD = 0.8
#: Two unspaced topics whose normalised texts are this similar are the same search.
TEXT_SIMILARITY_THRESHOLD = 0.9
#: Two words this similar (and at least ``MIN_FUZZY_WORD`` long) are spelling variants.
WORD_SIMILARITY_THRESHOLD = 0.8
MIN_FUZZY_WORD = 4


def normalise_topic(topic: str) -> str:
    """Casefolded, punctuation-free, single-spaced form used for comparisons."""
    text = unicodedata.normalize("NFKC", topic).casefold()
    text = _LETTER_DIGIT.sub(" ", _PUNCTUATION.sub(" ", text))  # "gpt4" is "gpt 4"
    return " ".join(text.split())


def _content_words(normalised: str) -> frozenset[str]:
    words = frozenset(normalised.split())
    return (words - _STOPWORDS) or words


def _bigrams(normalised: str) -> frozenset[str]:
    return frozenset(normalised[i : i + 2] for i in range(max(1, len(normalised) - 1)))


def _same_word(a: str, b: str) -> bool:
    if a == b:
        return True
    if min(len(a), len(b)) < MIN_FUZZY_WORD:
        return False
    return SequenceMatcher(None, a, b).ratio() >= WORD_SIMILARITY_THRESHOLD


def _covers(words: frozenset[str], other: frozenset[str]) -> bool:
    return all(any(_same_word(w, o) for o in other) for w in words)


def is_same_topic(a: str, b: str) -> bool:
    na, nb = normalise_topic(a), normalise_topic(b)
    if not na or not nb:
        return na == nb
    if na.replace(" ", "") == nb.replace(" ", ""):
        return True
    if " " not in na and " " not in nb:
        # Scripts written without spaces (Chinese, Japanese): compare characters.
        ba, bb = _bigrams(na), _bigrams(nb)
        if len(ba & bb) / len(ba | bb) >= WORD_OVERLAP_THRESHOLD:
            return True
        return SequenceMatcher(None, na, nb).ratio() >= TEXT_SIMILARITY_THRESHOLD
    wa, wb = _content_words(na), _content_words(nb)
    return _covers(wa, wb) and _covers(wb, wa)


def find_duplicate(proposed: str, searched: Iterable[str]) -> str | None:
    """The already-searched topic that ``proposed`` repeats, if any."""
    for existing in searched:
        if is_same_topic(proposed, existing):
            return existing
    return None
