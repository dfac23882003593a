"""One round's page reading: the top results fetched at once, their main text extracted off the
event loop, and the passages that matter for the round's query kept within one budget.

The budget (``FATHOM_PAGE_TOKENS``) is shared by the round's pages, which take turns: every
page's best passage first, then every page's second best, and so on while they fit. A long page
cannot crowd the others out of the prompt, and the prompt stays bounded whatever the pages hold.
(BM25 scores of different pages are not comparable: each page is its own corpus.)

Extraction and ranking are CPU work. They run on the reader's own two threads (never the event
loop's default pool, which also resolves names for every HTTP client), on at most
``MAX_EXTRACT_CHARS`` of a page, and a page whose extraction takes longer than the page time
limit is skipped (its thread finishes on its own).

A PDF result is read by the ``core.documents`` extractor (worker processes with their own time
and memory limits; ``FATHOM_PDF_MAX_PAGES`` pages, of a longer PDF those that matter for the
query, and which ones is the page's ``coverage``); its text then goes through the same
passages, ranking, budget and cache as a page's (the cache keeps its text, not its coverage).
A PDF that cannot be read is skipped with the extractor's reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol, TypeVar

from core.documents import DocumentExtractor, DocumentText, DocumentUnreadable
from core.documents.decode import undecodable
from core.documents.extract import (
    PageContent,
    Passage,
    estimate_tokens,
    preload,
    read_page,
    select,
    split_passages,
)
from core.documents.result import EMPTY, TOO_SLOW, UNDECODABLE
from core.pages.fetch import FetchedPage, PageFetcher, PageSkipped, names_document
from core.words.reasons import Reason

if TYPE_CHECKING:
    from core.metrics import Metrics

log = logging.getLogger(__name__)
T = TypeVar("T")

#: At most this much of a page's main text is cached (the passages come from its start).
MAX_CACHED_CHARS = 200_000
#: At most this much of a page's HTML is given to the extractor (about 2 s of CPU at worst).
MAX_EXTRACT_CHARS = 1_000_000
EXTRACT_THREADS = 2
#: A page that was read but has no passage about the research.
OFF_TOPIC = Reason("nothing on it about the topic", "没有与主题相关的内容")


class PageCache(Protocol):
    """Where pages' main texts are kept between runs (implemented by ``storage.Store``)."""

    async def page_get(self, url: str, max_age: timedelta) -> tuple[str, str] | None: ...

    async def page_put(self, url: str, final_url: str, text: str) -> None: ...


@dataclass(frozen=True)
class PageText:
    """What was kept of one page: its passages, best first within the page's order."""

    url: str
    passages: list[str]
    #: The date the page declares it was published (None: none, or it came from the cache).
    published: str | None = None
    #: Of a long PDF read in part, which pages (``read pages 1-50 of 311``; None: all, or it
    #: came from the cache).
    coverage: str | None = None


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
    or replica) is taken from it instead of being fetched again. PDFs are read by
    ``documents`` (by default an extractor of its own, whose workers start with the first PDF);
    the reader closes it."""

    def __init__(
        self,
        fetcher: PageFetcher,
        *,
        pages: int = 3,
        budget_tokens: int = 1500,
        cache: PageCache | None = None,
        cache_ttl: timedelta = timedelta(hours=24),
        extract_timeout: float = 8.0,
        documents: DocumentExtractor | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._fetcher = fetcher
        self._metrics = metrics
        self.pages = pages
        self._budget = budget_tokens
        self._cache = cache if cache_ttl > timedelta(0) else None
        self._cache_ttl = cache_ttl
        self._extract_timeout = extract_timeout
        self._threads = ThreadPoolExecutor(EXTRACT_THREADS, thread_name_prefix="fathom-extract")
        self.documents = documents or DocumentExtractor()
        self._preloaded = False

    def warm(self) -> None:
        """Get ready for the first pages while a run waits for its search (every search
        calls it; a no-op once done): import the page extractor (trafilatura) on the
        reader's thread, once per reader, so that the first HTML page does not wait for that
        import. The document workers start only when a document is coming (:meth:`read`):
        a run that meets no PDF starts none."""
        if self.pages <= 0 or self._preloaded:
            return
        self._preloaded = True
        self._threads.submit(preload)

    def close(self) -> None:
        """Stop the extraction threads (an extraction under way finishes first) and the
        document workers (:meth:`aclose` also waits until they are gone)."""
        self._threads.shutdown(wait=False, cancel_futures=True)
        self.documents.close()

    async def aclose(self) -> None:
        self.close()
        await self.documents.aclose()

    async def _cpu(self, url: str, work: Callable[..., T], *args: object) -> T:
        """``work(*args)`` on the reader's threads, within the time limit."""
        future = asyncio.get_running_loop().run_in_executor(self._threads, work, *args)
        try:
            return await asyncio.wait_for(future, self._extract_timeout)
        except TimeoutError:
            raise PageSkipped(url, TOO_SLOW) from None

    async def read(self, urls: Sequence[str], query: str) -> RoundReading:
        """Read the first :attr:`pages` of ``urls`` concurrently (one page latency, not N)."""
        wanted = list(dict.fromkeys(urls))[: self.pages]
        reading = RoundReading()
        if not wanted:
            return reading
        if any(names_document(url) for url in wanted):
            # The document workers start while the pages are fetched, not after a PDF came
            # (a worker's start is about 0.2 s of CPU); a PDF whose address does not say so
            # starts them when its headers come, before its body is read.
            self.documents.warm()
        results = await asyncio.gather(
            *(self._timed_candidates(url, query) for url in wanted), return_exceptions=True
        )
        # Each page's passages, best first (with their place in the page); its date.
        ranked: dict[str, list[tuple[int, Passage]]] = {}
        contents: dict[str, PageContent] = {}
        for url, result in zip(wanted, results, strict=True):
            if isinstance(result, PageSkipped):
                reading.skipped.append(result)
            elif isinstance(result, BaseException):
                if not isinstance(result, Exception):
                    raise result  # a cancellation is not a page failure
                reading.skipped.append(
                    PageSkipped(
                        url,
                        Reason(
                            f"could not be read ({type(result).__name__})",
                            f"无法读取（{type(result).__name__}）",
                        ),
                    )
                )
            elif not result[0]:
                reading.skipped.append(PageSkipped(url, OFF_TOPIC))
            else:
                ranked[url] = sorted(enumerate(result[0]), key=lambda p: p[1].score, reverse=True)
                contents[url] = result[1]
        # One budget for the round: the pages take turns, best passages first.
        spent, kept = 0, {url: set[int]() for url in ranked}
        for turn in range(max((len(r) for r in ranked.values()), default=0)):
            for url, passages in ranked.items():
                if turn < len(passages):
                    place, passage = passages[turn]
                    cost = estimate_tokens(passage.text)
                    if spent + cost <= self._budget:
                        kept[url].add(place)
                        spent += cost
        for url, passages in ranked.items():
            texts = [p.text for place, p in sorted(passages) if place in kept[url]]
            if texts:  # (a relevant page whose passages did not fit is read, not skipped)
                content = contents[url]
                reading.pages.append(PageText(url, texts, content.published, content.coverage))
        reading.read = len(wanted) - len(reading.skipped)
        return reading

    async def _timed_candidates(self, url: str, query: str) -> tuple[list[Passage], PageContent]:
        """:meth:`_candidates`, its seconds observed (``fathom_page_fetch_seconds``) as read
        (passages came back) or skipped (anything else but a cancellation)."""
        started = time.monotonic()
        outcome = "skipped"
        try:
            found = await self._candidates(url, query)
            outcome = "read" if found[0] else "skipped"
            return found
        except asyncio.CancelledError:
            outcome = ""
            raise
        finally:
            if self._metrics is not None and outcome:
                seconds = time.monotonic() - started
                self._metrics.page_seconds.labels(outcome).observe(seconds)

    async def _candidates(self, url: str, query: str) -> tuple[list[Passage], PageContent]:
        """The page's passages for ``query``, and what is known of the page (its text, its
        date, which pages of a PDF were read)."""
        content = await self._main_text(url, query)
        text = content.text
        if not text.strip():
            raise PageSkipped(url, EMPTY)
        return await self._cpu(url, _best_passages, text, query, self._budget), content

    async def _main_text(self, url: str, query: str) -> PageContent:
        cached = await self._cached(url)
        if cached is not None:
            return PageContent(cached)  # (the cache keeps the text only: no date)
        page = await self._fetcher.fetch(url, on_document=self.documents.warm)
        if page.is_pdf:
            document = await self._pdf_text(page, query)
            content = PageContent(document.text, coverage=document.coverage)
        else:
            body = page.body[:MAX_EXTRACT_CHARS]
            content = await self._cpu(url, read_page, body, page.final_url, page.content_type)
            if undecodable(content.text):  # (a PDF's text was judged by the extractor)
                raise PageSkipped(url, UNDECODABLE)
        text = content.text[:MAX_CACHED_CHARS].replace("\x00", "")  # PostgreSQL refuses NUL
        if text.strip() and self._cache is not None:
            try:
                await self._cache.page_put(url, page.final_url, text)
            except Exception as exc:  # the cache is an optimisation only
                log.warning("page cache: write failed (%s: %s)", type(exc).__name__, exc)
        return PageContent(text, content.published, content.coverage)

    async def _pdf_text(self, page: FetchedPage, query: str) -> DocumentText:
        """A PDF's text (of a long one, the pages that matter for ``query``);
        :class:`PageSkipped` with the reason it could not be read (that it was larger than the
        size limit, when it was cut there and nothing could be read)."""
        assert page.data is not None
        try:
            return await self.documents.extract(page.data, "pdf", query)
        except DocumentUnreadable as unreadable:
            if page.truncated:
                limit = _size(self._fetcher.max_bytes)
                raise PageSkipped(
                    page.url,
                    Reason(f"it is larger than the {limit} limit", f"超过 {limit} 的大小上限"),
                ) from None
            raise PageSkipped(page.url, unreadable.reason) from None

    async def _cached(self, url: str) -> str | None:
        if self._cache is None:
            return None
        try:
            hit = await self._cache.page_get(url, self._cache_ttl)
        except Exception as exc:
            log.warning("page cache: read failed (%s: %s)", type(exc).__name__, exc)
            return None
        return None if hit is None else hit[1]


def _size(size: int) -> str:
    """``2 MB``, ``256 kB``."""
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.3g} MB"
    return f"{size / 1024:.3g} kB"


def _best_passages(text: str, query: str, budget: int) -> list[Passage]:
    return select(split_passages(text), query, budget)
