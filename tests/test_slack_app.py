"""The Slack input side end to end: signed requests over HTTP into the real Starlette app.

The app runs under uvicorn in a thread with its lifespan (runtime, job runner, Bolt); the
fake Slack Web API, LLM and search services are real HTTP servers. Requests are signed
exactly as Slack signs them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qsl

import aiohttp
import httpx
import pytest
import yaml
from aiohttp import web
from sqlalchemy import MetaData, text
from sqlalchemy import inspect as sa_inspect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from bots.chat.replies import Replies
from bots.composition import AppSettings
from bots.server import create_app
from bots.slack.markup import SlackMarkup, clean_text
from storage import Database, RunRecord, Store
from tests.chat_app import LifespanServer, fathom_settings, runs_table_away, wait_for
from tests.databases import MigratedTemplates
from tests.env import is_fathom_setting
from tests.fakes import FakeLLMServer, FakeSearchServer, Held
from tests.fakes.server import BackgroundServer
from tests.fakes.slack import (
    FILES,
    FakeSlack,
    FakeSlackServer,
    SlackCall,
    app_mention_event,
    block_actions_body,
    build_slack_app,
    channel_message_event,
    event_callback_body,
    im_message_event,
    is_report,
    sign,
    slash_command_body,
    url_verification_body,
    with_files,
)

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-fathom-test-token"
USER = "slack:T0001:U123"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
JSON = {"Content-Type": "application/json"}


# -- helpers ----------------------------------------------------------------------------


def slack_settings(
    database_url: str,
    llm: FakeLLMServer,
    search: FakeSearchServer,
    slack_api_url: str,
    **extra: str,
) -> AppSettings:
    values = {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack_api_url,
        "FATHOM_SLACK_EDIT_INTERVAL": "0.05",
        **extra,
    }
    return fathom_settings(database_url, llm, search, **values)


@dataclass
class Bot:
    """The served app plus handles on every fake and on the database."""

    url: str
    http: httpx.AsyncClient
    slack: FakeSlack
    llm: FakeLLMServer
    search: FakeSearchServer
    store: Store
    database: Database

    async def post(
        self, body: bytes, headers: dict[str, str], *, secret: str = SECRET, ts: int | None = None
    ) -> httpx.Response:
        signed = sign(body, secret, ts)
        return await self.http.post(
            f"{self.url}/slack/events", content=body, headers={**signed, **headers}
        )

    async def command(self, text: str, **fields: str) -> httpx.Response:
        return await self.post(slash_command_body(text, **fields), FORM)

    async def event(self, event: dict[str, Any], event_id: str, **headers: str) -> httpx.Response:
        return await self.post(event_callback_body(event, event_id=event_id), {**JSON, **headers})

    async def runs(self, user: str = USER) -> list[RunRecord]:
        return await self.store.runs.recent_runs_for_user(user, 100)

    async def finished(self, count: int = 1, user: str = USER) -> list[RunRecord]:
        """Wait until ``count`` runs of ``user`` have finished and been delivered (their
        report posted, or given up on)."""

        async def done() -> list[RunRecord] | None:
            runs = await self.runs(user)
            ok = len(runs) >= count and all(
                r.finished_at and r.delivery in ("posted", "failed") for r in runs
            )
            return runs if ok else None

        runs: list[RunRecord] = await wait_for(done, within=30)
        return runs

    async def answer_later(self, event_id: str) -> list[SlackCall]:
        """A later event that proves the earlier ones were handled: a DM asking for help,
        waited for until its (ephemeral) answer is posted. Each earlier delivery was
        acknowledged before this one was sent, so its listener was scheduled first, and one
        that ignores or drops a delivery does less than answering it. Returns the ephemeral
        answers posted so far (this one last)."""
        before = len(self.slack.calls_to("chat.postEphemeral"))
        await self.event(im_message_event("help"), event_id)
        answers: list[SlackCall] = await wait_for(
            lambda: (calls := self.slack.calls_to("chat.postEphemeral"))[before:] and calls
        )
        assert "/research <topic>" in answers[-1].params["text"], answers[-1].params
        return answers

    def reports(self) -> list[dict[str, Any]]:
        """Report messages Slack accepted (refused attempts are not in the channel)."""
        return [
            message
            for message in self.slack.history
            if any(b.get("type") == "markdown" for b in message.get("blocks") or [])
        ]

    def final_text(self, channel: str, ts: str) -> str:
        return str(self.slack.messages[(channel, ts)]["text"])


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if is_fathom_setting(name):
            monkeypatch.delenv(name)


BotFactory = Callable[..., Awaitable[Bot]]


@pytest.fixture
async def start_bot(
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    slack_server: FakeSlackServer,
    templates: MigratedTemplates,
) -> AsyncIterator[BotFactory]:
    """``await start_bot(database_url=None, slack=None, **env)``: serve the app against fakes
    (by default every bot of the test on one migrated SQLite file)."""
    started: list[tuple[LifespanServer, Database, httpx.AsyncClient]] = []
    default_url = templates.sqlite(tmp_path / "slack.db")

    async def start(
        database_url: str | None = None,
        slack_api_url: str | None = None,
        fake: FakeSlack | None = None,
        **env: str,
    ) -> Bot:
        url = database_url or default_url
        api = slack_api_url or slack_server.api_url
        settings = slack_settings(url, llm_server, search_server, api, **env)
        server = LifespanServer(create_app(settings)).start()
        database = Database(url)
        http = httpx.AsyncClient(timeout=10)
        started.append((server, database, http))
        return Bot(
            server.url,
            http,
            fake or slack_server.fake,
            llm_server,
            search_server,
            Store(database),
            database,
        )

    yield start
    for server, database, http in started:
        await http.aclose()
        llm_server.fake.latency = 0.0  # let held runs finish instead of waiting out the grace
        search_server.fake.release_pages()
        await asyncio.to_thread(server.stop)
        await database.dispose()


# -- slash command ----------------------------------------------------------------------


async def test_slash_command_end_to_end(start_bot: BotFactory) -> None:
    bot = await start_bot()
    bot.llm.fake.latency = bot.search.fake.latency = 0.1  # edits apart from each other

    response = await bot.command("solid-state batteries depth=3", trigger_id="trig-e2e")
    acknowledged = time.time()

    assert response.status_code == 200
    runs = await bot.runs()  # committed before the ack
    assert len(runs) == 1 and runs[0].topic == "solid-state batteries" and runs[0].depth == 3
    assert runs[0].dedupe_key == "slack:cmd:T0001:trig-e2e"
    assert "On it" in response.json()["text"]

    [run] = await bot.finished()
    assert run.status == "succeeded"
    # The ack did not wait for the research (Slack gives three seconds; bench/slack_ack.py
    # measures the ack): the report was asked for after it.
    writes = bot.llm.fake.requests_for("writer")
    assert writes and all(r.time > acknowledged for r in writes)
    opener = bot.slack.calls_to("chat.postMessage")[0].params
    assert "thread_ts" not in opener
    assert "<@U123>" in opener["text"] and "solid-state batteries" in opener["text"]
    opener_ts = run.progress_message_id
    assert opener_ts and run.thread_key == f"slack:T0001:C0001:{opener_ts}"

    edits = [c.params["text"] for c in bot.slack.calls_to("chat.update")]
    assert all(c.params["ts"] == opener_ts for c in bot.slack.calls_to("chat.update"))
    # Every status after the i-th search repeats its line, so coalesced edits still show it.
    expected = ["1/3th search executed.", "2/3th search executed.", "3/3th search executed."]
    positions = [next(i for i, t in enumerate(edits) if e in t) for e in expected]
    assert positions == sorted(positions)
    assert "3/3 searches" in edits[-1]
    assert "Research done" in edits[-1]
    assert "Research done" in bot.final_text("C0001", opener_ts)

    reports = bot.reports()
    assert reports, "no report posted"
    for message in reports:
        assert message["thread_ts"] == opener_ts
        markdown = [b["text"] for b in message["blocks"] if b["type"] == "markdown"]
        assert all(len(m) <= 12_000 for m in markdown)
    assert "solid-state batteries" in reports[0]["blocks"][0]["text"]

    thread = await bot.store.threads.get_thread(run.thread_key)
    assert thread is not None
    variables = await bot.store.threads.load_variables(thread.id)
    assert variables is not None and len(variables["topics"]) == 3
    assert variables["findings"] and variables["shouldContinue"] in (True, False)


async def test_the_thread_says_how_the_report_s_citations_held(start_bot: BotFactory) -> None:
    """The writer miscites one claim and invents another (``citing = "mixed"``): the final
    progress message and the report's notes both count the claims as the stored run does."""
    bot = await start_bot()
    bot.llm.fake.citing = "mixed"
    await bot.command("heat pumps depth=1", trigger_id="trig-claims")
    [run] = await bot.finished()
    line = "Citations checked: 2 of 4 claims supported by their sources; 2 fixed."
    final = bot.final_text("C0001", run.progress_message_id or "")
    assert line in final.splitlines()
    report = "\n".join(
        b["text"] for m in bot.reports() for b in m["blocks"] if b["type"] == "markdown"
    )
    assert line in report and "*(not verified)*" in report
    assert run.claim_check is not None and len(run.claim_check["claims"]) == 4


async def test_a_chinese_request_is_answered_in_chinese(start_bot: BotFactory) -> None:
    bot = await start_bot()
    response = await bot.command("固态电池 depth=2", trigger_id="trig-zh")
    assert response.json()["text"] == (
        ":mag: 好的：正在研究“固态电池”，共 2 轮搜索。排队中：第 1 位，有空闲的执行者时开始。"
    )
    bad = (await bot.command("固态电池 depth=0", trigger_id="trig-zh2")).json()["text"]
    assert "depth 必须在 1 到 10 之间；不允许 0。" in bad and "帮助" in bad
    [run] = await bot.finished()
    opener = bot.slack.calls_to("chat.postMessage")[0].params["text"]
    assert opener.startswith("<@U123> 请我研究 *固态电池*（深度 2）。")
    final = bot.final_text("C0001", run.progress_message_id or "")
    assert "研究完成：2/2 次搜索" in final


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("batteries depth=0", "depth must be from 1 to 10"),
        ("", "The topic is empty"),
        ("batteries depth=abc", "whole number from 1 to 10"),
        ("batteries colour=red", "Unknown option `colour=`"),
    ],
)
async def test_bad_input_is_explained_in_the_ack_and_nothing_is_stored(
    start_bot: BotFactory, text: str, expected: str
) -> None:
    bot = await start_bot()
    response = await bot.command(text)
    assert response.status_code == 200
    reply = response.json()["text"]
    assert reply.startswith(":warning:") and expected in reply and "/research help" in reply
    assert await bot.runs() == []
    assert bot.slack.calls_to("chat.postMessage") == []


async def test_help_and_status(start_bot: BotFactory) -> None:
    bot = await start_bot()
    help_reply = (await bot.command("help")).json()["text"]
    assert "/research <topic> [depth=N]" in help_reply
    assert "no research yet" in (await bot.command("status")).json()["text"]

    await bot.command("tidal energy depth=1", trigger_id="t-status")
    [run] = await bot.finished()
    status = (await bot.command("status", trigger_id="t-status-2")).json()["text"]
    assert f"`{run.id[:8]}`" in status and "tidal energy" in status
    assert "succeeded, 1/1 searches" in status and "<#C0001>" in status


async def test_access_control_refuses_politely(start_bot: BotFactory) -> None:
    bot = await start_bot(FATHOM_ALLOWED_USERS="U999")
    reply = (await bot.command("fusion power")).json()["text"]
    assert "can't start research" in reply

    await bot.event(app_mention_event("fusion power"), "Ev-denied")
    ephemeral = await wait_for(lambda: bot.slack.calls_to("chat.postEphemeral"))
    assert "can't start research" in ephemeral[0].params["text"]
    assert ephemeral[0].params["user"] == "U123"
    assert await bot.runs() == []


@pytest.mark.parametrize("where", ["dm", "mention"])
async def test_a_message_with_files_starts_its_research_with_them(
    start_bot: BotFactory, where: str
) -> None:
    """A DM (``subtype: file_share``) or an @-mention that carries files starts the research
    its text asks for, with the files recorded as the run's attachments."""
    bot = await start_bot()
    plain = im_message_event if where == "dm" else app_mention_event
    brief = bot.slack.host_file("brief.md", b"# Brief\nHydrogen aircraft need new tanks.")
    notes = bot.slack.host_file("notes.txt", b"Liquid hydrogen is stored at 20 K.")
    event = with_files(plain("hydrogen aviation depth=1"), brief, notes)
    await bot.event(event, f"Ev-files-{where}")
    [run] = await bot.finished()
    assert (run.status, run.topic, run.depth) == ("succeeded", "hydrogen aviation", 1)
    assert [a["name"] for a in run.attachments or []] == ["brief.md", "notes.txt"]
    assert run.attachments_read == 2
    if where == "dm":  # edits and other subtypes of a DM stay ignored
        edited = dict(plain("solar depth=1"), subtype="message_changed")
        await bot.event(edited, "Ev-edit")
        await bot.event(plain("wind depth=1"), "Ev-after")
        runs = await bot.finished(2)
        assert [r.topic for r in runs] == ["wind", "hydrogen aviation"]
    assert bot.slack.calls_to("chat.postEphemeral") == []


async def test_concurrency_limit_refuses_a_second_run(start_bot: BotFactory) -> None:
    bot = await start_bot(FATHOM_USER_CONCURRENCY="1")
    bot.llm.fake.latency = 1.0  # holds the first run active
    await bot.command("first topic depth=2", trigger_id="t-first")
    reply = (await bot.command("second topic", trigger_id="t-second")).json()["text"]
    assert "already have 1 research running" in reply
    runs = await bot.runs()
    assert [r.topic for r in runs] == ["first topic"]


async def test_redelivered_command_at_the_limit_is_still_acknowledged(
    start_bot: BotFactory,
) -> None:
    """The per-user limit counts the run this delivery already created: "On it" again,
    not "you already have 1 research running", and no second run."""
    bot = await start_bot(FATHOM_USER_CONCURRENCY="1")
    bot.llm.fake.latency = 1.0  # holds the run active
    first = (await bot.command("tidal power depth=2", trigger_id="t-again")).json()["text"]
    again = (await bot.command("tidal power depth=2", trigger_id="t-again")).json()["text"]
    assert first.startswith(":mag: On it:") and again.startswith(":mag: On it:")
    other = (await bot.command("wave power", trigger_id="t-other")).json()["text"]
    assert "already have 1 research running" in other
    runs = await bot.runs()
    assert [(r.topic, r.dedupe_key) for r in runs] == [("tidal power", "slack:cmd:T0001:t-again")]


async def test_same_slash_command_twice_gives_one_run(start_bot: BotFactory) -> None:
    bot = await start_bot()
    first = await bot.command("wind turbines depth=1", trigger_id="t-dup")
    second = await bot.command("wind turbines depth=1", trigger_id="t-dup")
    assert first.status_code == second.status_code == 200
    await bot.finished()
    assert len(await bot.runs()) == 1  # a slash command's run is committed before its ack
    assert len(bot.reports()) == 1


# -- events -----------------------------------------------------------------------------


async def test_retried_event_gives_one_run_and_one_report(
    start_bot: BotFactory, database_url: str
) -> None:
    bot = await start_bot(database_url=database_url)
    event = app_mention_event("geothermal heat depth=1", ts="1700000100.000100")
    assert (await bot.event(event, "Ev-retry")).status_code == 200
    retry = await bot.event(
        event, "Ev-retry", **{"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
    )
    assert retry.status_code == 200
    [run] = await bot.finished()
    await bot.answer_later("Ev-after-retry")  # the retry's listener has run by now
    assert len(await bot.runs()) == 1
    assert run.thread_key == "slack:T0001:C0001:1700000100.000100"
    assert run.dedupe_key == "slack:event:Ev-retry"
    reports = bot.reports()
    assert len(reports) == 1 and reports[0]["thread_ts"] == "1700000100.000100"
    # the progress message replies in the mention's thread
    progress = bot.slack.calls_to("chat.postMessage")[0].params
    assert progress["thread_ts"] == "1700000100.000100"


async def test_same_slash_command_twice_on_both_databases(
    start_bot: BotFactory, database_url: str
) -> None:
    bot = await start_bot(database_url=database_url)
    body = slash_command_body("ocean currents depth=1", trigger_id="t-dup-db")
    await asyncio.gather(bot.post(body, FORM), bot.post(body, FORM))
    await bot.finished()
    assert len(await bot.runs()) == 1


@pytest.mark.parametrize("problem", ["bad signature", "missing signature", "stale timestamp"])
async def test_unverified_requests_get_401_and_store_nothing(
    start_bot: BotFactory, problem: str
) -> None:
    bot = await start_bot()
    bodies = [
        (slash_command_body("forged research"), FORM),
        (event_callback_body(app_mention_event("forged research"), event_id="Ev-forged"), JSON),
    ]
    for body, headers in bodies:
        if problem == "bad signature":
            response = await bot.post(body, headers, secret="not-the-secret")
        elif problem == "stale timestamp":
            response = await bot.post(body, headers, ts=int(time.time()) - 6 * 60)
        else:
            response = await bot.http.post(f"{bot.url}/slack/events", content=body, headers=headers)
        assert response.status_code == 401, problem
    await bot.answer_later("Ev-after-forged")  # anything the forgeries started has run
    assert await bot.runs() == []
    async with bot.database.engine.connect() as conn:
        keys = (await conn.execute(text("SELECT key FROM processed_events"))).scalars().all()
    assert list(keys) == ["slack:event:Ev-after-forged"]  # the later event's only
    assert bot.slack.calls_to("chat.postMessage") == []


async def test_url_verification_challenge(start_bot: BotFactory) -> None:
    bot = await start_bot()
    response = await bot.post(url_verification_body("challenge-xyz"), JSON)
    assert response.status_code == 200
    assert response.json() == {"challenge": "challenge-xyz"}


async def test_a_report_slack_refuses_twice_is_posted_once_on_the_third_try(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot(FATHOM_DELIVERY_BACKOFF="0.05")
    armed = threading.Event()
    bot.llm.fake.script("writer", Held(armed))  # the report comes after the failures are armed
    await bot.command("tidal power depth=1", trigger_id="t-5xx")
    await wait_for(lambda: bot.slack.calls_to("chat.postMessage"))  # the opener is out
    bot.slack.fail_next("chat.postMessage", status=500, times=2)
    armed.set()
    [run] = await bot.finished()
    assert (run.status, run.delivery, run.delivery_attempts) == ("succeeded", "posted", 2)
    assert (run.delivery_error or "").startswith("HTTP 500")  # the last refusal, kept
    reports = bot.reports()
    assert len(reports) == run.report_parts_posted >= 1  # each part in the thread once
    assert all(r["thread_ts"] == run.progress_message_id for r in reports)
    attempts = [c for c in bot.slack.calls_to("chat.postMessage") if is_report(c.params)]
    assert len(attempts) == len(reports) + 2  # two refused, then posted: no SDK retries on top


async def test_a_report_to_a_channel_slack_calls_gone_is_given_up_at_once(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot(FATHOM_DELIVERY_BACKOFF="0.05")
    armed = threading.Event()
    bot.llm.fake.script("writer", Held(armed))
    await bot.command("geothermal depth=1", trigger_id="t-gone")
    await wait_for(lambda: bot.slack.calls_to("chat.postMessage"))
    bot.slack.fail_next("chat.postMessage", error="is_archived", times=5)
    armed.set()
    [run] = await bot.finished()
    assert (run.status, run.delivery, run.delivery_attempts) == ("succeeded", "failed", 1)
    assert "is_archived" in (run.delivery_error or "")


async def test_a_report_slack_never_takes_ends_with_one_notice_in_the_thread(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot(FATHOM_DELIVERY_BACKOFF="0.02", FATHOM_DELIVERY_ATTEMPTS="3")
    armed = threading.Event()
    bot.llm.fake.script("writer", Held(armed))
    await bot.command("wave power depth=1", trigger_id="t-never")
    await wait_for(lambda: bot.slack.calls_to("chat.postMessage"))
    bot.slack.fail_next("chat.postMessage", status=503, times=3)
    armed.set()
    [run] = await bot.finished()
    assert (run.status, run.delivery, run.delivery_attempts) == ("succeeded", "failed", 3)
    assert (run.delivery_error or "").startswith("not posted after 3 failures: HTTP 503")
    assert bot.reports() == []
    notices = [
        c.params
        for c in bot.slack.calls_to("chat.postMessage")
        if "could not post its report" in str(c.params.get("text"))
    ]
    assert len(notices) == 1 and notices[0]["thread_ts"] == run.progress_message_id
    assert f"fathom thread show {run.thread_key}" in notices[0]["text"]
    assert "Research done" in bot.final_text("C0001", run.progress_message_id or "")


async def test_follow_up_mention_continues_the_thread(start_bot: BotFactory) -> None:
    bot = await start_bot()
    await bot.command("perovskite solar cells depth=2", trigger_id="t-follow")
    [first] = await bot.finished()
    thread = await bot.store.threads.get_thread(first.thread_key)
    assert thread is not None
    first_vars = await bot.store.threads.load_variables(thread.id)
    assert first_vars is not None and len(first_vars["topics"]) == 2
    planner_before = len(bot.llm.fake.requests_for("planner"))

    opener_ts = first.progress_message_id or ""
    follow = app_mention_event("what about durability? depth=1", thread_ts=opener_ts)
    await bot.event(follow, "Ev-follow")
    runs = await bot.finished(count=2)
    second = next(r for r in runs if r.id != first.id)
    assert second.thread_key == first.thread_key  # same thread: the variables carry over
    assert second.topic == "what about durability?"

    prompt = json.dumps(bot.llm.fake.requests_for("planner")[planner_before].body)
    for topic in first_vars["topics"]:
        assert json.dumps(topic)[1:-1] in prompt
    assert all(r["thread_ts"] == opener_ts for r in bot.reports())


async def test_direct_message_without_mention(start_bot: BotFactory) -> None:
    bot = await start_bot()
    dm = im_message_event("carbon capture depth=1", ts="1700000200.000100")
    await bot.event(dm, "Ev-dm")
    [run] = await bot.finished()
    assert run.thread_key == "slack:T0001:D0001:1700000200.000100"
    assert bot.reports()[0]["channel"] == "D0001"


async def test_bot_messages_edits_and_channel_chatter_are_ignored(start_bot: BotFactory) -> None:
    bot = await start_bot()
    own = im_message_event("carbon capture")
    own["bot_id"] = "BOTHER"
    edited = im_message_event("carbon capture")
    edited["subtype"] = "message_changed"
    chatter = im_message_event("carbon capture")
    chatter["channel_type"] = "channel"
    for i, event in enumerate((own, edited, chatter)):
        assert (await bot.event(event, f"Ev-ignored-{i}")).status_code == 200
    answers = await bot.answer_later("Ev-after-ignored")
    assert await bot.runs() == []
    assert len(answers) == 1  # the later event's: none for the ignored ones


async def test_mentions_from_other_bots_are_ignored(start_bot: BotFactory) -> None:
    bot = await start_bot()
    event = app_mention_event("carbon capture")
    event["bot_id"] = "BOTHER"
    assert (await bot.event(event, "Ev-bot-mention")).status_code == 200
    await bot.answer_later("Ev-after-bot-mention")
    assert await bot.runs() == []


async def test_slash_text_is_unescaped_before_parsing(start_bot: BotFactory) -> None:
    bot = await start_bot()
    assert (await bot.command("R&amp;D tax credits &lt;2025&gt; depth=1")).status_code == 200
    [run] = await bot.runs()
    assert run.topic == "R&D tax credits <2025>" and run.depth == 1


async def test_bad_mention_gets_an_ephemeral_explanation(start_bot: BotFactory) -> None:
    bot = await start_bot()
    await bot.event(app_mention_event("batteries depth=abc", thread_ts="1700000300.0001"), "Ev-bad")
    [call] = await wait_for(lambda: bot.slack.calls_to("chat.postEphemeral"))
    assert "whole number from 1 to 10" in call.params["text"]
    assert call.params["channel"] == "C0001" and call.params["thread_ts"] == "1700000300.0001"
    assert await bot.runs() == []


async def test_a_plain_reply_in_a_running_researchs_thread_steers_it_and_others_are_dropped(
    start_bot: BotFactory,
) -> None:
    """With ``message.channels`` and ``message.groups`` subscribed, a reply without a mention
    in the thread of a running research is guidance; a channel message outside such a
    thread, a reply in a thread with no running research, and the message twin of a mention
    (handled as the ``app_mention``) are dropped unread: nothing is recorded for them."""
    bot = await start_bot()
    bot.llm.fake.latency = 0.3
    await bot.command("deep sea mining depth=5", trigger_id="t-steer")

    async def opened() -> RunRecord | None:
        [run] = await bot.runs()
        return run if run.progress_message_id and "pending-" not in run.thread_key else None

    run = await wait_for(opened)
    ts = run.progress_message_id or ""
    elsewhere = channel_message_event("lunch anyone?")  # not in a thread
    other_thread = channel_message_event("nice", thread_ts="1700000999.000100")
    twin = channel_message_event(f"<@{FakeSlack.bot_user_id}> hello", thread_ts=ts)
    for event, event_id in ((elsewhere, "Ev-chat"), (other_thread, "Ev-other"), (twin, "Ev-twin")):
        assert (await bot.event(event, event_id)).status_code == 200
    steer = channel_message_event("focus on the Pacific", thread_ts=ts, channel_type="group")
    await bot.event(steer, "Ev-steer")
    [noted] = await wait_for(lambda: bot.slack.calls_to("chat.postEphemeral"))
    assert noted.params["text"].startswith("Noted") and noted.params["thread_ts"] == ts
    [done] = await bot.finished()
    thread = await bot.store.threads.get_thread(done.thread_key)
    assert thread is not None
    variables = await bot.store.threads.load_variables(thread.id)
    assert variables is not None
    assert [g["text"] for g in variables["guidance"]] == ["focus on the Pacific"]
    seen = [f"slack:event:{e}" for e in ("Ev-chat", "Ev-other", "Ev-twin")]
    assert not await bot.store.events.events_seen(seen)  # dropped at the door
    after = channel_message_event("thanks!", thread_ts=ts)  # the research has ended
    await bot.event(after, "Ev-after")
    assert not await bot.store.events.events_seen(["slack:event:Ev-after"])
    assert len(bot.slack.calls_to("chat.postEphemeral")) == 1


async def test_a_file_on_a_plain_steering_reply_is_named_as_not_read(
    start_bot: BotFactory,
) -> None:
    """A reply without a mention in a running research's thread, with a file (a
    ``file_share`` message, as Slack's Events API sends uploads): its words steer, and the
    answer names the file as not read (nothing is downloaded); a file alone there is
    answered the same way instead of being dropped without a word."""
    bot = await start_bot()
    bot.llm.fake.latency = 0.3
    await bot.command("deep sea mining depth=5", trigger_id="t-steer-file")

    async def opened() -> RunRecord | None:
        [run] = await bot.runs()
        return run if run.progress_message_id and "pending-" not in run.thread_key else None

    run = await wait_for(opened)
    ts = run.progress_message_id or ""
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    steer = with_files(channel_message_event("focus on the Pacific", thread_ts=ts), notes)
    await bot.event(steer, "Ev-steer-file")
    [answer] = await wait_for(lambda: bot.slack.calls_to("chat.postEphemeral"))
    noted, files = answer.params["text"].split("\n")
    assert noted.startswith("Noted: this research takes it into account")
    assert files.startswith(":paperclip: Not read: trial-notes.txt (a research reads only")
    alone = with_files(channel_message_event("", thread_ts=ts), "chart.pdf")
    await bot.event(alone, "Ev-file-alone")
    answers = await wait_for(
        lambda: calls if len(calls := bot.slack.calls_to("chat.postEphemeral")) == 2 else None
    )
    assert answers[1].params["text"].startswith(":paperclip: Not read: chart.pdf (a research")
    [done] = await bot.finished()
    thread = await bot.store.threads.get_thread(done.thread_key)
    assert thread is not None
    variables = await bot.store.threads.load_variables(thread.id)
    assert variables is not None
    assert [g["text"] for g in variables["guidance"]] == ["focus on the Pacific"]
    assert bot.slack.file_requests == [] and done.attachments_read == 0


STEER_HINT = "To steer this research, mention me in a reply in this thread."


@pytest.mark.parametrize("history_scopes", [True, False])
async def test_without_the_history_scopes_the_progress_says_to_mention_the_bot_to_steer(
    start_bot: BotFactory, history_scopes: bool
) -> None:
    """An app installed before ``message.channels``/``message.groups`` (or whose operator
    removed them with their scopes) hears only mentions: the progress message says so
    while the research runs, learned from the X-OAuth-Scopes header of Slack's answers.
    With the scopes (the manifests'), it says nothing of the kind."""
    bot = await start_bot()
    if not history_scopes:
        bot.slack.scopes = tuple(
            s for s in bot.slack.scopes if s not in ("channels:history", "groups:history")
        )
    bot.search.fake.hold_pages()
    await bot.command("deep sea mining depth=2", trigger_id="t-hint")
    run, _ = await progress_with_buttons(bot)
    ts = run.progress_message_id or ""

    def shown() -> list[str]:
        return [str(c.params.get("text")) for c in bot.slack.calls_to("chat.update")]

    await wait_for(lambda: any("search executed" in t for t in shown()))
    running = [t for t in shown() if "search executed" in t]
    bot.search.fake.release_pages()
    await bot.finished()
    if history_scopes:
        assert not any(STEER_HINT in t for t in shown())
    else:
        assert all(STEER_HINT in t for t in running), running
    assert STEER_HINT not in bot.final_text("C0001", ts)  # no buttons, no steering


async def test_cancel_in_thread_stops_the_run(start_bot: BotFactory) -> None:
    bot = await start_bot()
    bot.llm.fake.latency = 0.5
    await bot.command("deep sea mining depth=5", trigger_id="t-cancel")

    async def opened() -> RunRecord | None:
        [run] = await bot.runs()
        return run if run.progress_message_id and "pending-" not in run.thread_key else None

    run = await wait_for(opened)
    await bot.event(app_mention_event("cancel", thread_ts=run.progress_message_id), "Ev-cancel")
    [done] = await bot.finished()
    assert done.status == "cancelled"
    ts = run.progress_message_id or ""
    await wait_for(lambda: "cancelled" in bot.final_text("C0001", ts))
    ended, spent = bot.final_text("C0001", ts).split("\n")[-2:]
    assert ended.startswith("Research cancelled") and " tokens · " in spent
    [ack] = await wait_for(lambda: bot.slack.calls_to("chat.postEphemeral"))
    assert "Cancelling" in ack.params["text"] and ack.params["thread_ts"] == ts
    assert bot.reports() == []


async def test_slash_cancel_and_nothing_to_cancel(start_bot: BotFactory) -> None:
    bot = await start_bot()
    assert "no running research" in (await bot.command("cancel")).json()["text"]
    bot.llm.fake.latency = 0.5
    await bot.command("lithium prices depth=4", trigger_id="t-slash-cancel")
    [run] = await bot.runs()
    reply = (await bot.command(f"cancel {run.id[:6]}", trigger_id="t-c2")).json()["text"]
    assert "Cancelling" in reply and run.id[:8] in reply
    [done] = await bot.finished()
    assert done.status == "cancelled"


# -- buttons --------------------------------------------------------------------------


def button_ids(message: dict[str, Any]) -> list[str]:
    return [
        element["action_id"]
        for block in message.get("blocks") or []
        if block.get("type") == "actions"
        for element in block["elements"]
    ]


async def progress_with_buttons(bot: Bot) -> tuple[RunRecord, dict[str, Any]]:
    """The one run, once its progress message (the slash command's opener) shows buttons."""

    async def shown() -> tuple[RunRecord, dict[str, Any]] | None:
        runs = await bot.runs()
        if len(runs) != 1 or not runs[0].progress_message_id:
            return None
        message = bot.slack.messages.get(("C0001", runs[0].progress_message_id))
        # A copy: the message as a client shows it now (a later press may come from it).
        return (
            (runs[0], json.loads(json.dumps(message))) if message and button_ids(message) else None
        )

    found: tuple[RunRecord, dict[str, Any]] = await wait_for(shown)
    return found


async def ephemeral_answers(bot: Bot, count: int) -> list[SlackCall]:
    answers: list[SlackCall] = await wait_for(
        lambda: len(calls := bot.slack.calls_to("chat.postEphemeral")) >= count and calls
    )
    return answers


async def test_stop_and_write_now_in_round_one_writes_the_report_from_that_search(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot(FATHOM_ALLOWED_USERS="U123,U999")
    bot.search.fake.hold_pages()  # round 1 has searched; its pages wait for the press
    await bot.command("deep sea mining depth=5", trigger_id="t-stop")
    run, message = await progress_with_buttons(bot)
    assert button_ids(message) == ["fathom_stop", "fathom_cancel"]
    assert message["text"] in message["blocks"][0]["text"]["text"]  # the same words shown
    await wait_for(lambda: bot.search.fake.page_requests)

    other = await bot.post(block_actions_body(message, "fathom_stop", user_id="U999"), FORM)
    assert other.status_code == 200  # acknowledged; the answer is private
    [refusal] = await ephemeral_answers(bot, 1)
    assert refusal.params["user"] == "U999" and refusal.params["channel"] == "C0001"
    assert "Only the person who started this research" in refusal.params["text"]
    assert refusal.params["thread_ts"] == run.progress_message_id
    after = await bot.store.runs.get_run(run.id)
    assert after is not None and not after.stop_requested  # nothing changed

    pressed = await bot.post(block_actions_body(message, "fathom_stop"), FORM)
    assert pressed.status_code == 200
    again = await bot.post(block_actions_body(message, "fathom_stop"), FORM)  # a double click
    assert again.status_code == 200
    _, first, second = await ephemeral_answers(bot, 3)
    assert {first.params["user"], second.params["user"]} == {"U123"}
    texts = [first.params["text"], second.params["text"]]
    assert "That research is already stopping." in texts, texts  # one press took effect
    assert any("no new search starts" in text for text in texts), texts
    bot.search.fake.release_pages()

    [done] = await bot.finished()
    assert (done.status, done.stop_requested) == ("succeeded", True)
    assert bot.search.fake.queries == [bot.search.fake.queries[0]]  # no second search
    final = bot.slack.messages[("C0001", run.progress_message_id or "")]
    assert button_ids(final) == []  # the buttons are gone from the final state
    [plan] = [b for b in final["blocks"] if b["type"] == "plan"]  # the search it made
    assert [t["status"] for t in plan["tasks"]] == ["complete"]
    assert "stopped early after 1 of 5 searches (stopped on request)" in final["text"]
    [report] = bot.reports()
    assert button_ids(report) == ["fathom_up", "fathom_down"]
    assert "Stop and write now" in report_text(bot)  # the report says it was stopped early

    late = await bot.post(block_actions_body(message, "fathom_cancel"), FORM)
    assert late.status_code == 200
    answers = await ephemeral_answers(bot, 4)
    assert answers[-1].params["text"] == "That research has already finished."


async def test_the_cancel_button_ends_the_run_without_a_report(start_bot: BotFactory) -> None:
    bot = await start_bot()
    bot.search.fake.hold_pages()
    await bot.command("lithium prices depth=5", trigger_id="t-cancel-button")
    run, message = await progress_with_buttons(bot)
    await bot.post(block_actions_body(message, "fathom_cancel"), FORM)
    [answer] = await ephemeral_answers(bot, 1)
    assert "Cancelling “lithium prices”" in answer.params["text"]
    bot.search.fake.release_pages()
    [done] = await bot.finished()
    assert done.status == "cancelled" and bot.reports() == []
    final = bot.slack.messages[("C0001", run.progress_message_id or "")]
    assert button_ids(final) == [] and "Research cancelled" in final["text"]
    # The plan shows what the run finished: its search was cancelled before it ended.
    assert [b["type"] for b in final["blocks"]] in ([], ["section", "plan"])


async def test_a_press_that_fails_is_answered_in_the_language_of_its_message(
    start_bot: BotFactory,
) -> None:
    """The database fails while a press is decided: the presser is told so in the language
    of the pressed message (its button's label, which block_actions sends back)."""
    bot = await start_bot()
    await bot.command("潮汐能 depth=1", trigger_id="t-zh-failure")
    await bot.finished()
    [report] = bot.reports()
    async with runs_table_away(bot.database):
        await bot.post(block_actions_body(report, "fathom_up"), FORM)
        [answer] = await ephemeral_answers(bot, 1)
    assert answer.params["text"] == ":warning: 我这边出了点问题，请稍后再试。"


async def test_a_vote_on_the_report_is_stored_once_and_a_second_press_changes_it(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot()
    await bot.command("tidal power depth=1", trigger_id="t-vote")
    [run] = await bot.finished()
    [report] = bot.reports()
    for count, action in enumerate(("fathom_up", "fathom_up", "fathom_down"), 1):
        response = await bot.post(block_actions_body(report, action), FORM)
        assert response.status_code == 200
        answers = await ephemeral_answers(bot, count)  # one press after the other
    assert [a.params["text"] for a in answers] == [
        "Thanks: your 👍 is recorded.",
        "Your 👍 was already recorded.",
        "Changed your rating to 👎.",
    ]
    [vote] = await bot.store.feedback.feedback_since()
    assert (vote.run_id, vote.voter, vote.value) == (run.id, USER, "down")


async def test_a_slash_command_waiting_in_line_is_acknowledged_with_its_place_and_cancel(
    start_bot: BotFactory,
) -> None:
    """One research at a time (FATHOM_MAX_CONCURRENT_RUNS=1) and one running: the next
    ``/research`` is acknowledged (ephemeral) with its place in line and a Cancel button.
    Slack sends a press on an ephemeral message without the message itself (the container
    says ``is_ephemeral``: Slack's block_actions reference); it takes the request out of the
    line."""
    bot = await start_bot(FATHOM_MAX_CONCURRENT_RUNS="1")
    bot.search.fake.hold_pages()
    await bot.command("wave energy depth=2", trigger_id="t-first")
    await progress_with_buttons(bot)
    ack = (await bot.command("tidal power depth=1", trigger_id="t-second")).json()
    assert ack["text"] == (
        ":mag: On it: researching “tidal power” with 1 search rounds. Queued: 1st in line; "
        "it starts when a runner is free."
    )
    (waiting,) = [r for r in await bot.runs() if r.topic == "tidal power"]
    assert waiting.status == "queued"
    section, controls = ack["blocks"]
    assert section["text"]["text"] == ack["text"]
    assert [(b["action_id"], b["value"]) for b in controls["elements"]] == [
        ("fathom_cancel", waiting.id)
    ]
    press = block_actions_body(
        {"ts": "1700000999.000100", "channel": "C0001", "blocks": ack["blocks"]}, "fathom_cancel"
    )
    payload = json.loads(urllib.parse.parse_qs(press.decode())["payload"][0])
    payload["container"]["is_ephemeral"] = True
    del payload["message"]
    body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
    assert (await bot.post(body, FORM)).status_code == 200
    (answer,) = await ephemeral_answers(bot, 1)
    assert answer.params["text"].startswith(":octagonal_sign: Cancelling “tidal power”")
    bot.search.fake.release_pages()
    runs = await bot.finished(2)
    assert sorted(r.status for r in runs) == ["cancelled", "succeeded"]


async def test_forged_and_foreign_presses_change_nothing(start_bot: BotFactory) -> None:
    bot = await start_bot()
    bot.search.fake.hold_pages()
    await bot.command("wave energy depth=5", trigger_id="t-forged")
    run, message = await progress_with_buttons(bot)
    body = block_actions_body(message, "fathom_cancel")
    unsigned = await bot.http.post(f"{bot.url}/slack/events", content=body, headers=FORM)
    assert unsigned.status_code == 401
    forged = await bot.post(body, FORM, secret="not-the-signing-secret")
    assert forged.status_code == 401
    stale = await bot.post(body, FORM, ts=int(time.time()) - 600)
    assert stale.status_code == 401
    broken = await bot.post(b"payload=%7B%22actions%22%3A%20%22x%22%7D", FORM)
    assert broken.status_code == 400
    # A signed press whose value names another run, or this run from another channel.
    other_run = block_actions_body(message, "fathom_cancel", value="0" * 32)
    moved = dict(message, channel="C0777")
    foreign = block_actions_body(moved, "fathom_cancel")
    assert (await bot.post(other_run, FORM)).status_code == 200
    assert (await bot.post(foreign, FORM)).status_code == 200
    answers = await ephemeral_answers(bot, 2)
    assert [a.params["text"] for a in answers] == [
        "This button does not belong to a research here; nothing changed.",
    ] * 2
    still = await bot.store.runs.get_run(run.id)
    assert still is not None and not still.cancel_requested and not still.finished_at
    bot.search.fake.release_pages()
    [done] = await bot.finished()
    assert done.status == "succeeded"


@pytest.mark.parametrize("priced", [True, False])
async def test_the_final_state_says_what_the_run_spent_and_its_cost_only_with_prices(
    start_bot: BotFactory, priced: bool
) -> None:
    prices = '{"m-plan": [2.5, 10], "m-write": [1.1, 4.4], "search": 0.005}'
    env = {"FATHOM_PLANNER_MODEL": "m-plan", "FATHOM_WRITER_MODEL": "m-write"}
    bot = await start_bot(**env, **({"FATHOM_PRICES": prices} if priced else {}))
    await bot.command("tidal power depth=2", trigger_id="t-spent")
    [run] = await bot.finished()
    spent = bot.final_text("C0001", run.progress_message_id or "").splitlines()[-1]
    cost = r" · (≈ \$\d+\.\d\d|&lt; \$0\.01)" if priced else ""
    assert re.fullmatch(rf"2 searches · 6 pages · [\d.]+k? tokens{cost} · \d+ s", spent), spent


# -- OAuth (multi-workspace) ------------------------------------------------------------

CLIENT_ID, CLIENT_SECRET = "1111.2222", "oauth-client-secret"
TEAM2_TOKEN = "xoxb-team2-installed-token"


class OAuthFakeSlackServer(BackgroundServer):
    """The fake Slack plus ``oauth.v2.access`` (client credentials via HTTP Basic)."""

    def __init__(self) -> None:
        self.fake = FakeSlack()
        self.exchanges: list[dict[str, str]] = []

        async def access(request: Request) -> Response:
            form = dict(parse_qsl((await request.body()).decode()))
            basic = request.headers.get("authorization", "").removeprefix("Basic ")
            credentials = base64.b64decode(basic).decode() if basic else ""
            self.exchanges.append({"code": str(form.get("code")), "auth": credentials})
            if credentials != f"{CLIENT_ID}:{CLIENT_SECRET}" or form.get("code") != "good":
                return JSONResponse({"ok": False, "error": "invalid_code"})
            return JSONResponse(
                {
                    "ok": True,
                    "app_id": "A0001",
                    "authed_user": {"id": "U777"},
                    "scope": "commands,chat:write,app_mentions:read",
                    "token_type": "bot",
                    "access_token": TEAM2_TOKEN,
                    "bot_user_id": "UBOT2",
                    "team": {"id": "T0002", "name": "Second Team"},
                    "enterprise": None,
                    "is_enterprise_install": False,
                }
            )

        app = Starlette(
            routes=[
                Route("/api/oauth.v2.access", access, methods=["POST"]),
                Mount("/", build_slack_app(self.fake)),
            ]
        )
        super().__init__(app)

    def start(self, timeout: float = 5.0) -> Self:
        super().start(timeout)
        self.fake.base_url = self.url
        return self


async def test_oauth_install_then_commands_use_the_team_token(start_bot: BotFactory) -> None:
    with OAuthFakeSlackServer() as slack:
        bot = await start_bot(
            slack_api_url=f"{slack.url}/api/",
            fake=slack.fake,
            SLACK_BOT_TOKEN="",
            SLACK_CLIENT_ID=CLIENT_ID,
            SLACK_CLIENT_SECRET=CLIENT_SECRET,
        )
        install = await bot.http.get(f"{bot.url}/slack/install")
        assert install.status_code == 200
        assert "https://slack.com/oauth/v2/authorize?" in install.text
        assert f"client_id={CLIENT_ID}" in install.text
        cookie = install.headers["set-cookie"].split(";", 1)[0]
        state = cookie.split("=", 1)[1]
        assert f"state={state}" in install.text

        bad = await bot.http.get(
            f"{bot.url}/slack/oauth_redirect",
            params={"code": "good", "state": "forged"},
            headers={"Cookie": cookie},
        )
        assert bad.status_code != 200 and slack.exchanges == []

        done = await bot.http.get(
            f"{bot.url}/slack/oauth_redirect",
            params={"code": "good", "state": state},
            headers={"Cookie": cookie},
        )
        assert done.status_code == 200, done.text
        assert slack.exchanges == [{"code": "good", "auth": f"{CLIENT_ID}:{CLIENT_SECRET}"}]
        async with bot.database.engine.connect() as conn:
            rows = (
                await conn.execute(text("SELECT team_id, bot_token, bot_user_id FROM slack_bots"))
            ).all()
        assert [tuple(r) for r in rows] == [("T0002", TEAM2_TOKEN, "UBOT2")]

        user = "slack:T0002:U555"
        reply = await bot.command("tidal power depth=1", team_id="T0002", user_id="U555")
        assert reply.status_code == 200 and "On it" in reply.json()["text"]
        await bot.finished(user=user)
        chat = [c for c in slack.fake.calls if c.method.startswith("chat.")]
        assert chat and all(c.token == TEAM2_TOKEN for c in chat)
        assert slack.fake.calls_to("chat.postMessage")[0].params["channel"] == "C0001"


async def test_migrated_slack_tables_match_the_sdk(database: Database) -> None:
    """Migration 0003 creates exactly the SDK's tables (its stores query them as built)."""
    from slack_sdk.oauth.installation_store.sqlalchemy import SQLAlchemyInstallationStore
    from slack_sdk.oauth.state_store.sqlalchemy import SQLAlchemyOAuthStateStore

    sdk = MetaData()
    SQLAlchemyInstallationStore.build_installations_table(sdk, "slack_installations")
    SQLAlchemyInstallationStore.build_bots_table(sdk, "slack_bots")
    SQLAlchemyOAuthStateStore.build_oauth_states_table(sdk, "slack_oauth_states")

    def compare(sync_conn: Any) -> None:
        inspector, dialect = sa_inspect(sync_conn), sync_conn.dialect
        for name, table in sdk.tables.items():
            migrated = [
                (c["name"], c["type"].compile(dialect=dialect), bool(c["nullable"]))
                for c in inspector.get_columns(name)
            ]
            expected = [
                (c.name, c.type.compile(dialect=dialect), bool(c.nullable)) for c in table.columns
            ]
            assert migrated == expected, name
            indexes = {i["name"]: i["column_names"] for i in inspector.get_indexes(name)}
            wanted = {i.name: [c.name for c in i.columns] for i in table.indexes}
            assert indexes == wanted, name

    async with database.engine.connect() as conn:
        await conn.run_sync(compare)


# -- pure helpers -----------------------------------------------------------------------


def test_clean_text_strips_the_bot_and_undoes_markup() -> None:
    raw = (
        "<@UBOT> compare <https://example.org/a|the report> with <https://example.org/b> "
        "in <#C42|research> for <@U7> &amp; <!here> depth=2"
    )
    assert clean_text(raw, "UBOT") == (
        "compare the report with https://example.org/b in #research for @U7 & @here depth=2"
    )
    assert clean_text("<@UBOT|fathom>   help", "UBOT") == "help"


def test_status_reply_without_runs() -> None:
    assert "no research yet" in Replies(SlackMarkup(), "en").status([], [])


# -- Socket Mode --------------------------------------------------------------------------

APP_TOKEN = "xapp-1-A0001-socket-test"


class SocketModeLink:
    """A Socket Mode WebSocket endpoint (aiohttp, in its own thread and loop).

    ``send(envelope)`` pushes an envelope to the connected app; ``acks`` collects its answers.
    """

    def __init__(self) -> None:
        self.acks: list[dict[str, Any]] = []
        self.connected = threading.Event()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._ws: web.WebSocketResponse | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/link"

    def _call(self, coro: Any, timeout: float = 5.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> Self:
        self._thread.start()
        self._call(self._start())
        return self

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/link", self._link)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "hello", "num_connections": 1})
        self._ws = ws
        self.connected.set()
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                self.acks.append(json.loads(message.data))
        return ws

    def send(self, envelope: dict[str, Any]) -> None:
        assert self._ws is not None, "no Socket Mode connection"
        self._call(self._ws.send_json(envelope))

    def stop(self) -> None:
        if self._runner is not None:
            self._call(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


@dataclass
class SocketSlack:
    fake: FakeSlack
    api_url: str
    link: SocketModeLink
    opened: list[str]  # Authorization headers of apps.connections.open calls


@pytest.fixture
def socket_slack() -> Iterator[SocketSlack]:
    """The fake Web API plus ``apps.connections.open`` pointing at a Socket Mode link."""
    link = SocketModeLink().start()
    fake, opened = FakeSlack(), []

    async def open_connection(request: Request) -> Response:
        opened.append(request.headers.get("authorization", ""))
        return JSONResponse({"ok": True, "url": link.url})

    app = Starlette(
        routes=[
            Route("/api/apps.connections.open", open_connection, methods=["POST"]),
            Mount("/", build_slack_app(fake)),
        ]
    )
    server = BackgroundServer(app).start()
    fake.base_url = server.url
    try:
        yield SocketSlack(fake, f"{server.url}/api/", link, opened)
    finally:
        server.stop()
        link.stop()


async def test_socket_mode_receives_commands_over_the_websocket(
    socket_slack: SocketSlack, start_bot: BotFactory
) -> None:
    slack, link = socket_slack, socket_slack.link
    bot = await start_bot(
        slack_api_url=slack.api_url,
        fake=slack.fake,
        SLACK_APP_TOKEN=APP_TOKEN,
        SLACK_SIGNING_SECRET="",
    )
    assert slack.opened == [f"Bearer {APP_TOKEN}"]  # connected during start-up, via SLACK_API_URL
    assert link.connected.wait(5)
    payload = dict(parse_qsl(slash_command_body("magnetic refrigeration depth=1").decode()))
    link.send(
        {
            "envelope_id": "env-1",
            "type": "slash_commands",
            "payload": payload,
            "accepts_response_payload": True,
        }
    )
    [ack] = await wait_for(lambda: [a for a in link.acks if a.get("envelope_id") == "env-1"])
    assert "On it" in ack["payload"]["text"]
    [run] = await bot.finished()
    assert run.status == "succeeded"
    assert bot.reports() and all(c.token == BOT_TOKEN for c in slack.fake.calls)


async def test_socket_mode_delivers_a_press_on_a_button(
    socket_slack: SocketSlack, start_bot: BotFactory
) -> None:
    """Interactivity over Socket Mode (an ``interactive`` envelope): the press is
    acknowledged on the socket and answered privately, like one posted to the Request URL."""
    slack, link = socket_slack, socket_slack.link
    bot = await start_bot(slack_api_url=slack.api_url, fake=slack.fake, SLACK_APP_TOKEN=APP_TOKEN)
    assert link.connected.wait(5)
    payload = dict(parse_qsl(slash_command_body("magnetic refrigeration depth=1").decode()))
    link.send({"envelope_id": "env-cmd", "type": "slash_commands", "payload": payload})
    [run] = await bot.finished()
    [report] = bot.reports()
    form = dict(parse_qsl(block_actions_body(report, "fathom_up").decode()))
    link.send(
        {
            "envelope_id": "env-press",
            "type": "interactive",
            "payload": json.loads(form["payload"]),
            "accepts_response_payload": False,
        }
    )
    await wait_for(lambda: [a for a in link.acks if a.get("envelope_id") == "env-press"])
    [answer] = await ephemeral_answers(bot, 1)
    assert answer.params["text"] == "Thanks: your 👍 is recorded."
    [vote] = await bot.store.feedback.feedback_since()
    assert (vote.run_id, vote.value) == (run.id, "up")


#: The Events API events the manifests subscribe to, each one the Bolt app listens to
#: (``bots.slack.app.build_bolt_app``; DMs are ``message.im``).
SUBSCRIBED_EVENTS = {
    "app_mention",
    "message.im",
    "message.channels",  # plain replies in a research's thread (steering)
    "message.groups",
    "agent_session_stopped",  # Slack's Stop on a research's agent session
    "app_home_opened",  # an agent's DM opened: suggested prompts
}
#: Events the app still listens to that the manifests no longer subscribe to: the assistant
#: pane's, sent to an app on ``features.assistant_view`` (retired in February 2027) only;
#: docs.slack.dev/ai/migrating-to-agent-messaging: ``app_home_opened`` replaces
#: ``assistant_thread_started`` under ``agent_view``.
ASSISTANT_VIEW_EVENTS = {"assistant_thread_started", "assistant_thread_context_changed"}


def test_manifests_request_the_scopes_the_install_asks_for() -> None:
    from bots.slack.oauth import BOT_SCOPES

    root = Path(__file__).resolve().parent.parent / "deploy" / "slack"
    for name in ("manifest.yaml", "manifest.socket-mode.yaml"):
        content = (root / name).read_text(encoding="utf-8")
        section = content.split("    bot:\n", 1)[1].split("settings:", 1)[0]
        scopes = re.findall(r"^\s+- ([a-z:._]+)", section, re.MULTILINE)
        assert tuple(scopes) == BOT_SCOPES, name
        assert "app_mention" in content and "message.im" in content
        interactivity = content.split("  interactivity:", 1)[1].split("\n  org_", 1)[0]
        assert "is_enabled: true" in interactivity, name  # the buttons
        if "socket" not in name:
            assert "request_url: https://fathom.example.com/slack/events" in interactivity
        manifest = yaml.safe_load(content)
        # An agent (docs.slack.dev/ai/migrating-to-agent-messaging: agent_view replaces
        # assistant_view, agent_description its assistant_description), subscribed to
        # Slack's Stop, and the scope sessions need (chat:write, docs.slack.dev/ai/agent-sessions).
        agent = manifest["features"]["agent_view"]
        assert agent["agent_description"] and "assistant_view" not in manifest["features"], name
        events = manifest["settings"]["event_subscriptions"]["bot_events"]
        assert set(events) == SUBSCRIBED_EVENTS and not ASSISTANT_VIEW_EVENTS & set(events), name
        assert {"chat:write", "assistant:write"} <= set(BOT_SCOPES)
        assert manifest["oauth_config"]["scopes"]["bot"] == list(BOT_SCOPES), name


async def test_serve_forgets_platform_events_older_than_a_week(
    start_bot: BotFactory, tmp_path: Path, templates: MigratedTemplates
) -> None:
    url = templates.sqlite(tmp_path / "events.db")
    database = Database(url)
    store = Store(database)
    assert await store.events.claim_event("slack:event:old")
    assert await store.events.claim_event("slack:event:recent")
    async with database.engine.begin() as conn:
        await conn.execute(
            text("UPDATE processed_events SET created_at = '2020-01-01 00:00:00' WHERE key = :k"),
            {"k": "slack:event:old"},
        )
    await start_bot(database_url=url)
    deadline = time.monotonic() + 10
    while await store.events.claim_event("slack:event:old") is False:
        assert time.monotonic() < deadline, "old event was not pruned at start-up"
        await asyncio.sleep(0.1)
    assert await store.events.claim_event("slack:event:recent") is False
    await database.dispose()


# -- files attached (issue 20; parsing and download: tests/test_slack_files.py) ------------

NOTES = (
    "Heat pump field trial notes. In January the defrost cycles cost seven percent of the "
    "heat output at the Oslo site, and the night setback saved little."
)


def report_text(bot: Bot) -> str:
    return "\n".join(b.get("text", "") for m in bot.reports() for b in m.get("blocks") or [])


def writer_prompts(bot: Bot) -> list[str]:
    return [str(r.body["messages"][-1]["content"]) for r in bot.llm.fake.requests_for("writer")]


async def test_a_mention_with_a_file_reads_it_into_the_report(start_bot: BotFactory) -> None:
    bot = await start_bot()
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    event = with_files(app_mention_event("heat pump defrost losses depth=1"), notes)
    await bot.event(event, "Ev-file-read")
    [run] = await bot.finished()
    assert run.status == "succeeded" and run.attachments_read == 1
    assert run.attachments is not None
    [stored] = run.attachments
    assert stored["id"] == notes["id"] and stored["name"] == "trial-notes.txt"
    assert stored["url"] == notes["permalink"] and stored["attached_by"] == "U123"
    [request] = bot.slack.file_requests
    assert request.authorization == f"Bearer {BOT_TOKEN}"
    assert request.path.endswith(f"-{notes['id']}/download/trial-notes.txt")
    [prompt] = writer_prompts(bot)
    assert "trial-notes.txt (attached by U123)" in prompt and "defrost cycles" in prompt
    report = report_text(bot)
    assert "trial-notes.txt (attached by U123)" in report and notes["permalink"] in report
    assert "<@U123>" not in report
    assert bot.slack.calls_to("chat.postEphemeral") == []  # nothing to say about the file


async def test_a_file_names_its_attacher_by_slack_id_beside_the_display_name(
    start_bot: BotFactory,
) -> None:
    """An event carrying ``user_profile`` names the sender by display name in the report
    (https://api.slack.com/events/message/file_share); the run's attachment and the thread's
    file keep their user id beside it, so ``fathom forget`` finds the file by that id and no
    row keeps the name afterwards (issue 54)."""
    from storage import Person
    from tests.test_forget import rows_naming

    bot = await start_bot()
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    event = with_files(app_mention_event("heat pump defrost losses depth=1"), notes)
    event["user_profile"] = {"display_name": "Bea Marker", "real_name": "Bea M"}
    await bot.event(event, "Ev-file-named")
    [run] = await bot.finished()
    [stored] = run.attachments or []
    assert stored["attached_by"] == "Bea Marker" and stored["attacher_id"] == "U123"
    assert ("thread_variables", "files") in await rows_naming(bot.database, "Bea Marker")
    done = await bot.store.forgetting.forget(Person.parse(USER))
    assert done.runs == 1 and done.busy == ()
    assert await rows_naming(bot.database, "Bea Marker") == []
    assert await rows_naming(bot.database, notes["permalink"]) == []


async def test_files_not_read_are_named_in_one_reply_and_the_run_goes_on(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot(FATHOM_ATTACHMENT_MAX_BYTES="2048")
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    program = bot.slack.host_file("setup.exe", b"MZ" + b"\0" * 100)
    chart = bot.slack.host_file("chart.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    big = bot.slack.host_file("dump.txt", b"x" * 4096)
    drive = {
        "id": "FGDRIVE1",
        "name": "Roadmap",
        "mimetype": "application/vnd.google-apps.document",
        "filetype": "gdoc",
        "mode": "external",
        "is_external": True,
        "external_type": "gdrive",
        "url_private": "https://docs.google.com/document/d/1abc/edit",
    }
    deleted = {"id": "FDELETED1", "mode": "tombstone"}
    files = (notes, program, chart, big, drive, deleted)
    await bot.event(with_files(app_mention_event("heat pumps depth=1"), *files), "Ev-not-read")
    [run] = await bot.finished()
    assert run.status == "succeeded" and run.attachments_read == 1
    [note] = await wait_for(lambda: bot.slack.calls_to("chat.postEphemeral"))
    text = note.params["text"]
    assert text.startswith(":paperclip: Not read: ") and note.params["user"] == "U123"
    for expected in (
        "Roadmap (a link to a file kept outside the chat, not the file itself)",
        "FDELETED1 (deleted)",
        "setup.exe (not a file I read",
        "chart.png (not a file I read",
        "dump.txt (larger than",
    ):
        assert expected in text, text
    assert "trial-notes.txt" not in text
    # Only the file that is read was downloaded.
    assert [r.path.rsplit("/", 1)[1] for r in bot.slack.file_requests] == ["trial-notes.txt"]


async def test_a_file_address_pasted_in_the_text_is_never_fetched(start_bot: BotFactory) -> None:
    bot = await start_bot()
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    text = f"summarise <{notes['url_private_download']}> depth=1"
    await bot.event(app_mention_event(text), "Ev-pasted")
    [run] = await bot.finished()
    assert run.status == "succeeded" and not run.attachments
    assert bot.slack.file_requests == []


async def test_without_files_read_the_run_notes_the_scope_and_goes_on(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot()
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    bot.slack.files_read = False
    await bot.event(with_files(app_mention_event("heat pumps depth=1"), notes), "Ev-scope")
    [run] = await bot.finished()
    assert run.status == "succeeded" and run.attachments_read == 0
    [why] = [n for n in run.notes if "trial-notes.txt" in n]
    assert "files:read" in why
    assert len(bot.slack.file_requests) == 1  # refused for good: not tried again
    assert "files:read" in report_text(bot)


async def test_a_download_that_fails_once_is_retried(start_bot: BotFactory) -> None:
    bot = await start_bot()
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    bot.slack.fail_next(FILES, status=500)
    await bot.event(with_files(app_mention_event("heat pumps depth=1"), notes), "Ev-500")
    [run] = await bot.finished()
    assert run.attachments_read == 1 and len(bot.slack.file_requests) == 2
    assert "defrost cycles" in writer_prompts(bot)[0]


async def test_a_follow_up_in_the_thread_reuses_the_file_and_reads_a_new_one(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot()
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    first = app_mention_event("heat pumps depth=1", ts="1700000300.000100")
    await bot.event(with_files(first, notes), "Ev-first")
    await bot.finished()
    extra = bot.slack.host_file("costs.md", b"# Costs\nThe install cost 14,000 EUR per home.")
    follow = app_mention_event("what about costs? depth=1", thread_ts="1700000300.000100")
    await bot.event(with_files(follow, extra, notes), "Ev-follow-files")
    runs = await bot.finished(2)
    second = next(r for r in runs if r.dedupe_key == "slack:event:Ev-follow-files")
    assert second.thread_key == "slack:T0001:C0001:1700000300.000100"
    names = [r.path.rsplit("/", 1)[1] for r in bot.slack.file_requests]
    assert names == ["trial-notes.txt", "costs.md"]  # the thread's file is not fetched again
    prompt = writer_prompts(bot)[-1]
    assert "defrost cycles" in prompt and "14,000 EUR" in prompt


async def test_a_dm_of_files_only_waits_for_the_next_request(start_bot: BotFactory) -> None:
    bot = await start_bot()
    notes = bot.slack.host_file("trial-notes.txt", NOTES.encode())
    await bot.event(with_files(im_message_event(""), notes), "Ev-dm-files")
    [kept] = await wait_for(lambda: bot.slack.calls_to("chat.postEphemeral"))
    assert "Got trial-notes.txt" in kept.params["text"] and "10 min" in kept.params["text"]
    assert await bot.runs() == [] and bot.slack.file_requests == []
    await bot.event(im_message_event("heat pump defrost depth=1"), "Ev-dm-topic")
    [run] = await bot.finished()
    assert run.attachments_read == 1 and len(bot.slack.file_requests) == 1
    assert "trial-notes.txt (attached by U123)" in report_text(bot)


async def test_a_slack_connect_file_is_described_then_read(start_bot: BotFactory) -> None:
    bot = await start_bot()
    file = bot.slack.host_file("partner-brief.txt", NOTES.encode(), team="T0PARTNER")
    stub = bot.slack.connect_stub(file)
    await bot.event(with_files(app_mention_event("heat pumps depth=1"), stub), "Ev-connect")
    [run] = await bot.finished()
    assert run.attachments_read == 1
    assert [c.token for c in bot.slack.calls_to("files.info")] == [BOT_TOKEN]
    assert "partner-brief.txt (attached by U123)" in report_text(bot)


async def test_a_dm_of_a_drive_link_only_is_named_as_not_read(start_bot: BotFactory) -> None:
    bot = await start_bot()
    drive = {
        "id": "FGDRIVE2",
        "name": "Roadmap",
        "mode": "external",
        "is_external": True,
        "external_type": "gdrive",
        "url_private": "https://docs.google.com/document/d/1abc/edit",
    }
    await bot.event(with_files(im_message_event(""), drive), "Ev-dm-drive")
    [note] = await wait_for(lambda: bot.slack.calls_to("chat.postEphemeral"))
    assert "Not read: Roadmap (a link to a file kept outside the chat" in note.params["text"]
    await bot.event(im_message_event("roadmaps depth=1"), "Ev-dm-after-drive")
    [run] = await bot.finished()
    assert not run.attachments and bot.slack.file_requests == []
