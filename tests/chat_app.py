"""The real ``fathom serve`` app against fakes, for end-to-end platform tests.

``serve_fathom`` (a fixture in conftest) starts the Starlette app with its lifespan (runtime,
job runner, every configured adapter) under uvicorn in a thread, on a SQLite file (or the
given database), with the fake LLM and search services; a platform test adds its own
settings (its fake's URL, its credentials) and gets a :class:`ServedFathom`: the app's URL,
an HTTP client, the store, and waits for runs to be delivered. A platform's test is then a
few lines: send a delivery, wait, read what the platform's fake recorded.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Self

import httpx
import uvicorn
from sqlalchemy import text

from bots.composition import AppSettings, load_app_settings
from bots.platforms import PLATFORMS, Registry
from storage import Database, RunRecord, Store
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.fakes.server import BackgroundServer

FAKE_API_KEY = "fake-key"


async def wait_for(
    predicate: Callable[[], Any], within: float = 15.0, interval: float = 0.02
) -> Any:
    """Poll ``predicate`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within} s")
        await asyncio.sleep(interval)


class LifespanServer(BackgroundServer):
    """BackgroundServer, but with the app's lifespan (our runtime) running."""

    def start(self, timeout: float = 20.0) -> Self:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        sock.listen(2048)
        self._sock, self.port = sock, sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="on", log_config=None
        )
        self._server = server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name=f"app:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the app did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None


def fathom_settings(
    database_url: str,
    llm: FakeLLMServer,
    search: FakeSearchServer,
    registry: Registry | None = None,
    **extra: str,
) -> AppSettings:
    """Settings of a served app against the fakes (no platform: add its own in ``extra``)."""
    values: dict[str, Any] = {
        "DATABASE_URL": database_url,
        "OPENAI_API_KEY": FAKE_API_KEY,
        "OPENAI_BASE_URL": llm.base_url,
        "FATHOM_SEARCH": "searxng",
        "SEARXNG_URL": search.url,
        "FATHOM_SEARCH_CACHE_TTL": "0",
        "FATHOM_ALLOW_PRIVATE_FETCH": "1",  # the fake search's pages are on 127.0.0.1
        "FATHOM_LLM_MAX_RETRIES": "1",
    }
    values.update(extra)
    return load_app_settings(registry or PLATFORMS, _env_file=None, **values)


@dataclass
class ServedFathom:
    """A running ``fathom serve`` app and handles on its database."""

    url: str
    http: httpx.AsyncClient
    store: Store
    database: Database
    server: LifespanServer

    async def runs(self, requested_by: str) -> list[RunRecord]:
        return await self.store.runs.recent_runs_for_user(requested_by, 100)

    async def delivered(self, requested_by: str, count: int = 1) -> list[RunRecord]:
        """Wait until ``count`` runs of ``requested_by`` have finished and been delivered
        (their report posted, or given up on); newest first."""

        async def done() -> list[RunRecord] | None:
            runs = await self.runs(requested_by)
            ok = len(runs) >= count and all(
                r.finished_at and r.delivery in ("posted", "failed") for r in runs
            )
            return runs if ok else None

        runs: list[RunRecord] = await wait_for(done, within=30)
        return runs

    async def readyz(self) -> dict[str, Any]:
        response = await self.http.get(f"{self.url}/readyz")
        data: dict[str, Any] = response.json()
        return data


@asynccontextmanager
async def runs_table_away(database: Database) -> AsyncIterator[None]:
    """While the body runs, every statement on the runs fails for real (the table is
    renamed), as when the database has lost its schema or is being restored."""
    async with database.engine.begin() as conn:
        await conn.execute(text("ALTER TABLE research_runs RENAME TO research_runs_away"))
    try:
        yield
    finally:
        async with database.engine.begin() as conn:
            await conn.execute(text("ALTER TABLE research_runs_away RENAME TO research_runs"))
