"""Fake Tavily and Brave search APIs: check the key, record queries, inject failures.

:func:`tavily_results` and :func:`brave_results` are payloads shaped as the real APIs send them,
dates included: Tavily's ``published_date`` (RFC 2822, on its news results only), Brave's
``page_age`` (ISO 8601) and ``age`` (``November 30, 2026``, or relative: ``3 days ago``).
"""

from __future__ import annotations

import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.server import BackgroundServer


def tavily_results(base: str = "https://news.example") -> list[dict[str, Any]]:
    """Two results: a news one with ``published_date``, a general one without."""
    return [
        {
            "title": "Grid batteries pass 1 TWh",
            "url": f"{base}/grid-batteries",
            "content": "Installed grid storage passed one terawatt-hour this year.",
            "score": 0.91,
            "raw_content": None,
            "published_date": "Mon, 30 Nov 2026 08:15:00 GMT",
        },
        {
            "title": "What is a grid battery?",
            "url": f"{base}/explainer",
            "content": "An explainer on grid-scale storage.",
            "score": 0.55,
            "raw_content": None,
        },
    ]


def brave_results(base: str = "https://web.example") -> list[dict[str, Any]]:
    """Three web results: one with ``page_age`` and ``age``, one with a relative ``age`` only,
    one without either."""
    return [
        {
            "type": "search_result",
            "title": "Grid <strong>batteries</strong> pass 1 TWh",
            "url": f"{base}/grid-batteries",
            "description": "Installed <strong>grid storage</strong> passed one terawatt-hour.",
            "page_age": "2026-11-30T08:15:00",
            "age": "November 30, 2026",
            "language": "en",
            "family_friendly": True,
        },
        {
            "type": "search_result",
            "title": "Storage prices this week",
            "url": f"{base}/prices",
            "description": "Prices of lithium cells fell again.",
            "age": "3 days ago",
        },
        {
            "type": "search_result",
            "title": "Grid storage (encyclopedia)",
            "url": f"{base}/encyclopedia",
            "description": "Grid energy storage is a collection of methods.",
        },
    ]


class FakeProviderState:
    """Shared by both fakes; safe to touch from the test thread while the server runs."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self._lock = threading.Lock()
        self.queries: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] | None = None  # None: omit the results field
        self._failures: list[tuple[int, dict[str, str]]] = []

    def fail_next(self, n: int, status: int = 500, retry_after: str | None = None) -> None:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        with self._lock:
            self._failures = [(status, headers)] * n

    def record(self, query: str, details: dict[str, Any]) -> tuple[int, dict[str, str]] | None:
        with self._lock:
            self.queries.append(query)
            self.requests.append(details)
            return self._failures.pop(0) if self._failures else None


def build_tavily_app(state: FakeProviderState) -> Starlette:
    async def search(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {state.api_key}":
            return JSONResponse({"detail": {"error": "Unauthorized"}}, 401)
        body = await request.json()
        failure = state.record(body.get("query", ""), body)
        if failure is not None:
            return JSONResponse({"detail": "fake failure"}, failure[0], headers=failure[1])
        payload: dict[str, Any] = {"query": body.get("query"), "response_time": 0.1}
        if state.results is not None:
            payload["results"] = state.results
        return JSONResponse(payload)

    return Starlette(routes=[Route("/search", search, methods=["POST"])])


def build_brave_app(state: FakeProviderState) -> Starlette:
    async def search(request: Request) -> JSONResponse:
        if request.headers.get("x-subscription-token") != state.api_key:
            return JSONResponse({"type": "ErrorResponse", "error": {"code": "AUTH"}}, 401)
        params = dict(request.query_params)
        details = {**params, "accept": request.headers.get("accept", "")}
        failure = state.record(params.get("q", ""), details)
        if failure is not None:
            return JSONResponse({"type": "ErrorResponse"}, failure[0], headers=failure[1])
        payload: dict[str, Any] = {"type": "search", "query": {"original": params.get("q")}}
        if state.results is not None:
            payload["web"] = {"type": "search", "results": state.results}
        return JSONResponse(payload)

    return Starlette(routes=[Route("/web/search", search, methods=["GET"])])


class FakeTavilyServer(BackgroundServer):
    def __init__(self, api_key: str = "tvly-test-key") -> None:
        self.fake = FakeProviderState(api_key)
        super().__init__(build_tavily_app(self.fake))


class FakeBraveServer(BackgroundServer):
    def __init__(self, api_key: str = "brave-test-key") -> None:
        self.fake = FakeProviderState(api_key)
        super().__init__(build_brave_app(self.fake))
