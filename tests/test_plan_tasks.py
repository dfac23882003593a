"""A run's plan as the steps a chat shows (``core.engine.tasks``), read from its state."""

from __future__ import annotations

from core.engine.graph.state import GraphNode, GraphState, NodeStatus
from core.engine.graph.strategy import GraphStrategy
from core.engine.iterative import IterativeStrategy
from core.engine.progress import TaskSource, TaskStatus, final_tasks
from core.engine.state import RunState
from core.models import Finding, SearchResult, ThreadVariables


def result(url: str, title: str = "T", server: str | None = None) -> SearchResult:
    return SearchResult(title=title, url=url, snippet="s", server=server)


def state(variables: ThreadVariables, rounds_done: int, depth: int = 3) -> RunState:
    return RunState("run1", "heat pumps", depth, variables, rounds_done)


def test_an_iterative_run_shows_its_searches_then_the_one_running() -> None:
    variables = ThreadVariables(
        topics=["an earlier run's topic", "heat pumps", "cold climates"],
        findings=[
            Finding(topic="an earlier run's topic", results=[result("https://old.example/")]),
            Finding(
                topic="heat pumps",
                results=[
                    result("https://a.example/1", "One"),
                    result("notes://internal/7", "Internal", server="wiki"),  # no web address
                    result("https://b.example/2", "Two"),
                    result("https://c.example/3", "Three"),
                    result("https://d.example/4", "Four"),
                ],
            ),
            Finding(topic="cold climates", error="search failed"),
        ],
    )
    run = state(variables, rounds_done=2)
    tasks = IterativeStrategy.tasks(run, "costs")
    assert [(t.id, t.title, t.status) for t in tasks] == [
        ("search-1", "heat pumps", TaskStatus.COMPLETE),
        ("search-2", "cold climates", TaskStatus.ERROR),
        ("search-3", "costs", TaskStatus.IN_PROGRESS),
    ]
    assert tasks[0].found == 5
    assert tasks[0].sources == (  # the first three web addresses the search returned
        TaskSource("One", "https://a.example/1"),
        TaskSource("Two", "https://b.example/2"),
        TaskSource("Three", "https://c.example/3"),
    )
    assert tasks[1].sources == () and tasks[2].sources == ()

    # Between two searches the planned topic is pending; once the depth is reached, none.
    variables.next_search_topic, variables.should_continue = "costs", True
    assert IterativeStrategy.tasks(run)[-1].status is TaskStatus.PENDING
    assert len(IterativeStrategy.tasks(state(variables, rounds_done=2, depth=2))) == 2
    assert [t.id for t in final_tasks(IterativeStrategy.tasks(run))] == ["search-1", "search-2"]


def test_a_graph_run_shows_its_sub_questions_and_where_each_stands() -> None:
    def node(name: str, status: NodeStatus, after: list[str] | None = None) -> GraphNode:
        return GraphNode(
            name=name, question=f"{name}?", after=after or [], run_id="run1", status=status
        )

    variables = ThreadVariables(
        topics=["a?", "b?"],
        findings=[
            Finding(topic="a?", results=[result("https://a.example/")]),
            Finding(topic="b?", results=[result("https://b.example/")]),
        ],
        strategy_state={
            "graph": GraphState(
                nodes=[
                    GraphNode(
                        name="old", question="old?", run_id="earlier", status=NodeStatus.ANSWERED
                    ),
                    node("a", NodeStatus.ANSWERED),
                    node("b", NodeStatus.SEARCHED),  # being answered
                    node("c", NodeStatus.PENDING),  # no parent: searching (or waiting for one)
                    node("d", NodeStatus.PENDING, after=["b"]),  # waits for b
                    node("e", NodeStatus.FAILED),
                ]
            )
        },
    )
    tasks = GraphStrategy.tasks(state(variables, rounds_done=0))
    assert [(t.id, t.status) for t in tasks] == [
        ("node-a", TaskStatus.COMPLETE),
        ("node-b", TaskStatus.IN_PROGRESS),
        ("node-c", TaskStatus.IN_PROGRESS),
        ("node-d", TaskStatus.PENDING),
        ("node-e", TaskStatus.ERROR),
    ]
    assert tasks[0].sources == (TaskSource("T", "https://a.example/"),)
    assert [t.id for t in final_tasks(tasks)] == ["node-a", "node-e"]
