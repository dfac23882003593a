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
from core.queue import ProcrastinateJobRunner, ProcrastinateQueue
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
    store = Store(database)
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
            await runner.enqueue(run.id)
            assert await queue.defer(run.id) is False  # a retried request queues nothing more
            assert await runner.sweep() == []  # nor does a sweep: it is queued already
            await queue.work(concurrency=2, wait=False)  # until the queue is empty
        await model.aclose()
    done = await store.get_run(run.id)
    assert done is not None and (done.status, done.delivery) == ("succeeded", "posted")
    assert chat.messages(thread, "report")
    (progress,) = chat.messages(thread, "progress")
    assert "Research done: 2/2 searches" in progress.text


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
