"""The claim check's own time budget (``FATHOM_VERIFY_SECONDS``, issue 52, item 6).

The check starts when the writer has answered, and the report waits for it. A verifier that
hangs would hold the finished report for as long as its model calls may take (each attempt up
to ``FATHOM_LLM_TIMEOUT``, and the check makes up to three kinds of call); with a deadline,
what is settled when it passes stands, and the rest is "not checked". Measured on an injected
:class:`~core.timer.Timer`, so a test moves the time instead of waiting.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from core.config import VERIFY_SECONDS
from core.timer import MONOTONIC, Timer, within

T = TypeVar("T")


class OutOfTime(Exception):
    """The check's time budget ran out before a model call of it ended (or began)."""


class Deadline:
    """When the check must end: ``seconds`` from now on ``timer``."""

    def __init__(self, seconds: float = VERIFY_SECONDS, timer: Timer = MONOTONIC) -> None:
        self.seconds = seconds
        self._timer = timer
        self._end = timer.now() + seconds

    def left(self) -> float:
        """Seconds left (0 when it passed)."""
        return max(0.0, self._end - self._timer.now())

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result if it ends before the deadline; else it is cancelled and
        :class:`OutOfTime` raised (at once, without starting it, when no time is left)."""
        left = self.left()
        if left <= 0:
            work.close()
            raise OutOfTime(f"the claim check's {self.seconds:g} s had passed")
        try:
            return await within(self._timer, left, work)
        except TimeoutError as exc:
            if self.left() > 0:  # (raised by the work itself, not the deadline)
                raise
            raise OutOfTime(f"the claim check's {self.seconds:g} s ran out") from exc
