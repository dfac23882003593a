"""``fathom serve``: the HTTP routes, every enabled platform and the in-process job runner.

``create_app(settings)`` returns a Starlette app whose lifespan has the composition root
build the process (``bots.composition.open_app``: runtime with the schema upgraded unless
told not to, job runner, every enabled platform and its ingress, the digest scheduler, the
election of the replica that holds each long-lived connection, housekeeping) and starts it
once the schema is usable (``App.start``: the job runner, which resumes runs a dead process
left behind and keeps sweeping for runs a dead replica abandoned, then the rest). The
server talks to each platform's opened ingress. Every registered platform's routes are
mounted (404 while it is not configured), and ``/mcp``, the research tool over MCP's
Streamable HTTP (``bots.mcp.http``: 404 without ``FATHOM_MCP_TOKEN``). Shutdown stops
``/mcp``'s sessions, closes the long-lived connections, then gives running jobs a grace
period and hands the rest back for any replica to continue.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bots.composition import AppSettings, open_app
from bots.header_deadline import MAX_HEADER_BYTES, protocol_class
from bots.http_metrics import IngressMetrics
from bots.http_status import built_app, metrics_route, readyz
from bots.mcp.http import METHODS as MCP_METHODS
from bots.mcp.http import PATH as MCP_PATH
from bots.mcp.http import McpEndpoint, SlackSigned
from core.config import ConfigError
from core.operations.queue import conninfo
from core.runtime import wait_for_schema

if TYPE_CHECKING:
    from bots.platforms import PlatformClass

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
    if settings.mcp is not None and settings.mcp.slack_identity and not slack_secret(settings):
        raise ConfigError(
            "FATHOM_MCP_SLACK_IDENTITY needs SLACK_SIGNING_SECRET: the signing secret of the "
            "Slack app whose manifest lists Fathom's /mcp (docs/mcp.md, Slackbot)"
        )


def slack_secret(settings: AppSettings) -> str | None:
    """The Slack app's signing secret, if Slack is configured."""
    slack = settings.platforms.get("slack")
    secret = getattr(slack, "signing_secret", None)
    return secret if isinstance(secret, str) and secret else None


def slack_signed(secret: str | None) -> SlackSigned | None:
    """Slack's signature check with ``secret`` (None without one)."""
    if secret is None:
        return None
    from bots.slack.signature import signature_is_valid

    def signed(body: bytes, timestamp: str | None, signature: str | None) -> bool:
        return signature_is_valid(secret, body, timestamp, signature, time.time())

    return signed


def create_app(
    settings: AppSettings, *, upgrade: bool = True, admin_port: int | None = None
) -> Starlette:
    check_settings(settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from core.metrics import Metrics

        app.state.metrics = metrics = Metrics()
        async with open_app(settings, role="serve", upgrade=upgrade, metrics=metrics) as built:
            app.state.built = built
            database = built.runtime.database
            starting: asyncio.Task[None] | None = None

            async def start_when_usable() -> None:
                await wait_for_schema(database)
                try:
                    await start()
                except Exception:  # a task's failure would otherwise pass unseen
                    log.exception("serve could not start on the database schema")
                    raise

            async def start() -> None:
                """What needs the schema (``App.start``); then the routes and /readyz open."""
                await built.start()
                app.state.schema_ready = True

            app.state.schema_ready = False
            if upgrade or await database.schema_is_usable():
                await start()
            else:  # started before the migration: the routes answer 503 until it has run
                starting = asyncio.create_task(start_when_usable())
            try:
                async with mcp.serving(built):  # stopped first: its calls' runs go on
                    yield
            finally:
                if starting is not None:
                    starting.cancel()
            # open_app then stops housekeeping, the connections and the digest scheduler,
            # closes the platforms' ingress, stops the runner (its jobs hand their runs back)
            # and closes the platforms' outbound clients, in that order.

    routes = [
        Route(
            route.path, _on_port(platform_endpoint(cls), admin=False), methods=list(route.methods)
        )
        for cls in settings.classes
        for route in cls.routes
    ]
    mcp = McpEndpoint(
        settings.mcp,
        admin_port=admin_port,
        max_body_bytes=settings.chat.max_body_bytes,
        body_timeout=settings.chat.body_timeout,
        slack_signed=slack_signed(slack_secret(settings)),
    )
    routes.append(Route(MCP_PATH, mcp, methods=list(MCP_METHODS)))
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
    app.state.built = None  # the process, once the lifespan has built it
    app.state.metrics = None
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
        built = built_app(request)
        if built is None or cls.name not in built.opened:
            return JSONResponse({"error": f"{cls.title} is not configured on this server"}, 404)
        ingress = built.opened[cls.name].ingress
        if ingress is None:
            return JSONResponse({"error": f"{cls.title} does not take requests here"}, 404)
        return _schema_refusal(request) or await ingress.handle(request)

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
