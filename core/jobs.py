"""Running research jobs outside the request that asked for them.

A platform handler commits the run row, enqueues its id and acknowledges; a
:class:`JobRunner` executes it later. :class:`InProcessJobRunner` (the embedded
default) uses asyncio tasks in this process, keeps the heartbeats of its runs
fresh, and on a graceful stop releases unfinished runs so the next start (of any
replica) resumes them from their checkpoints. A queue-backed runner
(procrastinate on PostgreSQL) implements the same protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from storage import Store

log = logging.getLogger(__name__)

#: The cancellation message a runner uses when the process is shutting down.
SHUTDOWN = "fathom-shutdown"

RunJob = Callable[[str], Awaitable[None]]


class JobRunner(Protocol):
    async def enqueue(self, run_id: str) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class InProcessJobRunner:
    def __init__(
        self,
        job: RunJob,
        *,
        store: Store,
        max_concurrent: int = 200,
        heartbeat_interval: float = 30.0,
        stale_after: float = 180.0,
    ) -> None:
        self._job = job
        self._store = store
        self._slots = asyncio.Semaphore(max_concurrent)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._heartbeat_interval = heartbeat_interval
        self._stale_after = stale_after
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def active(self) -> list[str]:
        return list(self._tasks)

    async def enqueue(self, run_id: str) -> None:
        if run_id in self._tasks:
            return
        task = asyncio.create_task(self._run(run_id), name=f"run-{run_id}")
        self._tasks[run_id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(run_id, None))

    async def _run(self, run_id: str) -> None:
        async with self._slots:
            try:
                await self._job(run_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("research job %s crashed", run_id)

    async def start(self) -> None:
        """Start heartbeats and resume runs that another (dead) process left unfinished."""
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._beat(), name="run-heartbeats")
        await self.resume_stale()

    async def resume_stale(self) -> list[str]:
        cutoff = datetime.now(UTC) - timedelta(seconds=self._stale_after)
        stale = await self._store.unfinished_runs(heartbeat_before=cutoff)
        for run in stale:
            log.info("resuming run %s from its checkpoint", run.id)
            await self.enqueue(run.id)
        return [run.id for run in stale]

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            try:
                await self._store.touch_runs(list(self._tasks))
            except Exception:
                log.warning("could not refresh run heartbeats", exc_info=True)

    async def drain(self) -> None:
        """Wait until every enqueued job has finished (tests, CLI)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def stop(self, grace: float = 5.0) -> None:
        """Give running jobs ``grace`` seconds, then interrupt them for a later resume."""
        if self._tasks:
            _done, pending = await asyncio.wait(list(self._tasks.values()), timeout=grace)
            for task in pending:
                task.cancel(SHUTDOWN)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
