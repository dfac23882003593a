"""Tavily: a search API built for LLM agents (needs TAVILY_API_KEY)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from core.models import SearchResult
from core.search.base import normalise_results
from core.search.http import HttpSearchProvider, expect_items
from core.search.query import QueryLimit
from core.words.reasons import Reason


class TavilyProvider(HttpSearchProvider):
    """``POST {base}/search`` with a bearer key -> ``results[].{title,url,content}``, and
    ``published_date`` where Tavily gives one (its news results)."""

    name = "tavily"
    default_base_url = "https://api.tavily.com"
    url_setting = "TAVILY_BASE_URL"
    # docs.tavily.com, "Best practices for search": a query over 400 characters is refused
    # with 400 {"detail": {"error": "Query is too long. Max query length is 400 characters."}}
    query_limit = QueryLimit(400)
    # docs.tavily.com, "Errors": 432 the plan's or the key's limit, 433 the pay-as-you-go limit
    status_hints: ClassVar[Mapping[int, Reason]] = {
        432: Reason(
            "plan or usage limit reached; check the plan at app.tavily.com",
            "已达到套餐或用量上限；请在 app.tavily.com 查看套餐",
        ),
        433: Reason(
            "plan or usage limit reached (pay-as-you-go limit); check app.tavily.com",
            "已达到套餐或用量上限（按量付费上限）；请查看 app.tavily.com",
        ),
    }

    async def _search(self, query: str) -> list[SearchResult]:
        data = await self._get_json(
            "POST",
            "/search",
            json_body={"query": query, "max_results": self.max_results},
            headers={"Authorization": f"Bearer {self._api_key}"},
        )
        items = expect_items(data.get("results"), self.name)
        return normalise_results(
            (
                (i.get("title"), i.get("url"), i.get("content"), i.get("published_date"))
                for i in items
            ),
            self.max_results,
        )
