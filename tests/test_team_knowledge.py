"""Team knowledge end to end: the real runtime (``core.runtime.open_runtime``: storage, the
LLM and search clients, ``core.knowledge.Knowledge``) against the LLM and search fakes and a
real MCP server written with the SDK (tests/fakes/notes_mcp.py, a stdio subprocess that
records every call it gets), and Slack through the served app.

What a channel may use is decided from the run's own thread key where the run executes: a run
in a channel the server is not configured for never calls it, and nothing from it is stored in
that thread.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from core.chat.grammar import ScheduleCommand
from core.operations.job import run_attended
from core.research.requests import ResearchRequest
from core.runtime import Runtime, open_runtime
from core.settings import load_settings
from core.values import SourceChoice, ThreadKey
from tests.databases import MigratedTemplates
from tests.env import is_fathom_setting
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.fakes.llm import Reply
from tests.test_mcp_real import RUNBOOKS, runbooks, team_database

NOTES_SERVER = Path(__file__).parent / "fakes" / "notes_mcp.py"
WORLD_SERVER = Path(__file__).parent / "fakes" / "world_mcp.py"
ALLOWED = "slack:T0001:C0001"
OTHER = "slack:T0001:C0002"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if is_fathom_setting(name):
            monkeypatch.delenv(name)


def write_config(path: Path, calls: Path, channels: list[str], mode: str = "") -> Path:
    """A FATHOM_MCP_CONFIG with the notes server, usable by ``channels`` (``mode``: how it
    misbehaves, see tests/fakes/notes_mcp.py)."""
    config = {
        "mcpServers": {
            "notes": {
                "command": sys.executable,
                "args": [str(NOTES_SERVER)],
                "env": {"NOTES_CALLS": str(calls), "NOTES_MODE": mode},
                "fathom": {"channels": channels},
            }
        }
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def calls_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


OpenTeam = Callable[..., Any]


@pytest.fixture
def open_team(
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    templates: MigratedTemplates,
) -> OpenTeam:
    """``async with open_team(channels) as runtime``: the runtime with the notes server
    configured for ``channels``, on one SQLite file for the whole test."""
    database = templates.sqlite(tmp_path / "team.db")

    @asynccontextmanager
    async def open_it(
        channels: list[str],
        mode: str = "",
        mcp_timeout: str = "20",
        servers: dict[str, Any] | None = None,
    ) -> AsyncIterator[Runtime]:
        """``servers``: the ``mcpServers`` entries instead of the notes server."""
        config = write_config(tmp_path / "mcp.json", tmp_path / "calls.jsonl", channels, mode)
        if servers is not None:
            config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
        settings = load_settings(
            _env_file=None,
            DATABASE_URL=database,
            OPENAI_API_KEY="fake-key",
            OPENAI_BASE_URL=llm_server.base_url,
            FATHOM_SEARCH="searxng",
            SEARXNG_URL=search_server.url,
            FATHOM_SEARCH_CACHE_TTL="0",
            FATHOM_READ_PAGES="0",
            FATHOM_LLM_MAX_RETRIES="1",
            FATHOM_MCP_CONFIG=str(config),
            FATHOM_MCP_TIMEOUT=mcp_timeout,
        )
        async with open_runtime(settings) as runtime:
            yield runtime

    return open_it


async def research(
    runtime: Runtime,
    thread: str,
    topic: str = "pump failures",
    *,
    depth: int = 1,
    sources: SourceChoice = SourceChoice.ALL,
    strategy: str = "iterative",
) -> Any:
    run = await submit(runtime, thread, topic, depth=depth, sources=sources, strategy=strategy)
    return await run_attended(runtime.research, run.id)


async def submit(
    runtime: Runtime,
    thread: str,
    topic: str = "pump failures",
    *,
    depth: int = 1,
    sources: SourceChoice = SourceChoice.ALL,
    strategy: str = "iterative",
) -> Any:
    request = ResearchRequest(
        topic=topic,
        depth=depth,
        thread=ThreadKey.parse(thread),
        requested_by="U1",
        sources=sources,
        strategy=strategy,
    )
    run, created = await runtime.research.requests.submit(request)
    assert created
    return run


async def stored_results(runtime: Runtime, thread: str) -> list[dict[str, Any]]:
    record = await runtime.store.threads.get_thread(thread)
    assert record is not None
    variables = await runtime.store.threads.load_variables(record.id)
    assert variables is not None
    return [r for f in variables["findings"] for r in f["results"]]


async def test_a_run_in_an_allowed_channel_cites_the_internal_document(
    open_team: OpenTeam, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    async with open_team([ALLOWED]) as runtime:
        outcome = await research(runtime, f"{ALLOWED}:1700.1", sources=SourceChoice.INTERNAL)
    assert outcome.status.value == "succeeded", outcome.error
    [query] = [c["query"] for c in calls_of(tmp_path / "calls.jsonl")]
    assert query.startswith("pump failures")
    cited = [(s.title, s.kind, s.server) for s in outcome.sources]
    assert (f"Runbook: {query} (notes)", "internal", "notes") in cited
    report = outcome.report_markdown or ""
    # The server returned this link, so the report may link it; the other URI is no link.
    assert f"[Runbook: {query} (notes)](https://wiki.example.internal/runbook)" in report
    assert "notes://" not in report
    assert outcome.usage.searches == 0 and outcome.usage.internal_searches == 1
    writer = json.dumps(llm_server.fake.requests_for("writer")[-1].body)
    assert "internal source notes" in writer and "restart the pump" in writer


async def test_the_web_and_the_server_are_searched_together_and_both_are_sources(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    async with open_team([ALLOWED]) as runtime:
        outcome = await research(runtime, f"{ALLOWED}:1700.2", depth=2)
        stored = await stored_results(runtime, f"{ALLOWED}:1700.2")
    assert outcome.status.value == "succeeded", outcome.error
    assert len(calls_of(tmp_path / "calls.jsonl")) == 2  # once per round
    assert {r["server"] for r in stored} == {None, "notes"}
    assert outcome.usage.searches == 2 and outcome.usage.internal_searches == 2


async def test_a_channel_that_is_not_allowed_never_calls_the_server(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    async with open_team([ALLOWED]) as runtime:
        outcome = await research(runtime, f"{OTHER}:1700.3", depth=2)
        stored = await stored_results(runtime, f"{OTHER}:1700.3")
        refused = await research(runtime, f"{OTHER}:1700.4", sources=SourceChoice.INTERNAL)
        workspace = await research(runtime, "slack:T0002:C0001:1700.5")
    assert outcome.status.value == "succeeded" and workspace.status.value == "succeeded"
    assert calls_of(tmp_path / "calls.jsonl") == []
    assert stored and all(r["server"] is None for r in stored)
    assert all(s.kind == "web" for s in outcome.sources)
    assert refused.status.value == "failed"
    assert "No internal source is available in this channel" in (refused.error or "")


async def test_a_follow_up_in_the_allowed_thread_uses_the_server_again(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    thread = f"{ALLOWED}:1700.6"
    async with open_team([ALLOWED]) as runtime:
        await research(runtime, thread, "pump failures")
        follow = await research(runtime, thread, "valve placement", sources=SourceChoice.INTERNAL)
    assert follow.status.value == "succeeded", follow.error
    queries = [c["query"] for c in calls_of(tmp_path / "calls.jsonl")]
    assert len(queries) == 2 and queries[1].startswith("valve placement")


async def test_a_server_taken_from_a_channel_takes_its_stored_findings_with_it(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    thread = f"{ALLOWED}:1700.7"
    async with open_team([ALLOWED]) as runtime:
        await research(runtime, thread)
        assert any(r["server"] == "notes" for r in await stored_results(runtime, thread))
    async with open_team(["feishu"]) as runtime:  # the operator moved the server elsewhere
        follow = await research(runtime, thread, "valve placement")
        stored = await stored_results(runtime, thread)
    assert follow.status.value == "succeeded", follow.error
    assert all(r["server"] is None for r in stored)
    assert all(s.kind == "web" for s in follow.sources)
    assert any("internal sources this channel may no longer use" in n for n in follow.notes)
    assert len(calls_of(tmp_path / "calls.jsonl")) == 1  # only the first run's


async def test_a_digest_in_an_allowed_channel_uses_the_server(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    command = ScheduleCommand(
        topic="pump failures",
        cron="0 9 * * 1",
        timezone="UTC",
        depth=1,
        strategy="iterative",
        sources=SourceChoice.INTERNAL,
    )
    async with open_team([ALLOWED]) as runtime:
        digest = await runtime.digests.add(
            command, thread=ThreadKey.parse(f"{ALLOWED}:1700.8"), created_by="U1"
        )
        assert digest.sources == "internal"
        run, created = await runtime.digests.fire(digest, datetime(2026, 12, 7, 9, tzinfo=UTC))
        assert run is not None and created
        outcome = await run_attended(runtime.research, run.id)
    assert outcome.status.value == "succeeded", outcome.error
    [query] = [c["query"] for c in calls_of(tmp_path / "calls.jsonl")]
    assert query.startswith("pump failures")
    assert any(s.server == "notes" for s in outcome.sources)


async def test_a_graph_run_asks_the_server_each_sub_question_and_cites_it(
    open_team: OpenTeam, tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    async with open_team([ALLOWED]) as runtime:
        outcome = await research(
            runtime,
            f"{ALLOWED}:1750.1",
            strategy="graph",
            sources=SourceChoice.INTERNAL,
        )
    report = clean(outcome)
    nodes = outcome.as_json()["nodes"]
    assert isinstance(nodes, list)
    questions = {node["question"] for node in nodes}
    assert len(questions) == 3 and {c["query"] for c in calls_of(tmp_path / "calls.jsonl")} == (
        questions
    )
    answers = [json.dumps(r.body) for r in llm_server.fake.requests_for("answerer")]
    assert len(answers) == 3 and all("Runbook: pump failures" in a for a in answers)
    assert any(s.server == "notes" for s in outcome.sources) and "(notes)" in report


async def test_scope_is_decided_when_the_run_executes_not_when_it_was_asked(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    async with open_team([ALLOWED]) as asked:  # (the process that took the request, then died)
        anything = await submit(asked, f"{ALLOWED}:1760.1")
        internal = await submit(asked, f"{ALLOWED}:1760.2", sources=SourceChoice.INTERNAL)
    async with open_team(["feishu"]) as executing:  # the channel was taken off the server
        web_only = await run_attended(executing.research, anything.id)
        refused = await run_attended(executing.research, internal.id)
    assert calls_of(tmp_path / "calls.jsonl") == []
    assert web_only.status.value == "succeeded" and web_only.usage.internal_searches == 0
    assert all(s.kind == "web" for s in web_only.sources)
    assert refused.status.value == "failed" and refused.usage.searches == 0
    assert "No internal source is available in this channel" in (refused.error or "")


async def test_the_server_sees_none_of_fathoms_secrets(
    open_team: OpenTeam, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    async with open_team([ALLOWED]) as runtime:
        await research(runtime, f"{ALLOWED}:1700.9", sources=SourceChoice.INTERNAL)
    [call] = calls_of(tmp_path / "calls.jsonl")
    assert "NOTES_CALLS" in call["env"]  # its configured env
    assert not {"SLACK_BOT_TOKEN", "OPENAI_API_KEY", "DATABASE_URL"} & set(call["env"])


# -- servers that misbehave: the report is clean either way ----------------------------------


def clean(outcome: Any) -> str:
    assert outcome.status.value == "succeeded", outcome.error
    report = str(outcome.report_markdown)
    for bad in ("<!channel>", "<!here>", "<@U999>", "evil.example", "notes://"):
        assert bad not in report, bad
    return report


async def test_a_server_that_hangs_costs_its_timeout_and_is_given_up(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    async with open_team([ALLOWED], mode="hang", mcp_timeout="0.5") as runtime:
        # (A search waits for a session still connecting within the same timeout: on a slow
        # machine spawning the server alone may take longer than 0.5 s.)
        assert runtime.knowledge is not None
        await runtime.knowledge.wait_started()
        outcome = await research(runtime, f"{ALLOWED}:1800.1", depth=3)
    report = clean(outcome)
    assert len(calls_of(tmp_path / "calls.jsonl")) == 2  # then left out for the run
    assert report.count('The internal source "notes"') == 1  # one note, not one a round
    assert 'The internal source "notes" timed out 2 times in a row' in report
    assert "was not asked again in this research" in report
    assert all(s.kind == "web" for s in outcome.sources)


async def test_a_server_that_crashes_mid_run_is_restarted_for_the_next_run(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    async with open_team([ALLOWED], mode="crash") as runtime:
        (source,) = runtime.knowledge.sources if runtime.knowledge else []
        source.initial_backoff = 0.0  # (1 s in production) the next call may reconnect
        first = await research(runtime, f"{ALLOWED}:1800.2")
        second = await research(runtime, f"{ALLOWED}:1800.3", sources=SourceChoice.INTERNAL)
    assert 'The internal source "notes" failed for' in clean(first)
    assert any(s.server == "notes" for s in second.sources)
    assert "notes" in clean(second) and len(calls_of(tmp_path / "calls.jsonl")) == 2


async def test_a_server_that_answers_an_error_is_a_note(open_team: OpenTeam) -> None:
    async with open_team([ALLOWED], mode="error") as runtime:
        outcome = await research(runtime, f"{ALLOWED}:1800.4")
    report = clean(outcome)
    # (The SDK's server answers "Error executing tool search", keeping its exception's text.)
    assert 'The internal source "notes" failed for' in report and "the tool failed" in report
    assert all(s.kind == "web" for s in outcome.sources)


async def test_a_server_that_returns_hostile_text_leaves_it_inert(
    open_team: OpenTeam, llm_server: FakeLLMServer
) -> None:
    async with open_team([ALLOWED], mode="hostile") as runtime:
        outcome = await research(runtime, f"{ALLOWED}:1800.5", sources=SourceChoice.INTERNAL)
    clean(outcome)
    assert any(s.server == "notes" for s in outcome.sources)
    writer = json.dumps(llm_server.fake.requests_for("writer")[-1].body)
    assert "evil.example" not in writer and "<!channel>" not in writer


# -- servers that run statements, and one that may be blocked (issue 51, item 1) ------------


def world_server(tmp_path: Path, mode: str, **fathom_options: Any) -> dict[str, Any]:
    """An ``mcpServers`` entry of tests/fakes/world_mcp.py in ``mode``, on tmp_path's team
    database, recording its calls, for the channel :data:`ALLOWED`."""
    return {
        "command": sys.executable,
        "args": [str(WORLD_SERVER)],
        "env": {
            "WORLD_MODE": mode,
            "WORLD_CALLS": str(tmp_path / "calls.jsonl"),
            "WORLD_DB": str(team_database(tmp_path)),
        },
        "fathom": {"channels": [ALLOWED], **fathom_options},
    }


async def test_a_planner_written_delete_never_reaches_the_teams_database(
    open_team: OpenTeam, tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """The run that emptied a team's table: mcp-alchemy's ``execute_query`` named by the
    operator, the planner writing ``DELETE FROM runbooks WHERE title LIKE '%'`` as its next
    topic (what a web page can make it write). With ``fathom.statements: "read-only"`` the
    statement is never sent, the run writes its report from the web and says why the
    database gave nothing; without the opt-in the server never starts."""
    read = "SELECT title, steps FROM runbooks WHERE title LIKE '%Deploy%'"
    delete = "DELETE FROM runbooks WHERE title LIKE '%'"
    llm_server.fake.script(
        "planner",
        Reply(json.dumps({"nextSearchTopic": read, "shouldContinue": True})),
        Reply(json.dumps({"nextSearchTopic": delete, "shouldContinue": True})),
        Reply(json.dumps({"nextSearchTopic": "", "shouldContinue": False})),
    )
    servers = {
        "db": world_server(tmp_path, "alchemy", tool="execute_query", statements="read-only")
    }
    async with open_team([ALLOWED], servers=servers) as runtime:
        outcome = await research(runtime, f"{ALLOWED}:1900.1", topic="our deploy runbook", depth=3)
        stored = await stored_results(runtime, f"{ALLOWED}:1900.1")
    report = clean(outcome)
    assert runbooks(tmp_path) == RUNBOOKS
    assert [c["query"] for c in calls_of(tmp_path / "calls.jsonl")] == [read]
    assert [s.kind for s in outcome.sources if s.server == "db"] == ["internal"]
    (row,) = [r for r in stored if r["server"] == "db"]
    assert "title: Deploy runbook" in row["snippet"] and "previous image tag" in row["snippet"]
    assert f'The internal source "db" failed for "{delete}"' in report
    assert "the query was not sent: it reads as a statement that is not a read (DELETE)" in report

    llm_server.fake.script(
        "planner", Reply(json.dumps({"nextSearchTopic": delete, "shouldContinue": True}))
    )
    servers = {"db": world_server(tmp_path, "alchemy", tool="execute_query")}
    async with open_team([ALLOWED], servers=servers) as runtime:
        outcome = await research(runtime, f"{ALLOWED}:1900.2", topic="our deploy runbook")
        assert runtime.knowledge is not None
        (status,) = runtime.knowledge.status()
    clean(outcome)
    assert status.state == "down" and "runs statements" in str(status.problem)
    assert runbooks(tmp_path) == RUNBOOKS
    assert [c["query"] for c in calls_of(tmp_path / "calls.jsonl")] == [read]  # as before


async def test_a_server_that_may_be_blocked_is_said_in_the_notes(
    open_team: OpenTeam, tmp_path: Path
) -> None:
    """duckduckgo-mcp-server's "No results were found ... This could be due to DuckDuckGo's
    bot detection ..." is no source, and the report's notes keep its words."""
    servers = {"ddg": world_server(tmp_path, "ddg")}
    async with open_team([ALLOWED], servers=servers) as runtime:
        outcome = await research(runtime, f"{ALLOWED}:1900.3", topic="blocked pump failures")
    report = clean(outcome)
    assert all(s.kind == "web" for s in outcome.sources)
    assert 'The source "ddg" found nothing for' in report
    assert "This could be due to DuckDuckGo's bot detection" in report


# -- Slack, through the served app ----------------------------------------------------------

SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


async def test_slack_cites_the_server_in_its_channel_and_refuses_internal_elsewhere(
    serve_fathom: Any, tmp_path: Path
) -> None:
    from tests.fakes.slack import FakeSlackServer, sign, slash_command_body

    calls = tmp_path / "calls.jsonl"
    config = write_config(tmp_path / "mcp.json", calls, ["slack:T0001:C0001"])
    with FakeSlackServer() as slack:
        served = await serve_fathom(
            SLACK_BOT_TOKEN="xoxb-fathom-test-token",
            SLACK_SIGNING_SECRET=SLACK_SECRET,
            SLACK_API_URL=slack.api_url,
            FATHOM_SLACK_EDIT_INTERVAL="0.05",
            FATHOM_MCP_CONFIG=str(config),
        )
        ready = await served.readyz()
        assert "notes" in ready["knowledge"]

        async def command(text: str, channel: str, trigger: str) -> Any:
            body = slash_command_body(text, channel_id=channel, trigger_id=trigger)
            headers = {
                **sign(body, SLACK_SECRET),
                "Content-Type": "application/x-www-form-urlencoded",
            }
            return await served.http.post(
                f"{served.url}/slack/events", content=body, headers=headers
            )

        refused = await command("pump failures depth=1 sources=internal", "C0002", "t-other")
        assert refused.status_code == 200
        assert "No internal source is available in this channel" in refused.json()["text"]
        assert await served.runs("slack:T0001:U123") == []

        await command("pump failures depth=1 sources=all", "C0002", "t-web")
        await command("pump failures depth=1 sources=internal", "C0001", "t-team")
        runs = await served.delivered("slack:T0001:U123", count=2)
        assert {r.status for r in runs} == {"succeeded"}
        by_channel = {r.thread_key.split(":")[2]: r for r in runs}
        report = by_channel["C0001"].report_markdown or ""
        assert "(notes)](https://wiki.example.internal/runbook)" in report
        assert "(notes)" not in (by_channel["C0002"].report_markdown or "")
        posted = json.dumps(slack.fake.history)
        assert "wiki.example.internal/runbook" in posted  # the report reached the thread
        assert len(calls_of(calls)) == 1  # the C0002 run never called it


# -- a Streamable HTTP server ---------------------------------------------------------------


def tickets_app(seen: list[str]) -> Any:
    """A Streamable HTTP MCP server answering plain text, refusing requests without its
    bearer token (``seen``: the Authorization header of every request)."""
    from mcp.server.mcpserver import MCPServer
    from starlette.responses import PlainTextResponse

    server = MCPServer("tickets")

    @server.tool()
    async def find(text: str) -> str:
        """Find tickets."""
        return f"PROJ-7: the pump trips when {text}; fixed by raising the valve threshold."

    app = server.streamable_http_app(stateless_http=True, json_response=True)

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            token = headers.get(b"authorization", b"").decode()
            seen.append(token)
            if token != "Bearer t0ken":
                await PlainTextResponse("no", 401)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


async def test_a_streamable_http_server_gets_its_headers_and_its_text_is_one_source(
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio

    from tests.chat_app import LifespanServer

    seen: list[str] = []
    http = await asyncio.to_thread(LifespanServer(tickets_app(seen)).start)
    monkeypatch.setenv("TICKETS_TOKEN", "t0ken")
    config = {
        "mcpServers": {
            "tickets": {
                "url": f"{http.url}/mcp",
                "headers": {"Authorization": "Bearer ${TICKETS_TOKEN}"},
                "fathom": {"channels": ["slack:T0001"]},
            }
        }
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    settings = load_settings(
        _env_file=None,
        DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'http.db'}",
        OPENAI_API_KEY="fake-key",
        OPENAI_BASE_URL=llm_server.base_url,
        FATHOM_SEARCH="searxng",
        SEARXNG_URL=search_server.url,
        FATHOM_READ_PAGES="0",
        FATHOM_MCP_CONFIG=str(path),
    )
    try:
        with caplog.at_level("DEBUG"):
            async with open_runtime(settings) as runtime:
                assert runtime.knowledge is not None
                await runtime.knowledge.wait_started()
                [status] = runtime.knowledge.status()
                assert (status.state, status.tool) == ("up", "find")
                assert "t0ken" not in json.dumps(status.config)
                outcome = await research(
                    runtime, f"{ALLOWED}:1900.1", sources=SourceChoice.INTERNAL
                )
    finally:
        await asyncio.to_thread(http.stop)
    assert outcome.status.value == "succeeded", outcome.error
    [source] = [s for s in outcome.sources if s.server == "tickets"]
    assert source.title == "tickets" and source.kind == "internal"  # (named after it, once)
    assert "PROJ-7: the pump trips when" in str(outcome.report_markdown)
    assert seen and set(seen) == {"Bearer t0ken"}
    assert "t0ken" not in caplog.text
