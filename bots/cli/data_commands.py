"""``fathom feedback list``, ``fathom prune`` and ``fathom forget``: what is kept of research,
and removing it."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bots.cli.apps import app, feedback_app
from bots.cli.common import (
    EXIT_FAILED,
    all_settings,
    core_settings,
    fail,
    run_command,
    stderr,
)

if TYPE_CHECKING:
    from bots.composition import AppSettings
    from bots.document_deletion import Undeleted
    from storage import RunDocument


def _since(text: str | None) -> datetime | None:
    """``--since``: a date (``2026-12-01``, midnight UTC) or an ISO date and time (UTC when
    it names no offset)."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise fail(
            f"--since {text!r} is not a date (e.g. 2026-12-01 or 2026-12-01T09:30)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


async def _delete_documents(
    settings: AppSettings, documents: Sequence[RunDocument]
) -> list[Undeleted]:
    """Delete ``documents`` on their platforms (each opened for it when configured here); the
    ones left there, with why."""
    from bots.composition import open_outbound
    from bots.document_deletion import Undeleted, delete_documents
    from core.runtime import open_storage

    left: list[Undeleted] | None = None
    names = {item.thread.platform for item in documents}
    try:
        async with (
            open_storage(settings.core, upgrade=False) as storage,
            open_outbound(settings, storage, names) as posters,
        ):
            left = await delete_documents(documents, posters)
    except Exception as exc:  # a platform that cannot be opened: each document is said
        if left is None:
            said = f"its platform could not be opened: {' '.join(str(exc).split())[:200]}"
            return [Undeleted(item, said) for item in documents]
    return left or []


def _documents_on_platforms(
    settings: AppSettings, documents: Sequence[RunDocument], *, dry_run: bool
) -> None:
    """What became of the documents the deleted runs' reports were (dry: what would be
    deleted): one line per document not deleted, on stderr, with its address."""
    if not documents:
        return
    if dry_run:
        for thread, document in documents:
            sys.stdout.write(
                f"  would delete {document.kind} {document.id} of {thread}: {document.url}\n"
            )
        return
    left = run_command(_delete_documents(settings, documents))
    sys.stdout.write(
        f"  deleted {len(documents) - len(left)} of {len(documents)} documents on their platforms\n"
    )
    for undeleted in left:
        stderr().print(undeleted.line(), highlight=False, soft_wrap=True)


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

    settings = core_settings()
    after = _since(since)

    async def votes() -> list[Any]:
        async with open_storage(settings) as storage:
            return await storage.store.feedback.feedback_since(after)

    found = run_command(votes())
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
    retention, and the documents their reports became on Slack or Feishu: what housekeeping
    does every hour (docs/operations.md). Queued and running runs, runs whose outcome is not
    yet posted and each digest's newest report are kept. A document that cannot be deleted
    is named with its address."""
    from core.config import parse_duration
    from core.runtime import open_storage

    every = all_settings()
    settings = every.core
    if older_than is None:
        if not settings.run_retention_days:
            raise fail("FATHOM_RUN_RETENTION_DAYS is 0 (research is kept): give --older-than")
        age = timedelta(days=settings.run_retention_days)
    else:
        parsed = parse_duration(older_than)
        if parsed is None or parsed <= timedelta(0):
            raise fail(f"--older-than {older_than!r} is not a duration (e.g. 90d, 12w, 36h)")
        age = parsed
    before = datetime.now(UTC) - age

    async def pruning() -> Any:
        async with open_storage(settings, upgrade=False) as storage:
            return await storage.store.retention.prune(before, dry_run=dry_run)

    pruned = run_command(pruning())
    verb = "would prune" if dry_run else "pruned"
    sys.stdout.write(
        f"{verb} {pruned.describe()} finished or untouched before {before:%Y-%m-%d %H:%M} UTC\n"
    )
    _documents_on_platforms(every, pruned.documents, dry_run=dry_run)


@app.command()
def forget(
    user: Annotated[
        str,
        typer.Option(
            help="The person's requester key <platform>:<workspace>:<user id>, e.g. "
            "slack:T0001:U0002 (as `fathom feedback list` and `fathom thread show` show it)."
        ),
    ],
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Count what would be deleted or rewritten, by table; change nothing."
        ),
    ] = False,
) -> None:
    """Delete what Fathom keeps of one person (a privacy request): their runs and threads
    left empty, what their runs added to threads others share, their votes, guidance,
    digests, attached files and cached searches (docs/operations.md). Their runs still going
    on are cancelled: run it again once they have ended (exit 1). A key that names nobody
    Fathom holds anything of says so (exit 1). The documents their reports became on Slack or
    Feishu are deleted there when that platform is configured; each one that is not is named
    with its address, for an admin to delete by hand."""
    from core.runtime import open_storage
    from storage import NotARequesterKey, Person

    every = all_settings()
    settings = every.core
    try:
        person = Person.parse(user)
    except NotARequesterKey as exc:
        raise fail(str(exc)) from None

    async def forgetting() -> Any:
        async with open_storage(settings, upgrade=False) as storage:
            store = storage.store
            if not dry_run:
                for run_id in await store.forgetting.unfinished_runs(person):
                    await store.runs.request_cancel(run_id)
            return await store.forgetting.forget(person, dry_run=dry_run)

    async def kept() -> list[str]:
        from bots.platforms import PLATFORMS

        named = [entry.load() for entry in PLATFORMS if entry.name == person.platform]
        owners = [cls for cls in named if cls.metadata]
        if not owners:
            return []
        async with open_storage(settings, upgrade=False) as storage:
            said = [await cls.kept_of(storage.database.engine, person.user_id) for cls in owners]
        return [line for line in said if line]

    done = run_command(forgetting())
    said = run_command(kept())
    if done.nothing and not said:
        stderr().print(
            f"nothing names {person.key}: no run, vote, guidance, digest, file or cached search "
            "of theirs (check the key against `fathom feedback list` or `fathom thread show`)",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILED)
    sys.stdout.write(
        f"{'would forget' if dry_run else 'forgot'} {person.key}: {done.runs} runs, "
        f"{done.threads} threads, {done.votes} votes, {done.guidance} guidance replies, "
        f"{done.digests} digests, {done.files} files, {done.topics} topics in shared threads, "
        f"{done.citations} citations, {done.cached} cached searches and pages\n"
    )
    for table, rows in done.rows.items():
        verb = "would be deleted or rewritten" if dry_run else "deleted or rewritten"
        sys.stdout.write(f"  {table}: {rows} rows {verb}\n")
    _documents_on_platforms(every, done.documents, dry_run=dry_run)
    for line in said:
        stderr().print(line, highlight=False, soft_wrap=True)
    if done.wal_truncated is False:
        stderr().print(
            "the SQLite WAL is still in use by another process: what was deleted leaves its "
            "-wal file at the next checkpoint",
            highlight=False,
            soft_wrap=True,
        )
    if done.busy:
        stderr().print(
            f"{len(done.busy)} runs are still going on or posting ({', '.join(done.busy)}); "
            + (
                "run `fathom forget` without --dry-run to cancel those of this person"
                if dry_run
                else "those of this person were asked to cancel: run `fathom forget` again "
                "once they have ended"
            ),
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILED)
