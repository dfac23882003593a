"""MCP servers that behave as the real ones do, written with the SDK's server side and run as a
stdio subprocess (``python tests/fakes/world_mcp.py``); ``WORLD_MODE`` picks which:

- ``time``: mcp-server-time's tools, ``get_current_time(timezone)`` and
  ``convert_time(source_timezone, time, target_timezone)``: nothing to search;
- ``fetch``: mcp-server-fetch's ``fetch(url, max_length)``, its ``url`` a ``format: uri``
  string; each call is appended to ``WORLD_CALLS``;
- ``sqlite``: mcp-server-sqlite's tools (``read_query(query)``, ``write_query(query)``,
  ``create_table(query)``, ``list_tables()``, ``describe_table(table_name)``), whose errors are
  plain text ("Database error: ...", not ``isError``);
- ``notes``: basic-memory's shape: ``search_notes(query, project, output_format)`` (read only;
  ``project`` required; "No results found for ..." in text, several documents in JSON) beside
  ``delete_note(identifier)`` (destructive) and ``write_note(title, content)`` (not read only);
- ``errors``: ``search(query)`` that answers an error as text ("Error: ...") or as a JSON body
  with an ``error`` and no results, by the query;
- ``dies``: writes a line to stderr and exits before it speaks MCP (a git server pointed at a
  folder that is no repository);
- ``duckdb``: mcp-server-duckdb 1.1.0's one tool, ``query(query)`` ("Execute a query on the
  DuckDB database"; its parameter "SQL query to execute"), which runs whatever it is sent on
  the database at ``WORLD_DB`` (SQLite here) and answers ``str(rows)`` (``[]`` when there are
  none), ``Database error: ...`` or ``Error: ...``, as its ``handle_call_tool`` does;
- ``alchemy``: mcp-alchemy 2026.10.15's tools (``all_table_names()``,
  ``filter_table_names(q)``, ``schema_definitions(table_names)``, ``execute_query(query,
  params)``, "Execute a SQL query and return results in a readable format. ..."), on the
  database at ``WORLD_DB``: its ``N. row`` / ``column: value`` text, ``No rows returned``,
  ``Success: N rows affected`` and ``Error: (sqlite3.OperationalError) ...`` with SQLAlchemy's
  ``[SQL: ...]`` and background link;
- ``ddg``: duckduckgo-mcp-server 0.7.0's tools (``search(query, max_results, region)``,
  ``fetch_content(url, ...)``, ``expand_link(token)``): its "Found N search results" text,
  its "No results were found ... DuckDuckGo's bot detection ..." answer (a query with
  "blocked"), and "An error occurred while searching: ..." (a query with "boom");
- ``rows``: ``search_records(query)``, a read-only search tool answering what other servers
  do, by the query: a JSON list of rows (``rows``), a Python list of tuples (``tuples``), an
  empty list (``empty``), ``Error executing query: ...`` (``failing``), a Python traceback
  longer than any short answer (``traceback``).

Each call is appended to ``WORLD_CALLS`` (when set).
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import AnyUrl, Field

MODE = os.environ.get("WORLD_MODE", "time")
server = MCPServer(f"world-{MODE}")
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False)


def record(call: dict[str, object]) -> None:
    path = os.environ.get("WORLD_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(call) + "\n")


if MODE == "time":

    @server.tool(annotations=READ_ONLY)
    async def get_current_time(timezone: str) -> str:
        """Get current time in a specific timezone."""
        return json.dumps({"timezone": timezone, "datetime": "2026-12-05T06:00:00+00:00"})

    @server.tool(annotations=READ_ONLY)
    async def convert_time(source_timezone: str, time: str, target_timezone: str) -> str:
        """Convert time between timezones."""
        return json.dumps({"source": {"timezone": source_timezone, "datetime": time}})


if MODE == "fetch":

    @server.tool(annotations=READ_ONLY)
    async def fetch(
        url: Annotated[AnyUrl, Field(description="URL to fetch")],
        max_length: int = 5000,
    ) -> str:
        """Fetches a URL from the internet and extracts its contents as markdown."""
        record({"tool": "fetch", "url": str(url)})
        return f"Contents of {url}:\nA page about heat pumps."


if MODE == "sqlite":

    @server.tool()
    async def read_query(query: str) -> str:
        """Execute a SELECT query on the SQLite database."""
        record({"tool": "read_query", "query": query})
        return 'Database error: near "heat": syntax error'

    @server.tool()
    async def write_query(query: str) -> str:
        """Execute an INSERT, UPDATE, or DELETE query on the SQLite database."""
        record({"tool": "write_query", "query": query})
        return "Database error: write refused"

    @server.tool()
    async def create_table(query: str) -> str:
        """Create a new table in the SQLite database."""
        return "Database error: table exists"

    @server.tool()
    async def list_tables() -> str:
        """List all tables in the SQLite database."""
        return "[]"

    @server.tool()
    async def describe_table(table_name: str) -> str:
        """Get the schema information for a specific table."""
        return "[]"


if MODE == "notes":

    @server.tool(annotations=READ_ONLY)
    async def search_notes(
        query: str, project: str, output_format: Literal["text", "json"] = "text"
    ) -> str:
        """Search across all content in the knowledge base."""
        record(
            {"tool": "search_notes", "query": query, "project": project, "format": output_format}
        )
        if "nothing" in query:
            return f"No results found for '{query}' in project '{project}'."
        notes = [
            {
                "title": "Heat pump field trial",
                "permalink": "memory://trials/heat-pump-field-trial",
                "content": "The field trial found heat pumps kept a COP of 2.6 at minus 20 C.",
            },
            {
                "title": "Defrost settings",
                "permalink": "memory://manuals/defrost-settings",
                "content": "The defrost interval of the XR-7 is chosen with jumper J4.",
            },
        ]
        if output_format == "json":
            return json.dumps({"results": notes, "current_page": 1, "page_size": 10})
        return "\n".join(f"- {n['title']}: {n['content']}" for n in notes)

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False))
    async def delete_note(identifier: str) -> str:
        """Delete a note by title or permalink."""
        record({"tool": "delete_note", "identifier": identifier})
        return "deleted"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False))
    async def write_note(title: str, content: str) -> str:
        """Create or update a note."""
        record({"tool": "write_note", "title": title})
        return "written"


if MODE == "errors":

    @server.tool(annotations=READ_ONLY)
    async def search(query: str) -> str:
        """Search the team's index."""
        if "json" in query:
            return json.dumps({"error": "rate limited, try again later", "results": []})
        return "Error: the search index is not built yet"


def database() -> sqlite3.Connection:
    """The team's database (``WORLD_DB``), in autocommit: a statement runs as it is sent."""
    return sqlite3.connect(os.environ["WORLD_DB"], isolation_level=None)


if MODE == "duckdb":

    @server.tool(name="query", description="Execute a query on the DuckDB database")
    def duckdb_query(query: Annotated[str, Field(description="SQL query to execute")]) -> str:
        record({"tool": "query", "query": query})
        try:
            with database() as connection:
                rows = connection.execute(query).fetchall()
            return str(rows)
        except sqlite3.Error as e:
            return f"Database error: {e}"
        except Exception as e:
            return f"Error: {e}"


if MODE == "alchemy":
    INFO = "Connected to sqlite version 3.40 database team."

    @server.tool(description=f"Return all table names in the database separated by comma. {INFO}")
    def all_table_names() -> str:
        with database() as connection:
            names = connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
            return ", ".join(name for (name,) in names)

    @server.tool(
        description="Return all table names in the database containing the substring 'q' "
        f"separated by comma. {INFO}"
    )
    def filter_table_names(q: str) -> str:
        record({"tool": "filter_table_names", "q": q})
        return ", ".join(name for name in all_table_names().split(", ") if q in name)

    @server.tool(
        description=f"Returns schema and relation information for the given tables. {INFO}"
    )
    def schema_definitions(table_names: list[str]) -> str:
        return "\n".join(f"{name}:" for name in table_names)

    @server.tool(
        description="Execute a SQL query and return results in a readable format. Results "
        "will be truncated after 4000 characters. IMPORTANT: You MUST use the params parameter "
        "for query parameter substitution (e.g. 'WHERE id = :id' with params={'id': 123}) to "
        f"prevent SQL injection. Direct string concatenation is a serious security risk. {INFO}"
    )
    def execute_query(query: str, params: dict[str, Any] | None = None) -> str:
        record({"tool": "execute_query", "query": query})
        try:
            with database() as connection:
                cursor = connection.execute(query, params or {})
                if cursor.description is None:
                    return f"Success: {cursor.rowcount} rows affected"
                columns = [column[0] for column in cursor.description]
                rows = cursor.fetchall()
        except sqlite3.Error as e:
            return (
                f"Error: (sqlite3.{type(e).__name__}) {e}\n[SQL: {query}]\n"
                "(Background on this error at: https://sqlalche.me/e/20/e3q8)"
            )
        if not rows:
            return "No rows returned"
        lines: list[str] = []
        for i, row in enumerate(rows, 1):
            lines += [f"{i}. row", *(f"{c}: {v}" for c, v in zip(columns, row, strict=True)), ""]
        return "\n".join([*lines, f"Result: {len(rows)} rows"])


if MODE == "ddg":

    @server.tool()
    async def search(query: str, max_results: int = 10, region: str = "") -> str:
        """Search the web using DuckDuckGo. Returns a list of results with titles, URLs, and
        snippets. Use this to find current information, research topics, or locate specific
        websites. For best results, use specific and descriptive search queries."""
        record({"tool": "search", "query": query})
        if "boom" in query:
            return "An error occurred while searching: Client error '403 Forbidden'"
        if "blocked" in query:
            return (
                "No results were found for your search query. This could be due to "
                "DuckDuckGo's bot detection or the query returned no matches. Please try "
                "rephrasing your search or try again in a few minutes. If this persists, "
                "DuckDuckGo may be blocking this server's TLS fingerprint; installing the "
                "optional browser backend (pip install 'duckduckgo-mcp-server[browser]') "
                "enables Chrome TLS impersonation, which typically resolves it."
            )
        return (
            "Found 1 search results:\n\n1. Heat pumps in cold climates\n"
            "   URL: https://energy.example/heat-pumps\n"
            "   Summary: Heat pumps kept a COP of 2.6 at minus 20 C in the field trial.\n"
        )

    @server.tool()
    async def fetch_content(url: str, start_index: int = 0, max_length: int = 8000) -> str:
        """Fetch and extract the main text content from a webpage. Strips out navigation,
        headers, footers, scripts, and styles to return clean readable text."""
        record({"tool": "fetch_content", "url": url})
        return "a page"

    @server.tool()
    async def expand_link(token: str) -> str:
        """Expand a shortened ref://<id> link token from search results back into the full
        URL."""
        return "https://energy.example/heat-pumps"


if MODE == "rows":

    @server.tool(annotations=READ_ONLY)
    async def search_records(query: str) -> str:
        """Search the team's records."""
        record({"tool": "search_records", "query": query})
        if "failing" in query:
            return 'Error executing query: relation "records" does not exist'
        if "traceback" in query:
            frames = "".join(
                f'  File "/srv/records/server{i}.py", line {i}, in handler\n    run(query)\n'
                for i in range(60)
            )
            return (
                f"Traceback (most recent call last):\n{frames}"
                'psycopg.errors.UndefinedTable: relation "records" does not exist'
            )
        if "empty" in query:
            return "[]"
        if "tuples" in query:
            return str([(1, "Pump 4 overhaul", "Bearings replaced after 20,000 hours.")])
        return json.dumps(
            [
                {"id": 1, "title": "Pump 4 overhaul", "notes": "Bearings replaced."},
                {"id": 2, "title": "Valve audit", "notes": "Valve upstream of pump 4 leaks."},
            ]
        )


if __name__ == "__main__":
    if MODE == "dies":
        print("fatal: not a git repository: /srv/repos/handbook", file=sys.stderr, flush=True)
        sys.exit(128)
    server.run("stdio")
