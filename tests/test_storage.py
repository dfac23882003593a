"""Storage layer against real SQLite and PostgreSQL databases (see conftest.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text, update

from core.values import RunStatus, ThreadKey
from storage import (
    CacheStore,
    CancelRequest,
    Checkpointed,
    ClaimLost,
    ClaimStore,
    ContextStore,
    Database,
    DigestStore,
    EventStore,
    FeedbackStore,
    FileStore,
    ForgetStore,
    GuidanceTaken,
    LeaseStore,
    ProgressStore,
    Renewal,
    RetentionStore,
    RunStore,
    SourceRecord,
    StopRequest,
    Store,
    ThreadBusy,
    ThreadStore,
    UserBusy,
    VariablesConflict,
    outcome_is_delivered,
)
from storage.db import normalize_url
from storage.tables import SearchCacheEntry
from tests.runs import KEY, age_heartbeat, claim, finish, new_run

REPO = Path(__file__).resolve().parents[1]
postgresql_only = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


async def cancel_flag(store: Store, run_id: str) -> bool:
    run = await store.runs.get_run(run_id)
    return run is not None and run.cancel_requested


def assert_aware_utc(*values: datetime | None) -> None:
    for value in values:
        assert value is not None
        assert value.utcoffset() == timedelta(0), value


# -- schema (the migrations themselves: test_migrations.py) -------------------------


def test_urls_are_normalised_to_async_drivers() -> None:
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgresql://u@h:5432/db") == "postgresql+psycopg://u@h:5432/db"
    assert normalize_url("sqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert normalize_url("sqlite+aiosqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert Database("sqlite:///:memory:").dialect == "sqlite"
    assert Database("postgres://u@127.0.0.1/db").dialect == "postgresql"


async def test_sqlite_connections_use_wal_and_pragmas(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'f.db'}", busy_timeout_ms=1234)
    try:
        async with db.engine.connect() as conn:
            pragmas = {
                name: (await conn.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
            }
        assert pragmas == {
            "journal_mode": "wal",
            "busy_timeout": 1234,
            "foreign_keys": 1,
            "synchronous": 1,  # NORMAL
        }
    finally:
        await db.dispose()


# -- runs and threads -----------------------------------------------------------------


async def test_create_run_round_trip(store: Store) -> None:
    run, created = await new_run(store)
    assert created
    assert len(run.id) == 32
    assert (run.status, run.thread_key, run.topic, run.depth) == (
        "queued",
        KEY,
        "solid-state batteries",
        3,
    )
    assert (run.rounds_done, run.llm_calls, run.searches, run.notes) == (0, 0, 0, [])
    assert (run.owner, run.attempt, run.delivery, run.report_parts_posted) == (None, 0, None, 0)
    assert not run.cancel_requested
    assert run.started_at is None and run.seconds is None
    assert_aware_utc(run.created_at)
    assert await store.runs.get_run(run.id) == run
    assert await store.runs.get_run("0" * 32) is None

    thread = await store.threads.get_thread(KEY)
    assert thread is not None and thread.id == run.thread_id
    assert (thread.platform, thread.workspace, thread.channel, thread.thread_ref) == (
        "slack",
        "T0001",
        "C0001",
        "1700000000.000100",
    )
    assert_aware_utc(thread.created_at, thread.updated_at)
    assert await store.threads.get_thread("slack:T0001:C0001:nope") is None

    await finish(store, await claim(store, run.id))
    second, _ = await new_run(store, topic="follow-up")
    assert second.thread_id == run.thread_id
    assert [r.topic for r in await store.runs.thread_runs(run.thread_id)] == [
        run.topic,
        "follow-up",
    ]
    latest = await store.runs.latest_run_in_thread(KEY)
    assert latest is not None and latest.id == second.id


async def test_dedupe_key_yields_one_run(store: Store) -> None:
    first, created = await new_run(store, dedupe_key="slack:Ev1")
    again, created_again = await new_run(store, dedupe_key="slack:Ev1", topic="other")
    assert created and not created_again
    assert again == first


async def test_concurrent_creates_with_one_dedupe_key_race_safely(store: Store) -> None:
    results = await asyncio.gather(
        *(new_run(store, dedupe_key="slack:Ev2", thread_key=f"{KEY}-race") for _ in range(5))
    )
    assert sum(created for _, created in results) == 1
    assert len({run.id for run, _ in results}) == 1
    thread = await store.threads.get_thread(f"{KEY}-race")
    assert thread is not None
    assert len(await store.runs.thread_runs(thread.id)) == 1


async def test_racing_requests_in_one_thread_get_one_run_and_the_rest_are_refused(
    store: Store, database_url: str
) -> None:
    """One active run per thread is the database's rule (a partial unique index): requests
    racing through two processes' stores never both get a run."""
    other_db = Database(database_url)
    try:
        stores = [store, Store(other_db)]
        results = await asyncio.gather(
            *(
                new_run(stores[i % 2], thread_key="cli:local:local:x", dedupe_key=f"req-{i}")
                for i in range(6)
            ),
            return_exceptions=True,
        )
    finally:
        await other_db.dispose()
    created = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if isinstance(r, ThreadBusy)]
    assert len(created) == 1 and len(refused) == 5, results
    (winner, _), *_ = created
    assert all(busy.active is not None and busy.active.id == winner.id for busy in refused)
    thread = await store.threads.get_thread("cli:local:local:x")
    assert thread is not None and [r.id for r in await store.runs.thread_runs(thread.id)] == [
        winner.id
    ]

    # Finished, the thread takes the next run; a queued run keeps it busy just the same.
    await finish(store, await claim(store, winner.id))
    follow_up, created_now = await new_run(store, thread_key="cli:local:local:x", topic="next")
    assert created_now
    with pytest.raises(ThreadBusy):
        await new_run(store, thread_key="cli:local:local:x", topic="one more")
    assert follow_up.status == "queued"


async def test_claim_marks_running_and_is_exclusive(store: Store) -> None:
    run, _ = await new_run(store)
    results = await asyncio.gather(
        *(
            store.claims.claim_run(run.id, f"runner-{i}", stale_after=60, max_attempts=3)
            for i in range(4)
        )
    )
    claims = [r.claim for r in results if r.claim is not None]
    assert len(claims) == 1
    held = claims[0]
    assert (held.run.status, held.fence, held.run.attempt) == ("running", 1, 1)
    assert held.run.owner == held.owner
    assert_aware_utc(held.run.started_at, held.run.heartbeat_at)
    assert held.variables is None and held.variables_version == 0
    # The losers learn the run's state, without a claim.
    assert all(r.run is not None and r.run.owner == held.owner for r in results)
    assert (await store.claims.claim_run("f" * 32, "x", stale_after=60, max_attempts=3)).run is None


async def test_checkpoint_is_durable_and_read_by_a_fresh_store(
    store: Store, database_url: str
) -> None:
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    assert await store.threads.load_variables(run.thread_id) is None
    finding = {"topic": "a", "results": [{"title": "T", "url": "https://x.test", "snippet": ""}]}
    first = await store.claims.checkpoint(
        held,
        variables={"topics": ["a"], "nextSearchTopic": "b", "findings": [], "shouldContinue": True},
        variables_version=0,
        rounds_done=1,
        usage={"llm_calls": 1, "prompt_tokens": 10, "completion_tokens": 5, "searches": 1},
        notes=[],
    )
    assert first == Checkpointed(cancel_requested=False, variables_version=1)
    node = {"name": "b", "question": "b", "after": [], "status": "answered", "answer": "B [1]"}
    variables = {
        "topics": ["a", "b"],
        "nextSearchTopic": None,
        "findings": [finding],
        "shouldContinue": False,
        "strategyState": {"graph": {"nodes": [node]}},
        "files": [{"id": "F1", "name": "paper.pdf", "text": "its text"}],
        "guidance": [],
    }
    usage = {"llm_calls": 2, "prompt_tokens": 30, "completion_tokens": 9, "searches": 2}
    second = await store.claims.checkpoint(
        held,
        variables=variables,
        variables_version=1,
        rounds_done=2,
        usage=usage,
        notes=["search b failed"],
    )
    assert second.variables_version == 2
    # A checkpoint without "files" leaves the stored files as they are (their text is not
    # written again at every step).
    unchanged = {k: v for k, v in variables.items() if k != "files"}
    third = await store.claims.checkpoint(
        held, variables=unchanged, variables_version=2, rounds_done=2, usage=usage,
        notes=["search b failed"],
    )  # fmt: skip
    assert third.variables_version == 3

    fresh_db = Database(database_url)
    try:
        fresh = Store(fresh_db)
        assert await fresh.threads.load_variables(run.thread_id) == variables
        reread = await fresh.runs.get_run(run.id)
        assert reread is not None
        assert reread.rounds_done == 2
        assert reread.notes == ["search b failed"]
        assert (reread.llm_calls, reread.prompt_tokens, reread.completion_tokens) == (2, 30, 9)
        assert reread.searches == 2
        assert_aware_utc(reread.heartbeat_at)
        async with fresh_db.engine.connect() as conn:
            version = await conn.scalar(text("SELECT version FROM thread_variables"))
        assert version == 3
    finally:
        await fresh_db.dispose()

    with pytest.raises(ValueError, match="unknown usage"):
        await store.claims.checkpoint(
            held, variables=variables, variables_version=3, rounds_done=0, usage={"x": 1}, notes=[]
        )
    assert (await store.runs.get_run(run.id)) == reread  # the rejected write changed nothing


async def test_checkpoint_compares_and_swaps_the_variables_version(store: Store) -> None:
    """A checkpoint based on an outdated version writes nothing and returns what is stored."""
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    mine = {
        "topics": ["a"],
        "nextSearchTopic": None,
        "findings": [],
        "shouldContinue": True,
        "strategyState": {},
        "files": [],
        "guidance": [],
    }
    await store.claims.checkpoint(
        held, variables=mine, variables_version=0, rounds_done=1, usage={}, notes=[]
    )
    theirs = {**mine, "topics": ["a", "b"]}
    await store.claims.checkpoint(
        held, variables=theirs, variables_version=1, rounds_done=1, usage={}, notes=[]
    )
    stale = {**mine, "topics": ["a", "c"]}
    with pytest.raises(VariablesConflict) as conflict:
        await store.claims.checkpoint(
            held, variables=stale, variables_version=1, rounds_done=2, usage={}, notes=["x"]
        )
    assert (conflict.value.version, conflict.value.variables) == (2, theirs)
    assert await store.threads.load_variables(run.thread_id) == theirs
    after = await store.runs.get_run(run.id)
    assert after is not None and (after.rounds_done, after.notes) == (1, [])  # rolled back too
    # A first write that races another first write conflicts the same way.
    with pytest.raises(VariablesConflict):
        await store.claims.checkpoint(
            held, variables=stale, variables_version=0, rounds_done=2, usage={}, notes=[]
        )


async def test_finish_run_stores_report_and_sources_and_ends_the_claim(store: Store) -> None:
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    usage = {"llm_calls": 4, "prompt_tokens": 100, "completion_tokens": 50, "searches": 3}
    sources = [
        SourceRecord(1, "One", "https://one.test", published="2026-11-30"),
        SourceRecord(2, "report.pdf (attached by U1)", "", kind="attachment"),
    ]
    done = await store.claims.finish_run(
        held,
        status="succeeded",
        report_markdown="# Report\n\nClaim [1].",
        sources=sources,
        error=None,
        usage=usage,
        notes=["degraded"],
    )
    assert done.status == "succeeded" and done.report_markdown == "# Report\n\nClaim [1]."
    assert (done.llm_calls, done.searches, done.notes) == (4, 3, ["degraded"])
    assert done.delivery == "pending"  # the next step: post it in the thread
    assert_aware_utc(done.finished_at)
    assert done.seconds is not None and done.seconds >= 0
    assert await store.runs.run_sources(run.id) == sources

    with pytest.raises(ClaimLost):  # finished: no second outcome, whoever holds it
        await finish(store, held, status="failed")
    assert [s.title for s in await store.runs.run_sources(run.id)] == ["One", sources[1].title]
    with pytest.raises(ValueError):
        await finish(store, held, status="running")

    console, _ = await new_run(store, thread_key="cli:local:local:c")
    quiet = await store.claims.finish_run(
        await claim(store, console.id),
        status="succeeded",
        report_markdown="# r",
        sources=[],
        error=None,
        usage={},
        notes=[],
        deliver=False,
    )
    assert quiet.delivery is None  # the console prints its own report


async def test_claim_loads_the_threads_variables(store: Store) -> None:
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    state = {
        "topics": ["a"],
        "nextSearchTopic": "b",
        "findings": [],
        "shouldContinue": True,
        "strategyState": {},
        "files": [],
        "guidance": [],
    }
    await store.claims.checkpoint(
        held, variables=state, variables_version=0, rounds_done=1, usage={}, notes=[]
    )
    await finish(store, held)
    follow_up, _ = await new_run(store, topic="follow-up")
    next_claim = await claim(store, follow_up.id)
    assert next_claim.variables == state == await store.threads.load_variables(run.thread_id)
    assert next_claim.variables_version == 1


async def test_checkpoint_returns_the_cancel_flag(store: Store) -> None:
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    state = {"topics": [], "nextSearchTopic": None, "findings": [], "shouldContinue": True}
    first = await store.claims.checkpoint(
        held, variables=state, variables_version=0, rounds_done=0, usage={}, notes=[]
    )
    assert first.cancel_requested is False
    assert await store.runs.request_cancel(run.id) is CancelRequest.CANCELLING
    second = await store.claims.checkpoint(
        held, variables=state, variables_version=1, rounds_done=0, usage={}, notes=[]
    )
    assert second.cancel_requested is True


async def test_latest_run_in_thread_by_key(store: Store) -> None:
    assert await store.runs.latest_run_in_thread(KEY) is None
    first, _ = await new_run(store)
    await finish(store, await claim(store, first.id))
    second, _ = await new_run(store, topic="follow-up")
    await new_run(store, thread_key=f"{KEY}-other")
    latest = await store.runs.latest_run_in_thread(KEY)
    assert latest is not None and latest.id == second.id and latest.thread_id == first.thread_id


async def test_a_failing_transaction_changes_nothing(store: Store, database: Database) -> None:
    run, _ = await new_run(store)

    def work(conn: Any) -> None:
        conn.execute(
            text("UPDATE research_runs SET topic = 'changed' WHERE id = :id"), {"id": run.id}
        )
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await database.run(work)
    assert await store.runs.get_run(run.id) == run


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_sqlite_writers_of_one_process_never_meet_the_busy_handler(
    database_url: str, database: Database
) -> None:
    # With a zero busy timeout, any two writers overlapping would fail with "database is
    # locked"; the store's transactions of one process must run one at a time.
    db = Database(database_url, busy_timeout_ms=0)
    try:
        store = Store(db)
        runs = [(await new_run(store, thread_key=f"{KEY}-{i}"))[0] for i in range(20)]
        claims = [await claim(store, run.id) for run in runs]
        state = {"topics": ["a"], "nextSearchTopic": "b", "findings": [], "shouldContinue": True}
        active, overlap = 0, 0

        def probe(conn: Any) -> None:
            nonlocal active, overlap
            active += 1
            overlap = max(overlap, active)
            conn.execute(text("SELECT 1"))
            active -= 1

        # Each run's checkpoints expect versions 0, 1, 2: they only all succeed in order.
        await asyncio.gather(
            *(
                store.claims.checkpoint(
                    held, variables=state, variables_version=i, rounds_done=i, usage={}, notes=[]
                )
                for held in claims
                for i in range(3)
            ),
            *(db.run(probe) for _ in range(20)),
        )
        assert overlap == 1
        stored = [await store.runs.get_run(run.id) for run in runs]
        assert {run.rounds_done for run in stored if run is not None} == {2}  # in order
    finally:
        await db.dispose()


async def test_cancel_flags(store: Store) -> None:
    """What a cancel did, decided by the database: a queued run ends cancelled, a running
    one is flagged once (a second request is told it already is), a run whose report is
    being posted is too late, and a finished or unknown one has ended."""
    queued, _ = await new_run(store)
    assert await store.runs.request_cancel(queued.id) is CancelRequest.CANCELLED
    assert await store.runs.request_cancel(queued.id) is CancelRequest.ALREADY  # asked before
    running, _ = await new_run(store, topic="running", thread_key=f"{KEY}-1")
    held = await claim(store, running.id)
    assert not await cancel_flag(store, running.id)
    assert await store.runs.request_cancel(running.id) is CancelRequest.CANCELLING
    assert await cancel_flag(store, running.id)
    assert await store.runs.request_cancel(running.id) is CancelRequest.ALREADY
    assert await store.runs.request_cancel("f" * 32) is CancelRequest.ENDED
    # Cancelled while its report was written: recorded cancelled, without the report.
    ended = await finish(store, held)
    assert (ended.status, ended.report_markdown) == ("cancelled", None)

    other, _ = await new_run(store, topic="done already", thread_key=f"{KEY}-2")
    posting = await finish(store, await claim(store, other.id))
    assert posting.status == "succeeded" and posting.report_markdown == "# r"
    assert await store.runs.request_cancel(other.id) is CancelRequest.POSTING
    assert not await cancel_flag(store, other.id)


async def test_a_stop_of_a_run_handed_back_after_it_started_stops_it_not_cancels_it(
    store: Store,
) -> None:
    """A worker shutting down hands a running run back to the queue; "Stop and write now"
    pressed before another runner takes it is kept for that runner (which writes the report
    from what was found), not turned into a cancel as for a run that never started."""
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    assert await store.claims.release_run(held)
    handed_back = await store.runs.get_run(run.id)
    assert handed_back is not None and handed_back.status == "queued"
    assert await store.runs.request_stop(run.id) is StopRequest.STOPPING
    assert await store.runs.request_stop(run.id) is StopRequest.ENDED  # a repeated press
    again = await claim(store, run.id, owner="another-runner")
    assert again.run.stop_requested and not again.run.cancel_requested
    fresh, _ = await new_run(store, thread_key=f"{KEY}-fresh")
    assert await store.runs.request_stop(fresh.id) is StopRequest.CANCELLED


async def test_of_two_cancels_racing_one_is_told_it_is_already_cancelling(store: Store) -> None:
    """Two replicas pressing Cancel at once: the database orders them (on PostgreSQL, the
    second waits for the first's row lock and then finds the flag set)."""
    run, _ = await new_run(store)
    await claim(store, run.id)
    answers = await asyncio.gather(*(store.runs.request_cancel(run.id) for _ in range(2)))
    assert sorted(answers) == sorted([CancelRequest.CANCELLING, CancelRequest.ALREADY])


async def test_of_two_cancels_of_a_queued_run_one_cancels_it_and_one_is_told_already(
    store: Store,
) -> None:
    """The same race on a run nobody has started: one request ends it, the other is told it
    was already asked (not "it has already finished")."""
    run, _ = await new_run(store)
    answers = await asyncio.gather(*(store.runs.request_cancel(run.id) for _ in range(2)))
    assert sorted(answers) == sorted([CancelRequest.CANCELLED, CancelRequest.ALREADY])
    ended = await store.runs.get_run(run.id)
    assert ended is not None and (ended.status, ended.cancel_requested) == ("cancelled", True)


@postgresql_only
@pytest.mark.parametrize("request_kind", ["cancel", "stop"])
async def test_a_run_handed_back_or_claimed_while_a_cancel_or_stop_decides_keeps_the_request(
    database: Database, database_url: str, request_kind: str
) -> None:
    """A runner hands a running run back (a worker shutting down: running -> queued), and
    another claims a queued one (queued -> running), between the statements of a cancel or a
    stop on another replica. Under READ COMMITTED each statement sees the latest commit, so
    a request that looked at the status in one statement and changed it in another was
    lost ("it has already finished") with the run going on. The request is decided under the
    run's row lock: the transition, tried without waiting right after the request's first
    statement, cannot happen then, and the request is kept either way."""
    import psycopg

    from core.operations.queue import conninfo

    store = Store(database)
    handed_back, _ = await new_run(store, thread_key=f"{KEY}-back")
    await claim(store, handed_back.id)
    claimed, _ = await new_run(store, thread_key=f"{KEY}-claimed")
    moves = {handed_back.id: "queued", claimed.id: "running"}
    moved: dict[str, bool] = {}
    target: list[str] = []

    def move_now(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not target or target[0] in moved:
            return
        run_id = target[0]
        with psycopg.connect(conninfo(database_url), autocommit=True) as other:
            try:
                with other.transaction():
                    other.execute(
                        "SELECT 1 FROM research_runs WHERE id = %s FOR UPDATE NOWAIT", [run_id]
                    )
                    other.execute(
                        "UPDATE research_runs SET status = %s WHERE id = %s",
                        [moves[run_id], run_id],
                    )
                moved[run_id] = True
            except psycopg.errors.LockNotAvailable:
                moved[run_id] = False

    event.listen(database.engine.sync_engine, "after_cursor_execute", move_now)
    try:
        for run_id in (handed_back.id, claimed.id):
            target[:] = [run_id]
            if request_kind == "cancel":
                answer: str = await store.runs.request_cancel(run_id)
            else:
                answer = await store.runs.request_stop(run_id)
            if not moved[run_id]:  # locked out: the runner moves it after the request
                await database.run(
                    lambda conn, run_id=run_id: conn.execute(
                        text(
                            "UPDATE research_runs SET status = :s "
                            "WHERE id = :id AND status IN ('queued', 'running')"
                        ),
                        {"s": moves[run_id], "id": run_id},
                    )
                )
            run = await store.runs.get_run(run_id)
            assert run is not None
            kept = run.cancel_requested or run.stop_requested or run.status == "cancelled"
            assert answer != "ended" and kept, (run_id, answer, run.status)
    finally:
        event.remove(database.engine.sync_engine, "after_cursor_execute", move_now)
    assert moved == {handed_back.id: False, claimed.id: False}


async def test_user_listings(store: Store) -> None:
    running, _ = await new_run(store, topic="running", thread_key=f"{KEY}-1")
    await claim(store, running.id)
    queued, _ = await new_run(store, topic="queued", thread_key=f"{KEY}-2")
    finished, _ = await new_run(store, topic="finished", thread_key=f"{KEY}-3")
    await finish(store, await claim(store, finished.id), status="cancelled")

    assert [r.id for r in await store.runs.active_runs_for_user("U1")] == [running.id, queued.id]
    assert await store.runs.active_runs_for_user("U2") == []
    recent = await store.runs.recent_runs_for_user("U1", limit=2)
    assert [r.id for r in recent] == [finished.id, queued.id]
    # A channel's unfinished runs, every thread's (the bot removed from it stops them all).
    elsewhere, _ = await new_run(store, thread_key="slack:T0001:C0002:1700000000.000900")
    in_channel = await store.runs.active_runs_in_channel("slack", "T0001", "C0001")
    assert [r.id for r in in_channel] == [running.id, queued.id]
    assert [r.id for r in await store.runs.active_runs_in_channel("slack", "T0001", "C0002")] == [
        elsewhere.id
    ]
    assert await store.runs.active_runs_in_channel("slack", "T0002", "C0001") == []


async def test_create_run_refuses_a_user_at_the_limit_but_never_a_redelivery(
    store: Store,
) -> None:
    def args(n: int, key: str) -> dict[str, Any]:
        return {"thread_key": f"{KEY}-{n}", "dedupe_key": f"slack:cmd:T1:{key}"}

    running, _ = await new_run(store, topic="running", **args(1, "a"))
    await claim(store, running.id)
    queued, _ = await new_run(store, topic="queued", **args(2, "b"))
    finished, _ = await new_run(store, topic="finished", **args(3, "c"))
    await finish(store, await claim(store, finished.id))
    await new_run(store, topic="someone else's", requested_by="U2", **args(4, "d"))

    # U1 has two unfinished runs (the finished one and U2's do not count): at a limit of 2
    # a new request is refused, and nothing of it is written.
    with pytest.raises(UserBusy) as refused:
        await new_run(store, topic="third", user_limit=2, **args(5, "e"))
    assert (refused.value.active, refused.value.limit) == (2, 2)
    assert await store.threads.get_thread(f"{KEY}-5") is None
    # A redelivery gets its run, limit or not: an unfinished one, or one finished since.
    again, created = await new_run(store, topic="queued", user_limit=2, **args(2, "b"))
    assert (again.id, created) == (queued.id, False)
    late, created = await new_run(store, topic="finished", user_limit=2, **args(3, "c"))
    assert (late.id, late.status, created) == (finished.id, "succeeded", False)
    # Under the limit, or for another user, it is created.
    third, created = await new_run(store, topic="third", user_limit=3, **args(5, "e"))
    assert created and third.requested_by == "U1"
    _, created = await new_run(store, topic="U3's", requested_by="U3", user_limit=1, **args(6, "f"))
    assert created
    assert len(await store.runs.active_runs_for_user("U1")) == 3


async def test_create_run_returns_the_stored_row_when_new_and_when_deduplicated(
    store: Store,
) -> None:
    """create_run builds the new record from INSERT ... RETURNING: it must equal a re-read."""
    run, created = await new_run(store, thread_key=f"{KEY}-a")
    assert created and await store.runs.get_run(run.id) == run
    once, created = await new_run(store, dedupe_key="slack:cmd:T1:once", thread_key=f"{KEY}-b")
    assert created and await store.runs.get_run(once.id) == once
    again, created_again = await new_run(
        store, dedupe_key="slack:cmd:T1:once", thread_key=f"{KEY}-b"
    )
    assert not created_again and again == once


async def test_progress_message_and_thread_listing(store: Store) -> None:
    run, _ = await new_run(store)
    await store.runs.set_progress_message(run.id, "1700000001.000200")
    fetched = await store.runs.get_run(run.id)
    assert fetched is not None and fetched.progress_message_id == "1700000001.000200"

    await finish(store, await claim(store, run.id))
    await new_run(store, topic="second")
    await new_run(store, thread_key="cli:local:local:abc", topic="newest")
    summaries = await store.threads.list_threads()
    assert [(s.key, s.runs, s.last_topic, s.last_status) for s in summaries] == [
        ("cli:local:local:abc", 1, "newest", "queued"),
        (KEY, 2, "second", "queued"),
    ]
    assert_aware_utc(*(s.updated_at for s in summaries))
    assert len(await store.threads.list_threads(limit=1)) == 1


# -- search cache ---------------------------------------------------------------------


async def test_search_cache_ttl(store: Store, database: Database) -> None:
    results = [{"title": "T", "url": "https://t.test", "snippet": "s"}]
    assert await store.caches.cache_get("ddgs", "q", timedelta(hours=1)) is None
    await store.caches.cache_put("ddgs", "q", results)
    assert await store.caches.cache_get("ddgs", "q", timedelta(hours=1)) == results
    assert await store.caches.cache_get("tavily", "q", timedelta(hours=1)) is None

    async with database.sessionmaker.begin() as session:  # age the entry by two days
        two_days_ago = datetime.now(UTC) - timedelta(days=2)
        await session.execute(update(SearchCacheEntry).values(created_at=two_days_ago))
    assert await store.caches.cache_get("ddgs", "q", timedelta(days=1)) is None
    assert await store.caches.cache_get("ddgs", "q", timedelta(days=3)) == results

    newer = [{"title": "N", "url": "https://n.test", "snippet": ""}]
    await store.caches.cache_put("ddgs", "q", newer)  # upsert refreshes results and age
    assert await store.caches.cache_get("ddgs", "q", timedelta(days=1)) == newer

    long_query = "長" * 400  # 1200 UTF-8 bytes: too long for the key, silently not cached
    await store.caches.cache_put("ddgs", long_query, results)
    assert await store.caches.cache_get("ddgs", long_query, timedelta(days=1)) is None


# -- delivery bookkeeping (migration 0002) ---------------------------------------------


async def test_claim_event_is_true_once_even_when_racing(store: Store) -> None:
    results = await asyncio.gather(*(store.events.claim_event("slack:event:Ev1") for _ in range(5)))
    assert sorted(results) == [False, False, False, False, True]
    assert await store.events.claim_event("slack:event:Ev2") is True
    assert await store.events.claim_event("slack:event:Ev1") is False


async def test_prune_events_forgets_old_keys(store: Store, database: Database) -> None:
    await store.events.claim_event("old")
    await store.events.claim_event("new")
    async with database.sessionmaker.begin() as session:
        await session.execute(
            text("UPDATE processed_events SET created_at = :t WHERE key = 'old'"),
            {"t": datetime.now(UTC) - timedelta(days=3)},
        )
    assert await store.events.prune_events(timedelta(days=1)) == 1
    assert await store.events.claim_event("old") is True
    assert await store.events.claim_event("new") is False


async def test_requeue_makes_a_failed_run_resumable_but_not_a_succeeded_one(store: Store) -> None:
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    await store.runs.request_cancel(run.id)
    await finish(store, held, status="failed", error="boom")
    again = await store.runs.requeue_run(run.id)
    assert (again.status, again.error, again.finished_at, again.cancel_requested) == (
        "queued",
        None,
        None,
        False,
    )
    assert (again.owner, again.attempt, again.delivery) == (None, 0, None)  # a fresh start
    # ... and a fresh time budget (FATHOM_MAX_RUN_SECONDS counts from started_at).
    assert held.run.started_at is not None and again.started_at is None
    assert not again.stop_requested
    other, _ = await new_run(store, thread_key="cli:local:local:x")
    await finish(store, await claim(store, other.id))
    assert (await store.runs.requeue_run(other.id)).status == "succeeded"


async def test_requeue_into_a_busy_thread_is_refused(store: Store) -> None:
    run, _ = await new_run(store)
    await finish(store, await claim(store, run.id), status="failed", error="boom")
    follow_up, _ = await new_run(store, topic="follow-up")
    with pytest.raises(ThreadBusy) as busy:
        await store.runs.requeue_run(run.id)
    assert busy.value.active is not None and busy.value.active.id == follow_up.id
    stored = await store.runs.get_run(run.id)
    assert stored is not None and stored.status == "failed"


async def test_rekey_thread_moves_a_pending_thread_to_its_platform_id(store: Store) -> None:
    run, _ = await new_run(store, thread_key="slack:T1:C1:pending-abc")
    thread = await store.threads.rekey_thread(
        run.thread_id, ThreadKey.parse("slack:T1:C1:1700000000.000200")
    )
    assert thread.thread_ref == "1700000000.000200"
    assert thread.key == "slack:T1:C1:1700000000.000200"
    assert await store.threads.get_thread("slack:T1:C1:pending-abc") is None
    moved = await store.runs.get_run(run.id)
    assert moved is not None and moved.thread_key == thread.key


# -- the fence and the forced claim ---------------------------------------------------


async def test_the_fence_never_repeats_even_after_a_hand_back(store: Store) -> None:
    run, _ = await new_run(store)
    first = await claim(store, run.id, owner="same-owner")
    assert await store.claims.release_run(first)
    handed_back = await store.runs.get_run(run.id)
    assert handed_back is not None and handed_back.attempt == 0  # did not count
    second = await claim(store, run.id, owner="same-owner")
    assert (first.fence, second.fence) == (1, 2)
    assert await store.claims.renew_claim(first) is Renewal.LOST  # the old token is worthless
    assert await store.claims.renew_claim(second) is Renewal.HELD
    await finish(store, second, status="failed", error="x")
    await store.runs.requeue_run(run.id)  # a requeue moves the fence on as well
    assert await store.claims.renew_claim(second) is Renewal.LOST


async def test_a_forced_claim_takes_the_run_only_from_the_holder_judged_dead(store: Store) -> None:
    run, _ = await new_run(store)
    await claim(store, run.id, owner="alive")
    wrong = await store.claims.claim_run(
        run.id, "cli", stale_after=0, max_attempts=3, from_owner="the-dead-one"
    )
    assert wrong.claim is None and wrong.run is not None and wrong.run.owner == "alive"
    right = await store.claims.claim_run(
        run.id, "cli", stale_after=0, max_attempts=3, from_owner="alive"
    )
    assert right.claim is not None and right.claim.fence == 2


async def test_a_given_up_console_run_has_nothing_to_deliver(
    store: Store, database: Database
) -> None:
    run, _ = await new_run(store, thread_key="cli:local:local:g")
    await claim(store, run.id)
    await age_heartbeat(database, run.id)
    result = await store.claims.claim_run(run.id, "other", stale_after=60, max_attempts=1)
    assert result.gave_up and result.run is not None
    assert (result.run.status, result.run.delivery) == ("failed", None)


async def test_each_delivery_takeover_counts_as_a_failed_delivery_attempt(
    store: Store, database: Database
) -> None:
    run, _ = await new_run(store)
    await finish(store, await claim(store, run.id))
    for expected in (1, 2):
        await age_heartbeat(database, run.id)
        taken = await claim(store, run.id, owner=f"deliverer-{expected}")
        assert taken.run.delivery_attempts == expected
        assert taken.run.delivery_error == "the process delivering it stopped"


async def test_a_delivery_nobody_held_is_taken_without_a_failed_attempt(store: Store) -> None:
    """A run cancelled while queued, and a finished run handed back at a graceful shutdown,
    have a delivery due at once that no runner was killed by: taking it counts no failed
    attempt and says nothing of a process that stopped (it did count one, so such a run's
    delivery had one attempt fewer, its error "the process delivering it stopped")."""
    queued, _ = await new_run(store, thread_key="memory:W:C:q")
    assert await store.runs.request_cancel(queued.id) is CancelRequest.CANCELLED
    handed, _ = await new_run(store, thread_key="memory:W:C:h")
    held = await claim(store, handed.id)
    await finish(store, held)
    assert await store.claims.release_run(held) is RunStatus.SUCCEEDED
    for run_id in (queued.id, handed.id):
        taken = await claim(store, run_id, owner="deliverer")
        assert (taken.run.delivery, taken.run.delivery_attempts) == ("pending", 0)
        assert taken.run.delivery_error is None


async def test_runs_are_counted_by_status_and_platform(store: Store) -> None:
    done, _ = await new_run(store, thread_key="memory:W:C:a")
    await finish(store, await claim(store, done.id))
    await new_run(store, thread_key="memory:W:C:b")
    every = await store.runs.count_runs()
    assert sorted(every) == [("queued", "memory", 1), ("succeeded", "memory", 1)]
    assert await store.runs.count_runs(("queued", "running")) == [("queued", "memory", 1)]


@pytest.mark.parametrize("platform", ["cli", "slack", "dingtalk"])
async def test_runs_ended_without_their_holder_are_delivered_as_outcome_is_delivered_says(
    store: Store, database: Database, platform: str
) -> None:
    """The rule "console runs are not delivered" is one function, and the SQL that ends a run
    without its holder (cancelled while queued, given up) applies the same rule."""
    expected = "pending" if outcome_is_delivered(platform) else None
    cancelled, _ = await new_run(store, thread_key=f"{platform}:W:C:cancelled")
    assert await store.runs.request_cancel(cancelled.id) is CancelRequest.CANCELLED
    ended = await store.runs.get_run(cancelled.id)
    assert ended is not None and (ended.status, ended.delivery) == ("cancelled", expected)

    given_up, _ = await new_run(store, thread_key=f"{platform}:W:C:given-up")
    await claim(store, given_up.id)
    await age_heartbeat(database, given_up.id)
    result = await store.claims.claim_run(given_up.id, "other", stale_after=60, max_attempts=1)
    assert result.gave_up and result.run is not None
    assert (result.run.status, result.run.delivery) == ("failed", expected)
    assert outcome_is_delivered(platform) is (platform != "cli")


async def test_each_store_works_alone_on_a_database(database: Database) -> None:
    """The per-job stores need nothing but a Database; Store only holds them (no second name
    for any of their methods, so each caller is seen to use the stores it is given)."""
    runs, claims, threads = RunStore(database), ClaimStore(database), ThreadStore(database)
    events, caches = EventStore(database), CacheStore(database)
    run, created = await runs.create_run(
        thread=ThreadKey.parse(KEY),
        topic="alone",
        depth=1,
        strategy="iterative",
    )
    assert created
    result = await claims.claim_run(run.id, "alone", stale_after=60, max_attempts=3)
    assert result.claim is not None and result.claim.fence == 1
    thread = await threads.get_thread(KEY)
    assert thread is not None and thread.id == run.thread_id
    assert await events.claim_event("alone") and await events.events_seen(["alone"])
    await caches.cache_put("p", "q", [{"url": "u"}])
    assert await caches.cache_get("p", "q", timedelta(hours=1)) == [{"url": "u"}]

    store = Store(database)
    held = {name: type(value) for name, value in vars(store).items() if not name.startswith("_")}
    assert set(held.values()) == {
        RunStore,
        ClaimStore,
        ThreadStore,
        EventStore,
        FileStore,
        CacheStore,
        DigestStore,
        LeaseStore,
        FeedbackStore,
        ContextStore,
        RetentionStore,
        ForgetStore,
        ProgressStore,
    }
    assert len(held) == len(set(held.values()))  # one name per store, nothing else


async def test_files_sent_on_their_own_are_taken_once_by_the_next_request(store: Store) -> None:
    scope = "dingtalk:corp1:cid1:staff1"
    paper = {"id": "code-1", "name": "paper.pdf"}
    await store.files.remember_files(scope, [paper, {"id": "code-2", "name": "notes.md"}])
    await store.files.remember_files("dingtalk:corp1:cid1:someone-else", [{"id": "x", "name": "y"}])
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    # Two requests racing (two replicas): one takes both files, the other none.
    first, second = await asyncio.gather(
        store.files.take_files(scope, hour_ago), store.files.take_files(scope, hour_ago)
    )
    assert sorted([first, second], key=len) == [[], [paper, {"id": "code-2", "name": "notes.md"}]]
    assert await store.files.take_files(scope, hour_ago) == []
    # Only files kept within the window are taken; older ones wait for the pruning.
    await store.files.remember_files(scope, [paper])
    assert await store.files.take_files(scope, datetime.now(UTC) + timedelta(seconds=1)) == []
    assert await store.files.prune_files(timedelta(0)) == 2
    assert await store.files.take_files(scope, hour_ago) == []


async def test_guidance_added_meanwhile_reaches_the_runs_next_checkpoint(store: Store) -> None:
    """A reply steering a run (another replica's add_guidance) bumps the variables' version:
    the run's next checkpoint meets the conflict and gets the guidance with it."""
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    mine = {"topics": ["a"], "nextSearchTopic": None, "findings": [], "shouldContinue": True}
    await store.claims.checkpoint(
        held, variables=mine, variables_version=0, rounds_done=1, usage={}, notes=[]
    )
    entry = {"run_id": run.id, "by": "U2", "at": "2026-12-02T10:00:00+00:00", "text": "EU only"}
    assert await store.threads.add_guidance(run.id, entry) is GuidanceTaken.KEPT
    assert await store.threads.add_guidance("f" * 32, entry) is GuidanceTaken.ENDED  # unknown
    keyed = {**entry, "text": "and Asia", "key": "ev-1"}
    assert await store.threads.add_guidance(run.id, keyed) is GuidanceTaken.KEPT
    assert await store.threads.add_guidance(run.id, keyed) is GuidanceTaken.KEPT  # kept once
    with pytest.raises(VariablesConflict) as conflict:
        await store.claims.checkpoint(
            held, variables=mine, variables_version=1, rounds_done=1, usage={}, notes=[]
        )
    assert conflict.value.version == 3
    assert conflict.value.variables["guidance"] == [entry, keyed]
    assert conflict.value.variables["topics"] == ["a"]


async def test_guidance_is_refused_once_the_checkpoint_that_ends_the_searching_is_stored(
    store: Store,
) -> None:
    """The run's last checkpoint before its report records why its searching ended, with
    its variables, in one transaction. Guidance swapped in before it makes that checkpoint
    meet a new version (rolled back whole: the searching is not ended yet), so the retried
    checkpoint carries it to the writer; after it, guidance is refused as too late, and
    once the run has ended, as ended."""
    run, _ = await new_run(store)
    held = await claim(store, run.id)
    mine = {"topics": ["a"], "nextSearchTopic": None, "findings": [], "shouldContinue": False}
    await store.claims.checkpoint(
        held, variables=mine, variables_version=0, rounds_done=1, usage={}, notes=[]
    )
    entry = {"run_id": run.id, "by": "U2", "at": "2026-12-02T10:00:00+00:00", "text": "EU only"}
    assert await store.threads.add_guidance(run.id, entry) is GuidanceTaken.KEPT
    with pytest.raises(VariablesConflict) as conflict:
        await store.claims.checkpoint(
            held,
            variables=mine,
            variables_version=1,
            rounds_done=1,
            usage={},
            notes=[],
            searching_ended="depth_reached",
        )
    before = await store.runs.get_run(run.id)
    assert before is not None and before.stop_reason is None  # (the conflict changed nothing)
    assert conflict.value.variables["guidance"] == [entry]
    later = {**entry, "text": "and Asia"}
    ended = await store.claims.checkpoint(
        held,
        variables={**mine, "guidance": [entry]},
        variables_version=conflict.value.version,
        rounds_done=1,
        usage={},
        notes=[],
        searching_ended="depth_reached",
    )
    assert ended.variables_version == conflict.value.version + 1
    assert await store.threads.add_guidance(run.id, later) is GuidanceTaken.TOO_LATE
    writing = await store.runs.get_run(run.id)
    assert writing is not None and (writing.status, writing.stop_reason) == (
        "running",
        "depth_reached",
    )
    variables = await store.threads.load_variables(run.thread_id)
    assert variables is not None and variables["guidance"] == [entry]
    await finish(store, held)
    assert await store.threads.add_guidance(run.id, later) is GuidanceTaken.ENDED


@pytest.mark.parametrize("trial", range(3))
async def test_guidance_racing_the_end_of_the_searching_is_kept_only_if_the_writer_gets_it(
    store: Store, database_url: str, trial: int
) -> None:
    """Two processes (two stores on one database): a reply steering the run and the run's
    checkpoint that ends its searching, released together, many times. Every reply answered
    "kept" is in the state the writer reads (the checkpoint took it in); every other one is
    refused as too late and stored nowhere."""
    from core.engine.state import RunState, StopReason
    from core.models import ThreadVariables
    from core.research.steps import save_checkpoint

    other_db = Database(database_url)
    other = Store(other_db)
    try:
        for round_ in range(10):
            run, _ = await new_run(store, thread_key=f"{KEY}-{trial}-{round_}")
            held = await claim(store, run.id)
            state = RunState(run.id, run.topic, run.depth, ThreadVariables(topics=["a"]), 1)
            await save_checkpoint(store.claims, held, state)
            entry = {
                "run_id": run.id,
                "by": "U2",
                "at": "2026-12-02T10:00:00+00:00",
                "text": f"steer {round_}",
            }
            taken, _ = await asyncio.gather(
                other.threads.add_guidance(run.id, entry),
                save_checkpoint(
                    store.claims, held, state, searching_ended=StopReason.DEPTH_REACHED
                ),
            )
            shown = [g.text for g in state.variables.guidance if g.run_id == run.id]
            stored = await store.threads.load_variables(run.thread_id)
            assert stored is not None
            if taken is GuidanceTaken.KEPT:
                assert shown == [entry["text"]], (round_, taken)
            else:
                assert taken is GuidanceTaken.TOO_LATE, (round_, taken)
                assert shown == [] and stored["guidance"] == []
            await finish(store, held)
    finally:
        await other_db.dispose()


async def test_a_new_sqlite_file_and_its_wal_are_readable_by_their_owner_only(
    tmp_path: Path,
) -> None:
    """The embedded database keeps reports, guidance and installation tokens: created 0600
    (whatever the umask lets others read), as are the files SQLite makes beside it."""
    import os
    import stat

    previous = os.umask(0o022)  # the usual umask: 0644 files unless made private
    try:
        path = tmp_path / "fathom.db"
        db = Database(f"sqlite:///{path}")
        try:
            await db.ensure_schema()
            await Store(db).threads.get_thread("slack:T1:C1:1")
        finally:
            await db.dispose()
    finally:
        os.umask(previous)
    made = [name for name in os.listdir(tmp_path) if name.startswith("fathom.db")]
    assert "fathom.db" in made
    for name in made:
        mode = stat.S_IMODE(os.stat(tmp_path / name).st_mode)
        assert mode == 0o600, (name, oct(mode))
