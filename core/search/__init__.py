"""Web search providers behind one small protocol, plus a cache in front of them."""

from __future__ import annotations

from core.search.base import SearchError, SearchProvider, normalise_results
from core.search.brave import BraveProvider
from core.search.cache import CachedSearch, SearchCacheStore, normalise_query
from core.search.ddgs import DdgsProvider
from core.search.factory import build_search_provider
from core.search.searxng import SearxngProvider
from core.search.tavily import TavilyProvider

__all__ = [
    "BraveProvider",
    "CachedSearch",
    "DdgsProvider",
    "SearchCacheStore",
    "SearchError",
    "SearchProvider",
    "SearxngProvider",
    "TavilyProvider",
    "build_search_provider",
    "normalise_query",
    "normalise_results",
]
