"""``fathom worker``: executes research runs from the procrastinate queue
(``FATHOM_QUEUE=procrastinate``), ``--concurrency`` at a time.

A worker delivers to every platform whose credentials are set (it registers their deliveries
as ``fathom serve`` does, without routes or long-lived connections), sweeps for runs nobody
works on like every runner, and stops on SIGTERM or SIGINT: procrastinate stops fetching, the
running jobs hand their runs back, and another worker continues them from their checkpoints.
"""

from __future__ import annotations

import logging

from bots.composition import AppSettings, open_app
from core.config import ConfigError
from core.queue import conninfo
from core.runtime import wait_for_schema

log = logging.getLogger(__name__)

#: Seconds a stopping worker gives its running jobs before it cancels them (they hand back).
SHUTDOWN_GRACE = 10.0


def check_worker_settings(settings: AppSettings) -> None:
    core = settings.core
    if core.queue != "procrastinate":
        raise ConfigError("fathom worker needs FATHOM_QUEUE=procrastinate (and PostgreSQL)")
    conninfo(core.database_url)
    core.require_llm()
    core.require_search()


async def work(
    settings: AppSettings, *, concurrency: int, wait: bool = True, upgrade: bool = True
) -> None:
    """Work until stopped (``wait``), or until the queue is empty. Without ``upgrade`` the
    schema is left to ``fathom db upgrade`` (one process migrates), and the worker takes no
    run before its schema is one this code runs on."""
    check_worker_settings(settings)
    async with open_app(settings, role="worker", upgrade=upgrade) as built:
        await wait_for_schema(built.runtime.database)
        queue, owner = built.queue, built.runtime.service.owner
        if queue is None:  # pragma: no cover - a worker's app always has its queue
            raise ConfigError("fathom worker needs FATHOM_QUEUE=procrastinate")
        await built.runner.start()
        log.info("worker %s: taking research runs, %d at a time", owner, concurrency)
        await queue.work(
            concurrency=concurrency,
            wait=wait,
            name=owner,
            shutdown_graceful_timeout=SHUTDOWN_GRACE,
        )
        # open_app then stops the runner and closes the platforms' outbound clients.
