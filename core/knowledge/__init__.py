"""Team knowledge: MCP servers searched beside the web, scoped to the channels allowed to see
them (``FATHOM_MCP_CONFIG``). Importing this package does not import the MCP SDK (a session
imports it, off the event loop, when it first connects).

- :func:`load_knowledge_config` reads the ``mcpServers`` file (:mod:`.config`);
- :func:`channel_allows` says whether a thread may use a server (:mod:`.scope`);
- :class:`McpSource` is one server as a search provider (:mod:`.client`), its answers mapped
  to results by :mod:`.results` and its tool chosen by :mod:`.tools`;
- :class:`Knowledge` holds them all (:mod:`.sources`).
"""

from core.knowledge.client import McpSource, State
from core.knowledge.config import KnowledgeConfig, ServerSpec, load_knowledge_config
from core.knowledge.scope import channel_allows
from core.knowledge.sources import Knowledge, ServerStatus

__all__ = [
    "Knowledge",
    "KnowledgeConfig",
    "McpSource",
    "ServerSpec",
    "ServerStatus",
    "State",
    "channel_allows",
    "load_knowledge_config",
]
