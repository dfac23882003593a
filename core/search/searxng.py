"""SearXNG: a self-hosted metasearch instance with the JSON format enabled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from core.models import SearchResult
from core.reasons import Reason
from core.search.base import SearchError, normalise_results, result_text
from core.search.http import HttpSearchProvider, expect_items


class SearxngProvider(HttpSearchProvider):
    """``GET {SEARXNG_URL}/search?q=...&format=json`` ->
    ``results[].{title,url,content,publishedDate}`` (the date is null or ISO 8601).

    An instance without the JSON format answers 403; when no result came and some of its
    engines did not answer (``unresponsive_engines``: ``[["google", "timeout"], ...]``), the
    search fails naming them, so the note says why rather than "no results"."""

    name = "searxng"
    status_hints: ClassVar[Mapping[int, Reason]] = {
        403: Reason(
            "is the json format enabled in SearXNG's settings.yml (search.formats)?",
            "SearXNG 的 settings.yml 是否启用了 json 格式（search.formats）？",
        )
    }

    async def search(self, query: str) -> list[SearchResult]:
        data = await self._get_json("GET", "/search", params={"q": query, "format": "json"})
        items = expect_items(data.get("results"), self.name)
        results = normalise_results(
            (
                (i.get("title"), i.get("url"), i.get("content"), i.get("publishedDate"))
                for i in items
            ),
            self.max_results,
        )
        silent = _unresponsive(data.get("unresponsive_engines"))
        if not results and silent:
            raise SearchError(
                Reason(
                    f"no results; engines that did not answer: {silent}",
                    f"没有结果；未响应的引擎：{silent}",
                ).prefixed(self.name)
            )
        return results


def _unresponsive(value: Any, limit: int = 6) -> str:
    """``google (timeout), duckduckgo (CAPTCHA)`` from SearXNG's ``unresponsive_engines``."""
    if not isinstance(value, list):
        return ""
    named: list[str] = []
    for entry in value:
        parts = [result_text(p) for p in entry] if isinstance(entry, list) else []
        if parts and parts[0]:
            named.append(f"{parts[0][:40]} ({parts[1][:60]})" if len(parts) > 1 else parts[0])
    more = f" and {len(named) - limit} more" if len(named) > limit else ""
    return ", ".join(named[:limit]) + more
