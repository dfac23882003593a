"""Every research strategy, by name: the one place a strategy is registered (like
``bots.platforms.PLATFORMS`` for the chat platforms)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator

from core.config import EnvSettings, load
from core.engine.graph.strategy import GRAPH_STRATEGY
from core.engine.iterative import ITERATIVE_STRATEGY
from core.engine.strategy import RegisteredStrategy, Strategy, StrategyTools

STRATEGIES: Mapping[str, RegisteredStrategy[Any]] = {
    entry.name: entry for entry in (ITERATIVE_STRATEGY, GRAPH_STRATEGY)
}


def known_strategy(name: str) -> str:
    """``name`` if a strategy of that name is registered (:data:`STRATEGIES`)."""
    name = name.strip().lower()
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; available: {', '.join(STRATEGIES)}")
    return name


#: A registered strategy's name, checked where it enters (a request, a setting).
StrategyName = Annotated[str, AfterValidator(known_strategy)]


def load_strategy_settings() -> dict[str, EnvSettings]:
    """Every strategy's settings from the environment (``ConfigError``: one readable line)."""
    return {name: load(entry.settings) for name, entry in STRATEGIES.items()}


def build_strategies(
    tools: StrategyTools, settings: Mapping[str, EnvSettings] | None = None
) -> dict[str, Strategy]:
    """Every strategy, by name, with its ``settings`` (those not given: their defaults)."""
    chosen = settings or {}
    return {name: entry.create(tools, chosen.get(name)) for name, entry in STRATEGIES.items()}
