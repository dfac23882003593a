"""A round's search of the web and the internal sources together (core.engine.searching), and
how internal documents become numbered sources (core.research.report).

The internal sources here are small providers written in the test (``core.search``'s protocol,
which :class:`core.knowledge.McpSource` fills in); the MCP client itself, against real MCP
servers, is tested in tests/test_knowledge.py and end to end in tests/test_team_knowledge.py.
"""

from __future__ import annotations

import asyncio

from core.engine.searching import INTERNAL_FAILURES_TO_GIVE_UP, search_topic
from core.engine.sources import number_sources, source_key, writer_source_blocks
from core.engine.state import RunSources, RunState
from core.models import Finding, SearchResult, ThreadVariables
from core.research.report import finalize_report
from core.research.steps import forget_other_servers
from core.search import SearchError
from core.search.base import SearchTimeout
from core.search.http import TIMED_OUT
from core.words.reasons import Reason


def web(title: str, url: str) -> SearchResult:
    return SearchResult(title=title, url=url, snippet=f"{title} snippet")


def doc(server: str, title: str, url: str = "", text: str = "") -> SearchResult:
    return SearchResult(
        title=title,
        url=url,
        snippet=text[:100],
        server=server,
        passages=[text] if text else [],
    )


class Source:
    """A provider that answers ``results`` (or raises ``error``) once ``gate`` is set, and
    records the queries it was asked."""

    def __init__(
        self,
        name: str,
        results: list[SearchResult] | None = None,
        *,
        error: Exception | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.name = name
        self.results = results or []
        self.error = error
        self.gate = gate
        self.asked: list[str] = []
        self.called = asyncio.Event()

    async def search(self, query: str) -> list[SearchResult]:
        self.asked.append(query)
        self.called.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.results


def state_with(sources: RunSources) -> RunState:
    return RunState("run1", "topic", 3, ThreadVariables(), sources=sources)


async def test_the_web_and_every_internal_source_are_asked_at_once() -> None:
    # The web answers only once both servers have been asked: searched one after the other,
    # the round would never finish (the timeout below only guards against a hang).
    wiki_called, tickets_called = asyncio.Event(), asyncio.Event()
    gate = asyncio.Event()
    wiki = Source("wiki", [doc("wiki", "Design doc", text="the design")], gate=gate)
    tickets = Source("tickets", [doc("tickets", "PROJ-1", "jira://PROJ-1")], gate=gate)
    wiki.called, tickets.called = wiki_called, tickets_called
    both_asked = asyncio.Event()

    async def open_gate() -> None:
        await wiki_called.wait()
        await tickets_called.wait()
        both_asked.set()
        gate.set()

    the_web = Source("searxng", [web("Page", "https://example.com/a")], gate=both_asked)
    state = state_with(RunSources(web=True, internal=(wiki, tickets)))
    async with asyncio.timeout(30):
        opener = asyncio.create_task(open_gate())
        finding = await search_topic(the_web, state, "batteries")
        await opener
    assert [r.title for r in finding.results] == ["Page", "Design doc", "PROJ-1"]
    assert [r.server for r in finding.results] == [None, "wiki", "tickets"]
    assert finding.error is None
    assert the_web.asked == wiki.asked == tickets.asked == ["batteries"]
    assert state.usage.searches == 1 and state.usage.internal_searches == 2


async def test_a_failing_server_is_noted_and_the_others_results_are_kept() -> None:
    the_web = Source("searxng", [web("Page", "https://example.com/a")])
    broken = Source(
        "wiki", error=SearchError(Reason.verbatim("wiki: the tool failed: index offline"))
    )
    state = state_with(RunSources(internal=(broken,)))
    finding = await search_topic(the_web, state, "batteries")
    assert [r.title for r in finding.results] == ["Page"] and finding.error is None
    assert state.notes == [
        'The internal source "wiki" failed for "batteries": wiki: the tool failed: index offline.'
    ]


async def test_every_source_failing_gives_a_finding_that_says_why() -> None:
    the_web = Source("searxng", error=SearchError(Reason.verbatim("searxng: HTTP 500")))
    broken = Source("wiki", error=RuntimeError("boom"))  # a crash is a failure, not the run's
    state = state_with(RunSources(internal=(broken,)))
    finding = await search_topic(the_web, state, "batteries")
    assert finding.results == [] and finding.error == "searxng: HTTP 500; RuntimeError"
    assert len(state.notes) == 2


async def test_a_server_that_keeps_timing_out_is_given_up_for_the_rest_of_the_run() -> None:
    the_web = Source("searxng", [web("Page", "https://example.com/a")])
    slow = Source("wiki", error=SearchTimeout(Reason.verbatim("wiki: no answer within 20 s")))
    state = state_with(RunSources(internal=(slow,)))
    for i in range(INTERNAL_FAILURES_TO_GIVE_UP + 2):
        finding = await search_topic(the_web, state, f"topic {i}")
        assert [r.title for r in finding.results] == ["Page"]
    assert slow.asked == [f"topic {i}" for i in range(INTERNAL_FAILURES_TO_GIVE_UP)]
    assert state.sources.given_up == {"wiki"}
    assert state.usage.internal_searches == INTERNAL_FAILURES_TO_GIVE_UP
    assert state.notes == [
        'The internal source "wiki" timed out 2 times in a row (last for "topic 1": wiki: no '
        "answer within 20 s) and was not asked again in this research."
    ]  # one note, not one a round


async def test_a_server_that_fails_every_call_is_left_out_with_one_note() -> None:
    """A server whose every call is a tool error (mcp-server-git without its repository, a
    sqlite server without its table) is asked twice, then left out, with one note."""
    the_web = Source("searxng", [web("Page", "https://example.com/a")])
    broken = Source(
        "wiki", error=SearchError(Reason.verbatim("wiki: the tool failed: no such table"))
    )
    state = state_with(RunSources(internal=(broken,)))
    for topic in ("one", "two", "three", "four"):
        await search_topic(the_web, state, topic)
    assert broken.asked == ["one", "two"] and state.sources.given_up == {"wiki"}
    assert state.notes == [
        'The internal source "wiki" failed 2 times in a row (last for "two": wiki: the tool '
        "failed: no such table) and was not asked again in this research."
    ]


async def test_a_chinese_run_notes_a_failing_server_in_chinese() -> None:
    """The first failure's note, and the note that replaces it when the server is left out,
    are in the run's language (the reason's own Chinese words; the server's name is data)."""
    the_web = Source("searxng", [web("Page", "https://example.com/a")])
    slow = Source("wiki", error=SearchTimeout(TIMED_OUT.prefixed("wiki")))
    state = RunState(
        "run1", "热泵的冬季表现", 3, ThreadVariables(), sources=RunSources(internal=(slow,))
    )
    await search_topic(the_web, state, "热泵 效率")
    assert state.notes == ['内部来源 "wiki" 搜索“热泵 效率”失败：wiki：超时。']
    await search_topic(the_web, state, "热泵 成本")
    assert state.notes == [
        '内部来源 "wiki" 连续 2 次超时（最近一次搜索“热泵 成本”：wiki：超时），本次研究不再询问它。'
    ]


async def test_an_answer_between_timeouts_resets_the_count() -> None:
    the_web = Source("searxng", [web("Page", "https://example.com/a")])
    flaky = Source("wiki", error=SearchTimeout(Reason.verbatim("wiki: slow")))
    state = state_with(RunSources(internal=(flaky,)))
    await search_topic(the_web, state, "one")
    flaky.error = None
    await search_topic(the_web, state, "two")
    flaky.error = SearchTimeout(Reason.verbatim("wiki: slow"))
    await search_topic(the_web, state, "three")
    await search_topic(the_web, state, "four")
    assert flaky.asked == ["one", "two", "three", "four"]
    assert state.sources.given_up == {"wiki"}


async def test_internal_only_never_asks_the_web() -> None:
    the_web = Source("searxng", [web("Page", "https://example.com/a")])
    wiki = Source("wiki", [doc("wiki", "Design doc", text="the design")])
    state = state_with(RunSources(web=False, internal=(wiki,)))
    finding = await search_topic(the_web, state, "batteries")
    assert the_web.asked == [] and [r.title for r in finding.results] == ["Design doc"]
    assert state.usage.searches == 0 and state.usage.internal_searches == 1


async def test_with_nothing_left_to_ask_the_round_says_so() -> None:
    the_web = Source("searxng")
    state = state_with(RunSources(web=False, internal=()))
    finding = await search_topic(the_web, state, "batteries")
    assert finding.error and the_web.asked == []
    assert state.notes == ['"batteries" was not searched: no source was left to search.']


# --- internal documents as numbered sources --------------------------------------------------


def test_internal_documents_are_numbered_beside_web_results() -> None:
    findings = [
        Finding(
            topic="batteries",
            results=[
                web("Page", "https://example.com/a"),
                doc("wiki", "Design doc", "https://wiki.internal/design", "the design text"),
                doc("tickets", "PROJ-1 crash", "jira://PROJ-1", "a crash"),
                doc("wiki", "Notes", "", "no link at all"),
                doc("wiki", "Notes", "", "the same untitled note again"),  # same key: once
            ],
        )
    ]
    sources = number_sources(findings)
    assert [(s.n, s.title, s.kind, s.server) for s in sources] == [
        (1, "Page", "web", None),
        (2, "Design doc (wiki)", "internal", "wiki"),
        (3, "PROJ-1 crash (tickets)", "internal", "tickets"),
        (4, "Notes (wiki)", "internal", "wiki"),
    ]
    assert sources[1].passages == ("the design text",)
    assert sources[3].key == source_key(findings[0].results[3]) == "internal:wiki:Notes"
    blocks = writer_source_blocks(sources)
    assert blocks[1].startswith("[2] Design doc (wiki) — https://wiki.internal/design")
    assert "(internal source wiki, search: batteries)" in blocks[1]
    assert "From the document:\n    > the design text" in blocks[1]
    assert blocks[3].startswith("[4] Notes (wiki) — an internal document")


def test_an_internal_link_may_be_in_the_report_and_other_schemes_are_not_links() -> None:
    findings = [
        Finding(
            topic="t",
            results=[
                doc("wiki", "Design doc", "https://wiki.internal/design", "text"),
                doc("tickets", "PROJ-1", "jira://PROJ-1", "text"),
            ],
        )
    ]
    body = (
        "# T\n\nSee [the design](https://wiki.internal/design) and [1] [2], "
        "not https://evil.example/x."
    )
    checked = finalize_report(body, number_sources(findings), "T")
    assert "https://wiki.internal/design" in checked.markdown
    assert "evil.example" not in checked.markdown
    assert "- [1] [Design doc (wiki)](https://wiki.internal/design)" in checked.markdown
    assert "- [2] PROJ-1 (tickets)\n" in checked.markdown  # not a link: a chat cannot open it
    assert [(s.kind, s.server) for s in checked.sources] == [
        ("internal", "wiki"),
        ("internal", "tickets"),
    ]


def test_a_channel_that_may_no_longer_use_a_server_loses_its_stored_results() -> None:
    variables = ThreadVariables(
        topics=["a"],
        findings=[
            Finding(
                topic="a",
                results=[
                    web("Page", "https://example.com/a"),
                    doc("wiki", "Design doc", text="secret"),
                    doc("tickets", "PROJ-1", text="ticket"),
                ],
            )
        ],
    )
    assert forget_other_servers(variables, {"tickets"}) == 1
    assert [r.title for r in variables.findings[0].results] == ["Page", "PROJ-1"]
    assert forget_other_servers(variables, set()) == 1
    assert [r.title for r in variables.findings[0].results] == ["Page"]
    assert forget_other_servers(variables, set()) == 0


def test_the_final_status_says_how_many_sources_are_internal() -> None:
    from core.models import Source, Usage
    from core.research.outcome import RunOutcome, final_progress_text
    from core.values import RunStatus

    sources = [
        Source(n=1, title="Page", url="https://example.com/a"),
        Source(n=2, title="Design doc (wiki)", url="", kind="internal", server="wiki"),
    ]
    outcome = RunOutcome(
        run_id="r",
        thread="cli:local:local:t",
        status=RunStatus.SUCCEEDED,
        topic="batteries",
        depth=3,
        topics=["batteries"],
        report_markdown="# r",
        sources=sources,
        usage=Usage(pages_read=2),
        seconds=1.0,
    )
    assert final_progress_text(outcome).splitlines()[0] == (
        "Research done: 0/3 searches, 2 sources, 1 from internal sources, 2 pages read."
    )
