"""``/mcp`` in ``fathom serve`` (issue 57, item 3): the official MCP client
(``mcp.client.streamable_http.streamable_http_client`` under ``mcp.Client``, mcp 2.3.0)
against the real ``fathom serve`` app on 127.0.0.1.

The shapes relied on: the specification 2025-11-25, Transports, Streamable HTTP, "Security
Warning" ("If the Origin header is present and invalid, servers MUST respond with HTTP 403
Forbidden"); the SDK's ``mcp/server/transport_security.py`` (a Host it does not serve is
421 "Invalid Host header"); ``mcp/server/streamable_http_manager.py`` (a session is bound to
the ``AuthenticatedUser`` that opened it: another credential's request for it is 404
"Session not found"); RFC 6750 section 3 (401 with ``WWW-Authenticate: Bearer``).

The transport and its security are tested with a small MCP server of the tests' own
(:func:`whoami_server`: one tool answering the caller's principal); the research tool
(``bots.mcp.server``) is then called through it as assistants call it: ``notifications/progress``
with the caller's token (the specification's basic/utilities/progress, the client's
``progress_callback``), a tool error as a result with ``isError`` (server/tools), per-principal
threads and the per-user concurrency limit decided by ``RunRequests.submit``, cancels on
both wires the client speaks (a 2025-11-25 session, ``mode="legacy"``: ``notifications/cancelled``;
2026-07-28, its default: the call's response stream closed), a 2025-11-25 session ended
mid-call (the SDK client's pending call fails with "Connection closed", and no
``notifications/cancelled`` is sent), and a ``fathom worker`` on PostgreSQL executing the run.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent, Tool

from bots.mcp.http import principal_of
from bots.mcp.settings import McpSettings
from core.config import ConfigError, load
from core.values import RunStatus
from storage import Database, Store
from tests.chat_app import ServedFathom, wait_for
from tests.fakes.llm import FakeLLMServer, Hang, Held
from tests.test_cli import mcp_config, needs_knowledge

ALICE = "a" * 40
BOB = "b" * 40
TOKENS = f"alice={ALICE},bob={BOB}"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
#: What a Streamable HTTP client sends with each POST (the specification's "Sending
#: Messages to the Server").
POST_HEADERS = {"Accept": "application/json, text/event-stream"}


def whoami_server(app: object) -> Any:
    """A one-tool MCP server: ``whoami`` answers the principal the call came from."""
    from mcp.server.lowlevel.server import Server

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="whoami", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        return CallToolResult(content=[TextContent(text=principal_of(ctx.request))])

    return Server("whoami", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.fixture
def serve_mcp(
    serve_fathom: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    """``await serve_mcp(**env)``: ``fathom serve`` with ``FATHOM_MCP_TOKEN`` (alice and bob),
    serving :func:`whoami_server` at ``/mcp``."""
    monkeypatch.setattr("bots.mcp.http.research_server", whoami_server)

    async def serve(**env: str) -> ServedFathom:
        served: ServedFathom = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS, **env)
        return served

    return serve


@asynccontextmanager
async def client(
    url: str, token: str | None, *, mode: str = "auto", **headers: str
) -> AsyncIterator[Any]:
    """The official client, connected to ``url`` with ``token`` as its bearer token.
    ``mode``: ``auto`` (the client's default: protocol 2026-07-28, one POST a request, no
    session) or ``legacy`` (the ``initialize`` handshake: a 2025-11-25 session)."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), cache=None, mode=mode) as connected,
    ):
        yield connected


def text_of(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


async def test_each_token_is_its_principal(serve_mcp: Callable[..., Any]) -> None:
    served = await serve_mcp()
    for token, principal in ((ALICE, "alice"), (BOB, "bob")):
        async with client(f"{served.url}/mcp", token) as mcp:
            assert [tool.name for tool in (await mcp.list_tools()).tools] == ["whoami"]
            assert text_of(await mcp.call_tool("whoami", {})) == principal


@pytest.mark.parametrize("authorization", [None, f"Bearer {'c' * 40}", f"Bearer {ALICE}x", ALICE])
async def test_no_or_a_wrong_token_is_401_before_anything(
    serve_mcp: Callable[..., Any], authorization: str | None
) -> None:
    served = await serve_mcp()
    headers = dict(POST_HEADERS)
    if authorization is not None:
        headers["Authorization"] = authorization
    answer = await served.http.post(f"{served.url}/mcp", json=INITIALIZE, headers=headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert "mcp-session-id" not in answer.headers  # no session was opened
    metrics = (await served.http.get(f"{served.url}/metrics")).text
    assert 'fathom_ingress_refused_total{route="/mcp"} 1.0' in metrics


async def test_the_official_client_without_a_token_is_refused(
    serve_mcp: Callable[..., Any],
) -> None:
    served = await serve_mcp()
    with pytest.raises(Exception, match="TaskGroup"):  # (the SDK: "Server returned an error")
        async with client(f"{served.url}/mcp", None) as mcp:
            await mcp.list_tools()
    metrics = (await served.http.get(f"{served.url}/metrics")).text
    assert 'fathom_ingress_refused_total{route="/mcp"}' in metrics  # its initialize
    assert 'fathom_ingress_requests_total{route="/mcp"' not in metrics  # and nothing else


async def test_a_foreign_origin_is_403_and_an_allowed_one_served(
    serve_mcp: Callable[..., Any],
) -> None:
    served = await serve_mcp(FATHOM_MCP_ALLOWED_ORIGINS="https://claude.example")
    headers = {**POST_HEADERS, "Authorization": f"Bearer {ALICE}"}
    foreign = await served.http.post(
        f"{served.url}/mcp", json=INITIALIZE, headers={**headers, "Origin": "https://evil.example"}
    )
    assert foreign.status_code == 403
    assert "mcp-session-id" not in foreign.headers
    async with client(f"{served.url}/mcp", ALICE, Origin="https://claude.example") as mcp:
        assert text_of(await mcp.call_tool("whoami", {})) == "alice"


async def test_an_origin_is_refused_when_none_is_allowed(serve_mcp: Callable[..., Any]) -> None:
    served = await serve_mcp()
    answer = await served.http.post(
        f"{served.url}/mcp",
        json=INITIALIZE,
        headers={**POST_HEADERS, "Authorization": f"Bearer {ALICE}", "Origin": served.url},
    )
    assert answer.status_code == 403


async def test_a_host_not_served_is_421(serve_mcp: Callable[..., Any]) -> None:
    served = await serve_mcp()
    headers = {**POST_HEADERS, "Authorization": f"Bearer {ALICE}"}
    rebound = await served.http.post(
        f"{served.url}/mcp", json=INITIALIZE, headers={**headers, "Host": "evil.example"}
    )
    assert rebound.status_code == 421
    served_here = await served.http.post(f"{served.url}/mcp", json=INITIALIZE, headers=headers)
    assert served_here.status_code == 200
    assert served_here.headers["mcp-session-id"]


async def test_listed_hosts_are_served(serve_mcp: Callable[..., Any]) -> None:
    served = await serve_mcp(FATHOM_MCP_ALLOWED_HOSTS="fathom.example.com")
    headers = {**POST_HEADERS, "Authorization": f"Bearer {ALICE}"}
    listed = await served.http.post(
        f"{served.url}/mcp", json=INITIALIZE, headers={**headers, "Host": "fathom.example.com"}
    )
    assert listed.status_code == 200
    loopback = await served.http.post(f"{served.url}/mcp", json=INITIALIZE, headers=headers)
    assert loopback.status_code == 421  # listing hosts replaces the loopback default


async def test_a_session_answers_only_the_principal_that_opened_it(
    serve_mcp: Callable[..., Any],
) -> None:
    served = await serve_mcp()
    opened = await served.http.post(
        f"{served.url}/mcp",
        json=INITIALIZE,
        headers={**POST_HEADERS, "Authorization": f"Bearer {ALICE}"},
    )
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    as_bob = await served.http.post(
        f"{served.url}/mcp",
        json=listing,
        headers={
            **POST_HEADERS,
            "Authorization": f"Bearer {BOB}",
            "Mcp-Session-Id": session,
            "Mcp-Protocol-Version": "2025-11-25",
        },
    )
    assert as_bob.status_code == 404


async def test_mcp_is_404_without_a_token(serve_fathom: Callable[..., Any]) -> None:
    served = await serve_fathom()
    answer = await served.http.post(
        f"{served.url}/mcp",
        json=INITIALIZE,
        headers={**POST_HEADERS, "Authorization": f"Bearer {ALICE}"},
    )
    assert answer.status_code == 404
    assert answer.json() == {"error": "MCP is not configured on this server"}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (ALICE, "pair 1 is not principal=token"),
        ("alice=short", "shorter than 32 characters"),
        (f"Alice={ALICE}", "is not [a-z0-9_-]{1,64}"),
        (f"alice={ALICE},alice={BOB}", "given twice"),
        (f"alice={ALICE},bob={ALICE}", "also another principal's"),
        (f"alice={'a' * 20} {'a' * 20}", "spaces or control characters"),
        (f"local={ALICE}", "is fathom mcp's"),  # would see fathom mcp's runs and tasks
    ],
)
def test_a_bad_token_setting_is_one_line_without_the_token(value: str, why: str) -> None:
    with pytest.raises(ConfigError) as bad:
        load(McpSettings, _env_file=None, FATHOM_MCP_TOKEN=value)
    message = str(bad.value)
    assert message.startswith("FATHOM_MCP_TOKEN is invalid")
    assert why in message
    assert "\n" not in message
    assert "a" * 20 not in message and "b" * 20 not in message


def test_tokens_are_redacted_from_the_logs() -> None:
    from core.logs import Redactor

    settings = load(McpSettings, _env_file=None, FATHOM_MCP_TOKEN=TOKENS)
    line = Redactor(settings.secret_patterns())(f"token {ALICE} and {BOB} seen")
    assert ALICE not in line and BOB not in line


async def test_an_unknown_method_is_405(serve_mcp: Callable[..., Any]) -> None:
    served = await serve_mcp()
    answer = await served.http.put(
        f"{served.url}/mcp", headers={"Authorization": f"Bearer {ALICE}"}, content=b"{}"
    )
    assert answer.status_code == 405
    assert isinstance(answer, httpx.Response)


def test_every_command_redacts_the_configured_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    from bots.mcp.settings import token_patterns
    from core.logs import Redactor

    monkeypatch.setenv("FATHOM_MCP_TOKEN", TOKENS)
    assert ALICE not in Redactor(token_patterns())(f"Authorization: {ALICE}")
    monkeypatch.setenv("FATHOM_MCP_TOKEN", "alice=short")
    assert token_patterns() == ()


async def test_a_body_over_the_limit_is_413_before_the_sdk_reads_it(
    serve_mcp: Callable[..., Any],
) -> None:
    served = await serve_mcp(FATHOM_MAX_BODY_BYTES="2048")
    big = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"pad": "x" * 4096}}
    answer = await served.http.post(
        f"{served.url}/mcp", json=big, headers={**POST_HEADERS, "Authorization": f"Bearer {ALICE}"}
    )
    assert answer.status_code == 413
    assert "mcp-session-id" not in answer.headers


# The research tool itself, served at /mcp (bots.mcp.server's, on serve's runtime and runner).


class Progress:
    """What a call's ``progress_callback`` received, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))

    @property
    def first_lines(self) -> list[str]:
        return [(m or "").splitlines()[0] if m else "" for _, _, m in self.seen]


async def runs_of(store: Store, principal: str, thread: str) -> list[Any]:
    found = await store.threads.get_thread(f"mcp:{principal}:mcp:{thread}")
    return [] if found is None else list(await store.runs.thread_runs(found.id))


async def test_a_research_over_http_reports_progress_and_returns_the_cited_report(
    serve_fathom: Callable[..., Any],
) -> None:
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    progress = Progress()
    async with client(f"{served.url}/mcp", ALICE) as mcp:
        assert [tool.name for tool in (await mcp.list_tools()).tools] == ["research"]
        result = await mcp.call_tool(
            "research", {"topic": "heat pumps in cold climates", "depth": 2}, None, progress
        )
    assert not result.is_error, result.content
    data = result.structured_content
    assert isinstance(data, dict) and data["status"] == "succeeded"
    assert text_of(result).startswith("# ") and "## Sources" in text_of(result)
    assert data["sources"] and data["claim_check"]["line"]
    assert "1/2th search executed." in progress.first_lines
    assert [p for p, _, _ in progress.seen] == list(range(1, len(progress.seen) + 1))
    # A run like any other: alice's thread, requested by alice, counted as platform mcp.
    runs = await runs_of(served.store, "alice", data["thread"])
    assert [run.id for run in runs] == [data["run_id"]]
    assert runs[0].requested_by == "mcp:alice:alice"
    metrics = (await served.http.get(f"{served.url}/metrics")).text
    assert 'fathom_runs_finished_total{platform="mcp",status="succeeded"' in metrics


async def test_a_principal_cannot_follow_up_in_another_principals_thread(
    serve_fathom: Callable[..., Any],
) -> None:
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    async with client(f"{served.url}/mcp", ALICE) as mcp:
        first = await mcp.call_tool("research", {"topic": "heat pumps", "depth": 1})
    assert isinstance(first.structured_content, dict)
    thread = first.structured_content["thread"]
    async with client(f"{served.url}/mcp", BOB) as mcp:
        foreign = await mcp.call_tool(
            "research", {"topic": "and their costs", "depth": 1, "thread": thread}
        )
    assert foreign.is_error and "unknown thread" in text_of(foreign)
    assert await runs_of(served.store, "bob", thread) == []
    assert len(await runs_of(served.store, "alice", thread)) == 1  # untouched
    async with client(f"{served.url}/mcp", ALICE) as mcp:
        followup = await mcp.call_tool(
            "research", {"topic": "and their costs", "depth": 1, "thread": thread}
        )
    assert not followup.is_error, followup.content
    assert len(await runs_of(served.store, "alice", thread)) == 2


async def test_a_principal_at_its_concurrency_limit_gets_a_tool_error_another_is_served(
    serve_fathom: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS, FATHOM_USER_CONCURRENCY="1")
    llm_server.fake.script("planner", Hang(600))  # alice's first run holds her one place
    async with client(f"{served.url}/mcp", ALICE) as mcp:
        held = asyncio.ensure_future(mcp.call_tool("research", {"topic": "heat pumps"}))
        await wait_for(lambda: llm_server.fake.requests)  # her run is under way
        over = await mcp.call_tool("research", {"topic": "solar panels", "depth": 1})
        async with client(f"{served.url}/mcp", BOB) as other:
            bobs = await other.call_tool("research", {"topic": "solar panels", "depth": 1})
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
    assert over.is_error and "\n" not in text_of(over)
    assert "1" in text_of(over)  # the limit, as the chat's refusal says it
    assert not bobs.is_error, bobs.content
    assert isinstance(bobs.structured_content, dict)
    assert bobs.structured_content["status"] == "succeeded"
    counted = await served.store.runs.count_runs()
    assert sum(n for _, _, n in counted) == 2  # alice's held one and bob's; none for the refusal


async def test_the_daily_quota_counts_per_principal_as_per_user(
    serve_fathom: Callable[..., Any],
) -> None:
    """``FATHOM_USER_DAILY_RUNS`` counts each principal as a user: alice's second research of
    the day is a tool error of one line, worded as the chat's (its reset time); bob's first is
    served; no run is created for the refusal."""
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS, FATHOM_USER_DAILY_RUNS="1")
    async with client(f"{served.url}/mcp", ALICE) as mcp:
        first = await mcp.call_tool("research", {"topic": "heat pumps", "depth": 1})
        over = await mcp.call_tool("research", {"topic": "solar panels", "depth": 1})
    async with client(f"{served.url}/mcp", BOB) as mcp:
        bobs = await mcp.call_tool("research", {"topic": "solar panels", "depth": 1})
    assert not first.is_error and not bobs.is_error, (first.content, bobs.content)
    assert over.is_error and "\n" not in text_of(over)
    assert "today's 1 researches" in text_of(over) and "resets at" in text_of(over)
    counted = await served.store.runs.count_runs()
    assert sum(n for _, _, n in counted) == 2


async def test_a_refused_token_starts_no_run(serve_fathom: Callable[..., Any]) -> None:
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "research", "arguments": {"topic": "heat pumps", "depth": 1}},
    }
    for body in (INITIALIZE, call):
        answer = await served.http.post(
            f"{served.url}/mcp", json=body, headers={**POST_HEADERS, "Authorization": "Bearer x"}
        )
        assert answer.status_code == 401
    assert await served.store.runs.count_runs() == []
    assert await served.store.threads.list_threads() == []


def start_worker(env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """``fathom worker`` in a process of its own (its log in ``cwd``)."""
    return subprocess.Popen(
        [sys.executable, "-m", "bots.cli", "worker", "--no-upgrade"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(cwd / "worker.log").open("wb"),
    )


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_a_worker_executes_an_mcp_run_and_its_progress_reaches_the_http_caller(
    database_url: str,
    serve_fathom: Callable[..., Any],
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """``FATHOM_QUEUE=procrastinate`` on PostgreSQL: ``fathom serve`` only queues the run of
    the call it holds; a ``fathom worker`` (another process) executes it, and its progress
    rows reach the caller through the database."""
    served = await serve_fathom(
        database_url=database_url, FATHOM_QUEUE="procrastinate", FATHOM_MCP_TOKEN=TOKENS
    )
    env = {**cli_env, "DATABASE_URL": database_url, "FATHOM_QUEUE": "procrastinate"}
    worker = await asyncio.to_thread(start_worker, env, tmp_path)
    progress = Progress()
    try:
        async with client(f"{served.url}/mcp", ALICE) as mcp:
            result = await mcp.call_tool(
                "research", {"topic": "tidal power", "depth": 2}, None, progress
            )
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait, 30)
    assert not result.is_error, result.content
    data = result.structured_content
    assert isinstance(data, dict) and data["status"] == "succeeded"
    assert "1/2th search executed." in progress.first_lines
    runs = await runs_of(served.store, "alice", data["thread"])
    assert len(runs) == 1 and runs[0].owner is not None
    assert f":{worker.pid}:" in runs[0].owner  # the worker ran it, not serve


#: What ``fathom serve`` logs when a call's handler ends before its run (bots/mcp/server.py).
CALL_ENDINGS = (
    "a call following it ended; the run goes on",
    "cancelled by its MCP caller",
    "its MCP caller left; the run goes on",
)


def call_ended(logged: str) -> str | None:
    """How the first call that ended before its run ended, as the server logged it."""
    found = [(logged.find(e), e) for e in CALL_ENDINGS if e in logged]
    return min(found)[1] if found else None


async def finished_run(store: Store) -> Any:
    """The one stored thread's first run, once it has finished (else None)."""
    threads = await store.threads.list_threads()
    found = await store.threads.get_thread(threads[0].key) if threads else None
    runs = await store.runs.thread_runs(found.id) if found else []
    return runs[0] if runs and runs[0].status.finished else None


async def test_a_client_that_ends_its_session_mid_run_leaves_the_run_to_finish(
    serve_fathom: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    """A 2025-11-25 session (the client's ``legacy`` mode) whose client goes away (its
    session's DELETE) without cancelling leaves its run to finish and be stored: on that wire
    a disconnect is not a cancel (the specification 2025-11-25, Transports, Streamable HTTP:
    a disconnection "SHOULD NOT be interpreted as the client cancelling its request")."""
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    llm_server.fake.latency = 0.2  # the run outlives the session
    async with client(f"{served.url}/mcp", ALICE, mode="legacy") as mcp:
        assert mcp.protocol_version == "2025-11-25"
        call = asyncio.ensure_future(mcp.call_tool("research", {"topic": "heat pumps"}))
        await wait_for(lambda: llm_server.fake.requests)  # the run is under way
    with pytest.raises(MCPError, match="Connection closed"):  # no answer came
        await call
    run = await wait_for(lambda: finished_run(served.store), within=60)
    assert run.thread_key.startswith("mcp:alice:mcp:")
    assert run.status is RunStatus.SUCCEEDED and not run.cancel_requested
    assert run.report_markdown


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_call_cancelled_over_http_cancels_its_run_and_the_client_is_served_on(
    serve_fathom: Callable[..., Any], llm_server: FakeLLMServer, mode: str
) -> None:
    """The caller cancels a call in flight (the SDK's client does when the calling task is
    cancelled): on a 2025-11-25 session (``legacy``) it sends ``notifications/cancelled``
    (basic/utilities/cancellation); on 2026-07-28 (``auto``) it closes the call's response
    stream, which is that revision's cancel ("cancellation is closing the response stream",
    ``mcp/server/_streamable_http_modern.py``). Either way the run is cancelled in the
    database, nothing more is said for it, and the client's next call is served."""
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    llm_server.fake.script("writer", Hang(10))  # the run is writing when it is cancelled
    progress = Progress()
    async with client(f"{served.url}/mcp", ALICE, mode=mode) as mcp:
        assert mcp.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        call = asyncio.ensure_future(
            mcp.call_tool("research", {"topic": "heat pumps", "depth": 1}, None, progress)
        )
        await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        run = await wait_for(lambda: finished_run(served.store), within=60)
        assert run.thread_key.startswith("mcp:alice:mcp:")
        assert run.status is RunStatus.CANCELLED and run.cancel_requested
        seen = len(progress.seen)
        tools = await mcp.list_tools()  # the client is served on
    assert [tool.name for tool in tools.tools] == ["research"]
    assert len(progress.seen) == seen  # nothing more was said for the cancelled call


async def test_a_closed_stream_on_2026_07_28_cancels_the_run(
    serve_fathom: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    """What a 2026-07-28 client sends, byte for byte: one POST with the call and the
    revision's routing headers, no session; it closes the response stream mid-run and sends
    nothing more (as claude-code 2.1.330 does when its tool timeout passes: "Giving up on a
    call, the client closes the stream and says nothing", remontoire's notes of
    2026-11-23). That is the revision's cancel: the run is cancelled."""
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    llm_server.fake.script("writer", Hang(10))
    call, headers = modern_call("heat pumps")
    async with served.http.stream("POST", f"{served.url}/mcp", json=call, headers=headers) as got:
        assert got.status_code == 200, await got.aread()
        assert got.headers["content-type"].startswith("text/event-stream")
        lines = got.aiter_lines()
        async for line in lines:  # the run's first progress
            if line.startswith("data:") and "notifications/progress" in line:
                break
        await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
    # the response was closed before its answer
    run = await wait_for(lambda: finished_run(served.store), within=60)
    assert run.status is RunStatus.CANCELLED and run.cancel_requested


def modern_call(topic: str, request_id: int = 7) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 ``tools/call`` of the research tool as a client sends it: its body (the
    revision's ``_meta``) and headers (alice's token, the routing headers)."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": "research",
            "arguments": {"topic": topic, "depth": 1},
            "_meta": {
                "progressToken": f"p{request_id}",
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        **POST_HEADERS,
        "Authorization": f"Bearer {ALICE}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "research",
    }
    return body, headers


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_serve_stopping_mid_call_cancels_only_a_2026_07_28_calls_run(
    cli_env: dict[str, str], llm_server: FakeLLMServer, tmp_path: Path, mode: str
) -> None:
    """``fathom serve`` stopped (SIGTERM) with a call in flight; uvicorn's graceful shutdown
    ends the call's handler. On 2026-07-28 (``auto``) that is the exchange's end, its cancel:
    nobody could collect the run (no tasks, no ``thread`` yet) and the client asks again, so
    the run is cancelled. On a 2025-11-25 session (``legacy``) it is no cancel: the run is left
    to the next process (not ``cancel_requested``), where ``tasks/list`` finds it."""
    from tests.test_serve import serve, terminate, wait_until_up

    llm_server.fake.script("writer", Hang(600))
    served = await asyncio.to_thread(serve, {**cli_env, "FATHOM_MCP_TOKEN": TOKENS}, tmp_path)
    try:
        await asyncio.to_thread(wait_until_up, served)
        if mode == "auto":
            body, headers = modern_call("heat pumps")
            async with (
                httpx.AsyncClient(timeout=60) as http,
                http.stream("POST", f"{served.url}/mcp", json=body, headers=headers) as got,
            ):
                assert got.status_code == 200
                await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
                assert await asyncio.to_thread(terminate, served, 60) == 0
        else:
            async with client(f"{served.url}/mcp", ALICE, mode="legacy") as mcp:
                call = asyncio.ensure_future(mcp.call_tool("research", {"topic": "heat pumps"}))
                await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
                assert await asyncio.to_thread(terminate, served, 60) == 0
                with pytest.raises(MCPError):
                    await call
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    store_db = Database(cli_env["DATABASE_URL"])
    try:
        runs = await Store(store_db).runs.recent_runs_for_user("mcp:alice:alice", 10)
    finally:
        await store_db.dispose()
    assert len(runs) == 1, served.stderr()
    if mode == "auto":
        assert runs[0].cancel_requested, served.stderr()
        assert "cancelled by its MCP caller" in served.stderr()
    else:
        assert not runs[0].cancel_requested and runs[0].status is not RunStatus.CANCELLED
        assert "its MCP caller left; the run goes on" in served.stderr()


async def test_a_2025_11_25_call_whose_post_stream_closes_goes_on_in_its_session(
    serve_fathom: Callable[..., Any],
    llm_server: FakeLLMServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On a 2025-11-25 session the call's POST response stream closing is no cancel (the
    specification 2025-11-25, Transports: a disconnection "SHOULD NOT be interpreted as the
    client cancelling its request"): the session stays, and when it ends (DELETE) the run
    still finishes, uncancelled."""
    caplog.set_level(logging.INFO, logger="bots.mcp.server")
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    written = threading.Event()  # the report is held until the session ended
    llm_server.fake.script("writer", Held(written))
    url = f"{served.url}/mcp"
    auth = {**POST_HEADERS, "Authorization": f"Bearer {ALICE}"}
    opened = await served.http.post(url, json=INITIALIZE, headers=auth)
    assert opened.status_code == 200
    session = {**auth, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
    session["MCP-Protocol-Version"] = "2025-11-25"
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await served.http.post(url, json=initialized, headers=session)).status_code == 202
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "research",
            "arguments": {"topic": "heat pumps", "depth": 1},
            "_meta": {"progressToken": "p2"},
        },
    }
    async with served.http.stream("POST", url, json=call, headers=session) as got:
        assert got.status_code == 200
        async for line in got.aiter_lines():  # the first progress, then the stream is closed
            if "notifications/progress" in line:
                break
    await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
    assert (await served.http.delete(url, headers=session)).status_code in (200, 204)
    await wait_for(lambda: call_ended(caplog.text), within=60)
    written.set()
    run = await wait_for(lambda: finished_run(served.store), within=60)
    assert run.status is RunStatus.SUCCEEDED and not run.cancel_requested
    assert call_ended(caplog.text) == "its MCP caller left; the run goes on"


async def test_a_call_that_follows_a_research_going_on_cancels_nothing_when_it_ends(
    serve_fathom: Callable[..., Any],
    llm_server: FakeLLMServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A second call with the ``thread`` of a research going on follows it; when that call
    ends (here a 2026-07-28 call, whose end is its cancel) it stops following, and the
    research, which another call started, goes on to its report."""
    caplog.set_level(logging.INFO, logger="bots.mcp.server")
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS)
    written = threading.Event()  # the report is held until the follower left
    llm_server.fake.script("writer", Held(written))
    async with client(f"{served.url}/mcp", ALICE, mode="legacy") as mcp:
        first = asyncio.ensure_future(mcp.call_tool("research", {"topic": "heat pumps"}))
        await wait_for(lambda: llm_server.fake.requests_for("writer"), within=60)
        [summary] = await served.store.threads.list_threads()
        thread = summary.key.rsplit(":", 1)[1]
        body, headers = modern_call("heat pumps")
        body["params"]["arguments"]["thread"] = thread
        async with served.http.stream(
            "POST", f"{served.url}/mcp", json=body, headers=headers
        ) as got:
            async for line in got.aiter_lines():  # following: then its client closes it
                if "notifications/progress" in line:
                    break
        ended = await wait_for(lambda: call_ended(caplog.text), within=60)
        written.set()
        assert ended == "a call following it ended; the run goes on", caplog.text
        result = await first
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["status"] == "succeeded"
    run = await served.store.runs.get_run(result.structured_content["run_id"])
    assert run is not None and not run.cancel_requested


@needs_knowledge
async def test_internal_sources_are_scoped_per_principal_as_per_channel(
    serve_fathom: Callable[..., Any], tmp_path: Path
) -> None:
    """``FATHOM_MCP_CONFIG``'s ``channels`` name a principal as ``mcp:<principal>``: alice's
    research searches the notes server; bob, given none, gets a tool error and nothing runs."""
    served = await serve_fathom(
        FATHOM_MCP_TOKEN=TOKENS, **mcp_config(tmp_path, notes=["mcp:alice"], tickets=["slack"])
    )
    async with client(f"{served.url}/mcp", BOB) as mcp:
        refused = await mcp.call_tool(
            "research", {"topic": "our deploy process", "depth": 1, "sources": "internal"}
        )
    assert refused.is_error and "mcp:bob" in text_of(refused)
    assert await served.store.runs.count_runs() == []
    async with client(f"{served.url}/mcp", ALICE) as mcp:
        result = await mcp.call_tool(
            "research", {"topic": "our deploy process", "depth": 1, "sources": "internal"}
        )
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["status"] == "succeeded"
    calls = (tmp_path / "notes-calls.jsonl").read_text(encoding="utf-8").splitlines()
    assert calls  # the notes server was searched for alice
