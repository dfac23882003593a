"""The research side of a process, built once over one database: the run executor
(:mod:`core.research.executor`) and the request service (:mod:`core.research.requests`), sharing the
registry of the runs executing in this process, so that a stop or cancel taken here reaches such a
run at once. The chat layer is given ``requests`` only; the runners ``executor``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from core.config import EnvSettings
from core.engine.registry import build_strategies
from core.engine.strategy import StrategyTools
from core.llm.protocols import JsonModel, TextModel
from core.research.executing import LocalRuns
from core.research.executor import RunExecutor
from core.research.policy import Clocks, Reading, RunPolicy
from core.research.requests import RunRequests
from core.research.writer import ReportWriter
from core.search import SearchProvider
from storage import Store

if TYPE_CHECKING:
    from core.metrics import Metrics  # (prometheus-client is imported by `fathom serve` only)


class Research:
    """``executor`` and ``requests`` over one store (see the module docstring)."""

    def __init__(
        self,
        *,
        store: Store,
        planner: TextModel,
        writer: TextModel,
        search: SearchProvider,
        verifier: JsonModel | None = None,
        reading: Reading | None = None,
        strategy_settings: Mapping[str, EnvSettings] | None = None,
        policy: RunPolicy | None = None,
        clocks: Clocks | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        """What the executor (:class:`~core.research.executor.RunExecutor`) and the request
        service (:class:`~core.research.requests.RunRequests`) are built from: the
        ``planner`` (also the graph's sub-question answers), ``writer`` and ``search``
        clients; ``verifier`` checks every cited claim of a report (None: reports are not
        checked); ``reading``: what runs read besides search results (result pages,
        attached files, internal sources); ``strategy_settings``: each registered
        strategy's settings by its name (those not given: their defaults); ``policy``: how
        runs execute here (the settings); ``clocks``: the clocks (tests pin them);
        ``metrics`` counts runs."""
        #: The store both were built over.
        self.store = store
        #: How runs execute in this process (its claims' owner named).
        self.policy = policy = (policy or RunPolicy()).resolved()
        clocks = clocks or Clocks()
        reading = reading or Reading()
        local = LocalRuns()
        seconds, timer = policy.verify_seconds, clocks.timer
        tools = StrategyTools(planner, search, reading.pages, verifier, seconds, timer)
        report = ReportWriter(
            writer, store.digests, verifier=verifier, verify_seconds=seconds, timer=timer
        )
        self.executor = RunExecutor(
            store,
            build_strategies(tools, strategy_settings),
            report,
            policy=policy,
            clocks=clocks,
            reading=reading,
            local=local,
            metrics=metrics,
        )
        self.requests = RunRequests(
            runs=store.runs,
            threads=store.threads,
            feedback=store.feedback,
            local=local,
            timezone=policy.timezone,
            clock=clocks.now,
            quota=policy.quota,
            prices=policy.prices,
            metrics=metrics,
            run_tokens=policy.budget.tokens,
        )
