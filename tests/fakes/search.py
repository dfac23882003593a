"""A fake SearXNG JSON API with deterministic results, failure injection and query recording."""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.server import BackgroundServer


def slug(query: str) -> str:
    """URL-safe, deterministic and distinct for distinct non-ASCII queries."""
    base = "-".join(re.findall(r"[a-z0-9]+", query.lower()))[:60]
    if query.isascii() and base:
        return base
    digest = hashlib.sha1(query.encode()).hexdigest()[:10]
    return f"{base}-{digest}" if base else digest


class FakeSearch:
    """State and behaviour of the fake; every method is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queries: list[str] = []
        self._scripted: dict[str, list[dict[str, Any]]] = {}
        self._fail_next = 0
        self._fail_status = 500
        self.latency = 0.0
        self.empty = False
        self.results_per_query = 4

    @property
    def queries(self) -> list[str]:
        with self._lock:
            return list(self._queries)

    def fail_next(self, n: int, status: int = 500) -> None:
        with self._lock:
            self._fail_next, self._fail_status = n, status

    def script_for(self, query: str, results: list[dict[str, Any]]) -> None:
        with self._lock:
            self._scripted[query] = [{"engine": "fake", **r} for r in results]

    def reset(self) -> None:
        with self._lock:
            self._queries.clear()
            self._scripted.clear()
            self._fail_next, self._fail_status = 0, 500
        self.latency, self.empty, self.results_per_query = 0.0, False, 4

    def record(self, query: str) -> int | None:
        """Record the query; return an HTTP status to fail with, if a failure is pending."""
        with self._lock:
            self._queries.append(query)
            if self._fail_next > 0:
                self._fail_next -= 1
                return self._fail_status
            return None

    def results(self, query: str) -> list[dict[str, Any]]:
        with self._lock:
            scripted = self._scripted.get(query)
        if scripted is not None:
            return scripted
        if self.empty:
            return []
        return [
            {
                "title": f"{query} — source {i}",
                "url": f"https://example.org/{slug(query)}/{i}",
                "content": f"Source {i} reports facts, figures and context about {query}.",
                "engine": "fake",
            }
            for i in range(1, self.results_per_query + 1)
        ]


def build_search_app(fake: FakeSearch) -> Starlette:
    async def search(request: Request) -> JSONResponse:
        query = request.query_params.get("q", "")
        if request.query_params.get("format") != "json":
            return JSONResponse({"error": "format must be json"}, 400)
        if not query.strip():
            return JSONResponse({"error": "missing q"}, 400)
        status = fake.record(query)
        if fake.latency > 0:
            await asyncio.sleep(fake.latency)
        if status is not None:
            return JSONResponse({"error": f"fake failure {status}"}, status)
        return JSONResponse(
            {"query": query, "number_of_results": 0, "results": fake.results(query)}
        )

    async def config(request: Request) -> JSONResponse:
        data = await request.json()
        if "latency" in data:
            fake.latency = float(data["latency"])
        if "empty" in data:
            fake.empty = bool(data["empty"])
        if "results_per_query" in data:
            fake.results_per_query = int(data["results_per_query"])
        if "fail_next" in data:
            fake.fail_next(int(data["fail_next"]), int(data.get("fail_status", 500)))
        return JSONResponse({"ok": True})

    async def queries(request: Request) -> JSONResponse:
        return JSONResponse(fake.queries)

    async def reset(request: Request) -> JSONResponse:
        fake.reset()
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/search", search, methods=["GET"]),
            Route("/_fake/config", config, methods=["POST"]),
            Route("/_fake/queries", queries, methods=["GET"]),
            Route("/_fake/reset", reset, methods=["POST"]),
        ]
    )


class FakeSearchServer(BackgroundServer):
    """`with FakeSearchServer() as s: SEARXNG_URL = s.url`."""

    def __init__(
        self, fake: FakeSearch | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.fake = fake or FakeSearch()
        super().__init__(build_search_app(self.fake), host, port)
