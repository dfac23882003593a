"""Log lines: JSON with the run and thread they are about, never a credential."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from bots.platforms import secret_patterns
from core.logs import Changing, Redactor, change_log_context, json_formatter, log_context
from core.operations.job import ResearchJob
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.values import ThreadKey
from storage import Store


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the root logger writes, as JSON lines (the handler ``FATHOM_LOG_FORMAT=json``
    installs)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter(Redactor(secret_patterns())))
    root = logging.getLogger()
    root.addHandler(handler)
    level, root.level = root.level, logging.INFO
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def parsed(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_a_json_line_carries_its_context_and_no_secret(lines: io.StringIO) -> None:
    log = logging.getLogger("fathom.test")
    with log_context(run_id="r1", thread="slack:T1:C1:1.2"):
        log.warning("posting with xoxb-1234567890-secret failed")
        try:
            raise RuntimeError("Bearer sk-abcdefghijklmnop")
        except RuntimeError:
            log.exception("crashed")
    log.info("outside")
    first, second, third = parsed(lines)
    assert first["run_id"] == "r1" and first["thread"] == "slack:T1:C1:1.2"
    assert first["level"] == "warning" and first["logger"] == "fathom.test"
    assert "xoxb-1234567890-secret" not in json.dumps(first) and "xoxb-" in str(first["message"])
    assert "sk-abcdefghijklmnop" not in str(second["exception"])
    assert "run_id" not in third and third["message"] == "outside"
    assert str(first["time"]).endswith("Z") or "+00:00" in str(first["time"])


async def test_a_research_job_logs_with_its_run_and_thread(
    lines: io.StringIO, store: Store
) -> None:
    """A job for a run that this process cannot deliver (no such platform here) says so in a
    line that names the run and its thread."""
    service = Research(store=store, planner=None, writer=None, search=None)  # type: ignore[arg-type]
    thread = ThreadKey(platform="nowhere", workspace="W", channel="C", thread="t")
    run, _ = await service.requests.submit(ResearchRequest(topic="tides", depth=1, thread=thread))
    await ResearchJob(service.executor, store.runs, store.claims)(run.id)
    (line,) = [e for e in parsed(lines) if "no nowhere delivery" in str(e["message"])]
    assert line["run_id"] == run.id and line["thread"] == str(thread)


async def test_a_changing_context_value_reaches_the_lines_after_its_change(
    lines: io.StringIO,
) -> None:
    """A slash command's run starts in the thread ``pending-<trigger>`` and learns its real
    key when its opener is posted, from a task of its own: the lines logged after that, in
    the run's task and in tasks it started before, carry the real key."""
    log = logging.getLogger("fathom.test")
    with log_context(run_id="r1", thread=Changing("slack:T1:C1:pending-9")):
        log.warning("before")
        started = asyncio.Event()
        changed = asyncio.Event()

        async def sibling() -> None:  # started before the change (a copy of the context)
            started.set()
            await changed.wait()
            log.warning("sibling after")

        task = asyncio.create_task(sibling())
        await started.wait()

        async def opener_posted() -> None:
            change_log_context("thread", "slack:T1:C1:1700000000.0001")

        await asyncio.create_task(opener_posted())
        changed.set()
        await task
        log.warning("after")
    before, sibling_after, after = parsed(lines)
    assert before["thread"] == "slack:T1:C1:pending-9"
    assert sibling_after["thread"] == after["thread"] == "slack:T1:C1:1700000000.0001"
