"""MCP servers as the real ones behave (issue 33, item 3): mcp-server-time, mcp-server-fetch,
mcp-server-sqlite, basic-memory and a git server that cannot start, configured as their READMEs
say. Each is reproduced with the SDK's server side in tests/fakes/world_mcp.py (its docstring
names the real tool shapes); the real McpSource talks to it over stdio.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp_types import CallToolResult, TextContent

from core.knowledge.client import McpSource
from core.knowledge.config import ServerSpec, parse_servers
from core.knowledge.results import text_answer
from core.knowledge.tools import ToolProblem, looks_like_address, resolve_tool
from core.search.base import SearchError
from tests.cli import fathom

WORLD = Path(__file__).parent / "fakes" / "world_mcp.py"

Open = Callable[..., Any]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[Open]:
    """``await world(mode, **fathom_options)``: an McpSource of that server, started and
    connected (or down, with its problem); closed after the test."""
    opened: list[McpSource] = []

    async def open_it(mode: str, **options: Any) -> McpSource:
        spec = ServerSpec(
            name=mode,
            command=sys.executable,
            args=(str(WORLD),),
            env={"WORLD_MODE": mode, "WORLD_CALLS": str(tmp_path / "calls.jsonl")},
            channels=("cli",),
            **options,
        )
        source = McpSource(spec, timeout=20.0)
        opened.append(source)
        source.start()
        await source.wait_started()
        return source

    yield open_it
    for source in opened:
        await source.aclose()


def calls(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- which tool is chosen ---------------------------------------------------------------------


async def test_a_time_server_is_not_searched_and_says_to_set_the_tool(world: Open) -> None:
    """mcp-server-time: ``get_current_time(timezone)`` was picked (the only tool with one
    required string) and sent the planner's topic as a timezone."""
    source = await world("time")
    assert source.state == "down" and source.problem is not None
    assert "no tool takes a search query" in source.problem
    assert "set fathom.tool" in source.problem and "get_current_time" in source.problem


async def test_a_fetch_tool_is_never_chosen_by_itself(world: Open) -> None:
    """mcp-server-fetch: ``fetch(url)`` was picked, so a model-written address could be
    fetched from inside the network."""
    source = await world("fetch")
    assert source.state == "down" and source.problem is not None
    assert "set fathom.tool" in source.problem


async def test_a_fetch_tool_named_by_hand_never_gets_an_address(
    world: Open, tmp_path: Path
) -> None:
    source = await world("fetch", tool="fetch")
    assert source.state == "up"
    for address in (
        "http://10.0.0.5/admin",
        "169.254.169.254/latest/meta-data",
        "intranet.corp.example/payroll",
        "file:///etc/passwd",
        "/var/lib/secrets",
        "localhost:8080",
    ):
        with pytest.raises(SearchError, match="looks like an address"):
            await source.search(address)
    assert calls(tmp_path) == []  # none reached the server
    with pytest.raises(SearchError, match="the tool failed"):  # words do (and are no URL)
        await source.search("heat pumps in cold climates")


def test_what_looks_like_an_address() -> None:
    assert looks_like_address("https://a.example/x") and looks_like_address("10.1.2.3")
    assert looks_like_address("[::1]:80/") and looks_like_address("~/notes")
    for words in ("heat pumps in Oslo", "GPT-4.5 benchmark results", "U.S. energy policy"):
        assert not looks_like_address(words), words


async def test_sqlite_tools_are_ambiguous_and_never_written_to(world: Open, tmp_path: Path) -> None:
    """mcp-server-sqlite: ``read_query``, ``write_query`` and ``create_table`` all take a
    ``query`` (SQL): none is chosen by itself."""
    source = await world("sqlite")
    assert source.problem is not None
    assert "3 tools could take the query (read_query, write_query, create_table)" in (
        source.problem
    )
    assert calls(tmp_path) == []


async def test_an_error_in_plain_text_is_a_failed_call_not_a_source(
    world: Open, tmp_path: Path
) -> None:
    """mcp-server-sqlite answers ``Database error: ...`` as text, without ``isError``."""
    source = await world("sqlite", tool="read_query")
    with pytest.raises(SearchError) as failed:
        await source.search("heat pumps")
    assert str(failed.value) == 'sqlite: the tool failed: Database error: near "heat": syntax error'
    assert [c["tool"] for c in calls(tmp_path)] == ["read_query"]


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("pumps", "the tool failed: Error: the search index is not built yet"),
        ("pumps json", "the tool failed: rate limited, try again later"),
    ],
)
async def test_errors_as_text_or_json_are_failed_calls(
    world: Open, query: str, reason: str
) -> None:
    source = await world("errors")
    assert source.tool == "search"
    with pytest.raises(SearchError) as failed:
        await source.search(query)
    assert str(failed.value) == f"errors: {reason}"


def annotated(name: str, hints: dict[str, bool] | None) -> Any:
    schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    annotations = SimpleNamespace(**hints) if hints is not None else None
    return SimpleNamespace(
        name=name, input_schema=schema, output_schema=None, annotations=annotations
    )


def test_a_tool_marked_destructive_or_writing_is_never_chosen() -> None:
    tools = [
        annotated("purge", {"destructive_hint": True, "read_only_hint": None}),
        annotated("upsert", {"destructive_hint": None, "read_only_hint": False}),
        annotated("search_docs", {"destructive_hint": False, "read_only_hint": True}),
    ]
    assert resolve_tool(tools, None, None).name == "search_docs"
    with pytest.raises(ToolProblem, match="no tool takes a search query"):
        resolve_tool(tools[:2], None, None)
    assert resolve_tool(tools, "purge", None).name == "purge"  # the operator's own choice


# --- constant arguments -----------------------------------------------------------------------


async def test_a_required_project_comes_from_fathom_arguments(world: Open, tmp_path: Path) -> None:
    """basic-memory: ``search_notes`` needs ``project``; with ``output_format: json`` it
    answers several notes at once, each a source with its own title and link."""
    down = await world("notes")
    assert down.problem is not None
    assert "'search_notes' also needs 'project'; set them in fathom.arguments" in down.problem
    source = await world("notes", arguments={"project": "main", "output_format": "json"})
    assert source.tool == "search_notes"
    results = await source.search("heat pump defrost")
    assert [(r.title, r.url) for r in results] == [
        ("Heat pump field trial", "memory://trials/heat-pump-field-trial"),
        ("Defrost settings", "memory://manuals/defrost-settings"),
    ]
    assert await source.search("nothing like this") == []  # "No results found for ..."
    assert {c["tool"] for c in calls(tmp_path)} == {"search_notes"}  # never delete or write
    assert calls(tmp_path)[0] == {
        "tool": "search_notes",
        "query": "heat pump defrost",
        "project": "main",
        "format": "json",
    }


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"project": 3}, "fathom.arguments.project: expected string"),
        ({"project": "main", "output_format": "xml"}, "expected one of 'text', 'json'"),
        ({"project": "main", "colour": "red"}, "has no parameter 'colour'"),
        ({"project": "main", "query": "x"}, "fathom.arguments sets 'query', which takes"),
    ],
)
async def test_fathom_arguments_are_checked_against_the_tools_schema(
    world: Open, arguments: dict[str, Any], problem: str
) -> None:
    source = await world("notes", arguments=arguments)
    assert source.state == "down" and source.problem is not None
    assert problem in source.problem


def test_fathom_arguments_are_read_from_the_file_with_variables() -> None:
    config = parse_servers(
        {
            "memory": {
                "command": "uvx",
                "args": ["basic-memory", "mcp"],
                "fathom": {"arguments": {"project": "${TEAM_PROJECT}", "page_size": 5}},
            }
        },
        {"TEAM_PROJECT": "handbook"},
    )
    (spec,) = config.servers
    assert spec.arguments == {"project": "handbook", "page_size": 5}
    assert spec.masked()["arguments"] == {"project": "****", "page_size": "****"}


# --- a server that dies at start --------------------------------------------------------------


async def test_a_server_that_dies_at_start_shows_its_last_words(world: Open) -> None:
    source = await world("dies")
    assert source.state == "down" and source.problem is not None
    assert source.problem.endswith(
        "; its last words: fatal: not a git repository: /srv/repos/handbook"
    )


def test_fathom_sources_shows_the_last_words(cli_env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    entry = {"command": sys.executable, "args": [str(WORLD)], "env": {"WORLD_MODE": "dies"}}
    config.write_text(json.dumps({"mcpServers": {"git": entry}}))
    result = fathom("sources", env={**cli_env, "FATHOM_MCP_CONFIG": str(config)}, cwd=tmp_path)
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("git\t")]
    assert "down" in row and "fatal: not a git repository" in row


@pytest.mark.parametrize(
    ("text", "meaning"),
    [
        ("Error: the search index is not built yet", "error"),
        ('Database error: near "heat": syntax error', "error"),  # mcp-server-sqlite
        ("Failed to connect to the index", "error"),
        ("No results found for 'pumps' in project 'main'.", "nothing"),  # basic-memory
        ("No results.", "nothing"),
        ("0 results", "nothing"),
        ("Pump failure: the bearing was replaced after 20,000 hours.", "document"),
        ("Pump failed: the valve upstream of pump 4 was replaced.", "document"),
        ("No notes are kept for night shifts; ask the duty engineer.", "document"),
        ("Error handling in the pump controller retries three times.", "document"),
    ],
)
def test_what_a_short_text_answer_means(text: str, meaning: str) -> None:
    """Only an answer that is an error or says it found nothing is taken for one; a short
    document that starts with such words is a document."""
    answer = text_answer(CallToolResult(content=[TextContent(type="text", text=text)]))
    found = "document" if answer is None else "error" if answer.error else "nothing"
    assert found == meaning
