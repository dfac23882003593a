"""Running research jobs outside the request that asked for them.

A platform handler commits the run row, enqueues its id and acknowledges; a
:class:`JobRunner` executes it later. The contract every runner keeps (the in-process one
here, and the queue-backed one of ``FATHOM_QUEUE=procrastinate``):

- a job claims its run with one atomic statement and renews the claim's heartbeat while it
  works (``core.research.lease``); a runner that loses its claim stops, and its writes are
  refused;
- every runner sweeps periodically (every ``FATHOM_STALE_RUN_AFTER / 2`` seconds) for runs of
  the platforms it can deliver to that nobody works on: queued or running with an expired
  heartbeat, and finished runs whose delivery is pending with an expired heartbeat; it
  enqueues them, and the job's claim settles which runner gets each. Such runs of a platform
  no process can deliver to (a console run its ``fathom`` process left, a digest for a
  channel that is no chat) are enqueued too: the job fails them with the reason;
- on a graceful stop, running jobs get a grace period, then are cancelled and hand their
  runs back (heartbeat at the epoch), so any runner's next sweep takes them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from core.research.lease import LeaseTiming
from storage import ClaimStore

log = logging.getLogger(__name__)

#: The cancellation message a runner uses when the process is shutting down.
SHUTDOWN = "fathom-shutdown"
#: At most this many runs are taken per sweep (the next sweep takes more).
SWEEP_BATCH = 100


class Job(Protocol):
    """What a runner executes: ``await job(run_id)`` (see ``core.operations.job.ResearchJob``)."""

    @property
    def platforms(self) -> frozenset[str]:
        """The platforms this process delivers to: the runs its sweep takes."""
        ...

    @property
    def deliverable(self) -> frozenset[str]:
        """The platforms any process may deliver to: runs of others are orphans the job
        ends."""
        ...

    async def __call__(self, run_id: str) -> None: ...


class JobRunner(Protocol):
    async def enqueue(self, run_id: str) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Sweeper:
    """``sweep`` once at start (a failure there is raised), then every ``every`` seconds until
    stopped (a failure is logged; the next sweep tries again). Every runner sweeps so."""

    def __init__(self, sweep: Callable[[], Awaitable[object]], every: float) -> None:
        self._sweep = sweep
        self._every = every
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._sweep()
        if self._task is None:
            self._task = asyncio.create_task(self._forever(), name="run-sweeper")

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(self._every)
            try:
                await self._sweep()
            except Exception:
                log.warning("sweeping for abandoned runs failed", exc_info=True)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class InProcessJobRunner:
    """Runs jobs as asyncio tasks of this process, at most ``max_concurrent`` at once."""

    def __init__(
        self,
        job: Job,
        *,
        claims: ClaimStore,
        max_concurrent: int = 200,
        timing: LeaseTiming | None = None,
    ) -> None:
        self._job = job
        self._claims = claims
        self._slots = asyncio.Semaphore(max_concurrent)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._timing = timing or LeaseTiming()
        self._sweeper = Sweeper(self.sweep, self._timing.sweep_every)

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
        """Sweep once now (runs a stopped process left behind), then periodically."""
        await self._sweeper.start()

    async def sweep(self) -> list[str]:
        """Enqueue the runs nobody works on; returns the ids newly enqueued here."""
        found = await self._claims.runs_to_sweep(
            sorted(self._job.platforms),
            stale_after=self._timing.stale_after,
            limit=SWEEP_BATCH,
            orphans_outside=sorted(self._job.deliverable),  # the job ends runs nobody can deliver
        )
        new = [run_id for run_id in found if run_id not in self._tasks]
        for run_id in new:
            log.info("sweep: run %s has no live runner; taking it", run_id)
            await self.enqueue(run_id)
        return new

    async def drain(self) -> None:
        """Wait until every enqueued job has finished (tests, CLI)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop sweeping; give running jobs ``grace`` seconds, then interrupt them (each hands
        its run back for another runner)."""
        await self._sweeper.stop()
        if self._tasks:
            _done, pending = await asyncio.wait(list(self._tasks.values()), timeout=grace)
            for task in pending:
                task.cancel(SHUTDOWN)
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
