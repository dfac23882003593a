"""The graph strategy's state in a thread: its sub-questions (``strategyState.graph.nodes``).

A node's question joins the thread's ``topics`` and its results ``findings`` when it is
searched; the node keeps where it stands and its short answer, so an interrupted run resumes
without searching an answered node again and a follow-up in the thread may extend the graph.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, Field

from core.models import StrategyState, ThreadVariables

#: The graph strategy's name, under which its state is kept.
GRAPH = "graph"


class NodeStatus(enum.StrEnum):
    """Where a sub-question stands."""

    PENDING = "pending"  # planned, not searched yet
    SEARCHED = "searched"  # its finding is stored; the answer is not written yet
    ANSWERED = "answered"
    FAILED = "failed"


class GraphNode(BaseModel):
    """A sub-question, as kept with the thread's variables."""

    name: str
    question: str
    #: The names of the nodes it depends on (their answers are its context).
    after: list[str] = Field(default_factory=list)
    #: The planner turn (of its run) that planned it, and that run.
    turn: int = 1
    run_id: str = ""
    status: NodeStatus = NodeStatus.PENDING
    #: A short answer citing ``[n]`` of the run's numbered sources.
    answer: str | None = None
    #: Why it failed (search failed, no results, a parent failed, the model failed).
    error: str | None = None


class GraphState(StrategyState):
    """The thread's sub-questions, of every graph run in it, in the order they were planned."""

    key = GRAPH

    nodes: list[GraphNode] = Field(default_factory=list)

    def of_run(self, run_id: str) -> list[GraphNode]:
        """The sub-questions run ``run_id`` planned."""
        return [node for node in self.nodes if node.run_id == run_id]

    def absorb(self, stored: GraphState) -> None:
        """Nodes another writer stored that this copy lacks go in front of its own."""
        names = {node.name for node in self.nodes}
        self.nodes[:0] = [node for node in stored.nodes if node.name not in names]


def graph_of(variables: ThreadVariables) -> GraphState:
    """The graph of a thread's variables (empty when no graph run has planned one)."""
    return GraphState.of(variables)
