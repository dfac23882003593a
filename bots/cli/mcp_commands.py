"""``fathom mcp``: Fathom's research as an MCP server over stdio, for a local assistant
(Claude Desktop or Code, Cursor): the ``research`` tool of ``bots.mcp.server``, principal
``local``.

stdout is the protocol: everything else (the log) goes to stderr. The process executes its
runs itself (the in-process runner, which also takes over MCP runs a stopped ``fathom mcp``
left), or queues them to ``fathom worker`` processes when ``FATHOM_QUEUE=procrastinate``.
When the assistant goes away (stdin closes) without cancelling, the runs executing here go on
to their end and are stored before the process exits (``fathom thread show``, or a call with
their ``thread``, finds them).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer

from bots.cli.apps import app
from bots.cli.common import all_settings, fail, run_command, setup_logging

if TYPE_CHECKING:
    from bots.composition import AppSettings

log = logging.getLogger(__name__)


@app.command()
def mcp(
    no_upgrade: Annotated[
        bool, typer.Option("--no-upgrade", help="Do not migrate the database schema on start.")
    ] = False,
) -> None:
    """Serve Fathom's research as an MCP tool over stdio (for Claude, Cursor, any MCP client)."""
    from core.config import ConfigError

    settings = all_settings()
    setup_logging(settings.core, quiet_below_warning=False)
    try:
        run_command(serve_stdio(settings, upgrade=not no_upgrade))
    except ConfigError as exc:
        raise fail(str(exc)) from None


async def serve_stdio(settings: AppSettings, *, upgrade: bool = True) -> None:
    """Serve one MCP client on this process's stdin and stdout until it leaves, then let the
    runs executing here finish."""
    import contextlib

    from mcp.server.stdio import stdio_server

    from bots.composition import lease_timing
    from bots.mcp.delivery import PLATFORM, TITLE, McpPosters
    from bots.mcp.server import research_server, services_of
    from bots.mcp.settings import LOCAL
    from core.operations.job import DeliveryPolicy, ResearchJob
    from core.operations.queue import ProcrastinateJobRunner, ProcrastinateQueue
    from core.operations.runners import InProcessJobRunner, JobRunner
    from core.runtime import open_runtime

    core = settings.core
    async with open_runtime(core, upgrade=upgrade) as runtime, contextlib.AsyncExitStack() as stack:
        store = runtime.store
        job = ResearchJob(
            runtime.research.executor,
            store.runs,
            store.claims,
            policy=DeliveryPolicy(
                attempts=core.delivery_attempts, first_delay=core.delivery_backoff
            ),
            chat_platforms={**settings.titles, PLATFORM: TITLE},
        )
        posters = McpPosters(store.progress)
        job.register(PLATFORM, posters)
        runner: JobRunner
        local: InProcessJobRunner | None = None
        if core.queue == "procrastinate":
            queue = await stack.enter_async_context(ProcrastinateQueue(core.database_url, None))
            runner = ProcrastinateJobRunner(
                queue, job=job, runs=store.runs, claims=store.claims, timing=lease_timing(runtime)
            )
        else:
            runner = local = InProcessJobRunner(
                job,
                claims=store.claims,
                max_concurrent=core.max_concurrent_runs,
                timing=lease_timing(runtime),
            )
        stack.push_async_callback(runner.stop)
        await runner.start()
        services = services_of(runtime, job, runner, settings.policy, posters.wakeup)
        server = research_server(services, LOCAL)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        if local is not None and local.active:
            log.info("the MCP client left; %d run(s) going on here finish first", len(local.active))
            await local.drain()
