"""Two real ``fathom serve`` processes on one PostgreSQL database: one is killed mid-run.

The surviving replica's periodic sweep takes the run over (no restart): it resumes from the
checkpoint without repeating a search, keeps editing the same Slack progress message, and
posts exactly one report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.databases import throwaway_database
from tests.fakes import FakeLLMServer, FakeSearchServer, Hang, Reply
from tests.fakes.slack import FakeSlackServer, is_report, sign, slash_command_body
from tests.test_serve import Served, serve, terminate, wait_until_up
from tests.test_slack_app import BOT_TOKEN, FORM, SECRET

STALE_AFTER = 2  # seconds: the survivor takes over within about three


@pytest.fixture
def postgres_url() -> Iterator[str]:
    server_url = os.environ.get("TEST_DATABASE_URL")
    if not server_url:
        pytest.skip("TEST_DATABASE_URL is not set; the replica test needs PostgreSQL")
    with throwaway_database(server_url) as url:
        yield url


def wait_until(
    condition: Callable[[], Any], what: str | Callable[[], str], within: float = 45
) -> Any:
    """Poll ``condition`` until truthy; ``what`` (or what it returns, e.g. a process's log)
    says what was waited for when it times out."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what if isinstance(what, str) else what()}")


def run_row(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """The one thread's runs, through ``fathom thread`` (what an operator would look at)."""
    listed = subprocess.run(
        [sys.executable, "-m", "bots.cli", "thread", "list", "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    [thread] = json.loads(listed.stdout)
    shown = subprocess.run(
        [sys.executable, "-m", "bots.cli", "thread", "show", thread["thread"]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    data: dict[str, Any] = json.loads(shown.stdout)
    return data


def test_a_killed_replicas_run_is_finished_by_the_other_one(
    cli_env: dict[str, str],
    postgres_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    slack_server: FakeSlackServer,
    tmp_path: Path,
) -> None:
    env = {
        **cli_env,
        "DATABASE_URL": postgres_url,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack_server.api_url,
        "FATHOM_SLACK_EDIT_INTERVAL": "0.05",
        "FATHOM_STALE_RUN_AFTER": str(STALE_AFTER),
    }
    subprocess.run(
        [sys.executable, "-m", "bots.cli", "db", "upgrade"], cwd=tmp_path, env=env, check=True
    )
    # The first plan answers at once; the second keeps the first replica busy until it dies.
    plan = {"nextSearchTopic": "tidal power overview", "shouldContinue": True}
    llm_server.fake.script("planner", Reply(json.dumps(plan)), Hang(20))
    doomed: Served = serve(env, tmp_path)
    survivor: Served = serve(env, tmp_path)
    fake = slack_server.fake
    try:
        wait_until_up(doomed)
        wait_until_up(survivor)
        body = slash_command_body("tidal power depth=3", trigger_id="replica-1")
        ack = httpx.post(
            f"{doomed.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
        )
        assert ack.status_code == 200, ack.text

        def first_search_shown() -> bool:
            return any(
                "1/3th search executed." in str(c.params.get("text"))
                for c in fake.calls_to("chat.update")
            )

        wait_until(first_search_shown, "the first search's progress edit")
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)

        def reported() -> bool:
            return any(is_report(m) for m in fake.history)

        wait_until(reported, "a report from the survivor")

        def delivery_done() -> dict[str, Any] | None:
            data = run_row(env, tmp_path)
            return data if data["runs"][0]["delivery"]["state"] == "posted" else None

        # Its delivery recorded as done, after every part: no sweep takes such a run again
        # (test_the_sweep_finds_exactly_the_runs_nobody_works_on), so no later post can come.
        data = wait_until(delivery_done, "the survivor to record the delivery")
    finally:
        if doomed.proc.poll() is None:
            doomed.proc.kill()
        code = terminate(survivor)
    assert code == 0, survivor.stderr()

    # No search repeated: the first was checkpointed before the kill; the rest by the survivor.
    queries = search_server.fake.queries
    assert len(queries) == 3 == len(set(queries)), queries
    assert queries[0] == "tidal power overview"

    # One opener, edited in place by both replicas; one report in its thread.
    posts = fake.calls_to("chat.postMessage")
    [opener] = [p for p in posts if "thread_ts" not in p.params]
    opener_ts = next(m["ts"] for m in fake.history if m["text"] == opener.params["text"])
    assert {c.params["ts"] for c in fake.calls_to("chat.update")} == {opener_ts}
    edits = [str(c.params["text"]).splitlines()[-1] for c in fake.calls_to("chat.update")]
    assert any(e.startswith("Resuming") and "1 of 3 searches done" in e for e in edits), edits
    final = str(fake.calls_to("chat.update")[-1].params["text"])
    assert "Research done: 3/3 searches" in final and edits[-1].startswith("3 searches · ")
    reports = [m for m in fake.history if is_report(m)]
    assert reports and all(m["thread_ts"] == opener_ts for m in reports)
    texts = [m["blocks"][0]["text"] for m in reports]
    assert len(texts) == len(set(texts))  # no part twice

    [run] = data["runs"]
    assert run["status"] == "succeeded" and run["attempt"] == 2
    assert run["owner"].split(":")[1] == str(survivor.proc.pid)
    assert run["delivery"]["state"] == "posted"
    assert run["delivery"]["report_parts_posted"] == len(reports)
    assert data["variables"]["topics"] == queries
