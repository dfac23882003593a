"""Benchmarks of the research engine against the loopback fakes (``tests/fakes``).

    python -m bench.engine           # full run (minutes); writes bench/results/engine.json
    python -m bench.engine --quick   # smaller N, same checks (CI-sized; not part of CI)

(a) engine overhead per round with zero-latency fakes, sequential depth-3 runs, split into time
    inside the LLM / search calls (timing proxies around ChatModel and the search provider, and
    around their HTTP transports) and time in the engine itself (SQLite, and PostgreSQL when
    ``TEST_DATABASE_URL`` is set);
(b) one depth-3 run at 400 ms LLM / 300 ms search latency vs. the sum of its unavoidable waits;
(c) 100 concurrent depth-3 runs in one (fresh) process: wall-time ratio and RSS per extra run;
(d) ``fathom research`` as a process: start -> first LLM request at the fake, and peak RSS;
(e) reading the result pages: one depth-3 run at 400 ms LLM / 300 ms search / 150 ms page latency
    with ``FATHOM_READ_PAGES=3`` vs. its unavoidable waits, and its prompt tokens beside the same
    run without reading.

(f) the graph strategy: one run whose plan has 6 independent sub-questions in one turn, at
    400 ms LLM / 300 ms search latency, vs. its unavoidable waits (planner, one parallel wave
    of searches, the parallel sub-answers, the writer); beside it an iterative run with the same
    number of searches (wall time and tokens).

(g) reading pages, one a PDF: (e) with the first result of every search a real 30-page PDF
    (the fake's ``pdf_pages``), the extractor's workers started before timing; beside it
    bench/pdf.py's 300-page PDF (time, bot and worker peak RSS), each case in a fresh process.
(f) with PDFs (``--rows f-pdf``): (f) reading 3 pages per sub-question, one a 30-page PDF;
    end to end (``--rows f-cli``): ``fathom research --strategy graph`` as a process, reading
    pages and PDFs, process start to exit, vs. its waits (and the waits + ``python -c pass``).

(a)-(c) and (f) measure the engine without page reading (a service built without a reader); (d) and
(e) read pages as the defaults do (the fake's pages are on 127.0.0.1, so loopback is allowed).

The clients are built by ``core.runtime.open_runtime`` exactly as in production; only thin
timing proxies are put around them. The search cache is off (TTL 0) and every run uses its own
thread, so nothing is served from a cache and prompts do not grow across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench.common import cpu_model
from tests.env import clean_environ, is_fathom_setting

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "engine.json"
FATHOM = Path(sys.executable).with_name("fathom")
API_KEY = "fake-key"
LLM_LATENCY, SEARCH_LATENCY, PAGE_LATENCY = 0.4, 0.3, 0.15
DEPTH = 3

GOALS = {
    "a_overhead_ms_per_round": 15.0,
    "b_ratio": 1.05,
    "c_wall_ratio": 1.5,
    "c_mb_per_run": 2.0,
    "d_first_request_s": 1.0,
    "d_peak_rss_mb": 115.0,
    "d_tail_s": 0.1,
    "llm_calls_per_run": 5,
    "e_ratio": 1.1,
    "f_ratio": 1.1,
    "g_ratio": 1.1,
    "f_cli_ratio": 1.1,
    "h_ratio": 1.1,
}

#: The rows ``--rows`` selects from (all by default).
ROWS = ("a", "b", "c", "d", "e", "f", "g", "f-pdf", "f-cli", "h")

T = TypeVar("T")


# --- environment -------------------------------------------------------------------------


def fathom_env(db_url: str, llm_url: str, search_url: str) -> dict[str, str]:
    """The environment of a production-like process pointed at the fakes (cache off)."""
    return clean_environ(
        DATABASE_URL=db_url,
        OPENAI_BASE_URL=llm_url,
        OPENAI_API_KEY=API_KEY,
        FATHOM_SEARCH="searxng",
        SEARXNG_URL=search_url,
        FATHOM_SEARCH_CACHE_TTL="0",
        FATHOM_PAGE_CACHE_TTL="0",
        FATHOM_ALLOW_PRIVATE_FETCH="1",  # the fake's result pages are on 127.0.0.1
        FATHOM_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
    )


def machine() -> dict[str, Any]:
    import openai
    import sqlalchemy

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "openai": openai.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "httpx": httpx.__version__,
        # Other processes share the CPUs; a 1-minute load near nproc makes every number worse.
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


# --- fakes -------------------------------------------------------------------------------


@dataclass
class FakesProcess:
    """``python -m tests.fakes`` in its own process, so the fakes never compete for our GIL."""

    llm_url: str
    search_url: str
    proc: subprocess.Popen[str]

    def script_graph_plan(self, questions: list[str]) -> None:
        """The fake graph planner's next answer: these independent sub-questions, finishing."""
        nodes = [{"name": f"q{i}", "question": q, "after": []} for i, q in enumerate(questions)]
        content = json.dumps({"nodes": nodes, "finish": True})
        base = self.llm_url.removesuffix("/v1")
        with httpx.Client(trust_env=False) as client:
            client.post(
                f"{base}/_fake/script",
                json={
                    "role": "graph_planner",
                    "responses": [{"kind": "reply", "content": content}],
                },
            ).raise_for_status()

    def cite(self, mode: str) -> None:
        """How the fake writer cites from now on (``well``, ``miscited`` or ``mixed``, see
        ``tests.fakes.llm.FakeLLM.citing``); :meth:`configure` sets it back to ``well``."""
        base = self.llm_url.removesuffix("/v1")
        with httpx.Client(trust_env=False) as client:
            client.post(f"{base}/_fake/config", json={"citing": mode}).raise_for_status()

    def configure(
        self,
        llm_latency: float,
        search_latency: float,
        page_latency: float = 0.0,
        pdf_pages: int = 0,
    ) -> None:
        base = self.llm_url.removesuffix("/v1")
        with httpx.Client(trust_env=False) as client:
            # The fake keeps every request body; clear it so long benchmarks stay flat.
            client.post(f"{base}/_fake/reset", json={}).raise_for_status()
            client.post(f"{self.search_url}/_fake/reset", json={}).raise_for_status()
            client.post(f"{base}/_fake/config", json={"latency": llm_latency}).raise_for_status()
            client.post(
                f"{self.search_url}/_fake/config",
                json={
                    "latency": search_latency,
                    "page_latency": page_latency,
                    "pdf_pages": pdf_pages,
                },
            ).raise_for_status()


@contextmanager
def fakes_process() -> Iterator[FakesProcess]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes"],
        cwd=ROOT,
        env=clean_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        yield FakesProcess(info["openai_base_url"], info["searxng_url"], proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- databases ---------------------------------------------------------------------------


@contextmanager
def sqlite_url() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="fathom-bench-") as tmp:
        yield f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"


def postgres_url(server_url: str) -> AbstractContextManager[str]:
    """A throwaway database on the server of ``server_url``."""
    from tests.databases import throwaway_database

    return throwaway_database(server_url, prefix="fathom_bench")


@contextmanager
def database_url(kind: str) -> Iterator[str]:
    if kind == "sqlite":
        with sqlite_url() as url:
            yield url
    else:
        server = os.environ.get("TEST_DATABASE_URL")
        assert server, "TEST_DATABASE_URL is not set"
        with postgres_url(server) as url:
            yield url


# --- timing proxies ----------------------------------------------------------------------


class Timings:
    """Seconds and call counts per kind of call (llm, search, store, wire_llm, wire_search)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.keep_samples = False

    def add(self, kind: str, seconds: float) -> None:
        self.seconds[kind] += seconds
        self.calls[kind] += 1
        if self.keep_samples:
            self.samples[kind].append(seconds)

    def snapshot(self) -> dict[str, float]:
        return dict(self.seconds)

    async def timed(self, kind: str, call: Awaitable[T]) -> T:
        start = time.perf_counter()
        try:
            return await call
        finally:
            self.add(kind, time.perf_counter() - start)


class TimedModel:
    """Wraps a ``ChatModel``: time spent inside its calls (SDK + HTTP + fake) is 'llm'."""

    def __init__(self, inner: Any, timings: Timings) -> None:
        self._inner = inner
        self._t = timings

    async def complete(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        return await self._t.timed("llm", self._inner.complete(messages, **kwargs))

    async def complete_json(self, messages: list[dict[str, str]], schema: Any, **kw: Any) -> Any:
        return await self._t.timed("llm", self._inner.complete_json(messages, schema, **kw))


class TimedSearch:
    """Wraps a search provider: time inside ``search`` (httpx + fake + parsing) is 'search'."""

    def __init__(self, inner: Any, timings: Timings) -> None:
        self._inner = inner
        self._t = timings
        self.name = inner.name

    async def search(self, query: str) -> Any:
        return await self._t.timed("search", self._inner.search(query))


class TimedStore:
    """Wraps ``storage.Store`` and each store it holds: every coroutine method's time is
    'store' (and 'store.<method name>', as before the stores were split)."""

    def __init__(self, inner: Any, timings: Timings) -> None:
        self._inner = inner
        self._t = timings

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if type(attr).__module__.startswith("storage."):  # a per-job store (store.runs ...)
            return TimedStore(attr, self._t)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await attr(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                self._t.add("store", elapsed)
                self._t.add(f"store.{name}", elapsed)

        return call


def _timed_stream_class(base: type) -> type:
    class TimedStream(base):  # type: ignore[misc, valid-type]
        """The response body; the wire time ends when the body has been read."""

        def __init__(self, inner: Any, done: Callable[[], None]) -> None:
            self._inner, self._done = inner, done

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._inner:
                    yield chunk
            finally:
                self._done()

        async def aclose(self) -> None:
            self._done()
            await self._inner.aclose()

    return TimedStream


class TimedTransport:
    """Wraps an httpx/httpx2 transport: request sent -> response body read is 'wire_<kind>'."""

    def __init__(self, inner: Any, timings: Timings, kind: str, stream_base: type) -> None:
        self._inner = inner
        self._t = timings
        self._kind = kind
        self._stream = _timed_stream_class(stream_base)

    async def handle_async_request(self, request: Any) -> Any:
        start = time.perf_counter()
        response = await self._inner.handle_async_request(request)
        finished = False

        def done() -> None:
            nonlocal finished
            if not finished:
                finished = True
                self._t.add(self._kind, time.perf_counter() - start)

        response.stream = self._stream(response.stream, done)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> TimedTransport:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.__aexit__(*exc)


def instrument_wire(runtime: Any, timings: Timings) -> bool:
    """Put timing transports under the openai SDK's and the search provider's HTTP clients.

    Uses private attributes of the SDK and of httpx; returns False (and the wire split is
    simply not reported) if they have moved.
    """
    try:
        import httpx2  # the openai SDK's HTTP library (a fork of httpx)

        models = [runtime.llm.planner]
        if runtime.llm.writer is not runtime.llm.planner:
            models.append(runtime.llm.writer)
        for model in models:
            client = model._client._client
            client._transport = TimedTransport(
                client._transport, timings, "wire_llm", httpx2.AsyncByteStream
            )
        search = runtime.search
        while hasattr(search, "provider"):  # the cache and the process-wide limit
            search = search.provider
        search_client = search._client
        search_client._transport = TimedTransport(
            search_client._transport, timings, "wire_search", httpx.AsyncByteStream
        )
    except (AttributeError, ImportError):
        return False
    return True


# --- running researches ------------------------------------------------------------------


@dataclass
class Bench:
    runtime: Any
    service: Any
    timings: Timings
    wire: bool


@asynccontextmanager
async def open_bench(
    db_url: str,
    llm_url: str,
    search_url: str,
    *,
    wire: bool = True,
    read_pages: bool = False,
    mcp_config: Path | None = None,
) -> AsyncIterator[Bench]:
    """A service with timing proxies; ``read_pages``: it reads result pages as configured by
    default (its reader is the one ``open_runtime`` built); ``mcp_config``: the MCP servers of
    that file are its internal sources (``FATHOM_MCP_CONFIG``)."""
    from core.research.policy import Reading, RunPolicy
    from core.research.service import Research
    from core.runtime import open_runtime
    from core.settings import load_settings

    overrides = {
        k: v for k, v in fathom_env(db_url, llm_url, search_url).items() if is_fathom_setting(k)
    }
    if mcp_config is not None:
        overrides["FATHOM_MCP_CONFIG"] = str(mcp_config)
    settings = load_settings(_env_file=None, **overrides)
    async with open_runtime(settings) as runtime:
        reader = runtime.reader if read_pages else None
        timings = Timings()
        wired = instrument_wire(runtime, timings) if wire else False
        planner = TimedModel(runtime.llm.planner, timings)
        writer = (
            planner
            if runtime.llm.writer is runtime.llm.planner
            else TimedModel(runtime.llm.writer, timings)
        )
        service = Research(
            store=TimedStore(runtime.store, timings),  # type: ignore[arg-type]
            planner=planner,
            writer=writer,
            search=TimedSearch(runtime.search, timings),
            reading=Reading(reader, knowledge=runtime.knowledge),
            policy=RunPolicy(timezone=settings.timezone),
        )
        yield Bench(runtime, service, timings, wired)


async def one_run(
    service: Any,
    topic: str,
    depth: int = DEPTH,
    strategy: str = "iterative",
    searches: int = 0,
    sources: str = "all",
) -> tuple[float, Any]:
    """submit + execute of one research in its own new thread; (wall seconds, outcome)."""
    from core.operations.job import run_attended
    from core.research.requests import ResearchRequest
    from core.values import RunStatus, SourceChoice, ThreadKey

    key = ThreadKey(platform="cli", workspace="local", channel="local", thread=uuid.uuid4().hex)
    request = ResearchRequest(
        topic=topic,
        depth=depth,
        thread=key,
        requested_by="bench",
        strategy=strategy,
        sources=SourceChoice(sources),
    )
    start = time.perf_counter()
    run, _ = await service.requests.submit(request)
    outcome = await run_attended(service, run.id)
    wall = time.perf_counter() - start
    expected = searches or depth
    if outcome.status is not RunStatus.SUCCEEDED or len(outcome.topics) != expected:
        raise RuntimeError(f"benchmark run did not succeed: {outcome.as_json()}")
    return wall, outcome


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _distribution(samples: list[float]) -> dict[str, Any]:
    """Median / p95 / max in ms and the total in seconds of a list of durations."""
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median": _ms(statistics.median(ordered)),
        "p95": _ms(ordered[int(0.95 * (len(ordered) - 1))]),
        "max": _ms(ordered[-1]),
        "total_s": round(sum(ordered), 3),
    }


# --- (a) overhead per round ----------------------------------------------------------------


async def bench_overhead(
    db_url: str, fakes: FakesProcess, runs: int, warmup: int
) -> dict[str, Any]:
    fakes.configure(0.0, 0.0)
    async with open_bench(db_url, fakes.llm_url, fakes.search_url) as bench:
        for i in range(warmup):
            await one_run(bench.service, f"warm-up topic {i}")
        per_run: list[dict[str, float]] = []
        store_calls: dict[str, list[float]] = defaultdict(list)
        outcome: Any = None
        for i in range(runs):
            before = bench.timings.snapshot()
            calls_before = dict(bench.timings.calls)
            cpu_before = _cpu_seconds()
            wall, outcome = await one_run(bench.service, f"solid-state batteries {i}")
            cpu = _cpu_seconds() - cpu_before
            after = bench.timings.snapshot()
            delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            delta["wall"] = wall
            delta["cpu"] = cpu
            per_run.append(delta)
            for k, v in delta.items():
                if k.startswith("store."):
                    n = bench.timings.calls[k] - calls_before.get(k, 0)
                    store_calls[k].append(v / max(n, 1))
        calls_per_run = {
            k: round(bench.timings.calls[k] / (runs + warmup), 2)
            for k in sorted(bench.timings.calls)
            if k.startswith("store.")
        }

    def med(key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in per_run)

    def per_round(key: str) -> float:
        return _ms(med(key) / DEPTH)

    overhead = [(r["wall"] - r.get("llm", 0.0) - r.get("search", 0.0)) / DEPTH for r in per_run]
    client = [
        (
            r.get("llm", 0.0)
            - r.get("wire_llm", 0.0)
            + r.get("search", 0.0)
            - r.get("wire_search", 0.0)
        )
        / DEPTH
        for r in per_run
    ]
    return {
        "runs": runs,
        "warmup": warmup,
        "wall_ms_per_run": _ms(med("wall")),
        # CPU of this process (all threads) per run: what bounds concurrent runs per core.
        "cpu_ms_per_run": _ms(med("cpu")),
        "wall_ms_per_round": per_round("wall"),
        "llm_ms_per_round": per_round("llm"),
        "search_ms_per_round": per_round("search"),
        "overhead_ms_per_round": _ms(statistics.median(overhead)),
        "overhead_ms_per_round_p90": _ms(sorted(overhead)[int(0.9 * (len(overhead) - 1))]),
        "store_ms_per_round": per_round("store"),
        "other_engine_ms_per_round": _ms(
            statistics.median(
                o - r.get("store", 0.0) / DEPTH for o, r in zip(overhead, per_run, strict=True)
            )
        ),
        "wire_measured": bench.wire,
        "wire_llm_ms_per_round": per_round("wire_llm"),
        "wire_search_ms_per_round": per_round("wire_search"),
        "client_library_ms_per_round": _ms(statistics.median(client)),
        "store_calls_per_run": calls_per_run,
        "store_ms_per_call": {
            k.removeprefix("store."): _ms(statistics.median(v))
            for k, v in sorted(store_calls.items())
        },
        "usage": outcome.usage.model_dump() if outcome else None,
    }


# --- (b) latency-bound single run ----------------------------------------------------------


async def bench_latency(db_url: str, fakes: FakesProcess, runs: int) -> dict[str, Any]:
    async with open_bench(db_url, fakes.llm_url, fakes.search_url) as bench:
        fakes.configure(0.0, 0.0)
        await one_run(bench.service, "warm-up")  # connections, imports, first statements
        fakes.configure(LLM_LATENCY, SEARCH_LATENCY)
        samples = []
        for i in range(runs):
            before = bench.timings.snapshot()
            wall, outcome = await one_run(bench.service, f"perovskite solar cells {i}")
            after = bench.timings.snapshot()
            usage = outcome.usage
            floor = usage.llm_calls * LLM_LATENCY + usage.searches * SEARCH_LATENCY
            llm = after.get("llm", 0.0) - before.get("llm", 0.0)
            search = after.get("search", 0.0) - before.get("search", 0.0)
            wire_llm = after.get("wire_llm", 0.0) - before.get("wire_llm", 0.0)
            wire_search = after.get("wire_search", 0.0) - before.get("wire_search", 0.0)
            samples.append(
                {
                    "wall_s": round(wall, 4),
                    "floor_s": round(floor, 4),
                    "ratio": round(wall / floor, 4),
                    "llm_calls": usage.llm_calls,
                    "searches": usage.searches,
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "ms_per_llm_call_beyond_latency": _ms(llm / usage.llm_calls - LLM_LATENCY),
                    "ms_per_search_beyond_latency": _ms(search / usage.searches - SEARCH_LATENCY),
                    "wire_ms_per_llm_call_beyond_latency": _ms(
                        wire_llm / usage.llm_calls - LLM_LATENCY
                    ),
                    "wire_ms_per_search_beyond_latency": _ms(
                        wire_search / usage.searches - SEARCH_LATENCY
                    ),
                    "ms_outside_calls": _ms(wall - llm - search),
                }
            )
    best = sorted(samples, key=lambda s: s["ratio"])[len(samples) // 2]
    return {"runs": runs, "median": best, "samples": samples}


# --- (e) reading the result pages ----------------------------------------------------------


async def bench_pages(db_url: str, fakes: FakesProcess, runs: int) -> dict[str, Any]:
    """Depth-3 runs reading 3 pages per search, each beside the same run without reading."""
    samples = []
    async with (
        open_bench(db_url, fakes.llm_url, fakes.search_url, read_pages=True) as reading,
        open_bench(db_url, fakes.llm_url, fakes.search_url) as snippets,
    ):
        fakes.configure(0.0, 0.0)
        await one_run(reading.service, "warm-up")  # imports (trafilatura), connections
        fakes.configure(LLM_LATENCY, SEARCH_LATENCY, PAGE_LATENCY)
        for i in range(runs):
            topic = f"grid-scale battery storage {i}"
            wall, outcome = await one_run(reading.service, topic)
            plain_wall, plain = await one_run(snippets.service, topic)
            usage = outcome.usage
            if usage.pages_read != 3 * DEPTH:
                raise RuntimeError(f"expected {3 * DEPTH} pages read: {usage}")
            waits = usage.llm_calls * LLM_LATENCY + usage.searches * SEARCH_LATENCY
            floor = waits + usage.searches * PAGE_LATENCY  # one page latency per round
            samples.append(
                {
                    "wall_s": round(wall, 4),
                    "floor_s": round(floor, 4),
                    "ratio": round(wall / floor, 4),
                    # Only the last round's pages hold anything up: the others are read
                    # while the planner plans the next round.
                    "critical_path_s": round(waits + PAGE_LATENCY, 4),
                    "ratio_to_critical_path": round(wall / (waits + PAGE_LATENCY), 4),
                    "pages_read": usage.pages_read,
                    "prompt_tokens": usage.prompt_tokens,
                    "prompt_tokens_without_pages": plain.usage.prompt_tokens,
                    "wall_without_pages_s": round(plain_wall, 4),
                }
            )
    best = sorted(samples, key=lambda s: s["ratio"])[len(samples) // 2]
    return {"runs": runs, "median": best, "samples": samples}


# --- (g) reading pages, one of them a PDF --------------------------------------------------

PDF_PAGES = 30


async def warm_documents(documents: Any) -> int:
    """Start every worker of the extractor (``documents.workers`` files at once) before timing,
    as the warm-up run warms trafilatura: the workers' start (Python, pypdfium2, python-docx) is
    measured on its own, in bench/pdf.py and in the end-to-end rows. Workers started so far."""
    from tests.pdfs import topic_pdf

    pdf = topic_pdf("warm-up", PDF_PAGES)
    await asyncio.gather(*(documents.extract(pdf, "pdf") for _ in range(documents.workers)))
    return int(documents.started)


@contextmanager
def timed_documents(documents: Any) -> Iterator[list[dict[str, Any]]]:
    """Every PDF/DOCX extraction of ``documents`` while inside: its seconds (waiting for a free
    worker included) and the pages it read. (An instance attribute over the method.)"""
    inner = documents.extract
    log: list[dict[str, Any]] = []

    async def extract(data: bytes, kind: str, query: str = "") -> Any:
        start = time.perf_counter()
        result = await inner(data, kind, query)
        log.append(
            {
                "kind": kind,
                "seconds": round(time.perf_counter() - start, 4),
                "pages_read": result.pages_read,
                "chars": len(result.text),
            }
        )
        return result

    setattr(documents, "extract", extract)  # noqa: B010
    try:
        yield log
    finally:
        delattr(documents, "extract")


async def bench_pdf_pages(db_url: str, fakes: FakesProcess, runs: int) -> dict[str, Any]:
    """Depth-3 runs reading 3 pages per search, the first of them a 30-page PDF, each beside
    the same topic with HTML pages only."""
    samples = []
    async with open_bench(db_url, fakes.llm_url, fakes.search_url, read_pages=True) as reading:
        documents = reading.runtime.reader.documents
        fakes.configure(0.0, 0.0, pdf_pages=PDF_PAGES)
        await one_run(reading.service, "warm-up")  # imports (trafilatura), connections, a worker
        workers = await warm_documents(documents)
        for i in range(runs):
            topic = f"district heating networks {i}"
            fakes.configure(LLM_LATENCY, SEARCH_LATENCY, PAGE_LATENCY, PDF_PAGES)
            with timed_documents(documents) as extractions:
                wall, outcome = await one_run(reading.service, topic)
            fakes.configure(LLM_LATENCY, SEARCH_LATENCY, PAGE_LATENCY)
            html_wall, _ = await one_run(reading.service, topic)
            usage = outcome.usage
            if usage.pages_read != 3 * DEPTH or len(extractions) != DEPTH:
                raise RuntimeError(f"expected {3 * DEPTH} pages and {DEPTH} PDFs: {usage}")
            waits = usage.llm_calls * LLM_LATENCY + usage.searches * SEARCH_LATENCY
            floor = waits + usage.searches * PAGE_LATENCY  # one page latency per round, as (e)
            critical = waits + PAGE_LATENCY  # only the last round's pages are waited for
            last = extractions[-1]["seconds"]
            samples.append(
                {
                    "wall_s": round(wall, 4),
                    "floor_s": round(floor, 4),
                    "ratio": round(wall / floor, 4),
                    "critical_path_s": round(critical, 4),
                    "ratio_to_critical_path": round(wall / critical, 4),
                    # The last round's PDF is read after its page latency, before the writer:
                    # its extraction is CPU work on the path (not a wait on another service).
                    "last_extraction_s": last,
                    "ratio_to_critical_path_with_last_extraction": round(
                        wall / (critical + last), 4
                    ),
                    "pages_read": usage.pages_read,
                    "pdfs_read": len(extractions),
                    "pdf_pages_read": sum(e["pages_read"] or 0 for e in extractions),
                    "extraction_s": [e["seconds"] for e in extractions],
                    "pdf_chars": [e["chars"] for e in extractions],
                    "prompt_tokens": usage.prompt_tokens,
                    "wall_html_pages_only_s": round(html_wall, 4),
                }
            )
    best = sorted(samples, key=lambda s: s["ratio"])[len(samples) // 2]
    return {
        "runs": runs,
        "pdf_pages": PDF_PAGES,
        "workers_warmed": workers,
        "median": best,
        "samples": samples,
    }


def bench_pdf_300() -> dict[str, Any]:
    """bench/pdf.py's 300-page report, each case in a fresh process: at the default limits
    (50 pages) and read whole."""
    from bench.pdf import run_case

    return {case: run_case(case) for case in ("normal-300", "all-300")}


# --- (f) the graph strategy ----------------------------------------------------------------

GRAPH_WIDTH = 6


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process has used (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_split(fakes: FakesProcess, documents: Any) -> dict[str, float]:
    """CPU seconds used so far by this process (the bot), its document workers, and the
    fakes' process."""
    return {
        "bot": time.process_time(),
        "workers": sum(cpu_seconds(pid) for pid in (documents.pids if documents else [])),
        "fakes": cpu_seconds(fakes.proc.pid),
    }


async def bench_graph(
    db_url: str, fakes: FakesProcess, runs: int, *, pdf_pages: int = 0
) -> dict[str, Any]:
    """A graph run of 6 independent sub-questions in one turn (depth 1), beside an iterative run
    of 6 searches on the same topic. ``pdf_pages``: the runs read 3 pages per search, one of
    them a PDF of that many pages (the floor then has one page latency more)."""
    samples = []
    reading = pdf_pages > 0
    page_latency = PAGE_LATENCY if reading else 0.0
    async with open_bench(db_url, fakes.llm_url, fakes.search_url, read_pages=reading) as bench:
        fakes.configure(0.0, 0.0, pdf_pages=pdf_pages)
        fakes.script_graph_plan([f"warm-up aspect {i}" for i in range(GRAPH_WIDTH)])
        await one_run(bench.service, "warm-up", 1, "graph", GRAPH_WIDTH)
        if reading:
            await warm_documents(bench.runtime.reader.documents)
        fakes.configure(LLM_LATENCY, SEARCH_LATENCY, page_latency, pdf_pages)
        for i in range(runs):
            topic = f"offshore wind power {i}"
            fakes.script_graph_plan([f"{topic} aspect {j}" for j in range(GRAPH_WIDTH)])
            documents = bench.runtime.reader.documents if reading else None
            cpu_before = cpu_split(fakes, documents)
            wall, outcome = await one_run(bench.service, topic, 1, "graph", GRAPH_WIDTH)
            cpu_after = cpu_split(fakes, documents)
            cpu = {k: round(cpu_after[k] - cpu_before[k], 3) for k in cpu_before}
            html_wall = None
            if reading:  # the same plan, every page HTML
                fakes.configure(LLM_LATENCY, SEARCH_LATENCY, page_latency, 0)
                fakes.script_graph_plan([f"{topic} aspect {j}" for j in range(GRAPH_WIDTH)])
                html_wall, _ = await one_run(bench.service, topic, 1, "graph", GRAPH_WIDTH)
                fakes.configure(LLM_LATENCY, SEARCH_LATENCY, page_latency, pdf_pages)
            iterative_wall, iterative = await one_run(bench.service, topic, GRAPH_WIDTH)
            usage = outcome.usage
            if reading and usage.pages_read != 3 * GRAPH_WIDTH:
                raise RuntimeError(f"expected {3 * GRAPH_WIDTH} pages read: {usage}")
            # planner, one wave of searches (and of page reads), one wave of answers, the writer
            floor = 3 * LLM_LATENCY + SEARCH_LATENCY + page_latency
            samples.append(
                {
                    "pages_read": usage.pages_read,
                    "wall_s": round(wall, 4),
                    "floor_s": round(floor, 4),
                    "ratio": round(wall / floor, 4),
                    "searches": usage.searches,
                    "llm_calls": usage.llm_calls,
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "iterative_wall_s": round(iterative_wall, 4),
                    "iterative_llm_calls": iterative.usage.llm_calls,
                    "iterative_prompt_tokens": iterative.usage.prompt_tokens,
                    "iterative_completion_tokens": iterative.usage.completion_tokens,
                    # CPU seconds the run took: the bot's (every thread), the document
                    # workers' (warm before it, so their counters cover it) and the fakes'.
                    "cpu_s": cpu,
                    "wall_html_pages_only_s": html_wall and round(html_wall, 4),
                }
            )
    best = sorted(samples, key=lambda s: s["ratio"])[len(samples) // 2]
    return {"runs": runs, "median": best, "samples": samples}


# --- (h) a team's MCP server beside the web ------------------------------------------------

MCP_LATENCY = 0.5


def notes_config(path: Path, delay: float) -> Path:
    """A FATHOM_MCP_CONFIG with tests/fakes/notes_mcp.py (a real stdio MCP server written with
    the SDK) answering every call after ``delay`` seconds, usable from the console."""
    config = {
        "mcpServers": {
            "notes": {
                "command": sys.executable,
                "args": [str(ROOT / "tests" / "fakes" / "notes_mcp.py")],
                "env": {"NOTES_DELAY": str(delay)},
                "fathom": {"channels": ["cli"]},
            }
        }
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


async def bench_mcp(db_url: str, fakes: FakesProcess, runs: int) -> dict[str, Any]:
    """Depth-3 runs searching the web (300 ms) and an MCP server (500 ms) each round, beside
    the same topic on the web only; the MCP session's start-up beside them."""
    samples = []
    with tempfile.TemporaryDirectory(prefix="fathom-bench-mcp-") as tmp:
        config = notes_config(Path(tmp) / "mcp.json", MCP_LATENCY)
        opened = time.perf_counter()
        async with open_bench(db_url, fakes.llm_url, fakes.search_url, mcp_config=config) as bench:
            knowledge = bench.runtime.knowledge
            await knowledge.wait_started()
            up_after = time.perf_counter() - opened
            (status,) = knowledge.status()
            if status.state != "up":
                raise RuntimeError(f"the MCP server did not start: {status.problem}")
            fakes.configure(0.0, 0.0)
            await one_run(bench.service, "warm-up")  # connections, first statements, first call
            fakes.configure(LLM_LATENCY, SEARCH_LATENCY)
            for i in range(runs):
                topic = f"heat pump maintenance {i}"
                wall, outcome = await one_run(bench.service, topic)
                web_wall, web = await one_run(bench.service, topic, sources="web")
                usage = outcome.usage
                rounds = len(outcome.topics)
                if usage.internal_searches != rounds or usage.searches != rounds:
                    raise RuntimeError(f"expected {rounds} web and internal searches: {usage}")
                if not any(source.server == "notes" for source in outcome.sources):
                    raise RuntimeError("the report cites no internal source")
                # each round waits for the slower of its two sources, once
                floor = usage.llm_calls * LLM_LATENCY + rounds * max(SEARCH_LATENCY, MCP_LATENCY)
                summed = usage.llm_calls * LLM_LATENCY + rounds * (SEARCH_LATENCY + MCP_LATENCY)
                samples.append(
                    {
                        "wall_s": round(wall, 4),
                        "floor_s": round(floor, 4),
                        "ratio": round(wall / floor, 4),
                        "sum_of_waits_s": round(summed, 4),
                        "llm_calls": usage.llm_calls,
                        "searches": usage.searches,
                        "internal_searches": usage.internal_searches,
                        "internal_sources_cited": sum(1 for s in outcome.sources if s.server),
                        "web_only_wall_s": round(web_wall, 4),
                        "web_only_floor_s": round(
                            web.usage.llm_calls * LLM_LATENCY + web.usage.searches * SEARCH_LATENCY,
                            4,
                        ),
                    }
                )
    best = sorted(samples, key=lambda s: s["ratio"])[len(samples) // 2]
    return {
        "runs": runs,
        "mcp_latency_s": MCP_LATENCY,
        # from the session's start (its SDK import included) to the server's tool resolved
        "mcp_connect_s": round(status.connect_seconds or 0.0, 4),
        # from open_bench (migrations, clients) to the server up: what a process start waits
        "mcp_up_after_open_s": round(up_after, 4),
        "median": best,
        "samples": samples,
    }


# --- (c) concurrency (runs in a fresh child process) ---------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _vm_hwm_bytes() -> int | None:
    """This process's own peak RSS (``VmHWM``), which ``_reset_peak_rss`` can reset.

    ``getrusage().ru_maxrss`` is the max of VmHWM and ``signal->maxrss``, and the latter keeps
    the RSS of the pre-exec image: a child forked from a 120 MB benchmark process reports at
    least 120 MB forever. VmHWM belongs to the current address space only.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    """Reset the peak RSS (VmHWM, which getrusage reports) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def concurrency_child(db_url: str, llm_url: str, search_url: str, n: int) -> dict[str, Any]:
    """Body of the child process: one run alone, then ``n`` at once (same process, same pools)."""
    async with open_bench(db_url, llm_url, search_url) as bench:
        await one_run(bench.service, "warm-up")
        single, _ = await one_run(bench.service, "single run")
        rss_before = _rss_bytes()
        peak_before = _peak_rss_bytes()
        # Start-up (imports, the openai SDK's pydantic models) peaks higher than the runs do;
        # reset the kernel's high-water mark so getrusage() reports the peak of the runs only.
        peak_reset = _reset_peak_rss()
        bench.timings.keep_samples = True
        cpu_before = _cpu_seconds()
        lag: list[float] = []
        sampled: list[int] = []
        checked_out: list[int] = []
        pool = bench.runtime.database.pool  # the store's pool (on SQLite: one worker thread's)
        stop = asyncio.Event()

        async def sampler() -> None:
            """Event-loop lag (a 20 ms sleep that takes longer) and current RSS."""
            while not stop.is_set():
                start = time.perf_counter()
                await asyncio.sleep(0.02)
                lag.append(time.perf_counter() - start - 0.02)
                sampled.append(_rss_bytes())
                checked_out.append(pool.checkedout())

        sampler_task = asyncio.create_task(sampler())
        start = time.perf_counter()
        results = await asyncio.gather(
            *(one_run(bench.service, f"concurrent topic {i}") for i in range(n)),
            return_exceptions=True,
        )
        wall = time.perf_counter() - start
        hwm = _vm_hwm_bytes()
        cpu = _cpu_seconds() - cpu_before
        stop.set()
        await sampler_task
        failures = [repr(r) for r in results if isinstance(r, BaseException)]
        walls = sorted(r[0] for r in results if not isinstance(r, BaseException))
        ru_maxrss = _peak_rss_bytes()
        peak = hwm if hwm is not None and peak_reset else ru_maxrss
        store = bench.timings.samples.get("store", [])
        by_method = {
            k.removeprefix("store."): _distribution(v)
            for k, v in sorted(bench.timings.samples.items())
            if k.startswith("store.")
        }
        pool_info: dict[str, Any] = {
            "class": type(pool).__name__,
            "max_checked_out": max(checked_out, default=0),
        }
        for attr in ("size", "_max_overflow", "_timeout"):
            value = getattr(pool, attr, None)
            value = value() if callable(value) else value
            if value is not None:
                pool_info[attr.strip("_")] = value
    return {
        "n": n,
        "single_wall_s": round(single, 4),
        "wall_s": round(wall, 4),
        "wall_ratio": round(wall / single, 4),
        "per_run_wall_s": {
            "min": round(walls[0], 4) if walls else None,
            "median": round(statistics.median(walls), 4) if walls else None,
            "max": round(walls[-1], 4) if walls else None,
        },
        "failures": failures[:5],
        "failed": len(failures),
        "rss_before_mb": round(rss_before / 2**20, 2),
        "peak_rss_mb": round(peak / 2**20, 2),
        "peak_rss_method": "VmHWM reset before the runs" if peak is hwm else "ru_maxrss",
        "ru_maxrss_mb": round(ru_maxrss / 2**20, 2),
        "ru_maxrss_before_mb": round(peak_before / 2**20, 2),
        "max_sampled_rss_mb": round(max(sampled, default=0) / 2**20, 2),
        "mb_per_extra_run": round((peak - rss_before) / max(n - 1, 1) / 2**20, 4),
        # Cross-check from /proc/self/statm samples (every 20 ms) during the runs.
        "mb_per_extra_run_sampled": round(
            (max(sampled, default=rss_before) - rss_before) / max(n - 1, 1) / 2**20, 4
        ),
        "peak_reset_before_runs": peak_reset,
        "cpu_s": round(cpu, 3),
        "cpu_share_of_wall": round(cpu / wall, 3),
        "llm_ms_beyond_latency": _distribution(
            [x - LLM_LATENCY for x in bench.timings.samples.get("llm", [])]
        ),
        "search_ms_beyond_latency": _distribution(
            [x - SEARCH_LATENCY for x in bench.timings.samples.get("search", [])]
        ),
        "wire_llm_ms_beyond_latency": _distribution(
            [x - LLM_LATENCY for x in bench.timings.samples.get("wire_llm", [])]
        ),
        "store_calls": len(store),
        "store_ms": _distribution(store),
        "store_ms_by_method": by_method,
        "event_loop_lag_ms": {
            "median": _ms(statistics.median(lag)) if lag else None,
            "max": _ms(max(lag)) if lag else None,
        },
        "db_pool": pool_info,
    }


async def migrate(db_url: str) -> None:
    from storage import Database

    database = Database(db_url)
    try:
        await database.upgrade()
    finally:
        await database.dispose()


def bench_concurrency(db_url: str, fakes: FakesProcess, n: int) -> dict[str, Any]:
    # Migrate here: Alembic in the child would set its peak RSS before the runs even start.
    asyncio.run(migrate(db_url))
    fakes.configure(LLM_LATENCY, SEARCH_LATENCY)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.engine",
            "--child-concurrency",
            json.dumps([db_url, fakes.llm_url, fakes.search_url, n]),
        ],
        cwd=ROOT,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"concurrency child failed:\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --- (d) the CLI as a process ----------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values)


def compile_sources() -> None:
    """Byte-compile Fathom's own modules, as installing its wheel does: a process started
    from an editable install under ``PYTHONDONTWRITEBYTECODE`` (this sandbox sets it) would
    otherwise compile them from source at every start."""
    import compileall

    for package in ("bots", "core", "storage"):
        compileall.compile_dir(ROOT / package, quiet=1)


def bench_cli(runs: int) -> dict[str, Any]:
    from tests.fakes import FakeLLMServer, FakeSearchServer

    compile_sources()

    time_bin = Path("/usr/bin/time")
    results: list[dict[str, Any]] = []
    with (
        FakeLLMServer() as llm,
        FakeSearchServer() as search,
        sqlite_url() as db_url,
        tempfile.TemporaryDirectory(prefix="fathom-bench-time-") as tmp,
    ):
        env = fathom_env(db_url, llm.base_url, search.url)
        # A first `fathom research` on an empty database also runs the Alembic migrations;
        # it is reported separately, the 5 measured runs find the schema current.
        cold = _cli_once(env, llm, time_bin, Path(tmp) / "cold.txt", "cold start topic")
        for i in range(runs):
            results.append(_cli_once(env, llm, time_bin, Path(tmp) / f"{i}.txt", f"cli topic {i}"))
        # Diagnostics (not measured): where the start-up time goes.
        profiled = _cli_once(
            {**env, "PYTHONPROFILEIMPORTTIME": "1"},
            llm,
            time_bin,
            Path(tmp) / "profiled.txt",
            "import profile topic",
        )
    first = [r["first_request_s"] for r in results]
    tails = [r["tail_s"] for r in results]
    rss = [r["peak_rss_mb"] for r in results]
    for r in results:
        r.pop("stderr", None)
    return {
        "runs": runs,
        "first_request_s": round(_median(first), 4),
        "first_request_s_all": [round(x, 4) for x in first],
        "tail_s": round(_median(tails), 4),
        "tail_s_all": [round(x, 4) for x in tails],
        "process_wall_s": round(_median([r["wall_s"] for r in results]), 4),
        "peak_rss_mb": round(_median(rss), 2),
        "peak_rss_mb_all": rss,
        "rss_method": results[0]["rss_method"],
        "cold_first_run": {k: v for k, v in cold.items() if k != "stderr"},
        "imports": parse_importtime(profiled["stderr"]),
        "first_request_s_with_importtime": round(profiled["first_request_s"], 4),
        "import_openai": import_cost("import openai", runs),
        "python_startup": import_cost("pass", runs),
    }


def _cli_once(
    env: dict[str, str], llm: Any, time_bin: Path, out: Path, topic: str
) -> dict[str, Any]:
    llm.fake.reset()
    # The installed entry point, as an operator runs it (``python -m bots.cli`` if absent).
    fathom = [str(FATHOM)] if FATHOM.exists() else [sys.executable, "-m", "bots.cli"]
    cmd = [*fathom, "research", topic, "--depth", str(DEPTH), "--json"]
    use_time = time_bin.exists()
    if use_time:
        cmd = [str(time_bin), "-f", "%M", "-o", str(out), *cmd]
    start = time.time()
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stdout, stderr = proc.communicate(timeout=120)
    end = time.time()
    wall = end - start
    if proc.returncode != 0:
        raise RuntimeError(f"fathom research failed ({proc.returncode}):\n{stderr[-3000:]}")
    requests = llm.fake.requests
    if use_time:
        peak_kb = int(out.read_text().strip().splitlines()[-1])
        method = "/usr/bin/time -f %M"
    else:
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        method = "getrusage(RUSAGE_CHILDREN)"
    data = json.loads(stdout)
    writer = [r for r in requests if r.role == "writer"][-1]
    return {
        "first_request_s": requests[0].time - start,
        # The writer's request reaching the (zero-latency) fake, to the process having exited.
        "tail_s": end - writer.time,
        "wall_s": wall,
        "peak_rss_mb": round(peak_kb / 1024, 2),
        "rss_method": method,
        "llm_calls": data["usage"]["llm_calls"],
        "prompt_tokens": data["usage"]["prompt_tokens"],
        "stderr": stderr,
    }


# --- (f) end to end: `fathom research --strategy graph` as a process ---------------------


def bench_graph_cli(runs: int) -> dict[str, Any]:
    """``fathom research "<topic>" --strategy graph --depth 1 --json`` as a user runs it,
    reading 3 pages per search (one of them a 30-page PDF), 6 independent sub-questions, at
    400 ms LLM / 300 ms search / 150 ms page latency: process start to exit."""
    from tests.fakes import FakeLLMServer, FakeSearchServer, Reply

    compile_sources()
    fathom = [str(FATHOM)] if FATHOM.exists() else [sys.executable, "-m", "bots.cli"]
    results: list[dict[str, Any]] = []
    with FakeLLMServer() as llm, FakeSearchServer() as search, sqlite_url() as db_url:
        asyncio.run(migrate(db_url))  # (a first run on an empty database also migrates)
        env = {**fathom_env(db_url, llm.base_url, search.url), "FATHOM_READ_PAGES": "3"}

        def once(topic: str) -> dict[str, Any]:
            llm.fake.reset()
            search.fake.reset()
            llm.fake.latency, search.fake.latency = LLM_LATENCY, SEARCH_LATENCY
            search.fake.page_latency, search.fake.pdf_pages = PAGE_LATENCY, PDF_PAGES
            nodes = [
                {"name": f"q{i}", "question": f"{topic} aspect {i}", "after": []}
                for i in range(GRAPH_WIDTH)
            ]
            llm.fake.script("graph_planner", Reply(json.dumps({"nodes": nodes, "finish": True})))
            cmd = [*fathom, "research", topic, "--strategy", "graph", "--depth", "1", "--json"]
            start = time.time()
            proc = subprocess.Popen(
                cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            stdout, stderr = proc.communicate(timeout=120)
            end = time.time()
            if proc.returncode != 0:
                raise RuntimeError(f"fathom research failed ({proc.returncode}):\n{stderr[-3000:]}")
            data = json.loads(stdout)
            usage = data["usage"]
            if usage["searches"] != GRAPH_WIDTH or usage["pages_read"] != 3 * GRAPH_WIDTH:
                raise RuntimeError(f"unexpected run: {usage}")
            requests = llm.fake.requests
            planner = [r.time for r in requests if r.role == "graph_planner"]
            answers = sorted(r.time for r in requests if r.role == "answerer")
            writer = [r.time for r in requests if r.role == "writer"][-1]
            reads_from = planner[-1] + LLM_LATENCY + SEARCH_LATENCY + PAGE_LATENCY
            return {
                "wall_s": round(end - start, 4),
                # Where the time went, from the requests' arrival at the fake LLM.
                "start_to_planner_request_s": round(planner[0] - start, 4),
                # planner answered + search + page latency -> the sub-answers asked: the page
                # reading beyond its latency (fetching, PDF extraction, ranking) and the engine.
                "first_answer_after_waits_s": round(answers[0] - reads_from, 4),
                "last_answer_after_waits_s": round(answers[-1] - reads_from, 4),
                "writer_after_answers_s": round(writer - answers[-1] - LLM_LATENCY, 4),
                "tail_after_writer_s": round(end - writer - LLM_LATENCY, 4),
                "llm_calls": usage["llm_calls"],
                "pages_read": usage["pages_read"],
                "stderr_tail": stderr[-500:] if stderr.strip() else "",
            }

        once("warm-up topic")  # the OS's file cache, .pyc files
        for i in range(runs):
            results.append(once(f"tidal energy {i}"))
    interpreter = bare_start(runs * 2)
    floor = 3 * LLM_LATENCY + SEARCH_LATENCY + PAGE_LATENCY
    with_start = floor + interpreter["python_c_pass_s"]
    for r in results:
        r["ratio"] = round(r["wall_s"] / floor, 4)
        r["ratio_with_interpreter_start"] = round(r["wall_s"] / with_start, 4)
    best = sorted(results, key=lambda r: r["wall_s"])[len(results) // 2]
    return {
        "runs": runs,
        "floor_s": round(floor, 4),
        "floor_with_interpreter_start_s": round(with_start, 4),
        "interpreter": interpreter,
        "median": best,
        "samples": results,
    }


def bare_start(runs: int) -> dict[str, float]:
    """Median wall time of processes that do (almost) nothing: the interpreter's start and
    exit (``python -c pass``, with ``site`` and the venv's ``.pth`` files, as the ``fathom``
    entry point starts), without ``site`` (``-S``), and importing the CLI module alone."""

    def median_wall(args: list[str]) -> float:
        walls = []
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run(args, cwd=ROOT, env=clean_environ(), check=True, capture_output=True)
            walls.append(time.perf_counter() - start)
        return round(_median(walls), 4)

    return {
        "python_c_pass_s": median_wall([sys.executable, "-c", "pass"]),
        "python_S_c_pass_s": median_wall([sys.executable, "-S", "-c", "pass"]),
        "import_bots_cli_s": median_wall([sys.executable, "-c", "import bots.cli"]),
        "import_core_runtime_s": median_wall(
            [sys.executable, "-c", "import bots.cli, core.runtime, core.research.service"]
        ),
    }


def import_cost(code: str, runs: int) -> dict[str, float]:
    walls, peaks = [], []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%M", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
        )
        walls.append(time.perf_counter() - start)
        peaks.append(int(proc.stderr.strip().splitlines()[-1]) / 1024)
    return {"wall_s": round(_median(walls), 4), "peak_rss_mb": round(_median(peaks), 2)}


def parse_importtime(stderr: str, top: int = 12) -> dict[str, Any]:
    """Total import time and the heaviest top-level packages from ``-X importtime`` output."""
    by_root: dict[str, int] = defaultdict(int)
    total = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line.split("|", 2)
        level = (len(name) - len(name.lstrip(" ")) - 1) // 2
        if level == 0:  # top-level imports: their cumulative times add up to the total
            us = int(cumulative)
            total += us
            by_root[name.strip().split(".")[0]] += us
    heaviest = sorted(by_root.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return {
        "total_ms": round(total / 1000, 1),
        "heaviest_ms": {name: round(us / 1000, 1) for name, us in heaviest},
    }


# --- report ----------------------------------------------------------------------------------


def verdict(value: float | None, goal: float, *, lower_is_better: bool = True) -> str:
    if value is None:
        return "n/a"
    return "yes" if (value < goal if lower_is_better else value > goal) else "**no**"


def table(results: dict[str, Any]) -> str:
    rows = _classic_rows(results) if all(k in results for k in "abcdef") else []
    rows += _pdf_rows(results)
    rows += _mcp_rows(results)
    lines = ["| benchmark | goal | result | met? |", "|---|---|---|---|"]
    lines += [f"| {a} | {b_} | {c_} | {d_} |" for a, b_, c_, d_ in rows]
    return "\n".join(lines)


def _mcp_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Row (h), when measured."""
    if "h" not in results:
        return []
    h = results["h"]
    m = h["median"]
    return [
        (
            "(h) depth-3 wall, web (0.3 s) and an MCP server (0.5 s) each round / (LLM x 0.4 s"
            " + rounds x max(0.3, 0.5) s)",
            "<= 1.1",
            f"{m['ratio']:.3f} ({m['wall_s']:.3f} s / {m['floor_s']:.2f} s; the sum of both"
            f" waits would be {m['sum_of_waits_s']:.2f} s)",
            "yes" if m["ratio"] <= GOALS["h_ratio"] else "**no**",
        ),
        (
            "(h) beside it: the same topic on the web only (wall / its waits); the report's"
            " internal sources",
            "-",
            f"{m['web_only_wall_s']:.3f} s / {m['web_only_floor_s']:.2f} s;"
            f" {m['internal_sources_cited']} (from {m['internal_searches']} internal searches)",
            "-",
        ),
        (
            "(h) the MCP session's start-up (stdio server spawned, SDK imported, tool resolved);"
            " up after the runtime began opening",
            "-",
            f"{h['mcp_connect_s']:.3f} s; {h['mcp_up_after_open_s']:.3f} s",
            "-",
        ),
    ]


def _pdf_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows (g), (f) with pages and PDFs, and (f) end to end, for those measured."""
    rows: list[tuple[str, str, str, str]] = []
    if "g" in results:
        g = results["g"]["median"]
        rows.append(
            (
                f"(g) depth-3 wall reading 3 pages/search, one a {results['g']['pdf_pages']}-page"
                " PDF / (LLM x 0.4 s + searches x (0.3 + 0.15 s))",
                "<= 1.1",
                f"{g['ratio']:.3f} ({g['wall_s']:.3f} s / {g['floor_s']:.2f} s; HTML pages only"
                f" {g['wall_html_pages_only_s']:.3f} s)",
                "yes" if g["ratio"] <= GOALS["g_ratio"] else "**no**",
            )
        )
        rows.append(
            (
                "(g) the same wall / its critical path (waits + the last round's page latency);"
                " + the last PDF's extraction",
                "-",
                f"{g['ratio_to_critical_path']:.3f} ({g['critical_path_s']:.2f} s);"
                f" {g['ratio_to_critical_path_with_last_extraction']:.3f}"
                f" (+ {g['last_extraction_s']:.3f} s)",
                "-",
            )
        )
        rows.append(
            (
                "(g) pages read; PDFs; PDF pages read; each PDF's extraction (in the run)",
                "-",
                f"{g['pages_read']}; {g['pdfs_read']}; {g['pdf_pages_read']};"
                f" {' / '.join(f'{x:.3f}' for x in g['extraction_s'])} s"
                f" (workers warmed: {results['g']['workers_warmed']})",
                "-",
            )
        )
    for case, r in results.get("g_300", {}).items():
        rows.append(
            (
                f"(g) beside it: a 300-page PDF ({case}), fresh process: first / again;"
                " bot peak; worker peak",
                "-",
                f"{r['first_s']:.2f} / {r['second_s']:.2f} s ({r['outcome']});"
                f" {r['bot_peak_mb']:.1f} MB; {r['worker_peak_mb']:.1f} MB",
                "-",
            )
        )
    if "f_pdf" in results:
        f = results["f_pdf"]["median"]
        rows.append(
            (
                "(f) in process, reading 3 pages/search, one a PDF:"
                " wall / (3 x 0.4 + 0.3 + 0.15 s)",
                "<= 1.1",
                f"{f['ratio']:.3f} ({f['wall_s']:.3f} s / {f['floor_s']:.2f} s; HTML pages only"
                f" {f['wall_html_pages_only_s']:.3f} s)",
                "yes" if f["ratio"] <= GOALS["f_ratio"] else "**no**",
            )
        )
        cpu = f["cpu_s"]
        rows.append(
            (
                "(f) with PDFs: CPU seconds of the run: bot; document workers; fakes",
                "-",
                f"{cpu['bot']:.2f}; {cpu['workers']:.2f}; {cpu['fakes']:.2f} s"
                f" ({os.cpu_count()} CPUs)",
                "-",
            )
        )
    if "f_cli" in results:
        fc = results["f_cli"]
        m, i = fc["median"], fc["interpreter"]
        rows.append(
            (
                "(f) end to end: `fathom research --strategy graph`, pages + PDFs, process start"
                " -> exit / (3 x 0.4 + 0.3 + 0.15 s)",
                "<= 1.1",
                f"{m['ratio']:.3f} ({m['wall_s']:.3f} s / {fc['floor_s']:.2f} s)",
                "yes" if m["ratio"] <= GOALS["f_cli_ratio"] else "**no**",
            )
        )
        rows.append(
            (
                "(f) end to end / (those waits + `python -c pass`)",
                "-",
                f"{m['ratio_with_interpreter_start']:.3f}"
                f" ({m['wall_s']:.3f} s / {fc['floor_with_interpreter_start_s']:.3f} s)",
                "-",
            )
        )
        rows.append(
            (
                "(f) end to end: start -> planner request; reading beyond its waits (first /"
                " last sub-answer); writer; tail",
                "-",
                f"{m['start_to_planner_request_s']:.3f} s; {m['first_answer_after_waits_s']:.3f}"
                f" / {m['last_answer_after_waits_s']:.3f} s; {m['writer_after_answers_s']:.3f} s;"
                f" {m['tail_after_writer_s']:.3f} s",
                "-",
            )
        )
        rows.append(
            (
                "(context) `python -c pass`; `-S`; `import bots.cli`;"
                " + `core.runtime, core.research.service`",
                "-",
                f"{i['python_c_pass_s']:.3f}; {i['python_S_c_pass_s']:.3f};"
                f" {i['import_bots_cli_s']:.3f}; {i['import_core_runtime_s']:.3f} s",
                "-",
            )
        )
    return rows


def _classic_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    for name, a in results["a"].items():
        rows.append(
            (
                f"(a) engine overhead per round, excl. LLM/search calls ({name})",
                "< 15 ms",
                f"{a['overhead_ms_per_round']:.2f} ms (store {a['store_ms_per_round']:.2f} ms;"
                f" wall {a['wall_ms_per_round']:.2f} ms/round;"
                f" CPU {a['cpu_ms_per_run']:.0f} ms/run)",
                verdict(a["overhead_ms_per_round"], GOALS["a_overhead_ms_per_round"]),
            )
        )
    b = results["b"]["median"]
    rows.append(
        (
            "(b) depth-3 wall / (LLM calls x 0.4 s + searches x 0.3 s)",
            "<= 1.05",
            f"{b['ratio']:.3f} ({b['wall_s']:.3f} s / {b['floor_s']:.2f} s)",
            "yes" if b["ratio"] <= GOALS["b_ratio"] else "**no**",
        )
    )
    for name, c in results["c"].items():
        rows.append(
            (
                f"(c) {c['n']} concurrent runs: wall / one run ({name})",
                "<= 1.5",
                f"{c['wall_ratio']:.3f} ({c['wall_s']:.2f} s / {c['single_wall_s']:.2f} s;"
                f" CPU {c['cpu_share_of_wall']:.0%} of wall, store median"
                f" {c['store_ms']['median']:.0f} ms)",
                "yes" if c["wall_ratio"] <= GOALS["c_wall_ratio"] else "**no**",
            )
        )
        rows.append(
            (
                f"(c) RSS per extra concurrent run ({name})",
                "< 2 MB",
                f"{c['mb_per_extra_run']:.3f} MB (peak {c['peak_rss_mb']:.1f} MB,"
                f" before {c['rss_before_mb']:.1f} MB)",
                verdict(c["mb_per_extra_run"], GOALS["c_mb_per_run"]),
            )
        )
    d = results["d"]
    rows.append(
        (
            f"(d) `fathom research`: process start -> first LLM request (median of {d['runs']})",
            "< 1.0 s",
            f"{d['first_request_s']:.3f} s",
            verdict(d["first_request_s"], GOALS["d_first_request_s"]),
        )
    )
    rows.append(
        (
            f"(d) `fathom research`: writer's answer -> process exited (median of {d['runs']})",
            "< 0.1 s",
            f"{d['tail_s']:.3f} s",
            verdict(d["tail_s"], GOALS["d_tail_s"]),
        )
    )
    rows.append(
        (
            f"(d) `fathom research` peak RSS (median of {d['runs']})",
            "< 115 MB",
            f"{d['peak_rss_mb']:.1f} MB",
            verdict(d["peak_rss_mb"], GOALS["d_peak_rss_mb"]),
        )
    )
    rows.append(
        (
            "(context) `python -c 'import openai'`",
            "-",
            f"{d['import_openai']['wall_s']:.3f} s, {d['import_openai']['peak_rss_mb']:.1f} MB",
            "-",
        )
    )
    u = results["b"]["median"]
    rows.append(
        (
            "LLM calls per depth-3 run",
            "<= 5",
            str(u["llm_calls"]),
            "yes" if u["llm_calls"] <= GOALS["llm_calls_per_run"] else "**no**",
        )
    )
    rows.append(("prompt tokens per depth-3 report (whole run)", "-", str(u["prompt_tokens"]), "-"))
    e = results["e"]["median"]
    rows.append(
        (
            "(e) depth-3 wall reading 3 pages/search / (LLM x 0.4 s + searches x (0.3 + 0.15 s))",
            "<= 1.1",
            f"{e['ratio']:.3f} ({e['wall_s']:.3f} s / {e['floor_s']:.2f} s; without pages"
            f" {e['wall_without_pages_s']:.3f} s)",
            "yes" if e["ratio"] <= GOALS["e_ratio"] else "**no**",
        )
    )
    rows.append(
        (
            "(e) the same wall / its critical path (only the last round's pages are waited for)",
            "-",
            f"{e['ratio_to_critical_path']:.3f} ({e['critical_path_s']:.2f} s)",
            "-",
        )
    )
    f = results["f"]["median"]
    rows.append(
        (
            "(f) graph run, 6 independent sub-questions: wall / (3 LLM x 0.4 s + 1 search x 0.3 s)",
            "<= 1.1",
            f"{f['ratio']:.3f} ({f['wall_s']:.3f} s / {f['floor_s']:.2f} s)",
            "yes" if f["ratio"] <= GOALS["f_ratio"] else "**no**",
        )
    )
    rows.append(
        (
            "(f) beside it: an iterative run of 6 searches (wall; LLM calls; prompt tokens)",
            "-",
            f"{f['iterative_wall_s']:.3f} s vs. {f['wall_s']:.3f} s; "
            f"{f['iterative_llm_calls']} vs. {f['llm_calls']} calls; "
            f"{f['iterative_prompt_tokens']} vs. {f['prompt_tokens']} tokens",
            "-",
        )
    )
    rows.append(
        (
            "(e) prompt tokens per depth-3 report, reading 3 pages/search vs. snippets only",
            "-",
            f"{e['prompt_tokens']} vs. {e['prompt_tokens_without_pages']}",
            "-",
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller N (CI-sized)")
    parser.add_argument("--child-concurrency", help=argparse.SUPPRESS)
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL runs")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--rows", help=f"only these rows, comma-separated ({', '.join(ROWS)}; default: all)"
    )
    args = parser.parse_args(argv)
    # Settings a developer exported must not leak into the measured configuration.
    for name in list(os.environ):
        if is_fathom_setting(name):
            del os.environ[name]
    if args.child_concurrency:
        db_url, llm_url, search_url, n = json.loads(args.child_concurrency)
        result = asyncio.run(concurrency_child(db_url, llm_url, search_url, int(n)))
        print(json.dumps(result))
        return 0

    quick = args.quick
    a_runs, a_warmup = (5, 1) if quick else (30, 3)
    b_runs = 1 if quick else 3
    c_n = 20 if quick else 100
    d_runs = 2 if quick else 5
    kinds = ["sqlite"]
    if os.environ.get("TEST_DATABASE_URL") and not args.no_postgres:
        kinds.append("postgresql")
    rows = set(args.rows.split(",")) if args.rows else set(ROWS)
    if rows - set(ROWS):
        parser.error(f"--rows: unknown {sorted(rows - set(ROWS))}; known: {', '.join(ROWS)}")

    results: dict[str, Any] = {
        "machine": machine(),
        "command": "python -m bench.engine"
        + (" --quick" if quick else "")
        + (f" --rows {args.rows}" if args.rows else ""),
        "quick": quick,
        "goals": GOALS,
    }

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def load() -> list[float]:
        return [round(x, 2) for x in os.getloadavg()]

    with fakes_process() as fakes:
        if "a" in rows:
            results["a"] = {}
            for kind in kinds:
                say(f"(a) overhead per round on {kind}: {a_runs} runs …")
                with database_url(kind) as url:
                    results["a"][kind] = asyncio.run(bench_overhead(url, fakes, a_runs, a_warmup))
                say(json.dumps(results["a"][kind]))
        if "b" in rows:
            say(f"(b) latency-bound run x{b_runs} …")
            with sqlite_url() as url:
                results["b"] = asyncio.run(bench_latency(url, fakes, b_runs))
            say(json.dumps(results["b"]["median"]))
        if "c" in rows:
            results["c"] = {}
            for kind in kinds:
                say(f"(c) {c_n} concurrent runs on {kind} …")
                with database_url(kind) as url:
                    results["c"][kind] = bench_concurrency(url, fakes, c_n)
                say(json.dumps(results["c"][kind]))
        if "f" in rows:
            say(f"(f) graph strategy x{b_runs} …")
            with sqlite_url() as url:
                results["f"] = asyncio.run(bench_graph(url, fakes, b_runs))
            say(json.dumps(results["f"]["median"]))
        if "e" in rows:
            say(f"(e) reading pages x{b_runs} …")
            with sqlite_url() as url:
                results["e"] = asyncio.run(bench_pages(url, fakes, b_runs))
            say(json.dumps(results["e"]["median"]))
        if "g" in rows:
            say(f"(g) reading pages, one a {PDF_PAGES}-page PDF, x{b_runs} …")
            before = load()
            with sqlite_url() as url:
                results["g"] = asyncio.run(bench_pdf_pages(url, fakes, b_runs))
            results["g"]["loadavg"] = [before, load()]
            say(json.dumps(results["g"]["median"]))
            say("(g) beside it: a 300-page PDF (bench/pdf.py) …")
            results["g_300"] = bench_pdf_300()
            say(json.dumps(results["g_300"]))
        if "f-pdf" in rows:
            say(f"(f) graph strategy reading pages and PDFs x{b_runs} …")
            before = load()
            with sqlite_url() as url:
                results["f_pdf"] = asyncio.run(bench_graph(url, fakes, b_runs, pdf_pages=PDF_PAGES))
            results["f_pdf"]["loadavg"] = [before, load()]
            say(json.dumps(results["f_pdf"]["median"]))
        if "h" in rows:
            say(f"(h) the web and an MCP server each round x{b_runs} …")
            before = load()
            with sqlite_url() as url:
                results["h"] = asyncio.run(bench_mcp(url, fakes, b_runs))
            results["h"]["loadavg"] = [before, load()]
            say(json.dumps(results["h"]["median"]))
    if "d" in rows:
        say(f"(d) fathom research x{d_runs} …")
        results["d"] = bench_cli(d_runs)
        say(json.dumps(results["d"]))
    if "f-cli" in rows:
        f_runs = 3 if quick else 7
        say(f"(f) end to end: fathom research --strategy graph x{f_runs} …")
        before = load()
        results["f_cli"] = bench_graph_cli(f_runs)
        results["f_cli"]["loadavg"] = [before, load()]
        say(json.dumps(results["f_cli"]["median"]))

    results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    m = results["machine"]
    print(f"{m['date']}, {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
