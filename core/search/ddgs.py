"""DuckDuckGo & co. through the ``ddgs`` package: the default, needs no key.

``ddgs`` is synchronous and slow to import, so it is imported on first use and
run in a worker thread; its exceptions become SearchError like every provider's.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any, Protocol

from core.models import SearchResult
from core.search.base import SearchError, normalise_results
from core.search.failure import TIMED_OUT
from core.search.query import QueryLimit
from core.words.reasons import Reason

logger = logging.getLogger(__name__)


class TextSearcher(Protocol):
    """The part of ``ddgs.DDGS`` we use."""

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]: ...


def default_ddgs_factory(timeout: float) -> Callable[[], TextSearcher]:
    """A factory of real ``DDGS`` clients, importing ``ddgs`` only when first called."""

    def make() -> TextSearcher:
        from ddgs import DDGS

        client: TextSearcher = DDGS(timeout=max(1, math.ceil(timeout)))
        return client

    return make


def _is_no_results(exc: Exception) -> bool:
    """ddgs raises a bare DDGSException("No results found.") when every engine answered empty."""
    from ddgs.exceptions import DDGSException

    return type(exc) is DDGSException and "no results" in str(exc).lower()


class DdgsProvider:
    """Metasearch via ``DDGS().text(query, max_results=n)`` -> ``{title, href, body}`` (text
    results carry no date; a ``date``, as ddgs's news results have, is read when present)."""

    name = "ddgs"
    #: The engines ddgs asks take 400 characters at most (Brave's documented limit; DuckDuckGo
    #: cuts a query at 500, duckduckgo/duckduckgo#86): a longer query is shortened first.
    query_limit = QueryLimit(400)

    def __init__(
        self,
        *,
        max_results: int = 8,
        timeout: float = 20.0,
        ddgs_factory: Callable[[], TextSearcher] | None = None,
    ) -> None:
        self.max_results = max_results
        self._timeout = timeout
        self._factory = ddgs_factory or default_ddgs_factory(timeout)

    def _search_sync(self, query: str) -> list[dict[str, Any]]:
        return self._factory().text(query, max_results=self.max_results)

    async def search(self, query: str) -> list[SearchResult]:
        query = self.query_limit.fit(query, self.name)
        try:
            # ddgs enforces its own timeout; the outer one only guards against a wedged thread.
            # (asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
            # cancellation that arrives as the thread finishes.)
            async with asyncio.timeout(self._timeout * 2 + 5):
                raw = await asyncio.to_thread(self._search_sync, query)
        except TimeoutError:
            raise SearchError(TIMED_OUT.prefixed(self.name)) from None
        except Exception as exc:
            if _is_no_results(exc):
                return []
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            raise SearchError(Reason.verbatim(reason).prefixed(self.name)) from exc
        if not isinstance(raw, list):
            raise SearchError(
                Reason("unexpected response (not a list)", "意外的响应（不是列表）").prefixed(
                    self.name
                )
            )
        items = [i for i in raw if isinstance(i, dict)]
        return normalise_results(
            ((i.get("title"), i.get("href"), i.get("body"), i.get("date")) for i in items),
            self.max_results,
        )
