"""Deadlines that hold (issue 51, item 4).

``FATHOM_LLM_TIMEOUT`` bounds an attempt as a whole, measured on the model's timer (here a
``ManualTimer``: no real waiting): a server that keeps a request alive with blank lines, or
says nothing after its headers, is abandoned at the deadline, and an attempt that timed out is
not computed again. What is worth another try (a 429, a 5xx) waits on the same timer for what
the server asked, within reason. A run whose time budget went to the model says so. The real
ChatModel and SDK against the fake at the HTTP boundary.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from core.engine.budget import RunBudget
from core.engine.state import StopReason
from core.llm import ChatModel, FailureKind, LLMError
from core.llm.client import FIRST_BACKOFF, MAX_RETRY_WAIT
from core.models import Usage
from core.operations.job import run_attended
from core.research.policy import Clocks, RunPolicy
from core.values import RunStatus
from tests.chat_app import wait_for
from tests.fakes import Fail, FakeLLMServer, Hang, Reply
from tests.fakes.llm import Silent, Trickle
from tests.test_engine import KEY, NOW, Collect, Harness, harness, sqlite_only  # noqa: F401
from tests.test_llm import WRITER
from tests.timers import ManualTimer

TIMEOUT = 120.0
REPORT = "# Solar\n\nIt grows."


@pytest.fixture
def timer() -> ManualTimer:
    return ManualTimer()


@pytest.fixture
async def model(llm_server: FakeLLMServer, timer: ManualTimer) -> AsyncIterator[ChatModel]:
    """Three retries allowed: a timed-out attempt must still not be repeated."""
    chat = ChatModel(
        model="m",
        api_key=KEY,
        base_url=llm_server.base_url,
        timeout=TIMEOUT,
        max_retries=3,
        timer=timer,
    )
    yield chat
    await chat.aclose()


async def sleeping_until(timer: ManualTimer, at: float) -> None:
    """Wait (real time) until something sleeps on ``timer`` until ``at``."""
    await wait_for(lambda: at in timer.waiting_until(), within=10)


async def timed_out(call: asyncio.Task[object]) -> LLMError:
    with pytest.raises(LLMError) as caught:
        await asyncio.wait_for(call, 10)
    return caught.value


# --- one attempt, one deadline -----------------------------------------------------------------


async def test_a_server_trickling_blank_lines_is_abandoned_at_the_deadline(
    llm_server: FakeLLMServer, model: ChatModel, timer: ManualTimer
) -> None:
    """DeepSeek keeps a busy non-streamed request open with blank lines, for up to 30 minutes
    ("Non-streaming requests: Continuously return empty lines", api-docs.deepseek.com,
    Rate Limit). Each line resets a per-read timeout; the deadline holds: at 120 s the attempt
    is abandoned (its connection closed) and not made again."""
    llm_server.fake.script("writer", Trickle(every=0.01))
    call = asyncio.create_task(model.complete(WRITER, usage=Usage()))
    await sleeping_until(timer, TIMEOUT)
    await wait_for(lambda: llm_server.fake.trickled >= 5)
    timer.advance(TIMEOUT - 1)
    lines = llm_server.fake.trickled
    await wait_for(lambda: llm_server.fake.trickled >= lines + 3)  # still talking, still waited
    assert not call.done()
    timer.advance(1)
    error = await timed_out(call)
    assert error.kind is FailureKind.TIMEOUT and error.detail == "timed out after 120s"
    await wait_for(lambda: llm_server.fake.abandoned == 1)  # the connection was closed
    assert len(llm_server.fake.requests) == 1  # not computed again
    assert timer.waiting_until() == []


async def test_blank_lines_before_the_answer_are_harmless(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """The same keep-alive lines, then the answer: "These contents do not affect the parsing
    of the JSON body by the OpenAI SDK" (DeepSeek's Rate Limit page)."""
    llm_server.fake.script("writer", Trickle(every=0.001, lines=30, then=Reply(REPORT)))
    assert (await model.complete(WRITER, usage=Usage())).text == REPORT
    assert llm_server.fake.trickled == 30


async def test_a_server_silent_after_its_headers_is_abandoned_at_the_deadline(
    llm_server: FakeLLMServer, model: ChatModel, timer: ManualTimer
) -> None:
    """A server that answers ``200`` and its headers, then nothing (a stalled upstream behind
    a proxy that flushed the headers), is given up at the deadline, once."""
    llm_server.fake.script("writer", Silent())
    call = asyncio.create_task(model.complete(WRITER, usage=Usage()))
    await sleeping_until(timer, TIMEOUT)
    await wait_for(lambda: llm_server.fake.streams == 1)  # its headers are sent
    timer.advance(TIMEOUT)
    error = await timed_out(call)
    assert error.kind is FailureKind.TIMEOUT
    await wait_for(lambda: llm_server.fake.abandoned == 1)
    assert len(llm_server.fake.requests) == 1


async def test_a_server_that_never_answers_is_abandoned_at_the_deadline(
    llm_server: FakeLLMServer, model: ChatModel, timer: ManualTimer
) -> None:
    """No status line at all (the model still computing the whole answer)."""
    llm_server.fake.script("writer", Hang(10))
    call = asyncio.create_task(model.complete(WRITER, usage=Usage()))
    await sleeping_until(timer, TIMEOUT)
    await wait_for(lambda: llm_server.fake.requests)  # it is being answered
    timer.advance(TIMEOUT)
    assert (await timed_out(call)).kind is FailureKind.TIMEOUT
    assert len(llm_server.fake.requests) == 1


# --- retries, on the timer -------------------------------------------------------------------


async def test_a_429_waits_what_retry_after_asks_then_tries_again(
    llm_server: FakeLLMServer, model: ChatModel, timer: ManualTimer
) -> None:
    """OpenRouter (its errors page: "On 429 and 503 responses, OpenRouter may include a
    standard HTTP Retry-After response header") and OpenAI send ``Retry-After`` seconds."""
    llm_server.fake.script("writer", Fail(429, headers={"retry-after": "7"}), Reply(REPORT))
    call = asyncio.create_task(model.complete(WRITER, usage=Usage()))
    await sleeping_until(timer, 7.0)
    assert len(llm_server.fake.requests) == 1
    timer.advance(7)
    assert (await asyncio.wait_for(call, 10)).text == REPORT
    assert len(llm_server.fake.requests) == 2


async def test_a_5xx_backs_off_on_the_timer(
    llm_server: FakeLLMServer, model: ChatModel, timer: ManualTimer
) -> None:
    """DeepSeek's 500 and 503 ("Please retry your request after a brief wait", its error
    codes page): no wait asked, so the back-off (0.5 s less up to a quarter)."""
    llm_server.fake.script("writer", Fail(503), Reply(REPORT))
    call = asyncio.create_task(model.complete(WRITER, usage=Usage()))
    await wait_for(lambda: [t for t in timer.waiting_until() if t < TIMEOUT])
    (wake,) = [t for t in timer.waiting_until() if t < TIMEOUT]
    assert FIRST_BACKOFF * 0.75 <= wake <= FIRST_BACKOFF
    timer.advance(wake)
    assert (await asyncio.wait_for(call, 10)).text == REPORT


async def test_a_wait_longer_than_a_call_may_take_fails_at_once_and_says_so(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """A 429 asking for an hour (a daily quota spent) is not waited out."""
    llm_server.fake.script("writer", Fail(429, headers={"retry-after": "3600"}))
    with pytest.raises(LLMError) as caught:
        await model.complete(WRITER, usage=Usage())
    assert caught.value.kind is FailureKind.RATE_LIMITED
    assert caught.value.detail.endswith(
        f"; the server asks to wait 3600 s before another try, longer than the "
        f"{MAX_RETRY_WAIT:.0f} s a call waits"
    )
    assert len(llm_server.fake.requests) == 1


# --- a run whose time went to the model --------------------------------------------------------


@sqlite_only
async def test_a_run_whose_time_budget_went_to_the_planner_says_so(
    harness: Harness,  # noqa: F811
    timer: ManualTimer,
) -> None:
    """``FATHOM_MAX_RUN_SECONDS`` 100, ``FATHOM_LLM_TIMEOUT`` 120: the first plan times out
    after the budget is spent, so no search starts. The run fails saying its time went to the
    model, and why, not "no search returned any results"."""
    now = [0.0]
    planner = ChatModel(
        model="planner-model",
        api_key=KEY,
        base_url=harness.llm.base_url,
        timeout=TIMEOUT,
        timer=timer,
    )
    harness.llm.fake.script("planner", Silent())
    service = harness.build_service(
        planner=planner,
        policy=RunPolicy(budget=RunBudget(seconds=100)),
        clocks=Clocks(now=lambda: NOW, monotonic=lambda: now[0]),
    )
    progress = Collect()
    try:
        run = asyncio.create_task(run_attended(service, await harness.submit(), progress))
        await sleeping_until(timer, TIMEOUT)
        await wait_for(lambda: harness.llm.fake.streams == 1)
        now[0] += TIMEOUT  # the executor's clock and the model's timer move together
        timer.advance(TIMEOUT)
        outcome = await asyncio.wait_for(run, 30)
    finally:
        await planner.aclose()
    assert outcome.status is RunStatus.FAILED and outcome.stop_reason is StopReason.TIME_BUDGET
    assert harness.search.fake.queries == []
    error = (
        "the run's time budget (100 s, FATHOM_MAX_RUN_SECONDS) was spent waiting on the "
        "language model before any search: the language model did not answer in time: timed "
        f"out after 120s (model planner-model at {harness.llm.base_url.rstrip('/')})"
    )
    assert outcome.error == error
    assert progress.final == f"Research failed after 0 of 3 searches: {error}"


@sqlite_only
async def test_a_run_whose_planner_timed_out_and_found_nothing_says_both(
    harness: Harness,  # noqa: F811
    timer: ManualTimer,
) -> None:
    """Every planner call timed out, and the request's own search found nothing: the failure
    line says both, not only "no search returned any results"."""
    planner = ChatModel(
        model="planner-model",
        api_key=KEY,
        base_url=harness.llm.base_url,
        timeout=TIMEOUT,
        timer=timer,
    )
    harness.llm.fake.script("planner", Silent())
    harness.search.fake.empty = True
    service = harness.build_service(planner=planner)
    try:
        run = asyncio.create_task(run_attended(service, await harness.submit(depth=1)))
        await sleeping_until(timer, TIMEOUT)
        await wait_for(lambda: harness.llm.fake.streams == 1)
        timer.advance(TIMEOUT)
        outcome = await asyncio.wait_for(run, 30)
    finally:
        await planner.aclose()
    assert outcome.status is RunStatus.FAILED and len(harness.search.fake.queries) == 1
    assert outcome.error == (
        "no search returned any results; the language model did not answer in time: timed out "
        f"after 120s (model planner-model at {harness.llm.base_url.rstrip('/')})"
    )
