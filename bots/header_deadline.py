"""A deadline for a request's head: connections that never finish their headers are closed.

uvicorn closes a connection that stays idle *between* requests (``timeout_keep_alive``), but
not one that opens and then sends nothing, or sends part of a request line and stops: each
such connection is held until the client gives up (tens of seconds) or the server stops, so
a few hundred of them hold the server's sockets and memory (slowloris). Nor does its default
parser (httptools) bound the size of a request's head.

:func:`protocol_class` gives ``fathom serve``'s uvicorn (both ports) its HTTP protocol with
two bounds on each request's head, from the connection's opening (or, on a kept-alive
connection, from the next request's first byte) until its headers are complete:

- ``FATHOM_HEADER_TIMEOUT`` seconds: a connection that has sent nothing by then is closed; one
  that has sent part of a head gets ``408 Request Timeout`` and is closed (one log line);
- :data:`MAX_HEADER_BYTES`: a head still incomplete past it gets ``431 Request Header Fields
  Too Large`` and is closed.

A request whose headers arrived in time is not timed by this: its body has
``FATHOM_BODY_TIMEOUT`` (``bots.http_gate``) and its answer takes what it takes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

#: Seconds a request's head may take to arrive (``FATHOM_HEADER_TIMEOUT``).
DEFAULT_HEADER_TIMEOUT = 5.0
#: The largest request head (request line and headers) read; h11's own bound is 16 KiB.
MAX_HEADER_BYTES = 65_536


def _answer(status: bytes, reason: str) -> bytes:
    body = reason.encode()
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body
    )


class _HeadDeadline:
    """Mixed into uvicorn's HTTP protocol (httptools' or h11's): the request's head is timed
    and its size bounded until uvicorn starts the request (its ``cycle`` changes)."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    max_header_bytes: int = MAX_HEADER_BYTES

    # uvicorn's protocol attributes this relies on (both implementations have them).
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any
    client: tuple[str, int] | None

    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes: int = 0
    _waiting_after: Any = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._start_head()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._start_head()  # a kept-alive connection's next request begins
        super().data_received(data)  # type: ignore[misc]
        if self._head_timer is None:
            return
        upgraded = self.transport.get_protocol() is not self  # type: ignore[comparison-overlap]
        if self.transport.is_closing() or upgraded:
            self._stop_head()  # answered (a malformed request: 400), or upgraded
        elif self.cycle is not self._waiting_after:
            self._stop_head()  # the head is complete: the request runs
        else:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_header_bytes:
                self._refuse(b"431 Request Header Fields Too Large", "request head too large")

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head()
        super().connection_lost(exc)  # type: ignore[misc]

    def _start_head(self) -> None:
        self._head_bytes = 0
        self._waiting_after = self.cycle
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _stop_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.cycle is not self._waiting_after:
            return
        if self._head_bytes:
            why = f"request head not complete within {self.header_timeout:g} s"
            self._refuse(b"408 Request Timeout", why)
        else:  # opened and silent (a pre-connect, a scan): closed without a word
            log.debug("a connection from %s sent nothing; closed", self._peer())
            self.transport.close()

    def _refuse(self, status: bytes, why: str) -> None:
        self._stop_head()
        log.info("a connection from %s closed: %s %s", self._peer(), status[:3].decode(), why)
        self.transport.write(_answer(status, why))
        self.transport.close()

    def _peer(self) -> str:
        return self.client[0] if self.client else "-"


def protocol_class(
    header_timeout: float = DEFAULT_HEADER_TIMEOUT, max_header_bytes: int = MAX_HEADER_BYTES
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools' when installed, else h11's, as its ``auto``
    picks) with these bounds on each request's head; for ``uvicorn.Config(http=...)``."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return type(
        "HeadDeadlineProtocol",
        (_HeadDeadline, AutoHTTPProtocol),
        {"header_timeout": header_timeout, "max_header_bytes": max_header_bytes},
    )
