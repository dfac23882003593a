"""The research tool's runs as MCP tasks (issue 57, item 2; ``bots.mcp.tasks``): the official
client (mcp 2.3.0) in its ``legacy`` mode, which speaks protocol 2025-11-25 (the only revision
with tasks), against ``fathom mcp`` over stdio and ``fathom serve``'s ``/mcp``.

The shapes relied on: the specification 2025-11-25, basic/utilities/tasks (the ``tasks``
capability and ``execution.taskSupport``; ``tools/call`` with ``task`` answered by
``CreateTaskResult``; ``tasks/get``, ``tasks/result`` with
``io.modelcontextprotocol/related-task``, ``tasks/list`` with its cursor, ``tasks/cancel``;
-32602 for a task that is not found, a bad cursor, or a cancel of a task that has ended; a
task bound to the authorization context that created it), and the SDK's types of them
(``mcp_types.CreateTaskResult``, ``GetTaskResult``, ``ListTasksResult``, ``CancelTaskResult``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import StdioServerParameters
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from core.values import RunStatus
from storage import Store
from tests.chat_app import wait_for
from tests.cli import ENTRY_POINT
from tests.fakes.llm import FakeLLMServer, Hang, Held
from tests.fakes.search import FakeSearchServer
from tests.test_mcp_http import ALICE, BOB, TOKENS, modern_call
from tests.test_mcp_http import client as http_client

RELATED = "io.modelcontextprotocol/related-task"
IMMEDIATE = "io.modelcontextprotocol/model-immediate-response"


@asynccontextmanager
async def legacy_stdio(env: dict[str, str], cwd: Path) -> AsyncIterator[Client]:
    """The official client on a 2025-11-25 session with ``fathom mcp`` over stdio."""
    params = StdioServerParameters(command=str(ENTRY_POINT), args=["mcp"], env=env, cwd=str(cwd))
    async with Client(params, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        yield client


async def create_task(client: Client, arguments: dict[str, Any]) -> types.CreateTaskResult:
    """A task-augmented ``tools/call`` of the research tool, as the specification's example
    sends it. Sent below the client's typed API, which validates every ``tools/call`` answer
    as a ``CallToolResult`` (``mcp/client/session.py``, ``send_request``), so its typed calls
    cannot take a ``CreateTaskResult``."""
    params = {"name": "research", "arguments": arguments, "task": {"ttl": 60_000}}
    raw = await client.session._dispatcher.send_raw_request("tools/call", params, {})
    return types.CreateTaskResult.model_validate(raw, by_name=False)


async def get_task(client: Client, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.GetTaskResult)


async def task_result(
    client: Client, task_id: str, progress: Callable[..., Any] | None = None
) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await client.session.send_request(
        request, types.CallToolResult, progress_callback=progress
    )


async def list_tasks(client: Client, cursor: str | None = None) -> types.ListTasksResult:
    request = types.ListTasksRequest(params=types.PaginatedRequestParams(cursor=cursor))
    return await client.session.send_request(request, types.ListTasksResult)


async def cancel_task(client: Client, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CancelTaskResult)


async def until_ended(client: Client, task_id: str) -> types.GetTaskResult:
    """Poll ``tasks/get`` until the task is in a terminal status."""

    async def ended() -> types.GetTaskResult | None:
        task = await get_task(client, task_id)
        return task if task.status in ("completed", "failed", "cancelled") else None

    found: types.GetTaskResult = await wait_for(ended, within=60)
    return found


async def test_a_task_is_created_at_once_polled_and_its_result_is_the_cited_report(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store
) -> None:
    async with legacy_stdio(cli_env, tmp_path) as client:
        tasks = client.server_capabilities.tasks
        assert tasks is not None and tasks.list is not None and tasks.cancel is not None
        assert tasks.requests and tasks.requests.tools and tasks.requests.tools.call is not None
        (tool,) = (await client.list_tools()).tools
        assert tool.execution is not None and tool.execution.task_support == "optional"

        created = await create_task(client, {"topic": "heat pumps in cold climates", "depth": 2})
        task = created.task
        assert task.status == "working" and task.poll_interval
        assert (
            task.ttl == 180 * 86_400_000
        )  # FATHOM_RUN_RETENTION_DAYS' default, not the 60 s asked
        assert created.meta is not None and task.task_id in created.meta[IMMEDIATE]
        run = await store_of.runs.get_run(task.task_id)  # the task is the run
        assert run is not None and run.requested_by == "mcp:local:local"

        done = await until_ended(client, task.task_id)
        result = await task_result(client, task.task_id)
        listed = await list_tasks(client)
        with pytest.raises(MCPError) as too_late:
            await cancel_task(client, task.task_id)
    assert done.status == "completed" and done.status_message
    assert done.created_at == task.created_at and done.last_updated_at >= task.created_at
    assert done.poll_interval is None  # nothing more to poll for
    assert not result.is_error
    text = result.content[0]
    assert isinstance(text, types.TextContent) and "## Sources" in text.text
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["run_id"] == task.task_id
    assert result.structured_content["status"] == "succeeded"
    assert result.meta is not None and result.meta[RELATED] == {"taskId": task.task_id}
    assert [t.task_id for t in listed.tasks] == [task.task_id]
    assert listed.tasks[0].status == "completed" and listed.next_cursor is None
    assert too_late.value.error.code == types.INVALID_PARAMS


async def test_a_task_cancelled_is_cancelled_at_once_and_its_run_too(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store, llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("writer", Hang(30))  # the run is writing when it is cancelled
    async with legacy_stdio(cli_env, tmp_path) as client:
        created = await create_task(client, {"topic": "heat pumps", "depth": 1})
        task_id = created.task.task_id
        await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
        cancelled = await cancel_task(client, task_id)
        assert cancelled.status == "cancelled" and cancelled.status_message
        result = await task_result(client, task_id)  # at once, the run still winding down
        with pytest.raises(MCPError) as twice:
            await cancel_task(client, task_id)
        again = await get_task(client, task_id)
    assert twice.value.error.code == types.INVALID_PARAMS and "cancelled" in str(twice.value)
    assert again.status == "cancelled"
    assert not result.is_error and isinstance(result.structured_content, dict)
    assert result.structured_content["status"] == "cancelled"
    run = await store_of.runs.get_run(task_id)
    assert run is not None and run.status is RunStatus.CANCELLED and not run.report_markdown


async def test_bad_arguments_or_an_unknown_task_are_invalid_params_and_nothing_runs(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store
) -> None:
    async with legacy_stdio(cli_env, tmp_path) as client:
        with pytest.raises(MCPError) as empty:
            await create_task(client, {"topic": "  "})
        with pytest.raises(MCPError) as deep:
            await create_task(client, {"topic": "heat pumps", "depth": 99})
        for call in (get_task, task_result, cancel_task):
            with pytest.raises(MCPError) as unknown:
                await call(client, "0" * 32)
            assert unknown.value.error.code == types.INVALID_PARAMS
            assert "not found" in unknown.value.error.message
        with pytest.raises(MCPError) as cursor:
            await list_tasks(client, "not-a-cursor")
        tools = await client.list_tools()  # the server serves on
    assert empty.value.error.code == deep.value.error.code == types.INVALID_PARAMS
    assert "topic" in empty.value.error.message and "depth" in deep.value.error.message
    assert cursor.value.error.code == types.INVALID_PARAMS
    assert [t.name for t in tools.tools] == ["research"]
    assert await store_of.runs.count_runs() == []


async def test_tasks_result_sends_the_runs_progress_to_its_own_token(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    async with legacy_stdio(cli_env, tmp_path) as client:
        created = await create_task(client, {"topic": "tidal power", "depth": 2})
        result = await task_result(client, created.task.task_id, progress)
    assert not result.is_error
    assert [p for p, _, _ in seen] == list(range(1, len(seen) + 1))
    assert {t for _, t, _ in seen} == {None}  # a run's steps are not known ahead
    assert "1/2th search executed." in [(m or "").splitlines()[0] for _, _, m in seen]


# -- over HTTP: a task outlives its session and is its principal's alone ---------------


async def test_a_task_over_http_outlives_its_session_and_only_its_principal_sees_it(
    serve_fathom: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    written = threading.Event()
    llm_server.fake.script("writer", Held(written))  # the run outlives the session that made it
    url = f"{served.url}/mcp"
    async with http_client(url, ALICE, mode="legacy") as alice:
        assert alice.server_capabilities.tasks is not None
        created = await create_task(alice, {"topic": "heat pumps", "depth": 1})
        await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
    task_id = created.task.task_id
    going = await served.store.runs.get_run(task_id)
    written.set()
    assert going is not None and not going.status.finished  # the session ended before it
    async with http_client(url, BOB, mode="legacy") as bob:
        with pytest.raises(MCPError) as foreign:
            await get_task(bob, task_id)
        with pytest.raises(MCPError) as foreign_cancel:
            await cancel_task(bob, task_id)
        bobs = await list_tasks(bob)
    assert foreign.value.error.code == foreign_cancel.value.error.code == types.INVALID_PARAMS
    assert bobs.tasks == []
    async with http_client(url, ALICE, mode="legacy") as alice:  # a new session
        result = await task_result(alice, task_id)
        task = await get_task(alice, task_id)
    assert task.status == "completed"
    assert not result.is_error and isinstance(result.structured_content, dict)
    assert result.structured_content["status"] == "succeeded"
    run = await served.store.runs.get_run(task_id)
    assert run is not None and not run.cancel_requested


@pytest.mark.parametrize("page", [2, 3])
async def test_tasks_list_pages_with_its_cursor(
    serve_fathom: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    monkeypatch.setattr("bots.mcp.tasks.PAGE", page)
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    async with http_client(f"{served.url}/mcp", ALICE, mode="legacy") as alice:
        made = []
        for topic in ("heat pumps", "solar panels", "tidal power"):
            result = await alice.call_tool("research", {"topic": topic, "depth": 1})
            assert isinstance(result.structured_content, dict)
            made.append(result.structured_content["run_id"])
        first = await list_tasks(alice)
        later = await alice.call_tool("research", {"topic": "wave power", "depth": 1})
        assert not later.is_error  # a run created between two pages moves no other
        pages = [first]
        while pages[-1].next_cursor is not None and len(pages) < 5:
            pages.append(await list_tasks(alice, pages[-1].next_cursor))
        bad = []
        malformed = ("²", "-1", "3000", "x", "2026-13-01T00:00:00+00:00/ab", "2026-12-01/ab")
        for cursor in (*malformed, "2026-12-01T00:00:00+00:00/", "2026-12-01T00:00:00+00:00/a b"):
            with pytest.raises(MCPError) as refused:
                await list_tasks(alice, cursor)
            bad.append(refused.value.error.code)
    assert len(pages) == (2 if page == 2 else 1)  # a full last page has no next cursor
    # Newest first, each once: a run of a plain call is a task too (its run_id the task id).
    assert [t.task_id for each in pages for t in each.tasks] == made[::-1]
    assert bad == [types.INVALID_PARAMS] * 8


async def test_task_is_ignored_on_2026_07_28_which_has_no_tasks(
    serve_fathom: Callable[..., Any],
) -> None:
    """The specification: a receiver that does not declare tasks for a request type processes
    it normally, ignoring ``task``; on 2026-07-28 Fathom declares none (its ``server/discover``
    has no ``tasks``), so the call answers with the report."""
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    body, headers = modern_call("heat pumps")
    body["params"]["task"] = {"ttl": 60_000}
    async with http_client(f"{served.url}/mcp", ALICE) as modern:
        assert modern.protocol_version == "2026-07-28"
        assert modern.server_capabilities.tasks is None
    answer = await served.http.post(f"{served.url}/mcp", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200
    events = [line for line in answer.text.splitlines() if line.startswith("data:")]
    final = events[-1] if events else answer.text
    assert '"structuredContent"' in final and '"task"' not in final
    run_id = json.loads(final.removeprefix("data:"))["result"]["structuredContent"]["run_id"]
    # and tasks/* are not served there (-32601), even for the caller's own run
    get = {
        "jsonrpc": "2.0",
        "id": 8,
        "method": "tasks/get",
        "params": {"taskId": run_id, "_meta": body["params"]["_meta"]},
    }
    asked = await served.http.post(
        f"{served.url}/mcp", json=get, headers={**headers, "Mcp-Method": "tasks/get"}
    )
    assert json.loads(asked.text)["error"]["code"] == types.METHOD_NOT_FOUND


async def test_a_task_of_a_run_that_keeps_running_after_a_stdio_client_leaves(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store, llm_server: FakeLLMServer
) -> None:
    """A task's run is a run like any other: the client that created it may leave (stdio's
    end), and ``fathom mcp`` lets it finish before exiting; a second client finds its result."""
    llm_server.fake.latency = 0.1
    async with legacy_stdio(cli_env, tmp_path) as client:
        created = await create_task(client, {"topic": "heat pumps", "depth": 1})
    run = await store_of.runs.get_run(created.task.task_id)
    assert run is not None and run.status.finished and not run.cancel_requested
    async with legacy_stdio(cli_env, tmp_path) as client:
        result = await task_result(client, created.task.task_id)
    assert not result.is_error and isinstance(result.structured_content, dict)
    assert result.structured_content["run_id"] == created.task.task_id


async def test_a_failed_run_is_a_failed_task_whose_result_is_a_tool_error(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    """The specification: a tool call's task is ``failed`` when its result has ``isError``."""
    search_server.fake.fail_next(100, status=400)  # no search returns anything: the run fails
    async with legacy_stdio(cli_env, tmp_path) as client:
        created = await create_task(client, {"topic": "heat pumps", "depth": 1})
        done = await until_ended(client, created.task.task_id)
        result = await task_result(client, created.task.task_id)
    assert done.status == "failed"
    assert result.is_error and isinstance(result.structured_content, dict)
    assert result.structured_content["status"] == "failed"


async def test_giving_up_a_tasks_result_wait_cancels_nothing(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store, llm_server: FakeLLMServer
) -> None:
    written = threading.Event()
    llm_server.fake.script("writer", Held(written))
    async with legacy_stdio(cli_env, tmp_path) as client:
        created = await create_task(client, {"topic": "heat pumps", "depth": 1})
        task_id = created.task.task_id
        waiting = asyncio.ensure_future(task_result(client, task_id))
        await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
        waiting.cancel()  # the client sends notifications/cancelled for tasks/result
        with pytest.raises(asyncio.CancelledError):
            await waiting
        written.set()
        done = await until_ended(client, task_id)
    assert done.status == "completed"
    run = await store_of.runs.get_run(task_id)
    assert run is not None and run.status is RunStatus.SUCCEEDED and not run.cancel_requested


async def test_a_task_in_the_thread_of_a_research_going_on_is_refused(
    cli_env: dict[str, str], tmp_path: Path, store_of: Store, llm_server: FakeLLMServer
) -> None:
    """A task starts ``working`` with a run of its own: a task-augmented call with the
    ``thread`` of a research going on is -32602, naming that research's task."""
    written = threading.Event()
    llm_server.fake.script("writer", Held(written))
    async with legacy_stdio(cli_env, tmp_path) as client:
        created = await create_task(client, {"topic": "heat pumps", "depth": 1})
        [summary] = await store_of.threads.list_threads()
        thread = summary.key.rsplit(":", 1)[1]
        with pytest.raises(MCPError) as refused:
            await create_task(client, {"topic": "and costs", "depth": 1, "thread": thread})
        written.set()
        await until_ended(client, created.task.task_id)
    assert refused.value.error.code == types.INVALID_PARAMS
    assert created.task.task_id in refused.value.error.message
