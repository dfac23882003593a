"""Pick the configured search provider (``FATHOM_SEARCH``)."""

from __future__ import annotations

from datetime import timedelta

import httpx

from core.config import Settings
from core.search.base import SearchProvider
from core.search.brave import BraveProvider
from core.search.cache import CachedSearch, SearchCacheStore
from core.search.ddgs import DdgsProvider
from core.search.searxng import SearxngProvider
from core.search.tavily import TavilyProvider


def build_search_provider(
    settings: Settings,
    client: httpx.AsyncClient,
    store: SearchCacheStore | None = None,
) -> SearchProvider:
    """The provider named by ``settings.search``; wrapped in a cache when ``store`` is given.

    Raises ``ConfigError`` when the provider's required setting (URL or key) is missing.
    """
    settings.require_search()
    n, timeout = settings.search_max_results, settings.search_timeout
    provider: SearchProvider
    if settings.search == "searxng":
        assert settings.searxng_url is not None  # checked by require_search()
        provider = SearxngProvider(
            client, base_url=settings.searxng_url, max_results=n, timeout=timeout
        )
    elif settings.search == "tavily":
        assert settings.tavily_api_key is not None
        provider = TavilyProvider(
            client,
            api_key=settings.tavily_api_key,
            base_url=settings.tavily_base_url,
            max_results=n,
            timeout=timeout,
        )
    elif settings.search == "brave":
        assert settings.brave_api_key is not None
        provider = BraveProvider(
            client,
            api_key=settings.brave_api_key,
            base_url=settings.brave_base_url,
            max_results=n,
            timeout=timeout,
        )
    else:
        provider = DdgsProvider(max_results=n, timeout=timeout)
    if store is not None and settings.search_cache_ttl > timedelta(0):
        provider = CachedSearch(provider, store, settings.search_cache_ttl)
    return provider
