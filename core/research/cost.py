"""What a run cost: ``FATHOM_PRICES`` prices each model's tokens and each search.

``FATHOM_PRICES`` is JSON: a model name to ``[input, output]`` US dollars per million tokens,
and optionally ``"search"``: dollars per search call, e.g.
``{"gpt-4o": [2.5, 10], "o3-mini": [1.1, 4.4], "search": 0.005}``. A run that used a model
with no price has no cost (a partial sum would look like the whole).
"""

from __future__ import annotations

import json
import math

from pydantic import BaseModel, ConfigDict, ValidationError

from core.models import Usage

#: The key of the price per search call.
SEARCH = "search"


class Prices(BaseModel):
    """Prices per million tokens by model, and per search call."""

    model_config = ConfigDict(frozen=True)

    models: dict[str, tuple[float, float]]
    search: float | None = None

    @classmethod
    def parse(cls, text: str) -> Prices:
        """The prices in ``FATHOM_PRICES``; ValueError (one line, saying what is expected)."""
        expected = (
            'expected JSON like {"gpt-4o": [2.5, 10], "search": 0.005} (US dollars per '
            "million input and output tokens, and per search)"
        )
        try:
            raw = json.loads(text)
        except ValueError:
            raise ValueError(f"FATHOM_PRICES is not JSON; {expected}") from None
        if not isinstance(raw, dict):
            raise ValueError(f"FATHOM_PRICES: {expected}")
        search = raw.pop(SEARCH, None)
        try:
            prices = cls(models=raw, search=search)
        except ValidationError:
            raise ValueError(f"FATHOM_PRICES: {expected}") from None
        numbers = [n for pair in prices.models.values() for n in pair]
        numbers += [prices.search] if prices.search is not None else []
        if any(not math.isfinite(n) or n < 0 for n in numbers):
            raise ValueError(f"FATHOM_PRICES: prices must be numbers of at least 0; {expected}")
        return prices

    def cost_by_model(self, usage: Usage, before: Usage | None = None) -> dict[str, float]:
        """What the priced part of ``usage`` (less ``before``: an earlier attempt's) cost,
        in US dollars by model, searches under :data:`SEARCH` (unpriced models are left out:
        the metrics count what is known)."""
        costs: dict[str, float] = {}
        earlier = before.tokens_by_model if before is not None else {}
        for model, (prompt, completion) in usage.tokens_by_model.items():
            price = self.models.get(model)
            if price is None:
                continue
            was = earlier.get(model, [0, 0])
            dollars = max(0, prompt - was[0]) * price[0] + max(0, completion - was[1]) * price[1]
            if dollars > 0:
                costs[model] = dollars / 1_000_000
        searches = usage.searches - (before.searches if before is not None else 0)
        if self.search and searches > 0:
            costs[SEARCH] = searches * self.search
        return costs

    def cost(self, usage: Usage) -> float | None:
        """The run's cost in US dollars; None when a model it used has no price (or it made
        searches and searches have none while it used no model)."""
        total = 0.0
        for model, (prompt, completion) in usage.tokens_by_model.items():
            price = self.models.get(model)
            if price is None:
                return None
            total += (prompt * price[0] + completion * price[1]) / 1_000_000
        if usage.searches:
            if self.search is None and not usage.tokens_by_model:
                return None
            total += usage.searches * (self.search or 0.0)
        return round(total, 6)
