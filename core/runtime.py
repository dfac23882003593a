"""The composition root: settings in, a wired :class:`ResearchService` out.

Every entry point (CLI, ``fathom serve``, workers) builds its clients here so
they are created once, injected everywhere, and closed together.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from core.config import Settings
from core.llm import LLMClients
from core.search import SearchProvider, build_search_provider
from core.service import ResearchService
from storage import Database, Store


@dataclass
class Runtime:
    settings: Settings
    database: Database
    store: Store
    service: ResearchService
    search: SearchProvider
    llm: LLMClients


@asynccontextmanager
async def open_database(settings: Settings, *, upgrade: bool = True) -> AsyncIterator[Database]:
    """The database with its schema brought to head (cheap when already current).

    ``upgrade=False`` leaves the schema alone (``fathom serve --no-upgrade``, when
    migrations run as a separate deploy step).
    """
    database = Database(settings.database_url)
    try:
        if upgrade:
            await database.ensure_schema()
        yield database
    finally:
        await database.dispose()


@asynccontextmanager
async def open_runtime(settings: Settings, *, upgrade: bool = True) -> AsyncIterator[Runtime]:
    """Everything a research needs; raises ``ConfigError`` before touching anything."""
    settings.require_llm()
    settings.require_search()
    async with (
        open_database(settings, upgrade=upgrade) as database,
        httpx.AsyncClient(
            timeout=settings.search_timeout,
            headers={"User-Agent": "fathom-bot/0.1 (+https://github.com/fathom-bot)"},
            follow_redirects=True,
        ) as http,
    ):
        store = Store(database)
        search = build_search_provider(settings, http, store)
        llm = LLMClients.from_settings(settings)
        try:
            service = ResearchService(
                store=store, planner=llm.planner, writer=llm.writer, search=search
            )
            yield Runtime(settings, database, store, service, search, llm)
        finally:
            await llm.aclose()
