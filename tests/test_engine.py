"""The research engine end to end: the real Research, ChatModel, SearxngProvider
and Store against loopback fakes of the LLM and SearXNG, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.engine.iterative import repeated_topics_words
from core.engine.progress import ProgressEvent, ProgressKind
from core.llm import ChatModel
from core.operations.job import run_attended
from core.research.lease import LeaseTiming
from core.research.outcome import RunOutcome
from core.research.policy import Clocks, RunPolicy
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.runtime import DeferredTrustContext, open_runtime
from core.search import SearxngProvider
from core.settings import load_settings
from core.values import RunStatus, ThreadKey
from core.words import wording
from storage import CancelRequest, Database, Store
from tests.cli import start_fathom, stop, wait_for_stderr
from tests.databases import MigratedTemplates
from tests.fakes import Fail, FakeLLMServer, FakeSearchServer, Hang, Reply
from tests.languages import english_sentences

KEY = "fake-key"
FAST_RETRY = {"retry-after-ms": "1"}  # the openai SDK otherwise backs off ~0.5 s per retry
LLM_RETRIES = 1  # so one failed call is LLM_RETRIES + 1 HTTP requests
SEARCH_ATTEMPTS = 3  # core.search.http.DEFAULT_ATTEMPTS
TOPIC = "solid-state batteries"
#: The harness's clock: 2 December 2026, a Wednesday (UTC).
NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

#: A line of the generated sources list: ``- [n] [title](url)``, then its date when known.
LISTED = r"^- \[(\d+)\] \[[^\]]*\]\((\S+)\)(?: \(\d{4}-\d{2}-\d{2}\))?$"
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def plan(topic: str | None, go: bool = True) -> Reply:
    return Reply(json.dumps({"nextSearchTopic": topic, "shouldContinue": go}))


def failed_call(status: int = 500) -> list[Fail]:
    """The responses that make one model call fail after the SDK's retries."""
    return [Fail(status, None, FAST_RETRY)] * (LLM_RETRIES + 1)


class Collect:
    """A ProgressSink that records events and can act on them (cancel, inject failures)."""

    def __init__(self, on_event: Callable[[ProgressEvent], Awaitable[None]] | None = None):
        self.events: list[ProgressEvent] = []
        self._on_event = on_event

    async def publish(self, event: ProgressEvent) -> None:
        self.events.append(event)
        if self._on_event is not None:
            await self._on_event(event)

    @property
    def texts(self) -> list[str]:
        return [e.text for e in self.events]

    @property
    def final(self) -> str:
        assert self.events and self.events[-1].kind is ProgressKind.FINISHED
        return self.events[-1].text


def after_search(n: int, action: Callable[[], Awaitable[object] | object]) -> Collect:
    """A sink that runs ``action`` once the ``n``-th search of the run has executed."""

    async def on_event(event: ProgressEvent) -> None:
        if event.kind is ProgressKind.SEARCHED and event.rounds_done == n:
            result = action()
            if asyncio.iscoroutine(result):
                await result

    return Collect(on_event)


@dataclass
class Harness:
    llm: FakeLLMServer
    search: FakeSearchServer
    database: Database
    store: Store
    service: Research
    url: str
    threads: list[ThreadKey] = field(default_factory=list)
    #: Another service on the same clients and store (``**options`` for Research).
    build_service: Callable[..., Research] = Research
    #: The real search provider the services use (against the fake search server).
    search_provider: Any = None

    def thread(self, name: str = "t1") -> ThreadKey:
        return ThreadKey(platform="cli", workspace="local", channel="local", thread=name)

    async def submit(self, topic: str = TOPIC, depth: int = 3, thread: str = "t1") -> str:
        request = ResearchRequest(
            topic=topic, depth=depth, thread=self.thread(thread), requested_by="tester"
        )
        run, created = await self.service.requests.submit(request)
        assert created
        return run.id

    async def research(
        self,
        topic: str = TOPIC,
        depth: int = 3,
        *,
        thread: str = "t1",
        progress: Collect | None = None,
    ) -> RunOutcome:
        run_id = await self.submit(topic, depth, thread)
        return await run_attended(self.service, run_id, progress)

    def planner_requests(self) -> list[dict[str, object]]:
        return [r.body for r in self.llm.fake.requests_for("planner")]

    def writer_requests(self) -> list[dict[str, object]]:
        return [r.body for r in self.llm.fake.requests_for("writer")]


def user_prompt(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list)
    return "\n".join(str(m["content"]) for m in messages if m["role"] == "user")


@pytest.fixture
async def harness(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> AsyncIterator[Harness]:
    async with httpx.AsyncClient(trust_env=False) as http:
        planner = ChatModel(
            model="planner-model", api_key=KEY, base_url=llm_server.base_url, max_retries=1
        )
        writer = ChatModel(
            model="writer-model", api_key=KEY, base_url=llm_server.base_url, max_retries=1
        )
        search = SearxngProvider(http, base_url=search_server.url, base_delay=0.01)
        store = Store(database)

        def build_service(**options: Any) -> Research:
            clients: dict[str, Any] = dict(
                store=store,
                planner=planner,
                writer=writer,
                search=search,
                clocks=Clocks(now=lambda: NOW),
            )
            return Research(**(clients | options))

        service = build_service()
        try:
            yield Harness(
                llm_server,
                search_server,
                database,
                store,
                service,
                database_url,
                build_service=build_service,
                search_provider=search,
            )
        finally:
            await planner.aclose()
            await writer.aclose()


async def fresh_store(url: str) -> tuple[Database, Store]:
    """A second connection pool on the same database: what another process would see."""
    database = Database(url)
    return database, Store(database)


# --- the happy path ------------------------------------------------------------------


@sqlite_only
async def test_progress_sequence(harness: Harness) -> None:
    progress = Collect()
    outcome = await harness.research(progress=progress)
    assert outcome.status is RunStatus.SUCCEEDED
    kinds = [e.kind for e in progress.events]
    assert kinds[0] is ProgressKind.STARTED
    assert kinds[-1] is ProgressKind.FINISHED
    searched = [e.text for e in progress.events if e.kind is ProgressKind.SEARCHED]
    assert searched == [f"{i}/3th search executed." for i in range(1, 4)]
    writing = kinds.index(ProgressKind.WRITING)
    last_searched = max(i for i, k in enumerate(kinds) if k is ProgressKind.SEARCHED)
    assert last_searched < writing < len(kinds) - 1
    assert [e.rounds_done for e in progress.events if e.kind is ProgressKind.SEARCHED] == [
        1,
        2,
        3,
    ]
    assert progress.final.startswith("Research done: 3/3 searches")
    assert "stopped early" not in progress.final


async def test_variables_usage_and_sources_are_persisted(harness: Harness) -> None:
    outcome = await harness.research()
    assert outcome.status is RunStatus.SUCCEEDED
    assert harness.search.fake.queries == outcome.topics
    assert len(outcome.topics) == 3 and len(set(outcome.topics)) == 3

    database, store = await fresh_store(harness.url)
    try:
        thread = await store.threads.get_thread(outcome.thread)
        assert thread is not None
        variables = await store.threads.load_variables(thread.id)
        assert variables is not None
        assert variables["topics"] == outcome.topics
        assert variables["nextSearchTopic"] == outcome.topics[-1]
        assert variables["shouldContinue"] is True
        findings = variables["findings"]
        assert [f["topic"] for f in findings] == outcome.topics
        for finding in findings:
            assert finding["error"] is None
            assert len(finding["results"]) == 4
            pages = f"{harness.search.url}/pages/"
            assert all(r["url"].startswith(pages) for r in finding["results"])

        run = await store.runs.get_run(outcome.run_id)
        assert run is not None
        assert run.status == "succeeded"
        assert run.rounds_done == 3
        assert run.llm_calls == 4  # 3 planner + 1 writer
        assert run.searches == 3
        assert run.prompt_tokens > 0 and run.completion_tokens > 0
        assert run.report_markdown == outcome.report_markdown
        assert run.finished_at is not None and run.error is None
        stored = [(s.n, s.title, s.url) for s in await store.runs.run_sources(outcome.run_id)]
        assert stored == [(s.n, s.title, s.url) for s in outcome.sources]
        assert stored and [n for n, _, _ in stored] == list(range(1, len(stored) + 1))
    finally:
        await database.dispose()

    assert outcome.usage.llm_calls == 4 and outcome.usage.searches == 3
    data = outcome.as_json()
    assert data["status"] == "succeeded" and data["topics"] == outcome.topics
    assert data["usage"] == {**outcome.usage.model_dump(), "cost": None}
    assert data["sources"] == [s.model_dump() for s in outcome.sources]
    # Executing a finished run again changes nothing and returns the stored outcome.
    again = await run_attended(harness.service, outcome.run_id)
    assert again.report_markdown == outcome.report_markdown and again.topics == outcome.topics
    assert harness.search.fake.queries == outcome.topics


# --- planner behaviour -----------------------------------------------------------------


@sqlite_only
async def test_duplicate_topic_is_reasked_and_never_searched(harness: Harness) -> None:
    harness.llm.fake.script(
        "planner",
        plan("alpha particles"),
        plan("Alpha-Particles!"),  # the same topic again: re-asked once
        plan("beta decay"),
        plan("gamma rays"),
    )
    outcome = await harness.research("radioactivity")
    assert outcome.status is RunStatus.SUCCEEDED
    assert harness.search.fake.queries == ["alpha particles", "beta decay", "gamma rays"]
    assert outcome.topics == ["alpha particles", "beta decay", "gamma rays"]
    requests = harness.planner_requests()
    assert len(requests) == 4
    assert "was already searched" in user_prompt(requests[2])
    assert "was already searched" not in user_prompt(requests[1])


@sqlite_only
async def test_insisting_on_duplicates_stops_early(harness: Harness) -> None:
    harness.llm.fake.script(
        "planner", plan("alpha particles"), plan("ALPHA particles"), plan("particles, alpha")
    )
    progress = Collect()
    outcome = await harness.research("radioactivity", progress=progress)
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.stop_reason is not None and outcome.stop_reason.value == "duplicate_topics"
    assert harness.search.fake.queries == ["alpha particles"]
    assert len(harness.planner_requests()) == 3
    assert "stopped early" in progress.final
    assert outcome.report_markdown is not None
    assert "already searched" in outcome.report_markdown.split("## Notes on this run")[1]


@sqlite_only
async def test_a_chinese_run_notes_repeated_topics_in_chinese(harness: Harness) -> None:
    """The note of a planner that insists on searched topics is in the run's language."""
    harness.llm.fake.script("planner", plan("阿尔法粒子"), plan("阿尔法 粒子"), plan("阿尔法粒子"))
    outcome = await harness.research("放射性衰变的原理")
    assert outcome.stop_reason is not None and outcome.stop_reason.value == "duplicate_topics"
    assert outcome.report_markdown is not None
    notes = outcome.report_markdown.split(f"## {wording.notes_heading('zh')}")[1]
    assert repeated_topics_words("zh") in notes
    assert "already searched" not in notes


def notes_of(outcome: RunOutcome) -> str:
    assert outcome.report_markdown is not None
    return outcome.report_markdown.split(f"## {wording.notes_heading('zh')}")[1]


@sqlite_only
async def test_a_chinese_run_notes_a_failed_planner_and_writer_in_chinese(
    harness: Harness,
) -> None:
    """A Chinese run whose planner fails after one search stops early, and whose writer
    fails lists its findings: both notes, and the report's first lines, are Chinese once
    the data in them (the topic, the models' names and address, the server's words) is
    taken out."""
    topic = "放射性衰变的原理"
    harness.llm.fake.script("planner", plan("阿尔法粒子"), *failed_call() * 5)
    harness.llm.fake.script("writer", *failed_call())
    outcome = await harness.research(topic, depth=2)
    assert outcome.status is RunStatus.SUCCEEDED and harness.search.fake.queries == ["阿尔法粒子"]
    notes = notes_of(outcome)
    assert "规划模型出错" in notes and "研究提前结束" in notes, notes
    assert "报告撰写模型出错" in notes
    data = (topic, "planner-model", "writer-model", "fake error 500")  # (the fake's words)
    assert english_sentences(notes, *data) == [], notes
    intro = outcome.report_markdown.split("\n\n")[2] if outcome.report_markdown else ""
    assert intro.startswith("> 报告撰写模型不可用") and english_sentences(intro, *data) == []


@sqlite_only
async def test_a_chinese_run_notes_a_failed_search_in_chinese(harness: Harness) -> None:
    topic = "固态电池的最新进展"
    progress = after_search(1, lambda: harness.search.fake.fail_next(SEARCH_ATTEMPTS))
    outcome = await harness.research(topic, progress=progress)
    assert outcome.status is RunStatus.SUCCEEDED
    failed_topic = outcome.topics[1]
    notes = notes_of(outcome)
    said = "Internal Server Error"  # (SearXNG's error page's title: the server's own words)
    assert f"搜索“{failed_topic}”失败：searxng：HTTP 500 {said}（尝试 3 次）。" in notes, notes
    assert english_sentences(notes, *outcome.topics, said) == []
    assert "2/3th search executed. （本次搜索失败，继续）" in progress.texts, progress.texts


@sqlite_only
async def test_planner_stopping_ends_the_run_early(harness: Harness) -> None:
    harness.llm.fake.stop_after = 1
    progress = Collect()
    outcome = await harness.research(progress=progress)
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.stop_reason is not None and outcome.stop_reason.value == "planner_stopped"
    assert len(harness.search.fake.queries) == 1 and outcome.usage.searches == 1
    assert len(harness.planner_requests()) == 2
    assert "stopped early" in progress.final and "1 of 3" in progress.final
    run = await harness.store.runs.get_run(outcome.run_id)
    assert run is not None and run.status == "succeeded" and run.rounds_done == 1


@sqlite_only
async def test_garbage_json_once_is_asked_again(harness: Harness) -> None:
    harness.llm.fake.script("planner", Reply("Sure! Let me think about that..."))
    outcome = await harness.research()
    assert outcome.status is RunStatus.SUCCEEDED
    assert len(outcome.topics) == 3
    assert len(harness.planner_requests()) == 4  # 3 rounds + 1 re-ask
    assert outcome.usage.llm_calls == 5
    assert TOPIC not in harness.search.fake.queries  # the planner's topics were used
    assert outcome.notes == []


@sqlite_only
async def test_garbage_json_twice_searches_the_topic_itself(harness: Harness) -> None:
    harness.llm.fake.script("planner", Reply("no json here"), Reply("still {not json"))
    outcome = await harness.research()
    assert outcome.status is RunStatus.SUCCEEDED
    assert harness.search.fake.queries[0] == TOPIC
    assert len(harness.search.fake.queries) == 3
    assert outcome.report_markdown is not None
    notes = outcome.report_markdown.split("## Notes on this run", 1)[1].split("## Sources")[0]
    assert "planner model failed" in notes and "topic itself was searched" in notes


@sqlite_only
async def test_planner_server_errors_degrade_but_the_run_ends(harness: Harness) -> None:
    harness.llm.fake.script("planner", *failed_call() * 5)
    progress = Collect()
    outcome = await harness.research(progress=progress)
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.stop_reason is not None and outcome.stop_reason.value == "planner_failed"
    assert harness.search.fake.queries == [TOPIC]
    assert outcome.report_markdown is not None and "## Sources" in outcome.report_markdown
    assert any("HTTP 500" in note for note in outcome.notes)
    assert "stopped early" in progress.final
    run = await harness.store.runs.get_run(outcome.run_id)
    assert run is not None and run.status == "succeeded"


# --- writer and search failures ------------------------------------------------------------


@sqlite_only
async def test_writer_failure_falls_back_to_the_findings(harness: Harness) -> None:
    harness.llm.fake.script("writer", *failed_call())
    outcome = await harness.research()
    assert outcome.status is RunStatus.SUCCEEDED
    report = outcome.report_markdown
    assert report is not None
    assert "The report writer was unavailable" in report
    assert "## Main findings" in report
    for topic in outcome.topics:
        assert f"### {topic}" in report
    assert "## Notes on this run" in report and "writer model failed" in report
    assert report.index("## Notes on this run") < report.index("## Sources")
    assert outcome.sources
    listing = report.split("\n## Sources\n", 1)[1]
    listed = re.findall(LISTED, listing, re.MULTILINE)
    assert [(int(n), url) for n, url in listed] == [(s.n, s.url) for s in outcome.sources]
    assert len(listed) == 12  # every result of the three searches is cited
    assert all(url.startswith(f"{harness.search.url}/pages/") for _, url in listed)
    assert len(harness.writer_requests()) == LLM_RETRIES + 1


@sqlite_only
async def test_one_failed_search_is_noted_and_the_run_goes_on(harness: Harness) -> None:
    progress = after_search(1, lambda: harness.search.fake.fail_next(SEARCH_ATTEMPTS))
    outcome = await harness.research(progress=progress)
    assert outcome.status is RunStatus.SUCCEEDED
    failed_topic = outcome.topics[1]
    assert harness.search.fake.queries.count(failed_topic) == SEARCH_ATTEMPTS
    assert "2/3th search executed. (the search failed; continuing)" in progress.texts
    assert "3/3th search executed." in progress.texts
    assert outcome.report_markdown is not None
    notes = outcome.report_markdown.split("## Notes on this run", 1)[1]
    assert f'The search for "{failed_topic}" failed' in notes
    source_urls = {s.url for s in outcome.sources}
    assert source_urls and not any("recent-developments" in u for u in source_urls)


@sqlite_only
async def test_all_searches_failing_fails_the_run_clearly(harness: Harness) -> None:
    harness.search.fake.fail_next(100)
    progress = Collect()
    outcome = await harness.research(progress=progress)
    assert outcome.status is RunStatus.FAILED
    assert outcome.error is not None and "no search returned any results" in outcome.error
    assert outcome.report_markdown is None
    assert progress.final.startswith("Research failed")
    run = await harness.store.runs.get_run(outcome.run_id)
    assert run is not None and run.status == "failed" and run.finished_at is not None
    assert run.error == outcome.error
    assert harness.writer_requests() == []
    # A failed run has ended: executing it again returns the outcome without searching.
    queries = len(harness.search.fake.queries)
    again = await run_attended(harness.service, outcome.run_id)
    assert again.status is RunStatus.FAILED and again.error == outcome.error
    assert len(harness.search.fake.queries) == queries


@sqlite_only
async def test_empty_search_results_fail_the_run(harness: Harness) -> None:
    harness.search.fake.empty = True
    outcome = await harness.research(depth=2)
    assert outcome.status is RunStatus.FAILED
    assert outcome.error is not None and "no search returned any results" in outcome.error


@sqlite_only
async def test_a_chinese_run_that_found_nothing_fails_in_chinese(harness: Harness) -> None:
    """The failure line of a run asked in Chinese is Chinese, reason included."""
    harness.search.fake.empty = True
    progress = Collect()
    outcome = await harness.research("热泵在寒冷气候中的表现", depth=1, progress=progress)
    assert outcome.status is RunStatus.FAILED and outcome.error == "没有任何搜索返回结果"
    assert progress.final == "研究失败（已完成 1/1 次搜索）：没有任何搜索返回结果", progress.final


# --- the report -----------------------------------------------------------------------------


@sqlite_only
async def test_citations_are_repaired(harness: Harness) -> None:
    harness.search.fake.results_per_query = 1  # three searches: three sources
    harness.llm.fake.script(
        "writer",
        Reply(
            "# Batteries\n\n## Executive summary\n\nClaim one [1]. A made-up claim [9]. "
            "Two more [3][2]. See [this blog](https://evil.example/x) and "
            "https://evil.example/y too.\n\n## References\n\n[9] https://evil.example/z\n"
        ),
    )
    outcome = await harness.research()
    report = outcome.report_markdown
    assert report is not None
    assert "[9]" not in report and "evil.example" not in report
    assert "## References" not in report
    writer_prompt = user_prompt(harness.writer_requests()[0])
    searched = set(re.findall(r"— (https?://\S+)", writer_prompt))
    assert len(searched) == 3
    listing = report.split("\n## Sources\n", 1)[1]
    listed = re.findall(LISTED, listing, re.MULTILINE)
    assert [int(n) for n, _ in listed] == [1, 2, 3]
    assert {url for _, url in listed} == searched
    body = report.split("\n## Sources\n", 1)[0]
    assert sorted({int(n) for n in re.findall(r"\[(\d+)\]", body)}) == [1, 2, 3]
    assert "Claim one [1]. A made-up claim. Two more [2][3]." in body


@sqlite_only
async def test_a_report_is_checked_against_its_sources_before_it_is_finished(
    harness: Harness,
) -> None:
    """With a verifier, a report's claims are checked: the plain one stands, one citing the
    wrong source is re-cited to the one the verifier names, an invented one loses its
    citation and is marked; the notes say how the citations held."""
    verifier = ChatModel(
        model="verifier-model", api_key=KEY, base_url=harness.llm.base_url, max_retries=1
    )
    service = harness.build_service(verifier=verifier)
    query = f"{TOPIC} — overview"
    said = "Source {} reports facts, figures and context about " + query + "."
    harness.llm.fake.script("planner", plan(query))
    harness.llm.fake.script(
        "writer",
        Reply(
            f"# Batteries\n\n## Findings\n\n- {said.format(1)} [1]\n- {said.format(2)} [1]\n"
            "- Costs fell 90% last year [3].\n"
        ),
    )
    verdicts = [
        {"claim": 2, "verdict": "unsupported", "source": 2},
        {"claim": 3, "verdict": "unsupported", "source": None},
    ]
    harness.llm.fake.script("verifier", Reply(json.dumps({"verdicts": verdicts})))
    run_id = await harness.submit(depth=1)
    try:
        outcome = await run_attended(service, run_id, None)
    finally:
        await verifier.aclose()
    report = outcome.report_markdown or ""
    assert f"- {said.format(1)} [1]\n- {said.format(2)} [2]\n" in report, report
    assert "- Costs fell 90% last year *(not verified)*.\n" in report
    note = "Citations checked: 1 of 3 claims supported by their sources; 2 fixed."
    assert note in outcome.notes and note in report
    roles = [r.role for r in harness.llm.fake.requests]
    assert roles.count("verifier") == 1 and roles.count("reviser") == 1


@sqlite_only
async def test_chinese_topic_asks_for_a_chinese_report(harness: Harness) -> None:
    outcome = await harness.research("固态电池的最新进展", depth=1)
    assert outcome.status is RunStatus.SUCCEEDED
    prompt = user_prompt(harness.writer_requests()[0])
    assert "Write the whole report in Chinese" in prompt
    assert outcome.report_markdown is not None
    assert "\n## 来源\n" in outcome.report_markdown
    assert "## Sources" not in outcome.report_markdown


@sqlite_only
async def test_a_chinese_findings_only_report_has_chinese_headings(harness: Harness) -> None:
    harness.search.fake.fail_next(SEARCH_ATTEMPTS)  # the first search fails: a note
    harness.llm.fake.script("writer", *failed_call())
    outcome = await harness.research("固态电池的最新进展", depth=2)
    assert outcome.status is RunStatus.SUCCEEDED
    report = outcome.report_markdown
    assert report is not None
    written = "*撰写于 2026年12月2日。*"
    assert report.startswith(f"# 固态电池的最新进展\n\n{written}\n\n> 报告撰写模型不可用（")
    headings = re.findall(r"^## (.+)$", report, re.MULTILINE)
    assert headings == ["主要发现", "本次运行说明", "来源"]


# --- follow-ups, cancellation and resume -------------------------------------------------------


async def test_follow_up_sees_and_skips_earlier_topics(harness: Harness) -> None:
    first = await harness.research("solar power", depth=2)
    assert first.status is RunStatus.SUCCEEDED
    harness.llm.fake.script("planner", plan(first.topics[0].upper()))  # a repeat, re-asked
    before = len(harness.planner_requests())
    second = await harness.research("solar power costs", depth=2)
    assert second.status is RunStatus.SUCCEEDED
    assert second.thread == first.thread
    prompt = user_prompt(harness.planner_requests()[before])
    searched = prompt.split("Topics already searched:", 1)[1].split("Findings so far")[0]
    for topic in first.topics:
        assert f"- {topic}" in searched
    assert not set(second.topics) & set(first.topics)
    queries = harness.search.fake.queries
    assert len(queries) == 4 and len(set(queries)) == 4
    thread = await harness.store.threads.get_thread(second.thread)
    assert thread is not None
    variables = await harness.store.threads.load_variables(thread.id)
    assert variables is not None and variables["topics"] == first.topics + second.topics
    runs = await harness.store.runs.thread_runs(thread.id)
    assert [r.status for r in runs] == ["succeeded", "succeeded"]


@sqlite_only
async def test_cancel_request_stops_the_run(harness: Harness) -> None:
    run_id = await harness.submit()
    progress = after_search(1, lambda: harness.service.requests.cancel(run_id))
    outcome = await run_attended(harness.service, run_id, progress)
    assert outcome.status is RunStatus.CANCELLED
    assert len(harness.search.fake.queries) == 1
    # Cancelled through this process's service: seen at the start of the next round at once.
    assert len(harness.planner_requests()) == 1
    assert outcome.report_markdown is None
    assert progress.final.splitlines()[0] == "Research cancelled after 1 of 3 searches."
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and run.status == "cancelled" and run.rounds_done == 1
    assert harness.writer_requests() == []
    # A run cancelled on request stays cancelled.
    again = await run_attended(harness.service, run_id)
    assert again.status is RunStatus.CANCELLED and len(harness.search.fake.queries) == 1
    # An explicit resume picks it up from the checkpoint without repeating the search.
    first_query = harness.search.fake.queries[0]
    resumed = await run_attended(harness.service, run_id, again=True)
    assert resumed.status is RunStatus.SUCCEEDED and resumed.report_markdown
    assert len(harness.search.fake.queries) == 3
    assert harness.search.fake.queries.count(first_query) == 1
    assert len(resumed.topics) == 3


async def test_cancel_from_another_process_is_seen_at_the_next_checkpoint(
    harness: Harness,
) -> None:
    run_id = await harness.submit()
    database, other = await fresh_store(harness.url)  # e.g. a Slack replica
    try:
        progress = after_search(1, lambda: other.runs.request_cancel(run_id))
        outcome = await run_attended(harness.service, run_id, progress)
    finally:
        await database.dispose()
    assert outcome.status is RunStatus.CANCELLED
    assert progress.final.splitlines()[0] == "Research cancelled after 1 of 3 searches."
    # The flag arrives with the checkpoint after the next plan, before that plan's search.
    assert len(harness.search.fake.queries) == 1
    assert len(harness.planner_requests()) == 2
    assert harness.writer_requests() == []
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and (run.status, run.rounds_done) == ("cancelled", 1)


async def test_cancel_from_another_process_while_the_report_is_written_keeps_no_report(
    harness: Harness,
) -> None:
    """A replica that is not running the research cancels it while its writer works: the
    writer's report is not recorded (the run ends cancelled in the same statement that would
    have recorded it), so no report is delivered after the canceller was told "Cancelling"."""
    run_id = await harness.submit(depth=1)
    database, other = await fresh_store(harness.url)

    async def on_event(event: ProgressEvent) -> None:
        if event.kind is ProgressKind.WRITING:
            assert await other.runs.request_cancel(run_id) is CancelRequest.CANCELLING

    try:
        progress = Collect(on_event)
        outcome = await run_attended(harness.service, run_id, progress)
    finally:
        await database.dispose()
    assert len(harness.writer_requests()) == 1  # it was writing
    assert outcome.status is RunStatus.CANCELLED and outcome.report_markdown is None
    assert progress.final.startswith("Research cancelled")
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and (run.status, run.report_markdown) == ("cancelled", None)
    assert await harness.store.runs.run_sources(run_id) == []


async def test_a_cancel_from_another_replica_stops_the_writer_at_the_next_heartbeat(
    harness: Harness,
) -> None:
    """The replica that was told "Cancelling" is not the one writing the report: the writer's
    heartbeat carries the cancel to it, and the writer call is stopped there (no report, no
    writer tokens spent) instead of running to its end and being thrown away."""
    harness.llm.fake.script("writer", Hang(60))
    # A heartbeat every second: soon enough to carry the cancel, and a lease (3 s) no busy
    # machine lets run out between two of them (at 0.6 s, a loaded CI worker lost the claim).
    service = harness.build_service(policy=RunPolicy(timing=LeaseTiming(3.0)))
    run_id = await harness.submit(depth=1)
    database, other = await fresh_store(harness.url)

    async def on_event(event: ProgressEvent) -> None:
        if event.kind is ProgressKind.WRITING:  # the writer call is about to go out
            assert await other.runs.request_cancel(run_id) is CancelRequest.CANCELLING

    try:
        progress = Collect(on_event)
        outcome = await run_attended(service, run_id, progress)
    finally:
        await database.dispose()
    assert outcome.status is RunStatus.CANCELLED and outcome.report_markdown is None
    assert "writer-model" not in outcome.usage.tokens_by_model  # it never answered
    assert progress.final.startswith("Research cancelled")


@sqlite_only
async def test_a_run_cancelled_before_it_starts_does_nothing(harness: Harness) -> None:
    run_id = await harness.submit()
    assert await harness.service.requests.cancel(run_id) is CancelRequest.CANCELLED
    outcome = await run_attended(harness.service, run_id)
    assert outcome.status is RunStatus.CANCELLED
    assert harness.planner_requests() == [] and harness.search.fake.queries == []


async def test_interrupted_task_resumes_without_repeating_searches(harness: Harness) -> None:
    run_id = await harness.submit()
    first_done = asyncio.Event()
    harness.search.fake.latency = 0.2
    task = asyncio.create_task(
        run_attended(harness.service, run_id, after_search(1, first_done.set))
    )
    await asyncio.wait_for(first_done.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    first_query = harness.search.fake.queries[0]

    database, store = await fresh_store(harness.url)
    try:
        run = await store.runs.get_run(run_id)
        assert run is not None
        assert (run.status, run.error, run.rounds_done) == ("cancelled", "interrupted", 1)
    finally:
        await database.dispose()

    harness.search.fake.latency = 0.0
    statuses: list[str] = []

    async def record_status(event: ProgressEvent) -> None:
        run = await harness.store.runs.get_run(run_id)
        assert run is not None
        statuses.append(run.status)

    progress = Collect(record_status)
    outcome = await run_attended(harness.service, run_id, progress)
    assert outcome.status is RunStatus.SUCCEEDED
    assert progress.events[0].text.startswith("Resuming")
    assert set(statuses[:-1]) == {"running"}  # the resumed run is running again
    assert harness.search.fake.queries.count(first_query) == 1
    assert len(outcome.topics) == 3 and outcome.topics[0] == first_query
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and run.status == "succeeded" and run.rounds_done == 3
    assert run.error is None and run.report_markdown == outcome.report_markdown


def _research_until_first_search_then_kill(env: dict[str, str], cwd: Path) -> str:
    """Start ``fathom research``, SIGKILL it once stderr shows the first search; its stderr."""
    proc = start_fathom("research", TOPIC, "--depth", "3", env=env, cwd=cwd)
    try:
        seen = wait_for_stderr(proc, "1/3th search executed.")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        stop(proc)
    return seen


def _resume(run_id: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bots.cli", "resume", run_id, "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_resume_after_a_crash(
    harness: Harness, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """SIGKILL a CLI research after its first search; ``fathom resume`` finishes it."""
    cli_env["DATABASE_URL"] = harness.url
    harness.search.fake.latency = 0.5  # the second search is still running when it is killed
    stderr = await asyncio.to_thread(_research_until_first_search_then_kill, cli_env, tmp_path)
    assert "2/3th search executed." not in stderr
    first_query = harness.search.fake.queries[0]

    database, store = await fresh_store(harness.url)
    try:
        [thread] = await store.threads.list_threads()
        run = await store.runs.latest_run_in_thread(thread.key)
        assert run is not None
        assert (run.status, run.rounds_done, run.searches) == ("running", 1, 1)
    finally:
        await database.dispose()

    harness.search.fake.latency = 0.0
    resumed = await asyncio.to_thread(_resume, run.id, cli_env, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["run_id"] == run.id and data["status"] == "succeeded"
    assert "Resuming" in resumed.stderr
    assert harness.search.fake.queries.count(first_query) == 1
    assert data["topics"][0] == first_query and len(data["topics"]) == 3
    assert data["usage"]["searches"] == 3
    final = await harness.store.runs.get_run(run.id)
    assert final is not None and final.status == "succeeded" and final.rounds_done == 3
    assert final.searches == 3
    assert final.report_markdown is not None and final.report_markdown.count("## Sources") == 1
    assert len(await harness.store.runs.thread_runs(final.thread_id)) == 1


# --- the runtime's shared TLS context ------------------------------------------------------


def _self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, made with the openssl CLI."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    try:
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
                *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
                *("-addext", "subjectAltName=IP:127.0.0.1"),
            ],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot make a test certificate with openssl: {exc}")
    return cert, key


async def _https_get(verify: ssl.SSLContext, cert: Path, key: Path) -> int:
    """Status of a GET through httpx to a one-response HTTPS server on 127.0.0.1."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client refused the certificate
        finally:
            writer.close()

    server = await asyncio.start_server(respond, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(verify=verify, trust_env=False) as client:
            return (await client.get(f"https://127.0.0.1:{port}/")).status_code
    finally:
        server.close()
        await server.wait_closed()


async def test_the_shared_tls_context_loads_certificates_at_the_first_handshake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = _self_signed_cert(tmp_path)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    tls = DeferredTrustContext()
    assert tls.verify_mode is ssl.CERT_REQUIRED and tls.check_hostname
    assert tls.cert_store_stats()["x509_ca"] == 0  # building it loaded nothing
    assert await _https_get(tls, cert, key) == 204
    assert tls.cert_store_stats()["x509_ca"] == 1  # SSL_CERT_FILE, as httpx would use it

    monkeypatch.delenv("SSL_CERT_FILE")
    default = DeferredTrustContext()  # system store + certifi: a self-signed cert is refused
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await _https_get(default, cert, key)
    assert default.cert_store_stats()["x509_ca"] > 100


async def test_the_runtime_shares_one_tls_context(
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    tmp_path: Path,
    templates: MigratedTemplates,
) -> None:
    settings = load_settings(
        _env_file=None,
        DATABASE_URL=templates.sqlite(tmp_path / "f.db"),
        OPENAI_BASE_URL=llm_server.base_url,
        OPENAI_API_KEY=KEY,
        FATHOM_SEARCH="searxng",
        SEARXNG_URL=search_server.url,
        FATHOM_SEARCH_CACHE_TTL=0,  # the provider under the process-wide limit, no cache
    )
    async with open_runtime(settings) as runtime:
        search_client: Any = runtime.search.provider._client  # type: ignore[attr-defined]
        llm_client: Any = runtime.llm.planner._client._client
        # httpcore's pools (private, but the only place the contexts can be seen)
        search_tls = search_client._transport._pool._ssl_context
        assert isinstance(search_tls, DeferredTrustContext)
        assert llm_client._transport._pool._ssl_context is search_tls
        run, _ = await runtime.research.requests.submit(
            ResearchRequest(
                topic=TOPIC,
                depth=1,
                thread=ThreadKey(platform="cli", workspace="local", channel="local", thread="tls"),
            )
        )
        outcome = await run_attended(runtime.research, run.id)
        assert outcome.status is RunStatus.SUCCEEDED
        assert search_tls.cert_store_stats()["x509_ca"] == 0  # http:// only: nothing loaded
