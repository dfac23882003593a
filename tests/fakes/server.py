"""Run an ASGI app on a loopback port in a background thread.

Fakes of external services (LLM, search, Slack, ...) must be real HTTP servers so the real
client libraries are exercised end to end; this helper makes starting one cheap enough to do
per test.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import uvicorn
from starlette.responses import Response
from starlette.types import ASGIApp


def require_loopback(host: str) -> str:
    """Return a numeric loopback address for `host`, refusing anything reachable from outside."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ValueError(f"fake servers only listen on loopback addresses, not {host!r}")


class BackgroundServer:
    """An ASGI app served by uvicorn in a daemon thread; `port=0` picks a free port.

    The socket is bound before the thread starts, so `.url` is known immediately and
    connections queue in the kernel backlog until uvicorn accepts them.
    """

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = require_loopback(host)
        self.port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 5.0) -> Self:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP (not the default 0) makes asyncio set TCP_NODELAY on accepted sockets;
        # with Nagle on, every keep-alive response waited ~40 ms for the client's delayed ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(2048)
        self._sock, self.port = sock, sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name=f"fake:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server on {self.url} did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


#: The bodies of a broken answer (an outage at the platform's edge, a proxy's error page):
#: ``fail_next(..., body=KIND)`` of every fake platform answers one of these instead of the
#: platform's JSON.
BROKEN_BODIES = ("html", "empty", "truncated", "text")


@dataclass(frozen=True)
class Broken:
    """What a fake's request handler returns instead of a JSON payload for a broken body."""

    kind: str


def broken_body(kind: str, status: int) -> Response:
    """An answer with ``status`` whose body is no platform answer: an HTML error page, an
    empty body (typed as JSON, as some gateways do), JSON cut off mid-way, or plain text."""
    if kind == "html":
        page = (
            f"<html><head><title>{status}</title></head><body><h1>Server Error</h1></body></html>"
        )
        return Response(page, status, media_type="text/html")
    if kind == "empty":
        return Response(b"", status, media_type="application/json")
    if kind == "truncated":
        return Response(b'{"ok": false, "error": "inter', status, media_type="application/json")
    if kind == "text":
        return Response(
            "upstream connect error or disconnect/reset", status, media_type="text/plain"
        )
    raise ValueError(f"unknown broken body {kind!r}; one of {BROKEN_BODIES}")
