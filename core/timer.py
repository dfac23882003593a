"""The clock that waits are measured and slept on, behind one small interface.

Whatever waits out a rate limit, a retry back-off or an edit interval takes a :class:`Timer`,
so a test drives the time (``tests/timers.py``: a timer that moves only when told) instead of
sleeping through it. The process uses :data:`MONOTONIC`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Timer(Protocol):
    """Seconds on a monotonic clock, and a sleep measured on it."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicTimer:
    """The process's monotonic clock and asyncio's sleep."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


#: The timer of the process (it holds no state).
MONOTONIC: Timer = MonotonicTimer()
