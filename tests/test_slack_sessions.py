"""Slack's agent sessions (``agents.sessions.setStatus`` / ``rename``) for a run's thread, with
the assistant status as the fallback, against the fake Slack with the real slack-sdk client.

Sources of the shapes (the fake answers as they say, ``tests/fakes/slack.py``):
docs.slack.dev/ai/agent-sessions (sessions are thread-based; ``processing`` shows Slack's
Stop; only apps declared as agents create them; ``chat:write``),
docs.slack.dev/reference/methods/agents.sessions.setStatus (``status`` one of active,
processing, suspended, closed; ``title`` at most 200 characters and ``initiator_user_id``
used on creation only; rename with ``agents.sessions.rename``), and
docs.slack.dev/reference/events/agent_session_stopped (the
``missing_agent_session_stopped_event_subscription`` warning); slack-sdk 3.48's
``AsyncWebClient.agents_sessions_setStatus`` / ``agents_sessions_rename`` (JSON bodies).
The delivery tests drive one run's ``ChatDelivery`` with progress events and a manual clock;
the Stop tests serve the whole app (``tests.test_slack_app``'s bot) and send Slack's
``agent_session_stopped`` as docs.slack.dev/reference/events/agent_session_stopped shows it,
signed, to the Request URL (and over Socket Mode).
"""

# ruff: noqa: F811 - the Slack bot fixtures are imported from test_slack_app

from __future__ import annotations

import json
import logging
from urllib.parse import parse_qsl

import pytest

from bots.chat.delivery import ChatDelivery
from bots.slack.delivery import SlackPosters
from bots.slack.messenger import StaticSlackClients, make_web_client
from bots.slack.sessions import MAX_TITLE_CHARS, session_title
from bots.slack.status import RETRY_SECONDS
from core.engine.progress import ProgressEvent, ProgressKind
from storage import RunRecord, Store
from tests.chat_app import wait_for
from tests.fakes import FakeSlackServer
from tests.fakes.slack import (
    agent_session_stopped_event,
    app_mention_event,
    event_callback_body,
    im_message_event,
    slash_command_body,
)
from tests.runs import KEY, claim, finish, new_run
from tests.test_slack_app import (  # noqa: F401 - the served bot's fixtures
    APP_TOKEN,
    Bot,
    BotFactory,
    SocketSlack,
    _clean_env,
    ephemeral_answers,
    progress_with_buttons,
    socket_slack,
    start_bot,
)
from tests.timers import ManualTimer

TOKEN = "xoxb-test"
SET_STATUS = "assistant.threads.setStatus"
SESSION = "agents.sessions.setStatus"
RENAME = "agents.sessions.rename"
THREAD = KEY.rsplit(":", 1)[1]
REQUESTER = "slack:T0001:U123"


@pytest.fixture
def server(slack_server: FakeSlackServer) -> FakeSlackServer:
    return slack_server


def posters(server: FakeSlackServer, store: Store, timer: ManualTimer) -> SlackPosters:
    client = make_web_client(TOKEN, server.api_url)
    return SlackPosters(StaticSlackClients(client), store, edit_interval=0, timer=timer)


def event(run: RunRecord, kind: ProgressKind, text: str, topic: str | None = None) -> ProgressEvent:
    return ProgressEvent(run.id, kind, text, 0, run.depth, topic)


def session_calls(server: FakeSlackServer) -> list[dict[str, object]]:
    return [c.params for c in server.fake.calls_to(SESSION)]


async def run_through(delivery: ChatDelivery, run: RunRecord) -> None:
    """A run's steps from start to end, then its delivery closed (as the job does)."""
    await delivery.publish(event(run, ProgressKind.STARTED, "Researching."))
    await delivery.publish(event(run, ProgressKind.SEARCHING, "Searching.", topic="heat pumps"))
    await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))
    await delivery.aclose()


async def test_a_run_is_a_processing_session_titled_with_its_topic_then_active(
    server: FakeSlackServer, store: Store
) -> None:
    """``processing`` with the topic as title and the requester as initiator while the run
    works (Slack's Stop shows then), the words beside it through the assistant status, and
    ``active`` at the end (the app moves the session; Slack does not)."""
    run, _ = await new_run(store, requested_by=REQUESTER, topic="heat pumps <!channel> in Oslo")
    delivery = await posters(server, store, ManualTimer()).for_run(run)
    await delivery.publish(event(run, ProgressKind.STARTED, "Researching."))
    await wait_for(lambda: server.fake.statuses)  # the words follow the session
    assert server.fake.sessions == {
        ("C0001", THREAD): {
            "status": "processing",
            "title": "heat pumps @\u2060channel in Oslo",  # the mention made inert
            "initiator": "U123",
        }
    }
    await delivery.publish(event(run, ProgressKind.SEARCHING, "Searching.", topic="cop"))
    await wait_for(lambda: len(server.fake.calls_to(SET_STATUS)) == 2)
    await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))
    await delivery.aclose()

    assert [
        (c["status"], c.get("title"), c.get("initiator_user_id")) for c in session_calls(server)
    ] == [
        ("processing", "heat pumps @\u2060channel in Oslo", "U123"),
        ("active", None, None),  # an update: no title, no initiator
    ]
    assert server.fake.sessions[("C0001", THREAD)]["status"] == "active"
    assert server.fake.statuses == {}  # the words cleared too
    assert all(
        c["thread_ts"] == THREAD and c["channel_id"] == "C0001" for c in session_calls(server)
    )


def test_a_session_title_is_one_line_of_at_most_200_characters() -> None:
    title = session_title("solar  <https://evil.example|click>\n" + "x" * 400)
    assert len(title) == MAX_TITLE_CHARS and title.endswith("…")
    assert "\n" not in title and "evil.example" not in title and "<" not in title


async def test_a_new_research_in_a_thread_with_a_session_renames_it(
    server: FakeSlackServer, store: Store
) -> None:
    """The title counts on creation only: a second research in the same thread (a follow-up)
    renames the session to its own topic."""
    factory = posters(server, store, ManualTimer())
    first, _ = await new_run(store, requested_by=REQUESTER, topic="heat pumps")
    await run_through(await factory.for_run(first), first)
    await finish(store, await claim(store, first.id))
    second, _ = await new_run(store, requested_by=REQUESTER, topic="heat pump noise")
    await run_through(await factory.for_run(second), second)

    [rename] = [c.params for c in server.fake.calls_to(RENAME)]
    assert (rename["channel_id"], rename["thread_ts"], rename["title"]) == (
        "C0001",
        THREAD,
        "heat pump noise",
    )
    assert server.fake.sessions[("C0001", THREAD)] == {
        "status": "active",
        "title": "heat pump noise",
        "initiator": "U123",
    }


@pytest.mark.parametrize("code", ["unknown_method", "not_allowed_token_type", "missing_scope"])
async def test_a_workspace_that_refuses_sessions_keeps_the_assistant_status_logged_once(
    server: FakeSlackServer, store: Store, caplog: pytest.LogCaptureFixture, code: str
) -> None:
    """A Slack without the methods (``unknown_method``), a token that is not a granular bot
    token (``not_allowed_token_type``; "Must be a granular bot token"), a token without
    ``chat:write`` (``missing_scope``): the workspace's runs keep the assistant status
    (``assistant.threads.setStatus``) for the rest of the process, with one log line."""
    if code == "missing_scope":
        server.fake.scopes = tuple(s for s in server.fake.scopes if s != "chat:write")
    else:
        server.fake.sessions_refusal = code
    factory = posters(server, store, ManualTimer())
    with caplog.at_level(logging.WARNING, logger="bots.slack"):
        for thread in ("1700000000.000100", "1700000001.000100"):
            run, _ = await new_run(store, thread_key=f"slack:T0001:C0002:{thread}")
            delivery = await factory.for_run(run)
            await delivery.publish(event(run, ProgressKind.STARTED, "Researching."))
            await wait_for(lambda t=thread: ("C0002", t) in server.fake.statuses)
            await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))
            await delivery.aclose()

    assert len(session_calls(server)) == 1  # asked once in that workspace
    assert [c.params["status"] for c in server.fake.calls_to(SET_STATUS)] == [
        "is planning the research…",
        "",
        "is planning the research…",
        "",
    ]
    assert server.fake.sessions == {} and server.fake.statuses == {}
    lines = [r.getMessage() for r in caplog.records if "refused agent sessions" in r.getMessage()]
    assert lines == [
        f"slack: workspace T0001 refused agent sessions ({code}); the thread status goes "
        "through assistant.threads.* there"
    ]


async def test_a_channel_that_refuses_sessions_loses_them_there_only(
    server: FakeSlackServer, store: Store
) -> None:
    factory = posters(server, store, ManualTimer())
    server.fake.fail_next(SESSION, error="not_in_channel")
    refused, _ = await new_run(store, thread_key="slack:T0001:C0009:1700000000.000100")
    await run_through(await factory.for_run(refused), refused)
    assert factory.refusals.sessions_refused("T0001", "C0009")
    other, _ = await new_run(store)
    await run_through(await factory.for_run(other), other)
    assert [(c["channel_id"], c["status"]) for c in session_calls(server)] == [
        ("C0009", "processing"),  # refused: nothing more in C0009
        ("C0001", "processing"),
        ("C0001", "active"),
    ]


async def test_a_session_slack_fails_to_set_is_tried_again_not_given_up(
    server: FakeSlackServer, store: Store
) -> None:
    """A 5xx with an HTML body (Slack's edge during an outage) is no refusal: the session is
    asked for again after the retry interval, and the workspace keeps sessions."""
    timer = ManualTimer()
    factory = posters(server, store, timer)
    server.fake.fail_next(SESSION, status=503, body="html")
    run, _ = await new_run(store)
    delivery = await factory.for_run(run)
    await delivery.publish(event(run, ProgressKind.STARTED, "Researching."))
    await wait_for(lambda: RETRY_SECONDS in timer.waiting_until())
    assert server.fake.sessions == {} and server.fake.statuses  # the words went on meanwhile
    timer.advance(RETRY_SECONDS)
    await wait_for(lambda: server.fake.sessions)
    assert not factory.refusals.sessions_refused("T0001", "C0001")
    await delivery.publish(event(run, ProgressKind.FINISHED, "Research done."))
    await delivery.aclose()
    assert [c["status"] for c in session_calls(server)] == ["processing"] * 2 + ["active"]


async def test_a_session_asked_for_is_ended_even_when_slack_did_not_answer(
    server: FakeSlackServer, store: Store
) -> None:
    """A ``processing`` call that failed (a 5xx: Slack may have made the session anyway) is
    followed by ``active`` when the run ends before the retry, so no Stop is left spinning."""
    server.fake.fail_next(SESSION, status=502, body="empty")
    run, _ = await new_run(store)
    await run_through(await posters(server, store, ManualTimer()).for_run(run), run)
    assert [c["status"] for c in session_calls(server)] == ["processing", "active"]


async def test_an_initiator_slack_refuses_is_left_out_and_the_session_made(
    server: FakeSlackServer, store: Store
) -> None:
    """``initiator_user_id`` "must be a member of the channel": a refusal that may be about
    it is asked once more without it, before anything is refused."""
    server.fake.fail_next(SESSION, error="invalid_arguments")
    run, _ = await new_run(store, requested_by=REQUESTER)
    await run_through(await posters(server, store, ManualTimer()).for_run(run), run)
    calls = session_calls(server)
    assert [c.get("initiator_user_id") for c in calls] == ["U123", None, None]
    assert server.fake.sessions[("C0001", THREAD)]["status"] == "active"


async def test_the_stop_subscription_warning_is_logged_once_per_workspace(
    server: FakeSlackServer, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """An app that does not subscribe to ``agent_session_stopped`` gets an ``ok`` answer with
    ``warning: missing_agent_session_stopped_event_subscription`` (its users see a Stop that
    does nothing): said once in the logs, the session works."""
    server.fake.stop_subscribed = False
    factory = posters(server, store, ManualTimer())
    with caplog.at_level(logging.WARNING, logger="bots.slack"):
        for thread in ("1700000000.000100", "1700000001.000100"):
            run, _ = await new_run(store, thread_key=f"slack:T0001:C0001:{thread}")
            await run_through(await factory.for_run(run), run)
    warned = [r.getMessage() for r in caplog.records if "warned" in r.getMessage()]
    assert warned == [
        "slack: agents.sessions.setStatus in workspace T0001 warned: "
        "missing_agent_session_stopped_event_subscription"
    ]
    assert len(session_calls(server)) == 4 and len(server.fake.sessions) == 2


# -- Slack's own Stop (agent_session_stopped) ----------------------------------------------


async def working_research(bot: Bot, topic: str = "deep sea mining depth=5") -> RunRecord:
    """A research started with ``/research``, its first search made and its pages held, its
    thread an agent session in ``processing``."""
    bot.search.fake.hold_pages()
    await bot.command(topic, trigger_id=f"t-{len(bot.slack.calls)}")
    run, _ = await progress_with_buttons(bot)
    await wait_for(lambda: bot.search.fake.page_requests)
    ts = run.progress_message_id or ""
    await wait_for(lambda: bot.slack.sessions.get(("C0001", ts), {}).get("status") == "processing")
    return run


async def stop_event(bot: Bot, thread_ts: str, event_id: str, user: str = "U123") -> None:
    event = agent_session_stopped_event(user=user, channel="C0001", thread_ts=thread_ts)
    response = await bot.event(event, event_id)
    assert response.status_code == 200  # acknowledged at once; the answer is private


async def answered_after(bot: Bot, event_id: str, earlier: str) -> list[str]:
    """The private answers once a later request (a DM asking for help) and an earlier one
    containing ``earlier`` are both answered: every earlier delivery was handled by then (a
    dropped redelivery does less than answering), whichever is answered last."""
    await bot.event(im_message_event("help"), event_id)

    def texts() -> list[str]:
        return [str(c.params["text"]) for c in bot.slack.calls_to("chat.postEphemeral")]

    await wait_for(
        lambda: (
            any("/research <topic>" in t for t in texts()) and any(earlier in t for t in texts())
        )
    )
    return texts()


async def test_slacks_stop_is_the_requesters_stop_and_write_now(start_bot: BotFactory) -> None:
    """Someone else's Stop changes nothing; the requester's stops the research (no search
    starts after it, the report is written from what was found, the progress says so), once
    however often Slack delivers it; the session ends ``active``."""
    bot = await start_bot(FATHOM_ALLOWED_USERS="U123,U999")
    run = await working_research(bot)
    ts = run.progress_message_id or ""

    await stop_event(bot, ts, "Ev-stop-other", user="U999")
    [refusal] = await ephemeral_answers(bot, 1)
    assert (refusal.params["user"], refusal.params["thread_ts"]) == ("U999", ts)
    assert "Only the person who started this research" in refusal.params["text"]
    after = await bot.store.runs.get_run(run.id)
    assert after is not None and not after.stop_requested

    await stop_event(bot, ts, "Ev-stop")
    await stop_event(bot, ts, "Ev-stop")  # Slack's redelivery of the same event
    texts = await answered_after(bot, "Ev-after-stop", "no new search starts")
    stops = [c for c in bot.slack.calls_to("chat.postEphemeral") if "Stopping" in c.params["text"]]
    assert len(stops) == 1 and stops[0].params["thread_ts"] == ts  # acted on once
    assert stops[0].params["user"] == "U123" and len(texts) == 3
    bot.search.fake.release_pages()

    [done] = await bot.finished()
    assert (done.status, done.stop_requested) == ("succeeded", True)
    assert bot.search.fake.queries == [bot.search.fake.queries[0]]  # no second search
    final = bot.final_text("C0001", ts)
    assert "stopped early after 1 of 5 searches (stopped on request)" in final
    await wait_for(lambda: bot.slack.sessions[("C0001", ts)]["status"] == "active")
    assert bot.slack.sessions[("C0001", ts)]["title"] == "deep sea mining"


async def test_slacks_stop_where_nothing_runs_is_answered_and_ends_the_session(
    start_bot: BotFactory,
) -> None:
    """A Stop on a session whose research has ended (a session left ``processing``): nothing
    is stopped or started, the user is told, and the session leaves ``processing``."""
    bot = await start_bot()
    thread = "1700000000.000100"
    bot.slack.sessions[("C0001", thread)] = {
        "status": "processing",
        "title": "t",
        "initiator": None,
    }
    await stop_event(bot, thread, "Ev-stop-idle")
    [answer] = await ephemeral_answers(bot, 1)
    assert answer.params["text"] == "Nothing is running in this thread."
    await wait_for(lambda: bot.slack.sessions[("C0001", thread)]["status"] == "active")
    assert await bot.runs() == []


async def test_slacks_stop_in_a_thread_whose_research_waits_in_line_leaves_it_alone(
    start_bot: BotFactory,
) -> None:
    """Only a running research's delivery makes a session ``processing``: a Stop where the
    research still waits in line (a session some earlier run left ``processing``) neither
    stops nor cancels it, says nothing runs there, once, and ends that session."""
    bot = await start_bot(FATHOM_MAX_CONCURRENT_RUNS="1")
    await working_research(bot)  # the one runner is busy
    mention = app_mention_event("tidal power depth=1", ts="1700000500.000100")
    await bot.event(mention, "Ev-queued")

    async def queued() -> RunRecord | None:
        found = [r for r in await bot.runs() if r.topic == "tidal power"]
        return found[0] if found and found[0].status == "queued" else None

    waiting: RunRecord = await wait_for(queued)
    thread = "1700000500.000100"
    bot.slack.sessions[("C0001", thread)] = {
        "status": "processing",
        "title": "t",
        "initiator": None,
    }
    await stop_event(bot, thread, "Ev-stop-queued")
    await stop_event(bot, thread, "Ev-stop-queued")  # redelivered
    texts = await answered_after(bot, "Ev-after-queued", "Nothing is running in this thread.")
    assert texts.count("Nothing is running in this thread.") == 1
    await wait_for(lambda: bot.slack.sessions[("C0001", thread)]["status"] == "active")
    after = await bot.store.runs.get_run(waiting.id)
    assert after is not None and after.status == "queued" and not after.stop_requested


async def test_slacks_stop_of_a_chinese_research_is_answered_in_chinese(
    start_bot: BotFactory,
) -> None:
    bot = await start_bot()
    run = await working_research(bot, "深海采矿对海洋生态的影响 depth=5")
    await stop_event(bot, run.progress_message_id or "", "Ev-stop-zh")
    [answer] = await ephemeral_answers(bot, 1)
    assert "正在停止" in answer.params["text"] and "不再开始新的搜索" in answer.params["text"]
    bot.search.fake.release_pages()
    [done] = await bot.finished()
    assert done.stop_requested


async def test_slacks_stop_arrives_over_socket_mode(
    socket_slack: SocketSlack, start_bot: BotFactory
) -> None:
    """The same event in an ``events_api`` envelope on the socket: acknowledged there, the
    research stopped."""
    slack, link = socket_slack, socket_slack.link
    bot = await start_bot(slack_api_url=slack.api_url, fake=slack.fake, SLACK_APP_TOKEN=APP_TOKEN)
    assert link.connected.wait(5)
    bot.search.fake.hold_pages()
    payload = dict(parse_qsl(slash_command_body("deep sea mining depth=5").decode()))
    link.send({"envelope_id": "env-cmd", "type": "slash_commands", "payload": payload})
    run, _ = await progress_with_buttons(bot)
    await wait_for(lambda: bot.search.fake.page_requests)
    ts = run.progress_message_id or ""
    event = agent_session_stopped_event(channel="C0001", thread_ts=ts)
    envelope = json.loads(event_callback_body(event, event_id="Ev-socket-stop"))
    link.send({"envelope_id": "env-stop", "type": "events_api", "payload": envelope})
    await wait_for(lambda: [a for a in link.acks if a.get("envelope_id") == "env-stop"])
    [answer] = await ephemeral_answers(bot, 1)
    assert "no new search starts" in answer.params["text"]
    bot.search.fake.release_pages()
    [done] = await bot.finished()
    assert (done.status, done.stop_requested) == ("succeeded", True)
    await wait_for(lambda: slack.fake.sessions[("C0001", ts)]["status"] == "active")


# -- an agent's DM ------------------------------------------------------------------------


def app_home_opened_event(
    tab: str, *, user: str = "U777", channel: str = "D0777"
) -> dict[str, object]:
    """``app_home_opened`` as docs.slack.dev/reference/events/app_home_opened shows it (and
    node-slack-sdk's ``AppHomeOpenedEvent``: ``user``, ``channel``, ``tab`` "home" or
    "messages", ``event_ts``); an agent's DM opened is ``tab: "messages"``
    (docs.slack.dev/ai/migrating-to-agent-messaging)."""
    return {
        "type": "app_home_opened",
        "user": user,
        "channel": channel,
        "tab": tab,
        "event_ts": "1515449522000016",
    }


async def test_an_agents_dm_gets_suggested_prompts_when_its_messages_tab_opens(
    start_bot: BotFactory,
) -> None:
    """An app on ``agent_view`` gets no ``assistant_thread_started``: opening its Messages tab
    sets the DM's suggested prompts, in the user's language, without ``thread_ts`` (an
    agent's call with it "silently fails") and without a greeting posted each time."""
    bot = await start_bot()
    bot.slack.locales["U777"] = "zh-CN"
    await bot.event(app_home_opened_event("home"), "Ev-home-tab")
    await bot.answer_later("Ev-after-home")  # the Home tab: handled, nothing set
    assert bot.slack.calls_to("assistant.threads.setSuggestedPrompts") == []

    await bot.event(app_home_opened_event("messages"), "Ev-messages-tab")
    offered = await wait_for(lambda: bot.slack.prompts.get(("D0777", "")))
    assert 1 <= len(offered["prompts"]) <= 4 and offered["title"] == "试试这些："
    assert any("研究" in p["title"] or "进展" in p["title"] for p in offered["prompts"])
    [call] = bot.slack.calls_to("assistant.threads.setSuggestedPrompts")
    assert "thread_ts" not in call.params
    assert not [m for m in bot.slack.history if m.get("channel") == "D0777"]  # no greeting
