"""Migrated databases for tests, migrated once per test session (per xdist worker).

Running the 14 Alembic migrations took most of every database test's time. A session
migrates one SQLite file and one PostgreSQL database (the *templates*) the first time a test
asks; every test then gets a copy of its own: the SQLite file copied, the PostgreSQL database
made with ``CREATE DATABASE ... TEMPLATE``. The migrations themselves are still run, up and
down, by ``tests/test_migrations.py`` on both backends.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from storage import Database

#: The name every test database on the server starts with (templates and copies).
PG_PREFIX = "fathom_t"


def _admin_conninfo(server_url: str) -> str:
    return make_url(server_url).set(drivername="postgresql").render_as_string(hide_password=False)


def _database_url(server_url: str, name: str) -> str:
    return (
        make_url(server_url)
        .set(drivername="postgresql+psycopg", database=name)
        .render_as_string(hide_password=False)
    )


def _create(server_url: str, name: str, template: str | None = None) -> None:
    clause = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(_admin_conninfo(server_url), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"{clause}')


def _drop(server_url: str, name: str) -> None:
    with psycopg.connect(_admin_conninfo(server_url), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _migrate(url: str) -> None:
    async def upgrade() -> None:
        database = Database(url)
        try:
            await database.upgrade()
        finally:
            await database.dispose()  # no connection may stay: a template must be idle

    # In a thread of its own: the first test to ask may already run an event loop.
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, upgrade()).result()


@contextmanager
def throwaway_database(server_url: str, prefix: str = PG_PREFIX) -> Iterator[str]:
    """An empty database on the server of ``server_url``, dropped afterwards; its
    SQLAlchemy URL (psycopg 3 driver)."""
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    _create(server_url, name)
    try:
        yield _database_url(server_url, name)
    finally:
        _drop(server_url, name)


class MigratedTemplates:
    """The session's migrated templates; :meth:`sqlite` and :meth:`postgresql` hand out
    copies. Each template is made on first use, so a run of SQLite tests never touches a
    PostgreSQL server."""

    def __init__(self, folder: Path, server_url: str | None) -> None:
        self._folder = folder
        self._server_url = server_url
        self._sqlite: Path | None = None
        self._pg: str | None = None

    def sqlite(self, file: Path) -> str:
        """Copy the migrated SQLite template to ``file``; its URL."""
        if self._sqlite is None:
            template = self._folder / "template.db"
            _migrate(f"sqlite+aiosqlite:///{template}")
            self._sqlite = template  # closed, so checkpointed: the file alone is complete
        shutil.copyfile(self._sqlite, file)
        return f"sqlite+aiosqlite:///{file}"

    @contextmanager
    def postgresql(self) -> Iterator[str]:
        """A new PostgreSQL database made from the migrated template, dropped afterwards."""
        server_url = self._server_url
        assert server_url is not None, "no PostgreSQL server (TEST_DATABASE_URL)"
        if self._pg is None:
            name = f"{PG_PREFIX}_template_{uuid.uuid4().hex[:12]}"
            _create(server_url, name)
            try:
                _migrate(_database_url(server_url, name))
            except BaseException:
                _drop(server_url, name)
                raise
            self._pg = name
        copy = f"{PG_PREFIX}_{uuid.uuid4().hex[:16]}"
        _create(server_url, copy, template=self._pg)
        try:
            yield _database_url(server_url, copy)
        finally:
            _drop(server_url, copy)

    def close(self) -> None:
        """Drop the PostgreSQL template (the SQLite one goes with the session's temp dir)."""
        if self._pg is not None and self._server_url is not None:
            _drop(self._server_url, self._pg)
            self._pg = None
