"""A run's plan as the steps a chat shows (:class:`core.engine.progress.ProgressTask`), read from
its state: each search of an iterative run (here), each sub-question of a graph run
(:mod:`core.engine.graph.tasks`), with its status and the first few pages its search returned.

Only what a search returned becomes a source (its address, as the provider gave it, when it is
a web address); titles are the topics and questions the planner wrote, untrusted text the
platform escapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from core.engine.progress import ProgressTask, TaskSource, TaskStatus
from core.engine.state import RunState
from core.models import Finding

#: Sources shown per step (the report lists them all).
SOURCES_PER_TASK = 3


def _web_address(url: str) -> bool:
    return url.startswith(("https://", "http://"))


def finding_sources(finding: Finding | None) -> tuple[int, tuple[TaskSource, ...]]:
    """How many results a step's search returned, and the first few web pages of them."""
    if finding is None:
        return 0, ()
    linked = [r for r in finding.results if _web_address(r.url)]
    shown = tuple(TaskSource(r.title or r.url, r.url) for r in linked[:SOURCES_PER_TASK])
    return len(finding.results), shown


def last_findings(findings: Iterable[Finding]) -> dict[str, Finding]:
    """Each topic's latest finding."""
    return {f.topic: f for f in findings}


def iterative_tasks(
    state: RunState, topics: Sequence[str], searching: str | None
) -> list[ProgressTask]:
    """This run's searches (``topics``, in order), then the one running (``searching``) or
    planned and not searched yet."""
    findings = last_findings(state.variables.findings)
    tasks: list[ProgressTask] = []
    for i, topic in enumerate(topics, 1):
        finding = findings.get(topic)
        failed = finding is not None and bool(finding.error) and not finding.results
        found, sources = finding_sources(finding)
        status = TaskStatus.ERROR if failed else TaskStatus.COMPLETE
        tasks.append(ProgressTask(f"search-{i}", topic, status, found, sources))
    variables = state.variables
    planned = variables.next_search_topic if variables.should_continue else None
    upcoming = searching or planned
    if upcoming and upcoming not in topics and len(tasks) < state.depth:
        status = TaskStatus.IN_PROGRESS if searching else TaskStatus.PENDING
        tasks.append(ProgressTask(f"search-{len(tasks) + 1}", upcoming, status))
    return tasks
