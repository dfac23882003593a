"""``fathom serve``: the HTTP routes, every enabled platform and the in-process job runner.

``create_app(settings)`` returns a Starlette app whose lifespan builds the process
(``bots.composition.open_app``: runtime with the schema upgraded unless told not to, job
runner, every enabled platform), starts the job runner (which resumes runs a dead process
left behind, and keeps sweeping for runs a dead replica abandoned), the digest scheduler, and
for each platform with a long-lived connection the election of the replica that holds it.
Every registered platform's routes are mounted (404 while it is not configured). Shutdown
closes the long-lived connections first, then gives running jobs a grace period and hands
the rest back for any replica to continue.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.pool import QueuePool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bots.chat.platform import ChatPlatform
from bots.composition import AppSettings, open_app
from bots.header_deadline import MAX_HEADER_BYTES, protocol_class
from bots.housekeeping import housekeeping
from bots.http_metrics import IngressMetrics
from core.config import ConfigError
from core.operations.duty import OneHolder
from core.operations.queue import conninfo
from core.operations.scheduler import DigestScheduler
from core.runtime import wait_for_schema
from core.values import UNFINISHED_STATUSES
from storage import Database, Store

if TYPE_CHECKING:
    from bots.platforms import PlatformClass
    from core.metrics import Metrics

log = logging.getLogger(__name__)


def check_settings(settings: AppSettings) -> None:
    """Everything ``serve`` needs, as one ``ConfigError`` line, before binding a port."""
    core = settings.core
    if core.queue == "procrastinate":
        conninfo(core.database_url)  # PostgreSQL, or one clear line
    core.require_llm()
    core.require_search()
    if core.mcp_config:  # a malformed file stops serve here; a bad server only is down
        from core.knowledge import load_knowledge_config

        load_knowledge_config(core.mcp_config)
    settings.check_platforms()


def create_app(
    settings: AppSettings, *, upgrade: bool = True, admin_port: int | None = None
) -> Starlette:
    check_settings(settings)
    core = settings.core

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from core.metrics import Metrics

        metrics = Metrics()
        app.state.metrics = metrics
        async with open_app(settings, role="serve", upgrade=upgrade, metrics=metrics) as built:
            runtime, runner = built.runtime, built.runner
            app.state.database = runtime.database
            app.state.store = runtime.store
            app.state.platforms = built.platforms
            app.state.knowledge = runtime.knowledge
            scheduler = DigestScheduler(
                runtime.digests,
                runtime.store.leases,
                runner,
                owner=runtime.research.executor.owner,
                lease=core.lease,
                tick_every=core.lease / 3,
            )
            # Each long-lived connection is held by one replica at a time (an election each).
            holders = {
                name: OneHolder(
                    f"{name}-connection",
                    runtime.store.leases,
                    owner=runtime.research.executor.owner,
                    start=platform.connect,
                    stop=platform.disconnect,
                    lease=core.lease,
                )
                for name, platform in built.platforms.items()
                if platform.long_lived
            }
            app.state.holders = holders
            app.state.scheduler = scheduler
            tasks: list[asyncio.Task[None]] = []

            async def start_parts() -> None:
                """What needs the schema: the runner, housekeeping, the digest scheduler,
                the long-lived connections; then the routes and /readyz open."""
                await runner.start()
                tasks.append(
                    asyncio.create_task(
                        housekeeping(
                            runtime.store,
                            core,
                            owner=runtime.research.executor.owner,
                            chores=[
                                chore
                                for platform in built.platforms.values()
                                for chore in platform.housekeeping()
                            ],
                        )
                    )
                )
                await scheduler.start()
                for holder in holders.values():
                    await holder.start()
                app.state.schema_ready = True

            async def start_when_usable() -> None:
                await wait_for_schema(runtime.database)
                try:
                    await start_parts()
                except Exception:  # a task's failure would otherwise pass unseen
                    log.exception("serve could not start on the database schema")
                    raise

            app.state.schema_ready = False
            if upgrade or await runtime.database.schema_is_usable():
                await start_parts()
            else:  # started before the migration: the routes answer 503 until it has run
                tasks.append(asyncio.create_task(start_when_usable()))
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                for holder in holders.values():
                    await holder.close()
                await scheduler.close()
            # open_app then closes the platforms' ingress, stops the runner (its jobs hand
            # their runs back) and closes the platforms' outbound clients, in that order.

    routes = [
        Route(
            route.path, _on_port(platform_endpoint(cls), admin=False), methods=list(route.methods)
        )
        for cls in settings.classes
        for route in cls.routes
    ]
    app = Starlette(
        routes=[
            *routes,
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", _on_port(readyz, admin=True), methods=["GET"]),
            Route("/metrics", _on_port(metrics_route, admin=True), methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    paths = {route.path for route in routes} | {"/healthz", "/readyz", "/metrics"}
    app.add_middleware(IngressMetrics, paths=paths, metrics=lambda: app.state.metrics)
    app.state.admin_port = admin_port
    app.state.platforms = {}
    app.state.holders = {}
    app.state.scheduler = None
    app.state.metrics = None
    app.state.store = None
    app.state.knowledge = None
    app.state.settings = settings
    app.state.schema_ready = True
    return app


def _on_port(
    endpoint: Callable[[Request], Awaitable[Response]], *, admin: bool
) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint`` where it is served: with an admin port (``serve --admin-port``), the
    internals (/readyz, /metrics) only there and the platform routes only on the public port;
    elsewhere 404, as for a path that does not exist. Without one, everything on the one
    port."""

    async def on_port(request: Request) -> Response:
        admin_port: int | None = request.app.state.admin_port
        if admin_port is not None:
            server = request.scope.get("server")
            on_admin = server is not None and server[1] == admin_port
            if on_admin != admin:
                return JSONResponse({"error": "not found"}, 404)
        return await endpoint(request)

    return on_port


def platform_endpoint(cls: PlatformClass) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of ``cls``'s routes: 404 while it is not configured here, 503 while the
    schema is behind this code, else the platform's own handler."""

    async def endpoint(request: Request) -> Response:
        platforms: dict[str, ChatPlatform[Any]] = request.app.state.platforms
        platform = platforms.get(cls.name)
        if platform is None:
            return JSONResponse({"error": f"{cls.title} is not configured on this server"}, 404)
        return _schema_refusal(request) or await platform.handle(request)

    return endpoint


def _schema_refusal(request: Request) -> Response | None:
    """503 for a platform route until the process has started its parts on a schema this
    code runs on (``serve --no-upgrade`` before the migration): nothing would work, and each
    request would fail with a traceback."""
    if request.app.state.schema_ready:
        return None
    log.warning(
        "%s %s answered 503: the database schema is not current (run `fathom db upgrade`)",
        request.method,
        request.url.path,
    )
    return JSONResponse({"error": "the database schema is not current"}, 503)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready when the database answers, its schema is one this code runs on (its own or a
    newer release's), the process has started on it (exactly while the platform routes
    answer) and no platform says it cannot serve at all (``ChatPlatform.readiness``: Teams'
    app password refused by the identity platform); the
    platforms (and their connections' states) and the MCP servers (``knowledge``, when
    ``FATHOM_MCP_CONFIG`` is set) are shown either way: research goes on without a server
    that is down, so its state never makes the process unready."""
    database: Database | None = getattr(request.app.state, "database", None)
    reason = None
    if database is None:
        reason = "starting"
    elif not await database.ping():
        reason = "database unreachable"
    else:
        try:
            schema = await database.schema()
        except Exception as exc:  # pragma: no cover - the ping just succeeded
            reason = f"schema check failed: {type(exc).__name__}"
        else:
            if not schema.state.usable:
                reason = schema.describe()
            elif not request.app.state.schema_ready:
                reason = "starting on the database schema"
    platforms = _platforms(request)
    for name, why in (await _platform_problems(request)).items():
        platforms[name] = {**_as_dict(platforms.get(name)), "ready": False, "problem": why}
        reason = reason or f"{name}: {why}"
    scheduler: DigestScheduler | None = getattr(request.app.state, "scheduler", None)
    roles: dict[str, object] = {
        "scheduler": "holder" if scheduler is not None and scheduler.holder else "standby"
    }
    knowledge: KnowledgeStatus | None = getattr(request.app.state, "knowledge", None)
    if knowledge is not None:  # shown; a server that is down never makes the process unready
        roles["knowledge"] = knowledge_status(knowledge)
    settings: AppSettings | None = getattr(request.app.state, "settings", None)
    store: Store | None = getattr(request.app.state, "store", None)
    if settings is not None and store is not None and reason is None:
        kind = settings.core.queue
        try:  # readiness is probed every few seconds: unfinished runs only (indexed)
            counts = await store.runs.count_runs(UNFINISHED_STATUSES)
        except Exception as exc:  # shown, never a 500
            roles["queue"] = {"kind": kind, "error": type(exc).__name__}
        else:
            roles["queue"] = {
                "kind": kind,
                "queued": sum(n for status, _, n in counts if status == "queued"),
                "running": sum(n for status, _, n in counts if status == "running"),
            }
    if reason is not None:
        return JSONResponse(
            {"status": "unavailable", "reason": reason, "platforms": platforms, **roles}, 503
        )
    return JSONResponse({"status": "ready", "platforms": platforms, **roles})


async def metrics_route(request: Request) -> Response:
    """Prometheus metrics: this process's counters, its leases, event-loop tasks and database
    connections now, and on the digest scheduler's holder the deployment's runs and queue."""
    from core.metrics import CONTENT_TYPE

    metrics: Metrics | None = getattr(request.app.state, "metrics", None)
    database: Database | None = getattr(request.app.state, "database", None)
    store: Store | None = getattr(request.app.state, "store", None)
    if metrics is None or database is None or store is None:
        return JSONResponse({"error": "starting"}, 503)
    scheduler: DigestScheduler | None = getattr(request.app.state, "scheduler", None)
    if scheduler is None or not scheduler.holder:
        # The deployment's runs and queue come from one replica (the scheduler's holder),
        # so a sum over replicas counts each run once.
        metrics.deployment.hide()
    else:
        await _show_deployment(request, store, metrics)
    holders: dict[str, OneHolder] = getattr(request.app.state, "holders", {})
    for holder in holders.values():
        metrics.lease_holder.labels(holder.name).set(1 if holder.holder else 0)
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


async def _show_deployment(request: Request, store: Store, metrics: Metrics) -> None:
    """The runs queued or running now, by status and platform, on this (holding) replica's
    scrape: 0, not absent, for every enabled platform (alerts need it)."""
    try:  # scraped every few seconds: the unfinished runs only (indexed), never all of them
        counts = await store.runs.count_runs(UNFINISHED_STATUSES)
    except Exception:
        log.warning("metrics: the runs could not be counted", exc_info=True)
        metrics.deployment.hide()
        return
    platforms: dict[str, object] = getattr(request.app.state, "platforms", {})
    shown: dict[tuple[str, str], int] = {
        (str(status), name): 0 for status in UNFINISHED_STATUSES for name in platforms
    }
    for status, platform, count in counts:
        shown[(str(status), platform)] = count
    metrics.deployment.show(shown)


class ServerState(Protocol):
    """What ``/readyz`` shows of an MCP server (``core.knowledge.ServerStatus``)."""

    @property
    def name(self) -> str: ...
    @property
    def transport(self) -> str | None: ...
    @property
    def tool(self) -> str | None: ...
    @property
    def state(self) -> str: ...
    @property
    def problem(self) -> str | None: ...


class KnowledgeStatus(Protocol):
    """The internal sources as ``/readyz`` sees them (``core.knowledge.Knowledge``)."""

    def status(self) -> Sequence[ServerState]: ...


def knowledge_status(knowledge: KnowledgeStatus) -> dict[str, dict[str, object]]:
    """Each MCP server by name: its state (``starting``, ``up``, ``down``), transport and
    tool, and why it is down (no configuration values: they can hold secrets)."""
    shown: dict[str, dict[str, object]] = {}
    for server in knowledge.status():
        entry: dict[str, object] = {
            "state": server.state,
            "transport": server.transport,
            "tool": server.tool,
        }
        if server.problem:
            entry["problem"] = server.problem
        shown[server.name] = entry
    return shown


async def _platform_problems(request: Request) -> dict[str, str]:
    """Each enabled platform that says it cannot serve here, and why
    (``ChatPlatform.readiness``)."""
    platforms: dict[str, ChatPlatform[Any]] = getattr(request.app.state, "platforms", {})
    problems: dict[str, str] = {}
    for name, platform in platforms.items():
        why = await platform.readiness()
        if why:
            problems[name] = why
    return problems


def _as_dict(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, dict) else {}


def _platforms(request: Request) -> dict[str, object]:
    """Each enabled platform, with the state of its long-lived connection if it has one."""
    shown: dict[str, object] = {}
    platforms: dict[str, ChatPlatform[Any]] = getattr(request.app.state, "platforms", {})
    holders: dict[str, OneHolder] = getattr(request.app.state, "holders", {})
    for name, platform in platforms.items():
        status = platform.status()
        if name in holders:  # a long-lived connection: held here, or by another replica
            status = {**status, **holders[name].status()}
        shown[name] = status
    return shown


def run_server(
    settings: AppSettings,
    *,
    host: str,
    port: int,
    upgrade: bool = True,
    admin_host: str = "127.0.0.1",
    admin_port: int | None = None,
) -> bool:
    """Serve until SIGINT/SIGTERM (uvicorn runs the lifespan's graceful shutdown). With
    ``admin_port``, /readyz and /metrics are served there (on ``admin_host``) and not on the
    public port (one app, two sockets).

    Returns False when the server never started (start-up failed; uvicorn logged why).
    """
    import uvicorn

    app = create_app(settings, upgrade=upgrade, admin_port=admin_port)
    sock = listen_socket(host, port)  # before the lifespan connects to any platform
    sockets = [sock]
    if admin_port is not None:
        try:
            sockets.append(listen_socket(admin_host, admin_port))
        except ConfigError:
            sock.close()
            raise
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=settings.core.log_level.lower(),
        log_config=None,  # keep core.logs' (redacting) handlers
        access_log=False,  # query strings (OAuth codes, states) stay out of the logs
        lifespan="on",
        timeout_graceful_shutdown=5,
        # Both ports: a request's head within FATHOM_HEADER_TIMEOUT and MAX_HEADER_BYTES.
        http=protocol_class(settings.chat.header_timeout),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    server = _graceful_server_class()(config)
    try:
        server.run(sockets=sockets)
    finally:
        for each in sockets:
            each.close()
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
