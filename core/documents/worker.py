"""The document worker: a process of its own that reads PDFs and DOCX files for the bot
(``python -P -m core.documents.worker MEMORY_LIMIT``, started by
:class:`core.documents.DocumentExtractor`).

It limits its own address space (``RLIMIT_AS``) before it reads anything, so a file that makes
PDFium allocate without end ends in a ``MemoryError`` here (or the worker's death), never in
the bot's memory. Before each file it also sets a CPU-time limit a little past the file's time
limit: the bot kills a worker that overruns, and the CPU limit ends one whose bot is gone.
It answers every request on stdout and exits at the end of stdin; what its readers log goes
nowhere.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import time
from typing import Any, BinaryIO

from core.documents import protocol
from core.documents.pdf import read_pdf
from core.documents.result import (
    DAMAGED,
    TOO_COMPLEX,
    TOO_MUCH_MEMORY,
    UNSUPPORTED,
    DocumentUnreadable,
)
from core.documents.word import read_docx


def limit_memory(limit: int) -> None:
    """At most ``limit`` bytes of address space from now on, and no core dumps."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limit > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def limit_cpu(seconds: float) -> None:
    """SIGXCPU (the end of this process) once it has used ``seconds`` more CPU time."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(used + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def handle(header: dict[str, Any], data: bytes) -> dict[str, Any]:
    """One request's answer: ``{"ok": fields}`` or ``{"error": reason}``."""
    kind = header.get("kind")
    max_chars = int(header["max_chars"])
    deadline = time.monotonic() + float(header["seconds"])
    try:
        if kind == "pdf":
            fields = read_pdf(
                data,
                max_pages=int(header["max_pages"]),
                max_chars=max_chars,
                deadline=deadline,
                query=str(header.get("query") or ""),
            )
        elif kind == "docx":
            fields = read_docx(data, max_chars=max_chars)
        else:
            raise DocumentUnreadable(UNSUPPORTED)
    except DocumentUnreadable as unreadable:
        return {"error": str(unreadable.reason)}
    except MemoryError:
        return {"error": str(TOO_MUCH_MEMORY), "exit": True}
    except RecursionError:
        return {"error": str(TOO_COMPLEX)}
    except Exception:
        return {"error": str(DAMAGED)}
    return {"ok": fields}


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer requests until ``requests`` ends (or a memory error leaves this process in
    doubt)."""
    answers.write(protocol.answer({"ready": True}))
    answers.flush()
    while True:
        head = protocol.read_exactly(requests, protocol.REQUEST.size)
        if head is None:
            return
        header_size, data_size = protocol.REQUEST.unpack(head)
        header_bytes = protocol.read_exactly(requests, header_size)
        data = protocol.read_exactly(requests, data_size)
        if header_bytes is None or data is None:
            return
        header = json.loads(header_bytes)
        limit_cpu(float(header.get("cpu_seconds", 60)))
        body = handle(header, data)
        del data
        answers.write(protocol.answer(body))
        answers.flush()
        if body.get("exit"):
            return


def main() -> None:
    limit_memory(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    logging.disable(logging.CRITICAL)  # warnings about broken files go nowhere
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print cannot break the frames on stdout
    import docx  # noqa: F401  (imported once, before the first file)
    import pypdfium2  # noqa: F401

    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
