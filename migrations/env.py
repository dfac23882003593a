"""Alembic environment.

``storage.Database.upgrade`` hands us a live (sync-facing) connection through
``config.attributes["connection"]``; when Alembic is driven from its own CLI we build an
async engine from ``attributes["url"]``, ``sqlalchemy.url`` or ``DATABASE_URL``.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import MetaData
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from storage.db import normalize_url
from storage.tables import Base, ours

config = context.config


def _models() -> list[MetaData]:
    """What autogenerate compares the database with: the shared tables and each registered
    platform's own (``ChatPlatform.metadata``; imported only for Alembic's own CLI, never
    when a process upgrades its database)."""
    from bots.platforms import classes

    return [Base.metadata, *(cls.metadata for cls in classes() if cls.metadata is not None)]


def _url() -> str:
    url = (
        config.attributes.get("url")
        or config.get_main_option("sqlalchemy.url")
        or os.environ.get("DATABASE_URL", "sqlite+aiosqlite:///fathom.db")
    )
    return normalize_url(str(url))


def _run(connection: Connection, models: list[MetaData] | None = None) -> None:
    context.configure(
        connection=connection,
        target_metadata=models,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
        include_object=ours,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url(), poolclass=NullPool)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_run, _models())
    finally:
        await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=_models(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif (connection := config.attributes.get("connection")) is not None:
    _run(connection)
else:
    asyncio.run(_run_async())
