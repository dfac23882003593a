"""What every command shares: its settings, failing with one line, logging, running a
coroutine with Ctrl-C and SIGTERM handled, and a reached database."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from bots.composition import AppSettings
    from core.settings import Settings
    from storage import Database


EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

T = TypeVar("T")


def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    from rich.markup import escape

    # One line, however narrow the terminal (scripts grep it); the message is not markup.
    stderr().print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def core_settings() -> Settings:
    """Core's settings, once every part's are known to be valid (a bad platform setting stops
    every command with one line, not only ``serve``)."""
    return all_settings().core


def all_settings() -> AppSettings:
    """Every part's settings (core's, the chat layer's, each platform's): ``serve``,
    ``worker`` and the digest checks need the platforms'."""
    from bots.composition import load_app_settings
    from core.config import ConfigError

    try:
        return load_app_settings()
    except ConfigError as exc:
        raise fail(str(exc)) from None


def setup_logging(settings: Settings, *, quiet_below_warning: bool) -> None:
    from bots.mcp.settings import token_patterns
    from bots.platforms import secret_patterns
    from core.logs import configure_logging

    level = settings.log_level
    if quiet_below_warning and level in ("DEBUG", "INFO") and settings.log_level != "DEBUG":
        level = "WARNING"
    configure_logging(level, settings.log_format, (*secret_patterns(), *token_patterns()))


@dataclass
class StartedRun:
    """The run a command started or resumed, once its row exists (for the line an
    interruption prints), and how to ask it to stop and write (the first Ctrl-C)."""

    run_id: str | None = None
    stop: Callable[[], Awaitable[object]] | None = None

    def interrupted_line(self) -> str:
        if self.run_id is None:
            return "interrupted before the run was recorded; nothing to resume."
        return (
            f"interrupted; run {self.run_id} is recorded as cancelled. "
            f"Finish it with: fathom resume {self.run_id}"
        )


async def _ask(call: Callable[[], Awaitable[object]]) -> object:
    """Ask the run to stop; a failure (the database is down) is one line, not a crash: the
    next Ctrl-C still cancels."""
    try:
        return await call()
    except Exception as exc:
        stderr().print(
            f"could not ask the run to stop ({type(exc).__name__}); Ctrl-C again to cancel",
            highlight=False,
            soft_wrap=True,
        )
        return None


def run_command(coro: Coroutine[Any, Any, T], started: StartedRun | None = None) -> T:
    """Run a coroutine; SIGTERM cancels it like Ctrl-C so runs end in a recorded state.
    A settings problem found on the way (the database cannot be reached) is one line, exit 2."""
    from core.config import ConfigError

    async def main() -> T:
        task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()
        stopping: list[asyncio.Task[object]] = []

        def on_ctrl_c() -> None:
            """The first Ctrl-C stops the searching and writes the report; the second (or
            one before the run exists) cancels, like SIGTERM."""
            ask = started.stop if started is not None else None
            if stopping or ask is None:
                task.cancel()
                return
            stderr().print(
                "stopping: no new search starts, the report is written from what was found "
                "(Ctrl-C again to cancel without a report)",
                highlight=False,
                soft_wrap=True,
            )
            stopping.append(loop.create_task(_ask(ask)))

        try:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
            loop.add_signal_handler(signal.SIGINT, on_ctrl_c)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-Unix
            pass
        return await task

    try:
        return asyncio.run(main())
    except ConfigError as exc:
        raise fail(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        line = (started or StartedRun()).interrupted_line()
        stderr().print(line, highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None


def on_database(settings: Settings, work: Callable[[Database], Awaitable[T]]) -> T:
    """``work`` on the reached database (unreachable, or a schema it cannot handle: one
    line, exit 2)."""

    async def run() -> T:
        from core.config import ConfigError
        from core.runtime import reach_database
        from storage import Database, SchemaError

        database = Database(settings.database_url)
        try:
            await reach_database(database, upgrade=False)
            try:
                return await work(database)
            except SchemaError as exc:
                raise ConfigError(str(exc)) from None
        finally:
            await database.dispose()

    return run_command(run())


def no_internal_source(key: str, *, configured: bool) -> str:
    """Why ``--sources internal`` cannot run for ``key`` (a thread, or a digest's channel)."""
    why = (
        f"no MCP server in FATHOM_MCP_CONFIG may be used in {key} (see `fathom sources`)"
        if configured
        else "FATHOM_MCP_CONFIG is not set, so there is no internal source"
    )
    return f"--sources internal: {why}; use --sources web or --sources all"
