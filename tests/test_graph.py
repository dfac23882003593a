"""The graph strategy: plans checked and trimmed, sub-questions searched concurrently, failures
contained, resume, progress and citations; the real Research, ChatModel and Store against
the fake LLM and the fake search (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from bots.chat.inbound import ChatCommands
from bots.chat.memory import PLATFORM, MemoryChat, MemoryMarkup
from bots.chat.settings import ChatPolicy
from core.engine.graph.plan import GraphPlan, PlannedNode, check_plan
from core.engine.graph.state import GraphNode, GraphState, NodeStatus
from core.engine.graph.strategy import GraphSettings, GraphStrategy
from core.engine.progress import ProgressKind
from core.engine.state import RunState, StepHooks, StopReason
from core.llm import ChatModel
from core.models import Finding, SearchResult, ThreadVariables
from core.operations.job import DeliveryPolicy, ResearchJob, run_attended
from core.operations.runners import InProcessJobRunner
from core.research.outcome import RunOutcome
from core.research.policy import Clocks, Reading, RunPolicy
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.search import SearxngProvider
from core.timer import MONOTONIC, Timer
from core.values import RunStatus, ThreadKey
from storage import Database, Store
from tests.chat_app import FAKE_API_KEY, wait_for
from tests.fakes import FakeLLMServer, FakeSearchServer, Reply
from tests.fakes.llm import Silent
from tests.languages import english_sentences
from tests.test_engine import KEY, Collect, Harness, user_prompt
from tests.timers import ManualTimer

QUESTION = "heat pumps"
MakeGraph = Callable[..., Awaitable[Harness]]


def plan(*nodes: tuple[str, str, list[str]], finish: bool = False) -> Reply:
    return Reply(
        json.dumps(
            {
                "nodes": [{"name": n, "question": q, "after": a} for n, q, a in nodes],
                "finish": finish,
            }
        )
    )


FINISH = plan(finish=True)


@pytest.fixture
async def graph(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> AsyncIterator[MakeGraph]:
    """``await graph(max_parallel=10, max_nodes=12, verify=False)``: a harness whose runs use
    the graph strategy (submit with ``strategy="graph"``); ``verify``: claims are checked."""
    closers: list[Callable[[], Awaitable[None]]] = []

    async def make(
        max_parallel: int = 10,
        max_nodes: int = 12,
        verify: bool = False,
        verify_seconds: float = 30.0,
        timer: Timer = MONOTONIC,
    ) -> Harness:
        http = httpx.AsyncClient(trust_env=False)
        model = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=1)
        store = Store(database)
        service = Research(
            store=store,
            planner=model,
            writer=model,
            verifier=model if verify else None,
            search=SearxngProvider(http, base_url=search_server.url, base_delay=0.01),
            strategy_settings={
                "graph": GraphSettings(
                    _env_file=None,
                    FATHOM_MAX_PARALLEL_SEARCHES=max_parallel,
                    FATHOM_GRAPH_MAX_NODES=max_nodes,
                )
            },
            policy=RunPolicy(verify_seconds=verify_seconds),
            clocks=Clocks(timer=timer),
        )
        closers.extend([http.aclose, model.aclose])
        return Harness(llm_server, search_server, database, store, service, database_url)

    try:
        yield make
    finally:
        for close in closers:
            await close()


async def research(
    harness: Harness,
    depth: int = 3,
    thread: str = "t1",
    progress: Collect | None = None,
    topic: str = QUESTION,
) -> tuple[str, RunOutcome]:
    request = ResearchRequest(
        topic=topic, depth=depth, strategy="graph", thread=harness.thread(thread)
    )
    run, _ = await harness.service.requests.submit(request)
    return run.id, await run_attended(harness.service, run.id, progress)


def planner_prompts(harness: Harness) -> list[str]:
    return [user_prompt(r.body) for r in harness.llm.fake.requests_for("graph_planner")]


# --- plans -----------------------------------------------------------------------------------


def node(name: str, question: str, *after: str) -> PlannedNode:
    return PlannedNode(name=name, question=question, after=list(after))


def test_a_valid_plan_is_kept_whole() -> None:
    checked = check_plan(
        GraphPlan(nodes=[node("a", "cost of heat pumps"), node("b", "noise levels", "a")]),
        graph=[],
        searched=[],
        room=12,
    )
    assert [n.name for n in checked.nodes] == ["a", "b"] and checked.problems == []


def test_unknown_parents_cycles_duplicates_and_excess_are_left_out() -> None:
    existing = [
        GraphNode(name="old", question="heat pump efficiency", status=NodeStatus.ANSWERED),
        GraphNode(name="lost", question="heat pump history", status=NodeStatus.FAILED),
    ]
    checked = check_plan(
        GraphPlan(
            nodes=[
                node("a", "heat pump installation cost", "old"),  # after an existing node: ok
                node("b", "grid impact of heat pumps", "ghost"),  # unknown parent
                node("c", "heat pump noise", "d"),  # c -> d -> c: a cycle
                node("d", "heat pump maintenance", "c"),
                node("e", "Heat pump efficiency?"),  # repeats the existing question
                node("a", "subsidies for heat pumps"),  # the name a again
                node("f", "heat pump refrigerants", "b"),  # after a left-out node
                node("g", "heat pump lifetime"),
                node("h", "heat pump brands"),  # beyond the room of 2
                node("i", "heat pump heritage", "lost"),  # after a node with no answer
            ]
        ),
        graph=existing,
        searched=["heat pump efficiency"],
        room=2,
    )
    assert [n.name for n in checked.nodes] == ["a", "g"]
    problems = " | ".join(checked.problems)
    assert '"b" comes after "ghost", which is no node' in problems
    assert "a cycle: " in problems and "c" in problems and "d" in problems
    assert '"Heat pump efficiency?" repeats "heat pump efficiency"' in problems
    assert 'the name "a" is used twice' in problems
    assert '"h" is beyond the 2 nodes that may still be added' in problems
    assert '"i" comes after "lost", which has no answer' in problems


def test_planned_names_and_questions_are_cleaned_where_they_enter() -> None:
    planned = PlannedNode.model_validate(
        {"name": " <@U1> cost!! ", "question": "heat\x00 pumps <!channel>", "after": "x y"}
    )
    assert planned.name == "U1-cost" and planned.after == ["x-y"]
    assert planned.question == "heat pumps @\u2060channel"


# --- runs ------------------------------------------------------------------------------------


async def test_independent_sub_questions_are_searched_at_once_and_the_dependent_one_after(
    graph: MakeGraph,
) -> None:
    harness = await graph()
    fake = harness.search.fake
    fake.gather = 2  # the first two searches answer only once both are in flight
    progress = Collect()
    _, outcome = await research(harness, progress=progress)
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    queries = fake.queries
    assert sorted(queries[:2]) == [f"{QUESTION} background", f"{QUESTION} current state"]
    assert queries[2:] == [f"{QUESTION} compared with alternatives", f"{QUESTION} outlook"]
    assert fake.max_in_flight == 2  # the two ran together; the third never beside them
    # The dependent node was answered with its parents' answers as context.
    answers = [user_prompt(r.body) for r in harness.llm.fake.requests_for("answerer")]
    compare = next(a for a in answers if "Sub-question: heat pumps compared" in a)
    assert "[background]" in compare and "[state]" in compare
    searched = [e.text for e in progress.events if e.kind is ProgressKind.SEARCHED]
    assert searched == [
        "1/3th search executed.\n"
        f"✓ {QUESTION} background\n✓ {QUESTION} current state\n"
        f"✓ {QUESTION} compared with alternatives",
        f"2/3th search executed.\n✓ {QUESTION} outlook",
    ]
    data = outcome.as_json()
    assert data["strategy"] == "graph"
    assert [(n["name"], n["status"], n["turn"]) for n in data["nodes"]] == [
        ("background", "answered", 1),
        ("state", "answered", 1),
        ("compare", "answered", 1),
        ("outlook", "answered", 2),
    ]
    assert data["topics"] == queries
    assert progress.final.startswith("Research done, stopped early after 2 of 3 searches")


async def test_the_parallel_searches_of_a_run_stay_within_the_cap(graph: MakeGraph) -> None:
    harness = await graph(max_parallel=2)
    nodes = [(f"n{i}", f"{QUESTION} aspect {i}", []) for i in range(5)]
    harness.llm.fake.script("graph_planner", plan(*nodes), FINISH)
    harness.search.fake.gather = 2
    harness.search.fake.latency = 0.05
    _, outcome = await research(harness, depth=2)
    assert outcome.status is RunStatus.SUCCEEDED
    assert len(harness.search.fake.queries) == 5
    assert harness.search.fake.max_in_flight == 2


async def test_an_invalid_plan_is_asked_again_once_then_trimmed(graph: MakeGraph) -> None:
    harness = await graph()
    cyclic = plan(("a", f"{QUESTION} cost", ["b"]), ("b", f"{QUESTION} noise", ["a"]))
    still_bad = plan(
        ("a", f"{QUESTION} cost", []), ("b", f"{QUESTION} noise", ["ghost"]), finish=True
    )
    harness.llm.fake.script("graph_planner", cyclic, still_bad)
    _, outcome = await research(harness)
    prompts = [r.body for r in harness.llm.fake.requests_for("graph_planner")]
    assert len(prompts) == 2
    assert "a cycle: a -> b -> a" in user_prompt(prompts[1]) or "a cycle: b -> a -> b" in (
        user_prompt(prompts[1])
    )
    assert harness.search.fake.queries == [f"{QUESTION} cost"]  # only the valid node
    notes = outcome.notes
    assert any("The plan of turn 1 was trimmed" in n and "(an unknown parent)" in n for n in notes)
    assert not any("ghost" in n for n in notes)  # the planner's words stay out of the notes


async def test_a_failing_sub_question_does_not_fail_the_run(graph: MakeGraph) -> None:
    harness = await graph()
    harness.search.fake.script_for(f"{QUESTION} current state", [])  # finds nothing
    progress = Collect()
    _, outcome = await research(harness, progress=progress)
    assert outcome.status is RunStatus.SUCCEEDED
    nodes = {n["name"]: n for n in outcome.as_json()["nodes"]}
    assert nodes["state"]["status"] == "failed"
    assert nodes["state"]["error"] == "its search found nothing"
    assert nodes["compare"]["status"] == "failed"  # it needs "state"
    assert nodes["compare"]["error"] == 'it needs "state", which failed'
    assert nodes["background"]["status"] == "answered"
    assert f"{QUESTION} compared with alternatives" not in harness.search.fake.queries
    first = next(e.text for e in progress.events if e.kind is ProgressKind.SEARCHED)
    assert f"✗ {QUESTION} current state (its search found nothing)" in first
    report = outcome.report_markdown or ""
    assert "## Notes on this run" in report and "current state" in report


async def test_a_chinese_graph_run_notes_and_marks_its_failures_in_chinese(
    graph: MakeGraph,
) -> None:
    """A Chinese graph run whose plan is trimmed, one of whose sub-questions finds nothing
    and another needs that one: the notes and the progress say so in Chinese, with no English
    sentence once the questions and names are taken out."""
    harness = await graph()
    topic, state, compare = "热泵在寒冷气候中的表现", "热泵 现状", "热泵 对比"
    bad = plan(
        ("bg", "热泵 背景", []),
        ("state", state, []),
        ("compare", compare, ["state"]),
        ("x", "热泵 成本", ["ghost"]),
    )
    harness.llm.fake.script("graph_planner", bad, bad, FINISH)
    harness.search.fake.script_for(state, [])  # finds nothing
    progress = Collect()
    _, outcome = await research(harness, depth=2, progress=progress, topic=topic)
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    searched = next(e.text for e in progress.events if e.kind is ProgressKind.SEARCHED)
    assert f"✗ {state}（搜索没有结果）" in searched, searched
    assert f"✗ {compare}（依赖的子问题 state 失败）" in searched, searched
    data = (topic, state, compare, "state", "compare", "th search executed")
    assert english_sentences(searched, *data) == []
    assert any("第 1 轮的计划已裁剪" in n and "前置节点不存在" in n for n in outcome.notes)
    assert f"子问题“{state}”失败：搜索没有结果。" in outcome.notes, outcome.notes
    assert all(english_sentences(n, *data) == [] for n in outcome.notes), outcome.notes
    assert outcome.report_markdown is not None and "## 本次运行说明" in outcome.report_markdown


async def test_a_sub_answer_is_checked_before_the_writer_uses_it(graph: MakeGraph) -> None:
    """A sub-answer's claim that its sources do not support reaches the writer marked as not
    verified, without its citation; the claim its source states keeps it."""
    harness = await graph(verify=True)
    question = f"{QUESTION} cost"
    harness.llm.fake.script("graph_planner", plan(("cost", question, [])), FINISH)
    said = f"Source 1 reports facts, figures and context about {question}."
    harness.llm.fake.script("answerer", Reply(f"{said} [1] Costs fell 90% in a year [1]."))
    unsupported = {"verdicts": [{"claim": 2, "verdict": "unsupported", "source": None}]}
    harness.llm.fake.script("verifier", Reply(json.dumps(unsupported)))
    _, outcome = await research(harness, depth=2)
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    (node,) = outcome.as_json()["nodes"]
    assert node["answer"] == f"{said} [1] Costs fell 90% in a year *(not verified)*."
    writer = user_prompt(harness.llm.fake.requests_for("writer")[-1].body)
    assert "Costs fell 90% in a year *(not verified)*." in writer
    assert [r.role for r in harness.llm.fake.requests].count("verifier") == 1  # the report's
    # own claims copy their sources: the writer's check asked no model


async def test_a_sub_answer_citing_in_groups_is_checked_too(graph: MakeGraph) -> None:
    """The answerer cites ``[1, 2]`` and ``[1; 2]`` (as Vectara's LLM answers, vectara/
    open-rag-eval#19; SchrodingersCattt/EvoMaster's citation guide lists "[2; 3]"): both are
    citations the check reads, so the unsupported claim is marked, as in ``[1]`` form."""
    harness = await graph(verify=True)
    question = f"{QUESTION} cost"
    harness.llm.fake.script("graph_planner", plan(("cost", question, [])), FINISH)
    said = f"Source 1 reports facts, figures and context about {question}."
    harness.llm.fake.script("answerer", Reply(f"{said} [1, 2] Costs fell 90% in a year [1; 2]."))
    unsupported = {"verdicts": [{"claim": 2, "verdict": "unsupported", "source": None}]}
    harness.llm.fake.script("verifier", Reply(json.dumps(unsupported)))
    _, outcome = await research(harness, depth=2)
    (node,) = outcome.as_json()["nodes"]
    assert node["answer"] == f"{said} [1][2] Costs fell 90% in a year *(not verified)*."


async def test_a_sub_answer_check_out_of_time_is_said_in_the_notes(graph: MakeGraph) -> None:
    """A sub-answer's claims are checked within the check's own budget (FATHOM_VERIFY_SECONDS,
    on a manual clock) like a report's: a verifier that sends its headers and then nothing
    holds the run that long, not for its model timeout, and the notes say the sub-answer was
    checked in part (issue 52, item 6)."""
    timer = ManualTimer()
    harness = await graph(verify=True, verify_seconds=40, timer=timer)
    question = f"{QUESTION} cost"
    harness.llm.fake.script("graph_planner", plan(("cost", question, [])), FINISH)
    harness.llm.fake.script("answerer", Reply("Costs fell 90% in a year [1]."))
    harness.llm.fake.script("verifier", Silent())
    running = asyncio.ensure_future(research(harness, depth=2))
    assert await timer.sleeping() == 40
    timer.advance(40)
    _, outcome = await running
    assert outcome.status is RunStatus.SUCCEEDED
    assert (
        f'The answer to sub-question "{question}" was checked in part: 1 of its claims not '
        "checked (the check's time budget ran out (FATHOM_VERIFY_SECONDS))."
    ) in outcome.notes
    (node,) = outcome.as_json()["nodes"]
    assert "Costs fell 90% in a year [1]" in node["answer"]  # left as written, unchecked


async def test_a_revised_sub_answer_is_data_like_the_answer_it_replaces(graph: MakeGraph) -> None:
    """The reviser's sentence is model text: a live mention in it never reaches the node's
    answer (the writer's prompt, ``--json``). The reviser copies it from a snippet that
    carries it (a revision is kept only when its source says it word for word)."""
    harness = await graph(verify=True)
    question = f"{QUESTION} cost"
    harness.llm.fake.script("graph_planner", plan(("cost", question, [])), FINISH)
    said = f"Source 1 reports facts, figures and context about {question}."
    hostile = f"<@UBOSS> {said}"
    result = {"title": "Costs", "url": "https://example.org/costs", "content": hostile}
    harness.search.fake.script_for(question, [result])
    harness.llm.fake.script("answerer", Reply("Costs fell 90% in a year [1]."))
    unsupported = {"verdicts": [{"claim": 1, "verdict": "unsupported", "source": None}]}
    harness.llm.fake.script("verifier", Reply(json.dumps(unsupported)))
    revised = {"revisions": [{"claim": 1, "text": f"{hostile} [1]"}]}
    harness.llm.fake.script("reviser", Reply(json.dumps(revised)))
    _, outcome = await research(harness, depth=2)
    (node,) = outcome.as_json()["nodes"]
    assert said in node["answer"] and "[1]" in node["answer"]
    assert "<@UBOSS>" not in node["answer"] and "UBOSS" in node["answer"]  # inert, kept


async def test_a_sub_answer_cut_short_is_said_in_the_notes(graph: MakeGraph) -> None:
    """A sub-question's answer that stopped at the output limit (``finish_reason: length``,
    OpenAI's) or for a provider's own reason (DeepSeek's ``insufficient_system_resource``) is
    kept, and the run's notes say it may be incomplete (issue 51, item 3)."""
    harness = await graph()
    questions = [f"{QUESTION} cost", f"{QUESTION} safety"]
    harness.llm.fake.script(
        "graph_planner", plan(("cost", questions[0], []), ("safety", questions[1], [])), FINISH
    )
    harness.llm.fake.script(
        "answerer",
        Reply("Costs fell 90% in a year [1], but", finish_reason="length"),
        Reply("Cells were safe in", finish_reason="insufficient_system_resource"),
    )
    _, outcome = await research(harness, depth=2)
    assert outcome.status is RunStatus.SUCCEEDED
    notes = "\n".join(outcome.notes)
    for question, why in zip(
        questions, ("its output limit", "the provider ran out of resources"), strict=True
    ):
        assert f'The answer to sub-question "{question}" stopped before its end ({why}' in notes


async def test_a_resumed_graph_run_searches_no_answered_node_again(graph: MakeGraph) -> None:
    harness = await graph()
    fake = harness.search.fake
    request = ResearchRequest(topic=QUESTION, depth=3, strategy="graph", thread=harness.thread())
    run, _ = await harness.service.requests.submit(request)
    fake.latency = 0.5  # the dependent node's search is in flight when the run stops
    task = asyncio.create_task(run_attended(harness.service, run.id))
    compare = f"{QUESTION} compared with alternatives"
    await wait_for(lambda: compare in fake.queries)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await harness.store.threads.load_variables(run.thread_id)
    assert stored is not None
    statuses = {n["name"]: n["status"] for n in stored["strategyState"]["graph"]["nodes"]}
    assert statuses == {"background": "answered", "state": "answered", "compare": "pending"}

    fake.latency = 0.0
    outcome = await run_attended(harness.service, run.id, again=True)
    assert outcome.status is RunStatus.SUCCEEDED
    queries = fake.queries
    assert queries.count(f"{QUESTION} background") == 1
    assert queries.count(f"{QUESTION} current state") == 1
    assert queries.count(compare) == 2  # its first search never finished
    planners = harness.llm.fake.requests_for("graph_planner")
    assert len(planners) == 3  # turn 1 (before the stop), turn 2, turn 3: not turn 1 again


async def test_a_follow_up_extends_the_graph(graph: MakeGraph) -> None:
    harness = await graph()
    harness.llm.fake.script("graph_planner", plan(("cost", f"{QUESTION} cost", [])), FINISH)
    await research(harness, depth=2)
    harness.llm.fake.script(
        "graph_planner",
        plan(("payback", f"{QUESTION} payback time", ["cost"])),
        FINISH,
    )
    _, follow_up = await research(harness, depth=2)
    prompt = planner_prompts(harness)[2]  # the follow-up's first turn
    assert f"[cost] {QUESTION} cost: answered" in prompt
    nodes = follow_up.as_json()["nodes"]
    assert [(n["name"], n["after"], n["status"]) for n in nodes] == [
        ("payback", ["cost"], "answered")
    ]
    answer = next(
        user_prompt(r.body)
        for r in harness.llm.fake.requests_for("answerer")
        if "Sub-question: heat pumps payback" in user_prompt(r.body)
    )
    assert "[cost] heat pumps cost —" in answer  # the earlier run's answer is its context


async def test_citations_outside_the_sources_are_removed(graph: MakeGraph) -> None:
    harness = await graph()
    harness.llm.fake.script("graph_planner", plan(("cost", f"{QUESTION} cost", [])), FINISH)
    harness.llm.fake.script(
        "answerer",
        Reply("Costs fell [1][99] per https://evil.example/x <!channel> @here."),
    )
    harness.llm.fake.script(
        "writer",
        Reply(
            "# Heat pumps\n\n## Executive summary\n\nCosts fell [1][42]. "
            "See [this](https://evil.example/y).\n"
        ),
    )
    _, outcome = await research(harness, depth=2)
    (node_data,) = outcome.as_json()["nodes"]
    assert node_data["answer"] == "Costs fell [1] per @\u2060channel @\u2060here."
    report = outcome.report_markdown or ""
    assert "[42]" not in report and "evil.example" not in report
    body = report.split("## Sources")[0]
    assert re.findall(r"\[(\d+)\]", body) == ["1"]
    writer = user_prompt(harness.llm.fake.requests_for("writer")[0].body)
    assert "[cost] heat pumps cost (" not in writer and "[cost] heat pumps cost: answered" in writer


async def test_a_graph_request_from_a_chat_platform(
    database: Database, llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    """`/research … strategy=graph` through the shared chat layer (every platform's path):
    one progress message whose versions show each turn's sub-questions, then the report."""
    store = Store(database)
    async with httpx.AsyncClient(trust_env=False) as http:
        model = ChatModel(model="m", api_key=FAKE_API_KEY, base_url=llm_server.base_url)
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
        policy = ChatPolicy.load(_env_file=None, FATHOM_STRATEGY="graph")
        commands = ChatCommands(policy, service.requests, store, runner, MemoryMarkup())
        await runner.start()
        try:
            await chat.say(commands, "/research heat pumps depth=2")  # graph by default here
            thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="t1")

            async def delivered() -> object:
                record = await store.threads.get_thread(str(thread))
                runs = [] if record is None else await store.runs.thread_runs(record.id)
                return runs if runs and runs[0].delivery == "posted" else None

            (run,) = await wait_for(delivered, within=30)
        finally:
            await runner.stop(grace=0.1)
            await model.aclose()
    assert run.strategy == "graph" and run.status == "succeeded"
    (progress,) = chat.messages(thread, "progress")
    assert any(
        "1/2th search executed.\n✓ heat pumps background\n✓ heat pumps current state" in v
        for v in progress.versions
    )
    assert progress.text.splitlines()[-2] == "Research done: 2/2 searches, 3 sources."
    assert chat.messages(thread, "report")


# --- review: resume, cancel and untrusted answers ----------------------------------------------


class Hooks:
    """The service's side of a run, in memory: checkpoints are counted, progress recorded."""

    def __init__(self, cancelled: bool = False) -> None:
        self.cancelled = cancelled
        self.checkpoints = 0
        self.progress: list[str] = []

    def hooks(self) -> StepHooks:
        async def checkpoint(state: RunState) -> None:
            self.checkpoints += 1
            if self.checkpoints > 20:
                raise AssertionError("the run keeps checkpointing: it does not end")

        async def progress(
            kind: ProgressKind, text: str, topic: str | None = None, *, pages: int = 0
        ) -> None:
            self.progress.append(text)

        return StepHooks(checkpoint, progress, lambda: self.cancelled)


def interrupted_state(*nodes: GraphNode, rounds_done: int = 0, depth: int = 3) -> RunState:
    finding = Finding(
        topic=f"{QUESTION} cost",
        results=[SearchResult(title="Costs", url="https://costs.example/a", snippet="cheap")],
    )
    variables = ThreadVariables(
        topics=[finding.topic],
        findings=[finding],
        strategy_state={"graph": GraphState(nodes=list(nodes))},
    )
    return RunState("r1", QUESTION, depth, variables, rounds_done=rounds_done)


@pytest.fixture
async def strategy(
    llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> AsyncIterator[GraphStrategy]:
    model = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=1)
    async with httpx.AsyncClient(trust_env=False) as http:
        yield GraphStrategy(model, model, SearxngProvider(http, base_url=search_server.url))
    await model.aclose()


async def test_a_cancelled_run_with_a_searched_but_unanswered_node_ends(
    strategy: GraphStrategy, llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    """A takeover of a cancelled run whose node was searched but not answered: it stops at
    once (it used to count turn after turn without end)."""
    searched = GraphNode(
        name="cost", question=f"{QUESTION} cost", run_id="r1", status=NodeStatus.SEARCHED
    )
    state = interrupted_state(searched)
    hooks = Hooks(cancelled=True)
    reason = await strategy.run(state, hooks.hooks())
    assert reason is StopReason.CANCELLED
    assert state.rounds_done == 0 and hooks.checkpoints == 0
    assert llm_server.fake.requests == [] and search_server.fake.queries == []


async def test_a_turn_finished_before_a_crash_is_not_planned_again(
    strategy: GraphStrategy, llm_server: FakeLLMServer
) -> None:
    """The process stopped after the last node of turn 1 was checkpointed, before the turn was
    counted: the resumed run plans turn 2, not turn 1 again."""
    answered = GraphNode(
        name="cost",
        question=f"{QUESTION} cost",
        run_id="r1",
        turn=1,
        status=NodeStatus.ANSWERED,
        answer="Cheap [1].",
    )
    state = interrupted_state(answered, rounds_done=0, depth=2)
    llm_server.fake.script("graph_planner", FINISH)
    await strategy.run(state, Hooks().hooks())
    (prompt,) = planner_prompts_of(llm_server)
    assert "Planner turn 2 of at most 2" in prompt
    assert state.rounds_done == 1


def planner_prompts_of(llm_server: FakeLLMServer) -> list[str]:
    return [user_prompt(r.body) for r in llm_server.fake.requests_for("graph_planner")]


async def test_a_citation_of_thousands_of_digits_fails_nothing(graph: MakeGraph) -> None:
    harness = await graph()
    huge = "[" + "9" * 5000 + "]"
    harness.llm.fake.script("graph_planner", plan(("cost", f"{QUESTION} cost", [])), FINISH)
    harness.llm.fake.script("answerer", Reply(f"Cheap [1]{huge}."))
    harness.llm.fake.script(
        "writer", Reply(f"# Heat pumps\n\n## Executive summary\n\nCheap [1]{huge}.")
    )
    _, outcome = await research(harness, depth=2)
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    (node_data,) = outcome.as_json()["nodes"]
    assert node_data["status"] == "answered" and node_data["answer"].startswith("Cheap [1]")


def test_the_writer_sees_every_source_the_graph_cites() -> None:
    from core.engine.sources import NumberedSource, writer_window

    sources = [NumberedSource(n, f"T{n}", f"https://s.example/{n}", "", "t") for n in range(1, 101)]
    window = writer_window(sources, 60, frozenset({3, 12}))
    numbers = [s.n for s in window]
    assert len(numbers) == 60 and numbers[:2] == [3, 12] and numbers[2:] == list(range(43, 101))
    assert [s.n for s in writer_window(sources, 60)] == list(range(41, 101))


async def test_a_graph_run_reads_pages_and_notes_the_ones_it_left_out(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    """Sub-questions read their best pages as iterative rounds do, skipped ones noted."""
    from core.pages.fetch import PageFetcher
    from core.pages.reader import PageReader
    from tests.fakes.search import slug

    question = f"{QUESTION} cost"
    search_server.fake.script_page(f"/pages/{slug(question)}/2", status=404)
    llm_server.fake.script("graph_planner", plan(("cost", question, [])), FINISH)
    async with (
        httpx.AsyncClient(trust_env=False) as http,
        httpx.AsyncClient(trust_env=False) as pages_http,
    ):
        model = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=1)
        reader = PageReader(PageFetcher(pages_http, allow_loopback=True), pages=3)
        store = Store(database)
        service = Research(
            store=store,
            planner=model,
            writer=model,
            search=SearxngProvider(http, base_url=search_server.url, base_delay=0.01),
            reading=Reading(pages=reader),
        )
        harness = Harness(llm_server, search_server, database, store, service, database_url)
        _, outcome = await research(harness, depth=2)
        reader.close()
        await model.aclose()
    assert outcome.status is RunStatus.SUCCEEDED
    assert (outcome.usage.pages_read, outcome.usage.pages_skipped) == (2, 1)
    assert f'Result pages left out for "{question}": 127.0.0.1 (HTTP 404).' in outcome.notes
    answer = user_prompt(llm_server.fake.requests_for("answerer")[0].body)
    assert "measured adoption rose" in answer  # the node answered from its pages' passages
