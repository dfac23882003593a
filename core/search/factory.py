"""Pick the configured search provider (``FATHOM_SEARCH``)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

import httpx

from core.search.base import SearchProvider
from core.search.brave import BraveProvider
from core.search.cache import CachedSearch, SearchCacheStore
from core.search.ddgs import DdgsProvider
from core.search.http import HttpSearchProvider
from core.search.limit import LimitedSearch
from core.search.searxng import SearxngProvider
from core.search.tavily import TavilyProvider

if TYPE_CHECKING:
    from core.metrics import Metrics
    from core.settings import Settings


def build_search_provider(
    settings: Settings,
    client: httpx.AsyncClient,
    store: SearchCacheStore | None = None,
    metrics: Metrics | None = None,
) -> SearchProvider:
    """The provider named by ``settings.search``, at most ``FATHOM_MAX_PROCESS_SEARCHES`` at
    once in the process; wrapped in a cache when ``store`` is given.

    Raises ``ConfigError`` when the provider's required setting (URL or key) is missing.
    """
    settings.require_search()
    n, timeout = settings.search_max_results, settings.search_timeout
    provider: SearchProvider
    if settings.search == "ddgs":
        provider = DdgsProvider(max_results=n, timeout=timeout)
    else:
        http_providers: dict[str, tuple[type[HttpSearchProvider], str | None, str | None]] = {
            "searxng": (SearxngProvider, settings.searxng_url, None),
            "tavily": (TavilyProvider, settings.tavily_base_url, settings.tavily_api_key),
            "brave": (BraveProvider, settings.brave_base_url, settings.brave_api_key),
        }
        cls, base_url, api_key = http_providers[settings.search]
        provider = cls(client, base_url=base_url, api_key=api_key, max_results=n, timeout=timeout)
    provider = LimitedSearch(provider, settings.max_process_searches, metrics)
    if store is not None and settings.search_cache_ttl > timedelta(0):
        provider = CachedSearch(provider, store, settings.search_cache_ttl)
    return provider
