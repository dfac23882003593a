"""Brave Search API (needs BRAVE_API_KEY)."""

from __future__ import annotations

from typing import Any

from core.dates import parse_published
from core.models import SearchResult
from core.search.base import normalise_results
from core.search.http import HttpSearchProvider, expect_items
from core.search.query import QueryLimit

BRAVE_MAX_COUNT = 20  # the API rejects larger page sizes


class BraveProvider(HttpSearchProvider):
    """``GET {base}/web/search?q=..&count=n`` -> ``web.results[].{title,url,description}``;
    the date is ``page_age`` (ISO 8601), else ``age`` (``November 30, 2026``, ``3 days ago``)."""

    name = "brave"
    default_base_url = "https://api.search.brave.com/res/v1"
    url_setting = "BRAVE_BASE_URL"
    # Brave's Web Search API reference, ``q``: "Maximum of 400 characters and 50 words".
    query_limit = QueryLimit(400, 50)

    async def _search(self, query: str) -> list[SearchResult]:
        data = await self._get_json(
            "GET",
            "/web/search",
            params={"q": query, "count": min(self.max_results, BRAVE_MAX_COUNT)},
            headers={"X-Subscription-Token": self._api_key, "Accept": "application/json"},
        )
        web: Any = data.get("web") or {}  # Brave omits "web" when nothing matched
        items = expect_items(web.get("results") if isinstance(web, dict) else None, self.name)
        return normalise_results(
            (
                (
                    i.get("title"),
                    i.get("url"),
                    i.get("description"),
                    parse_published(i.get("page_age")) or i.get("age"),
                )
                for i in items
            ),
            self.max_results,
        )
