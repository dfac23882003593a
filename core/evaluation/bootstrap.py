"""How sure a total over questions is: a percentile bootstrap over the questions, seeded so that
the same results always print the same interval.

The questions are resampled with replacement :data:`RESAMPLES` times and the total computed on
each resample; the interval is the 2.5th to the 97.5th percentile of those totals (a 95 %
percentile interval; Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13). For a
comparison the pairs (a question's result before and now) are resampled together, so the
interval is that of the paired difference. Fewer than :data:`MIN_QUESTIONS` questions give no
interval: it would mostly show how few they are.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

#: Resamples per interval, the fixed seed of their draws, and the fewest questions for one.
RESAMPLES = 2000
SEED = 52
MIN_QUESTIONS = 10


def described(over: str = "questions") -> str:
    """What the tables say of their intervals (``over``: what was resampled)."""
    return f"95 % percentile bootstrap over the {over} ({RESAMPLES:,} resamples, seed {SEED})"


T = TypeVar("T")


def interval(
    items: Sequence[T], statistic: Callable[[Sequence[T]], float | None]
) -> tuple[float, float] | None:
    """The 95 % percentile bootstrap interval of ``statistic`` over ``items`` (None: fewer
    than :data:`MIN_QUESTIONS` items, or a statistic that no resample gives)."""
    if len(items) < MIN_QUESTIONS:
        return None
    draws = random.Random(SEED)
    count = len(items)
    values = []
    for _ in range(RESAMPLES):
        value = statistic([items[draws.randrange(count)] for _ in range(count)])
        if value is not None:  # e.g. a resample without any claim has no share of them
            values.append(value)
    if len(values) < 2:
        return None
    cuts = statistics.quantiles(values, n=40, method="inclusive")  # every 2.5 %
    return cuts[0], cuts[-1]
