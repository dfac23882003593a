"""A run's plan as the steps a chat shows (:class:`core.engine.progress.ProgressTask`), read from
its state: each search of an iterative run, each sub-question of a graph run, with its status and
the first few pages its search returned.

Only what a search returned becomes a source (its address, as the provider gave it, when it is
a web address); titles are the topics and questions the planner wrote, untrusted text the
platform escapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.engine.graph.state import GraphNode, NodeStatus, graph_of
from core.engine.progress import ProgressTask, TaskSource, TaskStatus
from core.engine.state import RunState
from core.models import Finding

#: Sources shown per step (the report lists them all).
SOURCES_PER_TASK = 3

_NODE_STATUS = {
    NodeStatus.SEARCHED: TaskStatus.IN_PROGRESS,  # its answer is being written
    NodeStatus.ANSWERED: TaskStatus.COMPLETE,
    NodeStatus.FAILED: TaskStatus.ERROR,
}


def _web_address(url: str) -> bool:
    return url.startswith(("https://", "http://"))


def _sources(finding: Finding | None) -> tuple[int, tuple[TaskSource, ...]]:
    if finding is None:
        return 0, ()
    linked = [r for r in finding.results if _web_address(r.url)]
    shown = tuple(TaskSource(r.title or r.url, r.url) for r in linked[:SOURCES_PER_TASK])
    return len(finding.results), shown


def _last_findings(findings: Iterable[Finding]) -> dict[str, Finding]:
    """Each topic's latest finding."""
    return {f.topic: f for f in findings}


def iterative_tasks(
    state: RunState, topics: Sequence[str], searching: str | None
) -> list[ProgressTask]:
    """This run's searches (``topics``, in order), then the one running (``searching``) or
    planned and not searched yet."""
    findings = _last_findings(state.variables.findings)
    tasks: list[ProgressTask] = []
    for i, topic in enumerate(topics, 1):
        finding = findings.get(topic)
        failed = finding is not None and bool(finding.error) and not finding.results
        found, sources = _sources(finding)
        status = TaskStatus.ERROR if failed else TaskStatus.COMPLETE
        tasks.append(ProgressTask(f"search-{i}", topic, status, found, sources))
    variables = state.variables
    planned = variables.next_search_topic if variables.should_continue else None
    upcoming = searching or planned
    if upcoming and upcoming not in topics and len(tasks) < state.depth:
        status = TaskStatus.IN_PROGRESS if searching else TaskStatus.PENDING
        tasks.append(ProgressTask(f"search-{len(tasks) + 1}", upcoming, status))
    return tasks


def graph_tasks(state: RunState) -> list[ProgressTask]:
    """This run's sub-questions in the order they were planned. A pending one whose parents
    are all done is in progress (searching, or waiting for a free search slot)."""
    graph = graph_of(state.variables)
    own = graph.of_run(state.run_id)
    by_name = {n.name: n for n in graph.nodes}
    findings = _last_findings(state.variables.findings)
    tasks: list[ProgressTask] = []
    for node in own:
        status = _NODE_STATUS.get(node.status) or _pending_status(node, by_name)
        found, sources = _sources(findings.get(node.question))
        if node.status is NodeStatus.PENDING:
            found, sources = 0, ()
        tasks.append(ProgressTask(f"node-{node.name}", node.question, status, found, sources))
    return tasks


def _pending_status(node: GraphNode, graph: dict[str, GraphNode]) -> TaskStatus:
    finished = (NodeStatus.ANSWERED, NodeStatus.FAILED)
    parents = [graph[p] for p in node.after if p in graph]
    ready = all(p.status in finished for p in parents)
    return TaskStatus.IN_PROGRESS if ready else TaskStatus.PENDING
