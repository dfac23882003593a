"""A run whose language model never answered fails, saying why in one line (issue 18, item 9).

Every planner call failed and the writer failed: the run is ``failed`` with a reason naming the
problem (unreachable, a rejected key, an unknown model), there is no report, and the thread and
the CLI say so. One failed call still degrades as before. The real Research, ChatModel,
SearxngProvider and Store against the loopback fakes.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from bots.chat.inbound import ChatCommands
from bots.chat.memory import PLATFORM, MemoryChat, MemoryMarkup
from bots.chat.settings import ChatPolicy
from core.engine.graph.state import GraphNode, NodeStatus, graph_of
from core.engine.graph.strategy import GraphStrategy
from core.engine.iterative import IterativeStrategy
from core.engine.state import RunState
from core.llm import ChatModel
from core.models import ThreadVariables
from core.operations.job import DeliveryPolicy, ResearchJob, run_attended
from core.operations.runners import InProcessJobRunner
from core.research.outcome import RunOutcome
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.search import SearxngProvider
from core.values import RunStatus, ThreadKey
from storage import Database, Store
from tests.chat_app import wait_for
from tests.cli import fathom
from tests.fakes import Fail, FakeLLMServer, FakeSearchServer
from tests.fakes.llm import error_body
from tests.test_engine import FAST_RETRY, KEY, TOPIC, Collect, failed_call

sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

UNKNOWN_MODEL = {
    "error": {
        "message": "The model `gpt-5-turbo` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
}
#: An endpoint that echoes the key in its 401 (some do); the key must not reach any text.
BAD_KEY = error_body(f"Incorrect API key provided: {KEY}.", "invalid_request_error")
#: Enough failures for every call a run makes (401 and 404 are not retried by the SDK).
EVERY_CALL = 20


def closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def endpoint(base_url: str) -> str:
    return base_url.rstrip("/")


async def research(
    service: Research,
    topic: str = TOPIC,
    *,
    strategy: str = "iterative",
    progress: Collect | None = None,
) -> RunOutcome:
    thread = ThreadKey(platform="cli", workspace="local", channel="local", thread="t1")
    request = ResearchRequest(topic=topic, depth=3, thread=thread, strategy=strategy)
    run, _ = await service.requests.submit(request)
    return await run_attended(service, run.id, progress)


async def assert_failed_without_report(service: Research, outcome: RunOutcome, error: str) -> None:
    assert outcome.status is RunStatus.FAILED
    assert outcome.error == error
    assert outcome.report_markdown is None and outcome.sources == []
    run = await service.store.runs.get_run(outcome.run_id)
    assert run is not None
    assert run.status == "failed" and run.error == error and run.report_markdown is None


# --- every call fails: the run fails ---------------------------------------------------------


@sqlite_only
async def test_an_unreachable_endpoint_fails_the_run(
    service_for: Callable[[str], Research],
) -> None:
    port = closed_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    service = service_for(base_url)
    progress = Collect()
    outcome = await research(service, progress=progress)
    error = (
        f"the language model could not be reached: could not connect to 127.0.0.1:{port} "
        f"(model writer-model at {base_url})"
    )
    await assert_failed_without_report(service, outcome, error)
    assert progress.final == f"Research failed after 1 of 3 searches: {error}"


@sqlite_only
async def test_a_rejected_api_key_fails_the_run(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("planner", *[Fail(401, BAD_KEY)] * EVERY_CALL)
    llm_server.fake.script("writer", *[Fail(401, BAD_KEY)] * EVERY_CALL)
    service = service_for(llm_server.base_url)
    progress = Collect()
    outcome = await research(service, progress=progress)
    error = (
        "the language model rejected the API key: HTTP 401 authentication failed "
        f"(check the API key) (model writer-model at {endpoint(llm_server.base_url)})"
    )
    await assert_failed_without_report(service, outcome, error)
    assert KEY not in progress.final and "\n" not in progress.final
    assert len(llm_server.fake.requests_for("planner")) == 2  # round 1, then round 2: both failed
    assert len(llm_server.fake.requests_for("writer")) == 1


@sqlite_only
async def test_an_unknown_model_fails_the_run(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("planner", *[Fail(404, UNKNOWN_MODEL)] * EVERY_CALL)
    llm_server.fake.script("writer", *[Fail(404, UNKNOWN_MODEL)] * EVERY_CALL)
    service = service_for(llm_server.base_url)
    outcome = await research(service)
    error = (
        "the language model was not found: HTTP 404 not found (check the model name and base "
        "URL): The model `gpt-5-turbo` does not exist or you do not have access to it. "
        f"(model writer-model at {endpoint(llm_server.base_url)})"
    )
    await assert_failed_without_report(service, outcome, error)


async def test_a_graph_run_whose_planner_and_writer_fail_fails(
    service_for: Callable[[str], Research],
) -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    service = service_for(base_url)
    outcome = await research(service, "heat pumps", strategy="graph")
    assert outcome.status is RunStatus.FAILED and outcome.report_markdown is None
    assert outcome.error is not None
    assert outcome.error.startswith("the language model could not be reached: could not connect")


@sqlite_only
async def test_the_reason_is_in_the_language_of_the_topic(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("planner", *[Fail(401, BAD_KEY)] * EVERY_CALL)
    llm_server.fake.script("writer", *[Fail(401, BAD_KEY)] * EVERY_CALL)
    progress = Collect()
    outcome = await research(
        service_for(llm_server.base_url), "固态电池的最新进展", progress=progress
    )
    assert outcome.status is RunStatus.FAILED
    assert outcome.error is not None and outcome.error.startswith("语言模型拒绝了 API 密钥：")
    assert progress.final.startswith("研究失败（已完成 1/3 次搜索）：语言模型拒绝了 API 密钥")


@sqlite_only
async def test_separate_planner_and_writer_endpoints_are_both_named(
    database: Database, search_server: FakeSearchServer, llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("writer", *[Fail(404, UNKNOWN_MODEL)] * EVERY_CALL)
    unreachable = f"http://127.0.0.1:{closed_port()}/v1"
    async with httpx.AsyncClient(trust_env=False) as http:
        planner = ChatModel(model="p", api_key=KEY, base_url=unreachable, max_retries=0)
        writer = ChatModel(model="w", api_key=KEY, base_url=llm_server.base_url, max_retries=0)
        search = SearxngProvider(http, base_url=search_server.url, base_delay=0.01)
        service = Research(store=Store(database), planner=planner, writer=writer, search=search)
        try:
            outcome = await research(service)
        finally:
            await planner.aclose()
            await writer.aclose()
    assert outcome.status is RunStatus.FAILED and outcome.error is not None
    writer_part, planner_part = outcome.error.split("; ")
    assert writer_part.startswith("the language model was not found: HTTP 404")
    assert writer_part.endswith(f"(model w at {endpoint(llm_server.base_url)})")
    assert planner_part.startswith("the language model could not be reached")
    assert planner_part.endswith(f"(model p at {unreachable})")


# --- one failed call still degrades -------------------------------------------------------------


@sqlite_only
async def test_one_failed_planner_call_still_gives_a_report(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    """The first plan fails, the later ones answer, and even the writer failing then leaves a
    findings-only report: some analysis was obtained."""
    llm_server.fake.script("planner", Fail(401, BAD_KEY))
    llm_server.fake.script("writer", *[Fail(500, None, FAST_RETRY)] * EVERY_CALL)
    outcome = await research(service_for(llm_server.base_url))
    assert outcome.status is RunStatus.SUCCEEDED and outcome.error is None
    assert len(outcome.topics) == 3 and outcome.topics[0] == TOPIC
    assert outcome.report_markdown is not None
    assert "The report writer was unavailable" in outcome.report_markdown


@sqlite_only
async def test_a_planner_that_always_fails_with_a_working_writer_gives_a_report(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("planner", *failed_call(401) * EVERY_CALL)
    outcome = await research(service_for(llm_server.base_url))
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.report_markdown is not None and "## Executive summary" in outcome.report_markdown


def test_a_resumed_run_knows_an_earlier_attempt_was_planned() -> None:
    """The attempt's flags start afresh on resume; the checkpoint tells what the planner did."""
    analysed = IterativeStrategy.analysed
    only_the_topic = RunState("r", TOPIC, 3, ThreadVariables(topics=[TOPIC]), rounds_done=1)
    assert not analysed(only_the_topic)
    planned = ThreadVariables(topics=[TOPIC, f"{TOPIC} costs"])
    assert analysed(RunState("r", TOPIC, 3, planned, rounds_done=2))
    # An earlier run's topics in the thread are not this run's.
    follow_up = RunState("r", "and prices?", 3, ThreadVariables(topics=[TOPIC, "and prices?"]), 1)
    assert not analysed(follow_up)
    fallback = GraphNode(name="q1", question=TOPIC, run_id="r", status=NodeStatus.FAILED)
    graph = ThreadVariables(topics=[TOPIC])
    graph_of(graph).nodes.append(fallback)
    assert not GraphStrategy.analysed(RunState("r", TOPIC, 3, graph, rounds_done=1))
    fallback.status = NodeStatus.ANSWERED
    assert GraphStrategy.analysed(RunState("r", TOPIC, 3, graph, rounds_done=1))


# --- where the failure shows: the thread and the CLI --------------------------------------------


@sqlite_only
async def test_the_thread_says_why_the_run_failed(
    database: Database, llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    llm_server.fake.script("planner", *[Fail(401, BAD_KEY)] * EVERY_CALL)
    llm_server.fake.script("writer", *[Fail(401, BAD_KEY)] * EVERY_CALL)
    store = Store(database)
    async with httpx.AsyncClient(trust_env=False) as http:
        model = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=0)
        service = Research(
            store=store,
            planner=model,
            writer=model,
            search=SearxngProvider(http, base_url=search_server.url, base_delay=0.01),
        )
        chat = MemoryChat()
        policy = DeliveryPolicy(attempts=4, first_delay=0.01, max_delay=0.05)
        job = ResearchJob(
            service.executor,
            store.runs,
            store.claims,
            {PLATFORM: chat.factory(store)},
            policy=policy,
        )
        runner = InProcessJobRunner(job, claims=store.claims, timing=service.executor.timing)
        commands = ChatCommands(
            ChatPolicy.load(_env_file=None),
            service.requests,
            store,
            runner,
            MemoryMarkup(),
        )
        await runner.start()
        try:
            await chat.say(commands, "/research solid-state batteries depth=3")
            thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="t1")

            async def delivered() -> object:
                record = await store.threads.get_thread(str(thread))
                runs = [] if record is None else await store.runs.thread_runs(record.id)
                return runs if runs and runs[0].delivery == "posted" else None

            (run,) = await wait_for(delivered, within=30)
        finally:
            await runner.stop(grace=0.1)
            await model.aclose()
    assert run.status == "failed" and run.report_markdown is None
    (progress,) = chat.messages(thread, "progress")
    last_line = progress.text.splitlines()[-1]
    assert last_line == (
        "Research failed after 1 of 3 searches: the language model rejected the API key: "
        "HTTP 401 authentication failed (check the API key) "
        f"(model m at {endpoint(llm_server.base_url)})"
    )
    assert chat.messages(thread, "report") == []


def test_the_cli_prints_one_line_and_exits_1(cli_env: dict[str, str], tmp_path: Path) -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    env = {**cli_env, "OPENAI_BASE_URL": base_url, "FATHOM_LLM_MAX_RETRIES": "0"}
    result = fathom("research", TOPIC, "--depth", "2", env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""  # no report
    failed = [line for line in result.stderr.splitlines() if line.startswith("run failed:")]
    assert failed == [
        "run failed: the language model could not be reached: could not connect to "
        f"{base_url.removeprefix('http://').removesuffix('/v1')} (model gpt-4o at {base_url})"
    ]
    as_json = fathom("research", TOPIC, "--depth", "2", "--json", env=env, cwd=tmp_path)
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    assert data["status"] == "failed" and data["report_markdown"] is None
    assert data["error"].startswith("the language model could not be reached")
