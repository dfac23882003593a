"""Search providers against real HTTP fakes on 127.0.0.1, ddgs mapping, cache and factory."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from ddgs.exceptions import DDGSException, RatelimitException
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from core.config import ConfigError
from core.models import SearchResult
from core.search import (
    BraveProvider,
    CachedSearch,
    DdgsProvider,
    SearchError,
    SearchProvider,
    SearxngProvider,
    TavilyProvider,
    build_search_provider,
    normalise_query,
)
from core.search.limit import LimitedSearch
from core.settings import Settings
from core.words.reasons import Reason
from tests.databases import MigratedTemplates
from tests.fakes.providers import FakeBraveServer, FakeTavilyServer
from tests.fakes.search import FakeSearchServer
from tests.fakes.server import BackgroundServer
from tests.timers import ManualTimer

FAST = 0.01  # retry base delay in tests


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as c:
        yield c


@pytest.fixture
def searx(search_server: FakeSearchServer) -> FakeSearchServer:
    return search_server


@pytest.fixture
def tavily() -> Iterator[FakeTavilyServer]:
    with FakeTavilyServer() as server:
        yield server


@pytest.fixture
def brave() -> Iterator[FakeBraveServer]:
    with FakeBraveServer() as server:
        yield server


def searxng(client: httpx.AsyncClient, url: str, **kw: Any) -> SearxngProvider:
    return SearxngProvider(client, base_url=url, base_delay=FAST, **kw)


# --- SearXNG ---------------------------------------------------------------------------


async def test_searxng_maps_and_normalises(
    client: httpx.AsyncClient, searx: FakeSearchServer
) -> None:
    searx.fake.script_for(
        "rust async",
        [
            {"title": "  Tokio \n guide ", "url": "https://tokio.rs/tutorial", "content": "A  b"},
            {"title": "dupe slash", "url": "https://tokio.rs/tutorial/", "content": "x"},
            {"title": "dupe fragment", "url": "https://tokio.rs/tutorial#intro", "content": "x"},
            {"title": "ftp", "url": "ftp://files.example.org/x", "content": "x"},
            {"title": "js", "url": "javascript:alert(1)", "content": "x"},
            {"title": "no url", "content": "x"},
            {"title": "", "url": "http://example.com/long", "content": "word " * 300},
            {"title": "third", "url": "https://example.net/3", "content": ""},
        ],
    )
    results = await searxng(client, searx.url, max_results=10).search("rust async")

    assert searx.fake.queries == ["rust async"]
    assert [r.url for r in results] == [
        "https://tokio.rs/tutorial",
        "http://example.com/long",
        "https://example.net/3",
    ]
    assert results[0] == SearchResult(
        title="Tokio guide", url="https://tokio.rs/tutorial", snippet="A b"
    )
    assert results[1].title == "example.com"  # an empty title falls back to the host
    assert len(results[1].snippet) == 600 and results[1].snippet.endswith("…")


async def test_searxng_caps_results(client: httpx.AsyncClient, searx: FakeSearchServer) -> None:
    searx.fake.results_per_query = 10
    assert len(await searxng(client, searx.url, max_results=3).search("many")) == 3


async def test_searxng_retries_5xx_then_succeeds(
    client: httpx.AsyncClient, searx: FakeSearchServer
) -> None:
    searx.fake.fail_next(2, 500)
    results = await searxng(client, searx.url).search("flaky")
    assert len(results) == 4
    assert searx.fake.queries == ["flaky"] * 3


async def test_searxng_gives_up_after_three_attempts(
    client: httpx.AsyncClient, searx: FakeSearchServer
) -> None:
    searx.fake.fail_next(10, 503)
    with pytest.raises(SearchError) as info:
        await searxng(client, searx.url).search("down")
    assert str(info.value) == "searxng: HTTP 503 Service Unavailable after 3 attempts"
    assert len(searx.fake.queries) == 3


async def test_client_errors_fail_without_retry(
    client: httpx.AsyncClient, searx: FakeSearchServer
) -> None:
    searx.fake.fail_next(10, 404)
    with pytest.raises(SearchError, match=r"^searxng: HTTP 404 Not Found$"):
        await searxng(client, searx.url).search("missing")
    assert len(searx.fake.queries) == 1


async def test_empty_results_are_an_empty_list(
    client: httpx.AsyncClient, searx: FakeSearchServer
) -> None:
    searx.fake.empty = True
    assert await searxng(client, searx.url).search("nothing") == []


async def test_malformed_json_is_a_search_error(client: httpx.AsyncClient) -> None:
    async def mangled(request: Request) -> PlainTextResponse:
        return PlainTextResponse('{"results": [{"title": "A", "url"', media_type="application/json")

    app = Starlette(routes=[Route("/search", mangled)])
    with BackgroundServer(app) as server:
        with pytest.raises(SearchError, match=r"^searxng: malformed JSON in response$"):
            await searxng(client, server.url).search("q")


async def test_connection_refused_is_retried_then_fails(client: httpx.AsyncClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SearchError, match=r"searxng: connection failed .* after 3 attempts"):
        await searxng(client, f"http://127.0.0.1:{port}").search("q")


async def test_timeouts_are_retried_then_fail(
    client: httpx.AsyncClient, searx: FakeSearchServer
) -> None:
    searx.fake.latency = 1.0
    with pytest.raises(SearchError, match=r"^searxng: timed out after 3 attempts$"):
        await searxng(client, searx.url, timeout=0.2).search("slow")
    assert len(searx.fake.queries) == 3


# --- Tavily ----------------------------------------------------------------------------


async def test_tavily_maps_results_and_sends_key(
    client: httpx.AsyncClient, tavily: FakeTavilyServer
) -> None:
    tavily.fake.results = [
        {"title": "T1", "url": "https://a.example/1", "content": "first", "score": 0.9},
        {"title": "T2", "url": "https://a.example/2", "content": "second", "score": 0.5},
    ]
    provider = TavilyProvider(
        client, api_key="tvly-test-key", base_url=tavily.url, max_results=5, base_delay=FAST
    )
    results = await provider.search("solar panels")

    assert [(r.title, r.url, r.snippet) for r in results] == [
        ("T1", "https://a.example/1", "first"),
        ("T2", "https://a.example/2", "second"),
    ]
    assert tavily.fake.requests == [{"query": "solar panels", "max_results": 5}]


async def test_tavily_bad_key_fails_at_once(
    client: httpx.AsyncClient, tavily: FakeTavilyServer
) -> None:
    provider = TavilyProvider(client, api_key="wrong", base_url=tavily.url, base_delay=FAST)
    with pytest.raises(SearchError) as info:
        await provider.search("q")
    assert str(info.value) == (
        'tavily: HTTP 401 "Unauthorized: missing or invalid API key." (check the API key)'
    )
    assert "wrong" not in str(info.value)


# --- Brave -----------------------------------------------------------------------------


def brave_provider(client: httpx.AsyncClient, url: str, **kw: Any) -> BraveProvider:
    return BraveProvider(client, api_key="brave-test-key", base_url=url, base_delay=FAST, **kw)


async def test_brave_maps_strips_html_and_sends_headers(
    client: httpx.AsyncClient, brave: FakeBraveServer
) -> None:
    brave.fake.results = [
        {
            "title": "The <strong>Rust</strong> Book",
            "url": "https://doc.rust-lang.org/book/",
            "description": "Learn <strong>Rust</strong> &amp; Cargo &quot;fast&quot;",
        }
    ]
    results = await brave_provider(client, brave.url, max_results=4).search("rust book")

    assert results == [
        SearchResult(
            title="The Rust Book",
            url="https://doc.rust-lang.org/book/",
            snippet='Learn Rust & Cargo "fast"',
        )
    ]
    assert brave.fake.requests == [{"q": "rust book", "count": "4", "accept": "application/json"}]


async def test_brave_without_web_section_is_empty(
    client: httpx.AsyncClient, brave: FakeBraveServer
) -> None:
    assert await brave_provider(client, brave.url).search("zzz") == []


async def test_429_honours_retry_after(client: httpx.AsyncClient, brave: FakeBraveServer) -> None:
    brave.fake.results = [{"title": "ok", "url": "https://ok.example/", "description": ""}]
    brave.fake.fail_next(1, 429, retry_after="7")
    timer = ManualTimer()
    results = await timer.run(brave_provider(client, brave.url, timer=timer).search("limited"))

    assert [r.url for r in results] == ["https://ok.example/"]
    assert brave.fake.queries == ["limited", "limited"]
    assert timer.now() == 7.0  # waited Retry-After, not the 0.01 s backoff


# --- ddgs ------------------------------------------------------------------------------


class FakeDDGS:
    """Stands in for ``ddgs.DDGS``: the package itself is third-party, not our boundary."""

    calls: list[tuple[str, dict[str, Any]]]

    def __init__(self, answer: list[dict[str, Any]] | Exception) -> None:
        self.answer = answer
        self.calls = []

    def __call__(self) -> FakeDDGS:
        return self

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append((query, kwargs))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_ddgs_maps_results() -> None:
    fake = FakeDDGS(
        [
            {"title": " Py ", "href": "https://python.org/", "body": "The  language"},
            {"title": "dupe", "href": "https://python.org", "body": ""},
            {"title": "Docs", "href": "https://docs.python.org/3/", "body": "Docs"},
        ]
    )
    results = await DdgsProvider(max_results=6, ddgs_factory=fake).search("python")

    assert fake.calls == [("python", {"max_results": 6})]
    assert [(r.title, r.url, r.snippet) for r in results] == [
        ("Py", "https://python.org/", "The language"),
        ("Docs", "https://docs.python.org/3/", "Docs"),
    ]


async def test_ddgs_errors_are_wrapped_and_no_results_is_empty() -> None:
    limited = DdgsProvider(ddgs_factory=FakeDDGS(RatelimitException("202 Ratelimit")))
    with pytest.raises(SearchError, match=r"^ddgs: RatelimitException: 202 Ratelimit$"):
        await limited.search("q")

    broken = DdgsProvider(ddgs_factory=FakeDDGS(RuntimeError("boom")))
    with pytest.raises(SearchError, match="ddgs: RuntimeError: boom"):
        await broken.search("q")

    empty = DdgsProvider(ddgs_factory=FakeDDGS(DDGSException("No results found.")))
    assert await empty.search("q") == []


def test_importing_core_search_does_not_import_ddgs() -> None:
    code = "import sys, core.search; print('ddgs' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- cache -----------------------------------------------------------------------------


class MemoryCacheStore:
    """An in-memory SearchCacheStore with a settable clock."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], tuple[datetime, list[dict[str, Any]]]] = {}
        self.now = datetime.now(UTC)
        self.broken = False

    async def cache_get(
        self, provider: str, query: str, max_age: timedelta
    ) -> list[dict[str, Any]] | None:
        if self.broken:
            raise RuntimeError("database is down")
        entry = self.rows.get((provider, query))
        if entry is None or self.now - entry[0] > max_age:
            return None
        return entry[1]

    async def cache_put(self, provider: str, query: str, results: list[dict[str, Any]]) -> None:
        if self.broken:
            raise RuntimeError("database is down")
        self.rows[(provider, query)] = (self.now, results)


class CountingProvider:
    name = "counting"

    def __init__(self, answer: list[SearchResult] | SearchError) -> None:
        self.answer = answer
        self.queries: list[str] = []

    async def search(self, query: str) -> list[SearchResult]:
        self.queries.append(query)
        if isinstance(self.answer, SearchError):
            raise self.answer
        return list(self.answer)


HIT = [SearchResult(title="A", url="https://a.example/", snippet="a")]


async def test_cache_hit_avoids_second_provider_call() -> None:
    inner, store = CountingProvider(HIT), MemoryCacheStore()
    cached = CachedSearch(inner, store, timedelta(hours=1))

    assert await cached.search("Solar Panels") == HIT
    assert await cached.search('  "solar   panels?" ') == HIT

    assert inner.queries == ["Solar Panels"]
    assert (cached.hits, cached.misses) == (1, 1)
    assert list(store.rows) == [("counting", "solar panels")]
    assert cached.name == "counting"


async def test_expired_entry_is_refetched() -> None:
    inner, store = CountingProvider(HIT), MemoryCacheStore()
    cached = CachedSearch(inner, store, timedelta(hours=1))
    await cached.search("q")
    store.now += timedelta(hours=2)
    await cached.search("q")
    assert inner.queries == ["q", "q"]
    assert cached.misses == 2


async def test_provider_errors_and_empty_answers_are_not_cached() -> None:
    store = MemoryCacheStore()
    failing = CachedSearch(
        CountingProvider(SearchError(Reason.verbatim("x: down"))), store, timedelta(hours=1)
    )
    with pytest.raises(SearchError):
        await failing.search("q")
    empty = CachedSearch(CountingProvider([]), store, timedelta(hours=1))
    assert await empty.search("q") == []
    assert store.rows == {}


async def test_broken_cache_does_not_fail_the_search(caplog: pytest.LogCaptureFixture) -> None:
    inner, store = CountingProvider(HIT), MemoryCacheStore()
    store.broken = True
    cached = CachedSearch(inner, store, timedelta(hours=1))
    assert await cached.search("q") == HIT
    assert "search cache" in caplog.text


async def test_zero_ttl_disables_cache() -> None:
    inner, store = CountingProvider(HIT), MemoryCacheStore()
    cached = CachedSearch(inner, store, timedelta(0))
    await cached.search("q")
    await cached.search("q")
    assert inner.queries == ["q", "q"] and store.rows == {}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("  Hello   World ", "hello world"),
        ('"Quantum Computing?"', "quantum computing"),
        ("«ＲＵＳＴ»", "rust"),  # NFKC folds full-width letters
        ("Straße", "strasse"),  # casefold, not lower
        ("C#", "c#"),
        (".NET 8!", ".net 8"),
        ("(量子计算)。", "量子计算"),
    ],
)
def test_normalise_query(query: str, expected: str) -> None:
    assert normalise_query(query) == expected


# --- factory ---------------------------------------------------------------------------


def settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name in ("FATHOM_SEARCH", "SEARXNG_URL", "TAVILY_API_KEY", "BRAVE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


async def test_factory_picks_the_configured_provider(
    monkeypatch: pytest.MonkeyPatch, client: httpx.AsyncClient, searx: FakeSearchServer
) -> None:
    cases: list[tuple[dict[str, str], type]] = [
        ({}, DdgsProvider),
        ({"FATHOM_SEARCH": "searxng", "SEARXNG_URL": searx.url}, SearxngProvider),
        ({"FATHOM_SEARCH": "tavily", "TAVILY_API_KEY": "k"}, TavilyProvider),
        ({"FATHOM_SEARCH": "BRAVE", "BRAVE_API_KEY": "k"}, BraveProvider),
    ]
    for env, kind in cases:
        provider = build_search_provider(settings(monkeypatch, **env), client)
        assert isinstance(provider, LimitedSearch)  # FATHOM_MAX_PROCESS_SEARCHES
        assert type(provider.provider) is kind
        assert isinstance(provider, SearchProvider)

    configured = settings(monkeypatch, FATHOM_SEARCH="searxng", SEARXNG_URL=searx.url)
    store = MemoryCacheStore()
    cached = build_search_provider(configured, client, store)
    assert isinstance(cached, CachedSearch)
    await cached.search("via factory")
    await cached.search("via factory")
    assert searx.fake.queries == ["via factory"]


@pytest.mark.parametrize(
    ("provider", "variable"),
    [("searxng", "SEARXNG_URL"), ("tavily", "TAVILY_API_KEY"), ("brave", "BRAVE_API_KEY")],
)
async def test_factory_requires_provider_settings(
    monkeypatch: pytest.MonkeyPatch, client: httpx.AsyncClient, provider: str, variable: str
) -> None:
    with pytest.raises(ConfigError, match=variable):
        build_search_provider(settings(monkeypatch, FATHOM_SEARCH=provider), client)


async def test_cached_search_on_the_real_store(
    tmp_path: Path, templates: MigratedTemplates
) -> None:
    from storage import Database, Store

    db = Database(templates.sqlite(tmp_path / "t.db"))
    try:
        inner = CountingProvider(HIT)
        cached = CachedSearch(inner, Store(db).caches, timedelta(hours=1))
        assert await cached.search("Real Store") == HIT
        assert await cached.search("real store.") == HIT
        assert inner.queries == ["Real Store"]
        assert (cached.hits, cached.misses) == (1, 1)
    finally:
        await db.dispose()


async def test_searches_of_the_process_share_a_cap(
    client: httpx.AsyncClient, searx: FakeSearchServer
) -> None:
    """However many runs search at once, at most the cap's searches are in flight."""
    searx.fake.latency = 0.05
    limited = LimitedSearch(SearxngProvider(client, base_url=searx.url), slots=3)
    seen: list[int] = []

    async def search(i: int) -> None:
        task = asyncio.create_task(limited.search(f"query {i}"))
        await asyncio.sleep(0)
        seen.append(limited.in_flight)
        await task

    await asyncio.gather(*(search(i) for i in range(12)))
    assert len(searx.fake.queries) == 12
    assert max(seen) == 3 and searx.fake.max_in_flight <= 3
