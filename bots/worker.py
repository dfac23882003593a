"""``fathom worker``: executes research runs from the procrastinate queue
(``FATHOM_QUEUE=procrastinate``), ``--concurrency`` at a time.

A worker delivers to every platform whose credentials are set (it registers their deliveries
as ``fathom serve`` does, without routes or long-lived connections), sweeps for runs nobody
works on like every runner, and stops on SIGTERM or SIGINT: procrastinate stops fetching, the
running jobs hand their runs back, and another worker continues them from their checkpoints.
"""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from bots.composition import AppSettings, open_app
from core.config import ConfigError
from core.operations.queue import conninfo
from core.runtime import wait_for_schema

if TYPE_CHECKING:
    from core.metrics import Metrics

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


@contextlib.contextmanager
def metrics_server(metrics: Metrics | None, host: str, port: int | None) -> Iterator[None]:
    """``GET /metrics`` of this process's counters on ``host:port`` while the body runs (none
    without a port): the research a worker executes is counted here, not in serve. A port in
    use is one ``ConfigError`` line."""
    if metrics is None or port is None:
        yield
        return
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        why = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise ConfigError(f"cannot listen on {host}:{port} for metrics: {why}") from None
    log.info("worker metrics on http://%s:%d/metrics", host, port)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def work(
    settings: AppSettings,
    *,
    concurrency: int,
    wait: bool = True,
    upgrade: bool = True,
    metrics_host: str = "127.0.0.1",
    metrics_port: int | None = None,
) -> None:
    """Work until stopped (``wait``), or until the queue is empty. Without ``upgrade`` the
    schema is left to ``fathom db upgrade`` (one process migrates), and the worker takes no
    run before its schema is one this code runs on. With ``metrics_port`` its counters
    (runs, model calls, tokens, cost, searches, pages, platform and MCP calls) are served at
    ``/metrics`` there."""
    check_worker_settings(settings)
    from core.metrics import Metrics

    metrics = Metrics() if metrics_port is not None else None
    async with open_app(settings, role="worker", upgrade=upgrade, metrics=metrics) as built:
        with metrics_server(metrics, metrics_host, metrics_port):
            await wait_for_schema(built.runtime.database)
            queue, owner = built.queue, built.runtime.research.executor.owner
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
