"""Dates (issue 20): today's date in every prompt (the run's timezone: a digest's own, else
FATHOM_TIMEZONE), the date a report was written under its title, and each source's publication
date from every provider and from its page, in the writer's sources, the report's ``## Sources``
and the JSON outcome. The clock is pinned."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from bots.slack.render import report_title
from core.config import ConfigError
from core.dates import parse_published
from core.documents.extract import main_text, read_page
from core.engine.graph.prompts import graph_planner_messages, node_answer_messages
from core.engine.graph.strategy import GraphSettings
from core.engine.iterative import planner_messages
from core.engine.progress import ProgressKind
from core.engine.sources import number_sources, writer_source_blocks
from core.engine.state import RunState
from core.llm import ChatModel
from core.models import Finding, PageExcerpt, SearchResult, Source, ThreadVariables
from core.operations.job import run_attended
from core.research.outcome import RunOutcome
from core.research.policy import Clocks, RunPolicy
from core.research.prompts import echoes_instructions, instruction_shingles, writer_messages
from core.research.report import finalize_report
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.search import (
    BraveProvider,
    CachedSearch,
    DdgsProvider,
    SearchProvider,
    SearxngProvider,
    TavilyProvider,
)
from core.settings import load_settings
from core.values import RunStatus, ThreadKey
from storage import Database, Store
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.fakes.providers import FakeBraveServer, FakeTavilyServer, brave_results, tavily_results
from tests.fakes.search import RESULT_DATE

#: 2 December 2026, a Wednesday, 10:00 UTC.
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
TODAY = "Today's date: 2026-12-02 (Wednesday)."
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


# --- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-11-30", "2026-11-30"),
        ("2026-11-30T08:15:00", "2026-11-30"),  # SearXNG, Brave's page_age
        ("2026-11-30T08:15:00Z", "2026-11-30"),
        ("2026-11-30T08:15:00.123456+00:00", "2026-11-30"),
        ("2026-11-30T23:15:00-08:00", "2026-11-30"),  # the publisher's own day
        ("2026-11-30 08:15:00", "2026-11-30"),
        ("Mon, 30 Nov 2026 08:15:00 GMT", "2026-11-30"),  # Tavily (RFC 2822)
        ("Mon, 30 Nov 2026 08:15:00 +0100", "2026-11-30"),
        ("November 30, 2026", "2026-11-30"),  # Brave's age
        ("Nov 30, 2026", "2026-11-30"),
        ("30 November 2026", "2026-11-30"),
        ("3 days ago", "2026-11-29"),  # Brave's relative age, against now (UTC)
        ("2 hours ago", "2026-12-02"),
        ("11 hours ago", "2026-12-01"),
        ("a week ago", "2026-11-25"),
        ("1 month ago", "2026-11-02"),
        ("yesterday", "2026-12-01"),
        (1796026500, "2026-11-30"),  # unix seconds
        ("1796026500", "2026-11-30"),
        (1796026500000, "2026-11-30"),  # milliseconds
        ("2026-12-03", "2026-12-03"),  # a day ahead: another timezone's today
        ("1990-01-01", "1990-01-01"),
    ],
)
def test_publication_dates_in_every_shape_become_iso_days(raw: object, expected: str) -> None:
    assert parse_published(raw, NOW) == expected


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",
        "   ",
        "garbage",
        "last Tuesday",
        "1989-12-31",  # before 1990
        "2026-12-04",  # more than a day ahead
        "2031-01-01T00:00:00Z",
        "2026-13-01",
        "2026-02-30",
        "Feb 30, 2026",
        "Smarch 3, 2026",
        "40 years ago",
        "99999999 years ago",
        "2026-11-30 <!channel>",
        "<script>2026</script>",
        True,
        0,
        -1,
        10**30,
        float("nan"),
        float("inf"),
        [],
        {"date": "2026-11-30"},
    ],
)
def test_garbage_and_implausible_dates_are_none(raw: object) -> None:
    assert parse_published(raw, NOW) is None


def test_parsing_never_raises() -> None:
    rng = random.Random(20)
    alphabet = "0123456789-:TZ+ ,.agoydshmnthNovMon\x00\u202e年月日"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        result = parse_published(text, NOW)
        assert result is None or (len(result) == 10 and "1990-01-01" <= result <= "2026-12-03")


# --- settings and the run's day -------------------------------------------------------------


def test_fathom_timezone_is_an_iana_name() -> None:
    assert load_settings(_env_file=None).timezone == "UTC"
    assert load_settings(_env_file=None, FATHOM_TIMEZONE="Asia/Shanghai").timezone == (
        "Asia/Shanghai"
    )
    for bad in ("Mars/Olympus_Mons", "../../etc/passwd", "", "UTC+3"):
        with pytest.raises(ConfigError) as info:
            load_settings(_env_file=None, FATHOM_TIMEZONE=bad)
        message = str(info.value)
        assert message.startswith("FATHOM_TIMEZONE is invalid") and "\n" not in message


def test_the_run_state_tells_the_day_in_its_timezone_when_asked() -> None:
    clock = MovingClock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))
    state = RunState("r", "t", 1, ThreadVariables(), clock=clock)
    assert state.today == date(2026, 12, 2)
    state.timezone = ZoneInfo("Pacific/Kiritimati")  # UTC+14
    assert state.today == date(2026, 12, 3)
    state.timezone = ZoneInfo("America/Los_Angeles")
    clock.now = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)  # 21:00 the day before
    assert state.today == date(2026, 12, 1)
    clock.now = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)  # past midnight there: the new day
    assert state.today == date(2026, 12, 2)


# --- prompts ---------------------------------------------------------------------------------


def test_every_prompt_starts_with_todays_date() -> None:
    day = date(2026, 12, 2)
    prompts = {
        "planner": planner_messages(
            topic="t", round_number=1, depth=2, topics=[], findings_digest=[], today=day
        ),
        "graph planner": graph_planner_messages(
            topic="t", turn=1, depth=2, room=3, graph=[], today=day
        ),
        "node answer": node_answer_messages(
            topic="t", question="q", parents=[], sources=["[1] a — https://a.example"], today=day
        ),
        "writer": writer_messages(
            topic="t", language="English", topics=[], sources=["[1] a"], notes=[], today=day
        ),
    }
    for name, messages in prompts.items():
        assert messages[1]["content"].startswith(f"{TODAY}\n\n"), name
    assert "put the year" in prompts["planner"][0]["content"]
    assert "put the year" in prompts["graph planner"][0]["content"]
    assert "how recent the evidence is" in prompts["writer"][1]["content"]
    assert "judge recency against today's date" in prompts["node answer"][0]["content"]
    # The markers the fakes rely on are still there.
    assert "\nTopic: t\n" in prompts["writer"][1]["content"]
    assert "Topic: t\n" in prompts["planner"][1]["content"]
    # The new rules are Fathom's instructions too: a report that repeats them is an echo.
    rule = "When recency matters, say how recent the evidence is (for example"
    assert echoes_instructions(rule, instruction_shingles())


# --- the report ------------------------------------------------------------------------------

URL = "https://a.example/doc"


def dated_findings() -> list[Finding]:
    return [
        Finding(
            topic="batteries",
            results=[
                SearchResult(title="Provider dated", url=f"{URL}/1", published="2026-11-30"),
                SearchResult(title="Page dated", url=f"{URL}/2"),
                SearchResult(title="Undated", url=f"{URL}/3"),
                SearchResult(title="Tampered", url=f"{URL}/4", published="<!channel> soon"),
            ],
            pages=[
                PageExcerpt(url=f"{URL}/1", passages=["p1"], published="2020-01-01"),
                PageExcerpt(url=f"{URL}/2", passages=["p2"], published="2026-10-02"),
            ],
        ),
        # Found again later, with another date: the first search's counts.
        Finding(
            topic="again",
            results=[SearchResult(title="Provider dated", url=f"{URL}/1/", published="2025-01-01")],
        ),
    ]


def test_sources_carry_their_dates_to_the_writer_and_the_listing() -> None:
    numbered = number_sources(dated_findings())
    # The provider's date, else the page's; a value that is no date is dropped.
    assert [s.published for s in numbered] == ["2026-11-30", "2026-10-02", None, None]
    blocks = writer_source_blocks(numbered)
    assert blocks[0].startswith(f"[1] Provider dated — {URL}/1 (published 2026-11-30)\n")
    assert blocks[2].startswith(f"[3] Undated — {URL}/3\n")
    body = "# Grid storage\n\nA [1]. B [2]. C [3]."
    report = finalize_report(body, numbered, "grid storage", written=date(2026, 12, 2))
    listing = report.markdown.split("## Sources\n\n", 1)[1].splitlines()
    assert listing == [
        f"- [1] [Provider dated]({URL}/1) (2026-11-30)",
        f"- [2] [Page dated]({URL}/2) (2026-10-02)",
        f"- [3] [Undated]({URL}/3)",
    ]
    assert [s.published for s in report.sources] == ["2026-11-30", "2026-10-02", None]


def test_the_report_states_the_day_it_was_written_under_its_title() -> None:
    sources = number_sources(dated_findings())
    day = date(2026, 12, 2)
    english = finalize_report("# Grid storage\n\nA [1].", sources, "grid storage", written=day)
    assert english.markdown.startswith("# Grid storage\n\n*Written 2 December 2026.*\n\nA [1].")
    assert report_title(english.markdown) == "Grid storage"  # the platforms still find it
    chinese = finalize_report("# 电网储能\n\n进展 [1]。", sources, "电网储能的进展", written=day)
    assert chinese.markdown.startswith("# 电网储能\n\n*撰写于 2026年12月2日。*\n\n进展 [1]。")
    # No title from the model: the topic becomes one, and the date follows it.
    untitled = finalize_report("## Summary\n\nA [1].", sources, "grid storage", written=day)
    assert untitled.markdown.startswith("# grid storage\n\n*Written 2 December 2026.*\n\n## ")
    assert "Written" not in finalize_report("# T\n\nA [1].", sources, "T").markdown


# --- the providers ---------------------------------------------------------------------------


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as http:
        yield http


async def test_every_provider_gives_its_dates(client: httpx.AsyncClient) -> None:
    with FakeSearchServer() as searx, FakeTavilyServer() as tavily, FakeBraveServer() as brave:
        searx.fake.script_for(
            "odd dates",
            [
                {"title": "a", "url": "https://a.example/1", "publishedDate": None},
                {"title": "b", "url": "https://a.example/2", "publishedDate": "not a date"},
                {"title": "c", "url": "https://a.example/3", "publishedDate": "2026-11-30"},
                {"title": "d", "url": "https://a.example/4"},
            ],
        )
        searxng = SearxngProvider(client, base_url=searx.url, base_delay=0.01)
        generated = await searxng.search("grid storage")
        assert [r.published for r in generated] == [RESULT_DATE[:10], None, None, None]
        odd = await searxng.search("odd dates")
        assert [r.published for r in odd] == [None, None, "2026-11-30", None]

        tavily.fake.results = tavily_results()
        found = await TavilyProvider(
            client, api_key="tvly-test-key", base_url=tavily.url, base_delay=0.01
        ).search("grid storage")
        assert [r.published for r in found] == ["2026-11-30", None]

        brave.fake.results = brave_results()
        found = await BraveProvider(
            client, api_key="brave-test-key", base_url=brave.url, base_delay=0.01
        ).search("grid storage")
        assert found[0].published == "2026-11-30" and found[2].published is None
        assert found[1].published in days_ago(3)  # "3 days ago", against the real now
        brave.fake.results = [
            {"title": "x", "url": "https://x.example/", "page_age": "junk", "age": "Nov 29, 2026"}
        ]
        found = await BraveProvider(
            client, api_key="brave-test-key", base_url=brave.url, base_delay=0.01
        ).search("junk")
        assert found[0].published == "2026-11-29"  # a bad page_age falls back to age


async def test_ddgs_dates_are_read_when_present() -> None:
    class News:
        def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            return [
                {
                    "title": "n",
                    "href": "https://n.example/",
                    "body": "",
                    "date": "2026-11-30T08:00:00+00:00",
                },
                {"title": "t", "href": "https://t.example/", "body": ""},
            ]

    found = await DdgsProvider(ddgs_factory=News).search("q")
    assert [r.published for r in found] == ["2026-11-30", None]


def days_ago(n: int) -> set[str]:
    """``n`` days before now (either side of a midnight the test may straddle)."""
    now = datetime.now(UTC)
    return {(now - timedelta(days=n, minutes=m)).date().isoformat() for m in (-1, 0, 1)}


class MemoryCache:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[dict[str, Any]]] = {}

    async def cache_get(
        self, provider: str, query: str, max_age: timedelta
    ) -> list[dict[str, Any]] | None:
        return self.rows.get((provider, query))

    async def cache_put(self, provider: str, query: str, results: list[dict[str, Any]]) -> None:
        self.rows[(provider, query)] = results


class Dated:
    name = "dated"

    async def search(self, query: str) -> list[SearchResult]:
        return [SearchResult(title="A", url="https://a.example/", published="2026-11-30")]


async def test_the_search_cache_keeps_dates_and_reads_entries_from_before_them() -> None:
    store = MemoryCache()
    cached = CachedSearch(Dated(), store, timedelta(hours=1))
    await cached.search("q")
    assert (await cached.search("q"))[0].published == "2026-11-30"
    assert cached.hits == 1
    store.rows[("dated", "old")] = [{"title": "B", "url": "https://b.example/", "snippet": "b"}]
    (old,) = await cached.search("old")
    assert old.published is None and old.title == "B"


# --- pages -----------------------------------------------------------------------------------

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Grid storage</title>
{meta}</head><body><nav>Home | About</nav><main><article><h1>Grid storage</h1>
<p>Grid-scale batteries passed one terawatt-hour of installed capacity this year, according to
the industry's annual survey of projects on five continents.</p>
<p>Costs of lithium iron phosphate cells fell again, and long-duration storage pilots grew.</p>
</article></main><footer>© 2019 Example Media</footer></body></html>"""


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ('<meta property="article:published_time" content="2026-11-30T08:00:00Z">', "2026-11-30"),
        (
            '<script type="application/ld+json">{"@type": "NewsArticle", "headline": "Grid",'
            ' "datePublished": "2026-11-28"}</script>',
            "2026-11-28",
        ),
        ("", None),
        ('<meta property="article:published_time" content="soon">', None),
        ('<meta property="article:published_time" content="2031-01-01">', None),
    ],
)
def test_a_page_declares_its_date(meta: str, expected: str | None) -> None:
    html = PAGE.format(meta=meta)
    content = read_page(html, "https://a.example/grid", "text/html")
    assert content.published == expected
    assert content.text == main_text(html, "https://a.example/grid", "text/html")
    assert "terawatt-hour" in content.text and "Home | About" not in content.text
    assert read_page("plain 2026-11-30", "https://a.example/t", "text/plain").published is None


# --- runs end to end -------------------------------------------------------------------------


class MovingClock:
    """A clock the test moves."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Rig:
    llm: FakeLLMServer
    store: Store
    http: httpx.AsyncClient
    clock: MovingClock

    def service(
        self, search: SearchProvider, *, timezone: str = "UTC", graph_nodes: int = 4
    ) -> Research:
        model = ChatModel(model="m", api_key="k", base_url=self.llm.base_url, max_retries=1)
        return Research(
            store=self.store,
            planner=model,
            writer=model,
            search=search,
            strategy_settings={
                "graph": GraphSettings(_env_file=None, FATHOM_GRAPH_MAX_NODES=graph_nodes)
            },
            policy=RunPolicy(timezone=timezone),
            clocks=Clocks(now=self.clock),
        )

    async def research(
        self,
        service: Research,
        topic: str = "grid storage",
        *,
        depth: int = 2,
        strategy: str = "iterative",
        digest_id: str | None = None,
        thread: str = "t1",
        progress: Any = None,
    ) -> RunOutcome:
        request = ResearchRequest(
            topic=topic,
            depth=depth,
            strategy=strategy,
            thread=ThreadKey(platform="cli", workspace="local", channel="local", thread=thread),
            requested_by="tester",
            digest_id=digest_id,
        )
        run, _ = await service.requests.submit(request)
        return await run_attended(service, run.id, progress)

    def prompts(self, role: str) -> list[str]:
        """The user messages of every request of ``role``, in order."""
        return [
            "\n".join(str(m["content"]) for m in r.body["messages"] if m["role"] == "user")
            for r in self.llm.fake.requests_for(role)
        ]


@pytest.fixture
async def rig(database: Database, llm_server: FakeLLMServer) -> AsyncIterator[Rig]:
    async with httpx.AsyncClient(trust_env=False) as http:
        yield Rig(llm_server, Store(database), http, MovingClock(NOW))


def searx(rig: Rig, server: FakeSearchServer) -> SearxngProvider:
    return SearxngProvider(rig.http, base_url=server.url, base_delay=0.01)


def assert_dated(prompts: list[str], line: str) -> None:
    assert prompts and all(p.startswith(f"{line}\n\n") for p in prompts), prompts


@sqlite_only
async def test_an_iterative_run_knows_the_date_and_its_sources_dates(
    rig: Rig, search_server: FakeSearchServer
) -> None:
    service = rig.service(searx(rig, search_server))
    outcome = await rig.research(service)
    assert outcome.status is RunStatus.SUCCEEDED
    assert_dated(rig.prompts("planner"), TODAY)
    assert_dated(rig.prompts("writer"), TODAY)
    assert f"(published {RESULT_DATE[:10]})" in rig.prompts("writer")[0]
    report = outcome.report_markdown or ""
    assert report.startswith("# Report: grid storage\n\n*Written 2 December 2026.*\n\n")
    first = outcome.sources[0]
    assert first.published == RESULT_DATE[:10]
    assert f"- [1] [{first.title}]({first.url}) ({first.published})" in report
    assert outcome.as_json()["sources"][0]["published"] == RESULT_DATE[:10]
    # Stored and read back (a finished run asked again, `fathom thread show`'s variables).
    run = await rig.store.runs.get_run(outcome.run_id)
    assert run is not None
    stored = await service.executor.stored_outcome(run)
    assert [s.published for s in stored.sources] == [s.published for s in outcome.sources]
    again = await run_attended(service, outcome.run_id)
    assert again.as_json()["sources"] == outcome.as_json()["sources"]
    thread = await rig.store.threads.get_thread(outcome.thread)
    assert thread is not None
    variables = await rig.store.threads.load_variables(thread.id)
    assert variables is not None
    assert variables["findings"][0]["results"][0]["published"] == RESULT_DATE[:10]


@sqlite_only
async def test_fathom_timezone_sets_the_day(rig: Rig, search_server: FakeSearchServer) -> None:
    rig.clock.now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # already 3 December at UTC+14
    service = rig.service(searx(rig, search_server), timezone="Pacific/Kiritimati")
    outcome = await rig.research(service, depth=1)
    assert_dated(rig.prompts("planner") + rig.prompts("writer"), TODAY_KIRITIMATI)
    assert "*Written 3 December 2026.*" in (outcome.report_markdown or "")


TODAY_KIRITIMATI = "Today's date: 2026-12-03 (Thursday)."


@sqlite_only
async def test_a_run_past_midnight_is_told_the_new_day(
    rig: Rig, search_server: FakeSearchServer
) -> None:
    rig.clock.now = datetime(2026, 12, 1, 23, 59, tzinfo=UTC)

    class Midnight:
        async def publish(self, event: Any) -> None:
            if event.kind is ProgressKind.SEARCHED:  # the first search is done: midnight passes
                rig.clock.now = datetime(2026, 12, 2, 0, 1, tzinfo=UTC)

    outcome = await rig.research(rig.service(searx(rig, search_server)), progress=Midnight())
    planner = rig.prompts("planner")
    assert planner[0].startswith("Today's date: 2026-12-01 (Tuesday).")
    assert_dated(planner[1:], TODAY)
    assert_dated(rig.prompts("writer"), TODAY)
    assert "*Written 2 December 2026.*" in (outcome.report_markdown or "")


@sqlite_only
async def test_a_graph_run_knows_the_date(rig: Rig, search_server: FakeSearchServer) -> None:
    outcome = await rig.research(rig.service(searx(rig, search_server)), strategy="graph")
    assert outcome.status is RunStatus.SUCCEEDED
    assert_dated(rig.prompts("graph_planner"), TODAY)
    answers = rig.prompts("answerer")
    assert_dated(answers, TODAY)
    assert any(f"(published {RESULT_DATE[:10]})" in a for a in answers)
    assert_dated(rig.prompts("writer"), TODAY)


@sqlite_only
async def test_a_digests_firing_uses_its_timezones_day(
    rig: Rig, search_server: FakeSearchServer
) -> None:
    rig.clock.now = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)  # 21:00 on 1 December in LA
    digest = await rig.store.digests.add(
        platform="cli",
        workspace="local",
        channel="local",
        topic="grid storage",
        depth=1,
        strategy="iterative",
        cron="0 21 * * *",
        timezone="America/Los_Angeles",
        created_by="tester",
        platform_context=None,
        max_per_channel=10,
    )
    service = rig.service(searx(rig, search_server))  # FATHOM_TIMEZONE: UTC
    fired = await rig.research(service, depth=1, digest_id=digest.id, thread="digest")
    assert fired.status is RunStatus.SUCCEEDED
    assert_dated(rig.prompts("planner") + rig.prompts("writer"), LA_TODAY)
    assert "*Written 1 December 2026.*" in (fired.report_markdown or "")
    rig.llm.fake.reset()
    plain = await rig.research(service, "wind power", depth=1, thread="plain")
    assert_dated(rig.prompts("planner") + rig.prompts("writer"), TODAY)
    assert "*Written 2 December 2026.*" in (plain.report_markdown or "")


LA_TODAY = "Today's date: 2026-12-01 (Tuesday)."


@sqlite_only
@pytest.mark.parametrize("provider", ["tavily", "brave"])
async def test_tavily_and_brave_dates_reach_the_report_and_the_json(
    rig: Rig, provider: str
) -> None:
    if provider == "tavily":
        with FakeTavilyServer() as server:
            server.fake.results = tavily_results()
            search: SearchProvider = TavilyProvider(
                rig.http, api_key="tvly-test-key", base_url=server.url, base_delay=0.01
            )
            outcome = await rig.research(rig.service(search), depth=1)
    else:
        with FakeBraveServer() as server:
            server.fake.results = brave_results()
            search = BraveProvider(
                rig.http, api_key="brave-test-key", base_url=server.url, base_delay=0.01
            )
            outcome = await rig.research(rig.service(search), depth=1)
    assert outcome.status is RunStatus.SUCCEEDED
    published = [s["published"] for s in outcome.as_json()["sources"]]
    assert published[0] == "2026-11-30" and published[-1] is None
    if provider == "brave":  # "3 days ago", against the real now
        assert len(published) == 3 and published[1] in days_ago(3)
    else:
        assert len(published) == 2
    report = outcome.report_markdown or ""
    first = outcome.sources[0]
    assert f"- [1] [{first.title}]({first.url}) (2026-11-30)" in report
    assert report.rstrip().endswith(f"({outcome.sources[-1].url})")  # undated: nothing after


def test_the_platforms_render_a_dated_report() -> None:
    from bots.dingtalk import render as dingtalk
    from bots.feishu import render as feishu
    from bots.slack import render as slack

    sources = [Source(n=1, title="One", url="https://a.example/1", published="2026-11-30")]
    markdown = (
        "# AI chips\n\n*Written 2 December 2026.*\n\nSummary [1].\n\n## Sources\n\n"
        "- [1] [One](https://a.example/1) (2026-11-30)\n"
    )
    for render in (slack, feishu, dingtalk):
        assert render.report_title(markdown) == "AI chips"
    (message,) = slack.report_messages(markdown, sources)
    text = message["blocks"][0]["text"]
    assert "*Written 2 December 2026.*" in text and "Summary [[1]](https://a.example/1)." in text
    assert "- [1] [One](https://a.example/1) (2026-11-30)" in text
    (card,) = feishu.report_cards(markdown, sources)
    assert "(2026-11-30)" in card and "Written 2 December 2026" in card
    (part,) = dingtalk.report_messages(markdown, sources)
    assert "(2026-11-30)" in part.text and part.title == "AI chips"
