"""``/mcp`` in ``fathom serve`` (issue 57, item 3): the official MCP client
(``mcp.client.streamable_http.streamable_http_client`` under ``mcp.Client``, mcp 2.3.0)
against the real ``fathom serve`` app on 127.0.0.1.

The shapes relied on: the specification 2025-11-25, Transports, Streamable HTTP, "Security
Warning" ("If the Origin header is present and invalid, servers MUST respond with HTTP 403
Forbidden"); the SDK's ``mcp/server/transport_security.py`` (a Host it does not serve is
421 "Invalid Host header"); ``mcp/server/streamable_http_manager.py`` (a session is bound to
the ``AuthenticatedUser`` that opened it: another credential's request for it is 404
"Session not found"); RFC 6750 section 3 (401 with ``WWW-Authenticate: Bearer``).

The research tool itself is ``bots.mcp.server``'s; these tests serve a small MCP server of
their own (:func:`whoami_server`: one tool answering the caller's principal) where only the
transport and its security are under test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult, TextContent, Tool

from bots.mcp.http import principal_of
from bots.mcp.settings import McpSettings
from core.config import ConfigError, load
from tests.chat_app import ServedFathom

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
async def client(url: str, token: str | None, **headers: str) -> AsyncIterator[Any]:
    """The official client, connected to ``url`` with ``token`` as its bearer token."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as connected,
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
    big = {**INITIALIZE, "params": {**INITIALIZE["params"], "padding": "x" * 4096}}
    answer = await served.http.post(
        f"{served.url}/mcp", json=big, headers={**POST_HEADERS, "Authorization": f"Bearer {ALICE}"}
    )
    assert answer.status_code == 413
    assert "mcp-session-id" not in answer.headers
