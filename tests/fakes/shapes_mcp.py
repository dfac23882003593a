"""An MCP server answering in the other shapes a team server may use, written with the SDK's
server side and run as a stdio subprocess (``python tests/fakes/shapes_mcp.py``).

``SHAPES_MODE`` picks its tools:

- ``resources``: ``lookup(term)`` answers a resource link, an embedded text resource, an
  embedded blob (nothing to read) and a line of plain text;
- ``schema``: ``find(q)`` answers structured content whose results stand under ``hits``,
  the one array property of its output schema;
- ``ambiguous``: ``search(query)`` and ``lookup(term)`` could both take the query;
- ``none``: ``count(n: int)`` only, no tool takes a string.

When ``SHAPES_PID`` is set, the server writes its process id there at start.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp_types import (
    BlobResourceContents,
    ContentBlock,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel

server = MCPServer("shapes")
MODE = os.environ.get("SHAPES_MODE", "resources")

PLAN = (
    "The Q3 plan for pump maintenance: every pump is inspected in July. "
    "Bearings are replaced after 20,000 hours of running. "
    "The valve upstream of pump 4 is replaced in August."
)


class Hit(BaseModel):
    title: str
    uri: str
    snippet: str
    date: str


class Hits(BaseModel):
    hits: list[Hit]
    total: int


if MODE == "resources" or MODE == "ambiguous":

    @server.tool()
    async def lookup(term: str) -> list[ContentBlock]:
        """Look documents up in the team drive."""
        return [
            ResourceLink(
                type="resource_link",
                uri="https://drive.example.internal/d/42",
                name="q3-plan.pdf",
                title="Q3 plan",
                description=f"The Q3 plan, which mentions {term}.",
            ),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="wiki://pages/pump-maintenance", mime_type="text/plain", text=PLAN
                ),
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(
                    uri="drive://scan.png", mime_type="image/png", blob="iVBORw0KGgo="
                ),
            ),
            TextContent(type="text", text=f"Two documents mention {term}."),
        ]


if MODE == "ambiguous":

    @server.tool()
    async def search(query: str) -> str:
        """Search the team's notes."""
        return f"notes on {query}"


if MODE == "schema":

    @server.tool()
    async def find(q: str) -> Hits:
        """Find tickets."""
        return Hits(
            hits=[
                Hit(
                    title=f"INC-7: {q}",
                    uri="https://tickets.example.internal/INC-7",
                    snippet="Pump 4 tripped twice in a week; the valve was replaced.",
                    date="2026-11-20",
                )
            ],
            total=1,
        )


if MODE == "none":

    @server.tool()
    async def count(n: int) -> int:
        """Count to n."""
        return n


if __name__ == "__main__":
    if pid_file := os.environ.get("SHAPES_PID"):
        with open(pid_file, "w", encoding="utf-8") as out:
            out.write(str(os.getpid()))
    server.run("stdio")
