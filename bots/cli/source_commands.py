"""``fathom sources [list]`` and ``fathom sources test``: the web provider and the team's MCP
servers."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from bots.cli.apps import sources_app
from bots.cli.common import (
    EXIT_FAILED,
    core_settings,
    fail,
    run_command,
    setup_logging,
    stderr,
)


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

    settings = core_settings()
    setup_logging(settings, quiet_below_warning=True)

    async def rows() -> list[Any]:
        from core.runtime import knowledge_from_settings

        knowledge = knowledge_from_settings(settings)  # malformed: one line, exit 2
        try:
            return await list_sources(settings, knowledge)
        finally:
            if knowledge is not None:
                await knowledge.aclose()

    found = run_command(rows())
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
        stderr().print(
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
    from core.chat.commands import CommandError, validate_topic

    settings = core_settings()
    try:
        clean = validate_topic(query)
        key = channel_key(channel)
    except CommandError as exc:
        raise fail(str(exc)) from None
    setup_logging(settings, quiet_below_warning=True)

    async def probe() -> list[Any]:
        from core.runtime import knowledge_from_settings

        knowledge = knowledge_from_settings(settings)  # malformed: one line, exit 2
        try:
            return await probe_sources(settings, knowledge, clean, key)
        finally:
            if knowledge is not None:
                await knowledge.aclose()

    answers = run_command(probe())
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
            stderr().print(f"no internal source searched: {why}", highlight=False)
    if any(a.error is not None for a in answers):
        raise typer.Exit(EXIT_FAILED)
