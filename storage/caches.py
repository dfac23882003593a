"""The caches: search results by (provider, query) and the main texts of pages by URL.

Both are plain rows with a creation time: a read older than the caller's ``max_age`` is a
miss, a write replaces the older copy (``INSERT ... ON CONFLICT DO UPDATE``), and
:meth:`CacheStore.prune_caches` deletes what no read would take any more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Table, delete, select
from sqlalchemy.engine import Connection

from storage.db import Database
from storage.sql import upsert_for
from storage.tables import PageCacheEntry, SearchCacheEntry, utcnow

# search_cache.query is VARCHAR(1024); longer queries are simply not cached.
MAX_CACHED_QUERY_BYTES = 1024

_cache = cast(Table, SearchCacheEntry.__table__)
_pages = cast(Table, PageCacheEntry.__table__)


class CacheStore:
    """Search results and page texts kept for reuse until their time to live ends."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._upsert = upsert_for(database.dialect)

    # -- search cache -------------------------------------------------------------------

    async def cache_get(
        self, provider: str, query: str, max_age: timedelta
    ) -> list[dict[str, Any]] | None:
        """Cached results younger than ``max_age``; None for a miss or a stale entry."""
        if not _cacheable(query):
            return None
        stmt = select(_cache.c.results, _cache.c.created_at).where(
            _cache.c.provider == provider, _cache.c.query == query
        )

        def work(conn: Connection) -> list[dict[str, Any]] | None:
            row = conn.execute(stmt).first()
            if row is None or row.created_at < utcnow() - max_age:
                return None
            return list(row.results)

        return await self._db.run(work)

    async def cache_put(self, provider: str, query: str, results: Sequence[dict[str, Any]]) -> None:
        if not _cacheable(query):
            return
        insert_entry = self._upsert(_cache).values(
            provider=provider, query=query, results=list(results), created_at=utcnow()
        )
        stmt = insert_entry.on_conflict_do_update(
            index_elements=[_cache.c.provider, _cache.c.query],
            set_={
                "results": insert_entry.excluded.results,
                "created_at": insert_entry.excluded.created_at,
            },
        )
        await self._db.run(lambda conn: conn.execute(stmt))

    # -- page cache ---------------------------------------------------------------------

    async def page_get(self, url: str, max_age: timedelta) -> tuple[str, str] | None:
        """The cached main text of the page at ``url`` and the address it was read at, when
        younger than ``max_age``; None otherwise."""
        stmt = select(_pages.c.url, _pages.c.final_url, _pages.c.text, _pages.c.created_at).where(
            _pages.c.key == _page_key(url)
        )

        def work(conn: Connection) -> tuple[str, str] | None:
            row = conn.execute(stmt).first()
            if row is None or row.url != url or row.created_at < utcnow() - max_age:
                return None
            return row.final_url, row.text

        return await self._db.run(work)

    async def page_put(self, url: str, final_url: str, text: str) -> None:
        """Keep the main text of the page at ``url`` (replacing an older copy)."""
        insert_entry = self._upsert(_pages).values(
            key=_page_key(url), url=url, final_url=final_url, text=text, created_at=utcnow()
        )
        stmt = insert_entry.on_conflict_do_update(
            index_elements=[_pages.c.key],
            set_={
                "url": insert_entry.excluded.url,
                "final_url": insert_entry.excluded.final_url,
                "text": insert_entry.excluded.text,
                "created_at": insert_entry.excluded.created_at,
            },
        )
        await self._db.run(lambda conn: conn.execute(stmt))

    # -- both ---------------------------------------------------------------------------

    async def prune_caches(
        self, *, search_older_than: timedelta, pages_older_than: timedelta
    ) -> int:
        """Delete search results and page texts past their time to live (never read again)."""
        now = utcnow()
        searches = delete(_cache).where(_cache.c.created_at < now - search_older_than)
        pages = delete(_pages).where(_pages.c.created_at < now - pages_older_than)

        def work(conn: Connection) -> int:
            return int(conn.execute(searches).rowcount or 0) + int(
                conn.execute(pages).rowcount or 0
            )

        return await self._db.run(work)


def _cacheable(query: str) -> bool:
    return len(query.encode("utf-8")) <= MAX_CACHED_QUERY_BYTES


def _page_key(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()
