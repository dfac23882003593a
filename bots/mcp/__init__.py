"""Fathom's research as an MCP server: the ``research`` tool, over stdio (``fathom mcp``) and
over Streamable HTTP at ``/mcp`` in ``fathom serve`` (docs/mcp.md).

- ``delivery.py``: the ``mcp`` platform's delivery, a run's progress as rows of
  ``mcp_progress`` whichever process executes it;
- ``follow.py``: a request handler following its run (progress rows, then the result);
- ``server.py``: the MCP server and its ``research`` tool, for a principal;
- ``http.py`` and ``settings.py``: ``/mcp``, its tokens (each a principal) and checks;
- ``bots/cli/mcp_commands.py``: ``fathom mcp``, the server over stdio.
"""
