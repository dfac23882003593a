"""Brave Search API (needs BRAVE_API_KEY)."""

from __future__ import annotations

from typing import Any

import httpx

from core.models import SearchResult
from core.search.base import normalise_results, strip_html
from core.search.http import HttpSearchProvider, expect_items

BRAVE_MAX_COUNT = 20  # the API rejects larger page sizes


class BraveProvider(HttpSearchProvider):
    """``GET {base}/web/search?q=..&count=n`` -> ``web.results[].{title,url,description}``."""

    name = "brave"

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        api_key: str,
        base_url: str = "https://api.search.brave.com/res/v1",
        max_results: int = 8,
        timeout: float = 20.0,
        base_delay: float = 0.5,
    ) -> None:
        super().__init__(
            client,
            base_url=base_url,
            max_results=max_results,
            timeout=timeout,
            base_delay=base_delay,
        )
        self._api_key = api_key

    async def search(self, query: str) -> list[SearchResult]:
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
                (strip_html(i.get("title")), i.get("url"), strip_html(i.get("description")))
                for i in items
            ),
            self.max_results,
        )
