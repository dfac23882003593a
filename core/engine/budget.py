"""A run's budgets: how many tokens (``FATHOM_MAX_RUN_TOKENS``) and seconds
(``FATHOM_MAX_RUN_SECONDS``) its searching may take before it stops and writes the report
with what it has. The depth is the third budget, enforced by the strategies.

A share of the token budget is the writer's reserve: the searching stops once the run has used
the rest, so the writer's own call (the largest prompt of a run) still fits in the budget. The
seconds count from the run's first start (``research_runs.started_at``), across a takeover by
another replica after a crash; an explicit resume (``fathom resume``) starts them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.engine.state import StopReason
from core.models import Usage

#: The share of the token budget kept for the writer's call.
WRITER_RESERVE = 0.2


@dataclass(frozen=True)
class RunBudget:
    """``tokens`` (prompt + completion) and ``seconds`` per run; None: unlimited."""

    tokens: int | None = None
    seconds: float | None = None
    writer_reserve: float = WRITER_RESERVE

    @property
    def searching_tokens(self) -> int | None:
        """The tokens the searching may use (the budget less the writer's reserve)."""
        if self.tokens is None:
            return None
        return int(self.tokens * (1.0 - self.writer_reserve))

    def spent(self, usage: Usage, elapsed_seconds: float) -> StopReason | None:
        """Which budget is spent (None: searching may go on)."""
        limit = self.searching_tokens
        if limit is not None and usage.prompt_tokens + usage.completion_tokens >= limit:
            return StopReason.TOKEN_BUDGET
        if self.seconds is not None and elapsed_seconds >= self.seconds:
            return StopReason.TIME_BUDGET
        return None
