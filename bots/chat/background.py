"""Work an adapter starts after acknowledging a platform (answers, lookups): kept referenced
while it runs, and waited for (briefly) at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

#: How long shutdown waits for work still running (seconds).
SHUTDOWN_WAIT = 5.0


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for what is still running, at most :data:`SHUTDOWN_WAIT` seconds."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=SHUTDOWN_WAIT)
