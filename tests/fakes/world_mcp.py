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
  folder that is no repository).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Literal

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


if __name__ == "__main__":
    if MODE == "dies":
        print("fatal: not a git repository: /srv/repos/handbook", file=sys.stderr, flush=True)
        sys.exit(128)
    server.run("stdio")
