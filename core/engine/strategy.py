"""The research strategies: the interface each one fills, and the registry that picks a run's
strategy by its name (:class:`core.models.Strategy`).

A strategy researches a run from its thread's variables up to the findings; the service runs
it between checkpoints and the writer turns what it found into the report. To add one: a value
of ``core.models.Strategy``, a class with the methods of :class:`Strategy` (``iterative.py`` and
``graph.py`` are the two), its entry in :func:`build_strategies` and, once users may pick it,
in ``core.commands.AVAILABLE_STRATEGIES``.
"""

from __future__ import annotations

from typing import Protocol

from core import models
from core.engine.graph import GraphStrategy
from core.engine.iterative import IterativeStrategy
from core.engine.state import RunState, StepHooks, StopReason, TextModel
from core.pages.reader import PageReader
from core.progress import ProgressTask
from core.search import SearchProvider


class Strategy(Protocol):
    """One way of researching a run."""

    async def run(self, state: RunState, hooks: StepHooks) -> StopReason:
        """Research until the run is done or cancelled, resuming from ``state`` (a run that
        was interrupted) and calling ``hooks.checkpoint`` after every step; why it stopped."""
        ...

    def run_topics(self, state: RunState) -> list[str]:
        """The topics this run searched (the thread's topics also hold earlier runs')."""
        ...

    def writer_graph(self, state: RunState) -> list[str]:
        """The answered sub-questions the writer builds the report on, one line each (empty:
        the writer works from the findings alone)."""
        ...

    def tasks(self, state: RunState, searching: str | None = None) -> list[ProgressTask]:
        """This run's plan as it stands (``searching``: the topic being searched now, when
        the strategy searches one at a time)."""
        ...


def build_strategies(
    *,
    planner: TextModel,
    search: SearchProvider,
    reader: PageReader | None,
    max_parallel_searches: int,
    graph_max_nodes: int,
) -> dict[models.Strategy, Strategy]:
    """Every strategy, by name. Sub-questions of the graph strategy are answered by the
    planner's model."""
    return {
        models.Strategy.ITERATIVE: IterativeStrategy(planner, search, reader),
        models.Strategy.GRAPH: GraphStrategy(
            planner,
            planner,
            search,
            reader,
            max_parallel=max_parallel_searches,
            max_nodes=graph_max_nodes,
        ),
    }
