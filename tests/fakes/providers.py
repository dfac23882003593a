"""Fake Tavily and Brave search APIs: check the key, record queries, inject failures."""

from __future__ import annotations

import threading
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.server import BackgroundServer


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
