"""Forged platform ids at every platform's door, on SQLite and PostgreSQL.

PostgreSQL refuses a NUL in text ("A string literal cannot contain NUL (0x00) characters")
and a lone surrogate cannot be encoded to UTF-8 at all (JSON's ``"\\ud800"`` decodes to one in
Python): a validly signed delivery with either in an id used to reach the first statement
that carried it and give a 500 with a traceback (Teams, Feishu, DingTalk; issue 53). Each
platform's deliveries are built by its fake as the platform builds them, with one id replaced;
each is answered as the platform's retry rule wants (``bots.chat.ids``: Teams 400; Slack,
Feishu and DingTalk 200 and dropped), with one log line and no traceback, nothing is stored,
and the next proper request is served.
"""

# ruff: noqa: F811 - platform fixtures are imported from their own test modules

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from bots.chat.ids import InvalidId, check_ids, id_problem
from core.text import clean_text
from storage import Database
from tests.chat_app import wait_for
from tests.fakes.dingtalk import CORP
from tests.fakes.feishu import TENANT, encrypt, message_event
from tests.fakes.feishu import signed_headers as feishu_signed
from tests.fakes.slack import (
    app_mention_event,
    block_actions_body,
    channel_message_event,
    event_callback_body,
    slash_command_body,
)
from tests.fakes.teams import (
    CHANNEL_ID,
    action_invoke,
    channel_message,
    group_chat_message,
    installation_update,
)
from tests.test_dingtalk import USER as DINGTALK_USER
from tests.test_dingtalk import DingTalkFactory, dingtalk  # noqa: F401
from tests.test_feishu import KEY as FEISHU_KEY
from tests.test_feishu import TOKEN as FEISHU_TOKEN
from tests.test_feishu import USER as FEISHU_USER
from tests.test_feishu import FeishuFactory, feishu  # noqa: F401
from tests.test_slack_app import (  # noqa: F401 - fixtures
    CLIENT_ID,
    CLIENT_SECRET,
    FORM,
    JSON,
    BotFactory,
    OAuthFakeSlackServer,
    _clean_env,
    start_bot,
)
from tests.test_slack_app import (
    USER as SLACK_USER,
)
from tests.test_teams import USER as TEAMS_USER
from tests.test_teams import TeamsFactory, teams  # noqa: F401

#: What a forged id holds: a NUL, and a lone surrogate (``"\ud800"`` in the JSON sent).
HOSTILE = {"NUL": "C1\x00x", "lone surrogate": "C1\ud800x"}
#: Every table a delivery could leave a row in (the platforms' own included where served).
TABLES = (
    "threads",
    "thread_variables",
    "research_runs",
    "processed_events",
    "chat_files",
    "conversation_contexts",
    "run_feedback",
    "digests",
)
REFUSED = "a delivery refused"


async def _rows(database: Database, *extra: str) -> dict[str, int]:
    async with database.engine.connect() as conn:
        return {
            table: int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())
            for table in (*TABLES, *extra)
        }


def _set(payload: dict[str, Any], path: str, value: str) -> dict[str, Any]:
    """``payload`` with the field at the dotted ``path`` set to ``value``."""
    node: Any = payload
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    return payload


def _logged_cleanly(caplog: pytest.LogCaptureFixture, refused: int) -> None:
    """One warning per refused delivery, no traceback, no error, and never the id itself."""
    records = caplog.records
    lines = [r.getMessage() for r in records if REFUSED in r.getMessage()]
    assert len(lines) == refused, lines
    assert [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR] == []
    assert not any(bad in r.getMessage() for r in records for bad in HOSTILE.values())


Cases = list[tuple[str, Callable[[str], dict[str, Any]]]]


# -- Teams: 400 ---------------------------------------------------------------------------------


async def test_teams_activities_with_a_forged_id_get_400_and_store_nothing(
    teams: TeamsFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Activities as "Channel and group chat conversations with a bot", "Universal Actions
    for Adaptive Cards" and "Conversation events in your Teams bot" show them."""
    caplog.set_level(logging.INFO)
    bot = await teams(database_url=database_url)
    url = bot.url

    def message(path: str, **kw: Any) -> Callable[[str], dict[str, Any]]:
        return lambda bad: _set(channel_message(url, "research heat pumps", **kw), path, bad)

    def press(bad: str) -> dict[str, Any]:
        asked = channel_message(url, "research heat pumps")
        data = {"run": bad, "lang": "en"}
        where = asked["conversation"]
        return action_invoke(
            url, verb="fathom_stop", data=data, reply_to_id="1:x", conversation=where
        )

    cases: Cases = [
        ("activity id", message("id")),
        ("sender's AAD object id", message("from.aadObjectId")),
        ("sender's id", message("from.id", aad_id=None)),
        ("reply chain", lambda bad: message("conversation.id")(f"{CHANNEL_ID};messageid={bad}")),
        ("group chat", lambda bad: _set(group_chat_message(url, "hi"), "conversation.id", bad)),
        ("tenant id", message("conversation.tenantId")),
        ("team id", message("channelData.team.id")),
        ("channel id", message("channelData.channel.id")),
        ("service URL", message("serviceUrl")),
        ("run a button names", press),
        ("installed in", lambda bad: _set(installation_update(url), "conversation.id", bad)),
    ]
    before = await _rows(bot.served.database, "teams_conversations")
    sent = 0
    for name, build in cases:
        for kind, bad in HOSTILE.items():
            response = await bot.send(build(bad))
            assert response.status_code == 400, (name, kind, response.text)
            assert response.json() == {"error": "the activity has an invalid id"}
            sent += 1
    assert await _rows(bot.served.database, "teams_conversations") == before
    assert bot.fake.calls_to("send") == [] and bot.fake.posted("") == []
    _logged_cleanly(caplog, sent)
    # The next proper request is served; its words lose a NUL and a lone surrogate.
    words = "research heat\ud800 pum\x00ps depth=1"
    assert (await bot.send(channel_message(url, words))).status_code == 200
    (run,) = await bot.served.runs(TEAMS_USER)
    assert run.topic == "heat pumps"


# -- Feishu: 200 and dropped (Feishu re-pushes anything else) ---------------------------------


def _feishu_press(run: str = "0" * 32, **where: str) -> dict[str, Any]:
    """A ``card.action.trigger`` callback on a Stop button (schema 2.0, as Feishu calls back;
    ``bots.feishu.render.button_value``), with ``where`` overriding the operator's open id
    (``operator``), the chat (``chat``) or the tenant (``tenant``)."""
    tenant = where.get("tenant", TENANT)
    return {
        "schema": "2.0",
        "header": {
            "event_id": "ev_press_1",
            "token": FEISHU_TOKEN,
            "create_time": "1700000000000000",
            "event_type": "card.action.trigger",
            "tenant_key": tenant,
            "app_id": "cli_fathom",
        },
        "event": {
            "operator": {"tenant_key": tenant, "open_id": where.get("operator", "ou_user_1")},
            "token": "c-1",
            "action": {"value": {"action": "fathom_stop", "run": run, "lang": "en"}},
            "host": "im_message",
            "context": {"open_message_id": "om_card", "open_chat_id": where.get("chat", "oc_1")},
        },
    }


def _feishu_message(path: str, **kw: Any) -> Callable[[str], dict[str, Any]]:
    return lambda bad: _set(
        message_event(
            "/research heat pumps", chat_type="group", mention_bot=True, token=FEISHU_TOKEN, **kw
        ),
        path,
        bad,
    )


FEISHU_CASES: Cases = [
    ("event id", _feishu_message("header.event_id")),
    ("tenant key", _feishu_message("header.tenant_key")),
    ("sender's open id", _feishu_message("event.sender.sender_id.open_id")),
    ("message id", _feishu_message("event.message.message_id")),
    ("root id", _feishu_message("event.message.root_id", root_id="om_root")),
    ("chat id", _feishu_message("event.message.chat_id")),
    ("run a button names", lambda bad: _feishu_press(run=bad)),
    ("presser's open id", lambda bad: _feishu_press(operator=bad)),
    ("pressed chat", lambda bad: _feishu_press(chat=bad)),
    ("press's tenant", lambda bad: _feishu_press(tenant=bad)),
]


async def test_feishu_events_with_a_forged_id_are_acknowledged_and_dropped(
    feishu: FeishuFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``im.message.receive_v1`` and ``card.action.trigger`` as Feishu's event and callback
    references show them; Feishu re-pushes whatever is not answered 200 (platform-facts F5)."""
    caplog.set_level(logging.INFO)
    bot = await feishu(database_url=database_url)
    before = await _rows(bot.served.database)

    async def send(payload: dict[str, Any]) -> httpx.Response:
        body = json.dumps(encrypt(payload, FEISHU_KEY, escaped=True)).encode()
        headers = feishu_signed(body, FEISHU_KEY)
        return await bot.served.http.post(
            f"{bot.served.url}/feishu/events", content=body, headers=headers
        )

    sent = 0
    for name, build in FEISHU_CASES:
        for kind, bad in HOSTILE.items():
            response = await send(build(bad))
            assert response.status_code == 200, (name, kind, response.text)
            assert response.json() == {}, (name, kind)  # no toast, no answer
            sent += 1
    assert await _rows(bot.served.database) == before
    assert bot.fake.calls_to("reply") == [] and bot.fake.calls_to("send") == []
    _logged_cleanly(caplog, sent)
    good = message_event("/research heat pumps depth=1", token=FEISHU_TOKEN)
    assert (await bot.send(good)).status_code == 200
    assert len(await bot.served.runs(FEISHU_USER)) == 1


async def test_feishu_long_connection_acknowledges_and_drops_a_forged_id(
    feishu: FeishuFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Over the long connection a handler that raises is answered 500 and re-pushed: a
    forged id is acknowledged (200) and dropped instead."""
    caplog.set_level(logging.INFO)
    bot = await feishu(mode="ws", database_url=database_url)
    await wait_for(lambda: bot.fake.ws_connections >= 1)
    before = await _rows(bot.served.database)
    for bad in HOSTILE.values():
        assert (await bot.push(_feishu_message("event.message.message_id")(bad)))["code"] == 200
    assert await _rows(bot.served.database) == before
    _logged_cleanly(caplog, len(HOSTILE))
    assert (await bot.push(message_event("/research heat pumps depth=1")))["code"] == 200
    assert len(await bot.served.runs(FEISHU_USER)) == 1


# -- DingTalk: 200 (or the stream's OK) and dropped --------------------------------------------


async def test_dingtalk_messages_with_a_forged_id_are_acknowledged_and_dropped(
    dingtalk: DingTalkFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Robot messages as the SDK's ``ChatbotMessage`` reads them (HTTP callback mode)."""
    caplog.set_level(logging.INFO)
    bot = await dingtalk(database_url=database_url)

    def message(path: str, **kw: Any) -> Callable[[str], dict[str, Any]]:
        return lambda bad: _set(bot.message("/research heat pumps", group=True, **kw), path, bad)

    cases: Cases = [
        ("message id", message("msgId")),
        ("conversation id", message("conversationId")),
        ("sender's staff id", message("senderStaffId")),
        ("organisation", message("chatbotCorpId")),
        ("quoted message", message("repliedMsg.msgId", replied_to="msg_quoted")),
        ("session webhook", message("sessionWebhook")),
    ]
    before = await _rows(bot.served.database)
    sent = 0
    for name, build in cases:
        for kind, bad in HOSTILE.items():
            response = await bot.send(build(bad))
            assert response.status_code == 200, (name, kind, response.text)
            sent += 1
    assert await _rows(bot.served.database) == before
    assert bot.fake.sent == [] and bot.fake.cards == {}
    _logged_cleanly(caplog, sent)
    assert (await bot.send(bot.message("/research heat pumps depth=1"))).status_code == 200
    assert len(await bot.served.runs(DINGTALK_USER)) == 1


async def test_dingtalk_stream_acknowledges_and_drops_a_forged_id(
    dingtalk: DingTalkFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream redelivers whatever is not acknowledged OK: a forged delivery id, or a
    card callback (``CardCallbackMessage``) from a forged user or organisation, is
    acknowledged and dropped."""
    caplog.set_level(logging.INFO)
    bot = await dingtalk(mode="stream", database_url=database_url)
    await wait_for(lambda: bot.fake.stream_open == 1)
    before = await _rows(bot.served.database)
    sent = 0
    for bad in HOSTILE.values():
        ack = await bot.push(bot.message("/research heat pumps"), message_id=bad)
        assert ack["code"] == 200
        for field in ("userId", "corpId"):
            press = {
                "extension": "{}",
                "corpId": CORP,
                "type": "actionCallback",
                "userId": "staff_1",
                "content": '{"cardPrivateData": {"actionIds": ["fathom_stop"], "params": {}}}',
                "outTrackId": "fathom_" + "0" * 32,
                field: bad,
            }
            ack = await bot.press(press)
            assert ack["code"] == 200
            sent += 1
        sent += 1
    assert await _rows(bot.served.database) == before
    assert bot.fake.sent == []
    _logged_cleanly(caplog, sent)
    assert (await bot.push(bot.message("/research heat pumps depth=1")))["code"] == 200
    assert len(await bot.served.runs(DINGTALK_USER)) == 1


# -- Slack: acknowledged (Slack retries anything but a 2xx) and dropped ------------------------


async def test_slack_deliveries_with_a_forged_id_are_acknowledged_and_dropped(
    start_bot: BotFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Events as the Events API sends them (``app_mention``, a thread reply in a channel),
    a press (``block_actions``) and the slash command, with one id forged; Slack retries a
    delivery not answered 2xx (platform-facts S5)."""
    caplog.set_level(logging.INFO)
    bot = await start_bot(database_url=database_url)
    before = await _rows(bot.database)
    card = {"channel": "C0001", "ts": "1700000000.000100", "blocks": [_stop_buttons()]}

    def event(path: str, **kw: Any) -> Callable[[str], bytes]:
        def build(bad: str) -> bytes:
            body = app_mention_event("heat pumps", ts="1700000001.000100", **kw)
            if path == "event_id":
                return event_callback_body(body, event_id=bad)
            return event_callback_body(_set(body, path, bad), event_id=f"Ev{id(bad)}{path}")

        return build

    def reply(bad: str) -> bytes:
        body = channel_message_event("focus on Europe", thread_ts="1700000000.000100")
        return event_callback_body(_set(body, "user", bad), event_id=f"Ev-reply{id(bad)}")

    events = [
        ("event id", event("event_id")),
        ("user", event("user")),
        ("channel", event("channel")),
        ("message ts", event("ts")),
        ("thread ts", event("thread_ts", thread_ts="1700000000.000100")),
        ("replier", reply),
    ]
    presses = [
        ("run a button names", lambda bad: block_actions_body(card, "fathom_stop", value=bad)),
        ("presser", lambda bad: block_actions_body(card, "fathom_stop", user_id=bad)),
    ]
    sent = 0
    for name, build in events:
        for kind, bad in HOSTILE.items():
            response = await bot.post(build(bad), JSON)
            assert response.status_code == 200, (name, kind, response.text)
            sent += 1
    for name, build_form in presses:
        for kind, bad in HOSTILE.items():
            response = await bot.post(build_form(bad), FORM)
            assert response.status_code == 200, (name, kind, response.text)
            sent += 1
    # A form body cannot carry a lone surrogate (it is decoded with replacement): NUL only.
    for field in ("user_id", "channel_id", "team_id", "trigger_id"):
        response = await bot.post(slash_command_body("heat pumps", **{field: "x\x00y"}), FORM)
        assert response.status_code == 200
        assert "is not valid, so I cannot answer it" in response.json()["text"], field
        sent += 1
    answers = await bot.answer_later("Ev-after")  # every earlier listener has run by now
    assert len(answers) == 1  # the help for the DM after them, nothing else
    after = await _rows(bot.database)
    assert after == {**before, "processed_events": before["processed_events"] + 1}
    _logged_cleanly(caplog, sent)
    event_ok = app_mention_event("heat pumps depth=1", ts="1700000002.000100")
    assert (await bot.event(event_ok, "Ev-good")).status_code == 200
    await wait_for(lambda: bot.runs(SLACK_USER))


async def test_a_forged_workspace_never_reaches_slacks_installation_lookup(
    start_bot: BotFactory, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A multi-workspace app (OAuth installs) looks the workspace of each delivery up before
    any listener: a forged ``team_id`` (the envelope's and its authorization's, as the Events
    API sends them) is refused before that lookup, with a 200 and one log line."""
    caplog.set_level(logging.INFO)
    with OAuthFakeSlackServer() as slack:
        bot = await start_bot(
            database_url=database_url,
            slack_api_url=f"{slack.url}/api/",
            fake=slack.fake,
            SLACK_BOT_TOKEN="",
            SLACK_CLIENT_ID=CLIENT_ID,
            SLACK_CLIENT_SECRET=CLIENT_SECRET,
        )
        before = await _rows(bot.database, "slack_bots", "slack_installations")
        for kind, bad in HOSTILE.items():
            event = app_mention_event("heat pumps", ts="1700000001.000100")
            body = event_callback_body(event, event_id=f"Ev-team-{len(kind)}", team_id=bad)
            response = await bot.post(body, JSON)
            assert response.status_code == 200, (kind, response.text)
        assert await _rows(bot.database, "slack_bots", "slack_installations") == before
        _logged_cleanly(caplog, len(HOSTILE))
        assert not [r for r in caplog.records if "could not handle" in r.getMessage()]


def _stop_buttons() -> dict[str, Any]:
    return {
        "type": "actions",
        "block_id": "fathom_controls",
        "elements": [
            {
                "type": "button",
                "action_id": "fathom_stop",
                "text": {"type": "plain_text", "text": "Stop and write now"},
                "value": "0" * 32,
            }
        ],
    }


# -- the rule itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("C0001", None),
        ("", None),  # missing: answered that it is missing, where it can be
        ("19:abc@thread.tacv2;messageid=1", None),
        ("会话_1", None),
        ("x" * 1000, None),
        ("x" * 1001, "is longer than 1,000 characters"),
        ("a\x00b", "holds a NUL character"),
        ("a\ud800b", "holds a lone surrogate"),
        ("a\udfffb", "holds a lone surrogate"),
        ("a\x1bb", "holds an unprintable character"),
        ("a\u200bb", "holds an unprintable character"),
        ("a\u2028b", "holds an unprintable character"),
        ("a\nb", "holds an unprintable character"),
    ],
)
def test_an_id_is_let_in_only_when_storable_printable_and_bounded(
    value: str, why: str | None
) -> None:
    assert id_problem(value) == why
    assert id_problem(value, None) == (None if value == "x" * 1001 else why)  # a key: any length
    if why is None:
        check_ids(channel=value)
    else:
        with pytest.raises(InvalidId) as raised:
            check_ids(channel=value)
        assert str(raised.value) == f"its channel {why}" and value not in str(raised.value)


def test_words_lose_their_lone_surrogates_like_their_controls() -> None:
    """A topic or a reply is cleaned, never refused: a lone surrogate goes like a NUL."""
    cleaned = clean_text("heat\ud800 pumps\x00 \udfff")
    assert ascii(cleaned) == ascii("heat pumps ")  # (a lone surrogate cannot cross xdist)
