"""The search provider contract and the normalisation every provider shares.

Providers differ in transport and field names only; everything the engine relies
on (clean text, http(s) URLs, no duplicates, a bounded count) is enforced here so
each provider stays a thin mapping. Titles and snippets are untrusted: they enter as
inert text (``core.untrusted``), without control characters, mentions, platform link
syntax or web addresses.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from core.dates import parse_published
from core.models import SearchResult
from core.text import clean_text
from core.untrusted import as_data
from core.words.reasons import Reason

MAX_SNIPPET_CHARS = 600

# The markup search APIs put in titles and snippets: highlighting (Brave's <strong>, Google's
# <b>, SearXNG engines' <span class="highlight">) and line breaks. A tag name not in this list
# ("Using <template> in HTML") is text and stays.
_TAG = re.compile(
    r"</?(?:a|b|strong|em|i|u|mark|span|font|small|sup|sub|br|wbr|p|div|code)\b[^<>]*>",
    re.IGNORECASE,
)


class SearchError(Exception):
    """A provider failed; ``reason`` names it and says why, for logs and a run's notes."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(str(reason))
        self.reason = reason


class SearchTimeout(SearchError):
    """A provider did not answer in time (an internal source that keeps timing out is left
    out for the rest of the run)."""


class NothingFound(Exception):
    """A provider found nothing and said something a person should see about why (an MCP
    server's "No results were found ... This could be due to bot detection"): no results,
    and ``reason`` for the run's notes. Not a failure."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(str(reason))
        self.reason = reason


@runtime_checkable
class SearchProvider(Protocol):
    """Searches the web for a query; ``[]`` means no results, failure raises SearchError."""

    name: str

    async def search(self, query: str) -> list[SearchResult]: ...


def result_text(value: object) -> str:
    """A title or snippet as data: no highlighting tags or HTML entities (``&amp;``), no
    control characters, mentions, link syntax or web addresses, whitespace runs collapsed;
    non-strings become ''."""
    return as_data(clean_text(strip_html(value))) if isinstance(value, str) else ""


def strip_html(value: object) -> str:
    """Drop highlighting tags and unescape entities (Brave marks matches with
    ``<strong>``, some SearXNG engines send ``&amp;``)."""
    return html.unescape(_TAG.sub("", value)) if isinstance(value, str) else ""


def url_key(url: str) -> str:
    """The identity of a URL for deduplication: no fragment, no trailing slash."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def _is_web_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


def _truncate(text: str, limit: int = MAX_SNIPPET_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


RawResult = tuple[object, object, object] | tuple[object, object, object, object]


def normalise_results(raw: Iterable[RawResult], max_results: int) -> list[SearchResult]:
    """Turn provider ``(title, url, snippet)`` triples, or ``(title, url, snippet, date)``
    quadruples, into clean, unique results (the date as ``YYYY-MM-DD``, None when the
    provider gives none or one that cannot be read: :func:`core.dates.parse_published`)."""
    results: list[SearchResult] = []
    seen: set[str] = set()
    for item in raw:
        title, url, snippet = item[0], item[1], item[2]
        published = parse_published(item[3]) if len(item) > 3 else None
        link = url.strip() if isinstance(url, str) else ""
        if not _is_web_url(link):
            continue
        key = url_key(link)
        if key in seen:
            continue
        seen.add(key)
        results.append(
            SearchResult(
                title=result_text(title) or (urlsplit(link).hostname or link),
                url=link,
                snippet=_truncate(result_text(snippet)),
                published=published,
            )
        )
        if len(results) >= max_results:
            break
    return results
