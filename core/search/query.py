"""A query within what a search provider accepts.

Providers document how long a query may be (Tavily and Brave: 400 characters; Brave also 50
words) and refuse a longer one with a 400. A query is never refused for its length: it is
shortened at a word boundary before it is sent, and the start of a query is what a search
engine weighs most.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

#: Characters dropped from the end of a shortened query: a cut leaves no dangling separator.
_DANGLING = " \t,;:-–—/|&+([{\"'“‘«"


def shorten_query(query: str, max_chars: int, max_words: int | None = None) -> str:
    """``query`` with whitespace collapsed, at most ``max_words`` words and ``max_chars``
    characters, cut at a word boundary (a run of text without spaces, such as Chinese, is cut
    at ``max_chars`` itself)."""
    words = query.split()
    if max_words is not None and len(words) > max_words:
        words = words[:max_words]
    text = " ".join(words)
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars + 1]
    boundary = cut.rfind(" ")
    # A boundary in the first half would throw away most of what fits: cut inside the word.
    shortened = cut[:boundary] if boundary >= max_chars // 2 else text[:max_chars]
    return shortened.rstrip(_DANGLING) or text[:max_chars]


@dataclass(frozen=True)
class QueryLimit:
    """What a provider accepts: ``chars`` characters and, when it counts them, ``words``."""

    chars: int
    words: int | None = None

    def fit(self, query: str, provider: str) -> str:
        """``query`` as it may be sent to ``provider`` (shortened when it is longer, and
        logged: the search then covers the start of the query only)."""
        fitted = shorten_query(query, self.chars, self.words)
        if fitted != " ".join(query.split()):
            logger.info(
                "%s: query shortened from %d to %d characters (the provider's limit is %s)",
                provider,
                len(query),
                len(fitted),
                self.describe(),
            )
        return fitted

    def describe(self) -> str:
        """``400 characters`` or ``400 characters and 50 words``."""
        words = f" and {self.words} words" if self.words is not None else ""
        return f"{self.chars} characters{words}"
