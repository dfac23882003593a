"""The graph planner's answer and its check: which proposed nodes may join the graph.

The planner is a model, so what it proposes is untrusted: names and questions are cleaned
where they enter, and a node that repeats, depends on what cannot be answered or closes a
cycle is left out, with what was wrong in words the planner's second try can use.
"""

from __future__ import annotations

import graphlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.engine.graph.state import GraphNode, NodeStatus
from core.engine.topics import find_duplicate
from core.text import clean_text, has_visible
from core.untrusted import neutralise

_NAME = re.compile(r"[^\w-]+", re.UNICODE)


def _clean(value: str) -> str:
    return " ".join(neutralise(clean_text(value)).split())


class PlannedNode(BaseModel):
    """A node as the planner proposes it (untrusted: cleaned where it enters)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    question: str
    after: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _clean_name(cls, value: str) -> str:
        return _NAME.sub("-", _clean(value)).strip("-")[:40]

    @field_validator("question")
    @classmethod
    def _clean_question(cls, value: str) -> str:
        return _clean(value)[:300]

    @field_validator("after", mode="before")
    @classmethod
    def _clean_after(cls, value: object) -> object:
        if value is None:
            return []
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            return [_NAME.sub("-", _clean(str(v))).strip("-")[:40] for v in value]
        return value


class GraphPlan(BaseModel):
    """What the planner answers each turn."""

    model_config = ConfigDict(extra="ignore")

    nodes: list[PlannedNode] = Field(default_factory=list)
    finish: bool = False


@dataclass
class CheckedPlan:
    nodes: list[PlannedNode]
    #: What was wrong, in the planner's words (for the planner's second try).
    problems: list[str]
    #: The kinds of problem, in our words only (for the run's notes).
    kinds: list[str] = field(default_factory=list)


def check_plan(
    plan: GraphPlan, graph: Sequence[GraphNode], searched: Sequence[str], room: int
) -> CheckedPlan:
    """The plan's valid nodes, and what was wrong with the others.

    A node is left out when it has no name or no visible question, repeats a name, repeats
    (nearly) a question of the graph, a searched topic or an earlier node of the plan, comes
    after a node that is unknown, unanswered or left out, or is part of a cycle; and beyond
    ``room`` nodes.
    """
    problems: list[str] = []
    kinds: list[str] = []

    def problem(kind: str, text: str) -> None:
        problems.append(text)
        if kind not in kinds:
            kinds.append(kind)

    known = {node.name for node in graph}
    answered = {node.name for node in graph if node.status is NodeStatus.ANSWERED}
    questions = [node.question for node in graph] + list(searched)
    candidates: list[PlannedNode] = []
    for node in plan.nodes:
        if not node.name or not has_visible(node.question):
            problem("no name or question", "a node without a name or a question")
        elif node.name in known or any(c.name == node.name for c in candidates):
            problem("a repeated name", f'the name "{node.name}" is used twice')
        elif (same := find_duplicate(node.question, questions)) is not None:
            problem("a repeated question", f'"{node.question}" repeats "{same}"')
        else:
            candidates.append(node)
            questions.append(node.question)
    planned = {c.name for c in candidates}
    for node in candidates:
        for parent in node.after:
            if parent not in known and parent not in planned:
                problem(
                    "an unknown parent", f'"{node.name}" comes after "{parent}", which is no node'
                )
            elif parent in known and parent not in answered:
                problem(
                    "an unanswered parent",
                    f'"{node.name}" comes after "{parent}", which has no answer',
                )
    # Cycles among the new nodes (graphlib names one; its nodes are left out, and again).
    edges = {c.name: {p for p in c.after if p in planned} for c in candidates}
    while True:
        try:
            graphlib.TopologicalSorter(edges).prepare()
            break
        except graphlib.CycleError as cycle:
            members = list(dict.fromkeys(cycle.args[1]))
            problem("a cycle", "a cycle: " + " -> ".join(members + members[:1]))
            for name in members:
                edges.pop(name, None)
            edges = {n: ps - set(members) for n, ps in edges.items()}
            planned -= set(members)
    # Keep what is valid, in the plan's order, each once its parents are kept; a node after a
    # left-out node is left out too.
    kept: list[PlannedNode] = []
    ok = set(answered)
    waiting = [c for c in candidates if c.name in planned]
    progressed = True
    while progressed:
        progressed = False
        for node in waiting:
            if node.name not in ok and all(p in ok for p in node.after) and len(kept) < room:
                kept.append(node)
                ok.add(node.name)
                progressed = True
    for node in waiting:
        if node.name in ok:
            continue
        if all(p in ok for p in node.after):
            problem(
                "beyond the node limit",
                f'"{node.name}" is beyond the {room} nodes that may still be added',
            )
        elif all(p in answered or p in planned for p in node.after):
            problem("after a left-out node", f'"{node.name}" comes after a node that was left out')
    order = {c.name: i for i, c in enumerate(candidates)}
    kept.sort(key=lambda c: order[c.name])
    return CheckedPlan(kept, problems, kinds)
