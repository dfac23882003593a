"""Fathom as an MCP server (issue 57): ``fathom mcp`` over stdio, driven by the official
``mcp`` client (mcp 2.3.0: ``mcp.client.client.Client`` with ``StdioServerParameters``),
against the LLM and search fakes; and the run follower across two processes' worth of
runners on one database.

The shapes relied on, and where they come from:

- ``tools/list``'s tool with ``inputSchema``, ``outputSchema`` and ``annotations``
  (``readOnlyHint``, ``openWorldHint``), and ``tools/call``'s result with ``content``,
  ``structuredContent`` and ``isError`` (a tool error is a result, not a JSON-RPC error): the
  MCP specification 2025-11-25, server/tools; the SDK's ``mcp_types.Tool`` and
  ``CallToolResult``, and its client validating ``structuredContent`` against the
  ``outputSchema`` (``mcp/client/session.py``).
- ``notifications/progress`` carrying the caller's ``progressToken`` with ``progress``
  increasing and ``message`` (``total`` omitted, "if unknown"): the specification's
  basic/utilities/progress; the
  SDK sends them for the request (``ServerSession.report_progress``) and hands them to the
  call's ``progress_callback``.
- ``notifications/cancelled`` for a request in flight: basic/utilities/cancellation; the SDK's
  client sends it when the calling task is cancelled (its "courtesy cancel",
  ``mcp/shared/jsonrpc_dispatcher.py``), and the server's dispatcher then sets the request's
  ``cancel_requested`` and cancels the handler. A client that goes away without cancelling
  is the read stream's EOF: every handler is cancelled, the flag unset (same module). The
  disconnect test speaks the protocol's JSON-RPC lines itself (the stdio transport: one JSON
  message a line) so that nothing sends a cancel.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.client.client import Client

from bots.composition import open_app
from bots.mcp.callers import Caller
from bots.mcp.delivery import McpDelivery, Wakeup, render_progress
from bots.mcp.follow import RunFollower, research_result
from core.engine.progress import ProgressEvent, ProgressKind, ProgressTask, TaskStatus
from core.research.requests import ResearchRequest
from core.values import RunStatus
from storage import Database, Store
from tests.chat_app import fathom_settings
from tests.cli import ENTRY_POINT
from tests.conftest import require_pg_server
from tests.databases import MigratedTemplates
from tests.fakes.llm import FakeLLMServer, Hang
from tests.fakes.search import FakeSearchServer
from tests.test_cli import mcp_config, notes_calls
from tests.test_mcp_http import ALICE, BOB, TOKENS
from tests.test_mcp_http import client as http_client

THREAD_ID = re.compile(r"^[0-9a-f]{32}$")


@asynccontextmanager
async def fathom_mcp(env: dict[str, str], cwd: Path) -> AsyncIterator[Client]:
    """The official client connected to ``fathom mcp`` (a subprocess) over stdio."""
    params = StdioServerParameters(command=str(ENTRY_POINT), args=["mcp"], env=env, cwd=str(cwd))
    async with Client(params) as client:
        yield client


class Progress:
    """What a call's ``progress_callback`` received, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []
        self.first = asyncio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))
        self.first.set()

    async def next_or(self, call: asyncio.Future[Any]) -> None:
        """Wait for the next notification (or for ``call`` to end)."""
        waiting = asyncio.ensure_future(self.first.wait())
        await asyncio.wait({call, waiting}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        self.first.clear()

    @property
    def messages(self) -> list[str]:
        return [m or "" for _, _, m in self.seen]


# -- over stdio, with the official client ------------------------------------------------


async def test_initialize_and_list_show_the_research_tool_with_its_schemas_and_annotations(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    async with fathom_mcp(cli_env, tmp_path) as client:
        assert client.server_info is not None and client.server_info.name == "fathom"
        tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == ["research"]
    tool = tools[0]
    inputs = tool.input_schema
    assert inputs["required"] == ["topic"]
    assert set(inputs["properties"]) == {
        "topic",
        "depth",
        "strategy",
        "sources",
        "language",
        "thread",
    }
    assert tool.output_schema is not None
    assert {"run_id", "status", "thread", "sources", "claim_check", "usage", "cost"} <= set(
        tool.output_schema["properties"]
    )
    assert tool.annotations is not None
    assert tool.annotations.read_only_hint is True and tool.annotations.open_world_hint is True
    assert tool.description and "minutes" in tool.description and "cancel" in tool.description


async def test_a_research_reports_its_progress_and_returns_the_cited_report_then_follows_up(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store
) -> None:
    progress = Progress()
    async with fathom_mcp(cli_env, tmp_path) as client:
        result = await client.call_tool(
            "research", {"topic": "heat pumps in cold climates", "depth": 2}, None, progress
        )
        assert not result.is_error, result.content
        data = result.structured_content
        assert isinstance(data, dict)
        # A follow-up in the same thread builds on it.
        again = Progress()
        followup = await client.call_tool(
            "research",
            {"topic": "and their running costs", "depth": 1, "thread": data["thread"]},
            None,
            again,
        )
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith("# ") and "## Sources" in text
    assert data["status"] == "succeeded" and THREAD_ID.match(data["thread"])
    assert data["sources"] and data["sources"][0]["n"] == 1
    assert all(s["url"].startswith("http") for s in data["sources"])
    assert data["claim_check"]["claims"] >= 1 and data["claim_check"]["line"]
    assert data["usage"]["searches"] >= 1 and data["usage"]["llm_calls"] >= 2
    # Progress: each row once, in order; no total, as a run's steps are not known ahead.
    numbers = [p for p, _, _ in progress.seen]
    assert numbers == list(range(1, len(numbers) + 1))
    assert {t for _, t, _ in progress.seen} == {None}
    first_lines = [m.splitlines()[0] for m in progress.messages]
    assert "1/2th search executed." in first_lines
    assert first_lines.index("1/2th search executed.") < len(first_lines) - 1
    assert "Research done" in progress.messages[-1] or "done" in progress.messages[-1].lower()

    assert not followup.is_error, followup.content
    second = followup.structured_content
    assert isinstance(second, dict)
    assert second["thread"] == data["thread"] and second["run_id"] != data["run_id"]
    assert again.seen
    # Both runs are stored in the principal's thread, requested by the principal.
    key = f"mcp:local:mcp:{data['thread']}"
    thread = await store_of.threads.get_thread(key)
    assert thread is not None
    runs = await store_of.runs.thread_runs(thread.id)
    assert [r.id for r in runs] == [data["run_id"], second["run_id"]]
    assert {r.requested_by for r in runs} == {"mcp:local:local"}
    assert {r.status for r in runs} == {RunStatus.SUCCEEDED}
    rows = await store_of.progress.since(data["run_id"])
    assert [r.text for r in rows] == progress.messages


async def test_bad_arguments_get_a_tool_error_and_the_server_keeps_serving(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"topic": "  "}, "topic is empty"),
        ({"topic": "x", "depth": 0}, "depth must be a whole number from 1 to 10"),
        ({"topic": "x", "depth": 11}, "depth must be a whole number from 1 to 10"),
        ({"topic": "x", "strategy": "nope"}, "unknown strategy 'nope'; use one of: iterative"),
        ({"topic": "x", "sources": "intranet"}, "sources must be one of web, internal, all"),
        ({"topic": "x", "sources": "internal"}, "no internal source is configured"),
        ({"topic": "x", "thread": "0" * 32}, "unknown thread"),
        ({"topic": "x", "thread": "../other"}, "unknown thread"),
        ({"topic": "x", "colour": "red"}, "unknown argument 'colour'"),
        ({"topic": "热泵", "depth": 0}, "depth 必须是 1 到 10 之间的整数"),
    ]
    async with fathom_mcp(cli_env, tmp_path) as client:
        for arguments, expected in cases:
            result = await client.call_tool("research", arguments)
            assert result.is_error, arguments
            text = result.content[0].text  # type: ignore[union-attr]
            assert expected in text and "\n" not in text, (arguments, text)
        good = await client.call_tool("research", {"topic": "heat pumps", "depth": 1})
    assert not good.is_error and isinstance(good.structured_content, dict)
    assert good.structured_content["status"] == "succeeded"
    # Nothing started for the bad calls: one run, the good one.
    counted = await store_of.runs.count_runs()
    assert sum(n for _, _, n in counted) == 1


async def test_cancelling_the_call_cancels_the_run_and_nothing_more_reaches_the_caller(
    cli_env: dict[str, str],
    tmp_path: Path,
    store_of: Store,
    llm_server: FakeLLMServer,
) -> None:
    # The writer hangs: the run is writing its report when the call is cancelled.
    llm_server.fake.script("writer", Hang(60))
    progress = Progress()
    async with fathom_mcp(cli_env, tmp_path) as client:
        call = asyncio.ensure_future(
            client.call_tool("research", {"topic": "heat pumps", "depth": 2}, None, progress)
        )
        await progress_until(progress, call, "Writing the report…")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        seen = len(progress.seen)
        run = await until_finished(store_of)
        # The server still serves after a cancel.
        tools = await client.list_tools()
    assert [t.name for t in tools.tools] == ["research"]
    assert run.status is RunStatus.CANCELLED and run.cancel_requested
    assert run.report_markdown is None
    assert len(progress.seen) == seen  # nothing after the cancel reached the caller
    lines = [m.splitlines()[0] for m in progress.messages]
    assert lines[-1] == "2/2th search executed. Writing the report…"
    rows = await store_of.progress.since(run.id)
    assert "cancel" in rows[-1].text.lower()  # its final status, for a later reader


async def until_finished(store: Store) -> Any:
    """The one MCP run, once it has finished and its delivery ended (polled)."""
    while True:
        threads = await store.threads.list_threads()
        for summary in threads:
            thread = await store.threads.get_thread(summary.key)
            assert thread is not None
            runs = await store.runs.thread_runs(thread.id)
            if runs and runs[-1].status.finished and runs[-1].delivery != "pending":
                return runs[-1]
        await asyncio.sleep(0.05)


async def test_a_client_that_leaves_mid_run_leaves_the_run_to_finish_and_be_stored(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store, llm_server: FakeLLMServer
) -> None:
    llm_server.fake.latency = 0.2  # long enough to leave while it runs
    process = await asyncio.create_subprocess_exec(
        str(ENTRY_POINT),
        "mcp",
        env=cli_env,
        cwd=tmp_path,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None

    async def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        await process.stdin.drain()

    async def receive() -> dict[str, Any]:
        assert process.stdout is not None
        line = await process.stdout.readline()
        assert line, "fathom mcp closed its stdout"
        message: dict[str, Any] = json.loads(line)
        return message

    await send(
        {
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "leaver", "version": "0"},
            },
        }
    )
    assert (await receive())["id"] == 1
    await send({"method": "notifications/initialized"})
    await send(
        {
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "research",
                "arguments": {"topic": "heat pumps", "depth": 2},
                "_meta": {"progressToken": "p1"},
            },
        }
    )
    first = await receive()
    assert first["method"] == "notifications/progress"
    assert first["params"]["progressToken"] == "p1"
    process.stdin.close()  # gone, without a cancel
    stderr = await process.stderr.read() if process.stderr else b""
    assert await process.wait() == 0, stderr.decode()
    run = await until_finished(store_of)
    assert run.status is RunStatus.SUCCEEDED and run.report_markdown
    assert not run.cancel_requested
    rows = await store_of.progress.since(run.id)
    assert len(rows) >= 3


# -- the follower, across processes -------------------------------------------------------


async def test_progress_written_by_another_process_reaches_the_follower_in_order(
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    templates: MigratedTemplates,
) -> None:
    """A run executed by one process's job runner (``fathom serve``'s composition, the
    ``mcp`` delivery registered there) is followed from another process's own database
    connection, with no wake-up: only the rows cross."""
    url = templates.sqlite(tmp_path / "shared.db")
    settings = fathom_settings(url, llm_server, search_server)
    async with open_app(settings, role="serve") as app:
        assert app.mcp is not None and "mcp" in app.job.platforms
        await app.runner.start()
        key = Caller.principal("alice").thread("a" * 32)
        request = ResearchRequest(
            topic="heat pumps",
            depth=2,
            thread=key,
            requested_by=Caller.principal("alice").requested_by,
        )
        run, created = await app.runtime.research.requests.submit(request)
        assert created
        database = Database(url)  # the other process's
        try:
            other = Store(database)
            follower = RunFollower(other.runs, other.progress, poll=0.05)
            await app.runner.enqueue(run.id)
            texts = [row.text async for row in follower.follow(run.id)]
            outcome, result = await research_result(other.runs, app.job.stored_outcome, run.id)
        finally:
            await database.dispose()
    lines = [t.splitlines()[0] for t in texts]
    assert lines.index("1/2th search executed.") < lines.index("2/2th search executed.")
    assert result.status == "succeeded" and result.thread == "a" * 32
    assert result.sources and outcome.report_markdown
    stored_run = await other_run(url, run.id)
    assert stored_run.requested_by == "mcp:alice:alice"
    assert stored_run.thread_key == "mcp:alice:mcp:" + "a" * 32


async def other_run(url: str, run_id: str) -> Any:
    database = Database(url)
    try:
        run = await Store(database).runs.get_run(run_id)
        assert run is not None
        return run
    finally:
        await database.dispose()


async def test_the_delivery_writes_each_state_once_with_the_plan_and_wakes_the_follower(
    tmp_path: Path, templates: MigratedTemplates
) -> None:
    database = Database(templates.sqlite(tmp_path / "d.db"))
    try:
        store = Store(database)
        run, _ = await store.runs.create_run(
            thread=Caller.principal("local").thread("b" * 32),
            topic="t",
            depth=2,
            strategy="iterative",
            requested_by=Caller.principal("local").requested_by,
        )
        wakeup = Wakeup()
        woken = asyncio.Event()
        wakeup.listen(run.id, woken)
        delivery = McpDelivery(run, store.progress, wakeup)
        step = ProgressTask("search-1", "costs <!channel>", TaskStatus.IN_PROGRESS)
        event = ProgressEvent(run.id, ProgressKind.SEARCHED, "1/2th search executed.", 1, 2)
        await delivery.publish(event)
        assert woken.is_set()
        await delivery.publish(event)  # the same state again: not written again
        planned = ProgressEvent(
            run.id, ProgressKind.SEARCHED, "1/2th search executed.", 1, 2, tasks=(step,)
        )
        await delivery.publish(planned)
        await delivery.post_status("Cancelled.")
        rows = [r.text for r in await store.progress.since(run.id)]
    finally:
        await database.dispose()
    assert rows[0] == "1/2th search executed."
    assert rows[1] == render_progress("1/2th search executed.", (step,))
    assert rows[1].splitlines()[1].startswith("◐ costs") and "<!channel>" not in rows[1]
    assert rows[2].startswith("Cancelled.") and len(rows) == 3


# -- over Streamable HTTP, in fathom serve ---------------------------------------------------


async def test_the_research_tool_at_slash_mcp_keeps_each_principals_threads_its_own(
    serve_fathom: Callable[..., Any],
) -> None:
    """``fathom serve``'s ``/mcp`` (``bots.mcp.http``) serves this tool
    (``bots.mcp.server.build_server``): a research by alice's token runs in alice's thread,
    and bob's token cannot follow up in it."""
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    progress = Progress()
    async with http_client(f"{served.url}/mcp", ALICE) as alice:
        result = await alice.call_tool(
            "research", {"topic": "heat pumps", "depth": 1}, None, progress
        )
    assert not result.is_error, result.content
    data = result.structured_content
    assert isinstance(data, dict) and data["status"] == "succeeded"
    assert "1/1th search executed." in [m.splitlines()[0] for m in progress.messages]
    run = await served.store.runs.get_run(data["run_id"])
    assert run is not None and run.requested_by == "mcp:alice:alice"
    assert run.thread_key == f"mcp:alice:mcp:{data['thread']}"
    async with http_client(f"{served.url}/mcp", BOB) as bob:
        refused = await bob.call_tool(
            "research", {"topic": "more", "depth": 1, "thread": data["thread"]}
        )
    assert refused.is_error
    assert "unknown thread" in refused.content[0].text  # type: ignore[union-attr]


async def test_a_call_with_the_thread_of_a_research_going_on_follows_it_from_another_process(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store, llm_server: FakeLLMServer
) -> None:
    """Two ``fathom mcp`` processes on one database: the second, called with the ``thread``
    of the research the first is executing, follows that run (the rows the first process
    writes) and returns its report rather than starting another."""
    # The first process's run is still writing when the second (a cold start) follows it.
    llm_server.fake.script("writer", Hang(10))
    first, second = Progress(), Progress()
    async with fathom_mcp(cli_env, tmp_path) as executing:
        call = asyncio.ensure_future(
            executing.call_tool("research", {"topic": "heat pumps", "depth": 1}, None, first)
        )
        await progress_until(first, call, "Writing the report…")
        [summary] = await store_of.threads.list_threads()
        thread = summary.key.rsplit(":", 1)[1]
        async with fathom_mcp(cli_env, tmp_path) as following:
            followed = await following.call_tool(
                "research", {"topic": "heat pumps", "thread": thread}, None, second
            )
        result = await call
    assert not followed.is_error and not result.is_error
    assert isinstance(followed.structured_content, dict)
    assert isinstance(result.structured_content, dict)
    assert followed.structured_content["run_id"] == result.structured_content["run_id"]
    assert followed.content[0].text == result.content[0].text  # type: ignore[union-attr]
    # The follower saw every row from the first (rows cross processes), ending as the run did.
    assert second.messages == first.messages
    counted = await store_of.runs.count_runs()
    assert sum(n for _, _, n in counted) == 1


async def progress_until(progress: Progress, call: asyncio.Future[Any], text: str) -> None:
    """Wait until a notification of ``call`` holds ``text`` (the call must not end first)."""
    while not any(text in m for m in progress.messages):
        await progress.next_or(call)
        assert not call.done(), call.result()


async def test_internal_sources_are_scoped_to_the_principal_as_to_a_channel(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A server of FATHOM_MCP_CONFIG whose ``channels`` name ``mcp:local`` is searched by
    ``fathom mcp``'s runs with ``sources: internal``; one configured for other channels only
    is refused as a tool error."""
    allowed = {**cli_env, **mcp_config(tmp_path, notes=["mcp:local"], tickets=["slack:T1"])}
    async with fathom_mcp(allowed, tmp_path) as client:
        result = await client.call_tool(
            "research", {"topic": "deploy process", "depth": 1, "sources": "internal"}
        )
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    assert {s["kind"] for s in result.structured_content["sources"]} == {"internal"}
    assert notes_calls(tmp_path)  # the principal's server was asked

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused_env = {**cli_env, **mcp_config(elsewhere, notes=["mcp:bob"], tickets=["slack:T1"])}
    async with fathom_mcp(refused_env, tmp_path) as client:
        refused = await client.call_tool(
            "research", {"topic": "deploy process", "depth": 1, "sources": "internal"}
        )
    assert refused.is_error
    assert "no internal source is configured for this caller" in refused.content[0].text  # type: ignore[union-attr]
    assert notes_calls(elsewhere) == []


async def test_a_worker_executes_an_mcp_run_on_postgresql_and_the_caller_sees_its_progress(
    cli_env: dict[str, str], tmp_path: Path, templates: MigratedTemplates
) -> None:
    """``FATHOM_QUEUE=procrastinate`` on PostgreSQL: ``fathom mcp`` only queues the run, a
    ``fathom worker`` process executes it (its claim names the worker's pid), and the rows it
    writes reach the caller as progress, then the report."""
    require_pg_server()
    with templates.postgresql() as url:
        env = {**cli_env, "DATABASE_URL": url, "FATHOM_QUEUE": "procrastinate"}
        log = (tmp_path / "worker.log").open("wb")
        worker = await asyncio.create_subprocess_exec(
            str(ENTRY_POINT), "worker", "--no-upgrade", env=env, cwd=tmp_path, stderr=log
        )
        try:
            progress = Progress()
            async with fathom_mcp(env, tmp_path) as client:
                result = await client.call_tool(
                    "research", {"topic": "heat pumps", "depth": 2}, None, progress
                )
        finally:
            worker.terminate()
            await worker.wait()
            log.close()
        assert not result.is_error, result.content
        data = result.structured_content
        assert isinstance(data, dict) and data["status"] == "succeeded"
        assert "2/2th search executed." in [m.splitlines()[0] for m in progress.messages]
        run = await other_run(url, data["run_id"])
    assert run.owner is not None and run.owner.split(":")[1] == str(worker.pid)
    assert run.thread_key == f"mcp:local:mcp:{data['thread']}"
