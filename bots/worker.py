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
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from bots.composition import AppSettings, open_app
from bots.header_deadline import DEFAULT_HEADER_TIMEOUT
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
def metrics_server(
    metrics: Metrics | None,
    host: str,
    port: int | None,
    *,
    idle_timeout: float = DEFAULT_HEADER_TIMEOUT,
) -> Iterator[None]:
    """``GET /metrics`` of this process's counters on ``host:port`` while the body runs (none
    without a port): the research a worker executes is counted here, not in serve. A port in
    use is one ``ConfigError`` line. Each connection is served on a thread of its own; one
    that sends nothing for ``idle_timeout`` seconds (``FATHOM_HEADER_TIMEOUT``) is closed,
    so connections left half-open cannot pile threads up."""
    if metrics is None or port is None:
        yield
        return
    try:
        server = _metrics_http_server(host, port, metrics, idle_timeout)
    except OSError as exc:
        why = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise ConfigError(f"cannot listen on {host}:{port} for metrics: {why}") from None
    thread = threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True)
    thread.start()
    log.info("worker metrics on http://%s:%d/metrics", host, port)
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _MetricsHandler(WSGIRequestHandler):
    """prometheus_client's WSGI app behind a handler that logs no access line, and whose
    connection times out (its ``timeout``: each read waits that long at most)."""

    def log_message(self, format: str, *args: Any) -> None:
        return


def _metrics_http_server(host: str, port: int, metrics: Metrics, idle_timeout: float) -> WSGIServer:
    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    class MetricsServer(ThreadingWSGIServer):  # type: ignore[misc]
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def handle_error(self, request: Any, client_address: Any) -> None:
            """A connection that timed out or went away: one debug line, no traceback."""
            failed = sys.exc_info()[1]
            if isinstance(failed, OSError):  # TimeoutError, a reset: the client's doing
                log.debug("worker metrics: a connection ended (%s)", type(failed).__name__)
            else:
                log.warning("worker metrics: a request failed (%s)", type(failed).__name__)

    handler = type("Handler", (_MetricsHandler,), {"timeout": idle_timeout})
    server: WSGIServer = make_server(
        host, port, make_wsgi_app(metrics.registry), MetricsServer, handler_class=handler
    )
    return server


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

    metrics = Metrics(role="worker") if metrics_port is not None else None
    async with open_app(settings, role="worker", upgrade=upgrade, metrics=metrics) as built:
        idle = settings.chat.header_timeout
        with metrics_server(metrics, metrics_host, metrics_port, idle_timeout=idle):
            await wait_for_schema(built.runtime.database)
            queue, owner = built.queue, built.owner
            if queue is None:  # pragma: no cover - a worker's app always has its queue
                raise ConfigError("fathom worker needs FATHOM_QUEUE=procrastinate")
            await built.start()
            log.info("worker %s: taking research runs, %d at a time", owner, concurrency)
            await queue.work(
                concurrency=concurrency,
                wait=wait,
                name=owner,
                shutdown_graceful_timeout=SHUTDOWN_GRACE,
            )
        # open_app then stops the runner and closes the platforms' outbound clients.
