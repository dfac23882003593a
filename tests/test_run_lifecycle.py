"""Run lifecycle with several replicas, on SQLite and PostgreSQL.

Every "replica" here is a full stack of its own (Database pool, Store, Research with
its own owner identity, ResearchJob, InProcessJobRunner) on one shared database, against the
LLM and search fakes, delivering to one in-memory chat (``bots.chat.memory.MemoryChat``).
What depends on real processes (SIGKILL) is in test_replicas.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text, update

from bots.chat.memory import PLATFORM, MemoryChat, Outage, Refusal
from core.llm import ChatModel
from core.metrics import Metrics
from core.models import ThreadVariables
from core.operations.job import DeliveryPolicy, ResearchJob
from core.operations.runners import InProcessJobRunner
from core.research.lease import Lease, LeaseTiming, holder_is_gone, runner_identity
from core.research.policy import RunPolicy
from core.research.requests import ResearchRequest, RunRejected
from core.research.service import Research
from core.search import SearxngProvider
from core.values import RunStatus, ThreadKey
from storage import Claim, ClaimLost, ClaimStore, Database, Renewal, RunRecord, Store
from storage.tables import ResearchRun, utcnow
from tests.fakes import FakeLLMServer, FakeSearchServer, Hang
from tests.runs import age_heartbeat, finish, new_run
from tests.runs import claim as take

KEY = "fake-key"
FAST = DeliveryPolicy(attempts=4, first_delay=0.01, max_delay=0.05)


@dataclass
class Replica:
    """One process's worth of Fathom on the shared database."""

    database: Database
    store: Store
    service: Research
    job: ResearchJob
    runner: InProcessJobRunner


ReplicaFactory = Callable[..., Awaitable[Replica]]


@pytest.fixture
def chat() -> MemoryChat:
    """One chat that every replica of a test delivers to; each report section is a part."""
    return MemoryChat(part_per_section=True)


@pytest.fixture
async def replicas(
    database: Database,  # migrates the shared database once
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    chat: MemoryChat,
) -> AsyncIterator[ReplicaFactory]:
    """``await replicas(stale_after=..., max_attempts=..., policy=..., start=True)``."""
    stack = contextlib.AsyncExitStack()
    made: list[Replica] = []

    async def make(
        *,
        stale_after: float = 60.0,
        max_attempts: int = 3,
        policy: DeliveryPolicy = FAST,
        start: bool = True,
        metrics: Metrics | None = None,
    ) -> Replica:
        db = Database(database_url)
        stack.push_async_callback(db.dispose)
        http = await stack.enter_async_context(httpx.AsyncClient(trust_env=False))
        model = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=1)
        stack.push_async_callback(model.aclose)
        store = Store(db)
        timing = LeaseTiming(stale_after)
        service = Research(
            store=store,
            planner=model,
            writer=model,
            search=SearxngProvider(http, base_url=search_server.url, base_delay=0.01),
            metrics=metrics,
            policy=RunPolicy(timing=timing, max_attempts=max_attempts),
        )
        job = ResearchJob(
            service.executor,
            store.runs,
            store.claims,
            {PLATFORM: chat.factory(store)},
            policy=policy,
        )
        runner = InProcessJobRunner(job, claims=store.claims, timing=timing)
        replica = Replica(db, store, service, job, runner)
        made.append(replica)
        if start:
            await runner.start()
        return replica

    try:
        yield make
    finally:
        llm_server.fake.latency = search_server.fake.latency = 0.0
        for replica in made:
            await replica.runner.stop(grace=0.1)
        await stack.aclose()


def thread(name: str = "t1") -> ThreadKey:
    return ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread=name)


async def submit(
    replica: Replica, topic: str = "heat pumps", depth: int = 3, name: str = "t1", **kw: Any
) -> RunRecord:
    request = ResearchRequest(topic=topic, depth=depth, thread=thread(name), **kw)
    run, created = await replica.service.requests.submit(request)
    assert created
    return run


async def wait_for(
    store: Store, run_id: str, done: Callable[[RunRecord], bool], within: float = 30
) -> RunRecord:
    async with asyncio.timeout(within):
        while True:
            run = await store.runs.get_run(run_id)
            if run is not None and done(run):
                return run
            await asyncio.sleep(0.05)


async def until(condition: Callable[[], object], within: float = 10) -> None:
    """Poll a fake (it runs in another thread) until ``condition()`` holds."""
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0.02)


def delivered(run: RunRecord) -> bool:
    return run.delivery in ("posted", "failed")


# -- the claim ------------------------------------------------------------------------


async def test_two_runners_racing_for_a_released_run_execute_it_once(
    replicas: ReplicaFactory, chat: MemoryChat, search_server: FakeSearchServer
) -> None:
    """A run handed back at shutdown is found by both replicas' first sweep; one runs it."""
    a = await replicas(start=False)
    b = await replicas(start=False)
    run = await submit(a, depth=2)
    released = await take(a.store, run.id, owner="stopped-replica")
    assert await a.store.claims.release_run(released)

    # Both replicas start at once: their sweeps, and for a guaranteed race their jobs too.
    swept = await asyncio.gather(a.runner.sweep(), b.runner.sweep(), a.job(run.id), b.job(run.id))
    assert run.id in swept[0] + swept[1]
    await asyncio.gather(a.runner.drain(), b.runner.drain())

    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.status == "succeeded" and delivered(final)
    assert final.attempt == 1  # the handed-back attempt did not count, one claim did
    assert len(search_server.fake.queries) == 2 == len(set(search_server.fake.queries))
    posts = chat.shown(run.id)
    assert posts.parts == [p for p in posts.parts if p]  # every part once:
    assert len(posts.parts) == len(set(posts.parts)) > 0
    assert sum(t.startswith("Research done") for t in posts.progress) == 1


async def test_a_held_run_is_not_claimed_again_and_a_finished_one_never(store: Store) -> None:
    run, _ = await new_run(store, thread_key="memory:W:C:x", depth=1)
    held = await take(store, run.id, owner="a")
    again = await store.claims.claim_run(run.id, "b", stale_after=60, max_attempts=3)
    assert again.claim is None and again.run is not None and again.run.owner == "a"
    await store.claims.finish_run(
        held, status="failed", report_markdown=None, sources=[], error="x", usage={}, notes=[]
    )
    await store.claims.finish_delivery(held, posted=True)
    await age_heartbeat(store._db, run.id)
    late = await store.claims.claim_run(run.id, "b", stale_after=60, max_attempts=3)
    assert late.claim is None and late.run is not None and late.run.status == "failed"


async def test_a_runner_whose_heartbeat_expired_loses_its_claim(database: Database) -> None:
    """After a takeover every write of the old holder is refused; the new holder's work."""
    store = Store(database)
    run, _ = await new_run(store, thread_key="memory:W:C:y", depth=2)
    old = await take(store, run.id, owner="stalled")
    state = {
        "topics": ["a"],
        "nextSearchTopic": None,
        "findings": [],
        "shouldContinue": True,
        "strategyState": {},
        "files": [],
        "guidance": [],
    }
    await store.claims.checkpoint(
        old, variables=state, variables_version=0, rounds_done=1, usage={}, notes=[]
    )
    assert (
        await store.claims.claim_run(run.id, "new", stale_after=60, max_attempts=3)
    ).claim is None
    await age_heartbeat(database, run.id)
    new = await take(store, run.id, owner="new")
    assert (new.fence, new.run.attempt, new.variables, new.variables_version) == (2, 2, state, 1)

    assert await store.claims.renew_claim(old) is Renewal.LOST
    with pytest.raises(ClaimLost):
        await store.claims.checkpoint(
            old, variables=state, variables_version=1, rounds_done=2, usage={}, notes=["old"]
        )
    with pytest.raises(ClaimLost):
        await store.claims.finish_run(
            old,
            status="succeeded",
            report_markdown="# old",
            sources=[],
            error=None,
            usage={},
            notes=[],
        )
    assert await store.claims.release_run(old) is None
    with pytest.raises(ClaimLost):
        await store.claims.report_parts_posted(old, 1)

    assert await store.claims.renew_claim(new) is Renewal.HELD
    current = await store.runs.get_run(run.id)
    assert current is not None
    assert (current.status, current.owner, current.rounds_done, current.notes) == (
        "running",
        "new",
        1,
        [],
    )


async def test_a_run_that_keeps_killing_its_runners_fails_after_max_attempts(
    database: Database,
) -> None:
    store = Store(database)
    run, _ = await new_run(store, thread_key="memory:W:C:z", depth=2)
    for attempt in (1, 2):
        claim = await take(store, run.id, owner=f"r{attempt}", max_attempts=2)
        assert claim.run.attempt == attempt == claim.fence
        await age_heartbeat(database, run.id)  # ... and that runner died
    result = await store.claims.claim_run(run.id, "r3", stale_after=60, max_attempts=2)
    assert result.gave_up and result.claim is not None  # held, to tell the thread
    assert result.run is not None and result.run.status == "failed"
    assert "gave up after 2 attempts" in (result.run.error or "")
    assert "FATHOM_MAX_ATTEMPTS" in (result.run.error or "")
    assert result.run.delivery == "pending"


async def test_the_sweep_finds_exactly_the_runs_nobody_works_on(database: Database) -> None:
    store = Store(database)

    async def run_in(name: str, platform: str = "memory") -> RunRecord:
        run, _ = await new_run(store, thread_key=f"{platform}:W:C:{name}", topic=name, depth=1)
        return run

    fresh_queued = await run_in("fresh-queued")
    released = await run_in("released")
    assert await store.claims.release_run(await take(store, released.id, owner="dead-replica"))
    live = await run_in("live")
    await take(store, live.id, owner="dead-replica")
    dead = await run_in("dead")
    await take(store, dead.id, owner="dead-replica")
    await age_heartbeat(database, dead.id)
    old_queued = await run_in("old-queued")
    await age_heartbeat(database, old_queued.id)  # queued long ago, nobody took it
    undelivered = await run_in("undelivered")
    claim = await take(store, undelivered.id, owner="dead-replica")
    await finish(store, claim)
    delivering = await run_in("delivering")  # finished, its holder is posting right now
    claim = await take(store, delivering.id, owner="dead-replica")
    await finish(store, claim)
    await age_heartbeat(database, undelivered.id)
    posted = await run_in("posted")
    claim = await take(store, posted.id, owner="dead-replica")
    await finish(store, claim)
    await store.claims.finish_delivery(claim, posted=True)
    await age_heartbeat(database, posted.id)
    elsewhere = await run_in("elsewhere", platform="slack")
    await age_heartbeat(database, elsewhere.id)

    found = await store.claims.runs_to_sweep(["memory"], stale_after=60)
    assert set(found) == {released.id, dead.id, old_queued.id, undelivered.id}
    assert fresh_queued.id not in found and live.id not in found and delivering.id not in found
    assert await store.claims.runs_to_sweep([], stale_after=60) == []
    assert elsewhere.id in await store.claims.runs_to_sweep(["slack"], stale_after=60)


# -- the lease ------------------------------------------------------------------------


def test_lease_intervals_follow_the_stale_setting() -> None:
    timing = LeaseTiming(6.0)
    assert (timing.heartbeat_every, timing.lost_after, timing.sweep_every) == (2.0, 4.0, 3.0)
    assert LeaseTiming(180).heartbeat_every == 60
    with pytest.raises(ValueError):
        LeaseTiming(0)


async def _claimed_run(store: Store, name: str) -> Claim:
    run, _ = await new_run(store, thread_key=f"memory:W:C:{name}", topic=name, depth=1)
    return await take(store, run.id, owner=runner_identity())


async def test_the_lease_renews_the_heartbeat_at_its_interval(store: Store) -> None:
    claim = await _claimed_run(store, "beat")
    first = claim.run.heartbeat_at
    assert first is not None
    async with Lease(store.claims, claim, LeaseTiming(0.3)):  # a renewal every 0.1 s
        later = await wait_for(
            store,
            claim.run_id,
            lambda r: r.heartbeat_at is not None and r.heartbeat_at > first,
            within=5,
        )
    assert later.owner == claim.owner


async def test_a_lease_taken_over_cancels_its_holder_with_claim_lost(
    store: Store, database: Database
) -> None:
    claim = await _claimed_run(store, "taken")
    stop = asyncio.Event()
    with pytest.raises(ClaimLost):
        async with asyncio.timeout(10), Lease(store.claims, claim, LeaseTiming(0.3)):
            await age_heartbeat(database, claim.run_id)
            await take(store, claim.run_id, owner="other")  # the takeover
            await stop.wait()  # interrupted by the lease, not by the event
    assert not stop.is_set()
    # The task is usable afterwards: the cancellation was consumed.
    await asyncio.sleep(0.01)


async def test_a_lease_that_cannot_renew_gives_the_run_up_before_others_may_take_it(
    store: Store, database: Database, database_url: str
) -> None:
    """A holder cut off from the database (here: its run row locked by another connection)
    stops on its own after two thirds of the lease, before any takeover is allowed."""
    claim = await _claimed_run(store, "cut-off")
    timing = LeaseTiming(3.0)  # gives up 2 s after its last renewal; a takeover after 3 s
    blocker = Database(database_url, busy_timeout_ms=60_000)
    started = asyncio.get_running_loop().time()
    try:
        async with blocker.engine.connect() as conn:
            if blocker.dialect == "sqlite":
                await conn.exec_driver_sql("BEGIN IMMEDIATE")  # every writer now waits
            else:
                await conn.execute(
                    text("SELECT id FROM research_runs WHERE id = :id FOR UPDATE"),
                    {"id": claim.run_id},
                )
            with pytest.raises(ClaimLost):
                async with asyncio.timeout(10), Lease(store.claims, claim, timing):
                    await asyncio.Event().wait()
            gave_up_at, held_for = utcnow(), asyncio.get_running_loop().time() - started
            await conn.rollback()
    finally:
        await blocker.dispose()
    assert held_for >= timing.lost_after - 0.05  # its renewals had their chance
    # It gave up while its last heartbeat (the claim's: no renewal got through) was fresh by
    # the takeover rule, so no other runner could have taken the run yet.
    last_beat = claim.run.heartbeat_at
    assert last_beat is not None
    assert gave_up_at < last_beat + timedelta(seconds=timing.stale_after)


async def test_other_cancellations_pass_through_the_lease(store: Store) -> None:
    claim = await _claimed_run(store, "cancelled")

    held = asyncio.Event()

    async def hold() -> None:
        async with Lease(store.claims, claim, LeaseTiming(60)):
            held.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(hold())
    await held.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_holder_is_known_gone_only_when_its_process_provably_is() -> None:
    me = runner_identity()
    host, pid, token = me.rsplit(":", 2)
    scope = token.partition("-")[0]
    assert scope  # this machine has /proc: the boot and PID namespace are part of the name
    assert not holder_is_gone(me, me)
    assert not holder_is_gone(None, me)
    assert holder_is_gone(f"{host}:{pid}:{scope}-00000000", me)  # an earlier process, our pid
    assert not holder_is_gone(f"{host}:1:{scope}-00000000", me)  # init lives
    assert holder_is_gone(f"{host}:{2**22 + 12345}:{scope}-0", me)  # no such pid
    assert not holder_is_gone(f"other-host:{2**22 + 12345}:{scope}-0", me)  # not ours to judge
    assert not holder_is_gone(f"{host}:{2**22 + 12345}:ffffff-0", me)  # another boot/namespace
    assert not holder_is_gone("garbage", me)


# -- a dead replica, a stalled one -----------------------------------------------------


async def test_a_dead_replicas_run_is_finished_by_a_survivor_without_a_restart(
    replicas: ReplicaFactory, chat: MemoryChat, search_server: FakeSearchServer
) -> None:
    metrics = Metrics()
    # already running: it sweeps every 0.5 s
    survivor = await replicas(stale_after=1.0, metrics=metrics)
    run = await submit(survivor, depth=3, name="dead")
    # Another replica claimed it, searched one topic, checkpointed, and died.
    dead = await take(survivor.store, run.id, owner="replica-that-died")
    finding = {
        "topic": "heat pumps overview",
        "results": [
            {"title": "Heat pumps", "url": "https://example.org/hp", "snippet": "They pump."}
        ],
    }
    state = {
        "topics": ["heat pumps overview"],
        "nextSearchTopic": "heat pumps overview",
        "findings": [finding],
        "shouldContinue": True,
    }
    await survivor.store.claims.checkpoint(
        dead, variables=state, variables_version=0, rounds_done=1, usage={"searches": 1}, notes=[]
    )

    final = await wait_for(survivor.store, run.id, delivered, within=30)
    assert final.status == "succeeded" and final.delivery == "posted"
    assert final.owner == survivor.service.executor.owner and final.attempt == 2
    assert final.rounds_done == 3 and final.searches == 3
    assert "heat pumps overview" not in search_server.fake.queries  # not searched again
    assert len(search_server.fake.queries) == 2
    shown = chat.shown(run.id)
    assert shown.progress[0].startswith("Resuming")
    # its last search shown (the throttle may coalesce it with the "Writing" status after it)
    assert any(t.startswith("3/3th search executed.") for t in shown.progress)
    assert len(shown.parts) == len(set(shown.parts)) > 0
    # Counted as a takeover, the survivor's only claim (fathom_run_claims_total{how}).
    claims = metrics.registry.get_sample_value
    assert claims("fathom_run_claims_total", {"how": "taken_over"}) == 1
    assert claims("fathom_run_claims_total", {"how": "new"}) is None
    assert claims("fathom_run_claims_total", {"how": "resumed"}) is None


async def test_a_stalled_runner_that_lost_its_run_stops_and_writes_nothing(
    replicas: ReplicaFactory,
    chat: MemoryChat,
    search_server: FakeSearchServer,
    llm_server: FakeLLMServer,
) -> None:
    """A holder that cannot renew in time (here: a lease ten times longer than the
    survivor's, as a stalled process would look) is taken over; it finds out at its next
    write and stops. One report, written by the survivor."""
    stalled = await replicas(stale_after=600.0, start=False)
    run = await submit(stalled, depth=2, name="stalled")
    search_server.fake.latency = 2.0  # the stalled runner is inside its first search ...
    job = asyncio.create_task(stalled.job(run.id))
    await until(lambda: search_server.fake.queries)
    await age_heartbeat(stalled.database, run.id)  # ... for "too long"
    survivor = await replicas(stale_after=1.0)
    await asyncio.wait_for(job, 30)  # it ended (ClaimLost is logged, not raised)
    search_server.fake.latency = 0.0

    final = await wait_for(survivor.store, run.id, delivered, within=30)
    assert final.status == "succeeded" and final.owner == survivor.service.executor.owner
    variables = await survivor.store.threads.load_variables(final.thread_id)
    assert variables is not None
    topics = variables["topics"]
    assert len(topics) == 2 == len(set(topics))  # the stalled runner's search was discarded
    shown = chat.shown(run.id)
    assert sum(t.startswith("Research done") for t in shown.progress) == 1
    assert len(shown.parts) == len(set(shown.parts)) > 0
    assert llm_server.fake.requests_for("writer")  # written once, by the survivor
    assert len(llm_server.fake.requests_for("writer")) == 1


# -- one active run per thread, no lost update ------------------------------------------


async def test_two_follow_ups_racing_in_one_thread(
    replicas: ReplicaFactory, chat: MemoryChat
) -> None:
    a = await replicas()
    b = await replicas()
    first = await submit(a, depth=1, name="busy")
    await a.runner.enqueue(first.id)
    await wait_for(a.store, first.id, delivered)

    async def follow_up(replica: Replica, topic: str, key: str) -> RunRecord | str:
        request = ResearchRequest(topic=topic, depth=1, thread=thread("busy"), dedupe_key=key)
        try:
            run, _ = await replica.service.requests.submit(request)
        except RunRejected as exc:
            return str(exc)
        await replica.runner.enqueue(run.id)
        return run

    results = await asyncio.gather(
        follow_up(a, "costs of heat pumps", "ev-a"), follow_up(b, "noise of heat pumps", "ev-b")
    )
    runs = [r for r in results if isinstance(r, RunRecord)]
    refusals = [r for r in results if isinstance(r, str)]
    assert len(runs) == 1 and len(refusals) == 1
    assert refusals[0].startswith("A research is already running in this thread")
    winner = await wait_for(a.store, runs[0].id, delivered)
    assert winner.status == "succeeded"
    variables = await a.store.threads.load_variables(winner.thread_id)
    assert variables is not None
    # Both runs' topics are kept: the follow-up built on the first run's variables.
    assert len(variables["topics"]) == 2 == len({f["topic"] for f in variables["findings"]})


async def test_a_checkpoint_that_meets_changed_variables_merges_instead_of_overwriting(
    replicas: ReplicaFactory, llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="cas")
    foreign = {
        "topic": "written elsewhere",
        "results": [{"title": "Else", "url": "https://else.example/x", "snippet": "x"}],
    }

    async def write_behind_its_back() -> None:
        await until(lambda: search_server.fake.queries)
        async with a.database.sessionmaker.begin() as session:  # another writer's update
            await session.execute(
                text("UPDATE thread_variables SET version = version + 1 WHERE thread_id = :t"),
                {"t": run.thread_id},
            )
        current = await a.store.threads.load_variables(run.thread_id) or {}
        merged = ThreadVariables.model_validate(current)
        merged.topics.append(foreign["topic"])  # type: ignore[arg-type]
        async with a.database.sessionmaker.begin() as session:
            await session.execute(
                text(
                    "UPDATE thread_variables SET topics = :topics, findings = :findings "
                    "WHERE thread_id = :t"
                ).bindparams(),
                {
                    "t": run.thread_id,
                    "topics": _json(merged.topics),
                    "findings": _json([*current.get("findings", []), foreign]),
                },
            )

    search_server.fake.latency = 0.3
    writer = asyncio.create_task(write_behind_its_back())
    await a.job(run.id)
    await writer
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.status == "succeeded"
    variables = await a.store.threads.load_variables(final.thread_id)
    assert variables is not None
    assert "written elsewhere" in variables["topics"]  # the other writer's update survived
    assert [
        t for t in variables["topics"] if t != "written elsewhere"
    ] == search_server.fake.queries
    assert "written elsewhere" in {f["topic"] for f in variables["findings"]}


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


# -- the delivery step -----------------------------------------------------------------


LONG_TOPIC = "heat pumps"


async def test_a_report_post_failing_then_succeeding_posts_each_part_once(
    replicas: ReplicaFactory, chat: MemoryChat
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="flaky")
    chat.fail("report", Outage("HTTP 503"), Outage("HTTP 500"))
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.status == "succeeded"
    assert (final.delivery, final.delivery_attempts) == ("posted", 2)
    assert final.delivery_error == "Outage: HTTP 500"  # the last failure, kept
    assert final.report_posted_at is not None
    shown = chat.shown(run.id)
    parts = final.report_markdown and shown.parts
    assert parts and len(parts) == final.report_parts_posted
    assert "\n".join(parts) == (final.report_markdown or "").strip()  # all, once, in order
    assert shown.notices == []


async def test_a_takeover_during_delivery_posts_only_the_missing_parts(
    replicas: ReplicaFactory, chat: MemoryChat
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="half-posted")
    chat.fail("report", Refusal("gone"))  # the first part fails for good: delivery failed
    await a.job(run.id)
    done = await a.store.runs.get_run(run.id)
    assert done is not None and done.delivery == "failed"
    # Redo it as a runner that died after posting part 1 would leave it.
    parts = [p for p in (done.report_markdown or "").split("\n## ")]
    assert len(parts) >= 3
    async with a.database.sessionmaker.begin() as session:
        await session.execute(
            update(ResearchRun)
            .where(ResearchRun.id == run.id)
            .values(delivery="pending", report_parts_posted=1, delivery_attempts=0)
        )
    assert chat.shown(run.id).parts == []  # the refused part was not posted
    await age_heartbeat(a.database, run.id)
    b = await replicas(start=False)
    assert await b.runner.sweep() == [run.id]
    await b.runner.drain()
    final = await b.store.runs.get_run(run.id)
    assert final is not None and final.delivery == "posted"
    shown = chat.shown(run.id)
    assert len(shown.parts) == final.report_parts_posted - 1  # part 1 was not posted again
    assert shown.parts[0].startswith("## ")
    assert shown.progress[-1].startswith("Research done")  # the final state, re-written


async def test_a_report_that_never_posts_gets_one_notice_and_the_run_records_why(
    replicas: ReplicaFactory, chat: MemoryChat
) -> None:
    a = await replicas(start=False, policy=FAST)
    run = await submit(a, depth=1, name="never")
    chat.fail("report", *(Outage(f"HTTP 50{i}") for i in range(10)))
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.status == "succeeded"  # the research itself is fine
    assert (final.delivery, final.delivery_attempts, final.report_parts_posted) == (
        "failed",
        FAST.attempts,
        0,
    )
    assert final.delivery_error == f"not posted after {FAST.attempts} failures: Outage: HTTP 503"
    shown = chat.shown(run.id)
    assert shown.parts == []
    [notice] = shown.notices
    assert "could not post its report" in notice and f"{FAST.attempts} attempts" in notice
    assert f"fathom thread show {final.thread_key}" in notice
    # Nothing is retried any more.
    await age_heartbeat(a.database, run.id)
    assert await a.runner.sweep() == []


async def test_a_permanent_refusal_is_not_retried(
    replicas: ReplicaFactory, chat: MemoryChat
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=1, name="refused")
    chat.fail("report", Refusal("not_in_channel"))
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None
    assert (final.delivery, final.delivery_attempts) == ("failed", 1)
    assert len(chat.shown(run.id).notices) == 1


async def test_a_run_whose_delivery_cannot_be_built_spends_nothing(
    replicas: ReplicaFactory, chat: MemoryChat, llm_server: FakeLLMServer
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="nowhere")
    chat.refuse_for_run = run.id
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.status == "failed"
    assert final.error == "cannot deliver to memory: no installation for this workspace"
    assert (final.delivery, final.delivery_error) == ("failed", final.error)
    assert llm_server.fake.requests == [] and final.llm_calls == 0 and final.searches == 0


async def test_a_given_up_run_tells_its_thread(
    replicas: ReplicaFactory, chat: MemoryChat, llm_server: FakeLLMServer
) -> None:
    a = await replicas(start=False, max_attempts=1)
    run = await submit(a, depth=2, name="poison")
    await take(a.store, run.id, owner="crashed", max_attempts=1)
    await age_heartbeat(a.database, run.id)
    assert await a.runner.sweep() == [run.id]
    await a.runner.drain()
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.status == "failed" and final.delivery == "posted"
    assert llm_server.fake.requests == []
    [shown] = chat.shown(run.id).progress
    assert shown.startswith("Research failed after 0 of 2 searches: gave up after 1 attempts")


async def test_a_runner_stopping_mid_run_hands_it_back_for_another(
    replicas: ReplicaFactory, chat: MemoryChat, llm_server: FakeLLMServer
) -> None:
    a_metrics, b_metrics = Metrics(), Metrics()
    a = await replicas(metrics=a_metrics)
    llm_server.fake.script("planner", Hang(30))
    run = await submit(a, depth=1, name="deploy")
    await a.runner.enqueue(run.id)
    await wait_for(a.store, run.id, lambda r: r.status == "running")
    await until(lambda: llm_server.fake.requests)
    await a.runner.stop(grace=0.05)
    handed_back = await a.store.runs.get_run(run.id)
    assert handed_back is not None
    assert (handed_back.status, handed_back.owner, handed_back.attempt) == ("queued", None, 0)
    # Re-queued by a, resumed by b: counted where each happened.
    assert a_metrics.registry.get_sample_value("fathom_runs_requeued_total") == 1
    assert a_metrics.registry.get_sample_value("fathom_run_claims_total", {"how": "new"}) == 1
    llm_server.fake.reset()
    b = await replicas(metrics=b_metrics)  # its first sweep takes it at once, no waiting
    final = await wait_for(b.store, run.id, delivered)
    assert final.status == "succeeded" and final.owner == b.service.executor.owner
    assert RunStatus(final.status) is RunStatus.SUCCEEDED
    claims = b_metrics.registry.get_sample_value
    assert claims("fathom_run_claims_total", {"how": "resumed"}) == 1
    assert claims("fathom_run_claims_total", {"how": "taken_over"}) is None
    assert b_metrics.registry.get_sample_value("fathom_runs_requeued_total") == 0


# -- after review: failures that must not cost a run ----------------------------------


class RecordedRenewals(ClaimStore):
    """A claim store that records what each heartbeat renewal gave: a Renewal, or its
    error."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.renewals: list[Renewal | str] = []

    async def renew_claim(self, claim: Claim) -> Renewal:
        try:
            held = await super().renew_claim(claim)
        except Exception as exc:
            self.renewals.append(type(exc).__name__)
            raise
        self.renewals.append(held)
        return held


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_one_failed_renewal_does_not_lose_the_claim(
    database: Database, database_url: str
) -> None:
    """A renewal that fails once ("database is locked") is retried soon, within the lease."""
    impatient = Database(database_url, busy_timeout_ms=50)  # fails fast while locked
    blocker = Database(database_url)
    try:
        store, claims = Store(impatient), RecordedRenewals(impatient)
        claim = await _claimed_run(store, "blip")
        timing = LeaseTiming(3.0)  # renew every 1 s; retry every 1/3 s; give up after 2 s
        async with Lease(claims, claim, timing) as lease:
            async with blocker.engine.connect() as conn:
                await conn.exec_driver_sql("BEGIN IMMEDIATE")  # every renewal fails now
                await until(lambda: claims.renewals)  # the first one (at 1 s) did
                await conn.rollback()
            # The retry, then the next renewal, due after the first one's deadline (2 s): a
            # claim lost to the one failure would have neither.
            await until(lambda: claims.renewals.count(Renewal.HELD) >= 2, within=10)
        assert not lease.lost
        failed, *later = claims.renewals
        assert isinstance(failed, str) and all(r is Renewal.HELD for r in later)
        renewed = await store.runs.get_run(claim.run_id)
        assert renewed is not None and renewed.owner == claim.owner
    finally:
        await blocker.dispose()
        await impatient.dispose()


async def test_a_lost_lease_cancels_again_when_the_first_cancellation_is_swallowed(
    store: Store, database: Database
) -> None:
    claim = await _claimed_run(store, "swallowed")
    swallowed = False
    with pytest.raises(ClaimLost):
        async with asyncio.timeout(10), Lease(store.claims, claim, LeaseTiming(0.3)):
            await age_heartbeat(database, claim.run_id)
            await take(store, claim.run_id, owner="other")
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                swallowed = True  # as asyncio.wait_for on Python 3.11 sometimes does
            await asyncio.Event().wait()
    assert swallowed


async def test_a_shutdown_during_a_post_records_that_part_and_the_next_replica_goes_on(
    replicas: ReplicaFactory, chat: MemoryChat
) -> None:
    a = await replicas()
    run = await submit(a, depth=2, name="deploy-mid-post")
    chat.post_latency = 0.3
    await a.runner.enqueue(run.id)
    await asyncio.wait_for(chat.posting.wait(), 30)  # part 1 is on its way
    await a.runner.stop(grace=0.01)
    handed_back = await a.store.runs.get_run(run.id)
    assert handed_back is not None and handed_back.owner is None
    assert handed_back.report_parts_posted == 1 == len(chat.shown(run.id).parts)
    chat.post_latency = 0.0
    b = await replicas()
    final = await wait_for(b.store, run.id, delivered)
    assert final.delivery == "posted"
    parts = chat.shown(run.id).parts
    assert len(parts) == final.report_parts_posted == len(set(parts))  # none twice, all there
    assert "\n".join(parts) == (final.report_markdown or "").strip()


async def test_a_failed_runs_final_status_is_delivered_with_retries(
    replicas: ReplicaFactory, chat: MemoryChat, search_server: FakeSearchServer
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=1, name="nothing-found")
    search_server.fake.empty = True  # no results: the run fails
    # and its final status fails once: the progress message's final edit is refused for good
    # (the message is gone: not edited again, its status a new message), the new message's
    # first post fails (the progress step goes on), and so does the delivery step's first
    chat.fail("edit", Refusal("HTTP 403"), when="Research failed")
    chat.fail("post", Outage("HTTP 502"), Outage("HTTP 502"), when="Research failed")
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.status == "failed"
    assert (final.delivery, final.delivery_attempts, final.report_parts_posted) == (
        "posted",
        1,
        1,
    )
    shown = chat.shown(run.id)
    assert shown.progress[-1].startswith("Research failed after 1 of 1 searches")
    assert shown.parts == [] and shown.notices == []


async def test_a_passing_error_building_the_delivery_leaves_the_run_for_later(
    replicas: ReplicaFactory, chat: MemoryChat, llm_server: FakeLLMServer
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=1, name="installation-store-down")
    chat.for_run_errors.append(ConnectionError("installation store timed out"))
    await a.job(run.id)
    waiting = await a.store.runs.get_run(run.id)
    assert waiting is not None and (waiting.status, waiting.attempt) == ("queued", 0)
    assert llm_server.fake.requests == []
    await a.job(run.id)  # what the sweep does later
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.status == "succeeded" and final.delivery == "posted"


async def test_a_delivery_that_keeps_killing_its_runners_is_given_up(
    replicas: ReplicaFactory, chat: MemoryChat
) -> None:
    a = await replicas(start=False, policy=FAST)
    run = await submit(a, depth=1, name="poison-delivery")
    held = await take(a.store, run.id, owner="writer-that-died")
    await a.store.claims.finish_run(
        held,
        status="succeeded",
        report_markdown="# R\n\nx",
        sources=[],
        error=None,
        usage={},
        notes=[],
    )
    async with a.database.sessionmaker.begin() as session:  # earlier deliverers died too
        await session.execute(
            update(ResearchRun)
            .where(ResearchRun.id == run.id)
            .values(delivery_attempts=FAST.attempts - 1)
        )
    await age_heartbeat(a.database, run.id)
    assert await a.runner.sweep() == [run.id]
    await a.runner.drain()
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.delivery == "failed"
    assert final.delivery_attempts == FAST.attempts
    assert "the process delivering it stopped" in (final.delivery_error or "")
    shown = chat.shown(run.id)
    assert shown.parts == [] and len(shown.notices) == 1
