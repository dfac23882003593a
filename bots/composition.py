"""The composition root of ``fathom serve`` and ``fathom worker``: settings in, the app out.

:func:`load_app_settings` reads every part's settings from the one environment (core's, the
chat layer's, each registered platform's); :func:`open_app` builds, once, everything a
serving or working process needs: core's runtime (``core.runtime.open_runtime``: storage,
clients, services), the research job, the job runner, and every enabled platform (its
posters registered on the job; for ``serve`` its ingress too), and closes them in the one
safe order: the platforms stop taking requests, the runner stops (its jobs hand their runs
back), then the platforms' outbound clients close. ``fathom research`` and the ``thread``
and ``digest`` commands need no platform and use ``core.runtime`` directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from bots.chat.platform import ChatPlatform, OpenPlatform, PlatformServices
from bots.chat.settings import ChatPolicy, ChatSettings, PlatformSettings
from bots.mcp.settings import McpSettings
from bots.platforms import PLATFORMS, Registry, classes, titles
from core.config import load
from core.settings import Settings

if TYPE_CHECKING:
    from bots.chat.delivery import ThreadPosters
    from bots.housekeeping import Housekeeping
    from bots.mcp.delivery import McpPosters
    from bots.platforms import PlatformClass
    from core.metrics import Metrics
    from core.operations.duty import OneHolder
    from core.operations.job import ResearchJob
    from core.operations.queue import ProcrastinateQueue
    from core.operations.runners import JobRunner
    from core.operations.scheduler import DigestScheduler
    from core.research.lease import LeaseTiming
    from core.runtime import Runtime, Storage

#: ``serve`` receives requests (routes, connections) and runs or enqueues; ``worker`` only
#: executes and delivers runs from the queue.
Role = Literal["serve", "worker"]


@dataclass(frozen=True)
class AppSettings:
    """Every part's settings, read from the same environment."""

    core: Settings
    chat: ChatSettings
    #: Every registered platform's settings, by platform name.
    platforms: Mapping[str, PlatformSettings]
    #: The registered platforms (``bots.platforms.PLATFORMS``, or more in a test).
    registry: Registry = PLATFORMS
    #: ``/mcp``'s tokens and the headers it answers (None: no ``/mcp``).
    mcp: McpSettings | None = None

    @property
    def classes(self) -> tuple[PlatformClass, ...]:
        """Every registered platform's class (imported when its settings were read)."""
        return classes(self.registry)

    @property
    def enabled(self) -> tuple[PlatformClass, ...]:
        """The platforms whose credentials are set (what ``fathom serve`` connects to)."""
        return tuple(cls for cls in self.classes if self.platforms[cls.name].enabled)

    @property
    def enabled_names(self) -> frozenset[str]:
        return frozenset(cls.name for cls in self.enabled)

    @property
    def titles(self) -> dict[str, str]:
        """Every registered platform's name and what people call it."""
        return titles(self.registry)

    @property
    def policy(self) -> ChatPolicy:
        return ChatPolicy.of(self.core, self.chat)

    def check_platforms(self) -> None:
        """``ConfigError`` (one line) for the first enabled platform that is half-configured."""
        for cls in self.enabled:
            self.platforms[cls.name].check()


def load_app_settings(registry: Registry = PLATFORMS, **overrides: object) -> AppSettings:
    """Every part's settings (``overrides`` as for any settings class: variable names, and
    ``_env_file``); ``ConfigError`` with one readable line (also for a registered platform
    that cannot be imported: ``bots.platforms.PlatformEntry.load``)."""
    return AppSettings(
        core=load(Settings, **overrides),
        chat=load(ChatSettings, **overrides),
        platforms={cls.name: load(cls.settings_class, **overrides) for cls in classes(registry)},
        registry=registry,
        mcp=load(McpSettings, **overrides),
    )


@dataclass
class App:
    """A serving or working process, built: what its entry point drives."""

    settings: AppSettings
    runtime: Runtime
    job: ResearchJob
    runner: JobRunner
    #: The procrastinate queue (a worker's, or ``serve``'s with ``FATHOM_QUEUE=procrastinate``).
    queue: ProcrastinateQueue | None = None
    #: The enabled platforms, opened, by name (registration order).
    platforms: dict[str, ChatPlatform[Any]] = field(default_factory=dict)
    #: What each of them serves (its posters and, in ``serve``, its ingress), by name.
    opened: dict[str, OpenPlatform] = field(default_factory=dict)
    #: ``serve``'s digest scheduler (on the replica holding its lease).
    scheduler: DigestScheduler | None = None
    #: ``serve``'s elections, one per long-lived connection (``<platform>-connection``), by
    #: platform name: the replica holding one holds that connection.
    holders: dict[str, OneHolder] = field(default_factory=dict)
    #: ``serve``'s hourly pruning (on the replica holding its lease).
    housekeeping: Housekeeping | None = None
    #: The ``mcp`` platform's delivery, registered on the job (its ``wakeup`` tells this
    #: process's MCP request handlers of the progress rows written here).
    mcp: McpPosters | None = None

    @property
    def owner(self) -> str:
        """This process's name on its claims and leases."""
        return process_owner(self.runtime)

    async def start(self) -> None:
        """Start what needs the schema: the runner (it resumes the runs a dead process left
        behind), then, in ``serve``, housekeeping, the digest scheduler and the elections of
        the long-lived connections. Each is stopped when :func:`open_app` closes."""
        await self.runner.start()
        if self.housekeeping is not None:
            self.housekeeping.start()
        if self.scheduler is not None:
            await self.scheduler.start()
        for holder in self.holders.values():
            await holder.start()


def process_owner(runtime: Runtime) -> str:
    """This process's name on its claims (``RunPolicy.owner``, named when the research side
    was built), which its leases (the digest scheduler's, the connections', housekeeping's)
    carry too."""
    owner = runtime.research.policy.owner
    assert owner is not None, "Research names its policy's owner"
    return owner


def lease_timing(runtime: Runtime) -> LeaseTiming:
    """The lease of a claimed run (``FATHOM_STALE_RUN_AFTER``), for the runners' sweeps."""
    return runtime.research.policy.timing


@asynccontextmanager
async def open_app(
    settings: AppSettings,
    *,
    role: Role,
    upgrade: bool = True,
    metrics: Metrics | None = None,
) -> AsyncIterator[App]:
    """Build the process (``ConfigError`` before touching anything when a setting is
    missing); nothing is started (the entry point calls :meth:`App.start` once the schema is
    usable)."""
    from bots.mcp.delivery import PLATFORM as MCP
    from bots.mcp.delivery import TITLE as MCP_TITLE
    from bots.mcp.delivery import McpPosters
    from core.operations.job import DeliveryPolicy, ResearchJob
    from core.operations.queue import ProcrastinateJobRunner, ProcrastinateQueue
    from core.operations.runners import InProcessJobRunner
    from core.runtime import open_runtime

    core = settings.core
    async with (
        open_runtime(core, upgrade=upgrade, metrics=metrics) as runtime,
        contextlib.AsyncExitStack() as stack,  # closed in reverse: see the module
    ):
        policy = DeliveryPolicy(attempts=core.delivery_attempts, first_delay=core.delivery_backoff)
        job = ResearchJob(
            runtime.research.executor,
            runtime.store.runs,
            runtime.store.claims,
            policy=policy,
            chat_platforms={**settings.titles, MCP: MCP_TITLE},
        )
        runner: JobRunner
        queue: ProcrastinateQueue | None = None
        timing, store = lease_timing(runtime), runtime.store
        if role == "worker" or core.queue == "procrastinate":
            queue = await stack.enter_async_context(
                ProcrastinateQueue(core.database_url, job if role == "worker" else None)
            )
            runner = ProcrastinateJobRunner(
                queue, job=job, runs=store.runs, claims=store.claims, timing=timing
            )
        else:
            runner = InProcessJobRunner(
                job, claims=store.claims, max_concurrent=core.max_concurrent_runs, timing=timing
            )
        app = App(settings, runtime, job, runner, queue)
        # Runs asked for over MCP (fathom mcp, /mcp): their progress as rows, from any process.
        app.mcp = McpPosters(runtime.store.progress)
        job.register(MCP, app.mcp)
        # Closed in this order: the ingresses (stop taking requests, finish the answers in
        # flight), the runner (its running jobs post meanwhile), then the outbound clients.
        clients = await stack.enter_async_context(contextlib.AsyncExitStack())
        stack.push_async_callback(runner.stop)
        await _open_platforms(app, stack, clients, role=role, metrics=metrics)
        if role == "serve":
            _serving_parts(app, stack)
        yield app


async def _open_platforms(
    app: App,
    stack: contextlib.AsyncExitStack,
    clients: contextlib.AsyncExitStack,
    *,
    role: Role,
    metrics: Metrics | None,
) -> None:
    """Open every enabled platform with its services, register its posters on the job, and
    close it in the module's order."""
    settings, runtime = app.settings, app.runtime
    services = PlatformServices(
        requests=runtime.research.requests,
        store=runtime.store,
        digests=runtime.digests,
        policy=settings.policy,
        limits=settings.chat.route_limits,
        knowledge=runtime.knowledge,
        metrics=metrics,
    )
    entries = {entry.name: entry for entry in settings.registry}
    for cls in settings.enabled:
        engine = runtime.database.engine if cls.metadata else None
        own = replace(services, engine=engine)  # (its own: the chat layers it makes)
        platform = cls(settings.platforms[cls.name], own)
        app.platforms[cls.name] = platform
        clients.push_async_callback(platform.aclose)
        stack.push_async_callback(own.aclose)
        with entries[cls.name].importing():  # its SDK: one line naming what is missing
            opened = await platform.open(app.runner if role == "serve" else None)
        app.opened[cls.name] = opened
        if opened.ingress is not None:
            stack.push_async_callback(opened.ingress.close)
        opened.posters.metrics = metrics
        opened.posters.document_parts = services.policy.document_parts
        app.job.register(cls.name, opened.posters)


def _serving_parts(app: App, stack: contextlib.AsyncExitStack) -> None:
    """``serve``'s digest scheduler, the elections of its long-lived connections and its
    housekeeping, built (:meth:`App.start` starts them), and stopped first when the process
    closes: housekeeping, the connections, then the scheduler."""
    from bots.housekeeping import Housekeeping
    from core.operations.duty import OneHolder
    from core.operations.scheduler import DigestScheduler

    core, runtime, owner = app.settings.core, app.runtime, app.owner
    leases = runtime.store.leases
    app.scheduler = DigestScheduler(
        runtime.digests,
        leases,
        app.runner,
        owner=owner,
        lease=core.lease,
        tick_every=core.lease / 3,
    )
    stack.push_async_callback(app.scheduler.close)
    for name, platform in app.platforms.items():
        ingress = app.opened[name].ingress
        if platform.long_lived and ingress is not None:
            holder = OneHolder(
                f"{name}-connection",
                leases,
                owner=owner,
                start=ingress.connect,
                stop=ingress.disconnect,
                lease=core.lease,
            )
            app.holders[name] = holder
            stack.push_async_callback(holder.close)
    chores = [chore for platform in app.platforms.values() for chore in platform.housekeeping()]
    posters = {name: opened.posters for name, opened in app.opened.items()}
    app.housekeeping = Housekeeping(
        runtime.store, core, owner=owner, chores=chores, posters=posters
    )
    stack.push_async_callback(app.housekeeping.aclose)


@asynccontextmanager
async def open_outbound(
    settings: AppSettings, storage: Storage, names: Collection[str]
) -> AsyncIterator[dict[str, ThreadPosters]]:
    """The outbound side (``OpenPlatform.posters``) of each enabled platform in ``names``,
    by name, opened with no ingress and no research runtime (``fathom forget`` and ``fathom
    prune`` deleting the documents of the runs they deleted), and closed on exit. A platform
    whose package or SDK cannot be imported raises ``ConfigError`` (one line)."""
    from core.research.requests import RunRequests
    from core.runtime import digest_service

    store = storage.store
    services = PlatformServices(
        requests=RunRequests(runs=store.runs, threads=store.threads, feedback=store.feedback),
        store=store,
        digests=digest_service(settings.core, storage),
        policy=settings.policy,
        limits=settings.chat.route_limits,
    )
    entries = {entry.name: entry for entry in settings.registry}
    async with contextlib.AsyncExitStack() as stack:
        opened: dict[str, ThreadPosters] = {}
        for cls in settings.enabled:
            if cls.name not in names:
                continue
            engine = storage.database.engine if cls.metadata else None
            platform = cls(settings.platforms[cls.name], replace(services, engine=engine))
            stack.push_async_callback(platform.aclose)
            with entries[cls.name].importing():
                opened[cls.name] = (await platform.open(None)).posters
        yield opened
