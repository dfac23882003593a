"""The database handle: one async engine, its session factory and schema management.

Alembic owns the schema. ``ensure_schema`` runs on every CLI start, so the common case
(schema already current) is a single cheap query and must not import Alembic at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

# Keep equal to the newest migration's revision id (a test checks it against Alembic).
HEAD_REVISION = "0003"

# Arbitrary constant: serialises concurrent `upgrade()` calls from several replicas.
_PG_MIGRATION_LOCK = 0x46A7404D


def normalize_url(url: str) -> str:
    """Map the URLs people paste (``postgres://``, ``sqlite:///``) to our async drivers."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if url.startswith("sqlite://"):
        return "sqlite+aiosqlite://" + url[len("sqlite://") :]
    return url


def _migrations_dir() -> str:
    import migrations  # our package; resolved via __file__ so installs and checkouts both work

    return str(Path(migrations.__file__).resolve().parent)


class Database:
    """An async engine plus session factory for SQLite (WAL) or PostgreSQL (psycopg 3)."""

    def __init__(self, url: str, *, busy_timeout_ms: int = 10_000, echo: bool = False) -> None:
        self.url = normalize_url(url)
        parsed = make_url(self.url)
        self.dialect: str = parsed.get_backend_name()
        if self.dialect == "sqlite":
            path = parsed.database
            if path and path != ":memory:" and not path.startswith("file:"):
                Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.engine: AsyncEngine = create_async_engine(
                self.url, echo=echo, connect_args={"timeout": busy_timeout_ms / 1000}
            )
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas(busy_timeout_ms))
        else:
            self.engine = create_async_engine(
                self.url,
                echo=echo,
                pool_pre_ping=True,
                pool_size=5,
                max_overflow=10,
                pool_recycle=1800,
            )
        self.sessionmaker = async_sessionmaker(self.engine, expire_on_commit=False)

    async def upgrade(self) -> None:
        """Run Alembic ``upgrade head`` on this database (imports Alembic lazily)."""
        async with self.engine.connect() as conn:
            if self.dialect == "sqlite":
                # Batch migrations recreate tables; with FKs on, DROP TABLE would cascade.
                await conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            elif self.dialect == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK}
                )
            try:
                await conn.run_sync(_alembic_upgrade, self.url)
                await conn.commit()
            finally:
                if self.dialect == "sqlite":
                    await conn.invalidate()  # never hand a connection without FKs back to the pool

    async def schema_is_current(self) -> bool:
        """True when ``alembic_version`` holds exactly ``HEAD_REVISION`` (no Alembic import)."""
        async with self.engine.connect() as conn:
            if not await conn.run_sync(lambda c: inspect(c).has_table("alembic_version")):
                return False
            rows = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
        return [r[0] for r in rows] == [HEAD_REVISION]

    async def ensure_schema(self) -> None:
        """Upgrade only when needed; what every process start calls."""
        if not await self.schema_is_current():
            await self.upgrade()

    async def ping(self) -> bool:
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except (TimeoutError, SQLAlchemyError, OSError):
            return False
        return True

    async def dispose(self) -> None:
        await self.engine.dispose()


def _sqlite_pragmas(busy_timeout_ms: int) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in (
            "journal_mode=WAL",
            f"busy_timeout={int(busy_timeout_ms)}",
            "foreign_keys=ON",
            "synchronous=NORMAL",
        ):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    return on_connect


def _alembic_upgrade(connection: Connection, url: str) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", _migrations_dir())
    config.attributes["connection"] = connection
    config.attributes["url"] = url
    command.upgrade(config, "head")
