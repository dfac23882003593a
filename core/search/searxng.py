"""SearXNG: a self-hosted metasearch instance with the JSON format enabled."""

from __future__ import annotations

from core.models import SearchResult
from core.search.base import normalise_results
from core.search.http import HttpSearchProvider, expect_items


class SearxngProvider(HttpSearchProvider):
    """``GET {SEARXNG_URL}/search?q=...&format=json`` ->
    ``results[].{title,url,content,publishedDate}`` (the date is null or ISO 8601)."""

    name = "searxng"

    async def search(self, query: str) -> list[SearchResult]:
        data = await self._get_json("GET", "/search", params={"q": query, "format": "json"})
        items = expect_items(data.get("results"), self.name)
        return normalise_results(
            (
                (i.get("title"), i.get("url"), i.get("content"), i.get("publishedDate"))
                for i in items
            ),
            self.max_results,
        )
