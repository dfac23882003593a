"""One round's page reading: the top results fetched at once, their main text extracted off the
event loop, and the passages that matter for the round's query kept within one budget.

The budget (``FATHOM_PAGE_TOKENS``) is shared by the round's pages: each page's best passages
compete with every other page's, so a long page cannot crowd the others out of the prompt
beyond its share, and the prompt stays bounded whatever the pages hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from core.pages.extract import Passage, estimate_tokens, main_text, select, split_passages
from core.pages.fetch import PageFetcher, PageSkipped

log = logging.getLogger(__name__)

#: At most this much of a page's main text is cached (the passages come from its start).
MAX_CACHED_CHARS = 200_000


class PageCache(Protocol):
    """Where pages' main texts are kept between runs (implemented by ``storage.Store``)."""

    async def page_get(self, url: str, max_age: timedelta) -> tuple[str, str] | None: ...

    async def page_put(self, url: str, final_url: str, text: str) -> None: ...


@dataclass(frozen=True)
class PageText:
    """What was kept of one page: its passages, best first within the page's order."""

    url: str
    passages: list[str]


@dataclass
class RoundReading:
    """``pages``: the pages whose passages were kept; ``read``: how many pages were read (a
    relevant page whose passages lost to better ones counts); ``skipped``: the others."""

    pages: list[PageText] = field(default_factory=list)
    skipped: list[PageSkipped] = field(default_factory=list)
    read: int = 0

    @property
    def tokens(self) -> int:
        return sum(estimate_tokens(p) for page in self.pages for p in page.passages)


class PageReader:
    """Reads a round's pages; with a ``cache``, a page read within ``cache_ttl`` (by any run
    or replica) is taken from it instead of being fetched again."""

    def __init__(
        self,
        fetcher: PageFetcher,
        *,
        pages: int = 3,
        budget_tokens: int = 1500,
        cache: PageCache | None = None,
        cache_ttl: timedelta = timedelta(hours=24),
    ) -> None:
        self._fetcher = fetcher
        self.pages = pages
        self._budget = budget_tokens
        self._cache = cache if cache_ttl > timedelta(0) else None
        self._cache_ttl = cache_ttl

    async def read(self, urls: Sequence[str], query: str) -> RoundReading:
        """Read the first :attr:`pages` of ``urls`` concurrently (one page latency, not N)."""
        wanted = list(dict.fromkeys(urls))[: self.pages]
        reading = RoundReading()
        if not wanted:
            return reading
        results = await asyncio.gather(
            *(self._candidates(url, query) for url in wanted), return_exceptions=True
        )
        candidates: list[tuple[str, int, Passage]] = []
        relevant: set[str] = set()
        for url, result in zip(wanted, results, strict=True):
            if isinstance(result, PageSkipped):
                reading.skipped.append(result)
            elif isinstance(result, BaseException):
                reading.skipped.append(
                    PageSkipped(url, f"could not be read ({type(result).__name__})")
                )
            else:
                candidates += [(url, i, passage) for i, passage in enumerate(result)]
                if result:
                    relevant.add(url)
        # One budget for the round: the best passages of all pages, kept in page order.
        spent, kept = 0, []
        for url, i, passage in sorted(candidates, key=lambda c: c[2].score, reverse=True):
            cost = estimate_tokens(passage.text)
            if spent + cost <= self._budget:
                kept.append((url, i, passage.text))
                spent += cost
        for url in wanted:
            texts = [text for u, _, text in sorted(kept, key=lambda k: k[1]) if u == url]
            if texts:
                reading.pages.append(PageText(url, texts))
            elif url not in relevant and not any(s.url == url for s in reading.skipped):
                reading.skipped.append(PageSkipped(url, "nothing on it about the topic"))
            # (a relevant page whose passages lost to better ones is read, not skipped)
        reading.read = len(wanted) - len(reading.skipped)
        return reading

    async def _candidates(self, url: str, query: str) -> list[Passage]:
        text = await self._main_text(url)
        if not text.strip():
            raise PageSkipped(url, "no readable text")
        return await asyncio.to_thread(_best_passages, text, query, self._budget)

    async def _main_text(self, url: str) -> str:
        cached = await self._cached(url)
        if cached is not None:
            return cached
        page = await self._fetcher.fetch(url)
        text = await asyncio.to_thread(main_text, page.body, page.final_url, page.content_type)
        text = text[:MAX_CACHED_CHARS]
        if text.strip() and self._cache is not None:
            try:
                await self._cache.page_put(url, page.final_url, text)
            except Exception as exc:  # the cache is an optimisation only
                log.warning("page cache: write failed (%s: %s)", type(exc).__name__, exc)
        return text

    async def _cached(self, url: str) -> str | None:
        if self._cache is None:
            return None
        try:
            hit = await self._cache.page_get(url, self._cache_ttl)
        except Exception as exc:
            log.warning("page cache: read failed (%s: %s)", type(exc).__name__, exc)
            return None
        return None if hit is None else hit[1]


def _best_passages(text: str, query: str, budget: int) -> list[Passage]:
    return select(split_passages(text), query, budget)
