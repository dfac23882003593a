"""``fathom serve``: the HTTP routes, every configured adapter and the in-process job runner.

``create_app(settings)`` returns a Starlette app whose lifespan opens the runtime (schema
upgraded unless told not to), starts the job runner (which resumes runs a dead process
left behind, and keeps sweeping for runs a dead replica abandoned) and, when Slack is
configured, the Slack adapter. Shutdown closes the long-lived connections first, then gives
running jobs a grace period and hands the rest back for any replica to continue.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.pool import QueuePool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.config import ConfigError, Settings
from core.delivery import DeliveryPolicy, ResearchJob
from core.duty import OneHolder
from core.jobs import InProcessJobRunner, JobRunner
from core.queue import ProcrastinateJobRunner, ProcrastinateQueue, conninfo
from core.runtime import Runtime, open_runtime
from core.scheduler import DigestScheduler
from storage import HEAD_REVISION, Database, LeaseStore, Store

if TYPE_CHECKING:
    from bots.dingtalk.app import DingTalkAdapter
    from bots.feishu.app import FeishuAdapter
    from bots.slack.app import SlackAdapter

log = logging.getLogger(__name__)


def check_settings(settings: Settings) -> None:
    """Everything ``serve`` needs, as one ``ConfigError`` line, before binding a port."""
    if settings.queue == "procrastinate":
        conninfo(settings.database_url)  # PostgreSQL, or one clear line
    settings.require_llm()
    settings.require_search()
    if settings.slack_enabled:
        settings.require_slack()
    if settings.feishu_enabled:
        settings.require_feishu()
    if settings.dingtalk_enabled:
        settings.require_dingtalk()


def create_app(settings: Settings, *, upgrade: bool = True) -> Starlette:
    check_settings(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from core.metrics import Metrics

        metrics = Metrics()
        app.state.metrics = metrics
        async with (
            open_runtime(settings, upgrade=upgrade, metrics=metrics) as runtime,
            contextlib.AsyncExitStack() as resources,  # closed last, also after a failed start
        ):
            policy = DeliveryPolicy(
                attempts=settings.delivery_attempts, first_delay=settings.delivery_backoff
            )
            job = ResearchJob(runtime.service, runtime.store, policy=policy)
            runner: JobRunner
            if settings.queue == "procrastinate":  # workers execute; this process enqueues
                queue = await resources.enter_async_context(
                    ProcrastinateQueue(settings.database_url)
                )
                runner = ProcrastinateJobRunner(
                    queue, job=job, store=runtime.store, timing=runtime.service.timing
                )
            else:
                runner = InProcessJobRunner(
                    job,
                    store=runtime.store,
                    max_concurrent=settings.max_concurrent_runs,
                    timing=runtime.service.timing,
                )
            app.state.database = runtime.database
            slack, feishu, dingtalk = await open_adapters(settings, runtime, job, runner)
            app.state.slack, app.state.feishu, app.state.dingtalk = slack, feishu, dingtalk
            scheduler = DigestScheduler(
                runtime.digests,
                LeaseStore(runtime.database),
                runner,
                owner=runtime.service.owner,
                lease=settings.lease,
                tick_every=settings.lease / 3,
            )
            # Each long-lived connection is held by one replica at a time (a lease each).
            holders = {
                name: OneHolder(
                    f"{name}-connection",
                    LeaseStore(runtime.database),
                    owner=runtime.service.owner,
                    start=adapter.connect,
                    stop=adapter.disconnect,
                    lease=settings.lease,
                )
                for name, adapter in (("slack", slack), ("feishu", feishu), ("dingtalk", dingtalk))
                if adapter is not None and adapter.long_lived
            }
            app.state.holders = holders
            app.state.scheduler = scheduler
            housekeeping: asyncio.Task[None] | None = None
            app.state.schema_current = upgrade or await runtime.database.schema_is_current()
            if app.state.schema_current:
                await runner.start()
                housekeeping = asyncio.create_task(_housekeeping(runtime.store, settings))
                await scheduler.start()
                for holder in holders.values():
                    await holder.start()
            else:
                log.error(
                    "database schema is not current: run `fathom db upgrade`, then restart; "
                    "until then the platform routes answer 503"
                )
            try:
                yield
            finally:
                if housekeeping is not None:
                    housekeeping.cancel()
                for holder in holders.values():
                    await holder.close()
                await scheduler.close()
                if slack is not None:
                    await slack.close()
                if feishu is not None:
                    await feishu.close()
                if dingtalk is not None:
                    await dingtalk.close()
                await runner.stop()
                if dingtalk is not None:
                    await dingtalk.release()

    app = Starlette(
        routes=[
            Route("/slack/events", slack_route, methods=["POST"]),
            Route("/slack/install", slack_route, methods=["GET"]),
            Route("/slack/oauth_redirect", slack_route, methods=["GET"]),
            Route("/feishu/events", feishu_route, methods=["POST"]),
            Route("/dingtalk/events", dingtalk_route, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_route, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.slack = None
    app.state.feishu = None
    app.state.dingtalk = None
    app.state.holders = {}
    app.state.scheduler = None
    app.state.metrics = None
    app.state.settings = settings
    app.state.schema_current = True
    return app


async def open_adapters(
    settings: Settings, runtime: Runtime, job: ResearchJob, runner: JobRunner
) -> tuple[SlackAdapter | None, FeishuAdapter | None, DingTalkAdapter | None]:
    """Every platform whose credentials are set: its routes' handlers, and its delivery
    registered on ``job`` (what a worker needs too). Long-lived connections are opened by the
    replica holding their lease, not here."""
    slack: SlackAdapter | None = None
    if settings.slack_enabled:
        from bots.slack.app import open_slack

        slack = await open_slack(settings, runtime, job, runner)
    feishu: FeishuAdapter | None = None
    if settings.feishu_enabled:
        from bots.feishu.app import open_feishu

        feishu = await open_feishu(settings, runtime, job, runner)
    dingtalk: DingTalkAdapter | None = None
    if settings.dingtalk_enabled:
        from bots.dingtalk.app import open_dingtalk

        dingtalk = await open_dingtalk(settings, runtime, job, runner)
    return slack, feishu, dingtalk


#: Platform deliveries are remembered this long (Slack retries within minutes).
EVENT_MEMORY = timedelta(days=7)


#: How often housekeeping runs (it also runs at start).
HOUSEKEEPING_EVERY = 3600.0


async def _housekeeping(store: Store, settings: Settings) -> None:
    """Keep the bookkeeping tables small: processed platform events older than
    ``EVENT_MEMORY``, expired Slack OAuth states (anyone may open the install page), and
    cached search results and page texts past their time to live."""
    while True:
        jobs: tuple[tuple[str, Callable[[], Awaitable[int]]], ...] = (
            (
                f"platform events older than {EVENT_MEMORY}",
                lambda: store.prune_events(EVENT_MEMORY),
            ),
            ("expired Slack OAuth states", store.prune_oauth_states),
            (
                "expired cached searches and pages",
                lambda: store.prune_caches(
                    search_older_than=settings.search_cache_ttl,
                    pages_older_than=settings.page_cache_ttl,
                ),
            ),
        )
        for what, prune in jobs:
            try:
                pruned = await prune()
                if pruned:
                    log.info("pruned %d %s", pruned, what)
            except Exception:
                log.warning("pruning %s failed", what, exc_info=True)
        await asyncio.sleep(HOUSEKEEPING_EVERY)


def _schema_refusal(request: Request) -> Response | None:
    """503 for a platform route while the schema is behind this code (``serve --no-upgrade``
    on an old database): nothing would work, and each request would fail with a traceback."""
    if request.app.state.schema_current:
        return None
    log.warning(
        "%s %s answered 503: the database schema is not current (run `fathom db upgrade`)",
        request.method,
        request.url.path,
    )
    return JSONResponse({"error": "the database schema is not current"}, 503)


async def slack_route(request: Request) -> Response:
    slack: SlackAdapter | None = request.app.state.slack
    if slack is None:
        return JSONResponse({"error": "Slack is not configured on this server"}, 404)
    return _schema_refusal(request) or await slack.handler(request)


async def feishu_route(request: Request) -> Response:
    feishu: FeishuAdapter | None = request.app.state.feishu
    if feishu is None:
        return JSONResponse({"error": "Feishu is not configured on this server"}, 404)
    return _schema_refusal(request) or await feishu.webhook(request)


async def dingtalk_route(request: Request) -> Response:
    dingtalk: DingTalkAdapter | None = request.app.state.dingtalk
    if dingtalk is None:
        return JSONResponse({"error": "DingTalk is not configured on this server"}, 404)
    return _schema_refusal(request) or await dingtalk.callback(request)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready when the database answers and its schema is the one this code expects; the
    platforms (and their connections' states) are shown either way."""
    database: Database | None = getattr(request.app.state, "database", None)
    reason = None
    if database is None:
        reason = "starting"
    elif not await database.ping():
        reason = "database unreachable"
    else:
        try:
            current = await database.schema_is_current()
        except Exception as exc:  # pragma: no cover - the ping just succeeded
            current, reason = False, f"schema check failed: {type(exc).__name__}"
        if not current and reason is None:
            reason = f"database schema is not at revision {HEAD_REVISION}; run `fathom db upgrade`"
    platforms = _platforms(request)
    scheduler: DigestScheduler | None = getattr(request.app.state, "scheduler", None)
    roles: dict[str, object] = {
        "scheduler": "holder" if scheduler is not None and scheduler.holder else "standby"
    }
    settings: Settings | None = getattr(request.app.state, "settings", None)
    if settings is not None and database is not None and reason is None:
        try:  # readiness is probed every few seconds: unfinished runs only (indexed)
            counts = await Store(database).count_runs(("queued", "running"))
        except Exception as exc:  # shown, never a 500
            roles["queue"] = {"kind": settings.queue, "error": type(exc).__name__}
        else:
            roles["queue"] = {
                "kind": settings.queue,
                "queued": sum(n for status, _, n in counts if status == "queued"),
                "running": sum(n for status, _, n in counts if status == "running"),
            }
    if reason is not None:
        return JSONResponse(
            {"status": "unavailable", "reason": reason, "platforms": platforms, **roles}, 503
        )
    return JSONResponse({"status": "ready", "platforms": platforms, **roles})


async def metrics_route(request: Request) -> Response:
    """Prometheus metrics: this process's counters, and the runs, queue, leases, event-loop
    tasks and database connections now."""
    from core.metrics import CONTENT_TYPE, Metrics

    metrics: Metrics | None = getattr(request.app.state, "metrics", None)
    database: Database | None = getattr(request.app.state, "database", None)
    if metrics is None or database is None:
        return JSONResponse({"error": "starting"}, 503)
    try:
        counts = await Store(database).count_runs()
    except Exception:
        log.warning("metrics: the runs could not be counted", exc_info=True)
    else:
        metrics.runs.clear()
        for status, platform, count in counts:
            metrics.runs.labels(status, platform).set(count)
        metrics.queue_depth.set(sum(n for status, _, n in counts if status == "queued"))
    holders: dict[str, OneHolder] = getattr(request.app.state, "holders", {})
    for holder in holders.values():
        metrics.lease_holder.labels(holder.name).set(1 if holder.holder else 0)
    scheduler: DigestScheduler | None = getattr(request.app.state, "scheduler", None)
    if scheduler is not None:
        metrics.lease_holder.labels("digest-scheduler").set(1 if scheduler.holder else 0)
    metrics.asyncio_tasks.set(len(asyncio.all_tasks()))  # this one included
    pools = {"store": database.pool}
    if database.engine.pool is not database.pool:  # SQLite: aiosqlite beside the store's
        pools["engine"] = database.engine.pool
    for name, pool in pools.items():
        if isinstance(pool, QueuePool):  # not StaticPool (in-memory SQLite): always one
            checked_out = pool.checkedout()
            metrics.db_connections.labels(name, "checked_out").set(checked_out)
            metrics.db_connections.labels(name, "open").set(checked_out + pool.checkedin())
    return Response(metrics.exposition(), media_type=CONTENT_TYPE)


def _platforms(request: Request) -> dict[str, object]:
    """Each configured platform, with the state of its long-lived connection if it has one."""
    shown: dict[str, object] = {}
    holders: dict[str, OneHolder] = getattr(request.app.state, "holders", {})
    for name in ("slack", "feishu", "dingtalk"):
        adapter: SlackAdapter | FeishuAdapter | DingTalkAdapter | None = getattr(
            request.app.state, name, None
        )
        if adapter is None:
            continue
        status = adapter.status()
        if name in holders:  # a long-lived connection: held here, or by another replica
            status = {**status, **holders[name].status()}
        shown[name] = status
    return shown


def run_server(settings: Settings, *, host: str, port: int, upgrade: bool = True) -> bool:
    """Serve until SIGINT/SIGTERM (uvicorn runs the lifespan's graceful shutdown).

    Returns False when the server never started (start-up failed; uvicorn logged why).
    """
    import uvicorn

    app = create_app(settings, upgrade=upgrade)
    sock = listen_socket(host, port)  # before the lifespan connects to any platform
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        log_config=None,  # keep core.logs' (redacting) handlers
        access_log=False,  # query strings (OAuth codes, states) stay out of the logs
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = _graceful_server_class()(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return bool(server.started)


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound now: a port in use (or an address this machine does not
    have) is one ``ConfigError`` line, before anything connects anywhere."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise ConfigError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def _graceful_server_class() -> type[Any]:
    import uvicorn

    class GracefulServer(uvicorn.Server):
        """SIGTERM/SIGINT shut down gracefully and the process exits 0.

        Stock uvicorn re-raises the signal after its graceful shutdown, so a stopped
        ``fathom serve`` would die "killed by SIGTERM" (exit -15) and look like a crash.
        """

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            watched = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in watched}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return GracefulServer
