"""The frames the bot and its document worker exchange over the worker's stdin and stdout.

A request is ``>II`` (the header's length, the document's length), a JSON header, then the
document's bytes. An answer is ``>I`` (its length) and a JSON object. JSON, not pickle, comes
back: the worker reads hostile files, so nothing it sends may run code in the bot.
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

REQUEST = struct.Struct(">II")
ANSWER = struct.Struct(">I")


def request(header: dict[str, Any], data: bytes) -> bytes:
    encoded = json.dumps(header).encode()
    return REQUEST.pack(len(encoded), len(data)) + encoded + data


def answer(body: dict[str, Any]) -> bytes:
    # A lone surrogate (a broken font map can make one) becomes "?".
    encoded = json.dumps(body, ensure_ascii=False).encode("utf-8", "replace")
    return ANSWER.pack(len(encoded)) + encoded


def read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    """``size`` bytes of ``stream``; None at its end (before them all)."""
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
