"""A graph run's plan as the steps a chat shows: each sub-question, in the order it was
planned, with its status and the first few pages its search returned (the rules every
strategy's steps share: :mod:`core.engine.tasks`)."""

from __future__ import annotations

from core.engine.graph.state import GraphNode, NodeStatus, graph_of
from core.engine.progress import ProgressTask, TaskStatus
from core.engine.state import RunState
from core.engine.tasks import finding_sources, last_findings

_NODE_STATUS = {
    NodeStatus.SEARCHED: TaskStatus.IN_PROGRESS,  # its answer is being written
    NodeStatus.ANSWERED: TaskStatus.COMPLETE,
    NodeStatus.FAILED: TaskStatus.ERROR,
}


def graph_tasks(state: RunState) -> list[ProgressTask]:
    """This run's sub-questions in the order they were planned. A pending one whose parents
    are all done is in progress (searching, or waiting for a free search slot)."""
    graph = graph_of(state.variables)
    own = graph.of_run(state.run_id)
    by_name = {n.name: n for n in graph.nodes}
    findings = last_findings(state.variables.findings)
    tasks: list[ProgressTask] = []
    for node in own:
        status = _NODE_STATUS.get(node.status) or _pending_status(node, by_name)
        found, sources = finding_sources(findings.get(node.question))
        if node.status is NodeStatus.PENDING:
            found, sources = 0, ()
        tasks.append(ProgressTask(f"node-{node.name}", node.question, status, found, sources))
    return tasks


def _pending_status(node: GraphNode, graph: dict[str, GraphNode]) -> TaskStatus:
    finished = (NodeStatus.ANSWERED, NodeStatus.FAILED)
    parents = [graph[p] for p in node.after if p in graph]
    ready = all(p.status in finished for p in parents)
    return TaskStatus.IN_PROGRESS if ready else TaskStatus.PENDING
