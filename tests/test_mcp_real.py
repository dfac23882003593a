"""MCP servers as the real ones behave (issue 33, item 3): mcp-server-time, mcp-server-fetch,
mcp-server-sqlite, basic-memory and a git server that cannot start, configured as their READMEs
say. Each is reproduced with the SDK's server side in tests/fakes/world_mcp.py (its docstring
names the real tool shapes); the real McpSource talks to it over stdio.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mcp_types import CallToolResult, TextContent

from core.knowledge.client import McpSource
from core.knowledge.config import ServerSpec, parse_servers
from core.knowledge.results import text_answer
from core.knowledge.statements import Executes, executes, statement_refusal
from core.knowledge.tools import ToolProblem, looks_like_address, resolve_tool
from core.search.base import NothingFound, SearchError
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
            env={
                "WORLD_MODE": mode,
                "WORLD_CALLS": str(tmp_path / "calls.jsonl"),
                "WORLD_DB": str(team_database(tmp_path)),
            },
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


#: The team's runbooks, in the database the SQL servers run statements on.
RUNBOOKS = [
    (1, "Deploy runbook", "Roll back with the previous image tag, then drain the queue."),
    (2, "Pump 4 overhaul", "Bearings are replaced after 20,000 hours of running."),
    (3, "Valve audit", "The valve upstream of pump 4 is replaced in August."),
]


def team_database(tmp_path: Path) -> Path:
    """tmp_path/runbooks.db with the table ``runbooks`` (:data:`RUNBOOKS`), made once."""
    path = tmp_path / "runbooks.db"
    if not path.exists():
        with closing(sqlite3.connect(path)) as db, db:
            db.execute("CREATE TABLE runbooks (id INTEGER PRIMARY KEY, title TEXT, steps TEXT)")
            db.executemany("INSERT INTO runbooks VALUES (?, ?, ?)", RUNBOOKS)
    return path


def runbooks(tmp_path: Path) -> list[tuple[Any, ...]]:
    """What the runbooks table holds now."""
    with closing(sqlite3.connect(tmp_path / "runbooks.db")) as db:
        return db.execute("SELECT id, title, steps FROM runbooks ORDER BY id").fetchall()


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


async def test_sqlite_tools_run_statements_and_are_never_chosen(
    world: Open, tmp_path: Path
) -> None:
    """mcp-server-sqlite: ``read_query``, ``write_query`` and ``create_table`` all take a
    ``query`` (SQL): none is chosen by itself (issue 51: ``read_query`` runs statements, the
    other two write)."""
    source = await world("sqlite")
    assert source.problem is not None
    assert "no tool takes a search query" in source.problem
    assert "read_query runs statements (SQL or another query language; its description says" in (
        source.problem
    )
    assert calls(tmp_path) == []


async def test_an_error_in_plain_text_is_a_failed_call_not_a_source(
    world: Open, tmp_path: Path
) -> None:
    """mcp-server-sqlite answers ``Database error: ...`` as text, without ``isError`` (its
    ``read_query`` named by hand, with the opt-in to reads that a statement tool needs)."""
    source = await world("sqlite", tool="read_query", statements="read-only")
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


# --- tools that run statements (issue 51, item 1) ----------------------------------------------


def described(
    name: str,
    description: str,
    properties: dict[str, Any],
    required: list[str] | None = None,
    hints: dict[str, bool] | None = None,
) -> Any:
    """A tool as ``tools/list`` gives it: name, description, input schema, annotations."""
    schema = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    annotations = SimpleNamespace(**hints) if hints is not None else None
    return SimpleNamespace(
        name=name,
        description=description,
        input_schema=schema,
        output_schema=None,
        annotations=annotations,
    )


STRING = {"type": "string"}


@pytest.mark.parametrize(
    ("tool", "runs"),
    [
        # mcp-server-duckdb 1.1.0 (PyPI): its one tool.
        (
            described(
                "query",
                "Execute a query on the DuckDB database",
                {"query": {**STRING, "description": "SQL query to execute"}},
                ["query"],
            ),
            Executes.STATEMENTS,
        ),
        # mcp-alchemy 2026.10.15 (PyPI).
        (
            described(
                "execute_query",
                "Execute a SQL query and return results in a readable format.",
                {"query": STRING, "params": {"type": "object"}},
                ["query"],
            ),
            Executes.STATEMENTS,
        ),
        # modelcontextprotocol/servers' postgres: ``query`` with an ``sql`` it does not require.
        (described("query", "Run a read-only SQL query", {"sql": STRING}), Executes.STATEMENTS),
        # neo4j-contrib/mcp-neo4j's mcp-neo4j-cypher.
        (
            described(
                "read_neo4j_cypher",
                "Execute a read Cypher query on the neo4j database.",
                {"query": {**STRING, "description": "The Cypher query to execute."}},
                ["query"],
                {"read_only_hint": True},
            ),
            Executes.STATEMENTS,
        ),
        # wonderwhy-er/DesktopCommanderMCP.
        (
            described(
                "execute_command",
                "Execute a terminal command with timeout.",
                {"command": STRING, "timeout_ms": {"type": "integer"}},
                ["command"],
            ),
            Executes.CODE,
        ),
        # pydantic's mcp-run-python.
        (
            described("run_python_code", "Tool to execute Python code.", {"python_code": STRING}),
            Executes.CODE,
        ),
        # Tools that search: basic-memory, duckduckgo-mcp-server, mcp-server-qdrant, GitHub's.
        (
            described("search_notes", "Search across all content in the knowledge base.", {}),
            None,
        ),
        (
            described(
                "search",
                "Search the web using DuckDuckGo. Returns a list of results with titles, "
                "URLs, and snippets. Use this to find current information, research topics, "
                "or locate specific websites.",
                {"query": STRING},
            ),
            None,
        ),
        (described("qdrant-find", "Look up memories in Qdrant.", {"query": STRING}), None),
        (
            described("search_code", "Search for code across GitHub repositories", {"q": STRING}),
            None,
        ),
        (
            described(
                "fetch_content",
                "Fetch and extract the main text content from a webpage. Strips out "
                "navigation, headers, footers, scripts, and styles.",
                {"url": STRING},
            ),
            None,
        ),
    ],
)
def test_which_tools_run_what_they_are_sent(tool: Any, runs: Executes | None) -> None:
    """A tool that executes what it is sent is known by its name, its description or its
    input schema (each real tool's source in the comment above it)."""
    found = executes(tool)
    assert (found.runs if found else None) is runs, found


async def test_a_duckdb_query_tool_is_never_chosen_by_itself(world: Open, tmp_path: Path) -> None:
    """mcp-server-duckdb 1.1.0, configured as its README says (``uvx mcp-server-duckdb
    --db-path ...``): its only tool, ``query(query)``, "Execute a query on the DuckDB
    database", was chosen because its parameter is named ``query``, so the planner's text
    ran as SQL."""
    source = await world("duckdb")
    assert source.state == "down" and source.problem is not None
    assert "no tool takes a search query" in source.problem
    assert (
        'query runs statements (SQL or another query language; its description says "Execute '
        'a query on the DuckDB database") and is never chosen by itself'
    ) in source.problem
    with pytest.raises(SearchError):
        await source.search("DELETE FROM runbooks")
    assert calls(tmp_path) == [] and runbooks(tmp_path) == RUNBOOKS


async def test_mcp_alchemy_offers_no_tool_that_searches(world: Open, tmp_path: Path) -> None:
    """mcp-alchemy, configured as its README says: ``execute_query`` runs SQL, and
    ``filter_table_names(q)`` takes a ``q`` but filters table names: it does not search."""
    source = await world("alchemy")
    assert source.state == "down" and source.problem is not None
    assert "execute_query runs statements" in source.problem
    assert "set fathom.tool to one of its tools: all_table_names, filter_table_names" in (
        source.problem
    )
    assert calls(tmp_path) == []


async def test_a_statement_tool_named_by_hand_is_refused_in_one_line(
    world: Open, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """mcp-alchemy's ``execute_query`` named by hand received a planner-written ``DELETE FROM
    runbooks WHERE title LIKE '%'`` and emptied the table. Without the operator's opt-in it is
    refused when the server starts, in one line (the log's, and what ``fathom sources`` and
    ``/readyz`` show: the source's ``problem``)."""
    source = await world("alchemy", tool="execute_query")
    assert source.state == "down"
    assert source.problem == (
        "tool 'execute_query' runs statements (SQL or another query language; its name "
        '"execute_query" says so): Fathom would send it model-written text, which a web page '
        'can steer; name a search tool, or set fathom.statements to "read-only" to send it '
        "nothing but reads"
    )
    logged = [r.getMessage() for r in caplog.records if "is down" in r.getMessage()]
    assert logged == [f"MCP server 'alchemy' is down: {source.problem}"]
    with pytest.raises(SearchError, match="runs statements"):
        await source.search("DELETE FROM runbooks WHERE title LIKE '%'")
    assert calls(tmp_path) == [] and runbooks(tmp_path) == RUNBOOKS


def test_fathom_sources_and_readyz_show_the_refusal(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "mcp.json"
    entry = {
        "command": sys.executable,
        "args": [str(WORLD)],
        "env": {"WORLD_MODE": "alchemy", "WORLD_DB": str(team_database(tmp_path))},
        "fathom": {"tool": "execute_query", "channels": ["cli"]},
    }
    config.write_text(json.dumps({"mcpServers": {"db": entry}}))
    env = {**cli_env, "FATHOM_MCP_CONFIG": str(config)}
    listed = fathom("sources", env=env, cwd=tmp_path)
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("db\t")]
    assert "down" in row and "tool 'execute_query' runs statements" in row
    shown = json.loads(fathom("sources", "--json", env=env, cwd=tmp_path).stdout)
    (db,) = [s for s in shown if s["name"] == "db"]
    assert db["state"] == "down" and 'fathom.statements to "read-only"' in db["problem"]
    assert db["config"]["statements"] is None


async def test_readyz_shows_the_refusal(tmp_path: Path) -> None:
    """``/readyz`` shows each server's state and problem through ``knowledge_status``."""
    from bots.http_status import knowledge_status
    from core.knowledge import Knowledge, KnowledgeConfig

    spec = ServerSpec(
        name="db",
        command=sys.executable,
        args=(str(WORLD),),
        env={"WORLD_MODE": "duckdb", "WORLD_DB": str(team_database(tmp_path))},
        tool="query",
        channels=("cli",),
    )
    knowledge = Knowledge(KnowledgeConfig((spec,)))
    knowledge.start()
    try:
        await knowledge.wait_started()
        shown = knowledge_status(knowledge)
    finally:
        await knowledge.aclose()
    assert shown["db"]["state"] == "down"
    assert str(shown["db"]["problem"]).startswith("tool 'query' runs statements")


#: What a statement tool is never sent, whoever wrote it: the planner's real ``DELETE``, each
#: statement the issue names, several statements, and comments hiding them.
NEVER_SENT = [
    "DELETE FROM runbooks WHERE title LIKE '%'",
    "delete from runbooks",
    "DROP TABLE runbooks",
    "UPDATE runbooks SET steps = 'none'",
    "INSERT INTO runbooks VALUES (4, 'x', 'y')",
    "ALTER TABLE runbooks RENAME TO old",
    "ATTACH DATABASE '/tmp/other.db' AS other",
    "COPY runbooks TO '/tmp/runbooks.csv'",
    "PRAGMA writable_schema = ON",
    "SELECT 1; DELETE FROM runbooks",
    "SELECT title FROM runbooks -- ; DROP TABLE runbooks",
    "SELECT /* hidden */ title FROM runbooks",
    "/*!50000DELETE*/ FROM runbooks",
    "SELECT title FROM runbooks\nDELETE FROM runbooks",  # (SQL Server runs both, no ;)
    "ＤＥＬＥＴＥ FROM runbooks",  # (full-width letters)
    "WITH gone AS (DELETE FROM runbooks RETURNING *) SELECT * FROM gone",
    "SELECT * INTO backup FROM runbooks",
    "SELECT title FROM runbooks FOR UPDATE",
    "EXPLAIN ANALYZE DELETE FROM runbooks",
    "SELECT load_extension('/tmp/evil.so')",
    "SELECT pg_terminate_backend(42)",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM '/srv/exports/salaries.csv'",
    "MATCH (n) SET n.admin = true",
    "MATCH (n) DETACH DELETE n",
    "xp_cmdshell 'rm -rf /'",
]


@pytest.mark.parametrize("text", NEVER_SENT)
def test_what_a_statement_tool_is_never_sent(text: str) -> None:
    assert statement_refusal(text) is not None, text


@pytest.mark.parametrize(
    "text",
    [
        "SELECT title, steps FROM runbooks WHERE title LIKE '%pump%'",
        "SELECT count(*) FROM runbooks",
        "WITH recent AS (SELECT * FROM runbooks WHERE id > 1) SELECT title FROM recent",
        "heat pump defrost intervals",
        "pump 4 bearing replacement history",
    ],
)
def test_what_a_statement_tool_may_be_sent(text: str) -> None:
    assert statement_refusal(text) is None, text


async def test_with_read_only_a_named_tool_gets_reads_and_never_a_write(
    world: Open, tmp_path: Path
) -> None:
    """mcp-alchemy's ``execute_query`` named with ``fathom.statements: "read-only"``: every
    text in :data:`NEVER_SENT` is refused before it leaves, and the table keeps its rows; a
    read gets its rows back (mcp-alchemy's ``N. row`` text); its errors and "No rows returned"
    are what they say."""
    source = await world("alchemy", tool="execute_query", statements="read-only")
    assert source.state == "up", source.problem
    for text in NEVER_SENT:
        with pytest.raises(SearchError, match="the query was not sent") as refused:
            await source.search(text)
        assert "the tool runs statements (reads only)" in str(refused.value)
    assert calls(tmp_path) == [] and runbooks(tmp_path) == RUNBOOKS
    (read,) = await source.search("SELECT title, steps FROM runbooks WHERE id = 2")
    assert "title: Pump 4 overhaul" in read.snippet and "20,000 hours" in read.snippet
    assert await source.search("SELECT title FROM runbooks WHERE id = 99") == []
    with pytest.raises(SearchError) as failed:  # words are no SQL
        await source.search("heat pump defrost")
    assert str(failed.value).startswith(
        'alchemy: the tool failed: Error: (sqlite3.OperationalError) near "heat": syntax error'
    )
    assert [c["query"] for c in calls(tmp_path)] == [
        "SELECT title, steps FROM runbooks WHERE id = 2",
        "SELECT title FROM runbooks WHERE id = 99",
        "heat pump defrost",
    ]
    assert runbooks(tmp_path) == RUNBOOKS


async def test_with_read_only_duckdb_rows_are_one_source_each(world: Open, tmp_path: Path) -> None:
    """mcp-server-duckdb answers ``str(rows)``: a Python list of tuples, ``[]`` when empty."""
    source = await world("duckdb", tool="query", statements="read-only")
    rows = await source.search("SELECT id, title, steps FROM runbooks ORDER BY id")
    assert [r.title for r in rows] == ["Deploy runbook", "Pump 4 overhaul", "Valve audit"]
    assert rows[1].snippet == (
        "2 | Pump 4 overhaul | Bearings are replaced after 20,000 hours of running."
    )
    assert await source.search("SELECT title FROM runbooks WHERE id = 99") == []  # "[]"
    with pytest.raises(SearchError, match='Database error: near "heat": syntax error'):
        await source.search("heat pump defrost")
    assert runbooks(tmp_path) == RUNBOOKS


def test_a_code_runner_is_refused_even_with_read_only() -> None:
    runner = described(
        "execute_command",
        "Execute a terminal command with timeout.",
        {"command": STRING},
        ["command"],
    )
    with pytest.raises(ToolProblem, match=r"runs shell commands or code .*never sends"):
        resolve_tool([runner], "execute_command", None, statements="read-only")


def test_a_tool_annotated_read_only_is_preferred_and_writers_are_not_chosen() -> None:
    tools = [
        described("search_pages", "Search the wiki.", {"query": STRING}, ["query"]),
        described(
            "search_notes",
            "Search the notes.",
            {"query": STRING},
            ["query"],
            {"read_only_hint": True},
        ),
        described("create_note", "Create a note from a query.", {"query": STRING}, ["query"]),
        described("notes_index", "Adds a search entry.", {"q": STRING}, ["q"]),
    ]
    assert resolve_tool(tools, None, None).name == "search_notes"
    with pytest.raises(ToolProblem, match=r"2 tools could take the query \(search_pages, "):
        resolve_tool([tools[0], tools[0]], None, None)
    with pytest.raises(ToolProblem, match="no tool takes a search query"):
        resolve_tool(tools[2:], None, None)


async def test_error_texts_are_failed_calls_and_rows_are_sources(
    world: Open, tmp_path: Path
) -> None:
    """What servers answer in plain text, recognised by what it says: ``Error executing
    query: ...`` (postgres MCP servers' wording), a Python traceback longer than any short
    answer, ``[]``; and a JSON list of rows or a Python list of tuples, one source a row."""
    source = await world("rows")
    assert source.tool == "search_records"
    with pytest.raises(SearchError) as failed:
        await source.search("failing")
    assert str(failed.value) == (
        'rows: the tool failed: Error executing query: relation "records" does not exist'
    )
    with pytest.raises(SearchError) as failed:
        await source.search("traceback")
    assert str(failed.value) == (
        'rows: the tool failed: psycopg.errors.UndefinedTable: relation "records" does not exist'
    )
    assert await source.search("empty") == []
    rows = await source.search("pump records")
    assert [(r.title, r.snippet) for r in rows] == [
        ("Pump 4 overhaul", "id: 1; title: Pump 4 overhaul; notes: Bearings replaced."),
        ("Valve audit", "id: 2; title: Valve audit; notes: Valve upstream of pump 4 leaks."),
    ]
    (row,) = await source.search("pump tuples")
    assert row.title == "Pump 4 overhaul" and "20,000 hours" in row.snippet


async def test_a_search_server_that_may_be_blocked_says_so(world: Open) -> None:
    """duckduckgo-mcp-server 0.7.0: its ``search`` is chosen by itself (not ``fetch_content``,
    which takes an address, nor ``expand_link``); "No results were found ... This could be due
    to DuckDuckGo's bot detection ..." is no source, and its words are kept for the note; "An
    error occurred while searching: ..." is a failed call."""
    source = await world("ddg")
    assert source.tool == "search"
    with pytest.raises(NothingFound) as nothing:
        await source.search("heat pumps blocked")
    assert str(nothing.value.reason).startswith(
        "No results were found for your search query. This could be due to DuckDuckGo's bot "
        "detection"
    )
    with pytest.raises(SearchError) as failed:
        await source.search("boom")
    assert str(failed.value) == (
        "ddg: the tool failed: An error occurred while searching: Client error '403 Forbidden'"
    )
    (found,) = await source.search("heat pumps")
    assert "COP of 2.6" in found.snippet


def test_fathom_sources_test_shows_what_a_blocked_server_said(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "mcp.json"
    entry = {
        "command": sys.executable,
        "args": [str(WORLD)],
        "env": {"WORLD_MODE": "ddg"},
        "fathom": {"channels": ["cli"]},
    }
    config.write_text(json.dumps({"mcpServers": {"ddg": entry}}))
    env = {**cli_env, "FATHOM_MCP_CONFIG": str(config), "FATHOM_SEARCH": "searxng"}
    env["SEARXNG_URL"] = "http://127.0.0.1:9"  # (the web fails: only the server matters here)
    answer = fathom("sources", "test", "blocked heat pumps", "--json", env=env, cwd=tmp_path)
    (ddg,) = [a for a in json.loads(answer.stdout)["sources"] if a["name"] == "ddg"]
    assert ddg["error"] is None and ddg["results"] == []
    assert "DuckDuckGo's bot detection" in ddg["note"]
