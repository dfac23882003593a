"""One MCP server as a search provider: its session, kept up for the whole process.

The SDK's ``Client`` is an async context manager over anyio task groups, so it must be
entered and left by one task: each session has an *owner* task that connects (spawns the stdio
server or reaches the Streamable HTTP one), resolves the tool (:mod:`core.knowledge.tools`),
publishes the session, then waits until it is told to leave (closing, or the connection
broke) and leaves the context, which stops a stdio server and its process group. Searches,
from any task of the same event loop, share the published session, each bounded by
``FATHOM_MCP_TIMEOUT`` (waiting for a session that is still connecting included).

A timeout keeps the session (the SDK cancels the request on the server). A dead connection
(the stdio server exited, the HTTP server went away) marks the session broken: it is torn
down and the next search after a backoff (1 s, doubling to 60 s; reset by a successful call)
connects again; within the backoff a search fails at once. A tool error, a protocol error or
an answer that does not fit is a :class:`~core.search.base.SearchError` naming the server and
the session is kept. An answer that found nothing but says why that may be ("you may be
blocked") is :class:`~core.search.base.NothingFound`, for the run's notes. Nothing else ever
escapes :meth:`McpSource.search`.

A stdio server's environment is the SDK's minimal base (HOME, LOGNAME, PATH, SHELL, TERM,
USER), the locale (LANG, LC_ALL, LC_CTYPE) and the configured ``env``: none of Fathom's own
variables. Its stderr goes to the log line by line (logger ``core.knowledge.stderr``). Env and
header values are never logged.

The SDK is imported only when a session first connects, in a worker thread (about 0.85 s of
imports that would otherwise stall the event loop).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, Literal, TextIO

import anyio
from pydantic import ValidationError

from core.knowledge.config import ServerSpec, Transport
from core.knowledge.results import error_reason, short_text, text_answer, tool_results
from core.knowledge.statements import statement_refusal
from core.knowledge.tools import ToolProblem, looks_like_address, resolve_tool
from core.models import SearchResult
from core.search.base import NothingFound, SearchError, SearchTimeout
from core.text import clean_text
from core.words.reasons import Reason

if TYPE_CHECKING:
    from mcp import Client

    from core.metrics import Metrics

log = logging.getLogger(__name__)
#: A stdio server's stderr, one record a line (``<server>: <line>``).
stderr_log = logging.getLogger("core.knowledge.stderr")

State = Literal["starting", "up", "down"]
#: Fathom's variables a stdio server also gets, when they are set (besides the SDK's base).
LOCALE_VARIABLES = ("LANG", "LC_ALL", "LC_CTYPE")
INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 60.0
#: How long connecting (spawning a server, the handshake, listing its tools) may take at least.
CONNECT_TIMEOUT = 60.0
#: How long closing may wait for a session to end before its owner is cancelled.
CLOSE_TIMEOUT = 10.0
#: At most this much of one stderr line is logged.
MAX_STDERR_LINE = 2000
#: How long a stdio server that died at start is given to have its last stderr line read.
LAST_WORDS_WAIT = 1.0
#: At most this many pages of ``tools/list`` are read.
MAX_TOOL_PAGES = 20
_SDK_MODULE = "mcp.client.client"
#: ``mcp_types.CONNECTION_CLOSED``: the JSON-RPC code of a dead connection.
_CONNECTION_CLOSED = -32000
_CLIENT_NAME = "fathom"
NOT_CONNECTED = Reason("not connected", "未连接")


async def import_sdk() -> None:
    """Import the SDK's client (once per process) in a worker thread, off the event loop."""
    if _SDK_MODULE not in sys.modules:
        await asyncio.to_thread(importlib.import_module, _SDK_MODULE)


def child_environment(spec: ServerSpec) -> dict[str, str]:
    """What a stdio server's environment adds to the SDK's base: the locale and its ``env``."""
    env = {name: os.environ[name] for name in LOCALE_VARIABLES if os.environ.get(name)}
    env.update(spec.env)
    return env


class _Session:
    """One connection of a server, from connecting until its owner task has left it."""

    def __init__(self) -> None:
        #: Set once the session is up, or connecting failed.
        self.ready = asyncio.Event()
        #: Tells the owner to leave the session (closing, or it broke).
        self.closing = asyncio.Event()
        self.client: Client | None = None
        self.broken = False


class McpSource:
    """An MCP server searched like a web provider (:class:`core.search.SearchProvider`).

    ``start()`` begins connecting in the background; a search before it is up waits for it
    within the timeout, and a search of a source never started connects it. One event loop:
    a source is used and closed (``aclose()``) in the loop that connected it.
    """

    def __init__(
        self,
        spec: ServerSpec,
        *,
        timeout: float = 20.0,
        page_tokens: int = 1500,
        metrics: Metrics | None = None,
        connect_timeout: float | None = None,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.timeout = timeout
        self.page_tokens = page_tokens
        self.metrics = metrics
        self.connect_timeout = (
            max(timeout, CONNECT_TIMEOUT) if connect_timeout is None else connect_timeout
        )
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._clock = clock
        #: "starting" while connecting, "up" with a session, "down" otherwise (not started
        #: yet, closed, or failed: then ``problem`` says why).
        self.state: State = "down"
        self.problem: str | None = None
        #: The tool called with each query (the configured one, or resolved at connect).
        self.tool: str | None = spec.tool
        #: How long the last successful connect took (from ``start()``, the SDK's import
        #: included).
        self.connect_seconds: float | None = None
        self._argument: str | None = spec.argument
        self._arguments: dict[str, Any] = dict(spec.arguments)
        self._takes_address = False
        self._reads_only = False
        self._stderr: _StderrPump | None = None
        self._output_schema: Any = None
        self._session: _Session | None = None
        self._owners: set[asyncio.Task[None]] = set()
        self._failures = 0
        self._retry_at = -math.inf
        self._permanent = False
        self._closed = False

    @property
    def transport(self) -> Transport:
        return self.spec.transport

    # --- the session --------------------------------------------------------------------

    def start(self) -> None:
        """Begin connecting in the background, unless connected, connecting, closed or
        waiting out a backoff (needs a running event loop)."""
        if self._closed or self._permanent or self._session is not None:
            return
        if self._clock() < self._retry_at:
            return
        self._open()

    async def wait_started(self) -> None:
        """Wait until the current connection attempt is up or has failed."""
        session = self._session
        if session is not None:
            await session.ready.wait()

    def _open(self) -> _Session:
        session = _Session()
        self._session = session
        self.state = "starting"
        task = asyncio.get_running_loop().create_task(
            self._own(session), name=f"mcp-session:{self.name}"
        )
        self._owners.add(task)
        task.add_done_callback(self._owners.discard)
        return session

    async def _own(self, session: _Session) -> None:
        """The owner task of ``session``: connect, publish, wait, leave."""
        began = time.perf_counter()
        try:
            await import_sdk()
            with anyio.CancelScope() as connecting:
                connecting.deadline = anyio.current_time() + self.connect_timeout
                async with AsyncExitStack() as stack:
                    client = await self._connect(stack)
                    choice = resolve_tool(
                        await _list_tools(client),
                        self.spec.tool,
                        self.spec.argument,
                        self.spec.arguments,
                        self.spec.statements,
                    )
                    connecting.deadline = math.inf
                    if session.closing.is_set():
                        return
                    self.tool, self._argument = choice.name, choice.argument
                    self._output_schema = choice.output_schema
                    self._arguments = dict(choice.arguments)
                    self._takes_address = choice.takes_address
                    self._reads_only = choice.reads_only
                    self.connect_seconds = time.perf_counter() - began
                    self.state, self.problem = "up", None
                    session.client = client
                    session.ready.set()
                    log.info(
                        "MCP server %r is up (%s, tool %s, %.2f s)",
                        self.name,
                        self.transport,
                        self.tool,
                        self.connect_seconds,
                    )
                    await session.closing.wait()
            if connecting.cancelled_caught and session.client is None:
                self._failed(session, f"did not start in {self.connect_timeout:g} s")
        except ToolProblem as problem:
            self._failed(session, str(problem), permanent=True)
        except Exception as exc:
            unusable = _tool_problem(exc)
            if unusable is not None and session.client is None:
                self._failed(session, str(unusable), permanent=True)
            elif session.client is None:
                said = await self._last_words()
                self._failed(session, f"cannot start: {_describe(exc)}{said}")
            else:
                self._broken(session, f"connection lost: {_describe(exc)}")
        finally:
            session.client = None
            session.ready.set()

    async def _connect(self, stack: AsyncExitStack) -> Client:
        """Enter a connected SDK client on ``stack`` (left when the stack closes)."""
        from mcp import Client
        from mcp_types import Implementation

        info = Implementation(name=_CLIENT_NAME, version=_version())
        spec = self.spec
        if spec.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = await stack.enter_async_context(
                create_mcp_http_client(headers=dict(spec.headers) or None)
            )
            transport: Any = streamable_http_client(spec.url, http_client=http)
            return await stack.enter_async_context(Client(transport, client_info=info, cache=None))
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert spec.command is not None
        params = StdioServerParameters(
            command=spec.command,
            args=list(spec.args),
            env=child_environment(spec),
            cwd=spec.cwd,
        )
        stderr = _StderrPump(self.name)
        self._stderr = stderr
        stack.callback(stderr.release)  # (left last: after the server has stopped)
        client = await stack.enter_async_context(
            Client(stdio_client(params, errlog=stderr.file), client_info=info, cache=None)
        )
        stderr.release()  # the server holds its own copy now
        return client

    async def _last_words(self) -> str:
        """``; its last words: <line>``: the last line a stdio server that died at start
        wrote to stderr (waited for briefly: the pump reads it on its own thread), or ''."""
        pump = self._stderr
        if pump is None:
            return ""
        await asyncio.to_thread(pump.wait, LAST_WORDS_WAIT)
        line = pump.last_line
        return f"; its last words: {short_text(line)}" if line else ""

    def _down(self, problem: str | None) -> Reason:
        """Why the server cannot be asked: ``problem`` is the operator's words (a
        configuration that names no usable tool, the server's last words), as they are."""
        return Reason(f"{self.name}: {problem}", f"{self.name}：服务器不可用（{problem}）")

    def _failed(self, session: _Session, problem: str, *, permanent: bool = False) -> None:
        """Connecting ``session`` failed: the server is down until a later search retries
        (after a backoff), or for good when no tool can be called."""
        if session is self._session:
            self._session = None
        if self._closed:
            return
        self._permanent = self._permanent or permanent
        self.state, self.problem = "down", problem
        delay = self._backoff()
        if permanent:
            log.warning("MCP server %r is down: %s", self.name, problem)
        else:
            log.warning(
                "MCP server %r is down: %s (trying again on a later search, after %g s)",
                self.name,
                problem,
                delay,
            )

    def _broken(self, session: _Session, problem: str) -> None:
        """The connection of ``session`` is dead: tear it down; a later search reconnects."""
        if session.broken:
            return
        session.broken = True
        session.closing.set()
        if session is not self._session or self._closed:
            return
        self._session = None
        self.state, self.problem = "down", problem
        delay = self._backoff()
        log.warning(
            "MCP server %r is down: %s (restarting it on a later search, after %g s)",
            self.name,
            problem,
            delay,
        )

    def _backoff(self) -> float:
        self._failures += 1
        delay = min(self.initial_backoff * 2.0 ** (self._failures - 1), self.max_backoff)
        self._retry_at = self._clock() + delay
        return delay

    async def _up(self) -> _Session:
        """The published session, connecting it when it is down and the backoff is over."""
        if self._closed:
            raise SearchError(Reason("closed", "已关闭").prefixed(self.name))
        session = self._session
        if session is None:
            if self._permanent:
                raise SearchError(self._down(self.problem))
            wait = self._retry_at - self._clock()
            if wait > 0:
                seconds = math.ceil(wait)
                raise SearchError(
                    Reason(
                        f"the server is restarting (next try in {seconds} s; {self.problem})",
                        f"服务器正在重启（{seconds} 秒后再试；{self.problem}）",
                    ).prefixed(self.name)
                )
            session = self._open()
        await session.ready.wait()
        if session.client is None:
            raise SearchError(
                self._down(self.problem) if self.problem else NOT_CONNECTED.prefixed(self.name)
            )
        return session

    # --- searching -----------------------------------------------------------------------

    async def search(self, query: str) -> list[SearchResult]:
        """The server's results for ``query`` (every one with ``server`` set to its name);
        NothingFound when it found nothing and said why that may be, SearchTimeout after the
        timeout, SearchError for anything else that goes wrong."""
        try:
            results = await self._search(query)
        except NothingFound:
            self._count("ok")
            raise
        except SearchTimeout:
            self._count("timeout")
            raise
        except SearchError:
            self._count("error")
            raise
        self._count("ok")
        return results

    async def _search(self, query: str) -> list[SearchResult]:
        session: _Session | None = None
        result: Any = None
        with anyio.move_on_after(self.timeout) as timer:
            try:
                session = await self._up()
                assert session.client is not None and self.tool and self._argument
                if self._takes_address and looks_like_address(query):
                    raise SearchError(
                        Reason(
                            "the query looks like an address, and the tool's "
                            f"{self._argument!r} takes one: it is never sent there",
                            f"查询看起来像一个网址，而工具的 {self._argument!r} 参数接受网址："
                            "查询从不发送到那里",
                        ).prefixed(self.name)
                    )
                if self._reads_only:
                    refused = statement_refusal(query)
                    if refused is not None:
                        raise SearchError(_statement_refused(refused).prefixed(self.name))
                call = {**self._arguments, self._argument: query}
                result = await session.client.call_tool(self.tool, call)
            except SearchError:
                raise
            except Exception as exc:
                raise self._call_failed(session, exc) from None
        if timer.cancelled_caught:
            raise SearchTimeout(
                Reason(
                    f"no answer in {self.timeout:g} s", f"{self.timeout:g} 秒内没有响应"
                ).prefixed(self.name)
            )
        if getattr(result, "is_error", False):
            reason = error_reason(result)
            raise SearchError(_tool_failed(reason).prefixed(self.name))
        answer = text_answer(result)
        if answer is not None and answer.error:
            raise SearchError(_tool_failed(answer.reason).prefixed(self.name))
        self._failures = 0
        if answer is not None and answer.noted:  # "No results ... you may be blocked"
            raise NothingFound(Reason.verbatim(answer.reason))
        if answer is not None:  # "No results found for ...", "[]"
            return []
        try:
            return await asyncio.to_thread(
                tool_results,
                result,
                server=self.name,
                query=query,
                limit=self.spec.results,
                budget_tokens=self.page_tokens,
                output_schema=self._output_schema,
            )
        except Exception as exc:  # (a bug here must not look like anything but a failed search)
            log.exception("MCP server %r: its answer could not be read", self.name)
            raise SearchError(
                Reason("its answer could not be read", "无法读取其回答").prefixed(self.name)
            ) from exc

    def _call_failed(self, session: _Session | None, exc: Exception) -> SearchError:
        """The SearchError for a call that raised ``exc``; a dead connection breaks the
        session (a protocol error or an answer that does not fit keeps it)."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
            said = short_text(exc.message)
            return SearchError(
                Reason(
                    f"the server refused the call ({said})", f"服务器拒绝了调用（{said}）"
                ).prefixed(self.name)
            )
        if isinstance(exc, ValidationError | RuntimeError):
            said = short_text(str(exc))
            return SearchError(
                Reason(f"its answer does not fit ({said})", f"其回答格式不符（{said}）").prefixed(
                    self.name
                )
            )
        problem = _describe(exc)
        if session is not None:
            self._broken(session, f"connection lost: {problem}")
        return SearchError(
            Reason(
                f"connection lost ({problem}); it restarts on a later call",
                f"连接中断（{problem}）；之后的搜索会重新启动它",
            ).prefixed(self.name)
        )

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.mcp_call(self.name, outcome)

    # --- closing -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Leave every session (a stdio server and its process group are stopped)."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            session.closing.set()
        self.state, self.problem = "down", "closed"
        owners = list(self._owners)
        if not owners:
            return
        _, pending = await asyncio.wait(owners, timeout=CLOSE_TIMEOUT)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_TIMEOUT)


async def _list_tools(client: Client) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _tool_failed(said: str | None) -> Reason:
    """The tool answered with an error (``said``: its own words, if any)."""
    if not said:
        return Reason("the tool failed", "工具调用失败")
    return Reason(f"the tool failed: {said}", f"工具调用失败：{said}")


def _statement_refused(why: Reason) -> Reason:
    """A query never sent to a tool that runs statements (``why``: what it holds)."""
    return Reason(
        f"the query was not sent: {why.en}, and the tool runs statements (reads only)",
        f"查询没有发送：{why.zh}，而该工具执行语句（只允许读取）",
    )


def _tool_problem(exc: BaseException) -> ToolProblem | None:
    """The ToolProblem in ``exc`` (the SDK's task group may wrap it in a group), or None."""
    if isinstance(exc, ToolProblem):
        return exc
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _tool_problem(exc.exceptions[0])
    return None


def _describe(exc: BaseException) -> str:
    """An exception on one line, inert (a transport's message may quote the server)."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    if getattr(exc, "code", None) == _CONNECTION_CLOSED and type(exc).__name__ == "MCPError":
        return "the server closed the connection"
    message = short_text(str(exc), 160)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _version() -> str:
    try:
        return version("fathom-bot")
    except Exception:
        return "0"


class _StderrPump:
    """A stdio server's stderr: a pipe whose lines a daemon thread logs (``<server>:
    <line>``) until the server and every copy of the pipe's write end are gone."""

    def __init__(self, name: str) -> None:
        read_fd, write_fd = os.pipe()
        self.name = name
        #: The last non-empty line it wrote (what a server that died at start said last).
        self.last_line = ""
        #: What the server's stderr becomes.
        self.file: TextIO = open(write_fd, "w")  # (closed by release())
        self._thread = threading.Thread(
            target=self._pump, args=(read_fd,), name=f"mcp-stderr:{name}", daemon=True
        )
        self._thread.start()

    def release(self) -> None:
        """Close this process's copy of the write end (idempotent)."""
        if not self.file.closed:
            self.file.close()

    def _pump(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            while line := pipe.readline(MAX_STDERR_LINE):
                text = clean_text(line.decode("utf-8", "replace")).strip()
                if text:
                    self.last_line = text
                    stderr_log.info("%s: %s", self.name, text)

    def wait(self, seconds: float) -> None:
        """Wait until every line is read (the pipe's last writer is gone), at most
        ``seconds``."""
        self._thread.join(seconds)
