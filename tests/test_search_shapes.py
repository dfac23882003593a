"""What real search APIs answer besides results (issue 33, item 4; issue 51, item 5).

Each test serves the body the real service sends, on 127.0.0.1, to the real provider; its
docstring names where the shape comes from. Each gives results or one SearchError line that
says what to check.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from core.operations.job import run_attended
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.search import (
    BraveProvider,
    SearchError,
    SearchProvider,
    SearxngProvider,
    TavilyProvider,
)
from core.values import RunStatus, ThreadKey
from tests.fakes import FakeLLMServer
from tests.fakes.server import BackgroundServer

FAST = 0.01


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False) as c:
        yield c


def answering(
    status: int,
    body: str,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
    calls: list[str] | None = None,
) -> Iterator[str]:
    """A server that answers every search with this status, body and headers (and records
    each search's path in ``calls``); yields its URL."""

    async def search(request: Request) -> Response:
        if calls is not None:
            calls.append(request.url.path)
        return Response(body, status, headers=headers, media_type=content_type)

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
        "searxng: HTTP 403 Forbidden "
        "(is the json format enabled in SearXNG's settings.yml (search.formats)?)"
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
        outcome = await run_attended(service, run.id, None)
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
        with pytest.raises(SearchError) as caught:
            await provider.search("q")
    # Tavily's own words, then what to check.
    assert str(caught.value).startswith(f'tavily: HTTP {status} "{message}" (plan or usage limit')


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


# --- error bodies that keep their words (issue 51, item 5) ------------------------------------

MAKERS: dict[str, Callable[[httpx.AsyncClient, str], SearchProvider]] = {
    "searxng": searxng_provider,
    "tavily": tavily_provider,
    "brave": brave_provider,
}

#: nginx's own 502 page (src/http/ngx_http_special_response.c: ngx_http_error_502_page and the
#: error tail), what the reverse proxy in front of a search service answers when it is down.
NGINX_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n"
    "</body>\r\n</html>\r\n"
)


@pytest.mark.parametrize("name", MAKERS)
async def test_an_nginx_error_page_is_its_title_never_its_html(
    client: httpx.AsyncClient, name: str
) -> None:
    """nginx answers 502 with its HTML page when the service behind it is down
    (ngx_http_special_response.c); the line is the page's title, retried like any 5xx."""
    calls: list[str] = []
    for url in answering(502, NGINX_502, "text/html", calls=calls):
        with pytest.raises(SearchError) as caught:
            await MAKERS[name](client, url).search("q")
    assert str(caught.value) == f"{name}: HTTP 502 Bad Gateway after 3 attempts"
    assert len(calls) == 3


@asynccontextmanager
async def raw_answer(head: bytes, body: bytes) -> AsyncIterator[str]:
    """A server that answers every request with ``head`` and ``body`` byte for byte and then
    closes the connection (a server or proxy that dies mid-answer); yields its URL."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"content-length:\s*(\d+)", request, re.IGNORECASE)
        if length:  # (Tavily POSTs a body: read it, so the close is a clean one)
            await reader.readexactly(int(length.group(1)))
        writer.write(head + body)
        await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


CUT_BODY = b'{"results": [{"title": "Grid batteries", "url": "https://'
CUT_OFF = [
    # Content-Length says 900, the connection closes after the first bytes (h11: "peer closed
    # connection without sending complete message body (received 56 bytes, expected 900)").
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 900\r\n\r\n",
    # A chunked answer whose last chunk never comes (h11: "... (incomplete chunked read)").
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    + f"{len(CUT_BODY):x}\r\n".encode(),
]


@pytest.mark.parametrize("name", MAKERS)
@pytest.mark.parametrize("head", CUT_OFF, ids=["content-length", "chunked"])
async def test_an_answer_cut_off_mid_way_is_named_as_such(
    client: httpx.AsyncClient, name: str, head: bytes
) -> None:
    """A server that closes the connection mid-body: httpx raises RemoteProtocolError "peer
    closed connection without sending complete message body" (h11, through httpcore). The
    line says the answer was cut off, not that the server could not be reached."""
    async with raw_answer(head, CUT_BODY + (b"\r\n" if b"chunked" in head else b"")) as url:
        with pytest.raises(SearchError) as caught:
            await MAKERS[name](client, url).search("q")
    assert str(caught.value) == (
        f"{name}: the answer was cut off mid-way (the server closed the connection before its "
        "end) after 3 attempts"
    )
    assert caught.value.reason.words("zh").startswith(f"{name}：响应中途被截断")


#: nginx's 401 page and challenge for ``auth_basic "Restricted";`` (ngx_http_auth_basic_module;
#: the reverse-proxy setup of SearXNG guides, e.g. linuxserver's SWAG searxng.subdomain.conf:
#: "enable the next two lines for http auth").
NGINX_401 = (
    "<html>\r\n<head><title>401 Authorization Required</title></head>\r\n<body>\r\n"
    "<center><h1>401 Authorization Required</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)


def behind_basic_auth(user: str, password: str) -> Iterator[str]:
    """SearXNG behind nginx's ``auth_basic``: without the right login, 401 with
    ``WWW-Authenticate: Basic realm="Restricted"``; with it, SearXNG's JSON."""
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    async def search(request: Request) -> Response:
        if request.headers.get("authorization") != expected:
            challenge = {"WWW-Authenticate": 'Basic realm="Restricted"'}
            return Response(NGINX_401, 401, headers=challenge, media_type="text/html")
        result = {"title": "A", "url": "https://a.example/1", "content": "a"}
        return Response(searxng_body([result], []), media_type="application/json")

    with BackgroundServer(Starlette(routes=[Route("/search", search)])) as server:
        yield server.url


async def test_searxng_behind_basic_auth_says_it_needs_a_login_and_where_to_put_it(
    client: httpx.AsyncClient,
) -> None:
    """A reverse proxy asking for HTTP basic auth: the line names the login and the setting
    that carries it (httpx sends a URL's user and password as basic auth), never retried; the
    same URL with them gives results, and a wrong password never shows in the line."""
    for url in behind_basic_auth("fathom", "s3cret-pw"):
        with pytest.raises(SearchError) as caught:
            await SearxngProvider(client, base_url=url, base_delay=FAST).search("q")
        assert str(caught.value) == (
            'searxng: HTTP 401: needs a login (HTTP basic auth, realm "Restricted"); put the user '
            "and password in SEARXNG_URL: https://user:password@host/"
        )
        with_login = url.replace("http://", "http://fathom:s3cret-pw@")
        results = await SearxngProvider(client, base_url=with_login, base_delay=FAST).search("q")
        assert [r.url for r in results] == ["https://a.example/1"]
        wrong = url.replace("http://", "http://fathom:wrong-pw@")
        with pytest.raises(SearchError) as refused:
            await SearxngProvider(client, base_url=wrong, base_delay=FAST).search("q")
        assert "needs a login" in str(refused.value) and "wrong-pw" not in str(refused.value)


#: oauth2-proxy's sign-in page (pkg/app/pagewriter/sign_in.html, as rendered for Google).
OAUTH2_PROXY_SIGN_IN = """<!DOCTYPE html>
<html lang="en" charset="utf-8">
  <head>
    <meta charset="utf-8">
    <title>Sign In</title>
  </head>
  <body class="has-background-light">
  <section class="section">
    <div class="box block sign-in-box has-text-centered">
      <form method="GET" action="/oauth2/start">
        <input type="hidden" name="rd" value="/search?q=q&amp;format=json">
          <button type="submit" class="button block is-primary">Sign in with Google</button>
      </form>
    </div>
  </section>
  <footer class="footer"><p>Secured with
    <a href="https://github.com/oauth2-proxy/oauth2-proxy#oauth2_proxy">OAuth2 Proxy</a>
    version 7.6.0</p></footer>
  </body>
</html>
"""
#: Authelia's portal (web/index.html): a single-page app, no form in the HTML.
AUTHELIA_PORTAL = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8" />
  <meta name="description" content="Authelia login portal for your apps" />
  <title>Login - Authelia</title>
</head>
<body data-basepath="" data-rememberme="true" data-resetpassword="true">
  <noscript>You need to enable JavaScript to run this app.</noscript>
  <div id="root"></div>
  <script type="module" src="/static/js/index.js"></script>
</body>
</html>
"""
LOGIN_HINT = (
    "let the bot's requests through the login (a rule for its address or the search path) or "
    "point SEARXNG_URL past it"
)


def login_in_front(redirect_to: str, page_path: str, page: str) -> Iterator[str]:
    """A login in front of SearXNG: ``/search`` answers 302 to ``redirect_to`` (``{url}`` is
    this server), and ``page_path`` serves the login ``page``; yields the server's URL."""
    where: list[str] = []

    async def search(request: Request) -> Response:
        target = redirect_to.format(url=where[0])
        return Response(f"Found. Redirecting to {target}", 302, headers={"Location": target})

    async def login(request: Request) -> Response:
        return Response(page, 200, media_type="text/html; charset=utf-8")

    routes = [Route("/search", search), Route(page_path, login)]
    with BackgroundServer(Starlette(routes=routes)) as server:
        where.append(server.url)
        yield server.url


@pytest.mark.parametrize(
    ("redirect_to", "page_path", "page", "shown"),
    [
        # oauth2-proxy behind nginx auth_request (oauth2-proxy's docs, "Integration":
        # ``location @oauth2_signin { return 302 /oauth2/sign_in?rd=...; }``).
        (
            "/oauth2/sign_in?rd={url}/search%3Fq%3Dq%26format%3Djson",
            "/oauth2/sign_in",
            OAUTH2_PROXY_SIGN_IN,
            'a login page at 127.0.0.1 /oauth2/sign_in ("Sign In")',
        ),
        # Authelia: 302 to its portal with ``rd`` and ``rm`` (internal/handlers, "Found.
        # Redirecting to ..."), whose page is the portal's index.html.
        (
            "{url}/?rd={url}%2Fsearch%3Fq%3Dq&rm=GET",
            "/",
            AUTHELIA_PORTAL,
            'a login page at 127.0.0.1 ("Login - Authelia")',
        ),
    ],
    ids=["oauth2-proxy", "authelia"],
)
async def test_a_redirect_to_a_login_page_is_named_with_what_to_check(
    redirect_to: str, page_path: str, page: str, shown: str
) -> None:
    """The search client follows redirects (core/runtime.py): a login in front of the instance
    ends at a login page (200, HTML). The line names it, with the page's title, never
    "malformed JSON"."""
    async with httpx.AsyncClient(trust_env=False, follow_redirects=True) as following:
        for url in login_in_front(redirect_to, page_path, page):
            with pytest.raises(SearchError) as caught:
                await SearxngProvider(following, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == f"searxng: {shown} answered instead of the search; {LOGIN_HINT}"


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        # Authelia's portal on its own host (``rd`` carries the search, which is not shown).
        (
            "https://auth.example.com/?rd=https%3A%2F%2Fsearch.example.com%2Fsearch%3Fq%3Dq&rm=GET",
            "auth.example.com",
        ),
        # Cloudflare Access: "unauthenticated requests receive a redirect or 403 error"
        # (Cloudflare's "Authenticate coding agents"), to the team's login page.
        (
            "https://acme.cloudflareaccess.com/cdn-cgi/access/login/search.example.com"
            "?kid=7c1ac3a4&redirect_url=%2Fsearch%3Fq%3Dq",
            "acme.cloudflareaccess.com /cdn-cgi/access/login/search.example.com",
        ),
    ],
    ids=["authelia", "cloudflare-access"],
)
async def test_a_redirect_not_followed_names_the_login_it_leads_to(
    client: httpx.AsyncClient, location: str, shown: str
) -> None:
    """A client that does not follow redirects sees the 302 itself: it is named for where it
    leads, without the query the redirect carries."""
    body = f"Found. Redirecting to {location}"
    calls: list[str] = []
    for url in answering(302, body, "text/html", headers={"Location": location}, calls=calls):
        with pytest.raises(SearchError) as caught:
            await SearxngProvider(client, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == (
        f"searxng: HTTP 302: redirected to a login page at {shown}; {LOGIN_HINT}"
    )
    assert len(calls) == 1


async def test_a_login_that_redirects_to_itself_is_a_loop_not_a_crash() -> None:
    """A login proxy that sends every request back to itself (a cookie the bot never keeps):
    httpx gives up after its 20 redirects (``TooManyRedirects``); one line, not retried."""
    calls: list[str] = []
    location = {"Location": "/search?q=q&format=json"}
    for url in answering(302, "Found.", "text/html", headers=location, calls=calls):
        async with httpx.AsyncClient(trust_env=False, follow_redirects=True) as following:
            with pytest.raises(SearchError) as caught:
                await SearxngProvider(following, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == (
        "searxng: redirected again and again (a loop, as a login that sends back to itself)"
    )
    assert len(calls) == 21  # one search, followed 20 times


async def test_oauth2_proxy_s_own_sign_in_page_is_a_login_not_the_json_format(
    client: httpx.AsyncClient,
) -> None:
    """oauth2-proxy in front of SearXNG answers a request without a session with its sign-in
    page and 403 (oauthproxy.go: ``p.SignInPage(rw, req, http.StatusForbidden)``): a login,
    not SearXNG's disabled JSON format (its other 403)."""
    for url in answering(403, OAUTH2_PROXY_SIGN_IN, "text/html; charset=utf-8"):
        with pytest.raises(SearchError) as caught:
            await SearxngProvider(client, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == (
        f'searxng: HTTP 403: a login page ("Sign In") answered instead of the search; {LOGIN_HINT}'
    )


#: Cloudflare's challenge page: ``cf-mitigated: challenge`` is set on every challenge page
#: (Cloudflare's "Detect a Challenge Page response"), and the page's title is "Just a moment...".
CHALLENGE_PAGE = (
    '<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>'
    '<meta http-equiv="Content-Type" content="text/html; charset=UTF-8">'
    '<meta name="robots" content="noindex,nofollow"></head><body><div class="main-wrapper" '
    'role="main"><div class="main-content"><noscript><div class="h2"><span id="challenge-error-'
    'text">Enable JavaScript and cookies to continue</span></div></noscript></div></div>'
    "<script>(function(){window._cf_chl_opt={cvId: '3',cZone: \"search.example.com\"};"
    "}());</script></body></html>"
)


@pytest.mark.parametrize("name", MAKERS)
async def test_a_bot_challenge_is_named_and_not_retried(
    client: httpx.AsyncClient, name: str
) -> None:
    """Cloudflare in front of the service challenges the bot: 403, ``cf-mitigated:
    challenge`` and the "Just a moment..." page (Cloudflare's "Detect a Challenge Page
    response"). Only a browser passes it, so it is named and not tried again."""
    calls: list[str] = []
    headers = {"cf-mitigated": "challenge", "server": "cloudflare"}
    for url in answering(403, CHALLENGE_PAGE, "text/html; charset=UTF-8", headers, calls):
        with pytest.raises(SearchError) as caught:
            await MAKERS[name](client, url).search("q")
    assert str(caught.value) == (
        f'{name}: HTTP 403: stopped by a bot challenge (Cloudflare\'s "Just a moment...", which '
        "only a browser passes); let the bot's address through (a WAF skip rule) or use an "
        "address without the challenge"
    )
    assert len(calls) == 1  # a challenge does not pass on a second try


LIMITER_HINT = (
    "SearXNG's limiter takes the bot for a scraper: set server.limiter to false in "
    "settings.yml, or add the bot's address to pass_ip in limiter.toml"
)


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ("Too Many Requests", "HTTP 429 Too Many Requests"),
        (
            "IP is on BLOCKLIST - 10.0.0.0/8 is blocked",
            'HTTP 429 "IP is on BLOCKLIST - 10.0.0.0/8 is blocked"',
        ),
    ],
    ids=["bot-detection", "blocklist"],
)
async def test_searxng_s_limiter_says_what_to_change(
    client: httpx.AsyncClient, body: str, shown: str
) -> None:
    """SearXNG's limiter refuses what it takes for a bot with 429 and a plain body, sent as
    text/html (searx/botdetection: ``too_many_requests`` -> ``flask.make_response(('Too Many
    Requests', 429))``; a blocklisted address: ``'IP is on BLOCKLIST - %s'``)."""
    for url in answering(429, body, "text/html; charset=utf-8"):
        with pytest.raises(SearchError) as caught:
            await SearxngProvider(client, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == f"searxng: {shown} ({LIMITER_HINT}) after 3 attempts"


async def test_a_web_page_where_the_api_should_be_is_named(client: httpx.AsyncClient) -> None:
    """A single-page app answers every path with its index page and 200 (nginx's
    ``try_files $uri /index.html``): an address that is not the search API's. Reached through
    a redirect, it is named where it was, and is no login page unless it is one."""
    page = "<!doctype html><html><head><title>Open WebUI</title></head><body></body></html>"
    for url in answering(200, page, "text/html"):
        with pytest.raises(SearchError) as caught:
            await SearxngProvider(client, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == (
        'searxng: a web page ("Open WebUI") answered instead of the API\'s JSON; check SEARXNG_URL'
    )
    async with httpx.AsyncClient(trust_env=False, follow_redirects=True) as following:
        for url in login_in_front("{url}/app/", "/app/", page):
            with pytest.raises(SearchError) as caught:
                await SearxngProvider(following, base_url=url, base_delay=FAST).search("q")
    assert str(caught.value) == (
        'searxng: a web page at 127.0.0.1 /app/ ("Open WebUI") answered instead of the API\'s '
        "JSON; check SEARXNG_URL"
    )


async def test_tavily_s_400_keeps_its_words(client: httpx.AsyncClient) -> None:
    """Tavily refuses a query over its limit with 400 and ``{"detail": {"error": ...}}``
    (docs.tavily.com, "Best practices for search": "Query is too long. Max query length is 400
    characters."); the line keeps its words, and a 400 is not retried."""
    body = json.dumps(
        {"detail": {"error": "Query is too long. Max query length is 400 characters."}}
    )
    calls: list[str] = []
    for url in answering(400, body, calls=calls):
        with pytest.raises(SearchError) as caught:
            await tavily_provider(client, url).search("q")
    assert str(caught.value) == (
        'tavily: HTTP 400 "Query is too long. Max query length is 400 characters."'
    )
    assert len(calls) == 1


def brave_error(status: int, code: str, detail: str, listed: bool = False) -> str:
    """Brave's ``ErrorResponse``: ``error`` as the API sends it, or ``errors: [...]`` as its
    API reference's examples show it (api-dashboard.search.brave.com, web search, 422/429)."""
    error = {
        "id": "5d832250-9396-4f6e-b84a-2a1fe524cd7d",
        "status": status,
        "code": code,
        "detail": detail,
        "meta": {"component": "authentication" if status == 422 else "rate_limiter"},
    }
    shape = {"errors": [error]} if listed else {"error": error}
    return json.dumps({"type": "ErrorResponse", **shape, "time": 1663072993})


@pytest.mark.parametrize("listed", [False, True], ids=["error", "errors"])
async def test_brave_s_error_response_keeps_its_words(
    client: httpx.AsyncClient, listed: bool
) -> None:
    """Brave answers a bad key with 422 ``SUBSCRIPTION_TOKEN_INVALID`` (not 401), and a spent
    rate with 429 ``RATE_LIMITED``; the line says what Brave said."""
    invalid = brave_error(
        422, "SUBSCRIPTION_TOKEN_INVALID", "The provided subscription token is invalid.", listed
    )
    for url in answering(422, invalid):
        with pytest.raises(SearchError) as caught:
            await brave_provider(client, url).search("q")
    assert str(caught.value) == 'brave: HTTP 422 "The provided subscription token is invalid."'
    limited = brave_error(429, "RATE_LIMITED", "Request rate limit exceeded for plan.", listed)
    for url in answering(429, limited):
        with pytest.raises(SearchError) as caught:
            await brave_provider(client, url).search("q")
    assert str(caught.value) == (
        'brave: HTTP 429 "Request rate limit exceeded for plan." after 3 attempts'
    )


async def test_brave_s_validation_error_names_the_field(client: httpx.AsyncClient) -> None:
    """Brave's 422 ``VALIDATION`` says "Unable to validate request parameter(s)" and names the
    field in pydantic's ``meta.errors`` (a live probe's shape: ``loc``, ``msg``, ``type``)."""
    body = {
        "type": "ErrorResponse",
        "error": {
            "code": "VALIDATION",
            "detail": "Unable to validate request parameter(s)",
            "meta": {
                "errors": [
                    {"loc": ["query", "country"], "msg": "Input should be 'AR', 'AU' or 'ALL'"}
                ]
            },
            "status": 422,
        },
    }
    for url in answering(422, json.dumps(body)):
        with pytest.raises(SearchError) as caught:
            await brave_provider(client, url).search("q")
    assert str(caught.value) == (
        'brave: HTTP 422 "Unable to validate request parameter(s) '
        "(query.country: Input should be 'AR', 'AU' or 'ALL')\""
    )
