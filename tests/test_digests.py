"""Scheduled digests on SQLite and PostgreSQL, with the clock given to every step: cron and
timezone arithmetic, firing a due slot once, racing schedulers, the scheduler lease, the
grace-period catch-up, removal on another replica, and the chat commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from bots.chat.inbound import ChatCommands
from bots.chat.memory import PLATFORM, MemoryChat, MemoryMarkup, Refusal
from bots.chat.settings import ChatPolicy
from bots.platforms import titles
from core.chat import schedule
from core.chat.grammar import ScheduleCommand
from core.llm import ChatModel
from core.operations.digests import DigestService
from core.operations.job import DeliveryPolicy, ResearchJob
from core.operations.runners import InProcessJobRunner
from core.operations.scheduler import DigestScheduler
from core.research.policy import RunPolicy
from core.research.service import Research
from core.search import SearxngProvider
from core.settings import Settings
from core.values import ThreadKey
from storage import Database, DigestRecord, DigestStore, LeaseStore, StorageUnavailable, Store
from tests.chat_app import wait_for
from tests.conftest import FAKE_API_KEY
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.test_chat_layer import TeamSources

FAST = DeliveryPolicy(attempts=4, first_delay=0.01, max_delay=0.05)
CHANNEL = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="t0")
MONDAY_0900_SHANGHAI = datetime(2026, 12, 7, 1, 0, tzinfo=UTC)  # 09:00 +08:00


class Clock:
    """The time every step sees; tests move it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Replica:
    store: Store
    digests: DigestService
    scheduler: DigestScheduler
    runner: InProcessJobRunner
    commands: ChatCommands


Replicas = tuple[Callable[..., Awaitable[Replica]], MemoryChat, Clock]


@pytest.fixture
async def replicas(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> AsyncIterator[Replicas]:
    """``make(name)``: a replica (own database pool, service, scheduler) on the shared
    database, all delivering to one in-memory chat, all reading one clock."""
    stack = contextlib.AsyncExitStack()
    chat = MemoryChat()
    clock = Clock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    made: list[Replica] = []

    async def make(name: str, knowledge: TeamSources | None = None, **settings: object) -> Replica:
        db = Database(database_url)
        stack.push_async_callback(db.dispose)
        http = await stack.enter_async_context(httpx.AsyncClient(trust_env=False))
        model = ChatModel(
            model="m", api_key=FAKE_API_KEY, base_url=llm_server.base_url, max_retries=1
        )
        stack.push_async_callback(model.aclose)
        store = Store(db)
        service = Research(
            store=store,
            planner=model,
            writer=model,
            search=SearxngProvider(http, base_url=search_server.url, base_delay=0.01),
            policy=RunPolicy(owner=name),
        )
        job = ResearchJob(
            service.executor,
            store.runs,
            store.claims,
            {PLATFORM: chat.factory(store)},
            policy=FAST,
            chat_platforms=titles(),
        )
        runner = InProcessJobRunner(job, claims=store.claims, timing=service.executor.timing)
        config = Settings(_env_file=None, **settings)  # type: ignore[call-arg]
        policy = ChatPolicy.load(_env_file=None, **settings)
        digests = DigestService(
            DigestStore(db),
            store.runs,
            min_interval=config.digest_min_interval,
            grace=config.digest_grace,
            max_per_channel=config.max_digests_per_channel,
            clock=clock,
        )
        scheduler = DigestScheduler(digests, LeaseStore(db), runner, owner=name, clock=clock)
        commands = ChatCommands(
            policy, service.requests, store, runner, MemoryMarkup(), digests, knowledge=knowledge
        )
        replica = Replica(store, digests, scheduler, runner, commands)
        made.append(replica)
        return replica

    try:
        yield make, chat, clock
    finally:
        for replica in made:
            await replica.runner.stop(grace=0.1)
            await replica.scheduler.close()
        await stack.aclose()


def weekly(topic: str = "open-source LLM inference engines") -> ScheduleCommand:
    return ScheduleCommand(topic, "0 9 * * MON", "Asia/Shanghai", 1, "iterative")


# -- arithmetic ---------------------------------------------------------------------------------


def test_cron_in_a_timezone_follows_daylight_saving_time() -> None:
    berlin = schedule.timezone("Europe/Berlin")
    daily = schedule.trigger("0 9 * * *", berlin)
    fires = schedule.firings(
        daily, datetime(2027, 3, 26, 0, 0, tzinfo=UTC), datetime(2027, 3, 30, 0, 0, tzinfo=UTC)
    )
    hours_utc = [f.astimezone(UTC).hour for f in fires]
    assert hours_utc == [8, 8, 7, 7]  # 09:00 CET, then 09:00 CEST after 28 March
    assert all(f.astimezone(berlin).hour == 9 for f in fires)
    # When the clocks go back, a repeated wall time fires once (and the arithmetic ends).
    nightly = schedule.trigger("30 2 * * *", berlin)
    autumn = schedule.firings(
        nightly, datetime(2024, 10, 26, 0, 0, tzinfo=UTC), datetime(2024, 10, 28, 12, 0, tzinfo=UTC)
    )
    assert [f.astimezone(UTC).hour for f in autumn] == [0, 0, 1]  # 02:30 CEST, CEST, CET
    assert schedule.shortest_gap(nightly, datetime(2024, 9, 1, tzinfo=UTC)) == timedelta(days=1)
    shanghai = schedule.trigger("0 9 * * MON", schedule.timezone("Asia/Shanghai"))
    after = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert schedule.next_firing(shanghai, after) == MONDAY_0900_SHANGHAI
    assert schedule.describe("0 9 * * MON") == "At 09:00, only on Monday"


# -- firing ----------------------------------------------------------------------------------


async def test_a_due_slot_fires_once_and_posts_to_the_channel(replicas: Replicas) -> None:
    make, chat, clock = replicas
    a = await make("a")
    await a.runner.start()
    digest = await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    assert await a.digests.fire_due(a.runner) == []  # nothing due yet
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=5)
    (run,) = await a.digests.fire_due(a.runner)
    assert await a.digests.fire_due(a.runner) == []  # the same slot again: nothing
    assert run.digest_id == digest.id
    assert run.thread_key == f"memory:W1:C1:pending-digest-{digest.id}-20261207T0100Z"
    assert run.dedupe_key == f"digest:{digest.id}:20261207T0100Z"
    async with asyncio.timeout(30):
        while not chat.messages(run.thread_key, "report"):
            await chat.changed.wait()
            chat.changed.clear()
    (progress,) = chat.messages(run.thread_key, "progress")
    assert "Research done" in progress.text or "1/1th search executed." in "".join(
        progress.versions
    )

    # Its run has ended and its thread is free: the slot still never fires again.
    async def ended() -> bool:
        stored = await a.store.runs.get_run(run.id)
        return stored is not None and stored.finished_at is not None

    await wait_for(ended)
    assert await a.digests.fire_due(a.runner) == []
    assert [r.id for r in await a.digests.digests.runs(digest.id, limit=10)] == [run.id]


async def test_two_schedulers_racing_for_a_slot_start_one_run(replicas: Replicas) -> None:
    make, _, clock = replicas
    a, b = await make("a"), await make("b")
    await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=1)
    started = await asyncio.gather(*(r.digests.fire_due(None) for r in (a, b, a, b)))
    assert sum(len(runs) for runs in started) == 1


async def test_the_lease_elects_one_scheduler_and_a_survivor_takes_over(replicas: Replicas) -> None:
    make, _, clock = replicas
    a, b = await make("a"), await make("b")
    await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    await a.scheduler.tick()
    await b.scheduler.tick()
    assert (a.scheduler.holder, b.scheduler.holder) == (True, False)
    assert await LeaseStore_holder(a) == "a"
    # a stops renewing (it died); 45 s later b takes over, and catches up on the slot
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=50)
    started = await b.scheduler.tick()
    assert b.scheduler.holder and len(started) == 1
    await a.scheduler.tick()  # a comes back: it is not the holder any more
    assert not a.scheduler.holder


async def LeaseStore_holder(replica: Replica) -> str | None:
    return await replica.scheduler.election.who_holds()


class CutOffLeases(LeaseStore):
    """A lease store whose database stops answering while ``cut_off`` is set."""

    cut_off = False

    async def acquire(self, name: str, owner: str, ttl: float, now: datetime) -> bool:
        if self.cut_off:
            raise StorageUnavailable("the database did not answer")
        return await super().acquire(name, owner, ttl, now)


async def test_a_scheduler_cut_off_from_the_database_stands_by_once_its_lease_ran_out(
    replicas: Replicas, database: Database
) -> None:
    """Unreachable, the holder keeps its jobs while its lease lasts (they fire only while it
    holds), then drops them; another replica takes over after the lease, as from a dead one."""
    make, _, clock = replicas
    a, b = await make("a"), await make("b")
    leases = CutOffLeases(database)
    cut = DigestScheduler(a.digests, leases, a.runner, owner="cut", clock=clock)
    await cut.start()
    try:
        digest = await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
        await cut.tick()
        assert cut.holder and digest.id in cut._jobs
        leases.cut_off = True
        clock.now += timedelta(seconds=30)
        assert await cut.tick() == []  # no exception: the election says it was unreachable
        assert cut.holder and cut.holds and digest.id in cut._jobs  # 15 s of lease left
        clock.now += timedelta(seconds=16)
        assert not cut.holds  # its jobs no longer fire
        await cut.tick()
        assert not cut.holder and cut._jobs == {}
        await b.scheduler.tick()
        assert b.scheduler.holder
    finally:
        await cut.close()


async def test_a_failed_catch_up_gives_the_election_up_and_the_next_tick_catches_up(
    replicas: Replicas,
) -> None:
    make, _, clock = replicas
    a = await make("a")
    await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    clock.now = MONDAY_0900_SHANGHAI + timedelta(minutes=10)  # the 09:00 slot was missed
    enabled = a.digests.digests.enabled

    async def unreachable() -> list[DigestRecord]:
        raise StorageUnavailable("the database did not answer")

    a.digests.digests.enabled = unreachable  # type: ignore[method-assign]
    assert await a.scheduler.tick() == []
    assert not a.scheduler.holder and await LeaseStore_holder(a) is None  # given up
    a.digests.digests.enabled = enabled  # type: ignore[method-assign]
    assert len(await a.scheduler.tick()) == 1  # won again, and caught up this time
    assert a.scheduler.holder


async def test_a_missed_slot_fires_once_at_start_within_the_grace_period_only(
    replicas: Replicas,
) -> None:
    make, _, clock = replicas
    a = await make("a", FATHOM_DIGEST_GRACE="3600")
    await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    clock.now = MONDAY_0900_SHANGHAI + timedelta(minutes=30)  # nothing ran at 09:00
    assert len(await a.scheduler.tick()) == 1
    assert await a.scheduler.tick() == []  # never twice
    b = await make("b", FATHOM_DIGEST_GRACE="3600")
    await b.digests.add(weekly("late"), thread=CHANNEL, created_by="memory:W1:U1")
    # created before the next slot; the process is down until two hours after it
    clock.now = MONDAY_0900_SHANGHAI + timedelta(days=7, hours=2)
    assert await b.digests.fire_due(None, clock.now) == []


async def test_a_removal_on_another_replica_reaches_the_holder(replicas: Replicas) -> None:
    make, _, clock = replicas
    a, b = await make("a"), await make("b")
    await a.scheduler.start()
    digest = await b.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    await a.scheduler.tick()
    assert a.scheduler.holder and digest.id in a.scheduler._jobs
    await b.digests.remove(digest.id, by="memory:W1:U1", is_admin=False, channel=CHANNEL)
    await a.scheduler.tick()
    assert digest.id not in a.scheduler._jobs
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=1)
    assert await a.digests.fire_due(None) == []


async def test_a_later_firing_reports_what_is_new_since_the_previous_one(
    replicas: Replicas, llm_server: FakeLLMServer
) -> None:
    make, _, clock = replicas
    a = await make("a")
    await a.runner.start()
    await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")

    async def firing(at: datetime) -> str:
        clock.now = at
        (run,) = await a.digests.fire_due(a.runner)
        async with asyncio.timeout(30):
            while True:
                done = await a.store.runs.get_run(run.id)
                if done is not None and done.delivery == "posted":
                    return done.report_markdown or ""
                await asyncio.sleep(0.02)

    first = await firing(MONDAY_0900_SHANGHAI + timedelta(seconds=1))
    assert "What's new" not in first
    first_prompt = llm_server.fake.requests_for("writer")[-1].body["messages"][-1]["content"]
    assert "recurring digest" not in first_prompt
    second = await firing(MONDAY_0900_SHANGHAI + timedelta(days=7, seconds=1))
    assert "## What's new since 2026-12-07" in second
    assert second.index("## What's new since") < second.index("## Sources")
    prompt = llm_server.fake.requests_for("writer")[-1].body["messages"][-1]["content"]
    assert "the previous one was written on 2026-12-07" in prompt
    assert "Report: open-source LLM inference engines" in prompt  # the previous report, as data


async def test_a_digest_whose_channel_refuses_its_posts_is_disabled(replicas: Replicas) -> None:
    make, chat, clock = replicas
    a = await make("a")
    await a.runner.start()
    digest = await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    chat.fail("report", Refusal("channel_not_found"))  # the bot was removed from the channel
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=1)
    (run,) = await a.digests.fire_due(a.runner)
    async with asyncio.timeout(30):
        while True:
            done = await a.store.runs.get_run(run.id)
            if done is not None and done.delivery == "failed":
                break
            await asyncio.sleep(0.02)
    await a.scheduler.tick()
    (stored,) = await a.digests.digests.all()
    assert not stored.enabled and "channel_not_found" in (stored.disabled_reason or "")
    assert digest.id not in a.scheduler._jobs
    clock.now += timedelta(days=7)
    assert await a.digests.fire_due(None) == []  # never fired again


async def test_a_digest_added_just_before_its_slot_still_fires_it(replicas: Replicas) -> None:
    """Jobs are added at the next tick, possibly just after the slot: adding one fires a
    slot that is due (once)."""
    make, _, clock = replicas
    a = await make("a")
    clock.now = MONDAY_0900_SHANGHAI - timedelta(seconds=10)
    await a.scheduler.start()
    await a.scheduler.tick()
    assert a.scheduler.holder
    digest = await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=5)  # the tick comes after 09:00
    await a.scheduler.tick()
    assert digest.id in a.scheduler._jobs
    (run,) = await a.digests.digests.runs(digest.id)
    assert run.dedupe_key == f"digest:{digest.id}:20261207T0100Z"


async def test_a_slot_whose_job_firing_was_missed_is_fired_by_the_next_tick(
    replicas: Replicas,
) -> None:
    """The job was added by a tick just before the slot, and its own firing never came (a
    stalled loop; here, a fake clock APScheduler does not follow): the next tick fires the
    slot, once. (The test above raced with the scheduler's own first tick this way.)"""
    make, _, clock = replicas
    a = await make("a")
    clock.now = MONDAY_0900_SHANGHAI - timedelta(seconds=10)
    await a.scheduler.start()
    digest = await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    await a.scheduler.tick()  # the job is added; its slot is 10 s away
    assert digest.id in a.scheduler._jobs
    assert await a.digests.digests.runs(digest.id) == []
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=30)
    await a.scheduler.tick()
    await a.scheduler.tick()  # again: still one run
    (run,) = await a.digests.digests.runs(digest.id)
    assert run.dedupe_key == f"digest:{digest.id}:20261207T0100Z"


async def test_one_broken_digest_does_not_stop_the_others(replicas: Replicas) -> None:
    make, _, clock = replicas
    a = await make("a")
    await a.scheduler.start()
    await a.scheduler.tick()
    assert a.scheduler.holder
    broken = await a.digests.digests.add(
        platform=PLATFORM,
        workspace="W1",
        channel="C1",
        topic="x",
        depth=1,
        strategy="iterative",
        cron="0 9 * * MON",
        timezone="Mars/Olympus_Mons",  # e.g. a zone this machine's tzdata no longer has
        created_by="memory:W1:U1",
        platform_context=None,
        max_per_channel=10,
    )
    good = await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=5)
    await a.scheduler.tick()  # the broken one is logged and skipped; the good one fires
    assert good.id in a.scheduler._jobs and broken.id not in a.scheduler._jobs
    assert len(await a.digests.digests.runs(good.id)) == 1
    assert await a.digests.digests.runs(broken.id) == []
    # The catch-up of a replica that takes over skips it the same way.
    b = await make("b")
    clock.now += timedelta(minutes=5)
    await a.scheduler.close()  # gives the lease up
    await b.scheduler.tick()
    assert b.scheduler.holder


@pytest.mark.parametrize("channel", ["irc:libera:fathom", "cli:local:local"])
async def test_a_digest_that_can_never_be_posted_fails_at_once_and_is_disabled(
    replicas: Replicas, channel: str, llm_server: FakeLLMServer
) -> None:
    """A schedule stored before channels were checked (``digest add`` refuses these now):
    its firing fails at once with the reason instead of staying queued, nothing is spent on
    it, and the scheduler disables the schedule."""
    make, _, clock = replicas
    a = await make("a")
    await a.runner.start()
    platform, workspace, name = channel.split(":")
    digest = await a.digests.digests.add(
        platform=platform,
        workspace=workspace,
        channel=name,
        topic="tides",
        depth=1,
        strategy="iterative",
        cron="0 9 * * MON",
        timezone="Asia/Shanghai",
        created_by="cli:local:operator",
        platform_context=None,
        max_per_channel=10,
        created_at=clock.now,
    )
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=1)
    (run,) = await a.digests.fire_due(a.runner)
    await a.runner.drain()
    failed = await a.store.runs.get_run(run.id)
    assert failed is not None and failed.status == "failed", failed
    assert (
        failed.error == f"cannot deliver to {platform}: {platform!r} is not a chat platform "
        f"(runs are posted to {', '.join(titles())})"
    )
    assert ("queued", platform) not in {(s, p) for s, p, _ in await a.store.runs.count_runs()}
    assert llm_server.fake.requests == []
    await a.scheduler.tick()
    (stored,) = await a.digests.digests.all()
    assert stored.id == digest.id and not stored.enabled
    assert "is not a chat platform" in (stored.disabled_reason or "")
    clock.now += timedelta(days=7)
    assert await a.digests.fire_due(None) == []


# -- chat commands ----------------------------------------------------------------------------


async def test_bad_schedules_are_answered_clearly_and_nothing_is_stored(replicas: Replicas) -> None:
    make, chat, _ = replicas
    a = await make("a", FATHOM_MAX_DEPTH="5")
    cases = [
        ('schedule heat pumps cron="0 9 * *"', "not a valid 5-field cron"),
        ('schedule heat pumps cron="0 9 * * *" tz=Mars/Base', "Unknown timezone 'Mars/Base'"),
        (
            'schedule heat pumps cron="*/5 * * * *"',
            "fires every 5 min; digests may fire at most every 1 h",
        ),
        ('schedule heat pumps cron="0 9 * * *" depth=9', "depth must be from 1 to 5"),
        ("schedule heat pumps", 'A schedule needs cron="<minute hour day month weekday>"'),
        ('schedule heat pumps cron="0 9 30 2 *"', "cron='0 9 30 2 *' never fires"),
    ]
    for i, (text, expected) in enumerate(cases):
        reply = await chat.say(a.commands, text, thread=f"b{i}")
        assert reply is not None and expected in reply.text, reply
        assert 'cron="0 9 * * MON"' in reply.text  # a valid example
        assert "--cron" not in reply.text and "fathom digest" not in reply.text  # chat words
    assert await a.digests.digests.all() == []


async def test_schedule_list_and_unschedule_from_chat(replicas: Replicas) -> None:
    make, chat, _ = replicas
    a = await make("a", FATHOM_ADMINS="UADMIN", FATHOM_MAX_DIGESTS_PER_CHANNEL="2")
    reply = await chat.say(
        a.commands, 'schedule "LLM inference" cron="0 9 * * MON" depth=2 tz=Asia/Shanghai'
    )
    assert reply is not None and "At 09:00, only on Monday (Asia/Shanghai)" in reply.text
    assert "Next run: 2026-12-07 09:00 Asia/Shanghai" in reply.text
    (digest,) = await a.digests.digests.all()
    assert (digest.topic, digest.depth, digest.created_by) == ("LLM inference", 2, "memory:W1:U1")
    listed = await chat.say(a.commands, "digests", user="U2", thread="t2")
    assert listed is not None and f"`{digest.id}` “LLM inference”" in listed.text
    zh = await chat.say(a.commands, "/research 帮助", thread="t3")
    assert zh is not None and "定时摘要" in zh.text
    refused = await chat.say(a.commands, f"unschedule {digest.id}", user="U2", thread="t4")
    assert refused is not None and "Only the person who created" in refused.text
    await chat.say(a.commands, 'schedule wind cron="0 8 * * *"', thread="t5")
    full = await chat.say(a.commands, 'schedule tides cron="0 7 * * *"', thread="t6")
    assert full is not None and "already has 2 schedules" in full.text
    removed = await chat.say(a.commands, f"unschedule {digest.id}", user="UADMIN", thread="t7")
    assert removed is not None and f"Removed the schedule `{digest.id}`" in removed.text
    assert [d.topic for d in await a.digests.digests.all()] == ["wind"]


async def test_a_schedule_delivered_twice_at_once_is_stored_once(replicas: Replicas) -> None:
    make, chat, _ = replicas
    a = await make("a")
    text = 'schedule "LLM inference" cron="0 9 * * MON" tz=Asia/Shanghai'
    replies = await asyncio.gather(*(chat.say(a.commands, text, key="k-once") for _ in range(3)))
    assert sum(r is not None for r in replies) == 1
    assert len(await a.digests.digests.all()) == 1


async def test_a_schedule_keeps_its_sources_and_its_firings_search_them(
    replicas: Replicas,
) -> None:
    make, chat, clock = replicas
    a = await make("a", knowledge=TeamSources(wiki=["memory:W1:C1"]))
    reply = await chat.say(
        a.commands, 'schedule "LLM inference" cron="0 9 * * MON" tz=Asia/Shanghai sources=internal'
    )
    assert reply is not None and "depth 3, `sources=internal`)" in reply.text, reply
    await chat.say(
        a.commands, 'schedule wind cron="0 9 * * MON" tz=Asia/Shanghai sources=web', thread="t2"
    )
    await chat.say(a.commands, 'schedule tides cron="0 9 * * MON" tz=Asia/Shanghai', thread="t3")
    stored = {d.topic: d.sources for d in await a.digests.digests.all()}
    assert stored == {"LLM inference": "internal", "wind": "web", "tides": "all"}
    listed = await chat.say(a.commands, "digests", thread="t4")
    assert listed is not None
    lines = {line.split("“")[1].split("”")[0]: line for line in listed.text.splitlines()[1:]}
    assert lines["LLM inference"].endswith(", `sources=internal`")
    assert lines["wind"].endswith(", `sources=web`")
    assert "sources" not in lines["tides"]  # the default is not shown
    zh = await chat.say(a.commands, "/research 帮助", thread="t5")
    assert zh is not None and "sources=web|internal|all" in zh.text
    clock.now = MONDAY_0900_SHANGHAI + timedelta(seconds=1)
    runs = await a.digests.fire_due(None)
    assert sorted((r.topic, r.sources) for r in runs) == [
        ("LLM inference", "internal"),
        ("tides", "all"),
        ("wind", "web"),
    ]


async def test_a_schedule_with_sources_internal_is_refused_where_none_may_be_used(
    replicas: Replicas,
) -> None:
    make, chat, _ = replicas
    for i, knowledge in enumerate((None, TeamSources(wiki=["memory:W1:C2"]))):
        a = await make(f"a{i}", knowledge=knowledge)
        text = 'schedule "LLM inference" cron="0 9 * * MON" sources=internal'
        reply = await chat.say(a.commands, text, thread=f"t{i}")
        assert reply is not None and "No internal source is available in this channel" in reply.text
        zh = await chat.say(
            a.commands,
            '/research schedule 固态电池的最新进展 cron="0 9 * * MON" sources=internal',
            thread=f"z{i}",
        )
        assert zh is not None and "这个频道没有可用的内部来源" in zh.text
        if knowledge is not None:
            assert knowledge.asked == ["memory:W1:C1:t1", "memory:W1:C1:z1"]
    assert await a.digests.digests.all() == []


async def test_a_digest_with_an_unknown_sources_value_fires_with_the_default(
    replicas: Replicas,
) -> None:
    """A value this code does not know (written by a newer release, or by hand) reads as
    ``all``: the firing's scope is still decided from its channel where it runs."""
    from core.operations.digests import digest_sources
    from core.values import SourceChoice

    make, _, _ = replicas
    a = await make("a")
    digest = await a.digests.add(weekly(), thread=CHANNEL, created_by="memory:W1:U1")
    assert digest.sources == "all" and digest_sources(digest) is SourceChoice.ALL
    odd = dataclasses.replace(digest, sources="intranet")
    assert digest_sources(odd) is SourceChoice.ALL
