"""Shared fixtures. Database fixtures run each test on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from storage import Database, Store


def _throwaway_postgres_database(server_url: str) -> Iterator[str]:
    """Create an empty database on the server of ``server_url``; drop it afterwards."""
    server = make_url(server_url)
    conninfo = server.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"fathom_t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(drivername="postgresql+psycopg", database=name).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database: a file in tmp_path, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'fathom.db'}"
        return
    server_url = os.environ.get("TEST_DATABASE_URL")
    if not server_url:
        pytest.skip("TEST_DATABASE_URL is not set; PostgreSQL tests skipped")
    yield from _throwaway_postgres_database(server_url)


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
