"""Slack's agent surface against the fake Slack: the thread status while a run works, the plan
as task cards in the progress message, and the assistant pane.

The delivery tests drive one run's ``ChatDelivery`` with progress events and a manual clock
(the status refresh waits on it, so a refresh is seen by moving the clock, never by
sleeping); the end-to-end tests serve the whole app (``tests.test_slack_app``'s bot) and run
real researches against the fake LLM and search.
"""

# ruff: noqa: F811 - the Slack bot fixtures are imported from test_slack_app

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import update

from bots.chat.controls import run_buttons
from bots.chat.delivery import ChatDelivery
from bots.dingtalk.delivery import CardsRefused, DingTalkThread
from bots.feishu.delivery import FeishuThread
from bots.slack.delivery import SlackPosters
from bots.slack.messenger import StaticSlackClients, make_web_client
from bots.slack.status import REFRESH_SECONDS, RETRY_SECONDS
from core.engine.progress import ProgressEvent, ProgressKind, ProgressTask, TaskSource, TaskStatus
from storage import Database, RunRecord, Store
from storage.tables import ConversationContext
from tests.chat_app import wait_for
from tests.fakes import FakeSlackServer
from tests.fakes.slack import SlackCall, assistant_thread_event, im_message_event
from tests.runs import KEY, new_run
from tests.test_slack_app import (  # noqa: F401 - the served bot's fixtures
    Bot,
    BotFactory,
    _clean_env,
    start_bot,
)
from tests.timers import ManualTimer

TOKEN = "xoxb-test"
SET_STATUS = "assistant.threads.setStatus"
THREAD = KEY.rsplit(":", 1)[1]


@pytest.fixture
def server(slack_server: FakeSlackServer) -> FakeSlackServer:
    return slack_server


def factory_for(server: FakeSlackServer, store: Store, timer: ManualTimer) -> SlackPosters:
    client = make_web_client(TOKEN, server.api_url)
    return SlackPosters(StaticSlackClients(client), store, edit_interval=0, timer=timer)


def event(
    run: RunRecord,
    kind: ProgressKind,
    text: str,
    *,
    topic: str | None = None,
    tasks: tuple[ProgressTask, ...] = (),
    pages: int = 0,
    rounds: int = 0,
) -> ProgressEvent:
    return ProgressEvent(run.id, kind, text, rounds, run.depth, topic, tasks, pages)


def statuses(server: FakeSlackServer) -> list[str]:
    return [str(c.params["status"]) for c in server.fake.calls_to(SET_STATUS)]


async def delivery_for(factory: SlackPosters, store: Store, run_id: str) -> ChatDelivery:
    run = await store.runs.get_run(run_id)
    assert run is not None
    return await factory.for_run(run)


# -- the thread status ------------------------------------------------------------------


async def shown(server: FakeSlackServer, *expected: str) -> None:
    """Wait until the thread status calls so far are ``expected`` (the keeper sends them in
    the background)."""
    await wait_for(lambda: statuses(server) == list(expected))


async def test_the_status_follows_the_run_and_is_cleared_at_its_end(
    server: FakeSlackServer, store: Store
) -> None:
    run, _ = await new_run(store)
    delivery = await factory_for(server, store, ManualTimer()).for_run(run)
    steps = [
        (event(run, ProgressKind.STARTED, "Researching."), "is planning the research…"),
        (
            event(run, ProgressKind.SEARCHING, "Searching.", topic="heat pumps <!channel>"),
            "is searching “heat pumps @\u2060channel”…",  # a topic's mention made inert
        ),
        (event(run, ProgressKind.SEARCHED, "1/3th.", pages=3), "is reading 3 pages…"),
        (event(run, ProgressKind.WRITING, "Writing."), "is writing the report…"),
        (event(run, ProgressKind.CHECKING, "Checking."), "is checking citations…"),
    ]
    said: list[str] = []
    for step, words in steps:
        await delivery.publish(step)
        said.append(words)
        await shown(server, *said)
    assert server.fake.statuses == {
        ("C0001", THREAD): ("is checking citations…", ["Checking citations…"])
    }
    await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))
    await delivery.aclose()  # (the job closes the delivery once the report is posted)

    assert statuses(server) == [*said, ""]  # cleared
    calls = server.fake.calls_to(SET_STATUS)
    assert {(c.params["channel_id"], c.params["thread_ts"]) for c in calls} == {("C0001", THREAD)}
    assert all(len(c.params.get("loading_messages") or []) <= 10 for c in calls)
    assert server.fake.statuses == {}  # nothing left under the thread


async def test_the_run_does_not_wait_for_a_slow_status(
    server: FakeSlackServer, store: Store
) -> None:
    run, _ = await new_run(store)
    delivery = await factory_for(server, store, ManualTimer()).for_run(run)
    server.fake.held.add(SET_STATUS)  # Slack does not answer the status calls
    await delivery.publish(event(run, ProgressKind.STARTED, "Researching."))
    await shown(server, "is planning the research…")  # asked, not answered
    for i, topic in enumerate(("a", "b", "c"), 1):
        await delivery.publish(event(run, ProgressKind.SEARCHING, f"{i}/3th.", topic=topic))
    # Every step was shown in the progress message while the status call still hung.
    await wait_for(lambda: "3/3th." in current_text(server, delivery))
    assert server.fake.statuses == {} and len(statuses(server)) == 1
    server.fake.held.clear()
    await shown(server, "is planning the research…", "is searching “c”…")  # the newest
    await delivery.aclose()


def current_text(server: FakeSlackServer, delivery: ChatDelivery) -> str:
    message = server.fake.messages.get(("C0001", delivery.message_id or ""))
    return str(message["text"]) if message else ""


async def test_the_status_is_set_again_before_slack_drops_it(
    server: FakeSlackServer, store: Store
) -> None:
    timer = ManualTimer()
    run, _ = await new_run(store)
    delivery = await factory_for(server, store, timer).for_run(run)
    await delivery.publish(event(run, ProgressKind.SEARCHING, "Searching.", topic="tidal power"))
    # The keeper waits for the refresh, due well within Slack's two minutes.
    assert REFRESH_SECONDS < 120
    await wait_for(lambda: timer.waiting_until() == [REFRESH_SECONDS])
    timer.advance(REFRESH_SECONDS - 1)
    assert timer.waiting_until() == [REFRESH_SECONDS] and len(statuses(server)) == 1
    timer.advance(1)
    await shown(server, *["is searching “tidal power”…"] * 2)
    await wait_for(lambda: timer.waiting_until() == [2 * REFRESH_SECONDS])

    # A new step is sent at once; the next refresh repeats the newest status.
    await delivery.publish(event(run, ProgressKind.WRITING, "Writing."))
    await wait_for(lambda: len(statuses(server)) == 3)
    # (sent at the clock's 90 s: due again 90 s later)
    await wait_for(lambda: timer.waiting_until() == [2 * REFRESH_SECONDS])
    timer.advance(REFRESH_SECONDS)
    await wait_for(lambda: len(statuses(server)) == 4)
    assert statuses(server)[2:] == ["is writing the report…"] * 2

    await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))
    await delivery.aclose()
    assert timer.waiting_until() == [] and statuses(server)[-1] == ""


async def test_a_refused_status_is_not_asked_again_in_that_workspace(
    server: FakeSlackServer, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    timer = ManualTimer()
    factory = factory_for(server, store, timer)
    server.fake.fail_next(SET_STATUS, error="missing_scope")
    run, _ = await new_run(store)
    delivery = await factory.for_run(run)
    with caplog.at_level(logging.WARNING, logger="bots.slack"):
        await delivery.publish(event(run, ProgressKind.STARTED, "Researching."))
        await wait_for(lambda: factory.refusals.status_refused("T0001", "C0001"))
        await delivery.publish(event(run, ProgressKind.SEARCHING, "Searching.", topic="a"))
        await delivery.publish(event(run, ProgressKind.WRITING, "Writing."))
        await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))
        await delivery.aclose()
        other, _ = await new_run(store, thread_key="slack:T0001:C0002:1700000001.000100")
        second = await factory.for_run(other)
        await second.publish(event(other, ProgressKind.STARTED, "Researching."))
        await second.publish(event(other, ProgressKind.FINISHED, "Research done."))
        await second.aclose()
    assert len(server.fake.calls_to(SET_STATUS)) == 1  # the refusal, and nothing after it
    assert timer.waiting_until() == []  # no refresh of a refused status
    refusals = [r for r in caplog.records if "refused the thread status" in r.getMessage()]
    assert len(refusals) == 1 and "missing_scope" in refusals[0].getMessage()
    # The progress message went on as before.
    progress = server.fake.messages[("C0001", delivery.message_id or "")]
    assert "Research done." in progress["text"]


async def test_a_status_slack_fails_to_set_is_tried_again(
    server: FakeSlackServer, store: Store
) -> None:
    timer = ManualTimer()
    run, _ = await new_run(store)
    delivery = await factory_for(server, store, timer).for_run(run)
    server.fake.fail_next(SET_STATUS, status=500, body="html")
    await delivery.publish(event(run, ProgressKind.SEARCHING, "Searching.", topic="wind"))
    await wait_for(lambda: timer.waiting_until() == [RETRY_SECONDS])
    assert server.fake.statuses == {} and len(statuses(server)) == 1
    timer.advance(RETRY_SECONDS)
    await wait_for(lambda: server.fake.statuses)
    assert statuses(server) == ["is searching “wind”…"] * 2
    await delivery.aclose()


async def test_after_a_takeover_the_new_replica_shows_and_clears_the_status(
    server: FakeSlackServer, store: Store
) -> None:
    first_timer, second_timer = ManualTimer(), ManualTimer()
    run, _ = await new_run(store)
    first = await factory_for(server, store, first_timer).for_run(run)
    await first.publish(event(run, ProgressKind.STARTED, "Researching."))
    await shown(server, "is planning the research…")
    await first.publish(event(run, ProgressKind.SEARCHING, "Searching.", topic="one"))
    await shown(server, "is planning the research…", "is searching “one”…")
    await wait_for(lambda: first_timer.waiting_until() == [REFRESH_SECONDS])
    await first.aclose()  # the claim was lost: this replica stops, without clearing
    assert first_timer.waiting_until() == []
    assert server.fake.statuses  # still shown, until the new replica's first step

    # Another replica takes the run over (the progress message id is stored with the run).
    second = await delivery_for(factory_for(server, store, second_timer), store, run.id)
    await second.publish(event(run, ProgressKind.STARTED, "Resuming.", rounds=1))
    await wait_for(lambda: len(statuses(server)) == 3)
    await second.publish(event(run, ProgressKind.SEARCHING, "Searching.", topic="two", rounds=1))
    await wait_for(lambda: len(statuses(server)) == 4)
    await wait_for(lambda: second_timer.waiting_until() == [REFRESH_SECONDS])
    second_timer.advance(REFRESH_SECONDS)
    await wait_for(lambda: len(statuses(server)) == 5)
    await second.publish(event(run, ProgressKind.FINISHED, "Research done.", rounds=2))
    await second.aclose()

    assert statuses(server)[2:] == [
        "is planning the research…",
        "is searching “two”…",
        "is searching “two”…",  # refreshed by the new replica's clock
        "",
    ]
    assert server.fake.statuses == {}
    assert first.message_id == second.message_id  # one progress message, edited by both

    # A replica that takes over a run already finished clears what another one showed.
    server.fake.statuses[("C0001", THREAD)] = ("is writing the report…", [])
    third = await delivery_for(factory_for(server, store, ManualTimer()), store, run.id)
    await third.publish(event(run, ProgressKind.FINISHED, "Research done.", rounds=2))
    await third.aclose()
    assert server.fake.statuses == {} and statuses(server)[-1] == ""


# -- the plan in the progress message ---------------------------------------------------


def plan_of(message: dict[str, Any]) -> dict[str, Any] | None:
    plans = [b for b in message.get("blocks") or [] if b.get("type") == "plan"]
    return plans[0] if plans else None


SEARCHED = (
    ProgressTask(
        "search-1",
        "heat pumps",
        TaskStatus.COMPLETE,
        5,
        (TaskSource("One", "https://a.example/1"), TaskSource("<@U1> two", "https://b.example")),
    ),
    ProgressTask("search-2", "cold climates", TaskStatus.IN_PROGRESS),
)


async def test_the_plan_shows_each_step_with_its_sources_and_ends_with_what_finished(
    server: FakeSlackServer, store: Store
) -> None:
    run, _ = await new_run(store)
    delivery = await factory_for(server, store, ManualTimer()).for_run(run)
    await delivery.publish(
        event(run, ProgressKind.SEARCHING, "1/3th search executed. Searching.", tasks=SEARCHED)
    )
    message = server.fake.messages[("C0001", delivery.message_id or "")]
    assert message["text"].splitlines()[1].startswith("1/3th search executed.")
    plan = plan_of(message)
    assert plan is not None and message["blocks"][0]["type"] == "section"  # the text first
    assert [(t["title"], t["status"]) for t in plan["tasks"]] == [
        ("heat pumps", "complete"),
        ("cold climates", "in_progress"),
    ]
    first = plan["tasks"][0]
    assert [s["url"] for s in first["sources"]] == ["https://a.example/1", "https://b.example"]
    assert first["sources"][1]["text"] == "@\u2060U1 two"  # no live mention
    assert "5 results" in str(first["output"])
    assert [b["type"] for b in message["blocks"]] == ["section", "plan", "actions"]

    await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))
    final = server.fake.messages[("C0001", delivery.message_id or "")]
    assert [b["type"] for b in final["blocks"]] == ["section", "plan"]  # no buttons
    plan = plan_of(final)
    assert plan is not None and [t["task_id"] for t in plan["tasks"]] == ["search-1"]


async def test_a_workspace_that_refuses_plan_blocks_gets_todays_message_once_asked(
    server: FakeSlackServer, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    server.fake.plan_blocks = False
    run, _ = await new_run(store)
    delivery = await factory_for(server, store, ManualTimer()).for_run(run)
    with caplog.at_level(logging.WARNING, logger="bots.slack"):
        await delivery.publish(event(run, ProgressKind.STARTED, "Researching.", tasks=SEARCHED))
        steps = [
            event(run, ProgressKind.SEARCHING, f"{i}/3th search executed.", tasks=SEARCHED)
            for i in (1, 2)
        ]
        for step in steps:
            await delivery.publish(step)
            shown_text = step.text  # each edit made before the next step
            await wait_for(lambda t=shown_text: t in current_text(server, delivery))
        await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))

    def with_plan(call: SlackCall) -> bool:
        return any(b.get("type") == "plan" for b in call.params.get("blocks") or [])

    sent = server.fake.calls_to("chat.postMessage") + server.fake.calls_to("chat.update")
    assert sum(1 for c in sent if with_plan(c)) == 1  # asked once, then remembered
    final = server.fake.messages[("C0001", delivery.message_id or "")]
    assert "Research done." in final["text"] and final.get("blocks") == []
    first_edit = server.fake.calls_to("chat.update")[0].params
    assert [b["type"] for b in first_edit["blocks"]] == ["section", "actions"]  # as today
    refused = [r for r in caplog.records if "refused plan blocks" in r.getMessage()]
    assert len(refused) == 1


async def test_feishu_and_dingtalk_show_the_same_progress_with_or_without_a_plan(
    store: Store,
) -> None:
    feishu_run, _ = await new_run(store, thread_key="feishu:t1:oc_1:om_1")
    dingtalk_run, _ = await new_run(store, thread_key="dingtalk:corp1:cid1:msg1")
    posters: list[Any] = [
        FeishuThread(feishu_run, cast(Any, None)),
        DingTalkThread(dingtalk_run, cast(Any, None), template_id=None, cards=CardsRefused()),
    ]
    status = "1/3th search executed. Searching “cold climates”."
    for poster, run in zip(posters, (feishu_run, dingtalk_run), strict=True):
        for buttons in ((), tuple(run_buttons(run.id, "en"))):
            for message_id in (None, "m1"):
                plain = poster.render_progress(status, message_id, buttons)
                assert poster.render_progress(status, message_id, buttons, SEARCHED) == plain


# -- end to end: a research in Slack ----------------------------------------------------


def plans_shown(bot: Bot, ts: str) -> list[list[tuple[str, str]]]:
    """Every plan the progress message ``ts`` showed, in order: (task id, status) pairs."""
    shown = []
    for call in bot.slack.calls_to("chat.postMessage") + bot.slack.calls_to("chat.update"):
        if call.params.get("ts", ts) != ts and call.method == "chat.update":
            continue
        plan = plan_of(call.params)
        if plan is not None:
            shown.append([(t["task_id"], t["status"]) for t in plan["tasks"]])
    return shown


ORDER = {"pending": 0, "in_progress": 1, "complete": 2, "error": 2}


def assert_statuses_move_forward(plans: list[list[tuple[str, str]]]) -> None:
    """Each task's status only moves forward (pending, in progress, then done)."""
    seen: dict[str, int] = {}
    for plan in plans:
        for task_id, status in plan:
            assert ORDER[status] >= seen.get(task_id, 0), (task_id, status, plans)
            seen[task_id] = ORDER[status]


async def searched_urls(bot: Bot, run: RunRecord) -> set[str]:
    """Every address the search returned to the run's thread (its stored findings)."""
    thread = await bot.store.threads.get_thread(run.thread_key)
    assert thread is not None
    variables = await bot.store.threads.load_variables(thread.id)
    assert variables is not None
    return {r["url"] for f in variables["findings"] for r in f["results"]}


async def test_a_research_shows_its_status_and_its_searches_as_tasks(start_bot: BotFactory) -> None:
    bot = await start_bot()
    await bot.command("solid-state batteries depth=3", trigger_id="t-agent")
    [run] = await bot.finished()
    assert run.status == "succeeded" and run.progress_message_id
    ts = run.progress_message_id

    said = [str(c.params["status"]) for c in bot.slack.calls_to(SET_STATUS)]
    # In order; a step overtaken by the next one before it was sent may be skipped (on a
    # loaded machine the plan is made while the session is opened, so the first status
    # may already be a search).
    order = ["is planning", "is searching", "is reading", "is planning the next", "is writing"]
    order.append("is checking")  # the report's citations, after it is written
    assert said[0].startswith(("is planning the research…", "is searching")), said
    assert said[-1] == "", said
    assert any(s.startswith("is searching") for s in said), said
    steps = [s for s in said[1:-1] if s]
    assert all(any(s.startswith(o) for o in order) for s in steps), said
    ending = [s for s in ("is writing the report…", "is checking citations…") if s in said]
    assert [said.index(s) for s in ending] == list(
        range(len(said) - 1 - len(ending), len(said) - 1)
    )
    assert {c.params["thread_ts"] for c in bot.slack.calls_to(SET_STATUS)} == {ts}
    assert bot.slack.statuses == {}

    plans = plans_shown(bot, ts)
    assert plans, "no plan shown"
    assert_statuses_move_forward(plans)
    final = bot.slack.messages[("C0001", ts)]
    plan = plan_of(final)
    assert plan is not None
    assert [t["status"] for t in plan["tasks"]] == ["complete"] * 3
    assert "3/3th search executed." in final["text"] or "3/3 searches" in final["text"]
    shown = {s["url"] for t in plan["tasks"] for s in t.get("sources", [])}
    assert shown and shown <= await searched_urls(bot, run)  # only what the search returned


async def test_a_graph_research_shows_its_sub_questions_as_tasks(start_bot: BotFactory) -> None:
    bot = await start_bot()
    await bot.command("heat pumps strategy=graph depth=2", trigger_id="t-agent-graph")
    [run] = await bot.finished()
    assert run.status == "succeeded" and run.progress_message_id
    plans = plans_shown(bot, run.progress_message_id)
    assert_statuses_move_forward(plans)
    assert any(s == "in_progress" for plan in plans for _, s in plan)  # seen while searching
    final = plan_of(bot.slack.messages[("C0001", run.progress_message_id)])
    assert final is not None and final["tasks"]
    assert all(t["task_id"].startswith("node-") for t in final["tasks"])
    assert {t["status"] for t in final["tasks"]} <= {"complete", "error"}
    shown = {s["url"] for t in final["tasks"] for s in t.get("sources", [])}
    assert shown <= await searched_urls(bot, run)


async def test_without_plan_blocks_or_the_status_a_research_still_reports(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot()
    bot.slack.plan_blocks = False
    bot.slack.fail_next(SET_STATUS, error="missing_scope")
    await bot.command("tidal power depth=2", trigger_id="t-agent-plain")
    [run] = await bot.finished()
    assert run.status == "succeeded" and bot.reports()
    assert len(bot.slack.calls_to(SET_STATUS)) == 1  # refused once, never asked again
    final = bot.slack.messages[("C0001", run.progress_message_id or "")]
    assert "Research done" in final["text"] and plan_of(final) is None


# -- the assistant pane -----------------------------------------------------------------


async def test_a_new_assistant_thread_gets_a_greeting_and_suggested_prompts(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot()
    started = assistant_thread_event(thread_ts="1729999327.187299")
    assert (await bot.event(started, "Ev-pane-1")).status_code == 200
    key = ("D0001", "1729999327.187299")
    offered = await wait_for(lambda: bot.slack.prompts.get(key))
    assert 1 <= len(offered["prompts"]) <= 4
    assert all(p["title"] and p["message"] for p in offered["prompts"])
    [hello] = [m for m in bot.slack.history if m.get("thread_ts") == key[1]]
    assert "topic" in hello["text"]

    # In Chinese for a user whose Slack speaks Chinese.
    bot.slack.locales["U777"] = "zh-CN"
    other = assistant_thread_event(user="U777", channel="D0777", thread_ts="1729999400.000100")
    await bot.event(other, "Ev-pane-2")
    offered = await wait_for(lambda: bot.slack.prompts.get(("D0777", "1729999400.000100")))
    assert any("研究" in p["title"] or "进展" in p["title"] for p in offered["prompts"])


async def test_a_message_in_the_pane_starts_a_research_that_records_the_channel_viewed(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot()
    thread = "1729999500.000100"
    await bot.event(assistant_thread_event(thread_ts=thread, context_channel="C0042"), "Ev-p1")
    await wait_for(lambda: bot.slack.prompts.get(("D0001", thread)))
    moved = assistant_thread_event(
        "assistant_thread_context_changed", thread_ts=thread, context_channel="C0099"
    )
    await bot.event(moved, "Ev-p2")
    await wait_for(
        lambda: bot.store.contexts.conversation_context(f"slack:T0001:D0001:{thread}"),
    )

    async def moved_to_c0099() -> bool:
        kept = await bot.store.contexts.conversation_context(f"slack:T0001:D0001:{thread}")
        return bool(kept) and kept.get("context_channel") == "C0099"

    await wait_for(moved_to_c0099)
    asked = im_message_event("perovskite solar cells depth=2", thread_ts=thread)
    await bot.event(asked, "Ev-p3")
    [run] = await bot.finished()
    assert run.status == "succeeded"
    assert run.thread_key == f"slack:T0001:D0001:{thread}"
    assert (run.platform_context or {}).get("context_channel") == "C0099"
    assert bot.slack.titles[("D0001", thread)] == "perovskite solar cells"
    reports = bot.reports()
    assert reports and all(m["thread_ts"] == thread for m in reports)


@pytest.mark.parametrize("bad", ["C0042\u0000X", "C0042\ud800", "<!channel>", "C" * 65])
async def test_a_context_whose_ids_are_not_slack_ids_is_kept_without_them(
    start_bot: BotFactory, bad: str
) -> None:
    """A context whose channel or team id carries a NUL (which PostgreSQL refuses in text),
    a lone surrogate, markup or 65 characters: the context is kept without that id, never a
    database error; a thread whose own channel id is such is ignored."""
    bot = await start_bot()
    thread = "1729999550.000100"
    event = assistant_thread_event(thread_ts=thread, context_channel=bad)
    event["assistant_thread"]["context"]["team_id"] = bad
    await bot.event(event, "Ev-bad1")
    key = f"slack:T0001:D0001:{thread}"
    await wait_for(lambda: bot.store.contexts.conversation_context(key))
    kept = await bot.store.contexts.conversation_context(key)
    assert kept == {"assistant_thread": "true"}, kept
    odd = assistant_thread_event(thread_ts="1729999551.000100")
    odd["assistant_thread"]["channel_id"] = bad
    await bot.event(odd, "Ev-bad2")
    await bot.event(assistant_thread_event(thread_ts="1729999552.000100"), "Ev-ok")
    await wait_for(
        lambda: bot.store.contexts.conversation_context("slack:T0001:D0001:1729999552.000100")
    )
    assert (
        await bot.store.contexts.conversation_context("slack:T0001:D0001:1729999551.000100") is None
    )


async def test_a_conversation_keeps_its_last_context_until_it_is_pruned(
    store: Store, database: Database
) -> None:
    key = "slack:T0001:D0001:1729999600.000100"
    assert await store.contexts.conversation_context(key) is None
    await store.contexts.set_conversation_context(key, {"context_channel": "C1"})
    await store.contexts.set_conversation_context(
        key, {"context_channel": "C2"}
    )  # replaced, one row
    assert await store.contexts.conversation_context(key) == {"context_channel": "C2"}
    assert await store.contexts.conversation_context(key + "0") is None
    assert await store.contexts.prune_contexts(timedelta(days=1)) == 0
    async with database.sessionmaker.begin() as session:  # it last changed long ago
        await session.execute(
            update(ConversationContext).values(updated_at=datetime(2020, 1, 1, tzinfo=UTC))
        )
    assert await store.contexts.prune_contexts(timedelta(days=1)) == 1
    assert await store.contexts.conversation_context(key) is None


async def test_a_thread_slack_refuses_loses_its_status_and_the_channel_keeps_it(
    server: FakeSlackServer, store: Store
) -> None:
    factory = factory_for(server, store, ManualTimer())
    server.fake.fail_next(SET_STATUS, error="thread_not_found")
    run, _ = await new_run(store)
    delivery = await factory.for_run(run)
    await delivery.publish(event(run, ProgressKind.STARTED, "Researching."))
    await shown(server, "is planning the research…")
    await delivery.publish(event(run, ProgressKind.SEARCHING, "Searching.", topic="a"))
    await delivery.aclose()
    assert len(statuses(server)) == 1  # that thread: no more
    assert not factory.refusals.status_refused("T0001", "C0001")
    other, _ = await new_run(store, thread_key="slack:T0001:C0001:1700000002.000100")
    second = await factory.for_run(other)
    await second.publish(event(other, ProgressKind.STARTED, "Researching."))
    await shown(server, "is planning the research…", "is planning the research…")
    await second.aclose()


async def test_the_final_status_of_a_run_that_did_not_succeed_clears_the_status(
    server: FakeSlackServer, store: Store
) -> None:
    run, _ = await new_run(store)
    first = await factory_for(server, store, ManualTimer()).for_run(run)
    await first.publish(event(run, ProgressKind.STARTED, "Researching."))
    await shown(server, "is planning the research…")
    await first.aclose()  # the replica died; another one delivers the failed outcome
    second = await delivery_for(factory_for(server, store, ManualTimer()), store, run.id)
    await second.post_status("Research failed: the model is unavailable.")
    await second.aclose()
    assert statuses(server) == ["is planning the research…", ""]
    assert server.fake.statuses == {}
