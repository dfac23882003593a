"""Shared fixtures. Database fixtures run each test on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from storage import Database, Store
from tests.env import clean_environ
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.pg import throwaway_database


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database: a file in tmp_path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'fathom.db'}"
        return
    server_url = os.environ.get("TEST_DATABASE_URL")
    if not server_url:
        pytest.skip("TEST_DATABASE_URL is not set; PostgreSQL tests skipped")
    with throwaway_database(server_url) as url:
        yield url


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """A migrated database (through the real Alembic migrations)."""
    db = Database(database_url)
    await db.upgrade()
    try:
        yield db
    finally:
        await db.dispose()


@pytest.fixture
def store(database: Database) -> Store:
    return Store(database)


# --- fakes of the LLM and search services (engine and CLI tests) -------------------------

FAKE_API_KEY = "fake-key"


@pytest.fixture
def llm_server() -> Iterator[FakeLLMServer]:
    """A fake OpenAI-compatible endpoint on 127.0.0.1 (script it with ``.fake.script``)."""
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def search_server() -> Iterator[FakeSearchServer]:
    """A fake SearXNG on 127.0.0.1 (``.fake.queries``, ``.fake.fail_next``, ``.fake.empty``)."""
    with FakeSearchServer() as server:
        yield server


@pytest.fixture
def cli_env(
    llm_server: FakeLLMServer, search_server: FakeSearchServer, tmp_path: Path
) -> dict[str, str]:
    """Environment for a ``fathom`` subprocess against the fakes and a SQLite file in tmp_path.

    Inherited FATHOM_*/OPENAI_*/SEARXNG_*/DATABASE_URL variables are dropped so the
    developer's own settings never leak in; the search cache is off so every search the
    engine makes reaches the fake.
    """
    env = clean_environ()
    env.update(
        OPENAI_BASE_URL=llm_server.base_url,
        OPENAI_API_KEY=FAKE_API_KEY,
        FATHOM_SEARCH="searxng",
        SEARXNG_URL=search_server.url,
        DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}",
        FATHOM_SEARCH_CACHE_TTL="0",
        FATHOM_LLM_MAX_RETRIES="1",
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
    )
    return env
