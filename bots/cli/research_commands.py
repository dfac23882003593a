"""``fathom research`` and ``fathom resume``: a research in the terminal, with live progress
and the report."""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bots.cli.apps import app
from bots.cli.common import (
    EXIT_FAILED,
    StartedRun,
    core_settings,
    fail,
    no_internal_source,
    run_command,
    setup_logging,
    stderr,
)

if TYPE_CHECKING:
    from core.research.outcome import RunOutcome
    from core.settings import Settings
    from core.values import ThreadKey


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
    from core.chat.commands import (
        CommandError,
        validate_depth,
        validate_sources,
        validate_strategy,
        validate_topic,
    )
    from core.models import CONSOLE_PLATFORM
    from core.research.requests import ResearchRequest
    from core.values import SourceChoice, ThreadKey

    settings = core_settings()
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
        raise fail(str(exc)) from None
    if clean_sources is SourceChoice.INTERNAL and not settings.mcp_config:
        raise fail(no_internal_source(str(key), configured=False))  # before anything opens
    if output is not None:
        _check_writable(output)
    setup_logging(settings, quiet_below_warning=True)
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
    outcome = run_command(_research(settings, request, None, started), started)
    _show_outcome(outcome, output=output, as_json=as_json)


def console_thread(key: ThreadKey) -> ThreadKey:
    """``key`` when it is a console thread; otherwise a :class:`CommandError` saying where to
    ask instead (the CLI never posts to a chat, and a serving replica must never deliver a
    run started here)."""
    from bots.platforms import titles
    from core.chat.commands import CommandError
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
        raise fail(f"--output {path} is a directory; name a file, e.g. {path / 'report.md'}")
    if not path.parent.is_dir():
        raise fail(f"--output {path}: the folder {path.parent} does not exist")
    existed = path.exists()
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise fail(f"--output {path} cannot be written: {exc.strerror or exc}") from None
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
    settings = core_settings()
    if output is not None:
        _check_writable(output)
    setup_logging(settings, quiet_below_warning=True)
    started = StartedRun(run_id)
    outcome = run_command(_research(settings, None, run_id, started), started)
    _show_outcome(outcome, output=output, as_json=as_json)


async def _research(
    settings: Settings, request: Any, run_id: str | None, started: StartedRun
) -> RunOutcome:
    from bots.console.delivery import ConsoleDelivery
    from bots.console.progress import ConsoleProgress
    from core.config import ConfigError
    from core.operations.job import ResearchJob, RunBusy
    from core.research.requests import RunRejected
    from core.runtime import open_runtime
    from core.values import SourceChoice
    from storage import ClaimLost, StorageUnavailable

    progress = ConsoleProgress(stderr())
    try:
        async with open_runtime(settings) as runtime:
            if request is not None and request.sources is SourceChoice.INTERNAL:
                knowledge = runtime.knowledge
                key = str(request.thread)
                if knowledge is None or not knowledge.allowed(key):
                    raise fail(no_internal_source(key, configured=knowledge is not None))
            if request is not None:
                try:
                    run, _ = await runtime.research.requests.submit(request)
                except RunRejected as exc:
                    raise fail(str(exc)) from None
                run_id = started.run_id = run.id
            elif await runtime.store.runs.get_run(run_id or "") is None:
                started.run_id = None  # nothing to resume
                raise fail(f"there is no run {run_id!r}")
            requests, stopped = runtime.research.requests, run_id or ""
            started.stop = lambda: requests.stop(stopped)
            store = runtime.store
            job = ResearchJob(runtime.research.executor, store.runs, store.claims)
            try:
                delivery = ConsoleDelivery(progress)
                return await job.attend(run_id or "", delivery, again=request is None)
            except RunRejected as exc:
                raise fail(str(exc)) from None
            except (RunBusy, ClaimLost) as exc:
                raise fail(str(exc), EXIT_FAILED) from None
            except StorageUnavailable as exc:
                raise fail(
                    f"{exc}; the run is resumable with `fathom resume`", EXIT_FAILED
                ) from None
            finally:
                progress.close()
    except ConfigError as exc:
        raise fail(str(exc)) from None


def _show_outcome(outcome: RunOutcome, *, output: Path | None, as_json: bool) -> None:
    from rich.markup import escape

    from core.research.outcome import ending_text, stopped_with_nothing
    from core.values import RunStatus

    err = stderr()
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
