"""``/readyz`` and ``/metrics`` of ``fathom serve``: what a serving process shows of itself.

``/readyz`` is ready when the database answers with a schema this code runs on, the process
has started on it, and no enabled platform says it cannot serve at all; it shows each
platform as its ingress does (with the state of its long-lived connection), the digest
scheduler's role, the MCP servers and the queue. ``/metrics`` is the Prometheus exposition of
the process's counters, its leases, tasks and database connections, and, on the replica
holding the digest scheduler, the deployment's runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.pool import QueuePool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from core.values import UNFINISHED_STATUSES
from storage import Store

if TYPE_CHECKING:
    from bots.composition import App
    from core.metrics import Metrics

log = logging.getLogger(__name__)


def built_app(request: Request) -> App | None:
    """The process ``serve`` built (None while it starts: ``bots.server``'s lifespan)."""
    built: App | None = request.app.state.built
    return built


async def readyz(request: Request) -> Response:
    """Ready when the database answers, its schema is one this code runs on (its own or a
    newer release's), the process has started on it (exactly while the platform routes
    answer) and no platform says it cannot serve at all (``ChatPlatform.readiness``: Teams'
    app password refused by the identity platform); the
    platforms (and their connections' states) and the MCP servers (``knowledge``, when
    ``FATHOM_MCP_CONFIG`` is set) are shown either way: research goes on without a server
    that is down, so its state never makes the process unready."""
    built = built_app(request)
    database = built.runtime.database if built is not None else None
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
    platforms = _platforms(built)
    for name, why in (await _platform_problems(built)).items():
        platforms[name] = {**_as_dict(platforms.get(name)), "ready": False, "problem": why}
        reason = reason or f"{name}: {why}"
    scheduler = built.scheduler if built is not None else None
    roles: dict[str, object] = {
        "scheduler": "holder" if scheduler is not None and scheduler.holder else "standby"
    }
    knowledge: KnowledgeStatus | None = built.runtime.knowledge if built is not None else None
    if knowledge is not None:  # shown; a server that is down never makes the process unready
        roles["knowledge"] = knowledge_status(knowledge)
    if built is not None and reason is None:
        kind = built.settings.core.queue
        try:  # readiness is probed every few seconds: unfinished runs only (indexed)
            counts = await built.runtime.store.runs.count_runs(UNFINISHED_STATUSES)
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

    metrics: Metrics | None = request.app.state.metrics
    built = built_app(request)
    if metrics is None or built is None:
        return JSONResponse({"error": "starting"}, 503)
    database, store, scheduler = built.runtime.database, built.runtime.store, built.scheduler
    if scheduler is None or not scheduler.holder:
        # The deployment's runs and queue come from one replica (the scheduler's holder),
        # so a sum over replicas counts each run once.
        metrics.deployment.hide()
    else:
        await _show_deployment(built, store, metrics)
    for holder in built.holders.values():
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


async def _show_deployment(built: App, store: Store, metrics: Metrics) -> None:
    """The runs queued or running now, by status and platform, on this (holding) replica's
    scrape: 0, not absent, for every enabled platform (alerts need it)."""
    try:  # scraped every few seconds: the unfinished runs only (indexed), never all of them
        counts = await store.runs.count_runs(UNFINISHED_STATUSES)
    except Exception:
        log.warning("metrics: the runs could not be counted", exc_info=True)
        metrics.deployment.hide()
        return
    shown: dict[tuple[str, str], int] = {
        (str(status), name): 0 for status in UNFINISHED_STATUSES for name in built.platforms
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


async def _platform_problems(built: App | None) -> dict[str, str]:
    """Each enabled platform that says it cannot serve here, and why
    (``ChatPlatform.readiness``)."""
    problems: dict[str, str] = {}
    for name, platform in built.platforms.items() if built is not None else ():
        why = await platform.readiness()
        if why:
            problems[name] = why
    return problems


def _as_dict(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, dict) else {}


def _platforms(built: App | None) -> dict[str, object]:
    """Each enabled platform as its ingress shows it, with the state of its long-lived
    connection if it has one."""
    shown: dict[str, object] = {}
    if built is None:
        return shown
    for name, platform in built.platforms.items():
        ingress = built.opened[name].ingress
        status = ingress.status() if ingress is not None else {"mode": platform.mode}
        if name in built.holders:  # a long-lived connection: held here, or by another replica
            status = {**status, **built.holders[name].status()}
        shown[name] = status
    return shown
