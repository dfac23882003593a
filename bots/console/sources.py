"""``fathom sources``: the sources research searches here (the web provider and each MCP server
of ``FATHOM_MCP_CONFIG``) with their state, and one query against each source a channel may use.

Nothing here writes to the database or starts a run. What is shown of a server's configuration
is what ``core.knowledge`` shows (env and header values masked); its results are shown as the
research sees them (titles and snippets already neutralised).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from core.chat.commands import CommandError
from core.config import ConfigError
from core.models import CONSOLE_PLATFORM, SearchResult
from core.settings import Settings

if TYPE_CHECKING:
    from core.search import SearchProvider

#: ``fathom sources test`` asks as the console unless ``--channel`` names another.
CONSOLE_CHANNEL = f"{CONSOLE_PLATFORM}:local:local"
#: How much of a result's snippet ``fathom sources test`` prints.
SNIPPET_CHARS = 160

Kind = Literal["web", "internal"]


class ServerView(Protocol):
    """One MCP server as ``core.knowledge.Knowledge.status()`` describes it."""

    @property
    def name(self) -> str: ...
    @property
    def transport(self) -> str | None: ...
    @property
    def tool(self) -> str | None: ...
    @property
    def channels(self) -> Sequence[str]: ...
    @property
    def state(self) -> str: ...
    @property
    def problem(self) -> str | None: ...
    @property
    def connect_seconds(self) -> float | None: ...
    @property
    def config(self) -> Mapping[str, Any]:
        """The server's configuration with env and header values masked."""
        ...


class KnowledgeView(Protocol):
    """What these commands use of ``core.knowledge.Knowledge``."""

    def start(self) -> None: ...
    async def wait_started(self) -> None: ...
    def status(self) -> Sequence[ServerView]: ...
    def allowed(self, thread_key: str) -> Sequence[SearchProvider]: ...
    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class SourceRow:
    """One line of ``fathom sources``."""

    name: str
    kind: Kind
    transport: str | None
    tool: str | None
    #: Thread-key prefixes that may use it (a server without any: the console only); None:
    #: every channel (the web).
    channels: tuple[str, ...] | None
    state: str
    problem: str | None = None
    connect_seconds: float | None = None
    config: Mapping[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "transport": self.transport,
            "tool": self.tool,
            "channels": None if self.channels is None else list(self.channels),
            "state": self.state,
            "problem": self.problem,
            "connect_seconds": self.connect_seconds,
            "config": dict(self.config),
        }

    @property
    def channels_text(self) -> str:
        if self.channels is None:
            return "every channel"
        return ", ".join(self.channels) if self.channels else f"{CONSOLE_PLATFORM} (console only)"

    @property
    def detail(self) -> str:
        if self.problem:
            return self.problem
        if self.connect_seconds is not None:
            return f"connected in {self.connect_seconds:.2f} s"
        return ""


def web_row(settings: Settings) -> SourceRow:
    """The web provider (``FATHOM_SEARCH``): configured, or why it cannot search."""
    try:
        settings.require_search()
    except ConfigError as exc:
        return SourceRow(settings.search, "web", "http", None, None, "down", str(exc))
    return SourceRow(settings.search, "web", "http", None, None, "configured")


def server_row(server: ServerView) -> SourceRow:
    return SourceRow(
        name=server.name,
        kind="internal",
        transport=server.transport,
        tool=server.tool,
        channels=tuple(server.channels),
        state=server.state,
        problem=server.problem,
        connect_seconds=server.connect_seconds,
        config=server.config,
    )


async def list_sources(settings: Settings, knowledge: KnowledgeView | None) -> list[SourceRow]:
    """The web provider, then each MCP server once it has tried to connect (so the state is
    ``up`` or ``down`` with its problem, the tool resolved)."""
    rows = [web_row(settings)]
    if knowledge is not None:
        knowledge.start()
        await knowledge.wait_started()
        rows += [server_row(server) for server in knowledge.status()]
    return rows


def channel_key(value: str | None) -> str:
    """The thread key (or a prefix of one) ``--channel`` names: ``cli`` (the default) is the
    console; otherwise ``platform:workspace[:channel[:thread]]``."""
    text = (value or CONSOLE_PLATFORM).strip()
    if text == CONSOLE_PLATFORM:
        return CONSOLE_CHANNEL
    parts = text.split(":")
    if not 2 <= len(parts) <= 4 or not all(p.strip() for p in parts):
        raise CommandError(
            f"--channel {text!r}: name a channel as <platform>:<workspace>[:<channel>"
            "[:<thread>]], e.g. slack:T0001:C0001, or cli for the console"
        )
    return text


@dataclass(frozen=True)
class SourceAnswer:
    """What one source answered to ``fathom sources test`` (its results, or why none)."""

    name: str
    kind: Kind
    results: list[SearchResult]
    error: str | None
    seconds: float
    #: What a source that found nothing said about why (NothingFound), else None.
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "error": self.error,
            "note": self.note,
            "seconds": round(self.seconds, 3),
            "results": [
                {
                    "title": r.title,
                    "url": r.url,
                    "snippet": r.snippet,
                    "published": r.published,
                    "server": r.server,
                }
                for r in self.results
            ],
        }


async def ask(source: SearchProvider, kind: Kind, query: str) -> SourceAnswer:
    """One query to one source; any failure is its one line (the other sources go on)."""
    from core.search import SearchError
    from core.search.base import NothingFound

    started = time.monotonic()
    try:
        results = await source.search(query)
    except NothingFound as exc:
        return SourceAnswer(
            source.name, kind, [], None, time.monotonic() - started, note=str(exc.reason)
        )
    except SearchError as exc:
        error = str(exc) or type(exc).__name__
        return SourceAnswer(source.name, kind, [], error, time.monotonic() - started)
    except Exception as exc:  # a diagnostic command: shown, never a traceback
        error = f"{type(exc).__name__}: {exc}".rstrip(": ")
        return SourceAnswer(source.name, kind, [], error, time.monotonic() - started)
    return SourceAnswer(source.name, kind, list(results), None, time.monotonic() - started)


async def probe_sources(
    settings: Settings, knowledge: KnowledgeView | None, query: str, key: str
) -> list[SourceAnswer]:
    """``query`` against the web provider and each MCP server ``key``'s channel may use, at
    the same time; the answers in that order. The web is searched directly (no cache)."""
    import httpx

    from core.runtime import DeferredTrustContext
    from core.search import build_search_provider

    async with httpx.AsyncClient(
        timeout=settings.search_timeout,
        headers={"User-Agent": "fathom-bot/0.1"},
        follow_redirects=True,
        verify=DeferredTrustContext(),
    ) as http:
        asks = []
        web_problem: str | None = None
        try:
            web = build_search_provider(settings, http)
        except ConfigError as exc:
            web_problem = str(exc)
        else:
            asks.append(ask(web, "web", query))
        if knowledge is not None:
            knowledge.start()
            asks += [ask(server, "internal", query) for server in knowledge.allowed(key)]
        answers = list(await asyncio.gather(*asks))
    if web_problem is not None:
        answers.insert(0, SourceAnswer(settings.search, "web", [], web_problem, 0.0))
    return answers


def answer_lines(answer: SourceAnswer) -> list[str]:
    """``fathom sources test``'s text for one source: a heading line, then each result's
    title, link and the start of its snippet; a failure is its one line."""
    label = f"{answer.name} ({answer.kind})"
    if answer.error is not None:
        return [f"{label}: failed: {answer.error}"]
    count = len(answer.results)
    lines = [f"{label}: {count} result{'' if count == 1 else 's'} in {answer.seconds:.2f} s"]
    if answer.note is not None:
        lines[0] += f" ({answer.note})"
    for n, result in enumerate(answer.results, 1):
        lines.append(f"  {n}. {result.title or '(untitled)'}")
        if result.url:
            lines.append(f"     {result.url}")
        snippet = " ".join(result.snippet.split())
        if snippet:
            cut = snippet if len(snippet) <= SNIPPET_CHARS else snippet[: SNIPPET_CHARS - 1] + "…"
            lines.append(f"     {cut}")
    return lines
