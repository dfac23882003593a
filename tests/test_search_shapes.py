"""What real search APIs answer besides results (issue 33, item 4).

Each test serves the body the real service sends, on 127.0.0.1, to the real provider; its
docstring names where the shape comes from. Each gives results or one SearchError line that
says what to check.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from core.models import ResearchRequest
from core.research.service import Research
from core.search import (
    BraveProvider,
    SearchError,
    SearchProvider,
    SearxngProvider,
    TavilyProvider,
)
from storage.values import RunStatus, ThreadKey
from tests.fakes import FakeLLMServer
from tests.fakes.server import BackgroundServer

FAST = 0.01


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as c:
        yield c


def answering(status: int, body: str, content_type: str = "application/json") -> Iterator[str]:
    """A server that answers every search with this status and body; yields its URL."""

    async def search(request: Request) -> Response:
        return Response(body, status, media_type=content_type)

    routes = [Route(path, search, methods=["GET", "POST"]) for path in ("/search", "/web/search")]
    with BackgroundServer(Starlette(routes=routes)) as server:
        yield server.url


def searxng_body(results: list[dict[str, Any]], unresponsive: list[list[str]]) -> str:
    """SearXNG's JSON answer (searx/webapp.py, ``format=json``), with every key it sends."""
    return json.dumps(
        {
            "query": "solid-state batteries",
            "number_of_results": 0,
            "results": results,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": [],
            "unresponsive_engines": unresponsive,
        }
    )


#: Engines that did not answer, as SearXNG names them (an engine and its error message).
SILENT = [["google", "timeout"], ["duckduckgo", "CAPTCHA"], ["brave", "too many requests"]]


# --- SearXNG ----------------------------------------------------------------------------------


async def test_searxng_without_the_json_format_says_what_to_enable(
    client: httpx.AsyncClient,
) -> None:
    """An instance whose ``search.formats`` lacks ``json`` aborts with 403 and Werkzeug's HTML
    page (searx/webapp.py: ``flask.abort(403)``; SearXNG's docs, settings.yml ``search:``)."""
    page = (
        "<!doctype html>\n<html lang=en>\n<title>403 Forbidden</title>\n<h1>Forbidden</h1>\n"
        "<p>You don&#39;t have the permission to access the requested resource.</p>\n"
    )
    for url in answering(403, page, "text/html; charset=utf-8"):
        with pytest.raises(SearchError) as caught:
            await SearxngProvider(client, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == (
        "searxng: HTTP 403 (is the json format enabled in SearXNG's settings.yml (search.formats)?)"
    )


async def test_searxng_names_the_engines_that_did_not_answer(client: httpx.AsyncClient) -> None:
    """No result and ``unresponsive_engines`` (SearXNG when its engines time out or meet a
    CAPTCHA): the search fails naming them, rather than look like a topic nothing covers."""
    for url in answering(200, searxng_body([], SILENT)):
        with pytest.raises(SearchError) as caught:
            await SearxngProvider(client, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == (
        "searxng: no results; engines that did not answer: google (timeout), "
        "duckduckgo (CAPTCHA), brave (too many requests)"
    )


async def test_searxng_results_despite_silent_engines_are_results(
    client: httpx.AsyncClient,
) -> None:
    result = {"title": "A", "url": "https://a.example/1", "content": "a"}
    for url in answering(200, searxng_body([result], SILENT)):
        results = await SearxngProvider(client, base_url=url, base_delay=FAST).search("q")
    assert [r.url for r in results] == ["https://a.example/1"]


async def test_a_run_whose_engines_never_answered_says_which(
    service_for: Callable[..., Research], llm_server: FakeLLMServer
) -> None:
    for url in answering(200, searxng_body([], SILENT)):
        service = service_for(llm_server.base_url, url)
        thread = ThreadKey(platform="cli", workspace="local", channel="local", thread="t1")
        run, _ = await service.requests.submit(
            ResearchRequest(topic="batteries", depth=2, thread=thread)
        )
        outcome = await service.executor.execute(run.id, None)
    assert outcome.status is RunStatus.FAILED
    assert outcome.error is not None
    assert "engines that did not answer: google (timeout), duckduckgo (CAPTCHA)" in outcome.error


# --- Tavily -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (432, "This request exceeds your plan's set usage limit. Please upgrade your plan."),
        (433, "This request exceeds the pay-as-you-go limit. You can increase your limit."),
    ],
)
async def test_tavily_limits_say_plan_or_usage_limit(
    client: httpx.AsyncClient, status: int, message: str
) -> None:
    """Tavily answers 432 when the plan's or the key's limit is reached and 433 for the
    pay-as-you-go limit, with ``{"detail": {"error": ...}}`` (docs.tavily.com, the Search
    API's error responses)."""
    body = json.dumps({"detail": {"error": message}})
    for url in answering(status, body):
        provider = TavilyProvider(client, api_key="tvly-k", base_url=url, base_delay=FAST)
        with pytest.raises(SearchError, match=rf"^tavily: HTTP {status} \(plan or usage limit"):
            await provider.search("q")


# --- titles and snippets ----------------------------------------------------------------------

#: A title as engines send it: entities escaped once, the query's words highlighted.
RAW_TITLE = "AT&amp;T &amp; Verizon: <b>5G</b> &quot;coverage&quot; <strong>maps</strong>"
RAW_SNIPPET = "Compare <em>5G</em> maps &ndash; Using &lt;template&gt; in HTML"
TITLE = 'AT&T & Verizon: 5G "coverage" maps'
SNIPPET = "Compare 5G maps – Using <template> in HTML"


def searxng_provider(client: httpx.AsyncClient, url: str) -> SearchProvider:
    return SearxngProvider(client, base_url=url, base_delay=FAST)


def tavily_provider(client: httpx.AsyncClient, url: str) -> SearchProvider:
    return TavilyProvider(client, api_key="k", base_url=url, base_delay=FAST)


def brave_provider(client: httpx.AsyncClient, url: str) -> SearchProvider:
    return BraveProvider(client, api_key="k", base_url=url, base_delay=FAST)


BODIES: dict[str, tuple[Callable[[httpx.AsyncClient, str], SearchProvider], str]] = {
    "searxng": (
        searxng_provider,
        searxng_body(
            [{"title": RAW_TITLE, "url": "https://t.example/", "content": RAW_SNIPPET}], []
        ),
    ),
    "tavily": (
        tavily_provider,
        json.dumps(
            {"results": [{"title": RAW_TITLE, "url": "https://t.example/", "content": RAW_SNIPPET}]}
        ),
    ),
    "brave": (
        brave_provider,
        json.dumps(
            {
                "web": {
                    "results": [
                        {
                            "title": RAW_TITLE,
                            "url": "https://t.example/",
                            "description": RAW_SNIPPET,
                        }
                    ]
                }
            }
        ),
    ),
}


@pytest.mark.parametrize("name", BODIES)
async def test_titles_lose_tags_and_entities_from_every_provider(
    client: httpx.AsyncClient, name: str
) -> None:
    """Brave highlights with ``<strong>`` (its Web Search API reference), SearXNG's engines
    and Tavily pass the page's escaped title (``&amp;``) through; a tag that is not markup
    (``<template>``, written escaped) is text."""
    make, body = BODIES[name]
    for url in answering(200, body):
        (result,) = await make(client, url).search("5g maps")
    assert (result.title, result.snippet) == (TITLE, SNIPPET)
