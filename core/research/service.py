"""The research side of a process, built once over one database: the run executor
(:mod:`core.research.executor`) and the request service (:mod:`core.research.requests`), sharing the
registry of the runs executing in this process, so that a stop or cancel taken here reaches such a
run at once. The chat layer is given ``requests`` only; the runners ``executor``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from core.config import VERIFY_SECONDS, EnvSettings
from core.dates import Clock, utcnow
from core.engine.budget import RunBudget
from core.engine.files import FileReader
from core.engine.registry import build_strategies
from core.engine.strategy import StrategyTools
from core.llm.protocols import JsonModel, TextModel
from core.pages.reader import PageReader
from core.research.cost import Prices
from core.research.executing import LocalRuns
from core.research.executor import RunExecutor
from core.research.lease import LeaseTiming
from core.research.requests import RunRequests, UserQuota
from core.research.steps import InternalSources
from core.research.writer import ReportWriter
from core.search import SearchProvider
from core.timer import MONOTONIC, Timer
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
        owner: str | None = None,
        timing: LeaseTiming | None = None,
        max_attempts: int = 3,
        reader: PageReader | None = None,
        strategy_settings: Mapping[str, EnvSettings] | None = None,
        metrics: Metrics | None = None,
        files: FileReader | None = None,
        timezone: str | ZoneInfo = "UTC",
        clock: Clock = utcnow,
        knowledge: InternalSources | None = None,
        budget: RunBudget | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        quota: UserQuota | None = None,
        prices: Prices | None = None,
        verifier: JsonModel | None = None,
        verify_seconds: float = VERIFY_SECONDS,
        timer: Timer = MONOTONIC,
    ) -> None:
        """The settings of :class:`~core.research.executor.RunExecutor` and
        :class:`~core.research.requests.RunRequests`, and what their parts are built from: the
        ``planner`` (also the graph's sub-question answers), ``writer`` and ``search``
        clients; ``reader`` reads the best result pages of every search (None: snippets
        only); ``strategy_settings``: each registered strategy's settings by its name (those
        not given: their defaults); ``verifier`` checks every cited claim of a report
        (None: reports are not checked), within ``verify_seconds`` measured on ``timer``."""
        #: The store both were built over.
        self.store = store
        local = LocalRuns()
        tools = StrategyTools(planner, search, reader, verifier, verify_seconds, timer)
        strategies = build_strategies(tools, strategy_settings)
        self.executor = RunExecutor(
            runs=store.runs,
            claims=store.claims,
            threads=store.threads,
            digests=store.digests,
            strategies=strategies,
            writer=ReportWriter(
                writer,
                store.digests,
                verifier=verifier,
                verify_seconds=verify_seconds,
                timer=timer,
            ),
            local=local,
            owner=owner,
            timing=timing,
            max_attempts=max_attempts,
            files=files,
            knowledge=knowledge,
            budget=budget,
            quota=quota,
            timezone=timezone,
            clock=clock,
            monotonic=monotonic,
            prices=prices,
            metrics=metrics,
        )
        self.requests = RunRequests(
            runs=store.runs,
            threads=store.threads,
            feedback=store.feedback,
            local=local,
            timezone=timezone,
            clock=clock,
            quota=quota,
            prices=prices,
            metrics=metrics,
            run_tokens=budget.tokens if budget is not None else None,
        )
