"""The database handle: its engines, its transactions (:meth:`Database.run`) and the schema.

Alembic owns the schema. ``ensure_schema`` runs on every CLI start, so the common case
(schema already current) is a single cheap query and must not import Alembic at all. Which
schemas this release's code runs on is :mod:`storage.schema`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.pool import Pool

from storage.schema import HEAD_REVISION, Schema, SchemaError, SchemaState, read_schema

# Arbitrary constant: serialises concurrent `upgrade()` calls from several replicas.
_PG_MIGRATION_LOCK = 0x46A7404D

T = TypeVar("T")


class StorageUnavailable(RuntimeError):
    """The database did not answer (connection lost, locked past the busy timeout, pool
    exhausted): nothing was committed, and trying again later may work."""


#: The drivers Fathom runs on (``normalize_url`` maps the plain schemes to them).
SUPPORTED_DRIVERS = ("sqlite+aiosqlite", "postgresql+psycopg")
#: Seconds a PostgreSQL connection attempt may take (a host that drops packets would
#: otherwise hold a command for the operating system's TCP timeout, minutes).
PG_CONNECT_TIMEOUT = 10
_URL_FORMS = "sqlite+aiosqlite:///<file> or postgresql+psycopg://<user>:<password>@<host>/<db>"
_PASSWORD_IN_URL = re.compile(r"(://[^/@:]*:)[^@/]*@")


def normalize_url(url: str) -> str:
    """Map the URLs people paste (``postgres://``, ``sqlite:///``) to our async drivers."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if url.startswith("sqlite://"):
        return "sqlite+aiosqlite://" + url[len("sqlite://") :]
    return url


def masked_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (also when it does not parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # a port that is not a number raises ValueError
        return _PASSWORD_IN_URL.sub(r"\1***@", url)


def check_url(url: str) -> str:
    """The normalized ``DATABASE_URL``; :class:`ValueError` (one line, password masked) when
    it does not parse, names a database Fathom does not run on, or is an SQLite file in a
    folder that does not exist (the folder is not created: a typo must not scatter files)."""
    normalized = normalize_url(url.strip())
    try:
        parsed = make_url(normalized)
    except (ArgumentError, ValueError):
        raise ValueError(f"{masked_url(url)!r} is not a database URL; use {_URL_FORMS}") from None
    if parsed.drivername not in SUPPORTED_DRIVERS:
        raise ValueError(
            f"{masked_url(url)} is not supported: Fathom runs on SQLite or PostgreSQL "
            f"({_URL_FORMS})"
        )
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if path and path != ":memory:" and not path.startswith("file:"):
        folder = Path(path).expanduser().parent
        if not folder.is_dir():
            raise ValueError(
                f"the SQLite file {path} is in a folder that does not exist ({folder}); "
                "create the folder first, or point DATABASE_URL elsewhere"
            )
    return normalized


def connection_problem(error: BaseException) -> str:
    """The database's own reason a connection failed, in one line (the first line of the
    driver's message: "Connection refused", "database "x" does not exist")."""
    reason: BaseException = error
    while isinstance(reason, StorageUnavailable) and reason.__cause__ is not None:
        reason = reason.__cause__
    reason = getattr(reason, "orig", None) or reason
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    return lines[0] if lines else type(reason).__name__


def _create_private(path: Path) -> None:
    """A new SQLite file readable by its owner only (it keeps reports, guidance, a Slack
    installation's tokens); SQLite gives its -wal and -shm files the same mode. An existing
    file is left as it is; one that cannot be made is left to SQLite to report."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _migrations_dir() -> str:
    import migrations  # our package; resolved via __file__ so installs and checkouts both work

    return str(Path(migrations.__file__).resolve().parent)


class Database:
    """An async engine for SQLite (WAL) or PostgreSQL (psycopg 3), and :meth:`run` for the store.

    :meth:`run` executes one transaction as a plain function of a sync ``Connection``.
    On PostgreSQL it runs on the async engine (one greenlet switch per transaction instead of
    one per statement). On a SQLite file it runs in one worker thread of this process, on a
    sync pysqlite connection. That thread is the only one of the process that reads or
    writes through the store, so:

    - a transaction costs one thread hop; aiosqlite costs three or four hops per statement
      (cursor, execute, fetch, close: about 0.1 ms each), which made every store call 2-4x
      slower than the SQL itself;
    - in-process writers never meet in SQLite's busy handler, which sleeps with back-off
      (up to 100 ms a try): under 100 concurrent runs that turned 2 ms writes into 200 ms
      waits. The busy timeout still settles contention with other processes.

    ``engine`` (aiosqlite on SQLite) stays for Alembic, the schema check and library users
    such as the Slack installation store.
    """

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_ms: int = 10_000,
        echo: bool = False,
        pool_size: int = 5,
        max_overflow: int = 10,
    ) -> None:
        self.url = normalize_url(url)
        parsed = make_url(self.url)
        self.dialect: str = parsed.get_backend_name()
        self._sync_engine: Engine | None = None
        self._executor: ThreadPoolExecutor | None = None
        if self.dialect == "sqlite":
            path = parsed.database
            in_memory = not path or path == ":memory:" or "mode=memory" in self.url
            self.engine: AsyncEngine = create_async_engine(
                self.url, echo=echo, connect_args={"timeout": busy_timeout_ms / 1000}
            )
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas(busy_timeout_ms))
            if not in_memory:  # a second engine would see another in-memory database
                if path and not path.startswith("file:"):
                    _create_private(Path(path).expanduser())
                self._sync_engine = create_engine(
                    parsed.set(drivername="sqlite+pysqlite"),
                    echo=echo,
                    # One thread uses it, so one connection; created and closed in that thread.
                    pool_size=1,
                    max_overflow=0,
                    connect_args={"timeout": busy_timeout_ms / 1000},
                )
                event.listen(self._sync_engine, "connect", _sqlite_pragmas(busy_timeout_ms))
        else:
            self.engine = create_async_engine(
                self.url,
                echo=echo,
                pool_pre_ping=True,
                # 5 + 10 measured best for 100 concurrent runs with PostgreSQL on the same
                # two CPUs (bench/README.md): 20 + 30 was slower, not faster.
                pool_size=pool_size,
                max_overflow=max_overflow,
                pool_recycle=1800,
                connect_args=(
                    {}
                    if "connect_timeout" in parsed.query
                    else {"connect_timeout": PG_CONNECT_TIMEOUT}
                ),
            )
        self.sessionmaker = async_sessionmaker(self.engine, expire_on_commit=False)

    async def run(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction: committed when it returns, rolled back if it raises.

        ``work`` must only touch the database through its connection (on SQLite it runs in
        another thread). A caller cancelled while ``work`` runs on SQLite does not stop it;
        transactions of this process still happen in the order they were started. When the
        database cannot be used right now, :class:`StorageUnavailable` is raised.
        """
        try:
            if self._sync_engine is None:
                async with self.engine.begin() as conn:
                    return await conn.run_sync(work)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fathom-db")
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self._run_sqlite, work)
        except (OperationalError, InterfaceError, PoolTimeout) as exc:
            reason = getattr(exc, "orig", None) or exc
            raise StorageUnavailable(f"database unavailable: {type(reason).__name__}") from exc

    @property
    def pool(self) -> Pool:
        """The connection pool that :meth:`run` uses (for diagnostics such as the benchmark)."""
        return self.engine.pool if self._sync_engine is None else self._sync_engine.pool

    def _run_sqlite(self, work: Callable[[Connection], T]) -> T:
        assert self._sync_engine is not None
        with self._sync_engine.begin() as conn:
            return work(conn)

    async def upgrade(self) -> None:
        """Run Alembic ``upgrade head`` on this database (imports Alembic lazily). A schema
        already newer than this release's is left as it is (:class:`SchemaError` for one
        this release cannot order)."""
        schema = await self.schema()
        if schema.state is SchemaState.AHEAD:
            return
        if schema.state is SchemaState.UNKNOWN:
            raise SchemaError(schema.describe())
        await self._alembic(_alembic_upgrade, HEAD_REVISION)

    async def downgrade(self, revision: str) -> None:
        """Run Alembic ``downgrade <revision>`` (the rollback of a release: with the code of
        the release that made the newer schema, which knows how to undo it)."""
        schema = await self.schema()
        if schema.state is SchemaState.AHEAD:
            raise SchemaError(f"{schema.describe()}; downgrade with the release that migrated it")
        if schema.state in (SchemaState.UNKNOWN, SchemaState.MISSING):
            raise SchemaError(schema.describe())
        target = Schema(revision)
        if target.state not in (SchemaState.BEHIND, SchemaState.CURRENT) and revision != "base":
            raise SchemaError(
                f"cannot downgrade to {revision!r}: this release knows revisions 0001 to "
                f"{HEAD_REVISION} (or `base`)"
            )
        await self._alembic(_alembic_downgrade, revision)

    async def _alembic(self, command: Callable[[Connection, str, str], None], to: str) -> None:
        async with self.engine.connect() as conn:
            if self.dialect == "sqlite":
                # Batch migrations recreate tables; with FKs on, DROP TABLE would cascade.
                await conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            elif self.dialect == "postgresql":
                await conn.execute(
                    text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK}
                )
            try:
                await conn.run_sync(command, self.url, to)
                await conn.commit()
            finally:
                if self.dialect == "sqlite":
                    await conn.invalidate()  # never hand a connection without FKs back to the pool

    async def schema(self) -> Schema:
        """The database's schema revision, as this release sees it (no Alembic import)."""
        return await self.run(read_schema)

    async def schema_is_usable(self) -> bool:
        """Whether this release's code runs on the database's schema: its own, or a newer
        release's (:mod:`storage.schema`)."""
        return (await self.schema()).state.usable

    async def ensure_schema(self) -> None:
        """Upgrade only when needed; what every process start calls. :class:`SchemaError`
        for a schema this release cannot order."""
        schema = await self.schema()
        if schema.state is SchemaState.UNKNOWN:
            raise SchemaError(schema.describe())
        if not schema.state.usable:
            await self.upgrade()

    async def ping(self) -> bool:
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        except (TimeoutError, SQLAlchemyError, OSError):
            return False
        return True

    async def dispose(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None and self._sync_engine is not None:
            # Its connection belongs to the worker thread: close it there, after queued work.
            await asyncio.get_running_loop().run_in_executor(executor, self._sync_engine.dispose)
            executor.shutdown(wait=False)
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


def _alembic_config(connection: Connection, url: str) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", _migrations_dir())
    config.attributes["connection"] = connection
    config.attributes["url"] = url
    return config


def _alembic_upgrade(connection: Connection, url: str, revision: str) -> None:
    from alembic import command

    command.upgrade(_alembic_config(connection, url), revision)


def _alembic_downgrade(connection: Connection, url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(_alembic_config(connection, url), revision)
