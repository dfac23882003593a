"""The clock that waits are measured and slept on, behind one small interface.

Whatever waits out a rate limit, a retry back-off or an edit interval takes a :class:`Timer`,
so a test drives the time (``tests/timers.py``: a timer that moves only when told) instead of
sleeping through it. The process uses :data:`MONOTONIC`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

T = TypeVar("T")


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


async def within(timer: Timer, seconds: float, work: Awaitable[T]) -> T:
    """``work``'s result if it ends within ``seconds`` measured on ``timer``; else ``work`` is
    cancelled (and awaited, so what it holds is released) and :class:`TimeoutError` raised.

    A deadline for the whole of ``work``, however it spends its time (a server that trickles
    a byte now and then keeps a per-read timeout from ever firing)."""
    task = asyncio.ensure_future(work)
    alarm = asyncio.ensure_future(timer.sleep(seconds))
    late = True
    try:
        await asyncio.wait({task, alarm}, return_when=asyncio.FIRST_COMPLETED)
        late = not task.done()
    finally:
        alarm.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if late:
        if not task.cancelled():
            task.exception()  # (what it raised while being cancelled is not its answer)
        raise TimeoutError(f"did not end within {seconds:g} s")
    return task.result()
