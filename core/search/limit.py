"""A process-wide cap on searches in flight: 100 graph runs searching 10 sub-questions each
wait for ``FATHOM_MAX_PROCESS_SEARCHES`` slots instead of opening 1,000 connections at once.
Every search of the process passes here, so it is also where searches are counted and timed
(the time in a slot, not the wait for one)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from core.models import SearchResult
from core.search.base import SearchProvider

if TYPE_CHECKING:
    from core.metrics import Metrics


class LimitedSearch:
    """A SearchProvider that lets at most ``slots`` searches of the process run at once."""

    def __init__(
        self, provider: SearchProvider, slots: int, metrics: Metrics | None = None
    ) -> None:
        self.provider = provider
        self.name = provider.name
        self._slots = asyncio.Semaphore(slots)
        self._metrics = metrics
        self.in_flight = 0

    async def search(self, query: str) -> list[SearchResult]:
        async with self._slots:
            self.in_flight += 1
            outcome = "error"
            started = time.monotonic()
            try:
                results = await self.provider.search(query)
                outcome = "ok" if results else "empty"
                return results
            finally:
                self.in_flight -= 1
                if self._metrics is not None:
                    self._metrics.searches.labels(self.name, outcome).inc()
                    seconds = time.monotonic() - started
                    self._metrics.search_seconds.labels(self.name).observe(seconds)
