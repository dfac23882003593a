"""Feishu/Lark end to end: the real ``fathom serve`` against a fake Open API on 127.0.0.1.

Webhook deliveries are built exactly as Feishu builds them (encrypted, signed, the URL
challenge); long-connection events go over a real WebSocket in the SDK's protobuf frames to
the SDK's own client. What the shared chat layer guarantees is proven in test_chat_layer.py;
here: translation, verification, cards, and the two ingress modes.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bots.chat.connection import restart_delay
from bots.feishu.ws import LongConnection
from tests.chat_app import ServedFathom, runs_table_away, wait_for
from tests.conftest import ServeFathom
from tests.fakes import FakeLLMServer, FakeSearchServer, Held, Reply
from tests.fakes.feishu import (
    APP_ID,
    APP_SECRET,
    MAX_CARD_BYTES,
    TENANT,
    FakeFeishu,
    FakeFeishuServer,
    FeishuMessage,
    card_action_event,
    card_buttons,
    challenge_body,
    encrypt,
    file_event,
    message_event,
    signed_headers,
)

TOKEN = "feishu-verification-token"
KEY = "feishu-encrypt-key"
USER = f"feishu:{TENANT}:ou_user_1"


@dataclass
class FeishuBot:
    served: ServedFathom
    fake: FakeFeishu

    async def send(
        self,
        payload: dict[str, Any],
        *,
        encrypted: bool = True,
        key: str = KEY,
        sign_with: str | None = None,
        timestamp: int | None = None,
    ) -> httpx.Response:
        """A webhook delivery, encrypted and signed as Feishu does it."""
        self.fake.saw(payload)
        body = json.dumps(encrypt(payload, key) if encrypted else payload).encode()
        headers = signed_headers(body, sign_with or key, timestamp)
        return await self.served.http.post(
            f"{self.served.url}/feishu/events", content=body, headers=headers
        )

    async def push(self, payload: dict[str, Any]) -> dict[str, Any]:
        """An event over the long connection; the client's acknowledgement."""
        self.fake.saw(payload)
        return await asyncio.to_thread(self.fake.push_event, payload)

    def thread(self, root: str) -> list[FeishuMessage]:
        return self.fake.thread(root)

    async def delivered(self, count: int = 1, user: str = USER) -> list[Any]:
        return await self.served.delivered(user, count)


FeishuFactory = Callable[..., Awaitable[FeishuBot]]


@pytest.fixture
def llm(llm_server: FakeLLMServer) -> FakeLLMServer:
    return llm_server


@pytest.fixture
def search(search_server: FakeSearchServer) -> FakeSearchServer:
    return search_server


@pytest.fixture
async def feishu(
    serve_fathom: ServeFathom, feishu_server: FakeFeishuServer
) -> AsyncIterator[FeishuFactory]:
    """``await feishu(mode="webhook", **env)``: Fathom served with Feishu alone."""

    async def start(mode: str = "webhook", **env: str) -> FeishuBot:
        served = await serve_fathom(
            FEISHU_APP_ID=APP_ID,
            FEISHU_APP_SECRET=APP_SECRET,
            FEISHU_VERIFICATION_TOKEN=TOKEN,
            FEISHU_ENCRYPT_KEY=KEY,
            FEISHU_DOMAIN=feishu_server.url,
            FEISHU_MODE=mode,
            FATHOM_FEISHU_EDIT_INTERVAL="0.05",
            **env,
        )
        return FeishuBot(served, feishu_server.fake)

    yield start


def card_texts(message: FeishuMessage) -> list[str]:
    from tests.fakes.feishu import card_markdown

    return [card_markdown(version) for version in message.versions]


# -- the webhook's gate ----------------------------------------------------------------------


@pytest.mark.parametrize("encrypted", [False, True])
async def test_the_url_challenge_is_answered_plain_or_encrypted(
    feishu: FeishuFactory, encrypted: bool
) -> None:
    bot = await feishu()
    body = challenge_body("c-123", TOKEN)
    payload = json.dumps(encrypt(body, KEY) if encrypted else body).encode()
    # Feishu waits one second for the answer; bench/ measures such times, not this test.
    response = await bot.served.http.post(f"{bot.served.url}/feishu/events", content=payload)
    assert response.status_code == 200 and response.json() == {"challenge": "c-123"}
    wrong = json.dumps(challenge_body("c-123", "not-the-token")).encode()
    refused = await bot.served.http.post(f"{bot.served.url}/feishu/events", content=wrong)
    assert refused.status_code == 403 and "challenge" not in refused.text


async def test_forged_or_malformed_deliveries_get_4xx_and_store_nothing(
    feishu: FeishuFactory,
) -> None:
    bot = await feishu(FATHOM_MAX_BODY_BYTES="8192")  # small: the client sends it all at once
    event = message_event("/research heat pumps", token=TOKEN)
    url = f"{bot.served.url}/feishu/events"
    body = json.dumps(encrypt(event, KEY)).encode()
    cases: list[tuple[bytes, dict[str, str], int]] = [
        (body, signed_headers(body, "another key"), 401),  # bad signature
        (body, {"Content-Type": "application/json"}, 401),  # not signed
        (body, signed_headers(body, KEY, timestamp=int(time.time()) - 7200), 401),  # replayed
        (b"not json", signed_headers(b"not json", KEY), 400),
        (
            b'{"encrypt": "AAAA"}',
            signed_headers(b'{"encrypt": "AAAA"}', KEY),
            400,
        ),  # undecryptable
    ]
    plain = json.dumps(event).encode()
    cases.append((plain, signed_headers(plain, KEY), 400))  # events must be encrypted
    for content, headers, status in cases:
        response = await bot.served.http.post(url, content=content, headers=headers)
        assert response.status_code == status, (status, response.text)
    wrong_token = await bot.send(message_event("/research heat pumps", token="forged"))
    assert wrong_token.status_code == 403
    huge = b"{" + b" " * (8192 + 10) + b"}"
    too_big = await bot.served.http.post(url, content=huge, headers=signed_headers(huge, KEY))
    assert too_big.status_code == 413
    assert await bot.served.runs(USER) == []
    assert bot.fake.calls_to("reply") == []


# -- a research request, end to end -----------------------------------------------------------


async def test_a_chinese_private_request_gets_a_card_updated_in_place_then_report_cards(
    feishu: FeishuFactory, llm: FakeLLMServer, search: FakeSearchServer
) -> None:
    bot = await feishu()
    llm.fake.latency = search.fake.latency = 0.15  # progress edits apart from each other
    topic = "人工智能在医疗领域的最新发展"
    event = message_event(f"/research {topic} depth=3", token=TOKEN, message_id="om_req_1")
    response = await bot.send(event)
    acknowledged = time.time()
    assert response.status_code == 200
    (queued,) = await bot.served.runs(USER)  # committed before the answer
    assert queued.thread_key == f"feishu:{TENANT}:oc_chat_1:om_req_1"
    assert queued.topic == topic and queued.depth == 3

    (run,) = await bot.delivered()
    assert run.status == "succeeded" and run.delivery == "posted"
    # The answer did not wait for the research: the report was asked for after it.
    writes = llm.fake.requests_for("writer")
    assert writes and all(r.time > acknowledged for r in writes)
    thread = bot.thread("om_req_1")
    progress, *reports = thread
    assert progress.message_id == run.progress_message_id
    assert progress.parent_id == "om_req_1" and progress.msg_type == "interactive"
    texts = card_texts(progress)
    # Edits are coalesced (a round that ends while the previous edit is still in flight is
    # shown with the next one), so which rounds appear depends on the machine's pace; those
    # that appear are in order, in one card updated in place, and it ends with all three.
    lines = ["1/3th search executed.", "2/3th search executed.", "3/3th search executed."]
    firsts = [next((i for i, t in enumerate(texts) if line in t), None) for line in lines]
    shown = [i for i in firsts if i is not None]
    assert shown and shown == sorted(shown)
    assert len(texts) >= 2
    assert texts[0].startswith(f"正在研究 **{topic}**（深度 3）")
    assert "研究完成：3/3 次搜索" in texts[-1]
    assert len(reports) == run.report_parts_posted >= 1
    for card in reports:
        assert card.msg_type == "interactive" and card.root_id == "om_req_1"
        assert len(card.content.encode()) < MAX_CARD_BYTES
    assert "](http" in reports[0].markdown  # citations are links
    replies = bot.fake.calls_to("reply")
    assert all(c.body["reply_in_thread"] is True for c in replies)
    assert {c.body["uuid"] for c in replies} == {
        f"{run.id}:progress",
        *(f"{run.id}:r{n}" for n in range(1, len(reports) + 1)),
    }


async def test_a_redelivered_event_makes_no_second_run(feishu: FeishuFactory) -> None:
    bot = await feishu()
    event = message_event("/research heat pumps depth=1", token=TOKEN, message_id="om_r")
    first = await bot.send(event)
    again = await bot.send(event)  # Feishu re-pushes with the same event_id
    assert first.status_code == again.status_code == 200
    other_id = dict(event, header=dict(event["header"], event_id="another-event-id"))
    assert (await bot.send(other_id)).status_code == 200  # the same message, another event
    (run,) = await bot.delivered()
    assert len(await bot.served.runs(USER)) == 1  # a run is committed before its event's 200
    progress = [m for m in bot.thread("om_r") if m.uuid.endswith(":progress")]
    assert len(progress) == 1 and run.progress_message_id == progress[0].message_id


async def test_group_messages_need_the_bot_mentioned_and_the_mention_is_stripped(
    feishu: FeishuFactory,
) -> None:
    bot = await feishu()
    unmentioned = message_event(
        "/research heat pumps", chat_type="group", token=TOKEN, message_id="om_g0"
    )
    from_a_bot = message_event(
        "/research heat pumps", sender_type="app", token=TOKEN, message_id="om_g1"
    )
    for event in (unmentioned, from_a_bot):
        assert (await bot.send(event)).status_code == 200
    mentioned = message_event(
        "/research heat pumps @_user_2 depth=1",
        chat_type="group",
        mention_bot=True,
        mentions=[("ou_alice", "Alice")],
        token=TOKEN,
        message_id="om_g2",
    )
    assert (await bot.send(mentioned)).status_code == 200
    (run,) = await bot.delivered()
    assert run.topic == "heat pumps @Alice" and run.thread_key.endswith(":om_g2")
    assert bot.thread("om_g0") == [] and bot.thread("om_g1") == []


async def test_a_rich_text_post_is_read_like_a_text_message(feishu: FeishuFactory) -> None:
    """A ``post`` with the bot's ``at`` element in the middle and another person's: the
    research topic has no "@Fathom", and ``help`` in a post gets the help answer."""
    bot = await feishu()
    people = [("ou_alice", "Alice")]

    def rich(message_id: str, *elements: dict[str, Any]) -> dict[str, Any]:
        content = {"title": "", "content": [list(elements)]}
        event = message_event(
            None,
            chat_type="group",
            mention_bot=True,
            mentions=people,
            message_type="post",
            content=content,
            token=TOKEN,
            message_id=message_id,
        )
        return event

    def at(key: str, name: str) -> dict[str, Any]:
        return {"tag": "at", "user_id": key, "user_name": name}

    research = rich(
        "om_post1",
        {"tag": "text", "text": "/research heat pumps "},
        at("@_user_1", "Fathom"),
        {"tag": "text", "text": " for "},
        at("@_user_2", "Alice"),
        {"tag": "text", "text": " depth=1"},
    )
    assert (await bot.send(research)).status_code == 200
    (run,) = await bot.delivered()
    assert (run.topic, run.depth) == ("heat pumps for @Alice", 1)
    helped = rich("om_post2", at("@_user_1", "Fathom"), {"tag": "text", "text": " help"})
    assert (await bot.send(helped)).status_code == 200
    (answer,) = await wait_for(lambda: bot.thread("om_post2"))
    assert "/research" in answer.markdown and "depth" in answer.markdown
    assert len(await bot.served.runs(USER)) == 1


async def test_bad_input_is_answered_in_the_thread_in_the_request_language(
    feishu: FeishuFactory,
) -> None:
    bot = await feishu()
    cases = [
        ("/research heat pumps depth=0", "om_b1", "depth must be from 1 to 10"),
        ("/research 热泵 depth=0", "om_b2", "depth 必须在 1 到 10 之间"),
        ("/research   ", "om_b3", "The topic is empty"),
    ]
    for text, message_id, _ in cases:
        assert (await bot.send(message_event(text, token=TOKEN, message_id=message_id))).is_success
    image = message_event(
        None, message_type="image", content={"image_key": "img_1"}, token=TOKEN, message_id="om_i"
    )
    assert (await bot.send(image)).status_code == 200
    for _, message_id, expected in cases:
        (answer,) = await wait_for(lambda m=message_id: bot.thread(m))
        assert answer.markdown.startswith("⚠️ ") and expected in answer.markdown
    (help_answer,) = await wait_for(lambda: bot.thread("om_i"))
    assert "I can only read text" in help_answer.markdown
    assert await bot.served.runs(USER) == []


async def test_a_send_whose_answer_was_lost_is_retried_without_showing_twice(
    feishu: FeishuFactory, llm: FakeLLMServer
) -> None:
    """Feishu accepts a report card but its answer is lost (a 502 on the way back): the
    delivery retries with the same uuid, and Feishu returns the card it already has."""
    bot = await feishu(FATHOM_DELIVERY_BACKOFF="0.05")
    armed = threading.Event()
    llm.fake.script("writer", Held(armed))  # the failure is armed before the report is sent
    await bot.send(message_event("/research heat pumps depth=1", token=TOKEN, message_id="om_u"))
    await wait_for(lambda: bot.thread("om_u"))  # the progress card is out
    bot.fake.fail_next("reply", status=502, after=True)
    armed.set()
    (run,) = await bot.delivered()
    cards = bot.thread("om_u")[1:]
    attempts = [c for c in bot.fake.calls_to("reply") if c.body["uuid"] == f"{run.id}:r1"]
    assert len(attempts) == 2  # sent, answer lost, sent again
    assert [c.uuid for c in cards].count(f"{run.id}:r1") == 1
    assert run.delivery == "posted" and len(cards) == run.report_parts_posted


@pytest.mark.parametrize(
    ("status", "code", "gives_up"),
    [(400, 230002, True), (403, 230027, True), (400, 1, False), (400, 234567, False)],
)
async def test_only_a_feishu_code_that_says_never_gives_up_on_a_report(
    feishu: FeishuFactory, llm: FakeLLMServer, status: int, code: int, gives_up: bool
) -> None:
    """230002 (the bot left the chat) and 230027 (no permission) are final; a code Feishu
    does not document as final is retried."""
    bot = await feishu(FATHOM_DELIVERY_BACKOFF="0.05", FATHOM_DELIVERY_ATTEMPTS="3")
    armed = threading.Event()
    llm.fake.script("writer", Held(armed))
    message_id = f"om_c{code}"
    await bot.send(
        message_event("/research heat pumps depth=1", token=TOKEN, message_id=message_id)
    )
    await wait_for(lambda: bot.thread(message_id))
    bot.fake.fail_next("reply", status=status, code=code, times=2)
    armed.set()
    (run,) = await bot.delivered()
    if gives_up:
        assert (run.delivery, run.delivery_attempts) == ("failed", 1)
        assert f"feishu {code}" in (run.delivery_error or "")
    else:
        assert (run.delivery, run.delivery_attempts) == ("posted", 2)


async def test_a_long_report_is_split_into_cards_under_the_limit(
    feishu: FeishuFactory, llm_server: FakeLLMServer
) -> None:
    """As cards (``FATHOM_REPORT_DOCUMENT_PARTS=0``: never a cloud document; documents are
    test_feishu_docs.py's)."""
    bot = await feishu(FATHOM_REPORT_DOCUMENT_PARTS="0")
    section = "这一部分讨论热泵的效率与成本，并引用来源 [1]。" * 120
    report = "# 热泵报告\n\n" + "".join(f"## 第{i}部分\n\n{section}\n\n" for i in range(1, 9))
    llm_server.fake.script("writer", Reply(report))
    await bot.send(message_event("/research 热泵 depth=1", token=TOKEN, message_id="om_long"))
    (run,) = await bot.delivered()
    cards = bot.thread("om_long")[1:]
    assert len(cards) >= 2 and len(cards) == run.report_parts_posted
    assert all(len(c.content.encode()) < MAX_CARD_BYTES for c in cards)
    shown = "".join(c.markdown for c in cards)
    assert shown.count("## 第") == 8


async def test_a_mention_in_the_research_thread_follows_up_on_its_variables(
    feishu: FeishuFactory,
) -> None:
    bot = await feishu()
    first = message_event(
        "/research heat pumps depth=1", chat_type="group", mention_bot=True, token=TOKEN
    )
    root = first["event"]["message"]["message_id"]
    await bot.send(first)
    await bot.delivered()
    follow_up = message_event(
        "what about noise? depth=1",
        chat_type="group",
        mention_bot=True,
        root_id=root,
        token=TOKEN,
    )
    await bot.send(follow_up)
    newest, oldest = await bot.delivered(2)
    assert newest.thread_key == oldest.thread_key == f"feishu:{TENANT}:oc_chat_1:{root}"
    thread = await bot.served.store.threads.get_thread(newest.thread_key)
    assert thread is not None
    variables = await bot.served.store.threads.load_variables(thread.id)
    assert variables is not None and len(variables["topics"]) == 2
    progress = [m for m in bot.thread(root) if m.uuid.endswith(":progress")]
    assert len(progress) == 2  # one card per run, both in the thread


# -- the long connection ----------------------------------------------------------------------


async def test_the_long_connection_end_to_end(feishu: FeishuFactory) -> None:
    bot = await feishu(mode="ws")
    await wait_for(lambda: bot.fake.ws_connections >= 1)
    ready = await wait_for(
        lambda: _connected(bot.served),
    )
    assert ready["platforms"]["feishu"]["mode"] == "ws"
    event = message_event("/research heat pumps depth=2", message_id="om_ws")
    ack = await bot.push(event)
    assert ack["code"] == 200
    assert len(await bot.served.runs(USER)) == 1  # recorded before the acknowledgement
    assert (await bot.push(event))["code"] == 200  # a re-push: no second run
    (run,) = await bot.delivered()
    assert run.status == "succeeded"
    progress, *reports = bot.thread("om_ws")
    assert "Research done: 2/2 searches" in card_texts(progress)[-1] and reports
    assert len(await bot.served.runs(USER)) == 1
    # The webhook route is not open in this mode.
    assert (await bot.send(event)).status_code == 404


async def _connected(served: ServedFathom) -> dict[str, Any] | None:
    ready = await served.readyz()
    feishu = ready.get("platforms", {}).get("feishu", {})
    return ready if feishu.get("state") == "connected" else None


async def test_a_silent_long_connection_is_restarted_by_the_watchdog(
    feishu_server: FakeFeishuServer,
) -> None:
    import lark_oapi as lark

    fake = feishu_server.fake
    fake.ws_ping_interval = 1  # the SDK pings every second; the fake answers with pongs
    handler = lark.EventDispatcherHandler.builder("", "").build()
    connection = LongConnection(
        APP_ID, APP_SECRET, feishu_server.url, handler, dead_after=1.0, check_every=0.1
    )
    await connection.start()
    try:
        await wait_for(lambda: connection.connected and fake.ws_connections == 1)
        fake.ws_silent = True  # the socket stays open, but nothing comes back any more
        await wait_for(lambda: connection.restarts >= 1 and fake.ws_connections >= 2, within=20)
        fake.ws_silent = False
        await wait_for(lambda: connection.connected)
        assert connection.status()["state"] == "connected"
    finally:
        await connection.close()
    assert connection.status()["state"] == "stopped"


async def test_a_refused_long_connection_shows_down_with_its_reason_and_backs_off(
    feishu_server: FakeFeishuServer,
) -> None:
    import lark_oapi as lark

    handler = lark.EventDispatcherHandler.builder("", "").build()
    connection = LongConnection(
        APP_ID, "wrong-secret", feishu_server.url, handler, dead_after=1.0, check_every=0.05
    )
    await connection.start()
    try:
        status = await wait_for(
            lambda: connection.status() if connection.status()["state"] == "down" else None
        )
        assert "auth failed" in str(status["last_error"])
        await wait_for(lambda: connection.restarts >= 2, within=10)
        # It keeps trying: the second restart's session asks for the endpoint on its own
        # thread, after ``restarts`` was counted (asserting at once raced it under load).
        await wait_for(lambda: feishu_server.fake.ws_endpoint_calls >= 3, within=10)
    finally:
        await connection.close()
    assert [restart_delay(n) for n in range(8)] == [0, 1, 3, 7, 15, 31, 60, 60]


async def test_a_client_stuck_connecting_is_replaced_and_never_lingers(
    feishu_server: FakeFeishuServer,
) -> None:
    """The SDK's endpoint request has no timeout: a hung first connect is abandoned, a new
    client connects, and the abandoned one, once its request returns, closes instead of
    becoming a second live connection."""
    import lark_oapi as lark

    fake = feishu_server.fake
    fake.ws_endpoint_delays = [3.0]  # the first endpoint call hangs for 3 s
    received: list[object] = []
    handler = (
        lark.EventDispatcherHandler.builder("", "")
        .register_p2_im_message_receive_v1(received.append)
        .build()
    )
    connection = LongConnection(
        APP_ID, APP_SECRET, feishu_server.url, handler, dead_after=0.5, check_every=0.1
    )
    await connection.start()
    try:
        await wait_for(lambda: connection.connected, within=20)
        assert connection.restarts >= 1
        # Wait until the abandoned client's thread has ended (its request came back).
        await wait_for(lambda: _ws_threads() == 1 and fake.ws_endpoint_calls >= 2, within=20)
        assert fake.ws_open == 1 and connection.status()["state"] == "connected"
        event = message_event("/research heat pumps", message_id="om_z")
        ack = await asyncio.to_thread(fake.push_event, event)  # the live client answers
        assert ack["code"] == 200 and len(received) == 1
    finally:
        await connection.close()
    await wait_for(lambda: _ws_threads() == 0 and fake.ws_open == 0)


def _ws_threads() -> int:
    import threading

    return sum(
        1 for t in threading.enumerate() if t.name == "feishu long connection" and t.is_alive()
    )


async def test_a_digest_opens_a_new_thread_in_the_chat_with_its_card(
    feishu: FeishuFactory,
) -> None:
    """A digest scheduled from Feishu fires (here: its slot is fired directly, as the
    scheduler does): the card opens a new thread in the chat, the report replies in it."""
    from datetime import UTC, datetime

    from core.operations.digests import DigestService
    from storage import DigestStore

    bot = await feishu(FATHOM_STALE_RUN_AFTER="4")  # the sweep takes queued runs every 2 s
    await bot.send(
        message_event(
            '/research schedule "heat pumps" cron="0 9 * * MON" depth=1 tz=Asia/Shanghai',
            token=TOKEN,
            message_id="om_sched",
        )
    )
    (answer,) = await wait_for(lambda: bot.thread("om_sched"))
    assert "Scheduled **heat pumps**" in answer.markdown
    database = bot.served.database
    digests = DigestService(
        DigestStore(database),
        bot.served.store.runs,
        min_interval=3600,
        grace=3600,
        max_per_channel=10,
    )
    (digest,) = await digests.digests.all()
    run, created = await digests.fire(digest, datetime(2026, 12, 7, 1, 0, tzinfo=UTC))
    assert created and run is not None
    (done,) = await bot.delivered()
    opener = bot.fake.messages[done.progress_message_id or ""]
    assert opener.root_id == "" and opener.chat_id == "oc_chat_1"  # a new top-level message
    assert opener.card["header"]["title"]["content"] == "Digest: heat pumps — 2026-12-07"
    assert done.thread_key == f"feishu:{TENANT}:oc_chat_1:{opener.message_id}"
    reports = bot.thread(opener.message_id)
    assert reports and all(r.parent_id == opener.message_id for r in reports)


# -- files attached in the chat -------------------------------------------------------------


def _attached(run: Any) -> list[tuple[str, str, str | None, str]]:
    return [
        (a["id"], a["name"], a.get("message_id"), a.get("attached_by", ""))
        for a in run.attachments or []
    ]


async def test_a_private_file_then_a_request_reads_the_file_into_the_report(
    feishu: FeishuFactory, llm: FakeLLMServer
) -> None:
    """A file message cannot mention the bot: in a private chat it is kept (and answered),
    and the sender's next request there takes it: the run downloads it from its message with
    the tenant token, the writer has its passages, and the report cites it."""
    bot = await feishu()
    notes = "# Field notes\n\nThe heat pump's seasonal coefficient of performance was 3.4.\n"
    bot.fake.add_file("om_f1", "file_v3_00ab_1", notes.encode(), "notes.md", "text/markdown")
    sent = await bot.send(file_event("file_v3_00ab_1", "notes.md", token=TOKEN, message_id="om_f1"))
    assert sent.status_code == 200
    (kept,) = await wait_for(lambda: bot.thread("om_f1"))
    assert "Got notes.md" in kept.markdown and "10 min" in kept.markdown
    await bot.send(message_event("/research heat pumps depth=1", token=TOKEN, message_id="om_q1"))
    (run,) = await bot.delivered()
    assert _attached(run) == [("file_v3_00ab_1", "notes.md", "om_f1", "ou_user_1")]
    assert run.status == "succeeded" and run.attachments_read == 1
    (download,) = bot.fake.calls_to("resource")
    assert download.path == "/open-apis/im/v1/messages/om_f1/resources/file_v3_00ab_1"
    assert download.query == {"type": "file"} and download.token in bot.fake.tokens
    prompt = str(llm.fake.requests_for("writer")[-1].body["messages"][-1]["content"])
    assert "[1] notes.md (attached by ou_user_1)" in prompt
    assert "coefficient of performance was 3.4" in prompt
    progress, *reports = bot.thread("om_q1")
    assert progress.uuid == f"{run.id}:progress"  # no "Not read" answer before it
    assert "notes.md (attached by ou_user_1)" in "".join(card.markdown for card in reports)
    # Taken once: the next request has no file.
    await bot.send(message_event("/research heat pumps again depth=1", token=TOKEN))
    newest, _ = await bot.delivered(2)
    assert _attached(newest) == []


async def test_a_group_file_is_taken_by_a_request_in_its_thread_only(
    feishu: FeishuFactory,
) -> None:
    """With the group-message permission the bot sees a file posted in a thread (and says
    nothing); an @-mention in another thread does not take it, one in its thread does."""
    bot = await feishu()
    posted = file_event(
        "file_v3_spec",
        "spec.pdf",
        chat_type="group",
        root_id="om_root",
        token=TOKEN,
        message_id="om_gf",
    )
    assert (await bot.send(posted)).status_code == 200
    elsewhere = message_event(
        "/research heat pumps depth=1",
        chat_type="group",
        mention_bot=True,
        root_id="om_other",
        token=TOKEN,
    )
    await bot.send(elsewhere)
    (other,) = await bot.delivered()
    assert _attached(other) == []
    here = message_event(
        "/research heat pumps spec depth=1",
        chat_type="group",
        mention_bot=True,
        root_id="om_root",
        sender="ou_user_2",  # anyone in the thread may ask about it
        token=TOKEN,
    )
    await bot.send(here)
    (run,) = await bot.delivered(user=f"feishu:{TENANT}:ou_user_2")
    assert _attached(run) == [("file_v3_spec", "spec.pdf", "om_gf", "ou_user_1")]
    assert bot.thread("om_gf") == []  # a group file alone is not answered


async def test_files_the_research_cannot_read_are_named_in_one_answer(
    feishu: FeishuFactory,
) -> None:
    """A post with the bot's mention and a video starts the research and says the video is
    not read; a private zip file is answered at once."""
    bot = await feishu()
    post = message_event(
        None,
        chat_type="group",
        mention_bot=True,
        message_type="post",
        content={
            "title": "",
            "content": [
                [
                    {"tag": "at", "user_id": "@_user_1", "user_name": "Fathom"},
                    {"tag": "text", "text": " /research heat pumps depth=1"},
                ],
                [{"tag": "media", "file_key": "file_v3_video", "image_key": "img_v3_cover"}],
            ],
        },
        token=TOKEN,
        message_id="om_post_v",
    )
    await bot.send(post)
    (run,) = await bot.delivered()
    assert _attached(run) == []
    answers = [m for m in bot.thread("om_post_v") if not m.uuid.startswith(run.id)]
    (left_out,) = answers
    assert "Not read: video" in left_out.markdown
    await bot.send(file_event("file_v3_zip", "data.zip", token=TOKEN, message_id="om_zip"))
    (answer,) = await wait_for(lambda: bot.thread("om_zip"))
    assert "Not read: data.zip" in answer.markdown and "PDF" in answer.markdown


async def test_a_redelivered_file_event_is_kept_once(feishu: FeishuFactory) -> None:
    bot = await feishu()
    event = file_event("file_v3_once", "notes.txt", token=TOKEN, message_id="om_once")
    for _ in range(3):
        assert (await bot.send(event)).status_code == 200
    other_event = dict(event, header=dict(event["header"], event_id="another-event-id"))
    assert (await bot.send(other_event)).status_code == 200  # the same message again
    await wait_for(lambda: bot.thread("om_once"))
    await bot.send(message_event("/research notes depth=1", token=TOKEN))
    (run,) = await bot.delivered()
    assert _attached(run) == [("file_v3_once", "notes.txt", "om_once", "ou_user_1")]
    assert len(bot.thread("om_once")) == 1  # answered once


async def test_a_file_over_the_long_connection_is_kept_for_the_next_request(
    feishu: FeishuFactory,
) -> None:
    bot = await feishu(mode="ws")
    await wait_for(lambda: _connected(bot.served))
    ack = await bot.push(file_event("file_v3_ws", "paper.pdf", message_id="om_wsf"))
    assert ack["code"] == 200
    assert (await bot.push(message_event("/research heat pumps depth=1", message_id="om_wsq")))[
        "code"
    ] == 200
    (run,) = await bot.delivered()
    assert _attached(run) == [("file_v3_ws", "paper.pdf", "om_wsf", "ou_user_1")]


async def test_a_post_with_the_bot_and_a_file_is_read_and_one_too_large_is_noted(
    feishu: FeishuFactory,
) -> None:
    """A post that mentions the bot carries its files to the run. (Feishu documents only
    ``media`` among a received post's file tags; a ``file`` element is read the same way.)
    A file larger than ``FATHOM_ATTACHMENT_MAX_BYTES`` (Feishu does not say its size before
    the download) is not read past the limit, and the report's notes say so."""
    bot = await feishu(FATHOM_ATTACHMENT_MAX_BYTES="2000")
    bot.fake.add_file("om_pf", "file_v3_small", b"Heat pumps: COP 3.4.", "small.txt", "text/plain")
    bot.fake.add_file("om_pf", "file_v3_big", b"z" * 50_000, "big.txt", "text/plain")
    post = message_event(
        None,
        chat_type="group",
        mention_bot=True,
        message_type="post",
        content={
            "title": "",
            "content": [
                [
                    {"tag": "at", "user_id": "@_user_1", "user_name": "Fathom"},
                    {"tag": "text", "text": " /research heat pumps depth=1"},
                ],
                [{"tag": "file", "file_key": "file_v3_small", "file_name": "small.txt"}],
                [{"tag": "file", "file_key": "file_v3_big", "file_name": "big.txt"}],
            ],
        },
        token=TOKEN,
        message_id="om_pf",
    )
    await bot.send(post)
    (run,) = await bot.delivered()
    assert [name for _, name, _, _ in _attached(run)] == ["small.txt", "big.txt"]
    assert run.attachments_read == 1
    assert any("big.txt" in note and "not read" in note for note in run.notes)


async def test_a_feishu_research_cites_the_team_server_its_platform_may_use(
    feishu: FeishuFactory, tmp_path: Path
) -> None:
    from tests.test_team_knowledge import calls_of, write_config

    calls = tmp_path / "calls.jsonl"
    config = write_config(tmp_path / "mcp.json", calls, ["feishu"])
    bot = await feishu(FATHOM_MCP_CONFIG=str(config))
    event = message_event(
        "/research pump failures depth=1 sources=internal", token=TOKEN, message_id="om_kb"
    )
    assert (await bot.send(event)).status_code == 200
    (run,) = await bot.delivered()
    assert run.status == "succeeded", run.error
    assert "(notes)](https://wiki.example.internal/runbook)" in (run.report_markdown or "")
    assert len(calls_of(calls)) == 1


# -- buttons ---------------------------------------------------------------------------------


def button_actions(message: FeishuMessage) -> list[str]:
    return [
        behavior["value"]["action"]
        for button in card_buttons(message)
        for behavior in button.get("behaviors") or []
        if behavior.get("type") == "callback"
    ]


async def progress_card_with_buttons(
    bot: FeishuBot, root: str, *, started: bool = False
) -> FeishuMessage:
    """The progress card once it shows buttons (``started``: the running research's two;
    before a runner takes it, the card of a request in line carries Cancel only)."""

    async def shown() -> FeishuMessage | None:
        thread = bot.thread(root)
        if not thread or not button_actions(thread[0]):
            return None
        if started and button_actions(thread[0]) != ["fathom_stop", "fathom_cancel"]:
            return None
        # A copy: the card as the client shows it now (a later press may come from it).
        return copy.deepcopy(thread[0])

    found: FeishuMessage = await wait_for(shown)
    return found


def toast(answer: dict[str, Any]) -> str:
    """The toast in a card callback's answer (a webhook's body, or a long-connection ack)."""
    if "data" in answer:
        answer = json.loads(base64.b64decode(answer["data"]))
    return str(answer["toast"]["content"])


async def test_card_buttons_over_the_webhook_stop_the_run_and_rate_the_report(
    feishu: FeishuFactory, search: FakeSearchServer
) -> None:
    bot = await feishu()
    search.fake.hold_pages()
    await bot.send(message_event("/research tidal power depth=5", token=TOKEN, message_id="om_b1"))
    progress = await progress_card_with_buttons(bot, "om_b1", started=True)
    assert button_actions(progress) == ["fathom_stop", "fathom_cancel"]
    await wait_for(lambda: search.fake.page_requests)

    other = await bot.send(
        card_action_event(progress, "fathom_stop", operator="ou_other", token=TOKEN)
    )
    assert other.status_code == 200
    assert toast(other.json()).startswith("Only the person who started this research")
    stop = await bot.send(card_action_event(progress, "fathom_stop", token=TOKEN))
    assert stop.status_code == 200
    assert toast(stop.json()).startswith("🛑 Stopping “tidal power” (run ")
    assert "`" not in toast(stop.json())  # a toast is plain text
    again = await bot.send(card_action_event(progress, "fathom_stop", token=TOKEN))
    assert toast(again.json()) == "That research is already stopping."
    search.fake.release_pages()

    (run,) = await bot.delivered()
    assert (run.status, run.stop_requested) == ("succeeded", True)
    assert len(search.fake.queries) == 1
    final = bot.fake.messages[progress.message_id]
    assert button_actions(final) == []  # the final state has no buttons
    assert "stopped early after 1 of 5 searches" in final.markdown
    *_, last = bot.thread("om_b1")
    assert button_actions(last) == ["fathom_up", "fathom_down"]
    up = await bot.send(card_action_event(last, "fathom_up", token=TOKEN))
    assert toast(up.json()) == "Thanks: your 👍 is recorded."
    late = await bot.send(card_action_event(progress, "fathom_cancel", token=TOKEN))
    assert toast(late.json()) == "That research has already finished."
    [vote] = await bot.served.store.feedback.feedback_since()
    assert (vote.run_id, vote.voter, vote.value) == (run.id, USER, "up")


async def test_a_press_that_fails_is_answered_in_the_language_of_its_card(
    feishu: FeishuFactory,
) -> None:
    """The database fails while a press is decided: the toast says so in the card's
    language (the button's value carries it), not in English on a Chinese card."""
    bot = await feishu()
    await bot.send(message_event("/research 潮汐能 depth=1", token=TOKEN, message_id="om_zh"))
    progress = await progress_card_with_buttons(bot, "om_zh")
    await bot.delivered()
    async with runs_table_away(bot.served.database):
        answer = await bot.send(card_action_event(progress, "fathom_cancel", token=TOKEN))
    assert answer.status_code == 200
    assert toast(answer.json()) == "⚠️ 我这边出了点问题，请稍后再试。"


async def test_a_press_on_a_chinese_card_of_no_run_here_gets_a_chinese_toast(
    feishu: FeishuFactory,
) -> None:
    """A press on a Chinese card whose run is not in the pressed chat (the card forwarded to
    another chat, a stale value) is refused in Chinese (the button's value carries the
    card's language), not "This button does not belong to a research here"."""
    bot = await feishu()
    await bot.send(message_event("/research 潮汐能 depth=1", token=TOKEN, message_id="om_zh2"))
    progress = await progress_card_with_buttons(bot, "om_zh2")
    await bot.delivered()
    moved = card_action_event(progress, "fathom_cancel", token=TOKEN)
    moved["event"]["context"]["open_chat_id"] = "oc_elsewhere"
    answer = await bot.send(moved)
    assert answer.status_code == 200
    assert toast(answer.json()) == "这个按钮不属于这里的研究；没有任何改动。"


async def test_a_request_waiting_in_line_gets_its_card_at_once_with_its_place_and_cancel(
    feishu: FeishuFactory, search: FakeSearchServer
) -> None:
    """One research at a time (FATHOM_MAX_CONCURRENT_RUNS=1) and one running: the next
    request is answered at once by its progress card, saying its place in line, with Cancel
    only; Cancel takes it out of the line and the card says so, without its button."""
    bot = await feishu(FATHOM_MAX_CONCURRENT_RUNS="1")
    search.fake.hold_pages()
    await bot.send(message_event("/research tidal power depth=2", token=TOKEN, message_id="om_q1"))
    await wait_for(lambda: search.fake.page_requests)
    await bot.send(message_event("/research wave power depth=1", token=TOKEN, message_id="om_q2"))
    card = await progress_card_with_buttons(bot, "om_q2")
    assert button_actions(card) == ["fathom_cancel"]
    assert "Queued: 1st in line." in card.markdown
    ack = await bot.send(card_action_event(card, "fathom_cancel", token=TOKEN))
    assert toast(ack.json()).startswith("🛑 Cancelling “wave power”")

    def cancelled() -> bool:
        (shown,) = bot.thread("om_q2")
        return "Research cancelled" in shown.markdown and not button_actions(shown)

    await wait_for(cancelled)
    search.fake.release_pages()
    first, second = sorted(await bot.delivered(2), key=lambda r: r.created_at)
    assert (first.status, second.status) == ("succeeded", "cancelled")
    assert len(bot.thread("om_q2")) == 1  # its one card, nothing more


async def test_forged_card_callbacks_get_4xx_or_change_nothing(
    feishu: FeishuFactory, search: FakeSearchServer
) -> None:
    bot = await feishu()
    search.fake.hold_pages()
    await bot.send(message_event("/research wave power depth=5", token=TOKEN, message_id="om_b2"))
    progress = await progress_card_with_buttons(bot, "om_b2")
    press = card_action_event(progress, "fathom_cancel", token=TOKEN)
    assert (await bot.send(press, sign_with="another key")).status_code == 401
    assert (
        await bot.send(card_action_event(progress, "fathom_cancel", token="x"))
    ).status_code == 403
    assert (await bot.send(press, encrypted=False)).status_code == 400
    other_run = card_action_event(
        progress, "fathom_cancel", token=TOKEN, value={"action": "fathom_cancel", "run": "0" * 32}
    )
    assert toast((await bot.send(other_run)).json()).startswith("This button does not belong")
    moved = card_action_event(progress, "fathom_cancel", token=TOKEN)
    moved["event"]["context"]["open_chat_id"] = "oc_elsewhere"
    assert toast((await bot.send(moved)).json()).startswith("This button does not belong")
    [run] = await bot.served.runs(USER)
    assert not run.cancel_requested and run.finished_at is None
    search.fake.release_pages()
    (done,) = await bot.delivered()
    assert done.status == "succeeded"


async def test_card_buttons_over_the_long_connection_cancel_the_run(
    feishu: FeishuFactory, search: FakeSearchServer
) -> None:
    bot = await feishu(mode="ws")
    await wait_for(lambda: _connected(bot.served))
    search.fake.hold_pages()
    await bot.push(message_event("/research geothermal depth=5", message_id="om_b3"))
    progress = await progress_card_with_buttons(bot, "om_b3")
    ack = await bot.push(card_action_event(progress, "fathom_cancel"))
    assert ack["code"] == 200
    assert toast(ack).startswith("🛑 Cancelling “geothermal”")
    search.fake.release_pages()
    (run,) = await bot.delivered()
    assert run.status == "cancelled" and len(bot.thread("om_b3")) == 1  # no report
    assert button_actions(bot.fake.messages[progress.message_id]) == []
