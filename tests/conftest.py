"""Shared fixtures. Database fixtures run each test on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from bots.dingtalk.api import DingTalkApi
from bots.platforms import Registry
from storage import Database, Store
from tests.chat_app import LifespanServer, ServedFathom, fathom_settings
from tests.databases import MigratedTemplates, throwaway_database
from tests.env import clean_environ, is_fathom_setting
from tests.fakes import FakeLLMServer, FakeSearchServer, FakeSlackServer
from tests.fakes.dingtalk import CLIENT_ID as DINGTALK_ID
from tests.fakes.dingtalk import CLIENT_SECRET as DINGTALK_SECRET
from tests.fakes.dingtalk import FakeDingTalkServer
from tests.fakes.feishu import FakeFeishuServer
from tests.fakes.teams import FakeTeamsServer

if TYPE_CHECKING:
    from core.research.service import Research


@pytest.fixture(scope="session")
def templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    """The session's migrated template databases (``tests.databases``)."""
    made = MigratedTemplates(tmp_path_factory.mktemp("templates"), pg_server_url())
    yield made
    made.close()


def pg_server_url() -> str | None:
    return os.environ.get("TEST_DATABASE_URL") or None


def require_pg_server() -> str:
    server_url = pg_server_url()
    if not server_url:
        pytest.skip("TEST_DATABASE_URL is not set; PostgreSQL tests skipped")
    return server_url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, templates: MigratedTemplates
) -> Iterator[str]:
    """A URL of a migrated database of this test's own: a copy of the session's migrated
    template (a file in tmp_path, or a PostgreSQL database made from the template)."""
    if request.param == "sqlite":
        yield templates.sqlite(tmp_path / "fathom.db")
        return
    require_pg_server()
    with templates.postgresql() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database (no schema): a file in tmp_path, or a new PostgreSQL
    database. For the tests of the migrations themselves."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
        return
    with throwaway_database(require_pg_server()) as url:
        yield url


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """A handle on this test's migrated database."""
    db = Database(database_url)
    try:
        yield db
    finally:
        await db.dispose()


@pytest.fixture
def store(database: Database) -> Store:
    return Store(database)


# --- fakes of the LLM and search services (engine and CLI tests) -------------------------

FAKE_API_KEY = "fake-key"


# Each fake runs for the whole session (per xdist worker) and is reset before every test:
# starting and stopping a server cost 0.2 s, and most tests use two or three. A test that
# needs a special behaviour asks the running fake for it.


@pytest.fixture(scope="session")
def _llm_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="session")
def _search_server() -> Iterator[FakeSearchServer]:
    with FakeSearchServer() as server:
        yield server


@pytest.fixture(scope="session")
def _slack_server() -> Iterator[FakeSlackServer]:
    with FakeSlackServer() as server:
        yield server


@pytest.fixture(scope="session")
def _feishu_server() -> Iterator[FakeFeishuServer]:
    with FakeFeishuServer() as server:
        yield server


@pytest.fixture(scope="session")
def _dingtalk_server() -> Iterator[FakeDingTalkServer]:
    with FakeDingTalkServer() as server:
        yield server


@pytest.fixture(scope="session")
def _teams_server() -> Iterator[FakeTeamsServer]:
    with FakeTeamsServer() as server:
        yield server


@pytest.fixture
def llm_server(_llm_server: FakeLLMServer) -> FakeLLMServer:
    """A fake OpenAI-compatible endpoint on 127.0.0.1 (script it with ``.fake.script``)."""
    _llm_server.fake.reset()
    return _llm_server


@pytest.fixture
def search_server(_search_server: FakeSearchServer) -> FakeSearchServer:
    """A fake SearXNG on 127.0.0.1 (``.fake.queries``, ``.fake.fail_next``, ``.fake.empty``)."""
    _search_server.fake.reset()
    return _search_server


@pytest.fixture
def slack_server(_slack_server: FakeSlackServer) -> FakeSlackServer:
    """A fake Slack Web API on 127.0.0.1 (``.fake.calls``, ``.fake.fail_next``)."""
    _slack_server.reset()
    return _slack_server


@pytest.fixture
def feishu_server(_feishu_server: FakeFeishuServer) -> FakeFeishuServer:
    """A fake Feishu Open API and long connection on 127.0.0.1 (``.fake.calls``, ...)."""
    _feishu_server.reset()
    return _feishu_server


@pytest.fixture
def dingtalk_server(_dingtalk_server: FakeDingTalkServer) -> FakeDingTalkServer:
    """A fake DingTalk OpenAPI, stream gateway and session webhooks on 127.0.0.1."""
    _dingtalk_server.reset()
    return _dingtalk_server


@pytest.fixture
def teams_server(_teams_server: FakeTeamsServer) -> FakeTeamsServer:
    """A fake Bot Connector, identity platform token endpoint and Bot Framework OpenID
    metadata (with a real signing key) on 127.0.0.1."""
    _teams_server.reset()
    return _teams_server


@pytest.fixture
async def dingtalk_api(dingtalk_server: FakeDingTalkServer) -> AsyncIterator[DingTalkApi]:
    """The real DingTalk API client, with the fake's app credentials, against the fake."""
    async with httpx.AsyncClient(timeout=5.0) as http:
        yield DingTalkApi(
            http,
            client_id=DINGTALK_ID,
            client_secret=DINGTALK_SECRET,
            api_url=dingtalk_server.url,
        )


@pytest.fixture
def cli_env(
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    tmp_path: Path,
    templates: MigratedTemplates,
) -> dict[str, str]:
    """Environment for a ``fathom`` subprocess against the fakes and a migrated SQLite file in
    tmp_path.

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
        DATABASE_URL=templates.sqlite(tmp_path / "cli.db"),
        FATHOM_SEARCH_CACHE_TTL="0",
        FATHOM_ALLOW_PRIVATE_FETCH="1",  # the fake search's pages are on 127.0.0.1
        FATHOM_LLM_MAX_RETRIES="1",
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
    )
    return env


# --- the served app (end-to-end platform tests) -------------------------------------------

ServeFathom = Callable[..., Awaitable[ServedFathom]]


@pytest.fixture
async def store_of(cli_env: dict[str, str]) -> AsyncIterator[Store]:
    """The database a ``fathom`` subprocess of ``cli_env`` uses (``fathom mcp``), read from
    the test."""
    database = Database(cli_env["DATABASE_URL"])
    try:
        yield Store(database)
    finally:
        await database.dispose()


@pytest.fixture
async def serve_fathom(
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    monkeypatch: pytest.MonkeyPatch,
    templates: MigratedTemplates,
) -> AsyncIterator[ServeFathom]:
    """``await serve_fathom(database_url=None, registry=None, **env)``: the real ``fathom
    serve`` app (its lifespan, job runner and every platform ``env`` configures, out of
    ``registry``: default ``bots.platforms.PLATFORMS``) against the LLM and search fakes, on
    a migrated SQLite file unless a database URL is given. Stopped after the test."""
    for name in list(os.environ):
        if is_fathom_setting(name):
            monkeypatch.delenv(name)
    from bots.server import create_app

    started: list[ServedFathom] = []

    async def serve(
        database_url: str | None = None, registry: Registry | None = None, **env: str
    ) -> ServedFathom:
        url = database_url or templates.sqlite(tmp_path / f"serve{len(started)}.db")
        settings = fathom_settings(url, llm_server, search_server, registry=registry, **env)
        server = await asyncio.to_thread(LifespanServer(create_app(settings)).start)
        database = Database(url)
        served = ServedFathom(
            server.url, httpx.AsyncClient(timeout=10), Store(database), database, server
        )
        started.append(served)
        return served

    yield serve
    llm_server.fake.latency = search_server.fake.latency = 0.0  # let held runs finish
    for served in started:
        await served.http.aclose()
        await asyncio.to_thread(served.server.stop)
        await served.database.dispose()


@pytest.fixture
async def service_for(
    database: Database, search_server: FakeSearchServer
) -> AsyncIterator[Callable[..., Research]]:
    """``service_for(base_url, search_url=None)``: a Research whose planner and
    writer use that endpoint (model ``planner-model``, the writer ``writer-model``; no SDK
    retries), searching the SearXNG at ``search_url`` (default: the fake)."""
    from core.llm import ChatModel
    from core.research.service import Research
    from core.search import SearxngProvider

    closers: list[Callable[[], Awaitable[None]]] = []
    http = httpx.AsyncClient(trust_env=False)
    closers.append(http.aclose)

    def make(base_url: str, search_url: str | None = None) -> Research:
        models = [
            ChatModel(model=name, api_key=FAKE_API_KEY, base_url=base_url, max_retries=0)
            for name in ("planner-model", "writer-model")
        ]
        closers.extend(model.aclose for model in models)
        search = SearxngProvider(http, base_url=search_url or search_server.url, base_delay=0.01)
        planner, writer = models
        return Research(store=Store(database), planner=planner, writer=writer, search=search)

    try:
        yield make
    finally:
        for close in reversed(closers):
            await close()
