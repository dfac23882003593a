"""``fathom worker``: executes research runs from the procrastinate queue
(``FATHOM_QUEUE=procrastinate``), ``--concurrency`` at a time.

A worker delivers to every platform whose credentials are set (it registers their deliveries
as ``fathom serve`` does, without routes or long-lived connections), sweeps for runs nobody
works on like every runner, and stops on SIGTERM or SIGINT: procrastinate stops fetching, the
running jobs hand their runs back, and another worker continues them from their checkpoints.
"""

from __future__ import annotations

import logging

from core.config import ConfigError, Settings
from core.delivery import DeliveryPolicy, ResearchJob
from core.queue import ProcrastinateJobRunner, ProcrastinateQueue, conninfo
from core.runtime import open_runtime

log = logging.getLogger(__name__)

#: Seconds a stopping worker gives its running jobs before it cancels them (they hand back).
SHUTDOWN_GRACE = 10.0


def check_worker_settings(settings: Settings) -> None:
    if settings.queue != "procrastinate":
        raise ConfigError("fathom worker needs FATHOM_QUEUE=procrastinate (and PostgreSQL)")
    conninfo(settings.database_url)
    settings.require_llm()
    settings.require_search()


async def work(
    settings: Settings, *, concurrency: int, wait: bool = True, upgrade: bool = True
) -> None:
    """Work until stopped (``wait``), or until the queue is empty."""
    from bots.server import open_adapters

    check_worker_settings(settings)
    async with open_runtime(settings, upgrade=upgrade) as runtime:
        policy = DeliveryPolicy(
            attempts=settings.delivery_attempts, first_delay=settings.delivery_backoff
        )
        job = ResearchJob(runtime.service, runtime.store, policy=policy)
        async with ProcrastinateQueue(settings.database_url, job) as queue:
            runner = ProcrastinateJobRunner(
                queue, job=job, store=runtime.store, timing=runtime.service.timing
            )
            slack, feishu, dingtalk = await open_adapters(settings, runtime, job, runner)
            await runner.start()
            log.info(
                "worker %s: taking research runs, %d at a time", runtime.service.owner, concurrency
            )
            try:
                await queue.work(
                    concurrency=concurrency,
                    wait=wait,
                    name=runtime.service.owner,
                    shutdown_graceful_timeout=SHUTDOWN_GRACE,
                )
            finally:
                await runner.stop()
                for adapter in (slack, feishu, dingtalk):
                    if adapter is not None:
                        await adapter.close()
                if dingtalk is not None:
                    await dingtalk.release()
