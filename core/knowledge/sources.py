"""Every MCP server of ``FATHOM_MCP_CONFIG``: which a thread may use, their state, and their
sessions' lifetime (started with the runtime, closed with it)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.knowledge.client import McpSource, State
from core.knowledge.config import KnowledgeConfig, Transport, load_knowledge_config
from core.knowledge.scope import channel_allows

if TYPE_CHECKING:
    from core.metrics import Metrics
    from core.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerStatus:
    """One server as ``fathom sources`` and ``/readyz`` show it (no secret in it)."""

    name: str
    #: None for an entry of the file that could not be read as a server.
    transport: Transport | None
    tool: str | None
    channels: tuple[str, ...]
    state: State
    problem: str | None
    connect_seconds: float | None
    #: The entry with env and header values masked (``ServerSpec.masked``).
    config: dict[str, Any] = field(default_factory=dict)


class Knowledge:
    """The MCP servers of a configuration: ``sources`` can be searched, ``problems`` (server
    name -> one line naming it) are the entries that could not be used."""

    def __init__(
        self,
        config: KnowledgeConfig,
        *,
        timeout: float = 20.0,
        page_tokens: int = 1500,
        metrics: Metrics | None = None,
        **options: Any,
    ) -> None:
        """``options`` go to every :class:`McpSource` (``initial_backoff``, ...)."""
        self.sources = [
            McpSource(spec, timeout=timeout, page_tokens=page_tokens, metrics=metrics, **options)
            for spec in config.servers
        ]
        self.problems = dict(config.problems)
        self._logged = False

    @classmethod
    def from_settings(cls, settings: Settings, metrics: Metrics | None = None) -> Knowledge | None:
        """The servers of ``FATHOM_MCP_CONFIG`` (None when it is not set); ConfigError (one
        line) for a file that cannot be used."""
        if not settings.mcp_config:
            return None
        return cls(
            load_knowledge_config(settings.mcp_config),
            timeout=settings.mcp_timeout,
            page_tokens=settings.page_tokens,
            metrics=metrics,
        )

    def allowed(self, thread_key: str) -> list[McpSource]:
        """The servers a run in ``thread_key`` may use, by configuration (whatever their
        state)."""
        return [s for s in self.sources if channel_allows(s.spec.channels, thread_key)]

    def start(self) -> None:
        """Begin connecting every server in the background (needs a running event loop);
        each entry that cannot be used is logged once, as one line naming it."""
        if not self._logged:
            self._logged = True
            for problem in self.problems.values():
                log.warning("%s; it is not used", problem)
        for source in self.sources:
            source.start()

    async def wait_started(self) -> None:
        """Wait until every server started is up or has failed."""
        await asyncio.gather(*(source.wait_started() for source in self.sources))

    def status(self) -> list[ServerStatus]:
        """Every server of the file, in its order of sources then problems."""
        statuses = [
            ServerStatus(
                name=source.name,
                transport=source.transport,
                tool=source.tool,
                channels=source.spec.channels,
                state=source.state,
                problem=source.problem,
                connect_seconds=source.connect_seconds,
                config=source.spec.masked(),
            )
            for source in self.sources
        ]
        statuses.extend(
            ServerStatus(
                name=name,
                transport=None,
                tool=None,
                channels=(),
                state="down",
                problem=problem.removeprefix(f"MCP server {name!r}: "),
                connect_seconds=None,
            )
            for name, problem in self.problems.items()
        )
        return statuses

    async def aclose(self) -> None:
        """Close every session (stdio servers are stopped)."""
        await asyncio.gather(*(source.aclose() for source in self.sources))
