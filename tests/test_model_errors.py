"""Error bodies that keep their words (issue 51, item 5, the model's half).

Gemini's OpenAI-compatible endpoint wraps its error in a list and says how long to wait in
``RetryInfo``; a proxy in front of a model server answers an HTML page; a server that dies
mid-answer cuts the body. Each is named for what it is in one line (the provider's message and
status, a page's title and never its markup, a cut body rather than "could not connect"), and
the wait asked for is honoured on the model's timer. Real ChatModel and SDK, the fake at the
HTTP boundary; the source of each shape in its docstring.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from core.llm import ChatModel, FailureKind, LLMError
from core.models import Usage
from core.research.service import Research
from core.values import RunStatus
from tests.chat_app import wait_for
from tests.fakes import Fail, FakeLLMServer, Reply
from tests.fakes.llm import Cut, Raw
from tests.test_llm import KEY, WRITER
from tests.test_model_answers import research
from tests.test_model_deadlines import REPORT, sleeping_until
from tests.timers import ManualTimer

#: Gemini's OpenAI-compatible endpoint (generativelanguage.googleapis.com/v1beta/openai) answers
#: a rate limit with its error in a list (n4ze3m/page-assist#406: "[{ "error": { "code": 429,
#: "message": ..., "status": "RESOURCE_EXHAUSTED" } } ]"), with the wait in a RetryInfo detail
#: (voideditor/void#557 quotes "@type": "type.googleapis.com/google.rpc.RetryInfo",
#: "retryDelay": "5s"; googleapis/python-genai#1875: "retryDelay": "53s").
GEMINI_429 = [
    {
        "error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing "
            "details. Please retry in 37.412s.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [
                        {
                            "quotaMetric": "generativelanguage.googleapis.com/"
                            "generate_content_free_tier_requests",
                            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                        }
                    ],
                },
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
            ],
        }
    }
]
#: nginx's own 502 page (ngx_http_special_response.c), what a model server behind nginx gives
#: while it is down.
NGINX_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n"
    "</body>\r\n</html>\r\n"
)


@pytest.fixture
def timer() -> ManualTimer:
    return ManualTimer()


@pytest.fixture
async def model(llm_server: FakeLLMServer, timer: ManualTimer) -> AsyncIterator[ChatModel]:
    chat = ChatModel(
        model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=0, timer=timer
    )
    yield chat
    await chat.aclose()


async def failure(model: ChatModel) -> LLMError:
    with pytest.raises(LLMError) as caught:
        await model.complete(WRITER, usage=Usage())
    assert "\n" not in str(caught.value) and "Traceback" not in str(caught.value)
    return caught.value


async def test_geminis_list_wrapped_error_names_its_message_and_status(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    llm_server.fake.script("writer", Fail(429, GEMINI_429))
    error = await failure(model)
    assert error.kind is FailureKind.RATE_LIMITED
    assert error.detail == (
        "HTTP 429 rate limited or out of quota: You exceeded your current quota, please check "
        "your plan and billing details. Please retry in 37.412s. (RESOURCE_EXHAUSTED)"
    )


async def test_geminis_retry_delay_is_waited_on_the_timer(
    llm_server: FakeLLMServer, timer: ManualTimer
) -> None:
    """``retryDelay: "37s"`` is the wait before the retry (no ``Retry-After`` header)."""
    chat = ChatModel(
        model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=2, timer=timer
    )
    llm_server.fake.script("writer", Fail(429, GEMINI_429), Reply(REPORT))
    try:
        call = asyncio.create_task(chat.complete(WRITER, usage=Usage()))
        await sleeping_until(timer, 37.0)
        assert len(llm_server.fake.requests) == 1
        timer.advance(36.9)
        await asyncio.sleep(0)
        assert not call.done() and len(llm_server.fake.requests) == 1
        timer.advance(0.1)
        assert (await asyncio.wait_for(call, 10)).text == REPORT
    finally:
        await chat.aclose()
    assert len(llm_server.fake.requests) == 2


async def test_an_nginx_502_page_is_one_line_without_markup(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    llm_server.fake.script("writer", Raw(NGINX_502, "text/html", status=502))
    error = await failure(model)
    assert error.kind is FailureKind.SERVER
    assert error.detail == "HTTP 502 server error: 502 Bad Gateway (an HTML error page)"
    assert "<" not in str(error)


async def test_a_body_cut_mid_way_is_named_as_such(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """The server closes the connection mid-body: httpx's RemoteProtocolError "peer closed
    connection without sending complete message body (received N bytes, expected M)". It
    connected: this is no "could not connect"."""
    llm_server.fake.script("writer", Cut(0.5))
    error = await failure(model)
    assert error.kind is FailureKind.DISCONNECTED
    assert error.detail.startswith(
        "the connection closed before the whole answer arrived (peer closed connection without "
        "sending complete message body (received "
    )
    assert "could not connect" not in str(error)


async def test_a_cut_body_is_tried_again(llm_server: FakeLLMServer, timer: ManualTimer) -> None:
    """A broken connection is worth another try (the openai SDK retries it too)."""
    chat = ChatModel(
        model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=1, timer=timer
    )
    llm_server.fake.script("writer", Cut(0.3), Reply(REPORT))
    try:
        call = asyncio.create_task(chat.complete(WRITER, usage=Usage()))
        await wait_for(lambda: [t for t in timer.waiting_until() if t < 10])  # the back-off
        timer.advance(1)
        assert (await asyncio.wait_for(call, 10)).text == REPORT
    finally:
        await chat.aclose()


async def test_a_run_whose_every_answer_is_cut_fails_in_one_line(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    """The run's failure line names a broken connection, in the run's words (the writer's,
    then the planner's, whose byte counts differ)."""
    for role in ("planner", "writer"):
        llm_server.fake.script(role, *[Cut(0.5)] * 10)
    outcome = await research(service_for(llm_server.base_url))
    assert outcome.status is RunStatus.FAILED and outcome.error is not None
    assert "\n" not in outcome.error
    writer, planner = outcome.error.split("; ")
    for part, name in ((writer, "writer-model"), (planner, "planner-model")):
        assert part.startswith(
            "the connection to the language model broke off: the connection closed before the "
            "whole answer arrived (peer closed connection without sending complete message body"
        )
        assert part.endswith(f"(model {name} at {llm_server.base_url})")
