"""A run's budgets: how many tokens (``FATHOM_MAX_RUN_TOKENS``) and seconds
(``FATHOM_MAX_RUN_SECONDS``) it may take. The depth is the third budget, enforced by the
strategies.

The token budget bounds the whole run: every model call (the planner's, a graph's answers, the
writer's, the claim check's), prompt and completion as the endpoint counts them. A share of it
is the writer's reserve (:meth:`RunBudget.reserve`): the searching stops once the run has used
the rest, or when its next step, expected as large as its largest so far, would pass it
(:class:`StepMeter`); the writer and the claim check are fitted into what is left
(:class:`core.llm.tokens.TokenRoom`). A chat run's daily allowance (its share of its requester's
``FATHOM_USER_DAILY_TOKENS``, reserved when it was admitted) caps the budget the same way.

The seconds count from the run's first start (``research_runs.started_at``), across a takeover
by another replica after a crash; an explicit resume (``fathom resume``) starts them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.engine.state import StopReason
from core.llm.tokens import TokenRoom
from core.models import Usage

#: The share of the token budget kept for the writer's call and the claim check, and the
#: least it keeps (half the budget at most): a report needs its instructions, some sources and
#: room to answer, whatever the share.
WRITER_RESERVE = 0.2
MIN_WRITER_RESERVE = 4_000


@dataclass(frozen=True)
class RunBudget:
    """``tokens`` (prompt + completion) and ``seconds`` per run; None: unlimited."""

    tokens: int | None = None
    seconds: float | None = None
    writer_reserve: float = WRITER_RESERVE

    def reserve(self, tokens: int) -> int:
        """The writer's reserve of a budget of ``tokens``: its share, at least
        :data:`MIN_WRITER_RESERVE` (half the budget when that is less)."""
        return max(int(tokens * self.writer_reserve), min(MIN_WRITER_RESERVE, tokens // 2))

    def limit(self, allowance: int | None = None) -> int | None:
        """The tokens the whole run may use: the budget, or the daily ``allowance`` when it is
        lower (None: unlimited)."""
        if allowance is None:
            return self.tokens
        return allowance if self.tokens is None else min(self.tokens, allowance)

    def searching_tokens(self, allowance: int | None = None) -> int | None:
        """The tokens the searching may use (the limit less the writer's reserve)."""
        limit = self.limit(allowance)
        return None if limit is None else limit - self.reserve(limit)

    def quota_binds(self, allowance: int | None) -> bool:
        """Whether the daily ``allowance``, not the run's own budget, is the limit."""
        return allowance is not None and (self.tokens is None or allowance < self.tokens)

    def room(self, usage: Usage, allowance: int | None = None) -> TokenRoom | None:
        """What the writer and the claim check may still spend (None: unlimited)."""
        limit = self.limit(allowance)
        if limit is None:
            return None
        return TokenRoom(limit, usage, quota=self.quota_binds(allowance))

    def spent(
        self,
        usage: Usage,
        elapsed_seconds: float,
        allowance: int | None = None,
        next_step: int = 0,
    ) -> StopReason | None:
        """Which budget is spent (None: searching may go on); ``allowance``: the run's share of
        its requester's daily tokens (None: no daily quota applies); ``next_step``: the tokens
        the next step is expected to take (the largest so far, :class:`StepMeter`): a step that
        would eat into the writer's reserve is not begun."""
        if self.tokens_short(usage, allowance, next_step):
            quota = self.quota_binds(allowance)
            return StopReason.TOKEN_QUOTA if quota else StopReason.TOKEN_BUDGET
        if self.seconds is not None and elapsed_seconds >= self.seconds:
            return StopReason.TIME_BUDGET
        return None

    def tokens_short(self, usage: Usage, allowance: int | None, next_step: int = 0) -> bool:
        """Whether the searching has spent its share, or its next step would pass it."""
        limit = self.searching_tokens(allowance)
        used = usage.prompt_tokens + usage.completion_tokens
        return limit is not None and (used >= limit or used + next_step > limit)


@dataclass
class StepMeter:
    """The tokens of the largest step of a run's searching so far (a step: what it spent
    between two looks, a planner call or a graph's wave of answers), the next one's
    expected size."""

    last: int = 0
    largest: int = 0

    def look(self, usage: Usage) -> int:
        used = usage.prompt_tokens + usage.completion_tokens
        self.largest = max(self.largest, used - self.last)
        self.last = used
        return self.largest
