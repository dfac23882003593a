"""A team-notes MCP server for the CLI and serve tests, written with the SDK's server side and
run as a stdio subprocess (``python tests/fakes/notes_mcp.py``).

One tool, ``search(query)``, answering two structured results. Every call is appended to the
file ``NOTES_CALLS`` names (when it is set): the query and the names of the variables in the
server's environment, so a test sees whether it was called and what it was given.
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

server = MCPServer("notes")


class Note(BaseModel):
    title: str
    url: str
    text: str


class Notes(BaseModel):
    results: list[Note]


@server.tool()
def search(query: str) -> Notes:
    """Search the team's notes."""
    calls = os.environ.get("NOTES_CALLS")
    if calls:
        with open(calls, "a", encoding="utf-8") as out:
            out.write(json.dumps({"query": query, "env": sorted(os.environ)}) + "\n")
    return Notes(
        results=[
            Note(
                title=f"Runbook: {query}",
                url="https://wiki.example.internal/runbook",
                text=f"The team's runbook on {query}: restart the pump, then check the valve.",
            ),
            Note(title="Design notes", url="notes://design/7", text="Why the valve is upstream."),
        ]
    )


if __name__ == "__main__":
    server.run("stdio")
