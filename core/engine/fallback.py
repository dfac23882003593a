"""The query a run searches when the planner gives none at its first round.

A request can be a whole pasted brief (up to 2,000 characters, with links, mentions and
Markdown); searched as it is, a provider refuses it or weighs only its first words. The
fallback is a short query made from the request: its first sentences up to
:data:`FALLBACK_CHARS`, without web addresses, mentions or markup. A short request is its own
query, unchanged.
"""

from __future__ import annotations

import re

from core.search.query import shorten_query
from core.text import clean_text, has_visible
from core.untrusted import neutralise, remove_urls, without_markdown_links

#: How long the fallback query may be: a search engine's query, not a brief.
FALLBACK_CHARS = 150
FALLBACK_WORDS = 24

#: A mention as :func:`core.untrusted.neutralise` leaves it (``@\u2060name``), or typed.
_MENTION = re.compile(r"(?<![\w@])[@＠]\u2060?[\w.-]+")
#: Markdown and HTML markup: emphasis and code marks, headings, quotes, list bullets, tags.
_MARKUP = re.compile(r"</?[a-zA-Z][^<>]*>|\*{1,3}|_{2,}|~~|`+|(?:^|(?<=\s))(?:#{1,6}|>|[-+])(?=\s)")
#: The end of a sentence: ``. ! ?`` before a space, or a full-width ``。！？``.
_SENTENCE_END = re.compile(r"[.!?](?=\s)|[。！？]")


def fallback_query(request: str) -> str:
    """A short search query made from ``request`` (see the module); the request shortened
    as it is when nothing else is left of it (a bare web address)."""
    text = _plain(request)
    if not has_visible(text):
        return shorten_query(clean_text(request), FALLBACK_CHARS, FALLBACK_WORDS)
    ends = [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]
    fitting = [end for end in ends if _fits(text[:end])]
    # The first sentences that fit; a first sentence too long is cut at a word boundary.
    return text[: fitting[-1]].strip() if fitting else _shorten(text[: ends[0]])


def _fits(query: str) -> bool:
    return len(query.strip()) <= FALLBACK_CHARS and len(query.split()) <= FALLBACK_WORDS


def _shorten(text: str) -> str:
    return shorten_query(text, FALLBACK_CHARS, FALLBACK_WORDS)


def _plain(request: str) -> str:
    """The request's words: no web addresses, mentions or markup, whitespace collapsed."""
    text = remove_urls(without_markdown_links(neutralise(clean_text(request))))
    text = _MARKUP.sub("", _MENTION.sub(" ", text))
    text = re.sub(r"\(\s*\)|\[\s*\]", " ", text)  # what held a removed address
    return " ".join(text.split())
