"""core.knowledge on its own: the config file, channel scope, the tool chosen, what an answer
becomes, and the session against real stdio servers written with the SDK's server side
(tests/fakes/shapes_mcp.py, tests/fakes/notes_mcp.py). End to end runs are in
tests/test_team_knowledge.py."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from core.config import ConfigError
from core.knowledge.client import McpSource
from core.knowledge.config import (
    MASK,
    MAX_CONFIG_BYTES,
    ServerSpec,
    load_knowledge_config,
    parse_servers,
)
from core.knowledge.results import MAX_TEXT_CHARS, tool_results
from core.knowledge.scope import channel_allows
from core.knowledge.sources import Knowledge
from core.knowledge.tools import ToolProblem, resolve_tool
from core.metrics import Metrics
from core.search.base import SearchError
from tests.test_metrics import value

FAKES = Path(__file__).parent / "fakes"
SHAPES = FAKES / "shapes_mcp.py"
NOTES = FAKES / "notes_mcp.py"


# -- the config file ------------------------------------------------------------------------


def test_a_block_copied_from_another_client_is_read_with_its_variables_expanded() -> None:
    config = parse_servers(
        {
            "wiki": {
                "command": "npx",
                "args": ["-y", "@acme/wiki-mcp", "--space", "${WIKI_SPACE:-ENG}"],
                "env": {"WIKI_TOKEN": "${WIKI_TOKEN}", "REGION": "${env:REGION}"},
                "type": "stdio",
                "autoApprove": ["search"],  # (another client's key: ignored)
                "fathom": {"tool": "search", "channels": ["slack:T1:C1", "feishu", "cli"]},
            },
            "tickets": {
                "url": "https://mcp.example.internal/${PATH_PART}",
                "headers": {"Authorization": "Bearer ${TICKETS_TOKEN}"},
                "fathom": {"results": 3, "channels": ["slack:T1", "slack:T1"]},
            },
        },
        {"WIKI_TOKEN": "w-secret", "REGION": "eu", "PATH_PART": "mcp", "TICKETS_TOKEN": "t-1"},
    )
    assert config.problems == {}
    wiki, tickets = config.servers
    assert wiki.transport == "stdio" and wiki.args[-1] == "ENG"
    assert wiki.env == {"WIKI_TOKEN": "w-secret", "REGION": "eu"}
    assert wiki.tool == "search" and wiki.channels == ("slack:T1:C1", "feishu", "cli")
    assert tickets.transport == "http" and tickets.url == "https://mcp.example.internal/mcp"
    assert tickets.headers == {"Authorization": "Bearer t-1"}
    assert tickets.results == 3 and tickets.channels == ("slack:T1",)  # (duplicates dropped)
    assert wiki.results == 5 and tickets.tool is None and tickets.argument is None


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"url": "https://x.example/sse", "type": "sse"}, "SSE transport is not supported"),
        ({"args": ["x"]}, "needs a command (a stdio server) or a url"),
        ({"command": "x", "url": "https://x.example"}, "has both a command and a url"),
        ({"url": "ftp://x.example"}, "url must be an http:// or https:// address"),
        ({"command": "x", "fathom": {"channels": ["slack::C1"]}}, "channel 'slack::C1' is not"),
        ({"command": "x", "fathom": {"channels": ["a:b:c:d"]}}, "is not platform[:workspace"),
        ({"command": "x", "fathom": {"results": 0}}, "fathom.results:"),
        ({"command": "x", "fathom": {"tools": "search"}}, "fathom.tools: unknown option"),
        ({"command": "x", "env": {"TOKEN": "${MISSING}"}}, "env.TOKEN uses ${MISSING}, which"),
        ({"command": "x", "args": ["$${A:=b}"]}, "args[0]: cannot expand ${A:=b}"),
        (["command", "x"], "expected an object with a command or a url"),
    ],
)
def test_a_bad_entry_is_one_line_naming_its_server(entry: object, problem: str) -> None:
    config = parse_servers({"good": {"command": "ok"}, "bad": entry}, {})
    assert [s.name for s in config.servers] == ["good"]
    assert list(config.problems) == ["bad"]
    line = config.problems["bad"]
    assert line.startswith("MCP server 'bad': ") and problem in line and "\n" not in line


def test_a_problem_never_repeats_the_value_it_is_about() -> None:
    config = parse_servers(
        {
            "a": {"command": "x", "env": {"TOKEN": 12345678}},
            "b": {"url": "https://x.example", "headers": {"Authorization": ["Bearer s3cr3t"]}},
        },
        {},
    )
    assert set(config.problems) == {"a", "b"}
    text = " ".join(config.problems.values())
    assert "12345678" not in text and "s3cr3t" not in text
    assert "env.TOKEN" in config.problems["a"] and "headers.Authorization" in config.problems["b"]


def test_a_disabled_entry_is_left_out_and_vs_codes_servers_key_is_read(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {"servers": {"off": {"command": "x", "disabled": True}, "on": {"url": "http://h"}}}
        ),
        encoding="utf-8",
    )
    config = load_knowledge_config(str(path))
    assert [s.name for s in config.servers] == ["on"] and config.problems == {}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", 'expected an object like {"mcpServers"'),
        (b'{"mcpServers": []}', 'expected an object "mcpServers"'),
        (b'{"other": {}}', 'expected an object "mcpServers"'),
        (b"\xff\xfe{}", "not JSON"),
        (b" " * (MAX_CONFIG_BYTES + 1), "larger than 1024 kB"),
    ],
)
def test_a_file_that_cannot_be_used_is_one_line_naming_it(
    tmp_path: Path, content: bytes, says: str
) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        load_knowledge_config(str(path))
    message = str(raised.value)
    assert message.startswith(f"FATHOM_MCP_CONFIG={path}: ") and says in message
    assert "\n" not in message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mcp\.json: cannot read it \(No such file"):
        load_knowledge_config(str(tmp_path / "mcp.json"))


def test_masked_shows_the_names_of_env_and_headers_never_their_values() -> None:
    stdio = ServerSpec(name="wiki", command="wiki", env={"WIKI_TOKEN": "w-secret"})
    http = ServerSpec(name="t", url="https://t.example", headers={"Authorization": "Bearer z9"})
    shown = json.dumps([stdio.masked(), http.masked()])
    assert "w-secret" not in shown and "z9" not in shown
    assert stdio.masked()["env"] == {"WIKI_TOKEN": MASK}
    assert http.masked()["headers"] == {"Authorization": MASK}


# -- which channels may use a server ---------------------------------------------------------


@pytest.mark.parametrize(
    ("channels", "thread", "allowed"),
    [
        (["slack:T1"], "slack:T1:C1:1712.5", True),
        (["slack:T1"], "slack:T10:C1:1712.5", False),  # component by component, not text
        (["slack:T1:C1"], "slack:T1:C1:1712.5", True),
        (["slack:T1:C1"], "slack:T1:C2:1712.5", False),
        (["slack:T1:C1"], "slack:T1", False),  # a workspace is not one of its channels
        (["slack:T1:C1"], "slack:T1:C1", True),  # (a partial key: fathom sources test)
        (["feishu"], "feishu:tenant:oc_1:om_1", True),
        (["feishu"], "feishuX:tenant:oc_1:om_1", False),
        (["feishu"], "dingtalk:corp:cid:1", False),
        ([], "cli:local:operator", True),  # no channels: the console only
        ([], "slack:T1:C1:1712.5", False),
        (["slack:T1"], "cli:local:operator", False),  # channels given: the console too must be
        (["cli"], "cli:local:operator", True),
        (["slack:T1"], "", False),
        (["slack:T1"], ":T1:C1:1", False),
    ],
)
def test_channels_are_thread_key_prefixes(channels: list[str], thread: str, allowed: bool) -> None:
    assert channel_allows(channels, thread) is allowed


# -- which tool is called --------------------------------------------------------------------


def tool(name: str, properties: dict[str, Any], required: list[str], output: Any = None) -> Any:
    schema = {"type": "object", "properties": properties, "required": required}
    return SimpleNamespace(name=name, input_schema=schema, output_schema=output)


TEXT = {"type": "string"}


def test_the_only_tool_taking_one_required_string_is_chosen() -> None:
    tools = [
        tool("count", {"n": {"type": "integer"}}, ["n"]),
        tool(
            "search", {"query": TEXT, "limit": {"type": "integer"}}, ["query"], {"type": "object"}
        ),
        tool("get", {"id": TEXT, "rev": TEXT}, ["id", "rev"]),
    ]
    choice = resolve_tool(tools, None, None)
    assert (choice.name, choice.argument) == ("search", "query")
    assert choice.output_schema == {"type": "object"}


def test_an_ambiguous_or_missing_tool_lists_the_servers_tools() -> None:
    two = [tool("search", {"q": TEXT}, ["q"]), tool("lookup", {"term": TEXT}, ["term"])]
    with pytest.raises(ToolProblem, match=r"2 tools could take the query \(search, lookup\)"):
        resolve_tool(two, None, None)
    assert resolve_tool(two, "lookup", None).argument == "term"
    with pytest.raises(ToolProblem, match=r"has no tool 'find'; its tools: search, lookup"):
        resolve_tool(two, "find", None)
    with pytest.raises(ToolProblem, match=r"no tool takes a search query.*tools: count"):
        resolve_tool([tool("count", {"n": {"type": "integer"}}, ["n"])], None, None)
    with pytest.raises(ToolProblem, match="its tools: none"):
        resolve_tool([], None, None)


def test_a_configured_argument_picks_the_tool_and_the_parameter() -> None:
    tools = [
        tool("search", {"query": TEXT, "space": TEXT}, ["query", "space"]),
        tool("other", {"id": {"type": "integer"}}, ["id"]),
    ]
    with pytest.raises(ToolProblem, match="no single required string parameter"):
        resolve_tool(tools, "other", None)
    with pytest.raises(ToolProblem, match=r"tool 'search' also needs 'space'; set them in"):
        resolve_tool(tools, "search", "query")
    space = {"space": "ENG"}
    assert resolve_tool(tools, "search", "query", space).argument == "query"
    assert resolve_tool(tools, None, "query", space).name == "search"
    assert resolve_tool(tools, "search", None, space).arguments == space


def test_tool_names_in_a_problem_are_inert_and_capped() -> None:
    tools = [tool(f"t{i}", {"q": TEXT}, ["q"]) for i in range(20)] + [
        tool("<!channel> https://evil.example", {"q": TEXT}, ["q"])
    ]
    with pytest.raises(ToolProblem) as raised:
        resolve_tool(tools, None, None)
    assert "and 9 more" in str(raised.value) and "<!channel>" not in str(raised.value)


# -- what an answer becomes ------------------------------------------------------------------


def results_of(result: CallToolResult, **kwargs: Any) -> list[Any]:
    options: dict[str, Any] = {"server": "wiki", "query": "pump", "limit": 5, "budget_tokens": 300}
    options.update(kwargs)
    return tool_results(result, **options)


def test_structured_results_are_read_and_their_text_rendering_is_not_read_again() -> None:
    items = [
        {"title": "Runbook", "url": "https://wiki.example/rb", "text": "Restart the pump."},
        {
            "name": "Old notes",
            "uri": "notes://7",
            "snippet": "Pump 4 history.",
            "date": "2026-01-02",
        },
        {"owner": "Ops", "step": "Drain the tank first."},  # a row: its columns
        {"nested": {"only": "objects"}},  # no column to read
        "not an object",
    ]
    result = CallToolResult(
        content=[TextContent(type="text", text=json.dumps({"results": items}))],
        structured_content={"results": items},
    )
    out = results_of(result)
    assert [(r.title, r.url, r.server) for r in out] == [
        ("Runbook", "https://wiki.example/rb", "wiki"),
        ("Old notes", "notes://7", "wiki"),
        ("wiki", "", "wiki"),
    ]
    assert out[1].published == "2026-01-02"
    assert out[0].passages == ["Restart the pump."]
    assert out[2].snippet == "owner: Ops; step: Drain the tank first."


def test_the_one_array_of_the_output_schema_holds_the_results() -> None:
    schema = {
        "type": "object",
        "properties": {"tickets": {"type": "array"}, "total": {"type": "integer"}},
    }
    result = CallToolResult(
        content=[],
        structured_content={"tickets": [{"title": "INC-7", "uri": "t://7"}], "total": 1},
    )
    assert [r.title for r in results_of(result, output_schema=schema)] == ["INC-7"]
    # without the schema, "tickets" is not known to hold results and nothing else is there
    assert results_of(result) == []


def test_json_in_a_text_block_is_read_like_structured_content() -> None:
    text = json.dumps([{"title": "A", "url": "https://a.example"}, {"title": "B", "url": "b://1"}])
    result = CallToolResult(content=[TextContent(type="text", text=text)])
    assert [r.title for r in results_of(result)] == ["A", "B"]


def test_resource_links_and_embedded_resources_are_sources_of_their_own() -> None:
    result = CallToolResult(
        content=[
            TextContent(type="text", text="Two documents mention pump."),
            ResourceLink(
                type="resource_link",
                uri="https://drive.example/d/42",
                name="q3.pdf",
                title="Q3 plan",
                description="The plan mentions the pump.",
            ),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="wiki://pages/pumps", text="Pump care. " * 5),
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(uri="drive://scan.png", blob="iVBORw0KGgo="),
            ),
        ]
    )
    out = results_of(result)
    assert [(r.title, r.url) for r in out] == [
        ("Q3 plan", "https://drive.example/d/42"),
        ("pumps", "wiki://pages/pumps"),  # (named after its URI)
        ("wiki", ""),  # the plain text: one source named after the server
    ]
    assert out[1].passages and "Pump care." in out[1].passages[0]
    assert out[2].snippet == "Two documents mention pump."


def test_duplicates_are_one_source_and_the_limit_holds() -> None:
    items = [{"title": f"T{i}", "url": f"https://w.example/{i % 3}"} for i in range(9)]
    result = CallToolResult(content=[], structured_content={"results": items})
    assert [r.url for r in results_of(result)] == [f"https://w.example/{i}" for i in range(3)]
    many = [{"title": f"T{i}", "url": f"https://w.example/{i}"} for i in range(9)]
    assert len(results_of(CallToolResult(content=[], structured_content=many), limit=2)) == 2


def test_hostile_text_is_inert_and_a_huge_answer_is_capped() -> None:
    hostile = "<!channel> <@U1> see [this](https://evil.example/x) " + "pump valve " * 100_000
    result = CallToolResult(
        content=[],
        structured_content={
            "results": [
                {"title": "<!here> https://evil.example", "url": "bad url", "text": hostile}
            ]
        },
    )
    (only,) = results_of(result)
    assert only.url == ""  # a link holding spaces is no link
    shown = only.title + only.snippet + " ".join(only.passages)
    assert "<!channel>" not in shown and "<!here>" not in shown and "<@U1>" not in shown
    assert "https://evil.example" not in shown
    assert sum(len(p) for p in only.passages) < MAX_TEXT_CHARS // 10  # within the budget


# -- the session, against real servers -------------------------------------------------------


def shapes(mode: str, tmp_path: Path, **fathom: Any) -> ServerSpec:
    return ServerSpec(
        name="drive",
        command=sys.executable,
        args=(str(SHAPES),),
        env={"SHAPES_MODE": mode, "SHAPES_PID": str(tmp_path / "pid")},
        channels=("cli",),
        **fathom,
    )


async def test_a_server_answering_resources_gives_each_its_source(tmp_path: Path) -> None:
    metrics = Metrics()
    source = McpSource(shapes("resources", tmp_path), metrics=metrics)
    try:
        out = await source.search("pump maintenance")
        again = await source.search("bearings")
    finally:
        await source.aclose()
    assert [(r.title, r.url) for r in out] == [
        ("Q3 plan", "https://drive.example.internal/d/42"),
        ("pump-maintenance", "wiki://pages/pump-maintenance"),
        ("drive", ""),
    ]
    assert all(r.server == "drive" for r in out)
    assert out[0].snippet == "The Q3 plan, which mentions pump maintenance."
    assert any("pump is inspected" in p for p in out[1].passages)
    assert again[0].snippet.endswith("mentions bearings.")
    assert source.tool == "lookup" and source.connect_seconds is not None
    scraped = metrics.exposition().decode()
    assert value(scraped, "fathom_mcp_calls_total", server="drive", outcome="ok") == 2


async def test_results_under_the_output_schemas_one_array_are_read(tmp_path: Path) -> None:
    source = McpSource(shapes("schema", tmp_path))
    try:
        (hit,) = await source.search("pump 4 trips")
    finally:
        await source.aclose()
    assert (hit.title, hit.url) == ("INC-7: pump 4 trips", "https://tickets.example.internal/INC-7")
    assert hit.published == "2026-11-20"


async def test_an_ambiguous_server_is_down_for_good_listing_its_tools(tmp_path: Path) -> None:
    metrics = Metrics()
    knowledge = Knowledge(
        parse_servers(
            {
                "drive": {
                    "command": sys.executable,
                    "args": [str(SHAPES)],
                    "env": {"SHAPES_MODE": "ambiguous"},
                },
                "named": {
                    "command": sys.executable,
                    "args": [str(SHAPES)],
                    "env": {"SHAPES_MODE": "ambiguous"},
                    "fathom": {"tool": "search"},
                },
            },
            {},
        ),
        metrics=metrics,
    )
    try:
        knowledge.start()
        await knowledge.wait_started()
        drive, named = knowledge.status()
        assert drive.state == "down" and drive.problem is not None
        assert "2 tools could take the query" in drive.problem
        assert "lookup" in drive.problem and "search" in drive.problem
        assert named.state == "up" and named.tool == "search"
        with pytest.raises(SearchError, match=r"set fathom\.tool"):
            await knowledge.sources[0].search("pump")
        assert knowledge.sources[0].state == "down"  # (not retried: it cannot get better)
        assert [r.snippet for r in await knowledge.sources[1].search("pump")] == ["notes on pump"]
    finally:
        await knowledge.aclose()
    scraped = metrics.exposition().decode()
    assert value(scraped, "fathom_mcp_calls_total", server="drive", outcome="error") == 1
    assert value(scraped, "fathom_mcp_calls_total", server="named", outcome="ok") == 1


async def test_a_server_with_no_string_tool_is_a_start_up_problem(tmp_path: Path) -> None:
    source = McpSource(shapes("none", tmp_path))
    try:
        source.start()
        await source.wait_started()
        assert source.state == "down" and source.problem is not None
        assert "no tool takes a search query" in source.problem
        assert "its tools: count" in source.problem
    finally:
        await source.aclose()


async def test_a_server_that_cannot_start_waits_out_its_backoff_and_logs_no_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    spec = ServerSpec(
        name="wiki",
        command=str(tmp_path / "no-such-server"),
        env={"WIKI_TOKEN": "w-secret-value"},
        channels=("cli",),
    )
    metrics = Metrics()
    source = McpSource(spec, metrics=metrics, clock=lambda: now[0], initial_backoff=4.0)
    caplog.set_level(logging.DEBUG)
    try:
        with pytest.raises(SearchError, match="wiki: cannot start"):
            await source.search("pump")
        with pytest.raises(SearchError, match=r"restarting \(next try in 4 s"):
            await source.search("pump")  # within the backoff: at once, nothing spawned
        now[0] += 4.0
        with pytest.raises(SearchError, match="wiki: cannot start"):
            await source.search("pump")  # tried again, and the backoff doubled
        with pytest.raises(SearchError, match=r"next try in 8 s"):
            await source.search("pump")
    finally:
        await source.aclose()
    assert "w-secret-value" not in caplog.text
    assert "MCP server 'wiki' is down: cannot start" in caplog.text
    scraped = metrics.exposition().decode()
    assert value(scraped, "fathom_mcp_calls_total", server="wiki", outcome="error") == 4


async def test_closing_stops_the_stdio_server(tmp_path: Path) -> None:
    source = McpSource(shapes("resources", tmp_path))
    await source.search("pump")
    pid = int((tmp_path / "pid").read_text(encoding="utf-8"))
    os.kill(pid, 0)  # running while the session is up
    await source.aclose()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped
    assert source.state == "down"
    with pytest.raises(SearchError, match="closed"):
        await source.search("pump")


async def test_status_masks_secrets_and_lists_unusable_entries(tmp_path: Path) -> None:
    config = parse_servers(
        {
            "notes": {
                "command": sys.executable,
                "args": [str(NOTES)],
                "env": {"NOTES_TOKEN": "n-secret"},
                "fathom": {"channels": ["slack:T1"]},
            },
            "broken": {"url": "https://x.example", "type": "sse"},
        },
        {},
    )
    knowledge = Knowledge(config)
    try:
        knowledge.start()
        await knowledge.wait_started()
        notes, broken = knowledge.status()
        assert [s.name for s in knowledge.allowed("slack:T1:C1:1")] == ["notes"]
        assert knowledge.allowed("cli:local:operator") == []
    finally:
        await knowledge.aclose()
    assert notes.state == "up" and notes.tool == "search" and notes.transport == "stdio"
    assert notes.config["env"] == {"NOTES_TOKEN": MASK}
    assert "n-secret" not in repr(knowledge.status())
    assert broken.state == "down" and broken.transport is None
    assert broken.problem == "SSE transport is not supported; use Streamable HTTP"
