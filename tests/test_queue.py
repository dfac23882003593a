"""``FATHOM_QUEUE=procrastinate``: runs queued in PostgreSQL and executed by workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from bots.chat.memory import PLATFORM, MemoryChat
from core.llm import ChatModel
from core.operations.job import DeliveryPolicy, ResearchJob
from core.operations.queue import ProcrastinateJobRunner, ProcrastinateQueue, queue_in_transaction
from core.research.policy import RunPolicy
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.search import SearxngProvider
from core.settings import load_settings
from core.values import ThreadKey
from storage import Database, Store
from tests.cli import fathom
from tests.databases import throwaway_database
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.fakes.slack import FakeSlackServer, is_report, sign, slash_command_body
from tests.runs import age_heartbeat, claim
from tests.test_engine import KEY
from tests.test_replicas import wait_until
from tests.test_serve import (  # noqa: F401 (fixtures)
    Served,
    serve,
    slack_env,
    terminate,
    wait_until_up,
)
from tests.test_slack_app import FORM, SECRET

postgresql_only = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@asynccontextmanager
async def research_job(
    store: Store,
    chat: MemoryChat,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    *,
    max_attempts: int = 3,
) -> AsyncIterator[tuple[Research, ResearchJob]]:
    """What a worker executes, against the fake model and search, delivering to ``chat``."""
    async with httpx.AsyncClient(trust_env=False) as http:
        model = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=1)
        try:
            service = Research(
                store=store,
                planner=model,
                writer=model,
                search=SearxngProvider(http, base_url=search_server.url, base_delay=0.01),
                policy=RunPolicy(max_attempts=max_attempts),
            )
            policy = DeliveryPolicy(attempts=3, first_delay=0.01, max_delay=0.05)
            yield (
                service,
                ResearchJob(
                    service.executor,
                    store.runs,
                    store.claims,
                    {PLATFORM: chat.factory(store)},
                    policy=policy,
                ),
            )
        finally:
            await model.aclose()


@postgresql_only
async def test_a_queued_run_is_executed_by_a_worker_and_queued_once(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    store = Store(database, on_new_run=queue_in_transaction)
    chat = MemoryChat()
    async with research_job(store, chat, llm_server, search_server) as (service, job):
        thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="t1")
        run, _ = await service.requests.submit(
            ResearchRequest(topic="tidal power", depth=2, thread=thread)
        )
        async with RecordingQueue(database_url, job) as queue:
            runner = ProcrastinateJobRunner(
                queue, job=job, runs=store.runs, claims=store.claims, timing=service.executor.timing
            )
            # Queued by the transaction that created the run; queueing again adds nothing.
            assert await queue.defer(run.id) is False
            await runner.enqueue(run.id)  # ... so the runner does not even try
            assert queue.deferred == [run.id]  # (the call just above)
            assert await runner.sweep() == []  # nor does a sweep: it is queued already
            await queue.work(concurrency=2, wait=False)  # until the queue is empty
    done = await store.runs.get_run(run.id)
    assert done is not None and (done.status, done.delivery) == ("succeeded", "posted")
    assert chat.messages(thread, "report")
    (progress,) = chat.messages(thread, "progress")
    assert "Research done: 2/2 searches" in progress.text


@postgresql_only
async def test_a_console_run_is_never_queued_for_the_workers(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    """``fathom research`` executes its own run: its creating transaction queues nothing, so
    no worker picks it up (the queue's lock for it is free)."""
    store = Store(database, on_new_run=queue_in_transaction)
    chat = MemoryChat()
    async with research_job(store, chat, llm_server, search_server) as (service, job):
        thread = ThreadKey(platform="cli", workspace="local", channel="local", thread="c1")
        run, _ = await service.requests.submit(
            ResearchRequest(topic="tidal power", depth=1, thread=thread)
        )
        async with RecordingQueue(database_url, job) as queue:
            assert await queue.defer(run.id) is True  # nothing held its queueing lock


class RecordingQueue(ProcrastinateQueue):
    """The real queue, recording which runs were deferred through it."""

    def __init__(self, database_url: str, job: ResearchJob | None = None) -> None:
        super().__init__(database_url, job)
        self.deferred: list[str] = []

    async def defer(self, run_id: str) -> bool:
        self.deferred.append(run_id)
        return await super().defer(run_id)


@postgresql_only
async def test_a_runner_queues_a_new_run_only_when_its_store_did_not(
    database: Database, database_url: str
) -> None:
    """The acknowledgement path: a run created by a queueing store is queued with its row, so
    enqueueing it costs nothing more; a run created otherwise is deferred by the runner."""
    job = ResearchJob(
        Research(store=Store(database), planner=None, writer=None, search=None).executor,  # type: ignore[arg-type]
        Store(database).runs,
        Store(database).claims,
    )
    for n, store in enumerate((Store(database, on_new_run=queue_in_transaction), Store(database))):
        thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread=f"new{n}")
        service = Research(store=store, planner=None, writer=None, search=None)  # type: ignore[arg-type]
        run, _ = await service.requests.submit(
            ResearchRequest(topic="geothermal", depth=1, thread=thread)
        )
        async with RecordingQueue(database_url) as queue:
            await ProcrastinateJobRunner(
                queue, job=job, runs=store.runs, claims=store.claims
            ).enqueue(run.id)
        assert queue.deferred == ([] if store.runs.queues_new_runs else [run.id])
        assert (run.id, "todo") in await database.run(job_rows)  # queued either way


class UntidyQueue(ProcrastinateQueue):
    """The real queue, except that deleting dead workers' jobs fails."""

    async def forget_stalled(self, run_ids: list[str]) -> int:
        raise RuntimeError("the tidying statement failed")


@postgresql_only
async def test_a_sweep_queues_runs_again_even_when_tidying_fails(
    database: Database, database_url: str
) -> None:
    store = Store(database)
    service = Research(store=store, planner=None, writer=None, search=None)  # type: ignore[arg-type]
    thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="untidy")
    run, _ = await service.requests.submit(
        ResearchRequest(topic="tidal range", depth=1, thread=thread)
    )
    await claim(store, run.id, owner="dead-worker")
    await age_heartbeat(database, run.id)
    job = ResearchJob(
        service.executor, store.runs, store.claims, {PLATFORM: MemoryChat().factory(store)}
    )
    async with UntidyQueue(database_url) as queue:
        runner = ProcrastinateJobRunner(
            queue, job=job, runs=store.runs, claims=store.claims, timing=service.executor.timing
        )
        assert await runner.sweep() == [run.id]
    assert await database.run(job_rows) == [(run.id, "todo")]


@postgresql_only
async def test_a_run_whose_workers_keep_dying_fails_and_tells_its_thread(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    """FATHOM_MAX_ATTEMPTS under workers: two workers died holding the run (their claims are
    in the database, their heartbeats old); the next worker's sweep queues it, and the worker
    that takes it fails it with the reason and posts that in the thread, spending nothing."""
    store = Store(database, on_new_run=queue_in_transaction)
    chat = MemoryChat()
    async with research_job(store, chat, llm_server, search_server, max_attempts=2) as (
        service,
        job,
    ):
        thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="poison")
        run, _ = await service.requests.submit(
            ResearchRequest(topic="poison pill", depth=2, thread=thread)
        )
        async with ProcrastinateQueue(database_url, job) as queue:
            runner = ProcrastinateJobRunner(
                queue, job=job, runs=store.runs, claims=store.claims, timing=service.executor.timing
            )
            jobs = queue.app.job_manager
            for dead in ("worker-a", "worker-b"):
                # What a worker SIGKILLed mid-run leaves: its job fetched ('doing', for ever),
                # the run claimed by it, and a heartbeat that stopped.
                worker_id = await jobs.register_worker()
                fetched = await jobs.fetch_job(None, worker_id)
                assert fetched is not None and fetched.task_kwargs == {"run_id": run.id}
                await claim(store, run.id, owner=dead, max_attempts=2)
                await age_heartbeat(database, run.id)
                await database.run(stop_heartbeat(worker_id))
                assert await runner.sweep() == [run.id]  # queued again, for the next worker
                assert await database.run(job_rows) == [(run.id, "todo")]  # the dead one: gone
            await queue.work(concurrency=1, wait=False)
    final = await store.runs.get_run(run.id)
    assert final is not None and (final.status, final.delivery) == ("failed", "posted")
    assert final.attempt == 2 and "gave up after 2 attempts" in (final.error or "")
    assert llm_server.fake.requests == [] and search_server.fake.queries == []
    (progress,) = chat.messages(thread, "progress")
    assert progress.text.splitlines() == [
        "poison pill",
        "Research failed after 0 of 2 searches: gave up after 2 attempts: the process running "
        "it stopped each time (FATHOM_MAX_ATTEMPTS)",
    ]
    assert chat.messages(thread, "report") == []
    assert await database.run(job_rows) == []  # the job that ended: deleted with it


def job_rows(conn: Connection) -> list[tuple[str, str]]:
    """procrastinate's job table: (run id, status) per row."""
    rows = conn.execute(text("SELECT args->>'run_id', status::text FROM procrastinate_jobs"))
    return [(str(run_id), str(status)) for run_id, status in rows]


def stop_heartbeat(worker_id: int) -> Callable[[Connection], None]:
    """What a worker that died ten minutes ago leaves: procrastinate's heartbeat of it stopped."""

    def work(conn: Connection) -> None:
        conn.execute(
            text(
                "UPDATE procrastinate_workers SET last_heartbeat = now() - interval '10 minutes' "
                "WHERE id = :id"
            ),
            {"id": worker_id},
        )

    return work


@postgresql_only
async def test_a_run_is_committed_queued_or_not_at_all(database: Database) -> None:
    """The run row and its job are written in one transaction."""

    def queue_then_fail(conn: object, run_id: str) -> None:
        queue_in_transaction(conn, run_id)  # type: ignore[arg-type]
        raise RuntimeError("the process died here")

    thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="t2")
    request = ResearchRequest(topic="wave power", depth=1, thread=thread)
    broken = Research(
        store=Store(database, on_new_run=queue_then_fail), planner=None, writer=None, search=None
    )  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        await broken.requests.submit(request)
    store = Store(database, on_new_run=queue_in_transaction)
    assert await store.threads.get_thread(str(thread)) is None  # not even the thread

    def jobs(conn: object) -> list[tuple[str, str]]:
        rows = conn.execute(  # type: ignore[attr-defined]
            text("SELECT queueing_lock, status::text FROM procrastinate_jobs")
        )
        return [tuple(r) for r in rows]

    assert await database.run(jobs) == []
    service = Research(store=store, planner=None, writer=None, search=None)  # type: ignore[arg-type]
    run, _ = await service.requests.submit(request)
    assert await database.run(jobs) == [(run.id, "todo")]


@postgresql_only
async def test_fathom_digest_run_queues_its_run_for_the_workers(
    database: Database, database_url: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """`fathom digest run` under FATHOM_QUEUE=procrastinate: the run is queued with its row,
    so a worker starts it at once instead of after the next sweep finds it."""
    env = {
        **cli_env,
        "DATABASE_URL": database_url,
        "FATHOM_QUEUE": "procrastinate",
        "SLACK_BOT_TOKEN": "xoxb-test",  # a digest is refused for a platform not configured
    }
    digest = ["digest", "add", "tidal power", "--cron", "0 9 * * *", "--channel", "slack:T:C"]
    added = fathom(*digest, env=env, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    fired = fathom("digest", "run", added.stdout.strip(), env=env, cwd=tmp_path)
    assert fired.returncode == 0, fired.stderr
    assert await database.run(job_rows) == [(fired.stdout.strip(), "todo")]


def test_the_queue_needs_postgresql(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "FATHOM_QUEUE": "procrastinate"}  # DATABASE_URL is a SQLite file
    for command in (["worker"], ["serve", "--port", "1"]):
        result = subprocess.run(
            [sys.executable, "-m", "bots.cli", *command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, result.stderr
        assert "FATHOM_QUEUE=procrastinate needs DATABASE_URL to be PostgreSQL" in result.stderr
    local = {**cli_env, "FATHOM_QUEUE": "local"}
    refused = subprocess.run(
        [sys.executable, "-m", "bots.cli", "worker"],
        cwd=tmp_path,
        env=local,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "needs FATHOM_QUEUE=procrastinate" in refused.stderr
    assert load_settings(_env_file=None, FATHOM_QUEUE="PROCRASTINATE").queue == "procrastinate"


def _sql(url: str, query: str) -> list[tuple[object, ...]]:
    import psycopg

    from core.operations.queue import conninfo

    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        return [tuple(row) for row in conn.execute(query)]


def _worker(env: dict[str, str], cwd: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bots.cli", "worker", "--concurrency", "5"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(cwd / f"{name}.log").open("wb"),
    )


def test_a_killed_worker_s_runs_are_finished_by_another_with_one_report_each(
    slack_env: dict[str, str],  # noqa: F811
    slack_server: FakeSlackServer,
    llm_server: FakeLLMServer,
    tmp_path: Path,
) -> None:
    """Two `fathom serve` (they only queue) and two `fathom worker`s on one PostgreSQL; 20
    requests through the fake Slack, half to each serve; one worker is SIGKILLed while it holds
    runs: every run ends succeeded, with exactly one report and a finished progress message."""
    server_url = os.environ.get("TEST_DATABASE_URL")
    if not server_url:
        pytest.skip("TEST_DATABASE_URL is not set; PostgreSQL tests skipped")
    runs = 20
    with throwaway_database(server_url) as url:
        env = {
            **slack_env,
            "DATABASE_URL": url,
            "FATHOM_QUEUE": "procrastinate",
            "FATHOM_STALE_RUN_AFTER": "3",  # a dead worker's runs are taken over after 3 s
            "FATHOM_LOG_LEVEL": "INFO",
        }
        llm_server.fake.latency = 0.3  # each run takes a few seconds
        served, other = serve(env, tmp_path), serve(env, tmp_path)
        workers: list[subprocess.Popen[bytes]] = []
        try:
            wait_until_up(served)
            wait_until_up(other)
            workers = [_worker(env, tmp_path, f"worker{i}") for i in range(2)]
            for i in range(runs):
                body = slash_command_body(
                    "tidal power depth=2",
                    channel_id=f"C{i:04d}",
                    user_id=f"U{i:04d}",
                    trigger_id=f"q-{i}",
                )
                answer = httpx.post(
                    f"{(served, other)[i % 2].url}/slack/events",
                    content=body,
                    headers={**sign(body, SECRET), **FORM},
                )
                assert answer.status_code == 200 and "On it" in answer.json()["text"]

            def held_by(proc: subprocess.Popen[bytes]) -> bool:
                owners = _sql(url, "SELECT owner FROM research_runs WHERE status = 'running'")
                return any(f":{proc.pid}:" in str(owner) for (owner,) in owners)

            victim = wait_until(
                lambda: next((w for w in workers if held_by(w)), None), served.stderr
            )
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)

            def finished() -> bool:
                rows = _sql(url, "SELECT status, delivery FROM research_runs")
                return len(rows) == runs and all(r == ("succeeded", "posted") for r in rows)

            wait_until(finished, served.stderr, within=120)
        finally:
            llm_server.fake.latency = 0.0
            for proc in workers:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)
            terminate(served)
            terminate(other)
        fake = slack_server.fake
        reports = [c for c in fake.calls_to("chat.postMessage") if is_report(c.params)]
        assert sorted(c.params["channel"] for c in reports) == [f"C{i:04d}" for i in range(runs)]
        progress = _sql(url, "SELECT progress_message_id FROM research_runs")
        channels = {ts: channel for (channel, ts) in fake.messages}
        for (ts,) in progress:
            text = fake.messages[(channels[ts], ts)]["text"]
            assert "Research done" in text, text
        took_over = _sql(url, "SELECT count(*) FROM research_runs WHERE attempt > 1")
        assert took_over[0][0] >= 1  # the victim's runs were continued by the other worker


def test_a_stopped_worker_hands_its_runs_back_for_another(
    slack_env: dict[str, str],  # noqa: F811
    slack_server: FakeSlackServer,
    llm_server: FakeLLMServer,
    tmp_path: Path,
) -> None:
    """SIGTERM to a worker in the middle of a run longer than its grace: it exits cleanly and
    hands the run back at once (no wait for the lease); the next worker finishes it from its
    checkpoint, with one report."""
    server_url = os.environ.get("TEST_DATABASE_URL")
    if not server_url:
        pytest.skip("TEST_DATABASE_URL is not set; PostgreSQL tests skipped")
    with throwaway_database(server_url) as url:
        env = {
            **slack_env,
            "DATABASE_URL": url,
            "FATHOM_QUEUE": "procrastinate",
            "FATHOM_STALE_RUN_AFTER": "600",  # only a hand-back lets another worker take it
            "FATHOM_LOG_LEVEL": "INFO",
        }
        served = serve(env, tmp_path)
        first = second = None
        try:
            wait_until_up(served)
            first = _worker(env, tmp_path, "first")
            # Each model call takes 4 s: the run outlasts the worker's 10 s of grace.
            llm_server.fake.latency = 4.0
            body = slash_command_body("tidal power depth=3", trigger_id="stop-1")
            answer = httpx.post(
                f"{served.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
            )
            assert answer.status_code == 200
            wait_until(
                lambda: _sql(url, "SELECT 1 FROM research_runs WHERE status = 'running'"),
                served.stderr,
            )
            first.send_signal(signal.SIGTERM)
            assert first.wait(60) == 0
            (row,) = _sql(url, "SELECT status, owner FROM research_runs")
            assert row == ("queued", None)  # handed back
            llm_server.fake.latency = 0.0
            second = _worker(env, tmp_path, "second")

            def delivered() -> bool:
                return _sql(url, "SELECT status, delivery FROM research_runs") == [
                    ("succeeded", "posted")
                ]

            wait_until(delivered, served.stderr, within=90)
        finally:
            llm_server.fake.latency = 0.0
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)
            terminate(served)
        reports = [c for c in slack_server.fake.calls_to("chat.postMessage") if is_report(c.params)]
        assert len(reports) == 1
