"""SearXNG: a self-hosted metasearch instance with the JSON format enabled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from core.models import SearchResult
from core.search.base import SearchError, normalise_results, result_text
from core.search.http import HttpSearchProvider, expect_items
from core.search.query import QueryLimit
from core.words.reasons import Reason


class SearxngProvider(HttpSearchProvider):
    """``GET {SEARXNG_URL}/search?q=...&format=json`` ->
    ``results[].{title,url,content,publishedDate}`` (the date is null or ISO 8601).

    An instance without the JSON format answers 403; its limiter, refusing what it takes for
    a bot, answers 429 "Too Many Requests" (searx/botdetection); SearXNG has no login of its
    own, so a 401 comes from a proxy in front of it. When no result came and some of its
    engines did not answer (``unresponsive_engines``: ``[["google", "timeout"], ...]``), the
    search fails naming them, so the note says why rather than "no results".

    A query is at most 400 characters: the limit of the engines it asks (Brave's 400, beyond
    which they refuse or cut it), and percent-encoded (up to 9 bytes a character) it stays
    well within the 8 KB request line of SearXNG's uWSGI (``buffer-size = 8192``)."""

    name = "searxng"
    url_setting = "SEARXNG_URL"
    query_limit = QueryLimit(400)
    status_hints: ClassVar[Mapping[int, Reason]] = {
        401: Reason(
            "SearXNG has no login of its own: a proxy in front of it refused the bot; let its "
            "requests through or point SEARXNG_URL past the proxy",
            "SearXNG 本身没有登录：是它前面的代理拒绝了机器人；请放行机器人的请求，"
            "或让 SEARXNG_URL 指向代理之后的地址",
        ),
        403: Reason(
            "is the json format enabled in SearXNG's settings.yml (search.formats)?",
            "SearXNG 的 settings.yml 是否启用了 json 格式（search.formats）？",
        ),
        429: Reason(
            "SearXNG's limiter takes the bot for a scraper: set server.limiter to false in "
            "settings.yml, or add the bot's address to pass_ip in limiter.toml",
            "SearXNG 的限流器把机器人当成了爬虫：请在 settings.yml 中把 server.limiter 设为 "
            "false，或在 limiter.toml 的 pass_ip 中加入机器人的地址",
        ),
    }

    async def _search(self, query: str) -> list[SearchResult]:
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
