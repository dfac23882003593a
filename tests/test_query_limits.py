"""Queries within the provider's limits (issue 51, item 6).

No query longer than what the provider documents is sent: it is shortened at a word boundary
first, never refused by the provider. The fakes refuse what the real APIs refuse (Tavily: 400
characters; Brave: 400 characters and 50 words), so a query sent too long fails the test.
When the planner gives nothing at the first round, the run searches a short query made from
the request, never a whole pasted brief: asserted on what the fake search server received, in
real runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest

from core.engine.fallback import FALLBACK_CHARS, fallback_query
from core.operations.job import run_attended
from core.research.outcome import RunOutcome
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.search import BraveProvider, DdgsProvider, SearxngProvider, TavilyProvider
from core.search.query import QueryLimit, shorten_query
from core.values import RunStatus, ThreadKey
from tests.fakes import Fail, FakeLLMServer, FakeSearchServer, Reply
from tests.fakes.providers import FakeBraveServer, FakeTavilyServer

FAST = 0.01
#: A planner-written topic of 600 characters (planners paste context into topics).
LONG_TOPIC = (
    "comprehensive comparison of solid-state lithium metal battery manufacturing costs "
    "across Asian European and North American gigafactories including yield rates "
) * 4


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as c:
        yield c


@pytest.fixture
def tavily() -> Iterator[FakeTavilyServer]:
    with FakeTavilyServer() as server:
        yield server


@pytest.fixture
def brave() -> Iterator[FakeBraveServer]:
    with FakeBraveServer() as server:
        yield server


# --- shortening ---------------------------------------------------------------------------------


def test_a_query_is_cut_at_a_word_boundary() -> None:
    assert shorten_query("alpha beta gamma delta", 13) == "alpha beta"
    assert shorten_query("alpha  beta\n gamma", 100) == "alpha beta gamma"  # whitespace collapsed
    assert shorten_query("costs, risks; and outlook", 14) == "costs, risks"  # no dangling ";"
    assert shorten_query("one two three four", 100, max_words=2) == "one two"


def test_a_query_without_spaces_is_cut_at_the_limit() -> None:
    """Chinese has no spaces between words: it is cut at the limit itself."""
    assert shorten_query("固态电池的制造成本" * 60, 400) == ("固态电池的制造成本" * 60)[:400]
    # One very long word first: cutting at the only space would keep almost nothing.
    assert shorten_query("a " + "x" * 500, 400) == ("a " + "x" * 500)[:400]


def test_a_shortened_query_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="core.search.query"):
        assert QueryLimit(400, 50).fit("short query", "brave") == "short query"
        assert caplog.records == []
        fitted = QueryLimit(400, 50).fit(LONG_TOPIC, "brave")
    assert len(fitted) == 399 and len(fitted.split()) == 47  # (the next word passes 400)
    (record,) = caplog.records
    assert record.getMessage() == (
        f"brave: query shortened from {len(LONG_TOPIC)} to {len(fitted)} characters (the "
        "provider's limit is 400 characters and 50 words)"
    )


# --- each provider sends what it accepts -----------------------------------------------------


def word_prefix(sent: str, original: str) -> bool:
    """``sent`` is ``original``'s start, ending where a word ends."""
    whole = " ".join(original.split())
    return whole.startswith(sent) and (len(sent) == len(whole) or whole[len(sent)] == " ")


async def test_tavily_receives_at_most_400_characters(
    client: httpx.AsyncClient, tavily: FakeTavilyServer
) -> None:
    """Tavily refuses a query over 400 characters (docs.tavily.com, "Best practices for
    search"; its fake does too): a long one is shortened and answered, not refused."""
    tavily.fake.results = [{"title": "T", "url": "https://a.example/1", "content": "c"}]
    provider = TavilyProvider(client, api_key="tvly-test-key", base_url=tavily.url, base_delay=FAST)
    results = await provider.search(LONG_TOPIC)
    assert [r.url for r in results] == ["https://a.example/1"]
    (sent,) = tavily.fake.queries
    assert 350 < len(sent) <= 400 and word_prefix(sent, LONG_TOPIC)


async def test_brave_receives_at_most_400_characters_and_50_words(
    client: httpx.AsyncClient, brave: FakeBraveServer
) -> None:
    """Brave's Web Search API reference, ``q``: "Maximum of 400 characters and 50 words in the
    query" (its fake refuses more with 422 ``VALIDATION``)."""
    brave.fake.results = [{"title": "B", "url": "https://b.example/1", "description": "d"}]
    provider = BraveProvider(client, api_key="brave-test-key", base_url=brave.url, base_delay=FAST)
    many_words = " ".join(f"w{i}" for i in range(70))  # 70 words in 259 characters
    assert [r.url for r in await provider.search(many_words)] == ["https://b.example/1"]
    assert [r.url for r in await provider.search("x" * 30 + " " + LONG_TOPIC)] == [
        "https://b.example/1"
    ]
    first, second = brave.fake.queries
    assert first == " ".join(f"w{i}" for i in range(50))
    assert len(second) <= 400 and len(second.split()) <= 50
    assert word_prefix(second, "x" * 30 + " " + LONG_TOPIC)


async def test_searxng_receives_at_most_400_characters(
    client: httpx.AsyncClient, search_server: FakeSearchServer
) -> None:
    """A pasted 2,000-character Chinese request, percent-encoded, would pass the 8 KB request
    line of SearXNG's uWSGI (``buffer-size = 8192``, its dockerfiles/uwsgi.ini): 400 characters
    are sent, which encode to 3.6 KB at most."""
    query = "固态电池制造成本的全面比较" * 154  # 2,002 characters
    provider = SearxngProvider(client, base_url=search_server.url, base_delay=FAST)
    assert await provider.search(query)
    (sent,) = search_server.fake.queries
    assert sent == query[:400]


async def test_ddgs_receives_at_most_400_characters() -> None:
    asked: list[str] = []

    class Recording:
        def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            asked.append(query)
            return [{"title": "D", "href": "https://d.example/", "body": "b"}]

    provider = DdgsProvider(ddgs_factory=Recording)
    assert [r.url for r in await provider.search(LONG_TOPIC)] == ["https://d.example/"]
    (sent,) = asked
    assert len(sent) <= 400 and word_prefix(sent, LONG_TOPIC)


# --- the planner's fallback query ----------------------------------------------------------------

#: A brief pasted into the chat, as people paste them: a mention, links, Markdown, 1,900+
#: characters.
PASTED = (
    "<@U0BOT> **Which analytics warehouse should we pick?** We need to replace our Postgres "
    "reporting replica before Q3. Context from the RFP (https://intranet.example.com/rfp/42) "
    "and the thread with @dana: "
    + "we load 50 TB a month, run 4,000 dashboards and have 200 analysts writing SQL; "
    "cost, lock-in and performance on joins over large fact tables matter most. "
    * 11
    + "See [the spreadsheet](https://docs.example.com/sheet) and `warehouse_eval.md`."
)
#: Its first sentences within the fallback's length, without the mention, links or markup.
PASTED_QUERY = (
    "Which analytics warehouse should we pick? We need to replace our Postgres reporting "
    "replica before Q3."
)


def test_the_fallback_query_of_a_pasted_brief() -> None:
    assert len(PASTED) > 1900
    assert fallback_query(PASTED) == PASTED_QUERY


@pytest.mark.parametrize(
    ("request_text", "query"),
    [
        ("solid-state batteries", "solid-state batteries"),  # short: its own query
        ("Is v1.2 faster than v1.3? Compare them.", "Is v1.2 faster than v1.3? Compare them."),
        (
            "## Heat pumps\n> in cold climates\n- costs\n- noise",
            "Heat pumps in cold climates costs noise",
        ),
        ("https://example.com/report.pdf", "https://example.com/report.pdf"),  # nothing else
        ("word " * 400, " ".join(["word"] * 24)),  # one long sentence: cut at a word
    ],
)
def test_the_fallback_query(request_text: str, query: str) -> None:
    assert fallback_query(request_text) == query


def test_the_fallback_query_of_a_chinese_brief_keeps_whole_sentences() -> None:
    first = "请比较主流分析型数据仓库的成本和性能。"
    second = "我们每月导入五十TB数据，有两百名分析师。"
    brief = first + second + "下面是需求文档的全文，" * 200
    assert fallback_query(brief) == first + second
    assert len(fallback_query("数据" * 1000)) == FALLBACK_CHARS


def failures(n: int = 8) -> list[Fail]:
    """Failed model calls (no SDK retries in these services)."""
    return [Fail(500, None, {"retry-after-ms": "1"})] * n


async def run(service: Research, topic: str, strategy: str = "iterative") -> RunOutcome:
    thread = ThreadKey(platform="cli", workspace="local", channel="local", thread="t1")
    request = ResearchRequest(topic=topic, depth=2, strategy=strategy, thread=thread)
    submitted, _ = await service.requests.submit(request)
    return await run_attended(service, submitted.id, None)


@pytest.mark.parametrize(
    ("strategy", "role"), [("iterative", "planner"), ("graph", "graph_planner")]
)
async def test_a_failed_planner_searches_a_short_query_not_the_pasted_brief(
    service_for: Callable[..., Research],
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    strategy: str,
    role: str,
) -> None:
    """The planner fails at round 0 (HTTP 500): the run searches the short query made from the
    request, and its notes say which query that was."""
    llm_server.fake.script(role, *failures())
    outcome = await run(service_for(llm_server.base_url), PASTED, strategy)
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    assert search_server.fake.queries == [PASTED_QUERY]
    assert outcome.topics == [PASTED_QUERY]
    said = f'A short query made from the request was searched instead: "{PASTED_QUERY}".'
    assert any(note.endswith(said) for note in outcome.notes), outcome.notes


async def test_a_planner_that_stops_at_once_searches_a_short_query(
    service_for: Callable[..., Research], llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    """The planner answers ``shouldContinue: false`` before anything was found: the run
    searches the short query made from the request rather than report on nothing."""
    stop = Reply(json.dumps({"nextSearchTopic": None, "shouldContinue": False}))
    llm_server.fake.script("planner", stop, stop)
    outcome = await run(service_for(llm_server.base_url), PASTED)
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    assert search_server.fake.queries[0] == PASTED_QUERY
    assert all(len(q) <= FALLBACK_CHARS for q in search_server.fake.queries)


async def test_a_short_request_is_still_searched_as_it_is(
    service_for: Callable[..., Research], llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    llm_server.fake.script("planner", *failures())
    outcome = await run(service_for(llm_server.base_url), "heat pumps in cold climates")
    assert search_server.fake.queries == ["heat pumps in cold climates"]
    assert any(n.endswith("The topic itself was searched instead.") for n in outcome.notes)
