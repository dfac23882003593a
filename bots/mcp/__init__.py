"""Fathom's research as an MCP server: the ``research`` tool, over stdio (``fathom mcp``) and
over Streamable HTTP at ``/mcp`` in ``fathom serve`` (docs/mcp.md)."""
