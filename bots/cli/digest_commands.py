"""``fathom digest add|list|remove|run``: scheduled digests."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from bots.cli.apps import digest_app
from bots.cli.common import (
    all_settings,
    core_settings,
    fail,
    no_internal_source,
    run_command,
    stderr,
)


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
    from core.chat.commands import (
        CommandError,
        validate_depth,
        validate_sources,
        validate_strategy,
        validate_topic,
    )
    from core.chat.grammar import ScheduleCommand
    from core.chat.schedule import CLI_SYNTAX, timezone, trigger
    from core.operations.digests import check_digest_platform
    from core.runtime import digest_service, knowledge_from_settings, open_storage
    from core.values import SourceChoice, ThreadKey

    app_settings = all_settings()
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
        raise fail(str(exc)) from None
    key = ThreadKey(platform=parts[0], workspace=parts[1], channel=parts[2], thread="cli")

    async def add() -> Any:
        if command.sources is SourceChoice.INTERNAL:  # by configuration: nothing connects
            knowledge = knowledge_from_settings(settings)
            try:
                if knowledge is None or not knowledge.allowed(channel):
                    raise fail(no_internal_source(channel, configured=knowledge is not None))
            finally:
                if knowledge is not None:
                    await knowledge.aclose()
        async with open_storage(settings) as storage:
            return await digest_service(settings, storage).add(
                command, thread=key, created_by=by, syntax=CLI_SYNTAX
            )

    try:
        digest = run_command(add())
    except CommandError as exc:
        raise fail(str(exc)) from None
    sys.stdout.write(digest.id + "\n")


@digest_app.command("list")
def digest_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every schedule: id, channel, topic, cron (in words), next run in its timezone."""
    from core.runtime import digest_service, open_storage

    settings = core_settings()

    async def views() -> list[Any]:
        async with open_storage(settings) as storage:
            service = digest_service(settings, storage)
            return await service.views(await service.digests.all(), "en")

    found = run_command(views())
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
    from core.chat.commands import CommandError
    from core.chat.schedule import CLI_SYNTAX
    from core.runtime import digest_service, open_storage

    settings = core_settings()

    async def remove() -> None:
        async with open_storage(settings) as storage:
            await digest_service(settings, storage).remove(
                digest_id, by="", is_admin=True, channel=None, syntax=CLI_SYNTAX
            )

    try:
        run_command(remove())
    except CommandError as exc:
        raise fail(str(exc)) from None
    stderr().print(f"removed {digest_id}", highlight=False)


@digest_app.command("run")
def digest_run(digest_id: Annotated[str, typer.Argument()]) -> None:
    """Fire a schedule now: queue its run (a running `fathom serve` posts it); prints the run id."""
    from core.runtime import digest_service, open_storage
    from storage.tables import utcnow

    settings = core_settings()

    async def fire() -> Any:
        async with open_storage(settings) as storage:
            service = digest_service(settings, storage)
            digest = await service.digests.get(digest_id)
            if digest is None:
                return None
            run, _ = await service.fire(digest, utcnow().replace(second=0, microsecond=0))
            return run

    run = run_command(fire())
    if run is None:
        raise fail(f"there is no schedule {digest_id!r} (see `fathom digest list`)")
    sys.stdout.write(run.id + "\n")
