"""A ``core.timer.Timer`` whose time moves only when a test moves it.

Code that waits out an interval, a back-off or a ``Retry-After`` sleeps on the timer it was
given; with a :class:`ManualTimer` a test sees the sleep start (:meth:`ManualTimer.sleeping`),
checks how long it is, and moves the time on, without waiting for real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class ManualTimer:
    def __init__(self, start: float = 0.0) -> None:
        self.time = start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []
        self._slept = asyncio.Event()  # set whenever something starts sleeping

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self.time + max(seconds, 0.0), future)
        self._sleepers.append(entry)
        self._slept.set()
        try:
            await future
        finally:
            self._sleepers.remove(entry)

    def waiting_until(self) -> list[float]:
        """When each sleeper wakes up, soonest first."""
        return sorted(at for at, future in self._sleepers if not future.done())

    def advance(self, seconds: float) -> None:
        """Move the time on by ``seconds``; wake every sleeper whose time has come."""
        self.time += seconds
        for at, future in list(self._sleepers):
            if at <= self.time and not future.done():
                future.set_result(None)

    async def sleeping(self, within: float = 10.0) -> float:
        """Wait (real time, at most ``within`` s) until something sleeps on this timer; the
        soonest wake-up time."""
        async with asyncio.timeout(within):
            while not self.waiting_until():
                self._slept.clear()
                await self._slept.wait()
        return self.waiting_until()[0]

    async def run(self, work: Awaitable[T], within: float = 10.0) -> T:
        """Await ``work``, moving the time to each sleeper's wake-up as soon as all that is
        left to happen is a sleep on this timer (``within``: real seconds at most)."""
        task = asyncio.ensure_future(work)
        async with asyncio.timeout(within):
            while not task.done():
                await asyncio.wait({task}, timeout=0.002)
                waits = self.waiting_until()
                if waits and not task.done():
                    self.advance(max(waits[0] - self.time, 0.0))
        return task.result()
