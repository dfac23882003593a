"""``fathom serve`` and ``fathom worker``: the long-running processes."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from bots.cli.apps import app
from bots.cli.common import (
    EXIT_FAILED,
    all_settings,
    fail,
    run_command,
    setup_logging,
)
from bots.platforms import titles

#: ``fathom serve --help``: the platforms from the registry's lines (none is imported).
SERVE_HELP = (
    "Serve every platform whose credentials are set ({platforms}: their HTTP routes and "
    "long-lived connections), /healthz, /readyz and /metrics, the digest scheduler and the "
    "job runner."
)


@app.command(help=SERVE_HELP.format(platforms=", ".join(titles().values())))
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    no_upgrade: Annotated[
        bool, typer.Option("--no-upgrade", help="Do not migrate the database schema on start.")
    ] = False,
    admin_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve /readyz and /metrics on this port only (not on the public one).",
        ),
    ] = None,
    admin_host: Annotated[str, typer.Option(help="Interface of the admin port.")] = "127.0.0.1",
) -> None:
    from core.config import ConfigError
    from core.runtime import check_database

    settings = all_settings()
    setup_logging(settings.core, quiet_below_warning=False)
    from bots.server import check_settings, run_server

    try:
        check_settings(settings)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    run_command(check_database(settings.core))  # before the port is bound: one line, exit 2
    try:
        started = run_server(
            settings,
            host=host,
            port=port,
            upgrade=not no_upgrade,
            admin_host=admin_host,
            admin_port=admin_port,
        )
    except ConfigError as exc:
        raise fail(str(exc)) from None
    if not started:
        raise fail("the server did not start; see the log above", EXIT_FAILED)


@app.command()
def worker(
    concurrency: Annotated[
        int, typer.Option(min=1, max=1000, help="Research runs executed at once.")
    ] = 10,
    no_upgrade: Annotated[
        bool,
        typer.Option(
            "--no-upgrade",
            help="Do not migrate the database schema on start; wait until it is usable.",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1, max=65535, help="Serve this worker's counters at /metrics on this port."
        ),
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="Interface of the metrics port.")] = "127.0.0.1",
) -> None:
    """Execute research runs from the queue (FATHOM_QUEUE=procrastinate, PostgreSQL)."""

    from core.config import ConfigError

    settings = all_settings()
    setup_logging(settings.core, quiet_below_warning=False)
    from bots.worker import check_worker_settings, work

    try:
        check_worker_settings(settings)
        asyncio.run(
            work(
                settings,
                concurrency=concurrency,
                upgrade=not no_upgrade,
                metrics_host=metrics_host,
                metrics_port=metrics_port,
            )
        )
    except ConfigError as exc:
        raise fail(str(exc)) from None
