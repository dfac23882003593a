"""The fakes behave like the real services as seen through the real `openai` SDK and httpx."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes import (
    BackgroundServer,
    Fail,
    FakeLLMServer,
    FakeSearchServer,
    Hang,
    Reply,
    build_search_app,
)
from tests.fakes.search import FakeSearch

REPO = Path(__file__).resolve().parent.parent
PLANNER = (
    'Decide the next search. Answer JSON {{"nextSearchTopic": str|null, "shouldContinue": bool}}.'
    "\nTopic: solid-state batteries\n\nTopics already searched:\n{searched}\n\nFindings: ..."
)
WRITER = (
    "Write the report.\nTopic: solid-state batteries\n\nSources:\n"
    "[1] Battery news — https://example.org/a\n"
    "    (search: batteries) Solid-state cells passed 1,000 cycles.\n"
    "[2] Lab results — https://example.org/b\n"
    "    (search: batteries) The lab measured 400 Wh/kg.\n"
)


@pytest.fixture
def llm(llm_server: FakeLLMServer) -> FakeLLMServer:
    return llm_server


@pytest.fixture
def search(search_server: FakeSearchServer) -> FakeSearchServer:
    return search_server


MakeClient = Callable[..., openai.AsyncOpenAI]


@pytest.fixture
async def client(llm: FakeLLMServer) -> AsyncIterator[MakeClient]:
    """Real SDK clients pointed at the fake, closed before the test's event loop goes away."""
    made: list[openai.AsyncOpenAI] = []

    def make(**kwargs: Any) -> openai.AsyncOpenAI:
        made.append(openai.AsyncOpenAI(base_url=llm.base_url, api_key="k", **kwargs))
        return made[-1]

    yield make
    for c in made:
        await c.close()


async def ask(c: openai.AsyncOpenAI, prompt: str, **kwargs: Any) -> str:
    resp = await c.chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}], **kwargs
    )
    return resp.choices[0].message.content or ""


async def test_planner_advances_with_searched_topics_and_stops(
    llm: FakeLLMServer, client: MakeClient
) -> None:
    c = client()
    first = json.loads(
        await ask(c, PLANNER.format(searched=""), response_format={"type": "json_object"})
    )
    assert first == {"nextSearchTopic": "solid-state batteries — overview", "shouldContinue": True}
    third = json.loads(await ask(c, PLANNER.format(searched="- a\n- b")))
    assert third["nextSearchTopic"] == "solid-state batteries — key players"
    llm.fake.stop_after = 2
    assert json.loads(await ask(c, PLANNER.format(searched="- a\n- b"))) == {
        "nextSearchTopic": None,
        "shouldContinue": False,
    }
    assert [r.role for r in llm.fake.requests] == ["planner"] * 3


async def test_writer_cites_numbered_sources_only(llm: FakeLLMServer, client: MakeClient) -> None:
    c = client()
    resp = await c.chat.completions.create(
        model="writer-x", messages=[{"role": "user", "content": WRITER}]
    )
    report = resp.choices[0].message.content or ""
    assert report.startswith("# Report: solid-state batteries")
    for header in ("Executive summary", "Main findings", "Conclusions", "Open questions"):
        assert f"## {header}" in report
    assert "[1]" in report and "[2]" in report and "[3]" not in report
    # it cites what it copies, as a writer that cites correctly does
    assert "- Solid-state cells passed 1,000 cycles. [1]" in report
    assert resp.model == "writer-x" and resp.usage is not None
    assert resp.usage.prompt_tokens == -(-len(WRITER) // 4)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert "[" not in await ask(c, "Write the report.\nTopic: x\n(no sources)")
    assert llm.fake.requests_for("writer")


async def test_scripted_500_is_retried_by_sdk(llm: FakeLLMServer, client: MakeClient) -> None:
    llm.fake.script("writer", Fail(500), Reply("done"))
    assert await ask(client(max_retries=2), "hello") == "done"
    assert len(llm.fake.requests) == 2


async def test_retry_after_is_honoured(llm: FakeLLMServer, client: MakeClient) -> None:
    llm.fake.script("writer", Fail(429, headers={"Retry-After": "1"}))
    started = time.monotonic()
    assert "# Report" in await ask(client(max_retries=2), "hello")
    assert time.monotonic() - started >= 0.95  # default backoff would be <= 0.5 s
    assert len(llm.fake.requests) == 2


async def test_exhausted_retries_raise(llm: FakeLLMServer, client: MakeClient) -> None:
    llm.fake.script("planner", *[Fail(503, headers={"Retry-After": "0.01"})] * 3)
    with pytest.raises(openai.InternalServerError):
        await ask(client(max_retries=2), PLANNER.format(searched=""))
    assert len(llm.fake.requests) == 3


async def test_reject_response_format(llm: FakeLLMServer, client: MakeClient) -> None:
    llm.fake.reject_response_format = True
    with pytest.raises(openai.BadRequestError, match="response_format"):
        await ask(client(), "x", response_format={"type": "json_object"})
    assert await ask(client(), PLANNER.format(searched=""))  # without it: fine


async def test_missing_auth_is_401(llm: FakeLLMServer, client: MakeClient) -> None:
    c = client(default_headers={"Authorization": ""})
    with pytest.raises(openai.AuthenticationError):
        await ask(c, "x")
    async with httpx.AsyncClient() as h:
        r = await h.post(f"{llm.base_url}/chat/completions", json={"model": "m", "messages": []})
    assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_request_error"


async def test_hang_triggers_client_timeout(llm: FakeLLMServer, client: MakeClient) -> None:
    llm.fake.script("writer", Hang(0.5))
    with pytest.raises(openai.APITimeoutError):
        await ask(client(max_retries=0, timeout=0.1), "x")


async def test_latency_does_not_serialise_requests(llm: FakeLLMServer, client: MakeClient) -> None:
    llm.fake.latency = 0.2
    c = client()
    started = time.monotonic()
    answers = await asyncio.gather(*(ask(c, f"Topic: t{i}") for i in range(100)))
    assert time.monotonic() - started >= 0.2  # the latency was applied
    # Requests waited out their latency side by side (a blocking wait would make this 1); how
    # long 100 of them take is the benchmarks' business.
    assert llm.fake.max_in_flight > 1
    assert all(a.startswith(f"# Report: t{i}") for i, a in enumerate(answers))


async def test_http_control_endpoints(llm: FakeLLMServer, client: MakeClient) -> None:
    async with httpx.AsyncClient(base_url=llm.url) as h:
        await h.post("/_fake/config", json={"stop_after": 0})
        body = {"role": "writer", "responses": [{"kind": "reply", "content": "scripted"}]}
        await h.post("/_fake/script", json=body)
        assert await ask(client(), "x") == "scripted"
        assert (
            json.loads(await ask(client(), PLANNER.format(searched="")))["shouldContinue"] is False
        )
        recorded = (await h.get("/_fake/requests")).json()
        assert [r["role"] for r in recorded] == ["writer", "planner"]
        assert (await h.get("/v1/models")).json()["data"][0]["id"] == "fake-model"
        await h.post("/_fake/reset")
        assert (await h.get("/_fake/requests")).json() == []
    assert llm.fake.stop_after is None


async def test_searxng_results_are_deterministic_and_recorded(search: FakeSearchServer) -> None:
    async with httpx.AsyncClient(base_url=search.url) as h:
        first = (await h.get("/search", params={"q": "Quantum computing", "format": "json"})).json()
        again = (await h.get("/search", params={"q": "Quantum computing", "format": "json"})).json()
        assert first == again and first["query"] == "Quantum computing"
        urls = [r["url"] for r in first["results"]]
        assert urls == [f"{search.url}/pages/quantum-computing/{i}" for i in range(1, 5)]
        assert all("Quantum computing" in r["content"] for r in first["results"])
        assert (await h.get("/search", params={"q": "x", "format": "html"})).status_code == 400
        search.fake.fail_next(1, status=503)
        assert (await h.get("/search", params={"q": "量子", "format": "json"})).status_code == 503
        cjk = (await h.get("/search", params={"q": "量子", "format": "json"})).json()
        url = cjk["results"][0]["url"]
        assert re.fullmatch(rf"{re.escape(search.url)}/pages/[0-9a-f]{{10}}/1", url)
        await h.post("/_fake/config", json={"empty": True})
        assert (await h.get("/search", params={"q": "y", "format": "json"})).json()["results"] == []
        assert (await h.get("/_fake/queries")).json() == ["Quantum computing"] * 2 + [
            "量子"
        ] * 2 + ["y"]


async def test_searxng_pdf_pages_serve_a_real_pdf_about_the_query(
    search: FakeSearchServer,
) -> None:
    """``pdf_pages``: each search's first result is a PDF of that many pages about the query,
    at an address naming a PDF, which the real reader reads and keeps passages of; the other
    results stay HTML."""
    from core.documents import DocumentExtractor
    from core.pages.fetch import PageFetcher
    from core.pages.reader import PageReader

    async with httpx.AsyncClient(base_url=search.url, trust_env=False) as h:
        await h.post("/_fake/config", json={"pdf_pages": 30})
        found = (await h.get("/search", params={"q": "tidal power", "format": "json"})).json()
        urls = [r["url"] for r in found["results"]]
        assert urls[0].endswith("/1.pdf") and not urls[1].endswith(".pdf")  # (as sites name them)
        pdf, html_page = await h.get(urls[0]), await h.get(urls[1])
        assert pdf.headers["content-type"] == "application/pdf"
        assert html_page.headers["content-type"].startswith("text/html")
        fetcher = PageFetcher(h, timeout=10.0, allow_loopback=True)
        async with DocumentExtractor(timeout=30.0) as documents:
            text = (await documents.extract(pdf.content, "pdf")).text
            reader = PageReader(fetcher, pages=1, documents=documents)
            reading = await reader.read(urls[:1], "tidal power")
        assert " ".join(text.split()).count("tidal power") >= 3 * 29  # 29 pages of 3 facts
        assert reading.read == 1 and reading.pages and reading.pages[0].url == urls[0]
        assert all("tidal power" in p for p in reading.pages[0].passages)
        search.fake.reset()
        assert search.fake.pdf_pages == 0


def test_background_server_is_quick_and_loopback_only() -> None:
    with BackgroundServer(build_search_app(FakeSearch())) as server:
        # Serving as soon as it is entered (how fast that is: the benchmarks' business).
        assert httpx.get(f"{server.url}/search?q=a&format=json").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/search?q=a&format=json")
    with pytest.raises(ValueError, match="loopback"):
        BackgroundServer(build_search_app(FakeSearch()), host="0.0.0.0")


def test_cli_prints_endpoints_serves_and_exits_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes", "--llm-latency", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert info["openai_api_key"] == "fake-key"
        c = openai.OpenAI(base_url=info["openai_base_url"], api_key=info["openai_api_key"])
        resp = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Topic: z"}]
        )
        assert (resp.choices[0].message.content or "").startswith("# Report: z")
        r = httpx.get(f"{info['searxng_url']}/search", params={"q": "z", "format": "json"})
        assert len(r.json()["results"]) == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert "SEARXNG_URL=" in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
