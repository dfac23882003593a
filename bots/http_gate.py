"""The gate in front of every platform route: size first, then the platform's signature, then
parsing.

A platform route reads its body through :func:`read_body` (413 before the body is read whole),
verifies the platform's signature on the raw bytes (401), and only then decodes and parses with
:func:`parse_json` (400 for a signed body that makes no sense, malformed or nested too deep). A
rejection is raised as :class:`Rejected` and answered by :func:`rejected_response`, which logs
one short line: no body, header, token or secret ever reaches the log. Slack, Feishu and
DingTalk use it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1_048_576
#: Seconds a whole body may take to arrive (``FATHOM_BODY_TIMEOUT``).
DEFAULT_BODY_TIMEOUT = 10.0


class Rejected(Exception):
    """Answer the request with ``status`` and a short, fixed ``reason`` (safe to show)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def parse_json(data: bytes | str) -> Any:
    """``json.loads`` for what arrives from outside: a document nested deeper than the parser
    can follow (``[[[[...`` under the size limit) is malformed JSON like any other, a
    ``ValueError``, never the parser's ``RecursionError``."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


async def read_body(
    request: Request, limit: int, body_timeout: float = DEFAULT_BODY_TIMEOUT
) -> bytes:
    """The request body, or :class:`Rejected`: 413 as soon as it is known to exceed ``limit``
    bytes (by its ``Content-Length``, or while it streams in: never read whole), 408 when it
    is not complete within ``body_timeout`` seconds (a client that trickles it), 400 when the
    client went away before sending it all (answered to nobody; one log line)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise Rejected(400, "invalid Content-Length")
        if int(declared) > limit:
            raise Rejected(413, "request body too large")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(body_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise Rejected(413, "request body too large")
                chunks.append(chunk)
    except TimeoutError:
        raise Rejected(408, f"request body not complete within {body_timeout:g} s") from None
    except ClientDisconnect:
        raise Rejected(400, "the client disconnected before sending its whole body") from None
    return b"".join(chunks)


def rejected_response(request: Request, rejection: Rejected) -> Response:
    """The answer to a rejected request, and its one log line."""
    client = request.client.host if request.client else "-"
    log.info(
        "%s %s from %s rejected: %d %s",
        request.method,
        request.url.path,
        client,
        rejection.status,
        rejection.reason,
    )
    headers = {"Connection": "close"} if rejection.status in (408, 413) else None
    return JSONResponse({"error": rejection.reason}, rejection.status, headers=headers)
