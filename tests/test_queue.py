"""``FATHOM_QUEUE=procrastinate``: runs queued in PostgreSQL and executed by workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bots.chat.memory import PLATFORM, MemoryChat
from core.config import load_settings
from core.delivery import DeliveryPolicy, ResearchJob
from core.llm import ChatModel
from core.models import ResearchRequest, ThreadKey
from core.queue import ProcrastinateJobRunner, ProcrastinateQueue, queue_in_transaction
from core.search import SearxngProvider
from core.service import ResearchService
from storage import Database, Store
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.test_engine import KEY

postgresql_only = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@postgresql_only
async def test_a_queued_run_is_executed_by_a_worker_and_queued_once(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    store = Store(database, on_new_run=queue_in_transaction)
    chat = MemoryChat()
    async with httpx.AsyncClient(trust_env=False) as http:
        model = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=1)
        service = ResearchService(
            store=store,
            planner=model,
            writer=model,
            search=SearxngProvider(http, base_url=search_server.url, base_delay=0.01),
        )
        policy = DeliveryPolicy(attempts=3, first_delay=0.01, max_delay=0.05)
        job = ResearchJob(service, store, {PLATFORM: chat.factory(store)}, policy=policy)
        thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="t1")
        run, _ = await service.submit(ResearchRequest(topic="tidal power", depth=2, thread=thread))
        async with ProcrastinateQueue(database_url, job) as queue:
            runner = ProcrastinateJobRunner(queue, job=job, store=store, timing=service.timing)
            # Queued by the transaction that created the run; queueing again adds nothing.
            assert await queue.defer(run.id) is False
            await runner.enqueue(run.id)
            assert await runner.sweep() == []  # nor does a sweep: it is queued already
            await queue.work(concurrency=2, wait=False)  # until the queue is empty
        await model.aclose()
    done = await store.get_run(run.id)
    assert done is not None and (done.status, done.delivery) == ("succeeded", "posted")
    assert chat.messages(thread, "report")
    (progress,) = chat.messages(thread, "progress")
    assert "Research done: 2/2 searches" in progress.text


@postgresql_only
async def test_a_run_is_committed_queued_or_not_at_all(database: Database) -> None:
    """The run row and its job are written in one transaction."""
    from sqlalchemy import text

    def queue_then_fail(conn: object, run_id: str) -> None:
        queue_in_transaction(conn, run_id)  # type: ignore[arg-type]
        raise RuntimeError("the process died here")

    thread = ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread="t2")
    request = ResearchRequest(topic="wave power", depth=1, thread=thread)
    broken = ResearchService(
        store=Store(database, on_new_run=queue_then_fail), planner=None, writer=None, search=None
    )  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        await broken.submit(request)
    store = Store(database, on_new_run=queue_in_transaction)
    assert await store.get_thread(str(thread)) is None  # not even the thread

    def jobs(conn: object) -> list[tuple[str, str]]:
        rows = conn.execute(  # type: ignore[attr-defined]
            text("SELECT queueing_lock, status::text FROM procrastinate_jobs")
        )
        return [tuple(r) for r in rows]

    assert await database.run(jobs) == []
    service = ResearchService(store=store, planner=None, writer=None, search=None)  # type: ignore[arg-type]
    run, _ = await service.submit(request)
    assert await database.run(jobs) == [(run.id, "todo")]


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
