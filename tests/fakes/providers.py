"""Fake Tavily and Brave search APIs: check the key, record queries, inject failures.

:func:`tavily_results` and :func:`brave_results` are payloads shaped as the real APIs send them,
dates included: Tavily's ``published_date`` (RFC 2822, on its news results only), Brave's
``page_age`` (ISO 8601) and ``age`` (``November 30, 2026``, or relative: ``3 days ago``).

They refuse what the real ones refuse, in their words: a bad key (Tavily: 401
``{"detail": {"error": "Unauthorized: missing or invalid API key."}}``; Brave: 422
``SUBSCRIPTION_TOKEN_INVALID``, not 401, in its ``ErrorResponse``), and a query over the
documented limit (Tavily: 400 characters, 400 "Query is too long. Max query length is 400
characters." per docs.tavily.com's best practices for search; Brave: 400 characters and 50
words per its Web Search API reference, 422 ``VALIDATION`` "Unable to validate request
parameter(s)" with pydantic's ``meta.errors``, the shape a live probe of the API shows).
An injected failure answers each API's error body (Tavily ``{"detail": {"error": ...}}``;
Brave ``ErrorResponse`` with ``RATE_LIMITED`` for 429, as its API reference shows, and the same
envelope for the statuses it does not document).
"""

from __future__ import annotations

import http
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


#: The longest query Tavily and Brave take (Brave also at most 50 words).
MAX_QUERY_CHARS = 400
BRAVE_MAX_WORDS = 50


def brave_error(status: int, code: str, detail: str, **meta: Any) -> dict[str, Any]:
    """Brave's ``ErrorResponse`` (its API reference's error schema, as the API sends it)."""
    error: dict[str, Any] = {"id": "5d832250-9396-4f6e-b84a-2a1fe524cd7d", "status": status}
    error |= {"code": code, "detail": detail, "meta": meta or {"component": "api"}}
    return {"type": "ErrorResponse", "error": error, "time": 1663072993}


def build_tavily_app(state: FakeProviderState) -> Starlette:
    async def search(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {state.api_key}":
            error = "Unauthorized: missing or invalid API key."
            return JSONResponse({"detail": {"error": error}}, 401)
        body = await request.json()
        query = body.get("query", "")
        failure = state.record(query, body)
        if len(query) > MAX_QUERY_CHARS:
            error = "Query is too long. Max query length is 400 characters."
            return JSONResponse({"detail": {"error": error}}, 400)
        if failure is not None:
            status, headers = failure
            error = http.HTTPStatus(status).phrase
            return JSONResponse({"detail": {"error": error}}, status, headers=headers)
        payload: dict[str, Any] = {"query": body.get("query"), "response_time": 0.1}
        if state.results is not None:
            payload["results"] = state.results
        return JSONResponse(payload)

    return Starlette(routes=[Route("/search", search, methods=["POST"])])


def build_brave_app(state: FakeProviderState) -> Starlette:
    async def search(request: Request) -> JSONResponse:
        if request.headers.get("x-subscription-token") != state.api_key:
            refused = brave_error(
                422,
                "SUBSCRIPTION_TOKEN_INVALID",
                "The provided subscription token is invalid.",
                component="authentication",
            )
            return JSONResponse(refused, 422)
        params = dict(request.query_params)
        details = {**params, "accept": request.headers.get("accept", "")}
        query = params.get("q", "")
        failure = state.record(query, details)
        if len(query) > MAX_QUERY_CHARS or len(query.split()) > BRAVE_MAX_WORDS:
            too_long = {
                "type": "string_too_long",
                "loc": ["query", "q"],
                "msg": f"String should have at most {MAX_QUERY_CHARS} characters",
                "input": query,
            }
            detail = "Unable to validate request parameter(s)"
            return JSONResponse(brave_error(422, "VALIDATION", detail, errors=[too_long]), 422)
        if failure is not None:
            status, headers = failure
            code, detail = (
                ("RATE_LIMITED", "Request rate limit exceeded for plan.")
                if status == 429
                else ("API_ERROR", http.HTTPStatus(status).phrase)
            )
            return JSONResponse(brave_error(status, code, detail), status, headers=headers)
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
