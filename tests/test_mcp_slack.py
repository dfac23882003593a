"""Slackbot's MCP client at ``/mcp`` (issue 57; ``FATHOM_MCP_SLACK_IDENTITY``): requests
signed with the Slack app's signing secret (``auth_type: slack_identity_auth``), each Slack
user its own caller (``bots.mcp.callers``).

The requests are what Slack's own sample sends and checks (slack-samples/bolt-js-examples,
``ai/slackbot-mcp-client/slack-identity``: ``src/app.js`` verifies ``isValidSlackRequest``
over the raw body and answers 401 otherwise; ``tests/app.test.js`` signs ``v0:{timestamp}:{body}``
with HMAC-SHA256, sends ``initialize`` at protocol 2025-03-26 and then a ``tools/call`` whose
``params._meta.slack`` holds ``user_id`` and ``team_id``, each POST on its own, no session
id, ``Accept: application/json, text/event-stream``), and Slack's manifest reference
(``mcp_servers.<key>.auth_type`` one of ``dynamic_client_registration``, ``no_auth``,
``manual_auth``, ``slack_identity_auth``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from bots.server import check_settings
from core.config import ConfigError
from tests.chat_app import ServedFathom, fathom_settings
from tests.fakes.llm import FakeLLMServer
from tests.fakes.search import FakeSearchServer
from tests.test_mcp_http import ALICE, POST_HEADERS, TOKENS

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM, USER, OTHER = "T0001", "U0001", "U0002"


def signed(body: bytes, secret: str = SECRET, at: float | None = None) -> dict[str, str]:
    """Slack's signature headers of ``body`` (as the sample's ``signRequest``)."""
    timestamp = str(int(time.time() if at is None else at))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256)
    return {
        **POST_HEADERS,
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
    }


def call(arguments: dict[str, Any], user: str | None = USER, team: str = TEAM) -> bytes:
    meta = {} if user is None else {"_meta": {"slack": {"user_id": user, "team_id": team}}}
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "research", "arguments": arguments, **meta},
    }
    return json.dumps(body).encode()


INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "test-client", "version": "1.0.0"},
        },
    }
).encode()


def answer_of(text: str) -> dict[str, Any]:
    """The JSON-RPC answer of a response: JSON, or the last ``data:`` event of SSE."""
    events = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    found: dict[str, Any] = json.loads(events[-1] if events else text)
    return found


@pytest.fixture
def serve_slack_mcp(serve_fathom: Callable[..., Any]) -> Callable[..., Any]:
    async def serve(**env: str) -> ServedFathom:
        values = {"FATHOM_MCP_SLACK_IDENTITY": "true", "SLACK_SIGNING_SECRET": SECRET, **env}
        served: ServedFathom = await serve_fathom(**values)
        return served

    return serve


async def post(served: ServedFathom, body: bytes, headers: dict[str, str]) -> Any:
    return await served.http.post(f"{served.url}/mcp", content=body, headers=headers, timeout=60)


async def test_a_slack_user_researches_through_slackbot_as_slacks_sample_calls_it(
    serve_slack_mcp: Callable[..., Any],
) -> None:
    served = await serve_slack_mcp()
    init = await post(served, INITIALIZE, signed(INITIALIZE))
    assert init.status_code == 200, init.text
    assert answer_of(init.text)["result"]["serverInfo"]["name"] == "fathom"
    body = call({"topic": "heat pumps in cold climates", "depth": 1})
    got = await post(served, body, signed(body))  # no session id: each request whole
    assert got.status_code == 200, got.text
    result = answer_of(got.text)["result"]
    assert not result.get("isError"), result
    assert "## Sources" in result["content"][0]["text"]
    data = result["structuredContent"]
    [run] = await served.runs(f"mcp:slack-{TEAM}:{USER}")  # the Slack user is the requester
    assert run.id == data["run_id"]
    assert run.thread_key == f"mcp:slack-{TEAM}:{USER}:{data['thread']}"


async def test_unsigned_forged_or_stale_requests_are_401_and_start_nothing(
    serve_slack_mcp: Callable[..., Any],
) -> None:
    served = await serve_slack_mcp()
    body = call({"topic": "heat pumps", "depth": 1})
    attempts = {
        "unsigned": {**POST_HEADERS, "Content-Type": "application/json"},
        "another secret": signed(body, secret="x" * 32),
        "stale": signed(body, at=time.time() - 600),
        "another body": signed(call({"topic": "solar", "depth": 1})),
    }
    for why, headers in attempts.items():
        got = await post(served, body, headers)
        assert got.status_code == 401, why
        assert got.headers["www-authenticate"].startswith("Bearer"), why
    assert await served.store.runs.count_runs() == []


async def test_a_signed_call_that_names_no_slack_user_is_a_tool_error(
    serve_slack_mcp: Callable[..., Any],
) -> None:
    served = await serve_slack_mcp()
    body = call({"topic": "heat pumps", "depth": 1}, user=None)
    got = await post(served, body, signed(body))
    result = answer_of(got.text)["result"]
    assert result["isError"] and "_meta.slack" in result["content"][0]["text"]
    forged = call({"topic": "heat pumps", "depth": 1}, user="U0001:x")
    got = await post(served, forged, signed(forged))
    assert answer_of(got.text)["result"]["isError"]
    assert await served.store.runs.count_runs() == []


async def test_each_slack_user_has_their_own_threads(
    serve_slack_mcp: Callable[..., Any],
) -> None:
    served = await serve_slack_mcp()
    body = call({"topic": "heat pumps", "depth": 1})
    first = answer_of((await post(served, body, signed(body))).text)["result"]
    thread = first["structuredContent"]["thread"]
    theirs = call({"topic": "and their costs", "depth": 1, "thread": thread}, user=OTHER)
    refused = answer_of((await post(served, theirs, signed(theirs))).text)["result"]
    assert refused["isError"] and "unknown thread" in refused["content"][0]["text"]
    mine = call({"topic": "and their costs", "depth": 1, "thread": thread})
    followed = answer_of((await post(served, mine, signed(mine))).text)["result"]
    assert not followed.get("isError"), followed
    assert len(await served.runs(f"mcp:slack-{TEAM}:{USER}")) == 2
    assert await served.runs(f"mcp:slack-{TEAM}:{OTHER}") == []


async def test_slack_signatures_are_refused_unless_slack_identity_is_on(
    serve_fathom: Callable[..., Any],
) -> None:
    """With tokens only, Slack's signature opens nothing: 401 before the body is read."""
    served = await serve_fathom(FATHOM_MCP_TOKEN=TOKENS, SLACK_SIGNING_SECRET=SECRET)
    body = call({"topic": "heat pumps", "depth": 1})
    got = await post(served, body, signed(body))
    assert got.status_code == 401
    assert await served.store.runs.count_runs() == []
    # and a token still works beside it
    bearer = {
        **POST_HEADERS,
        "Content-Type": "application/json",
        "Authorization": f"Bearer {ALICE}",
    }
    tokened = await post(served, INITIALIZE, bearer)
    assert tokened.status_code == 200


def test_slack_identity_without_a_signing_secret_is_one_line(
    llm_server: FakeLLMServer, search_server: FakeSearchServer, tmp_path: Any
) -> None:
    settings = fathom_settings(
        f"sqlite+aiosqlite:///{tmp_path}/x.db",
        llm_server,
        search_server,
        FATHOM_MCP_SLACK_IDENTITY="true",
    )
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET") as refused:
        check_settings(settings)
    assert "\n" not in str(refused.value)
