"""Team knowledge: MCP servers searched beside the web, scoped to the channels allowed to see
them (``FATHOM_MCP_CONFIG``). Importing this package does not import the MCP SDK."""
