"""The steps both strategies take: searching a topic and reading its best result pages.

A run never fails because of either: a failed search gives a finding that says why, and pages
that cannot be read leave the snippets (both noted for the report).
"""

from __future__ import annotations

import asyncio
import logging
import re
from urllib.parse import urlsplit

from core.engine.state import RunState
from core.models import Finding, PageExcerpt, SearchResult
from core.pages.reader import PageReader, RoundReading
from core.progress import search_executed_text
from core.search import SearchError, SearchProvider
from core.wording import searching_words

# The logger these lines were always written under (they began in the iterative strategy), so
# that log queries keep finding them.
log = logging.getLogger("core.engine.iterative")


def searching_text(state: RunState, topic: str) -> str:
    """Keeps the last ``i/depth th search executed.`` visible while the next search runs.

    Platforms coalesce edits of the progress message, so every status after the i-th
    search repeats its line; whichever edit lands, the count is shown.
    """
    done = state.rounds_done
    prefix = f"{search_executed_text(done, state.depth)} " if done else ""
    return f"{prefix}{searching_words(state.language, topic)}"


class PageReading:
    """The page reading of findings, running in the background until :meth:`attach`."""

    def __init__(self, reader: PageReader, topic: str, findings: list[Finding]) -> None:
        self._findings = findings
        self._tasks = [
            asyncio.create_task(
                reader.read([r.url for r in finding.results], f"{topic} {finding.topic}")
            )
            for finding in findings
        ]

    async def attach(self, state: RunState) -> None:
        """Wait for the pages and keep their passages in the findings (and count them)."""
        for finding, task in zip(self._findings, self._tasks, strict=True):
            try:
                reading = await task
            except Exception as exc:  # reading is a bonus: a run never fails because of it
                log.warning("reading the pages of %r failed", finding.topic, exc_info=True)
                reading = RoundReading()
                state.note(
                    f'The result pages of "{finding.topic}" could not be read '
                    f"({type(exc).__name__}); its snippets were used."
                )
            finding.pages = [
                PageExcerpt(url=p.url, passages=p.passages, published=p.published)
                for p in reading.pages
            ]
            state.usage.pages_read += reading.read
            state.usage.pages_skipped += len(reading.skipped)
            if reading.skipped:
                skipped = "; ".join(f"{_host(s.url)} ({s.reason})" for s in reading.skipped)
                state.note(f'Result pages left out for "{finding.topic}": {skipped}.')

    async def cancel(self) -> None:
        """Stop the reading and wait until it has stopped."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


_HOST = re.compile(r"[a-z0-9.-]{1,100}")


def _host(url: str) -> str:
    """The page's host for a note (notes reach the writer outside the fence): only when it
    looks like one."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return "a page"
    return host if _HOST.fullmatch(host) else "a page"


async def search_topic(
    search: SearchProvider, state: RunState, topic: str, reader: PageReader | None = None
) -> Finding:
    """Search ``topic`` (query only): its results, or a finding that says why there are none
    (noted for the report); a run never fails because of a search. ``reader``, which will
    read the results' pages, gets ready meanwhile (``PageReader.warm``: its document workers
    start during the search and the pages' latency, not after a PDF has arrived; a no-op
    once done)."""
    if reader is not None:
        reader.warm()
    state.usage.searches += 1
    try:
        results: list[SearchResult] = await search.search(topic)
    except SearchError as exc:
        state.note(f'The search for "{topic}" failed: {exc}.')
        return Finding(topic=topic, error=str(exc))
    except Exception as exc:  # a broken provider must not kill the run
        log.exception("search provider crashed on %r", topic)
        state.note(f'The search for "{topic}" failed: {type(exc).__name__}.')
        return Finding(topic=topic, error=type(exc).__name__)
    return Finding(topic=topic, results=results)
