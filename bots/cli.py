"""The ``fathom`` command line (typer + rich).

Start-up time matters (``fathom research`` should reach its first LLM request
within a second), so heavy modules are imported inside the commands that need
them, never at module level.

Exit codes: 0 success, 1 the run failed or was cancelled, 2 bad input or settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import traceback
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from bots.composition import AppSettings
    from core.config import Settings
    from core.models import ThreadKey
    from core.outcome import RunOutcome
    from storage import Database

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
T = TypeVar("T")

app = typer.Typer(
    name="fathom",
    help="Fathom: deep research with cited reports, in team chat and in the terminal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
thread_app = typer.Typer(help="Inspect research threads and their variables.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema management.", no_args_is_help=True)
digest_app = typer.Typer(help="Scheduled digests (recurring research).", no_args_is_help=True)
sources_app = typer.Typer(
    help="The sources research searches: the web provider and the team's MCP servers "
    "(FATHOM_MCP_CONFIG). Without a subcommand: list them with their state."
)


def _show_version(shown: bool) -> None:
    if not shown:
        return
    from core.build import python_version, version
    from storage import HEAD_REVISION

    sys.stdout.write(
        f"fathom {version()} (database schema {HEAD_REVISION}, Python {python_version()})\n"
    )
    raise typer.Exit(EXIT_OK)


@app.callback()
def _fathom(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_show_version,
            help="Print the version (and the schema revision it needs) and exit.",
        ),
    ] = False,
) -> None:
    """Fathom: deep research with cited reports, in team chat and in the terminal."""


app.add_typer(thread_app, name="thread")
app.add_typer(db_app, name="db")
app.add_typer(digest_app, name="digest")
feedback_app = typer.Typer(help="Votes on reports (👍/👎).", no_args_is_help=True)
app.add_typer(sources_app, name="sources")
app.add_typer(feedback_app, name="feedback")


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    from rich.markup import escape

    # One line, however narrow the terminal (scripts grep it); the message is not markup.
    _stderr().print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _settings() -> Settings:
    """Core's settings, once every part's are known to be valid (a bad platform setting stops
    every command with one line, not only ``serve``)."""
    return _app_settings().core


def _app_settings() -> AppSettings:
    """Every part's settings (core's, the chat layer's, each platform's): ``serve``,
    ``worker`` and the digest checks need the platforms'."""
    from bots.composition import load_app_settings
    from core.config import ConfigError

    try:
        return load_app_settings()
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _configure_logging(settings: Settings, *, quiet_below_warning: bool) -> None:
    from bots.platforms import secret_patterns
    from core.logs import configure_logging

    level = settings.log_level
    if quiet_below_warning and level in ("DEBUG", "INFO") and settings.log_level != "DEBUG":
        level = "WARNING"
    configure_logging(level, settings.log_format, secret_patterns())


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
        _stderr().print(
            f"could not ask the run to stop ({type(exc).__name__}); Ctrl-C again to cancel",
            highlight=False,
            soft_wrap=True,
        )
        return None


def _run(coro: Coroutine[Any, Any, T], started: StartedRun | None = None) -> T:
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
            _stderr().print(
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
        raise _fail(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        line = (started or StartedRun()).interrupted_line()
        _stderr().print(line, highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None


@app.command()
def research(
    topic: Annotated[str, typer.Argument(help="What to research.")],
    depth: Annotated[
        int | None, typer.Option("--depth", "-d", help="Search rounds (default from settings).")
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            help="The research strategy by name (default: FATHOM_STRATEGY, else iterative); "
            "an unknown name is answered with those there are."
        ),
    ] = None,
    thread: Annotated[
        str | None,
        typer.Option(
            help="Console thread to continue, e.g. cli:local:local:abc (follow-ups). Chat "
            "threads are continued in the chat."
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Also write the Markdown report here.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of the report.")
    ] = False,
    files: Annotated[
        list[Path] | None,
        typer.Option(
            "--file",
            "-f",
            help="A file to read with the research (PDF, DOCX, HTML, Markdown, text); repeat "
            "for more.",
        ),
    ] = None,
    sources: Annotated[
        str | None,
        typer.Option(
            help="web, internal (the MCP servers the console may use) or all (default: all)."
        ),
    ] = None,
) -> None:
    """Research TOPIC with live progress and print a cited Markdown report."""
    from bots.console.files import FileProblem, local_attachments
    from core.commands import (
        CommandError,
        validate_depth,
        validate_sources,
        validate_strategy,
        validate_topic,
    )
    from core.models import CONSOLE_PLATFORM, ResearchRequest, SourceChoice, ThreadKey

    settings = _settings()
    try:
        clean_topic = validate_topic(topic)
        clean_depth = validate_depth(
            depth, default=settings.default_depth, maximum=settings.max_depth
        )
        clean_strategy = validate_strategy(strategy, settings.strategy)
        clean_sources = validate_sources(sources)
        key = (
            console_thread(ThreadKey.parse(thread))
            if thread
            else ThreadKey(
                platform=CONSOLE_PLATFORM,
                workspace="local",
                channel="local",
                thread=uuid.uuid4().hex[:12],
            )
        )
        attachments = local_attachments(
            files or [],
            max_bytes=settings.attachment_max_bytes,
            per_request=settings.attachments_per_request,
        )
    except (CommandError, FileProblem, ValueError) as exc:
        raise _fail(str(exc)) from None
    if clean_sources is SourceChoice.INTERNAL and not settings.mcp_config:
        raise _fail(no_internal_source(str(key), configured=False))  # before anything opens
    if output is not None:
        _check_writable(output)
    _configure_logging(settings, quiet_below_warning=True)
    request = ResearchRequest(
        topic=clean_topic,
        depth=clean_depth,
        strategy=clean_strategy,
        thread=key,
        requested_by="cli",
        attachments=attachments,
        sources=clean_sources,
    )
    started = StartedRun()
    outcome = _run(_research(settings, request, None, started), started)
    _show_outcome(outcome, output=output, as_json=as_json)


def no_internal_source(key: str, *, configured: bool) -> str:
    """Why ``--sources internal`` cannot run for ``key`` (a thread, or a digest's channel)."""
    why = (
        f"no MCP server in FATHOM_MCP_CONFIG may be used in {key} (see `fathom sources`)"
        if configured
        else "FATHOM_MCP_CONFIG is not set, so there is no internal source"
    )
    return f"--sources internal: {why}; use --sources web or --sources all"


def console_thread(key: ThreadKey) -> ThreadKey:
    """``key`` when it is a console thread; otherwise a :class:`CommandError` saying where to
    ask instead (the CLI never posts to a chat, and a serving replica must never deliver a
    run started here)."""
    from bots.platforms import titles
    from core.commands import CommandError
    from core.models import CONSOLE_PLATFORM

    if key.platform == CONSOLE_PLATFORM:
        return key
    name = titles().get(key.platform)
    where = (
        f"it is a {name} thread: ask there (/research <topic>, or a reply to the bot in that "
        "thread)"
        if name
        else f"{key.platform!r} is not a console thread"
    )
    raise CommandError(
        f"--thread {key}: the CLI never posts to a chat; {where}, or continue a console "
        "thread (cli:local:local:<id>; see `fathom thread list`)"
    )


def _check_writable(path: Path) -> None:
    """Refuse (exit 2, nothing spent) a report file that cannot be written: its folder is
    missing, it is a directory, or writing there is not permitted. An existing file is
    opened for appending (its content untouched); a new one is created and removed."""
    if path.is_dir():
        raise _fail(f"--output {path} is a directory; name a file, e.g. {path / 'report.md'}")
    if not path.parent.is_dir():
        raise _fail(f"--output {path}: the folder {path.parent} does not exist")
    existed = path.exists()
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise _fail(f"--output {path} cannot be written: {exc.strerror or exc}") from None
    if not existed:
        with contextlib.suppress(OSError):
            path.unlink()


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to resume from its last checkpoint.")],
    output: Annotated[Path | None, typer.Option("--output", "-o")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Resume a crashed, failed or cancelled run without repeating finished searches."""
    settings = _settings()
    if output is not None:
        _check_writable(output)
    _configure_logging(settings, quiet_below_warning=True)
    started = StartedRun(run_id)
    outcome = _run(_research(settings, None, run_id, started), started)
    _show_outcome(outcome, output=output, as_json=as_json)


async def _research(
    settings: Settings, request: Any, run_id: str | None, started: StartedRun
) -> RunOutcome:
    from bots.console.files import LocalFiles
    from bots.console.progress import ConsoleProgress
    from core.config import ConfigError
    from core.executor import RunBusy
    from core.models import SourceChoice
    from core.requests import RunRejected
    from core.runtime import open_runtime
    from storage import ClaimLost, StorageUnavailable

    progress = ConsoleProgress(_stderr())
    try:
        async with open_runtime(settings) as runtime:
            if request is not None and request.sources is SourceChoice.INTERNAL:
                knowledge = runtime.knowledge
                key = str(request.thread)
                if knowledge is None or not knowledge.allowed(key):
                    raise _fail(no_internal_source(key, configured=knowledge is not None))
            if request is not None:
                try:
                    run, _ = await runtime.research.requests.submit(request)
                except RunRejected as exc:
                    raise _fail(str(exc)) from None
                run_id = started.run_id = run.id
            elif await runtime.store.runs.get_run(run_id or "") is None:
                started.run_id = None  # nothing to resume
                raise _fail(f"there is no run {run_id!r}")
            requests, stopped = runtime.research.requests, run_id or ""
            started.stop = lambda: requests.stop(stopped)
            try:
                if request is None:
                    return await runtime.research.executor.resume(
                        run_id or "", progress, LocalFiles()
                    )
                return await runtime.research.executor.execute(run_id or "", progress, LocalFiles())
            except RunRejected as exc:
                raise _fail(str(exc)) from None
            except (RunBusy, ClaimLost) as exc:
                raise _fail(str(exc), EXIT_FAILED) from None
            except StorageUnavailable as exc:
                raise _fail(
                    f"{exc}; the run is resumable with `fathom resume`", EXIT_FAILED
                ) from None
            finally:
                progress.close()
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _show_outcome(outcome: RunOutcome, *, output: Path | None, as_json: bool) -> None:
    from rich.markup import escape

    from core.models import RunStatus
    from core.outcome import ending_text, stopped_with_nothing

    err = _stderr()
    unwritten = False
    if output is not None and outcome.report_markdown:
        try:
            output.write_text(outcome.report_markdown, encoding="utf-8")
        except OSError as exc:
            unwritten = True
            err.print(
                f"[bold red]error:[/] the report could not be written to "
                f"{escape(str(output))} ({escape(exc.strerror or str(exc))}); it follows on "
                "stdout",
                highlight=False,
                soft_wrap=True,
            )
            output = None
        else:
            err.print(f"report written to {output}", highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(outcome.as_json(), ensure_ascii=False) + "\n")
    elif outcome.report_markdown and output is None:
        if sys.stdout.isatty():
            from rich.console import Console
            from rich.markdown import Markdown

            Console().print(Markdown(outcome.report_markdown, hyperlinks=False))
        else:
            sys.stdout.write(outcome.report_markdown)
    err.print(f"thread: {outcome.thread}  run: {outcome.run_id}", highlight=False)
    if unwritten:
        raise typer.Exit(EXIT_FAILED)
    if outcome.status is not RunStatus.SUCCEEDED:
        stopped = stopped_with_nothing(outcome.status, outcome.stop_reason)
        label = "stopped" if stopped else outcome.status.value
        err.print(
            f"[bold red]run {label}:[/] {escape(outcome.error or ending_text(outcome))}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILED)


@thread_app.command("show")
def thread_show(key: Annotated[str, typer.Argument(help="Thread key.")]) -> None:
    """Print a thread's variables and runs as JSON."""
    settings = _settings()

    async def show() -> dict[str, Any] | None:
        from core.models import ThreadVariables
        from core.runtime import open_storage

        async with open_storage(settings) as storage:
            store = storage.store
            record = await store.threads.get_thread(key)
            if record is None:
                return None
            variables = await store.threads.load_variables(record.id)
            if variables is None:
                variables = ThreadVariables().public_dict()
            runs = await store.runs.thread_runs(record.id)
            return {
                "thread": record.key,
                "variables": _shown_variables(variables),
                "runs": [_run_json(r, await store.runs.run_sources(r.id)) for r in runs],
            }

    data = _run(show())
    if data is None:
        raise _fail(f"there is no thread {key!r} (see `fathom thread list`)")
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


def _shown_variables(variables: dict[str, Any]) -> dict[str, Any]:
    """The thread's variables as ``thread show`` prints them: an attached file's text is
    summed up by its length (it can be a whole book)."""
    files = [
        {k: v for k, v in f.items() if k != "text"} | {"text_chars": len(f.get("text") or "")}
        for f in variables.get("files") or []
        if isinstance(f, dict)
    ]
    return {**variables, "files": files}


def _run_json(run: Any, sources: Sequence[Any] = ()) -> dict[str, Any]:
    """A run as ``fathom thread show`` prints it, with its report's sources (and their dates)."""
    return {
        "run_id": run.id,
        "topic": run.topic,
        "depth": run.depth,
        "strategy": run.strategy,
        "status": run.status,
        "requested_by": run.requested_by,
        "rounds_done": run.rounds_done,
        "stop_reason": run.stop_reason,
        "error": run.error,
        "usage": {
            "llm_calls": run.llm_calls,
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "searches": run.searches,
            "pages_read": run.pages_read,
            "pages_skipped": run.pages_skipped,
            "attachments_read": run.attachments_read,
        },
        "attachments": [
            {k: a.get(k) for k in ("name", "mime", "size", "attached_by")}
            for a in run.attachments or []
        ],
        "created_at": run.created_at.isoformat() if run.created_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "attempt": run.attempt,
        "owner": run.owner,
        "heartbeat_at": run.heartbeat_at.isoformat() if run.heartbeat_at else None,
        "delivery": {
            "state": run.delivery,
            "report_parts_posted": run.report_parts_posted,
            "failed_attempts": run.delivery_attempts,
            "error": run.delivery_error,
            "posted_at": run.report_posted_at.isoformat() if run.report_posted_at else None,
        },
        "sources": [
            {
                "n": s.n,
                "title": s.title,
                "url": s.url,
                "published": s.published,
                "kind": s.kind,
                "server": s.server,
            }
            for s in sources
        ],
    }


@thread_app.command("list")
def thread_list(
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List recent threads (a table on a terminal; tab-separated lines when piped)."""
    settings = _settings()

    async def rows() -> list[Any]:
        from core.runtime import open_storage

        async with open_storage(settings) as storage:
            return await storage.store.threads.list_threads(limit)

    threads = _run(rows())
    if not as_json and not sys.stdout.isatty():
        # Scripts and pipes: one line per thread, tab-separated, the key whole and first.
        for t in threads:
            fields = (
                t.key,
                str(t.runs),
                t.last_status or "",
                t.updated_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                " ".join((t.last_topic or "").split()),
            )
            sys.stdout.write("\t".join(fields) + "\n")
        return
    if as_json:
        data = [
            {
                "thread": t.key,
                "runs": t.runs,
                "last_topic": t.last_topic,
                "last_status": t.last_status,
                "updated_at": t.updated_at.isoformat(),
            }
            for t in threads
        ]
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("thread", "runs", "last topic", "status", "updated")
    for t in threads:
        table.add_row(
            t.key,
            str(t.runs),
            t.last_topic or "",
            t.last_status or "",
            t.updated_at.strftime("%Y-%m-%d %H:%M"),
        )
    Console().print(table)


@digest_app.command("add")
def digest_add(
    topic: Annotated[str, typer.Argument(help="What to research every time.")],
    cron: Annotated[str, typer.Option(help='5-field cron, e.g. "0 9 * * MON".')],
    channel: Annotated[str, typer.Option(help="Where to post: <platform>:<workspace>:<channel>.")],
    tz: Annotated[str, typer.Option(help="IANA timezone of the cron.")] = "UTC",
    depth: Annotated[int | None, typer.Option(min=1)] = None,
    strategy: Annotated[
        str | None, typer.Option(help="The research strategy by name (default: FATHOM_STRATEGY).")
    ] = None,
    sources: Annotated[
        str | None,
        typer.Option(help="web, internal (the channel's MCP servers) or all (default: all)."),
    ] = None,
    by: Annotated[
        str, typer.Option(help="Recorded as the schedule's creator.")
    ] = "cli:local:operator",
) -> None:
    """Add a schedule (checked like `/research schedule`); prints its id."""
    from core.commands import (
        CommandError,
        validate_depth,
        validate_sources,
        validate_strategy,
        validate_topic,
    )
    from core.digests import check_digest_platform
    from core.grammar import ScheduleCommand
    from core.models import SourceChoice, ThreadKey
    from core.runtime import digest_service, knowledge_from_settings, open_storage
    from core.schedule import CLI_SYNTAX, timezone, trigger

    app_settings = _app_settings()
    settings = app_settings.core
    try:
        parts = channel.split(":")
        if len(parts) != 3 or not all(parts):
            raise CommandError(
                "--channel must be <platform>:<workspace>:<channel>, e.g. slack:T0001:C0001"
            )
        check_digest_platform(  # before the database
            parts[0], app_settings.titles, app_settings.enabled_names
        )
        zone = timezone(tz, CLI_SYNTAX)
        trigger(cron, zone, CLI_SYNTAX)
        command = ScheduleCommand(
            topic=validate_topic(topic),
            cron=" ".join(cron.split()),
            timezone=zone.key,
            depth=validate_depth(depth, default=settings.default_depth, maximum=settings.max_depth),
            strategy=validate_strategy(strategy, settings.strategy),
            sources=validate_sources(sources),
        )
    except CommandError as exc:
        raise _fail(str(exc)) from None
    key = ThreadKey(platform=parts[0], workspace=parts[1], channel=parts[2], thread="cli")

    async def add() -> Any:
        if command.sources is SourceChoice.INTERNAL:  # by configuration: nothing connects
            knowledge = knowledge_from_settings(settings)
            try:
                if knowledge is None or not knowledge.allowed(channel):
                    raise _fail(no_internal_source(channel, configured=knowledge is not None))
            finally:
                if knowledge is not None:
                    await knowledge.aclose()
        async with open_storage(settings) as storage:
            return await digest_service(settings, storage).add(
                command, thread=key, created_by=by, syntax=CLI_SYNTAX
            )

    try:
        digest = _run(add())
    except CommandError as exc:
        raise _fail(str(exc)) from None
    sys.stdout.write(digest.id + "\n")


@digest_app.command("list")
def digest_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every schedule: id, channel, topic, cron (in words), next run in its timezone."""
    from core.runtime import digest_service, open_storage

    settings = _settings()

    async def views() -> list[Any]:
        async with open_storage(settings) as storage:
            service = digest_service(settings, storage)
            return await service.views(await service.digests.all(), "en")

    found = _run(views())
    if as_json:
        data = [
            {
                "id": v.digest.id,
                "channel": f"{v.digest.platform}:{v.digest.workspace}:{v.digest.channel}",
                "topic": v.digest.topic,
                "cron": v.digest.cron,
                "timezone": v.digest.timezone,
                "schedule": v.words,
                "depth": v.digest.depth,
                "sources": v.digest.sources,
                "enabled": v.digest.enabled,
                "disabled_reason": v.digest.disabled_reason,
                "next_run": v.next_run.isoformat() if v.next_run else None,
                "created_by": v.digest.created_by,
            }
            for v in found
        ]
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
        return
    for v in found:
        when = v.next_run.strftime("%Y-%m-%d %H:%M") if v.next_run else "-"
        state = "" if v.digest.enabled else f"\tdisabled: {v.digest.disabled_reason or ''}"
        searched = "" if v.digest.sources == "all" else f"\tsources={v.digest.sources}"
        sys.stdout.write(
            f"{v.digest.id}\t{v.digest.platform}:{v.digest.workspace}:{v.digest.channel}\t"
            f"{v.digest.topic}\t{v.words} ({v.digest.timezone})\tnext {when}{searched}{state}\n"
        )


@digest_app.command("remove")
def digest_remove(digest_id: Annotated[str, typer.Argument()]) -> None:
    """Remove a schedule."""
    from core.commands import CommandError
    from core.runtime import digest_service, open_storage
    from core.schedule import CLI_SYNTAX

    settings = _settings()

    async def remove() -> None:
        async with open_storage(settings) as storage:
            await digest_service(settings, storage).remove(
                digest_id, by="", is_admin=True, channel=None, syntax=CLI_SYNTAX
            )

    try:
        _run(remove())
    except CommandError as exc:
        raise _fail(str(exc)) from None
    _stderr().print(f"removed {digest_id}", highlight=False)


@digest_app.command("run")
def digest_run(digest_id: Annotated[str, typer.Argument()]) -> None:
    """Fire a schedule now: queue its run (a running `fathom serve` posts it); prints the run id."""
    from core.runtime import digest_service, open_storage
    from storage.tables import utcnow

    settings = _settings()

    async def fire() -> Any:
        async with open_storage(settings) as storage:
            service = digest_service(settings, storage)
            digest = await service.digests.get(digest_id)
            if digest is None:
                return None
            run, _ = await service.fire(digest, utcnow().replace(second=0, microsecond=0))
            return run

    run = _run(fire())
    if run is None:
        raise _fail(f"there is no schedule {digest_id!r} (see `fathom digest list`)")
    sys.stdout.write(run.id + "\n")


@sources_app.callback(invoke_without_command=True)
def sources_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array.")] = False,
) -> None:
    """List the web provider and each MCP server: transport, tool, channels and state (each
    server is connected to, to resolve its tool); configured secrets are masked."""
    if ctx.invoked_subcommand is not None:
        return
    from bots.console.sources import list_sources

    settings = _settings()
    _configure_logging(settings, quiet_below_warning=True)

    async def rows() -> list[Any]:
        from core.runtime import knowledge_from_settings

        knowledge = knowledge_from_settings(settings)  # malformed: one line, exit 2
        try:
            return await list_sources(settings, knowledge)
        finally:
            if knowledge is not None:
                await knowledge.aclose()

    found = _run(rows())
    if as_json:
        sys.stdout.write(json.dumps([r.as_json() for r in found], ensure_ascii=False) + "\n")
        return
    if not sys.stdout.isatty():  # scripts and pipes: one tab-separated line per source
        for r in found:
            fields = (r.name, r.kind, r.transport or "-", r.tool or "-", r.channels_text, r.state)
            sys.stdout.write("\t".join((*fields, r.detail)).rstrip("\t") + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("source", "kind", "transport", "tool", "channels", "state", "detail")
    for r in found:
        table.add_row(
            r.name, r.kind, r.transport or "-", r.tool or "-", r.channels_text, r.state, r.detail
        )
    Console().print(table)
    if not settings.mcp_config:
        _stderr().print(
            "FATHOM_MCP_CONFIG is not set: research searches the web only", highlight=False
        )


@sources_app.command("test")
def sources_test(
    query: Annotated[str, typer.Argument(help="What to search for.")],
    channel: Annotated[
        str,
        typer.Option(
            help="Whose sources: a thread key or its prefix (slack:T0001:C0001), or cli "
            "for the console."
        ),
    ] = "cli",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Run QUERY once against the web provider and each MCP server the channel may use, and
    print what came back. Exit 1 when a source failed."""
    from bots.console.sources import answer_lines, channel_key, probe_sources
    from core.commands import CommandError, validate_topic

    settings = _settings()
    try:
        clean = validate_topic(query)
        key = channel_key(channel)
    except CommandError as exc:
        raise _fail(str(exc)) from None
    _configure_logging(settings, quiet_below_warning=True)

    async def probe() -> list[Any]:
        from core.runtime import knowledge_from_settings

        knowledge = knowledge_from_settings(settings)  # malformed: one line, exit 2
        try:
            return await probe_sources(settings, knowledge, clean, key)
        finally:
            if knowledge is not None:
                await knowledge.aclose()

    answers = _run(probe())
    if as_json:
        data = {"query": clean, "channel": key, "sources": [a.as_json() for a in answers]}
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        for answer in answers:
            sys.stdout.write("\n".join(answer_lines(answer)) + "\n")
        if not any(a.kind == "internal" for a in answers):
            why = (
                f"no MCP server may be used in {key}"
                if settings.mcp_config
                else "FATHOM_MCP_CONFIG is not set"
            )
            _stderr().print(f"no internal source searched: {why}", highlight=False)
    if any(a.error is not None for a in answers):
        raise typer.Exit(EXIT_FAILED)


def _since(text: str | None) -> datetime | None:
    """``--since``: a date (``2026-12-01``, midnight UTC) or an ISO date and time (UTC when
    it names no offset)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise _fail(
            f"--since {text!r} is not a date (e.g. 2026-12-01 or 2026-12-01T09:30)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@feedback_app.command("list")
def feedback_list(
    since: Annotated[
        str | None, typer.Option(help="Only votes cast or changed since (a date, UTC).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Every vote on a report, newest first: when, 👍 or 👎, who, the run, its topic and
    thread (tab-separated lines, or JSON)."""
    from core.runtime import open_storage

    settings = _settings()
    after = _since(since)

    async def votes() -> list[Any]:
        async with open_storage(settings) as storage:
            return await storage.store.feedback.feedback_since(after)

    found = _run(votes())
    if as_json:
        data = [
            {
                "run_id": v.run_id,
                "value": v.value,
                "voter": v.voter,
                "topic": v.topic,
                "thread": v.thread_key,
                "created_at": v.created_at.isoformat(),
                "updated_at": v.updated_at.isoformat(),
            }
            for v in found
        ]
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
        return
    for v in found:
        mark = "👍" if v.value == "up" else "👎"
        fields = (
            v.updated_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            mark,
            v.voter,
            v.run_id,
            " ".join(v.topic.split()),
            v.thread_key,
        )
        sys.stdout.write("\t".join(fields) + "\n")


@app.command()
def prune(
    older_than: Annotated[
        str | None,
        typer.Option(
            help="Prune research finished longer ago than this (90d, 12w, 36h); default "
            "FATHOM_RUN_RETENTION_DAYS."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be pruned; delete nothing.")
    ] = False,
) -> None:
    """Delete finished runs (their sources and votes) and untouched threads older than the
    retention: what housekeeping does every hour (docs/operations.md). Queued and running
    runs, runs whose outcome is not yet posted and each digest's newest report are kept."""
    from core.config import parse_duration
    from core.runtime import open_storage

    settings = _settings()
    if older_than is None:
        if not settings.run_retention_days:
            raise _fail("FATHOM_RUN_RETENTION_DAYS is 0 (research is kept): give --older-than")
        age = timedelta(days=settings.run_retention_days)
    else:
        parsed = parse_duration(older_than)
        if parsed is None or parsed <= timedelta(0):
            raise _fail(f"--older-than {older_than!r} is not a duration (e.g. 90d, 12w, 36h)")
        age = parsed
    before = datetime.now(UTC) - age

    async def pruning() -> Any:
        async with open_storage(settings, upgrade=False) as storage:
            return await storage.store.retention.prune(before, dry_run=dry_run)

    pruned = _run(pruning())
    verb = "would prune" if dry_run else "pruned"
    sys.stdout.write(
        f"{verb} {pruned.describe()} finished or untouched before {before:%Y-%m-%d %H:%M} UTC\n"
    )


@app.command()
def forget(
    user: Annotated[
        str,
        typer.Option(
            help="The person's requester key <platform>:<workspace>:<user id>, e.g. "
            "slack:T0001:U0002 (as `fathom feedback list` and `fathom thread show` show it)."
        ),
    ],
) -> None:
    """Delete what Fathom keeps of one person (a privacy request): their runs and threads
    left empty, their votes, guidance, digests and attached files (docs/operations.md).
    Their runs still going on are cancelled: run it again once they have ended (exit 1)."""
    from core.runtime import open_storage
    from storage import NotARequesterKey, Person

    settings = _settings()
    try:
        person = Person.parse(user)
    except NotARequesterKey as exc:
        raise _fail(str(exc)) from None

    async def forgetting() -> Any:
        async with open_storage(settings, upgrade=False) as storage:
            store = storage.store
            for run_id in await store.forgetting.unfinished_runs(person):
                await store.runs.request_cancel(run_id)
            return await store.forgetting.forget(person)

    done = _run(forgetting())
    sys.stdout.write(
        f"forgot {person.key}: {done.runs} runs, {done.threads} threads, {done.votes} votes, "
        f"{done.guidance} guidance replies, {done.digests} digests, {done.files} files\n"
    )
    if done.installations:
        _stderr().print(
            f"{person.user_id} installed the Slack app ({done.installations} installations, "
            "kept: uninstalling the app removes them)",
            highlight=False,
            soft_wrap=True,
        )
    if done.busy:
        _stderr().print(
            f"{len(done.busy)} runs are still going on or posting ({', '.join(done.busy)}); "
            "those of this person were asked to cancel: run `fathom forget` again once they "
            "have ended",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILED)


def _on_database(settings: Settings, work: Callable[[Database], Awaitable[T]]) -> T:
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

    return _run(run())


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the migrations up to this release's schema (a newer release's schema is left
    as it is: this release runs on it)."""

    async def upgrade(database: Database) -> str:
        await database.upgrade()
        return (await database.schema()).describe()

    _stderr().print(_on_database(_settings(), upgrade), highlight=False, soft_wrap=True)


@db_app.command("current")
def db_current() -> None:
    """Print the database's schema revision and this release's, and whether it runs on it."""

    async def current(database: Database) -> tuple[str | None, str, str]:
        schema = await database.schema()
        return schema.revision, schema.state.value, schema.describe()

    from storage import HEAD_REVISION

    revision, state, line = _on_database(_settings(), current)
    sys.stdout.write(f"{revision or 'none'} ({state}; this release: {HEAD_REVISION})\n")
    _stderr().print(line, highlight=False, soft_wrap=True)


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[
        str, typer.Argument(help="The revision to go back to (e.g. 0014), or `base`.")
    ],
) -> None:
    """Undo migrations down to REVISION: the rollback of a release, run with the code of the
    release that migrated the schema (docs/operations.md)."""

    async def downgrade(database: Database) -> str:
        await database.downgrade(revision)
        return (await database.schema()).describe()

    _stderr().print(_on_database(_settings(), downgrade), highlight=False, soft_wrap=True)


@app.command()
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
    """Serve every platform whose credentials are set (Slack, Feishu/Lark, DingTalk: their
    HTTP routes and long-lived connections), /healthz, /readyz and /metrics, the digest
    scheduler and the job runner."""
    from core.config import ConfigError
    from core.runtime import check_database

    settings = _app_settings()
    _configure_logging(settings.core, quiet_below_warning=False)
    from bots.server import check_settings, run_server

    try:
        check_settings(settings)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    _run(check_database(settings.core))  # before the port is bound: one line, exit 2
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
        raise _fail(str(exc)) from None
    if not started:
        raise _fail("the server did not start; see the log above", EXIT_FAILED)


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
    import asyncio

    from core.config import ConfigError

    settings = _app_settings()
    _configure_logging(settings.core, quiet_below_warning=False)
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
        raise _fail(str(exc)) from None


def main() -> None:
    """The ``fathom`` entry point: run the command, then end the process at once.

    When a command returns, its output is written and every connection and file is closed.
    Python's own shutdown would then spend 0.2-0.3 s freeing the imported modules (the openai
    SDK alone about 0.15 s, SQLAlchemy about 0.07 s) while the user waits for the prompt;
    ``os._exit`` after flushing skips that (bench/README.md, "(d) tail").
    """
    code = 0
    try:
        app()  # typer's standalone mode always ends in SystemExit
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # a bug, or Ctrl-C outside a run: report it as Python would
        traceback.print_exc()
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")  # what the interpreter does with a non-integer code
    return 1


if __name__ == "__main__":  # pragma: no cover
    main()
