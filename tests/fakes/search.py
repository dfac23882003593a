"""A fake SearXNG JSON API with deterministic results, failure injection and query recording,
and the result pages themselves. An injected failure answers Werkzeug's error page, as SearXNG
(a Flask app) does.

Results point at pages this server serves (``/pages/<slug>/<i>``, under the address the search
was asked at), so a run that reads its result pages reads them here: an article about the query
wrapped in navigation, a cookie banner and a footer, with a ``robots.txt`` that allows all.
Tests can script a page (``script_page``), slow pages down (``page_latency``) and see which pages
were fetched (``page_requests``). With ``pdf_pages`` > 0 (``/_fake/config``), the page of each
search's first result is a real PDF of that many pages about the query instead, at an address
that names it (``/pages/<slug>/1.pdf``, ``tests.pdfs.topic_pdf``, ``application/pdf``, after the
same page latency).

Dates, as SearXNG sends them: the first result of a search has a ``publishedDate`` (ISO 8601,
:data:`RESULT_DATE`), the others ``null``; the page of result ``i`` declares it was published on
``2026-10-<i>`` (:func:`page_date`) in its ``article:published_time`` meta tag.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import html
import http
import re
import threading
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.fakes.server import BackgroundServer

#: The ``publishedDate`` of a search's first generated result (as SearXNG sends it).
RESULT_DATE = "2026-09-14T08:30:00"
#: With ``pdf_pages`` set, the page of this result (``/pages/<slug>/1``) is a PDF.
PDF_RESULT = 1


def page_date(number: int) -> str:
    """The date the generated page of result ``number`` declares (``YYYY-MM-DD``)."""
    return f"2026-10-{min(number, 28):02d}"


def slug(query: str) -> str:
    """URL-safe, deterministic and distinct for distinct non-ASCII queries."""
    base = "-".join(re.findall(r"[a-z0-9]+", query.lower()))[:60]
    if query.isascii() and base:
        return base
    digest = hashlib.sha1(query.encode()).hexdigest()[:10]
    return f"{base}-{digest}" if base else digest


@dataclass(frozen=True)
class ScriptedPage:
    status: int
    content_type: str
    body: str | bytes
    headers: dict[str, str] | None = None
    delay: float = 0.0


class FakeSearch:
    """State and behaviour of the fake; every method is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queries: list[str] = []
        self._scripted: dict[str, list[dict[str, Any]]] = {}
        self._fail_next = 0
        self._fail_status = 500
        self._pages: dict[str, str] = {}  # slug -> query
        self._scripted_pages: dict[str, ScriptedPage] = {}
        self._page_requests: list[str] = []
        self._pages_released = threading.Event()
        self._pages_released.set()
        self.latency = 0.0
        self.page_latency = 0.0
        self.empty = False
        self.results_per_query = 4
        #: > 0: the first result's page is a PDF of this many pages (see :data:`PDF_RESULT`).
        self.pdf_pages = 0
        self._pdfs: dict[tuple[str, int], bytes] = {}
        #: Searches answered at once right now, and the most ever (concurrency checks).
        self.in_flight = 0
        self.max_in_flight = 0
        #: > 0: searches wait (up to 10 s) until this many are in flight, then all answer and
        #: the barrier is gone (later searches answer at once).
        self.gather = 0
        self._arrivals: asyncio.Condition | None = None

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

    def arrivals(self) -> asyncio.Condition:
        """Notified whenever a search arrives (made on the server's event loop)."""
        if self._arrivals is None:
            self._arrivals = asyncio.Condition()
        return self._arrivals

    @property
    def page_requests(self) -> list[str]:
        """The paths of the pages fetched so far (``/pages/<slug>/<i>``), in order."""
        with self._lock:
            return list(self._page_requests)

    def script_page(
        self,
        path: str,
        body: str = "",
        *,
        status: int = 200,
        content_type: str = "text/html",
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Serve ``body`` at ``path`` (e.g. ``/pages/x/1``) instead of the generated page,
        after ``delay`` seconds; an empty ``body`` with status 200 keeps the generated one."""
        with self._lock:
            self._scripted_pages[path] = ScriptedPage(status, content_type, body, headers, delay)

    def hold_pages(self) -> None:
        """Pages are answered only after :meth:`release_pages` (or 30 s)."""
        self._pages_released.clear()

    def release_pages(self) -> None:
        self._pages_released.set()

    def wait_for_release(self) -> None:
        self._pages_released.wait(30)

    def reset(self) -> None:
        with self._lock:
            self._queries.clear()
            self._scripted.clear()
            self._scripted_pages.clear()
            self._page_requests.clear()
            self._fail_next, self._fail_status = 0, 500
        self._pages_released.set()
        self.latency, self.page_latency, self.empty, self.results_per_query = 0.0, 0.0, False, 4
        self.pdf_pages = 0
        self.in_flight = self.max_in_flight = self.gather = 0

    def record(self, query: str) -> int | None:
        """Record the query; return an HTTP status to fail with, if a failure is pending."""
        with self._lock:
            self._queries.append(query)
            if self._fail_next > 0:
                self._fail_next -= 1
                return self._fail_status
            return None

    def results(self, query: str, base_url: str = "https://example.org/") -> list[dict[str, Any]]:
        """The results for ``query``; generated ones point at pages under ``base_url``."""
        with self._lock:
            scripted = self._scripted.get(query)
            if scripted is None and not self.empty:
                self._pages[slug(query)] = query
        if scripted is not None:
            return scripted
        if self.empty:
            return []
        base = base_url.rstrip("/")
        pdf = self.pdf_pages > 0
        return [
            {
                "title": f"{query} — source {i}",
                # A PDF result's address names it, as most do (``/report.pdf``).
                "url": f"{base}/pages/{slug(query)}/{i}"
                + (".pdf" if pdf and i == PDF_RESULT else ""),
                "content": f"Source {i} reports facts, figures and context about {query}.",
                "engine": "fake",
                "publishedDate": RESULT_DATE if i == 1 else None,
            }
            for i in range(1, self.results_per_query + 1)
        ]

    def page(self, path: str, name: str, number: int) -> ScriptedPage:
        """What the page at ``path`` answers; records the fetch."""
        with self._lock:
            self._page_requests.append(path)
            scripted = self._scripted_pages.get(path)
            query = self._pages.get(name)
        pdf_pages = self.pdf_pages
        if query is None:
            generated = ScriptedPage(
                404, "text/html", "<html><body><h1>Not found</h1></body></html>"
            )
        elif pdf_pages > 0 and number == PDF_RESULT:
            generated = ScriptedPage(200, "application/pdf", self._pdf(query, pdf_pages))
        else:
            generated = ScriptedPage(200, "text/html; charset=utf-8", article(query, number))
        if scripted is None:
            return generated
        if not scripted.body and scripted.status == 200:
            return ScriptedPage(**{**scripted.__dict__, "body": generated.body})
        return scripted

    def pdf_for(self, query: str) -> bytes:
        """The PDF result of ``query`` at the configured length (built once)."""
        return self._pdf(query, self.pdf_pages)

    def _pdf(self, query: str, pages: int) -> bytes:
        """The PDF about ``query`` (built once per query and length)."""
        from tests.pdfs import topic_pdf

        key = (query, pages)
        with self._lock:
            cached = self._pdfs.get(key)
        if cached is None:
            cached = topic_pdf(query, pages)
            with self._lock:
                if len(self._pdfs) >= 64:
                    self._pdfs.clear()
                self._pdfs[key] = cached
        return cached


def article(query: str, number: int) -> str:
    """A result page: an article about ``query`` inside the usual boilerplate."""
    query = html.escape(query)
    facts = [
        f"The full report on {query} states that measured adoption rose {10 + number}% in 2026, "
        f"according to page {number} of the source.",
        f"Analysts studying {query} describe three drivers: cost, regulation and demand. Each "
        f"is examined with data from page {number}.",
        f"Critics of {query} point to open risks that page {number} lists in detail, from "
        "supply constraints to unclear long-term effects.",
    ]
    paragraphs = "\n".join(f"<p>{fact}</p>" for fact in facts)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{query} — source {number}</title>
<meta property="article:published_time" content="{page_date(number)}T09:00:00Z"></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About us</a> | <a href="/subscribe">Subscribe</a></nav>
<div class="cookie-banner" id="cookie-consent">We use cookies to improve your experience.
<button>Accept all cookies</button></div>
<main><article>
<h1>{query} — source {number}</h1>
{paragraphs}
</article></main>
<footer>© 2026 Example Media. All rights reserved. Privacy policy. Terms of use.</footer>
</body></html>"""


def werkzeug_error(status: int) -> Response:
    """The error page SearXNG answers a failure with: it is a Flask app, and Werkzeug's
    ``HTTPException.get_body`` writes this page (``<title>500 Internal Server Error</title>``)."""
    phrase = http.HTTPStatus(status).phrase
    body = (
        f"<!doctype html>\n<html lang=en>\n<title>{status} {phrase}</title>\n"
        f"<h1>{phrase}</h1>\n<p>The server could not complete the request.</p>\n"
    )
    return Response(body, status, media_type="text/html; charset=utf-8")


def build_search_app(fake: FakeSearch) -> Starlette:
    async def search(request: Request) -> Response:
        query = request.query_params.get("q", "")
        if request.query_params.get("format") != "json":
            return JSONResponse({"error": "format must be json"}, 400)
        if not query.strip():
            return JSONResponse({"error": "missing q"}, 400)
        status = fake.record(query)
        prepared = None
        if fake.pdf_pages > 0 and status is None:
            # The PDF result's file is built while the search's latency passes, not when its
            # page is fetched: a real site's server spends none of this machine's CPU then.
            prepared = asyncio.create_task(asyncio.to_thread(fake.pdf_for, query))
        arrivals = fake.arrivals()
        async with arrivals:  # (the app runs on one event loop)
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
            arrivals.notify_all()
        try:
            if fake.gather:
                async with arrivals:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            arrivals.wait_for(lambda: fake.in_flight >= fake.gather), 10
                        )
                    fake.gather = 0  # one barrier: later searches answer at once
            if fake.latency > 0:
                await asyncio.sleep(fake.latency)
        finally:
            fake.in_flight -= 1
        if prepared is not None:
            await prepared
        if status is not None:
            return werkzeug_error(status)
        results = fake.results(query, str(request.base_url))
        return JSONResponse({"query": query, "number_of_results": 0, "results": results})

    async def page(request: Request) -> Response:
        name, number = request.path_params["name"], request.path_params["number"]
        answer = fake.page(request.url.path, name, number)
        await asyncio.to_thread(fake.wait_for_release)
        if fake.page_latency + answer.delay > 0:
            await asyncio.sleep(fake.page_latency + answer.delay)
        return Response(answer.body, answer.status, answer.headers, answer.content_type)

    async def robots(request: Request) -> PlainTextResponse:
        return PlainTextResponse("User-agent: *\nAllow: /\n")

    async def config(request: Request) -> JSONResponse:
        data = await request.json()
        if "latency" in data:
            fake.latency = float(data["latency"])
        if "empty" in data:
            fake.empty = bool(data["empty"])
        if "page_latency" in data:
            fake.page_latency = float(data["page_latency"])
        if "results_per_query" in data:
            fake.results_per_query = int(data["results_per_query"])
        if "pdf_pages" in data:
            fake.pdf_pages = int(data["pdf_pages"])
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
            Route("/pages/{name}/{number:int}", page, methods=["GET"]),
            Route("/pages/{name}/{number:int}.pdf", page, methods=["GET"]),
            Route("/robots.txt", robots, methods=["GET"]),
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
