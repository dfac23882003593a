"""Reuse recent search results: the same topic searched twice costs one API call.

The cache lives behind a two-method protocol that the storage layer's ``Store``
implements, so this module knows nothing about SQL. The cache is an optimisation
only: when it fails, the search goes on without it.
"""

from __future__ import annotations

import logging
import unicodedata
from datetime import timedelta
from typing import Any, Protocol

from pydantic import ValidationError

from core.models import SearchResult
from core.search.base import SearchProvider

logger = logging.getLogger(__name__)

# Quotes and brackets are stripped from both ends; sentence punctuation only from the
# end, so queries like ".NET" or "C#" keep their meaning.
_WRAPPERS = "\"'`“”‘’„«»‹›「」『』()[]{}<>（）【】《》"
_TRAILING = ".,;:!?。，、；：！？…"


def normalise_query(q: str) -> str:
    """The cache identity of a query: NFKC, casefolded, single spaces, no wrapping quotes."""
    text = " ".join(unicodedata.normalize("NFKC", q).casefold().split())
    previous = None
    while previous != text:
        previous = text
        text = text.strip(_WRAPPERS).rstrip(_TRAILING).strip()
    return text


class SearchCacheStore(Protocol):
    """Where cached results live (implemented by ``storage.Store``)."""

    async def cache_get(
        self, provider: str, query: str, max_age: timedelta
    ) -> list[dict[str, Any]] | None: ...

    async def cache_put(self, provider: str, query: str, results: list[dict[str, Any]]) -> None: ...


class CachedSearch:
    """A SearchProvider that answers from the cache when it can, else asks ``provider``.

    Only non-empty answers are stored (an empty answer may be a hiccup worth retrying
    later) and provider errors are never cached. ``hits``/``misses`` count lookups.
    """

    def __init__(self, provider: SearchProvider, store: SearchCacheStore, ttl: timedelta) -> None:
        self.provider = provider
        self.name = provider.name
        self._store = store
        self._ttl = ttl
        self.hits = 0
        self.misses = 0

    async def search(self, query: str) -> list[SearchResult]:
        if self._ttl <= timedelta(0):
            return await self.provider.search(query)
        key = normalise_query(query)
        cached = await self._read(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        results = await self.provider.search(query)
        if results:
            await self._write(key, results)
        return results

    async def _read(self, key: str) -> list[SearchResult] | None:
        try:
            rows = await self._store.cache_get(self.name, key, self._ttl)
            if rows is None:
                return None
            return [SearchResult.model_validate(row) for row in rows]
        except ValidationError:
            logger.warning("search cache: ignoring malformed entry for %s", self.name)
        except Exception as exc:
            logger.warning("search cache: read failed (%s: %s)", type(exc).__name__, exc)
        return None

    async def _write(self, key: str, results: list[SearchResult]) -> None:
        try:
            await self._store.cache_put(self.name, key, [r.model_dump() for r in results])
        except Exception as exc:
            logger.warning("search cache: write failed (%s: %s)", type(exc).__name__, exc)
