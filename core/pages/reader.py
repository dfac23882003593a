"""One round's page reading: the top results fetched at once, their main text extracted off the
event loop, and the passages that matter for the round's query kept within one budget.

The budget (``FATHOM_PAGE_TOKENS``) is shared by the round's pages: each page's best passages
compete with every other page's, so a long page cannot crowd the others out of the prompt
beyond its share, and the prompt stays bounded whatever the pages hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.pages.extract import Passage, estimate_tokens, main_text, select, split_passages
from core.pages.fetch import PageFetcher, PageSkipped


@dataclass(frozen=True)
class PageText:
    """What was kept of one page: its passages, best first within the page's order."""

    url: str
    passages: list[str]


@dataclass
class RoundReading:
    pages: list[PageText] = field(default_factory=list)
    skipped: list[PageSkipped] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(estimate_tokens(p) for page in self.pages for p in page.passages)


class PageReader:
    def __init__(self, fetcher: PageFetcher, *, pages: int = 3, budget_tokens: int = 1500):
        self._fetcher = fetcher
        self.pages = pages
        self._budget = budget_tokens

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
        return reading

    async def _candidates(self, url: str, query: str) -> list[Passage]:
        page = await self._fetcher.fetch(url)
        text = await asyncio.to_thread(main_text, page.body, page.final_url, page.content_type)
        if not text.strip():
            raise PageSkipped(url, "no readable text")
        return select(split_passages(text), query, self._budget)
