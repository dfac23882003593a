"""``FATHOM_QUEUE=procrastinate``: research runs executed by ``fathom worker`` processes,
through procrastinate's job queue in the production PostgreSQL (no other broker).

- :class:`ProcrastinateQueue` is the queue: one task, ``fathom.research(run_id)``, deferred with
  the run id as its queueing lock, so a run waits in the queue at most once however often it is
  enqueued (a retried request, every replica's sweep). A new run is queued in the very
  transaction that creates its row (:func:`queue_in_transaction`), so a committed run is
  always queued.
- :class:`ProcrastinateJobRunner` is the :class:`core.operations.runners.JobRunner` of
  ``fathom serve`` and of the workers: ``enqueue`` defers; it sweeps like the in-process runner
  (runs nobody works on are deferred again), so a run whose worker died, or that was handed
  back on a stop, is taken by another worker; it executes nothing itself.
- ``fathom worker`` runs :meth:`ProcrastinateQueue.work`: each job claims its run, holds it with
  the same lease and heartbeat as the in-process runner, resumes from the checkpoint, and
  delivers exactly once (``core.operations.job.ResearchJob``).

The run row is the record of a run, so procrastinate's job rows are kept only while they are
needed: a worker deletes a job when it ends, and the sweep deletes the job a dead worker was
running once it queues that run again (:meth:`ProcrastinateQueue.forget_stalled`). The job
table holds the queue and the runs in progress, not the history.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url

from core.config import ConfigError
from core.operations.runners import SWEEP_BATCH, Job, Sweeper
from core.research.lease import LeaseTiming

if TYPE_CHECKING:
    from storage import ClaimStore, RunStore

log = logging.getLogger(__name__)

TASK = "fathom.research"

#: Seconds without a procrastinate heartbeat after which a worker counts as dead (passed to
#: the workers as ``stalled_worker_timeout``). A live worker beats every 10 s, and a stopping
#: one stops beating up to ``bots.worker.SHUTDOWN_GRACE`` before its jobs end: deleting a
#: job its worker still finishes only costs an error log there, but this is tidying, so the
#: margin is wide.
STALLED_WORKER_AFTER = 120


_DEFER = text(
    "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW(:queue, :task, 0, NULL, :run_id, "
    "CAST(:args AS jsonb), NULL)::procrastinate_job_to_defer_v1])"
)


def queue_in_transaction(conn: Connection, run_id: str) -> None:
    """Queue a new run in the transaction that creates it (``Store(on_new_run=…)``): a run is
    committed queued, or not at all. procrastinate's own SQL function, as ``defer_async``
    calls it (its 'default' queue, no lock, the run id as queueing lock)."""
    conn.execute(
        _DEFER,
        {
            "queue": "default",
            "task": TASK,
            "run_id": run_id,
            "args": json.dumps({"run_id": run_id}),
        },
    )


def conninfo(database_url: str) -> str:
    """The libpq address of ``DATABASE_URL`` (which must be PostgreSQL)."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ConfigError(
            "FATHOM_QUEUE=procrastinate needs DATABASE_URL to be PostgreSQL "
            f"(postgresql+psycopg://…), not {url.get_backend_name()}"
        )
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class ProcrastinateQueue:
    """The queue; with a ``job`` it can also work (``fathom worker``)."""

    def __init__(self, database_url: str, job: Job | None = None) -> None:
        import procrastinate

        self.app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=conninfo(database_url))
        )
        self._job = job

        async def research(run_id: str) -> None:
            if self._job is None:  # pragma: no cover - only workers fetch jobs
                raise RuntimeError("this process only enqueues")
            await self._job(run_id)

        self.app.task(name=TASK)(research)

    async def __aenter__(self) -> ProcrastinateQueue:
        await self.app.open_async()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.app.close_async()

    async def defer(self, run_id: str) -> bool:
        """Queue the run (False: it is queued already)."""
        from procrastinate.exceptions import AlreadyEnqueued

        try:
            await self.app.configure_task(TASK, queueing_lock=run_id).defer_async(run_id=run_id)
        except AlreadyEnqueued:
            return False
        return True

    async def work(self, *, concurrency: int = 10, wait: bool = True, **options: Any) -> None:
        """Execute queued runs, ``concurrency`` at once, until stopped (or, without ``wait``,
        until the queue is empty). A job's row is deleted when it ends, however it ended."""
        await self.app.run_worker_async(
            concurrency=concurrency,
            wait=wait,
            delete_jobs="always",
            stalled_worker_timeout=STALLED_WORKER_AFTER,
            **options,
        )

    async def forget_stalled(self, run_ids: list[str]) -> int:
        """Delete the jobs of ``run_ids`` that dead workers were running (state ``doing``, the
        worker's heartbeat older than :data:`STALLED_WORKER_AFTER` or its row pruned). Their
        runs are queued again by the caller; without this, each such row stayed for ever."""
        if not run_ids:
            return 0
        rows = await self.app.connector.execute_query_all_async(
            "DELETE FROM procrastinate_jobs WHERE status = 'doing' AND task_name = %(task)s "
            "AND args->>'run_id' = ANY(%(run_ids)s) AND (worker_id IS NULL OR worker_id IN ("
            "SELECT id FROM procrastinate_workers WHERE last_heartbeat < "
            "now() - make_interval(secs => %(stalled)s))) RETURNING id",
            task=TASK,
            run_ids=run_ids,
            stalled=STALLED_WORKER_AFTER,
        )
        return len(rows)


class ProcrastinateJobRunner:
    """Enqueues runs into procrastinate and sweeps for runs nobody works on."""

    def __init__(
        self,
        queue: ProcrastinateQueue,
        *,
        job: Job,
        runs: RunStore,
        claims: ClaimStore,
        timing: LeaseTiming | None = None,
    ) -> None:
        """``job``: whose platforms the sweep takes runs of (those this process delivers to;
        they are registered after the runner is made)."""
        self._queue = queue
        self._job = job
        self._runs = runs
        self._claims = claims
        self._timing = timing or LeaseTiming()
        self._sweeper = Sweeper(self.sweep, self._timing.sweep_every)

    async def enqueue(self, run_id: str) -> None:
        """Queue a run just created. With the store queueing new runs in their own transaction
        (as ``fathom serve`` and ``fathom worker`` set it up) it is queued already, and a
        second attempt would cost the acknowledgement a transaction that fails on the
        queueing lock; otherwise it is deferred here."""
        if not self._runs.queues_new_runs:
            await self._queue.defer(run_id)

    async def sweep(self) -> list[str]:
        """Queue again the runs nobody works on (a dead worker's, a handed-back one)."""
        found = await self._claims.runs_to_sweep(
            sorted(self._job.platforms),
            stale_after=self._timing.stale_after,
            limit=SWEEP_BATCH,
            orphans_outside=sorted(self._job.deliverable),  # the job ends runs nobody can deliver
        )
        try:  # tidying only: a failure here must not keep the runs from being queued again
            if forgotten := await self._queue.forget_stalled(found):
                log.info("sweep: deleted %d jobs of dead workers", forgotten)
        except Exception:
            log.warning("sweep: could not delete the jobs of dead workers", exc_info=True)
        queued = [run_id for run_id in found if await self._queue.defer(run_id)]
        for run_id in queued:
            log.info("sweep: run %s has no live runner; queued again", run_id)
        return queued

    async def start(self) -> None:
        """Sweep once now, then periodically."""
        await self._sweeper.start()

    async def stop(self) -> None:
        await self._sweeper.stop()
