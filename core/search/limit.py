"""A process-wide cap on searches in flight: 100 graph runs searching 10 sub-questions each
wait for ``FATHOM_MAX_PROCESS_SEARCHES`` slots instead of opening 1,000 connections at once."""

from __future__ import annotations

import asyncio

from core.models import SearchResult
from core.search.base import SearchProvider


class LimitedSearch:
    """A SearchProvider that lets at most ``slots`` searches of the process run at once."""

    def __init__(self, provider: SearchProvider, slots: int) -> None:
        self.provider = provider
        self.name = provider.name
        self._slots = asyncio.Semaphore(slots)
        self.in_flight = 0

    async def search(self, query: str) -> list[SearchResult]:
        async with self._slots:
            self.in_flight += 1
            try:
                return await self.provider.search(query)
            finally:
                self.in_flight -= 1
