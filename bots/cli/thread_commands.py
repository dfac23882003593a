"""``fathom thread show`` and ``fathom thread list``: research threads, their variables and runs."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from bots.cli.apps import thread_app
from bots.cli.common import core_settings, fail, run_command


@thread_app.command("show")
def thread_show(key: Annotated[str, typer.Argument(help="Thread key.")]) -> None:
    """Print a thread's variables and runs as JSON."""
    settings = core_settings()

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

    data = run_command(show())
    if data is None:
        raise fail(f"there is no thread {key!r} (see `fathom thread list`)")
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
    settings = core_settings()

    async def rows() -> list[Any]:
        from core.runtime import open_storage

        async with open_storage(settings) as storage:
            return await storage.store.threads.list_threads(limit)

    threads = run_command(rows())
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
