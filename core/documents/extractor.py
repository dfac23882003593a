"""The bounded document extractor: a document's bytes in, its text out, whatever the file does.

PDFs and DOCX files are read by worker processes (``core.documents.worker``), at most
``workers`` at once (the CPU count, 2 at most), kept between files so a run pays Python's
start-up once, not per PDF; :meth:`DocumentExtractor.warm` starts them ahead of the first file
(the page reader calls it when a result's address names a PDF, or a page's headers say it is
one, so that the workers start while the file downloads; a run that meets no PDF starts none).
A worker that overruns the time limit is killed (and a fresh one started for the next file); one
that dies (killed, out of memory) costs that file only. The worker limits its own address space
to ``memory_limit``, so no file can take the bot's memory. HTML and plain text are read here, on
the extractor's own two threads, within the same limit.

The worker's answers are checked like any untrusted input: only known reasons, typed fields,
text cut at ``max_chars``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from core.documents import protocol
from core.documents.decode import decode_text, undecodable
from core.documents.extract import read_page
from core.documents.result import (
    EMPTY,
    KINDS,
    REASONS,
    STOPPED,
    TOO_MUCH_MEMORY,
    TOO_SLOW,
    UNDECODABLE,
    UNSUPPORTED,
    DocumentText,
    DocumentUnreadable,
    checked_date,
)

log = logging.getLogger(__name__)

#: Text kept of a document (as ``core.pages.reader.MAX_CACHED_CHARS``).
MAX_CHARS = 200_000
#: At most this much HTML is given to trafilatura (as ``core.pages.reader.MAX_EXTRACT_CHARS``).
MAX_HTML_CHARS = 1_000_000
#: A worker's address space. Python, PDFium and python-docx take about 55 MB of it; a 10 MB,
#: 300-page PDF read whole peaks at about 90 MB of RSS, a page of 400,000 text operators at
#: about 240 MB (bench/README.md, "Reading PDFs").
MEMORY_LIMIT = 512 * 1024 * 1024
#: A worker reads pages until this share of the time limit is gone, then answers with the
#: pages it has (the rest of the limit is for the answer; past it the worker is killed).
SOFT_SHARE = 0.75
#: What a document is read for is cut to this (it chooses a long PDF's pages).
MAX_QUERY_CHARS = 500
#: A worker has this long to start (import pypdfium2 and python-docx) before it counts as broken.
START_TIMEOUT = 30.0
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class _Worker:
    process: asyncio.subprocess.Process
    files: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class _Pool:
    idle: list[_Worker] = field(default_factory=list)
    live: dict[int, _Worker] = field(default_factory=dict)
    reaping: set[asyncio.Task[int]] = field(default_factory=set)
    warming: set[asyncio.Task[None]] = field(default_factory=set)


class DocumentExtractor:
    """Extracts documents' text within limits: ``max_pages`` pages of a PDF, ``timeout``
    seconds per document, ``max_chars`` of text, ``memory_limit`` bytes of address space per
    worker process. One event loop uses it (the workers are that loop's child processes)."""

    def __init__(
        self,
        *,
        max_pages: int = 50,
        timeout: float = 10.0,
        max_chars: int = MAX_CHARS,
        memory_limit: int = MEMORY_LIMIT,
        workers: int | None = None,
    ) -> None:
        self.max_pages = max_pages
        self.timeout = timeout
        self.max_chars = max_chars
        self.memory_limit = memory_limit
        self.workers = workers or max(1, min(2, os.cpu_count() or 1))
        self._slots: asyncio.Semaphore | None = None
        self._pool = _Pool()
        self._threads: ThreadPoolExecutor | None = None
        self._closed = False
        #: Worker processes started so far (a killed one is replaced by the next file's).
        self.started = 0

    @property
    def pids(self) -> list[int]:
        """The process ids of the live workers."""
        return sorted(self._pool.live)

    async def __aenter__(self) -> DocumentExtractor:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def extract(self, data: bytes, kind: str, query: str = "") -> DocumentText:
        """The text of the document ``data`` of ``kind`` (see ``document_kind``);
        :class:`DocumentUnreadable` saying why not. ``query``: what the text is read for (of
        a PDF longer than ``max_pages``, the pages that matter for it are read)."""
        if self._closed:
            raise RuntimeError("the document extractor is closed")
        if kind in ("pdf", "docx"):
            fields = await self._in_worker(data, kind, query[:MAX_QUERY_CHARS])
            document = self._checked(fields, kind)
        elif kind in KINDS:
            document = await self._in_thread(data, kind)
        else:
            raise DocumentUnreadable(UNSUPPORTED)
        if not document.text.strip():
            raise DocumentUnreadable(EMPTY)
        if kind != "pdf" and undecodable(document.text):  # (a PDF's pages were, one by one)
            raise DocumentUnreadable(UNDECODABLE)
        return document

    # HTML and text: in this process, on the extractor's threads.

    async def _in_thread(self, data: bytes, kind: str) -> DocumentText:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(2, thread_name_prefix="fathom-documents")
        loop = asyncio.get_running_loop()
        work = _html_text if kind == "html" else _plain_text
        try:
            text, title = await asyncio.wait_for(
                loop.run_in_executor(self._threads, work, data), self.timeout
            )
        except TimeoutError:
            raise DocumentUnreadable(TOO_SLOW) from None
        text = text[: self.max_chars].replace("\x00", "")
        return DocumentText(text=text, kind=kind, title=title)

    # PDF and DOCX: in a worker process.

    def warm(self) -> None:
        """Start the workers not running yet (up to ``workers``) in the background, so that
        the next files need not wait for a worker's start (Python, pypdfium2 and python-docx:
        about 0.2 s of CPU each). Each start holds a worker slot, so a file that comes
        meanwhile waits for that worker instead of starting one more. A worker that fails to
        start is logged; the next file starts one as before. Call it on the event loop that
        will use the extractor."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        for _ in range(self.workers - len(self._pool.live) - len(self._pool.warming)):
            task = loop.create_task(self._warm_one(), name="documents-warm")
            self._pool.warming.add(task)
            task.add_done_callback(self._pool.warming.discard)

    async def _warm_one(self) -> None:
        async with self._worker_slots():
            if self._closed or len(self._pool.live) >= self.workers:
                return
            try:
                worker = await self._start()
            except DocumentUnreadable:  # (_start logged why)
                return
            if self._closed:
                self._discard(worker)
            else:
                self._pool.idle.append(worker)

    def _worker_slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        return self._slots

    async def _in_worker(self, data: bytes, kind: str, query: str) -> dict[str, Any]:
        async with self._worker_slots():
            worker = self._pool.idle.pop() if self._pool.idle else await self._start()
            header = {
                "kind": kind,
                "query": query,
                "max_pages": self.max_pages,
                "max_chars": self.max_chars,
                "seconds": self.timeout * SOFT_SHARE,
                "cpu_seconds": self.timeout + 1,
            }
            keep = False
            try:
                body = await asyncio.wait_for(self._ask(worker, header, data), self.timeout)
                keep = not body.get("exit")
            except TimeoutError:
                raise DocumentUnreadable(TOO_SLOW) from None
            except (OSError, EOFError):  # it died
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(worker.process.wait(), 1.0)
                reason = TOO_MUCH_MEMORY if self._out_of_memory(worker) else STOPPED
                raise DocumentUnreadable(reason) from None
            except ValueError:  # it answered nonsense
                raise DocumentUnreadable(STOPPED) from None
            finally:
                if keep and not self._closed:
                    worker.files += 1
                    self._pool.idle.append(worker)
                else:
                    self._discard(worker)
        error = body.get("error")
        if error is not None:
            raise DocumentUnreadable(
                REASONS.get(error, STOPPED) if isinstance(error, str) else STOPPED
            )
        fields = body.get("ok")
        if not isinstance(fields, dict):
            raise DocumentUnreadable(STOPPED)
        return fields

    async def _ask(self, worker: _Worker, header: dict[str, Any], data: bytes) -> dict[str, Any]:
        process = worker.process
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(protocol.request(header, data))
        await process.stdin.drain()
        # The answer is JSON in UTF-8: a character takes at most 4 bytes, a control character
        # escaped as \uXXXX 6.
        return await self._answer(process, limit=6 * self.max_chars + 65536)

    @staticmethod
    async def _answer(process: asyncio.subprocess.Process, *, limit: int) -> dict[str, Any]:
        assert process.stdout is not None
        try:
            head = await process.stdout.readexactly(protocol.ANSWER.size)
            (size,) = protocol.ANSWER.unpack(head)
            if size > limit:
                raise ValueError("answer too long")
            body = await process.stdout.readexactly(size)
        except asyncio.IncompleteReadError:
            raise EOFError("the worker ended") from None
        answer = json.loads(body)
        if not isinstance(answer, dict):
            raise ValueError("not an object")
        return answer

    async def _start(self) -> _Worker:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join(
                [_PROJECT_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "random",
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-m",
            "core.documents.worker",
            str(self.memory_limit),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )
        worker = _Worker(process)
        self._pool.live[worker.pid] = worker
        self.started += 1
        try:
            ready = await asyncio.wait_for(self._answer(process, limit=1024), START_TIMEOUT)
            if ready.get("ready") is not True:
                raise ValueError("not ready")
        except BaseException as exc:
            self._discard(worker)
            if isinstance(exc, Exception):
                log.warning("documents: a worker did not start (%s)", type(exc).__name__)
                raise DocumentUnreadable(STOPPED) from None
            raise
        return worker

    def _checked(self, fields: dict[str, Any], kind: str) -> DocumentText:
        """The worker's fields as a ``DocumentText`` (:class:`DocumentUnreadable` when they
        are not what a worker sends)."""
        text, title = fields.get("text"), fields.get("title")
        read, total = fields.get("pages_read"), fields.get("pages_total")
        if not isinstance(text, str) or fields.get("kind") != kind:
            raise DocumentUnreadable(STOPPED)
        if not all(v is None or (isinstance(v, int) and v >= 0) for v in (read, total)):
            raise DocumentUnreadable(STOPPED)
        pages = fields.get("pages") or []
        if not isinstance(pages, list) or not all(
            isinstance(n, int) and 0 < n <= (total or 0) for n in pages
        ):
            raise DocumentUnreadable(STOPPED)
        return DocumentText(
            text=text[: self.max_chars].replace("\x00", ""),
            kind=kind,
            pages_read=read,
            pages_total=total,
            title=title[:300] if isinstance(title, str) and title else None,
            published=checked_date(fields.get("published")),
            pages=tuple(pages),
        )

    @staticmethod
    def _out_of_memory(worker: _Worker) -> bool:
        """Whether the dead worker looks killed for its memory (SIGKILL by the kernel's
        OOM killer is indistinguishable from any other SIGKILL: only a clean exit after a
        memory error, or an abort in an allocation, says so)."""
        code = worker.process.returncode
        return code is not None and code == -6  # SIGABRT: a failed allocation in C code

    def _discard(self, worker: _Worker) -> None:
        """Kill ``worker`` (if it still runs) and reap it in the background."""
        self._pool.live.pop(worker.pid, None)
        with contextlib.suppress(ProcessLookupError):
            if worker.process.returncode is None:
                worker.process.kill()
        with contextlib.suppress(RuntimeError):  # no running loop: the child watcher reaps
            task = asyncio.get_running_loop().create_task(worker.process.wait())
            self._pool.reaping.add(task)
            task.add_done_callback(self._pool.reaping.discard)

    def close(self) -> None:
        """Kill every worker and stop the threads (a file being read gets
        :class:`DocumentUnreadable`). :meth:`aclose` also waits until the workers are gone."""
        self._closed = True
        for task in self._pool.warming:
            task.cancel()
        for worker in list(self._pool.live.values()):
            self._discard(worker)
        self._pool.idle.clear()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

    async def aclose(self) -> None:
        """:meth:`close`, then wait until every worker process has been reaped."""
        self.close()
        if self._pool.warming:
            await asyncio.gather(*self._pool.warming, return_exceptions=True)
        if self._pool.reaping:
            await asyncio.gather(*self._pool.reaping, return_exceptions=True)


def _html_text(data: bytes) -> tuple[str, str | None]:
    """An HTML document's main text and its ``<title>``."""
    from trafilatura.utils import load_html

    html = decode_text(data)[:MAX_HTML_CHARS]
    tree = load_html(html)
    title = tree.findtext(".//title") if tree is not None else None
    title = " ".join((title or "").split())[:300]
    return read_page(html, "", "text/html").text, title or None


def _plain_text(data: bytes) -> tuple[str, str | None]:
    return decode_text(data), None
