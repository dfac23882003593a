"""Retention (``storage.retention``, ``FATHOM_RUN_RETENTION_DAYS``, ``fathom prune``) on real
SQLite and PostgreSQL databases: what is pruned, and what a running, recent, undelivered run
or a digest's newest firing keeps."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, insert, select, text, update

from bots.chat.platform import Chore, PlatformServices
from bots.housekeeping import housekeep_once
from bots.slack.platform import SlackPlatform
from bots.slack.tables import slack_oauth_states
from core.settings import Settings
from storage import Database, Pruned, RetentionStore, RunRecord, SourceRecord, Store
from storage.retention import delete_runs, delete_threads, pick_runs, pick_threads
from storage.tables import (
    McpProgress,
    ResearchRun,
    RunFeedback,
    RunSource,
    Thread,
    ThreadVariables,
    utcnow,
)
from tests.runs import claim, new_run

DAY = timedelta(days=1)


async def finished(
    store: Store,
    thread: str,
    *,
    days_ago: float,
    status: str = "succeeded",
    delivery: str | None = "posted",
    **overrides: Any,
) -> RunRecord:
    """A run in ``thread`` that finished ``days_ago`` (its thread and their variables last
    touched then too), with two sources and a vote when it succeeded."""
    run, _ = await new_run(store, thread_key=thread, **overrides)
    held = await claim(store, run.id)
    await store.claims.checkpoint(
        held,
        variables={"topics": [run.topic], "findings": [], "shouldContinue": False},
        variables_version=held.variables_version,
        rounds_done=1,
        usage={},
        notes=[],
    )
    sources = [SourceRecord(1, "a", "https://a.example/"), SourceRecord(2, "b", "https://b/")]
    await store.claims.finish_run(
        held,
        status=status,
        report_markdown="# r [1][2]" if status == "succeeded" else None,
        sources=sources if status == "succeeded" else [],
        error=None,
        usage={},
        notes=[],
    )
    if status == "succeeded":
        await store.feedback.record_feedback(run.id, "slack:T0001:U9", "up")
    await age(store, run.id, days_ago, delivery=delivery)
    return run


async def age(store: Store, run_id: str, days_ago: float, *, delivery: str | None) -> None:
    """Move the run, its thread and the thread's variables ``days_ago`` into the past."""
    then = utcnow() - days_ago * DAY
    database = store._db

    async with database.sessionmaker.begin() as session:
        run = (
            await session.execute(select(ResearchRun).where(ResearchRun.id == run_id))
        ).scalar_one()
        await session.execute(
            update(ResearchRun)
            .where(ResearchRun.id == run_id)
            .values(
                created_at=then,
                finished_at=then if run.finished_at is not None else None,
                delivery=delivery if run.finished_at is not None else run.delivery,
            )
        )
        await session.execute(
            update(Thread).where(Thread.id == run.thread_id).values(updated_at=then)
        )
        await session.execute(
            update(ThreadVariables)
            .where(ThreadVariables.thread_id == run.thread_id)
            .values(updated_at=then)
        )


async def count(database: Database, table: type[Any], **where: Any) -> int:
    async with database.sessionmaker() as session:
        stmt = select(func.count()).select_from(table)
        for column, value in where.items():
            stmt = stmt.where(getattr(table, column) == value)
        return int((await session.execute(stmt)).scalar_one())


async def test_prune_deletes_old_finished_research_and_keeps_what_is_going_on_or_recent(
    store: Store, database: Database
) -> None:
    old_ok = await finished(store, "slack:T0001:C1:1.1", days_ago=200)
    old_failed = await finished(store, "slack:T0001:C1:1.2", days_ago=200, status="failed")
    old_console = await finished(store, "cli:local:local:1", days_ago=200, delivery=None)
    recent = await finished(store, "slack:T0001:C1:1.3", days_ago=10)
    undelivered = await finished(store, "slack:T0001:C1:1.4", days_ago=200, delivery="pending")
    # A follow-up: an old run in a thread whose newer run is recent; the thread stays.
    followed = await finished(store, "slack:T0001:C1:1.5", days_ago=200)
    followup = await finished(store, "slack:T0001:C1:1.5", days_ago=1)
    queued, _ = await new_run(store, thread_key="slack:T0001:C1:1.6")
    await age(store, queued.id, 300, delivery=None)
    running, _ = await new_run(store, thread_key="slack:T0001:C1:1.7")
    await claim(store, running.id)
    await age(store, running.id, 300, delivery=None)

    retention = RetentionStore(database, batch=2)  # several batches
    before = utcnow() - 180 * DAY
    dry = await retention.prune(before, dry_run=True)
    assert dry == Pruned(runs=4, sources=6, votes=3, threads=3)
    assert await count(database, ResearchRun) == 9  # a dry run deletes nothing
    assert await count(database, ThreadVariables) == 6
    assert await retention.prune(before) == dry
    for gone in (old_ok, old_failed, old_console, followed):
        assert await store.runs.get_run(gone.id) is None
    for kept in (recent, undelivered, followup, queued, running):
        assert await store.runs.get_run(kept.id) is not None, kept
    assert await count(database, RunSource, run_id=old_ok.id) == 0
    assert await count(database, RunFeedback, run_id=old_ok.id) == 0
    assert await count(database, RunSource, run_id=recent.id) == 2
    assert await store.threads.get_thread("slack:T0001:C1:1.1") is None
    assert await store.threads.get_thread("cli:local:local:1") is None
    assert await store.threads.get_thread("slack:T0001:C1:1.5") is not None
    assert await store.threads.get_thread("slack:T0001:C1:1.6") is not None
    # Variables go with their thread; the threads left keep theirs.
    assert await count(database, Thread) == 5
    assert await count(database, ThreadVariables) == 3
    assert await retention.prune(before) == Pruned()  # nothing left to prune


async def test_prune_keeps_each_digests_newest_firing_for_its_whats_new(
    store: Store, database: Database
) -> None:
    digest = await store.digests.add(
        platform="slack",
        workspace="T0001",
        channel="C2",
        topic="heat pumps",
        depth=2,
        strategy="iterative",
        cron="0 9 * * 1",
        timezone="UTC",
        created_by="slack:T0001:U1",
        platform_context=None,
        max_per_channel=5,
    )
    firings = [
        await finished(store, f"slack:T0001:C2:{i}.0", days_ago=days, digest_id=digest.id)
        for i, days in enumerate((400, 300, 250))
    ]
    failed_later = await finished(
        store, "slack:T0001:C2:9.0", days_ago=200, status="failed", digest_id=digest.id
    )
    removed_digest = await finished(store, "slack:T0001:C3:1.0", days_ago=300, digest_id="gone")
    pruned = await RetentionStore(database).prune(utcnow() - 180 * DAY)
    assert pruned.runs == 4
    assert await store.runs.get_run(firings[2].id) is not None  # the newest successful firing
    for gone in (*firings[:2], failed_later, removed_digest):
        assert await store.runs.get_run(gone.id) is None
    previous, seen = await store.digests.history(digest.id, utcnow())
    assert previous is not None and previous.id == firings[2].id
    assert seen == {"https://a.example/", "https://b/"}


async def test_a_request_after_a_thread_was_picked_for_pruning_keeps_the_thread_and_run(
    store: Store, database: Database
) -> None:
    """Pruning picks, then deletes: a follow-up in between (a new run in the picked thread)
    is not deleted with it, and a run requeued after its pick stays."""
    old = await finished(store, "slack:T0001:C1:2.1", days_ago=200)
    before = utcnow() - 180 * DAY
    runs = await database.run(lambda conn: pick_runs(conn, before, 10))
    assert runs == [old.id]
    async with database.sessionmaker.begin() as session:  # requeued meanwhile
        await session.execute(
            update(ResearchRun).where(ResearchRun.id == old.id).values(status="queued")
        )
    assert await database.run(lambda conn: delete_runs(conn, runs, before)) == 0
    assert await store.runs.get_run(old.id) is not None
    async with database.sessionmaker.begin() as session:
        await session.execute(text("DELETE FROM research_runs WHERE id = :id"), {"id": old.id})
    threads = await database.run(lambda conn: pick_threads(conn, before, 10))
    assert len(threads) == 1
    followup, _ = await new_run(store, thread_key="slack:T0001:C1:2.1")
    assert await database.run(lambda conn: delete_threads(conn, threads, before)) == 0
    assert await store.runs.get_run(followup.id) is not None


async def test_housekeeping_prunes_on_the_one_replica_holding_its_lease(
    store: Store, database: Database, monkeypatch: Any
) -> None:
    monkeypatch.setenv("FATHOM_RUN_RETENTION_DAYS", "90")
    settings = Settings()
    old = await finished(store, "slack:T0001:C4:1.0", days_ago=120)
    kept = await finished(store, "slack:T0001:C4:2.0", days_ago=60)
    assert await housekeep_once(store, settings, owner="replica-a")
    assert not await housekeep_once(store, settings, owner="replica-b")  # a holds the lease
    assert await store.runs.get_run(old.id) is None
    assert await store.runs.get_run(kept.id) is not None
    monkeypatch.setenv("FATHOM_RUN_RETENTION_DAYS", "0")  # kept for ever
    older = await finished(store, "slack:T0001:C4:3.0", days_ago=5000)
    assert await housekeep_once(store, Settings(), owner="replica-a")
    assert await store.runs.get_run(older.id) is not None


async def test_housekeeping_runs_each_platform_s_chores_past_a_failing_one(
    store: Store, database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """A platform's own state is pruned in the same round (``ChatPlatform.housekeeping``):
    Slack's is its SDK's OAuth states past their expiry. A chore that fails is logged, and
    the round goes on."""
    expired, live = datetime(2020, 1, 1), datetime(2999, 1, 1)  # the SDK stores naive UTC
    await database.run(
        lambda conn: conn.execute(
            insert(slack_oauth_states),
            [{"state": "old", "expire_at": expired}, {"state": "live", "expire_at": live}],
        )
    )
    services = PlatformServices(engine=database.engine, store=store, **dict.fromkeys(UNUSED))  # type: ignore[arg-type]
    slack = SlackPlatform(None, services)  # type: ignore[arg-type]

    async def broken() -> int:
        raise RuntimeError("the table is locked")

    chores = (Chore("a broken table", broken), *slack.housekeeping())
    with caplog.at_level(logging.INFO, logger="bots.housekeeping"):
        assert await housekeep_once(store, Settings(), owner="replica-a", chores=chores)
    left = await database.run(lambda conn: conn.execute(select(slack_oauth_states.c.state)).all())
    assert [row[0] for row in left] == ["live"]
    assert "pruning a broken table failed" in caplog.text
    assert "pruned 1 expired Slack OAuth states" in caplog.text


#: What a platform's chores do not use of its services.
UNUSED = ("requests", "digests", "policy", "limits")


async def test_prune_deletes_an_mcp_runs_progress_rows_with_the_run(
    store: Store, database: Database
) -> None:
    """``mcp_progress`` rows go with their run (its foreign key cascades, on SQLite too:
    ``PRAGMA foreign_keys=ON``); a run kept keeps its rows."""
    old = await finished(store, "mcp:local:mcp:0a", days_ago=200)
    recent = await finished(store, "mcp:local:mcp:0b", days_ago=10)
    for run in (old, recent):
        await store.progress.append(run.id, "1/3th search executed.")
        await store.progress.append(run.id, "Research done.")
    assert (await RetentionStore(database).prune(utcnow() - 180 * DAY)).runs == 1
    assert await count(database, McpProgress, run_id=old.id) == 0
    assert [r.seq for r in await store.progress.since(recent.id)] == [1, 2]
