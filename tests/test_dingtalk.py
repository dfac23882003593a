"""DingTalk end to end: the real ``fathom serve`` against a fake DingTalk OpenAPI on 127.0.0.1.

HTTP callbacks are signed as DingTalk signs them; stream messages go over a real WebSocket in
the SDK's frames to the SDK's own client. What the shared chat layer guarantees is proven in
test_chat_layer.py; here: translation, verification, cards, webhooks and the OpenAPI, and the
two ingress modes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bots.chat.markdown import tables_as_lists
from bots.dingtalk.render import progress_markdown
from tests.chat_app import ServedFathom, wait_for
from tests.conftest import ServeFathom
from tests.fakes import FakeLLMServer, FakeSearchServer, Hang
from tests.fakes.dingtalk import (
    CARD_TOPIC,
    CLIENT_ID,
    CLIENT_SECRET,
    CORP,
    MAX_BODY_BYTES,
    FakeCard,
    FakeDingTalk,
    FakeDingTalkServer,
    bot_message,
    card_callback,
    signed_headers,
)

USER = f"dingtalk:{CORP}:staff_1"


@dataclass
class DingTalkBot:
    served: ServedFathom
    fake: FakeDingTalk

    def message(self, text: str | None, **kw: Any) -> dict[str, Any]:
        return bot_message(self.fake, text, **kw)

    async def send(
        self, data: dict[str, Any], *, secret: str = CLIENT_SECRET, ts: int | None = None
    ) -> httpx.Response:
        """An HTTP callback, signed as DingTalk signs it."""
        return await self.served.http.post(
            f"{self.served.url}/dingtalk/events",
            content=json.dumps(data).encode(),
            headers=signed_headers(secret, ts),
        )

    async def push(self, data: dict[str, Any], message_id: str | None = None) -> dict[str, Any]:
        return await asyncio.to_thread(self.fake.push, data, message_id=message_id)

    async def press(self, data: dict[str, Any]) -> dict[str, Any]:
        """A card callback over the stream; the client's ack."""
        return await asyncio.to_thread(self.fake.push, data, topic=CARD_TOPIC)

    async def told(self, user: str, count: int) -> list[Any]:
        """The one-to-one messages the robot sent ``user`` (answers to presses), once there
        are ``count`` of them."""
        sent: list[Any] = await wait_for(
            lambda: len(found := self.fake.sent_to(f"single:{user}")) >= count and found
        )
        return sent

    async def delivered(self, count: int = 1) -> list[Any]:
        return await self.served.delivered(USER, count)

    def card(self, run_id: str) -> Any:
        return self.fake.cards[f"fathom_{run_id}"]


DingTalkFactory = Callable[..., Awaitable[DingTalkBot]]


@pytest.fixture
async def dingtalk(
    serve_fathom: ServeFathom, dingtalk_server: FakeDingTalkServer
) -> AsyncIterator[DingTalkFactory]:
    """``await dingtalk(mode="http", **env)``: Fathom served with DingTalk alone."""

    async def start(mode: str = "http", **env: str) -> DingTalkBot:
        served = await serve_fathom(
            DINGTALK_CLIENT_ID=CLIENT_ID,
            DINGTALK_CLIENT_SECRET=CLIENT_SECRET,
            DINGTALK_API_URL=dingtalk_server.url,
            DINGTALK_MODE=mode,
            FATHOM_DINGTALK_EDIT_INTERVAL="0.05",
            FATHOM_DELIVERY_BACKOFF="0.05",
            **env,
        )
        return DingTalkBot(served, dingtalk_server.fake)

    yield start


# -- the callback's gate ----------------------------------------------------------------------


async def test_a_bad_sign_or_a_stale_timestamp_is_rejected_and_nothing_is_stored(
    dingtalk: DingTalkFactory,
) -> None:
    bot = await dingtalk()
    data = bot.message("/research heat pumps")
    assert (await bot.send(data, secret="not-the-secret")).status_code == 401
    stale = int(time.time() * 1000) - 2 * 3_600_000
    assert (await bot.send(data, ts=stale)).status_code == 401
    unsigned = await bot.served.http.post(f"{bot.served.url}/dingtalk/events", json=data)
    assert unsigned.status_code == 401
    bad = await bot.served.http.post(
        f"{bot.served.url}/dingtalk/events", content=b"[1]", headers=signed_headers()
    )
    assert bad.status_code == 400
    assert await bot.served.runs(USER) == []
    assert bot.fake.sent == [] and bot.fake.cards == {}


# -- a research request, end to end -----------------------------------------------------------


async def test_a_group_request_gets_a_card_updated_in_place_then_the_report(
    dingtalk: DingTalkFactory, llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    bot = await dingtalk()
    llm_server.fake.latency = search_server.fake.latency = 0.15
    data = bot.message("/research heat pumps depth=3", group=True, msg_id="msg_g1")
    response = await bot.send(data)
    assert response.status_code == 200
    (queued,) = await bot.served.runs(USER)  # committed before the answer
    assert queued.thread_key == f"dingtalk:{CORP}:cid_group_1:msg_g1"
    (run,) = await bot.delivered()
    assert run.status == "succeeded" and run.delivery == "posted"
    card = bot.card(run.id)
    assert card.open_space_id == "dtv1.card//IM_GROUP.cid_group_1"
    texts = [version["markdown"] for version in card.versions]
    lines = ["1/3th search executed.", "2/3th search executed.", "3/3th search executed."]
    positions = [next(i for i, t in enumerate(texts) if line in t) for line in lines]
    assert positions == sorted(positions)
    assert texts[0].startswith("Researching **heat pumps** (depth 3)")
    assert "Research done: 3/3 searches" in texts[-1]
    reports = bot.fake.sent_to("cid_group_1")
    assert len(reports) == run.report_parts_posted >= 1
    assert all(r.via == "webhook" and r.msgtype == "markdown" for r in reports)
    assert reports[0].at_user_ids == ["staff_1"] and reports[0].text.startswith("@staff_1")
    assert all(r.at_user_ids == [] for r in reports[1:])
    assert all(r.size <= MAX_BODY_BYTES for r in reports)
    assert "](http" in reports[0].text  # citations are links


async def test_a_redelivered_message_makes_no_second_run(dingtalk: DingTalkFactory) -> None:
    bot = await dingtalk()
    data = bot.message("/research heat pumps depth=1", msg_id="msg_r1")
    for _ in range(3):
        assert (await bot.send(data)).status_code == 200
    (run,) = await bot.delivered()
    assert len(await bot.served.runs(USER)) == 1
    assert len(bot.fake.cards) == 1 and len(bot.fake.sent) == run.report_parts_posted


async def test_a_chinese_request_is_answered_in_chinese(dingtalk: DingTalkFactory) -> None:
    bot = await dingtalk()
    await bot.send(bot.message("/research 热泵 depth=1", msg_id="msg_zh"))
    (run,) = await bot.delivered()
    texts = [v["markdown"] for v in bot.card(run.id).versions]
    assert texts[0].startswith("正在研究 **热泵**（深度 1）")
    assert "研究完成：1/1 次搜索" in texts[-1]
    await bot.send(bot.message("/research 热泵 depth=0", msg_id="msg_zh2"))
    answer = await wait_for(lambda: [s for s in bot.fake.sent if "depth 必须" in s.text])
    assert answer[0].text.startswith("⚠️ depth 必须在 1 到 10 之间；不允许 0。")
    assert len(await bot.served.runs(USER)) == 1


async def test_when_cards_are_refused_progress_falls_back_to_two_messages(
    dingtalk: DingTalkFactory, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await dingtalk()
    bot.fake.cards_forbidden = True
    caplog.set_level(logging.WARNING, logger="bots.dingtalk.delivery")
    await bot.send(bot.message("/research heat pumps depth=2", msg_id="msg_p1"))
    await bot.delivered()
    await bot.send(bot.message("/research wind power depth=1", msg_id="msg_p2", conversation="c2"))
    await bot.delivered(2)
    assert bot.fake.cards == {}
    # Learned by the first run; the next one does not ask again.
    assert len(bot.fake.calls_to("card_create")) == 1
    sent = bot.fake.sent_to("cid_single_1")
    progress = [s for s in sent if s.title == "Fathom research"]
    assert len(progress) == 2
    assert progress[0].text.startswith("Researching **heat pumps**")
    assert "Research done: 2/2 searches" in progress[1].text
    hints = [r for r in caplog.records if "Card.Instance.Write" in r.getMessage()]
    assert len(hints) == 1


async def test_an_expired_session_webhook_sends_through_the_openapi(
    dingtalk: DingTalkFactory, llm_server: FakeLLMServer
) -> None:
    bot = await dingtalk()
    llm_server.fake.script("writer", Hang(1.2))  # the webhook expires while the report is written
    data = bot.message(
        "/research heat pumps depth=1", group=True, msg_id="msg_x1", webhook_valid_for=61.0
    )
    await bot.send(data)
    (run,) = await bot.delivered()
    reports = bot.fake.sent_to("cid_group_1")
    assert reports and all(r.via == "group" for r in reports)
    assert reports[0].text.startswith("@Alice")
    sends = bot.fake.calls_to("group")
    assert all(c.body["robotCode"] == CLIENT_ID for c in sends)
    assert len(reports) == run.report_parts_posted


async def test_an_openapi_send_answered_by_a_broken_page_is_retried(
    dingtalk: DingTalkFactory, llm_server: FakeLLMServer
) -> None:
    """Once the session webhook expired, the report goes through the OpenAPI, retried when it
    answers a page (every broken body is judged in test_platform_errors.py)."""
    body = "html"
    bot = await dingtalk()
    llm_server.fake.script("writer", Hang(1.2))  # the webhook expires while the report is written
    data = bot.message(
        "/research heat pumps depth=1", group=True, msg_id=f"msg_o{body}", webhook_valid_for=61.0
    )
    await bot.send(data)
    await wait_for(lambda: bot.fake.cards)
    bot.fake.fail_next("group", status=404 if body == "html" else 502, times=2, body=body)
    (run,) = await bot.delivered()
    assert (run.delivery, run.delivery_attempts) == ("posted", 2)
    reports = bot.fake.sent_to("cid_group_1")
    assert reports and all(r.via == "group" for r in reports)
    assert reports[0].text.startswith("@Alice\n\n# ")  # the heading on a line of its own


async def test_a_dingtalk_refusal_that_says_never_gives_up_at_once(
    dingtalk: DingTalkFactory, llm_server: FakeLLMServer
) -> None:
    bot = await dingtalk()
    llm_server.fake.script("writer", Hang(1.2))
    data = bot.message(
        "/research heat pumps depth=1", group=True, msg_id="msg_never", webhook_valid_for=61.0
    )
    await bot.send(data)
    await wait_for(lambda: bot.fake.cards)
    bot.fake.fail_next("group", status=400, code="invalidParameter.robot.notInGroup", times=9)
    (run,) = await bot.delivered()
    assert (run.delivery, run.delivery_attempts) == ("failed", 1)
    assert "invalidParameter.robot.notInGroup" in (run.delivery_error or "")


async def test_a_request_soon_after_a_finished_one_follows_up_on_it(
    dingtalk: DingTalkFactory,
) -> None:
    bot = await dingtalk()
    await bot.send(bot.message("/research heat pumps depth=1", msg_id="msg_f1"))
    await bot.delivered()
    await bot.send(bot.message("what about noise? depth=1", msg_id="msg_f2"))
    newest, oldest = await bot.delivered(2)
    assert newest.thread_key == oldest.thread_key == f"dingtalk:{CORP}:cid_single_1:msg_f1"
    thread = await bot.served.store.threads.get_thread(newest.thread_key)
    assert thread is not None
    variables = await bot.served.store.threads.load_variables(thread.id)
    assert variables is not None and len(variables["topics"]) == 2
    # `/research <topic>` is always new, even within the window...
    await bot.send(bot.message("/research tidal power depth=1", msg_id="msg_f5"))
    newest, *_ = await bot.delivered(3)
    assert newest.thread_key.endswith(":msg_f5")
    # ...and quoting the message that started a research continues it, whatever it says.
    await bot.send(bot.message("/research costs depth=1", msg_id="msg_f6", replied_to="msg_f1"))
    newest, *_ = await bot.delivered(4)
    assert newest.thread_key.endswith(":msg_f1")
    # The window turned off: every request is a new research.
    off = await dingtalk(FATHOM_DINGTALK_FOLLOWUP_WINDOW="0")
    await off.send(off.message("heat pumps depth=1", msg_id="msg_f3", conversation="c9"))
    await off.send(off.message("wind power depth=1", msg_id="msg_f4", conversation="c9"))
    runs = await off.delivered(2)  # a second app, on a database of its own
    assert {r.thread_key for r in runs} == {
        f"dingtalk:{CORP}:c9:msg_f3",
        f"dingtalk:{CORP}:c9:msg_f4",
    }


async def test_a_picture_gets_a_short_answer_and_a_group_message_without_mention_none(
    dingtalk: DingTalkFactory,
) -> None:
    bot = await dingtalk()
    await bot.send(bot.message(None, message_type="picture", msg_id="msg_pic"))
    await bot.send(bot.message("/research x", group=True, at_bot=False, msg_id="msg_no"))
    answer = await wait_for(lambda: bot.fake.sent_to("cid_single_1"))
    assert "I can only read text" in answer[0].text
    assert bot.fake.sent_to("cid_group_1") == [] and await bot.served.runs(USER) == []


async def test_a_message_for_another_robot_or_a_foreign_webhook_is_not_trusted(
    dingtalk: DingTalkFactory,
) -> None:
    """The callback's sign covers only its timestamp, so the body's robot is checked, and a
    session webhook that is not DingTalk's is never posted to (the OpenAPI is used)."""
    bot = await dingtalk()
    other = dict(bot.message("/research heat pumps", msg_id="msg_o1"), robotCode="another")
    assert (await bot.send(other)).status_code == 403
    assert await bot.served.runs(USER) == []
    foreign = bot.message(
        "/research heat pumps depth=1",
        group=True,
        msg_id="msg_o2",
        webhook="http://127.0.0.2:9/robot/send",
    )
    assert (await bot.send(foreign)).status_code == 200
    (run,) = await bot.delivered()
    reports = bot.fake.sent_to("cid_group_1")
    assert reports and all(r.via == "group" for r in reports)
    assert run.platform_context is not None and run.platform_context["webhook"] == ""


async def test_a_failed_run_with_cards_refused_posts_its_end_once(
    dingtalk: DingTalkFactory, search_server: FakeSearchServer
) -> None:
    bot = await dingtalk()
    bot.fake.cards_forbidden = True
    search_server.fake.empty = True  # nothing found: the run fails
    await bot.send(bot.message("/research heat pumps depth=1", msg_id="msg_e1"))
    (run,) = await bot.delivered()
    assert run.status == "failed"
    progress = [s for s in bot.fake.sent_to("cid_single_1") if s.title == "Fathom research"]
    assert len(progress) == 2 and "Research failed" in progress[1].text


@pytest.mark.parametrize("under_text", [False, True])
async def test_quoting_a_research_continues_it_in_every_shape(
    dingtalk: DingTalkFactory, under_text: bool
) -> None:
    """A quote of the request, whether ``repliedMsg`` is at the top level or under ``text``;
    a quote of one of Fathom's own messages (which DingTalk gives no id the robot knows),
    even by another user, outside the follow-up window; rich text with an @-mention and a
    quote."""
    bot = await dingtalk(FATHOM_DINGTALK_FOLLOWUP_WINDOW="0")
    group = {"group": True, "quote_under_text": under_text}
    await bot.send(bot.message("/research heat pumps depth=1", msg_id="msg_q1", **group))
    await bot.send(bot.message("/research tidal power depth=1", msg_id="msg_q2", **group))
    await bot.delivered(2)
    key = f"dingtalk:{CORP}:cid_group_1:"
    await bot.send(
        bot.message("and the costs? depth=1", msg_id="msg_q3", replied_to="msg_q1", **group)
    )
    newest, *_ = await bot.delivered(3)
    assert newest.thread_key == key + "msg_q1"
    # Fathom's progress card of the first research, quoted without an id the robot knows.
    card = "Research done: 1/1 searches. Researching **heat pumps** (depth 1)"
    quote_card = bot.message(
        "what about noise? depth=1",
        msg_id="msg_q4",
        replied_to="",
        quoted_sender="bot_user_1",
        quoted_text=card,
        sender_staff_id="staff_2",
        **group,
    )
    await bot.send(quote_card)
    runs = await bot.served.delivered(f"dingtalk:{CORP}:staff_2")
    assert runs[0].thread_key == key + "msg_q1"
    # Rich text: "@Fathom" stays in the words; the quote is under its content.
    rich = bot.message(
        None,
        msg_id="msg_q5",
        group=True,
        rich_text=[{"text": "@Fathom "}, {"text": "and the tides? depth=1"}],
    )
    rich["content"]["repliedMsg"] = {"msgId": "msg_q2", "content": {"text": "…"}}
    await bot.send(rich)
    newest, *_ = await bot.delivered(4)
    assert newest.thread_key == key + "msg_q2"
    assert newest.topic == "and the tides?"
    # Quoting someone else's message is no follow-up.
    other = bot.message(
        "solar depth=1", msg_id="msg_q6", replied_to="", quoted_sender="staff_9", **group
    )
    await bot.send(other)
    newest, *_ = await bot.delivered(5)
    assert newest.thread_key == key + "msg_q6"


def test_a_quote_is_read_from_every_place_and_shape() -> None:
    from bots.dingtalk.events import quote_of

    fake = FakeDingTalk()
    top = bot_message(fake, "x", replied_to="m1")
    nested = bot_message(fake, "x", replied_to="m1", quote_under_text=True)
    as_string = bot_message(fake, "x")
    as_string["repliedMsg"] = json.dumps({"msgId": "m1", "content": "hello"})
    rich = bot_message(fake, "x")
    rich["text"] = {
        "content": "x",
        "isReplyMsg": True,
        "repliedMsg": {
            "msgId": "m1",
            "senderId": "bot_user_1",
            "content": {"richText": [{"text": "heat"}, {"type": "picture"}, {"text": "pumps"}]},
        },
    }
    for data in (top, nested, as_string, rich):
        quote = quote_of(data)
        assert quote is not None and quote.msg_id == "m1"
    rich_quote = quote_of(rich)
    assert rich_quote is not None and rich_quote.from_robot and rich_quote.text == "heat pumps"
    assert quote_of(bot_message(fake, "x")) is None
    for odd in ([], 5, "not json", {"content": [1]}):
        data = bot_message(fake, "x")
        data["repliedMsg"] = odd
        quote = quote_of(data)
        assert quote is None or quote.msg_id is None


def test_odd_rich_text_is_no_request_and_never_an_error() -> None:
    from bots.dingtalk.events import translate

    fake = FakeDingTalk()
    for rich in (None, [1], ["text"], {"a": 1}, [{"text": 5}], [{"text": "ok"}]):
        data = bot_message(fake, None, message_type="richText")
        data["content"] = {"richText": rich}
        request = translate(data)
        assert request is None or request.message.text in ("", "ok")


# -- the stream -------------------------------------------------------------------------------


async def test_the_stream_end_to_end_acknowledges_before_the_research_runs(
    dingtalk: DingTalkFactory, llm_server: FakeLLMServer
) -> None:
    bot = await dingtalk(mode="stream")
    await wait_for(lambda: bot.fake.stream_open == 1)
    ready = await wait_for(lambda: _stream_connected(bot.served))
    assert ready["platforms"]["dingtalk"]["mode"] == "stream"
    data = bot.message("/research heat pumps depth=2", group=True, msg_id="msg_s1")
    ack = await bot.push(data, message_id="stream-1")
    assert ack["code"] == 200
    assert len(await bot.served.runs(USER)) == 1  # recorded before the acknowledgement
    acked_at = bot.fake.acks["stream-1"][0]
    assert (await bot.push(data, message_id="stream-2"))["code"] == 200  # redelivered
    (run,) = await bot.delivered()
    first_llm_call = min(r.time for r in llm_server.fake.requests)
    assert acked_at < first_llm_call  # the research ran after the acknowledgement
    assert "Research done: 2/2 searches" in bot.card(run.id).params["markdown"]
    assert len(await bot.served.runs(USER)) == 1
    assert (await bot.send(data)).status_code == 404  # the callback route is closed here


async def test_a_dropped_stream_comes_back_and_is_shown_in_readyz(
    dingtalk: DingTalkFactory,
) -> None:
    bot = await dingtalk(mode="stream")
    await wait_for(lambda: _stream_connected(bot.served))
    bot.fake.drop_streams()
    await wait_for(lambda: bot.fake.stream_connections >= 2 and bot.fake.stream_open == 1)
    await wait_for(lambda: _stream_connected(bot.served))
    ack = await bot.push(bot.message("/research heat pumps depth=1", msg_id="msg_back"))
    assert ack["code"] == 200
    (run,) = await bot.delivered()
    assert run.status == "succeeded"


async def _stream_connected(served: ServedFathom) -> dict[str, Any] | None:
    ready = await served.readyz()
    stream = ready.get("platforms", {}).get("dingtalk", {})
    return ready if stream.get("state") == "connected" else None


def test_tables_become_lists_in_dingtalk_markdown() -> None:
    markdown = "## Costs\n\n| Item | Cost |\n|---|---|\n| pump | 10 |\n| pipe |  |\n\nAfter.\n"
    shown = tables_as_lists(markdown)
    assert "|" not in shown
    assert "- **Item**: pump; **Cost**: 10\n- **Item**: pipe" in shown
    assert shown.startswith("## Costs") and shown.rstrip().endswith("After.")


async def test_a_refused_stream_shows_why_and_is_retried(
    dingtalk_server: FakeDingTalkServer,
) -> None:
    from bots.dingtalk.stream import DingTalkStream

    async def never(data: dict[str, Any], message_id: str) -> None:
        raise AssertionError("no message can arrive on a refused stream")

    stream = DingTalkStream(
        CLIENT_ID,
        "wrong-secret",
        dingtalk_server.url,
        never,
        asyncio.get_running_loop(),
        dead_after=0.5,
        check_every=0.05,
    )
    await stream.start()
    try:
        # It keeps trying: a restart, and the replacement's own gateway request (which may
        # come a moment after the restart is counted).
        status = await wait_for(
            lambda: (
                stream.status()
                if stream.restarts >= 1 and len(dingtalk_server.fake.calls_to("gateway")) >= 2
                else None
            )
        )
        assert status["state"] != "connected"
        assert "gateway" in str(stream.status().get("last_error"))
    finally:
        await stream.close()
    assert stream.status()["state"] == "stopped"


async def test_a_digest_posts_through_the_openapi_with_its_heading(
    dingtalk: DingTalkFactory,
) -> None:
    from datetime import UTC, datetime

    from core.operations.digests import DigestService
    from storage import DigestStore

    bot = await dingtalk(FATHOM_STALE_RUN_AFTER="4")  # the sweep takes queued runs every 2 s
    text = '/research schedule "heat pumps" cron="0 9 * * MON" depth=1 tz=Asia/Shanghai'
    await bot.send(bot.message(text, group=True, msg_id="msg_sched"))
    answer = await wait_for(lambda: bot.fake.sent_to("cid_group_1"))
    assert "Scheduled **heat pumps**" in answer[0].text
    digests = DigestService(
        DigestStore(bot.served.database),
        bot.served.store.runs,
        min_interval=3600,
        grace=3600,
        max_per_channel=10,
    )
    (digest,) = await digests.digests.all()
    await digests.fire(digest, datetime(2026, 12, 7, 1, 0, tzinfo=UTC))
    (run,) = await bot.delivered()
    card = bot.card(run.id)
    assert card.open_space_id == "dtv1.card//IM_GROUP.cid_group_1"
    assert card.params["markdown"].startswith("### Digest: heat pumps — 2026-12-07")
    reports = bot.fake.sent_to("cid_group_1")[1:]  # after the "Scheduled" answer
    assert reports and all(r.via == "group" for r in reports)  # never the request's webhook


def test_a_progress_status_of_several_lines_keeps_its_lines() -> None:
    """A graph turn's status lists its sub-questions, one per line (Markdown hard breaks)."""
    status = "1/2th search executed.\n✓ heat pumps cost\n✗ heat pumps noise (its search failed)"
    text = progress_markdown("heat pumps", 2, status, language="en")
    assert text.endswith(
        "1/2th search executed.  \n✓ heat pumps cost  \n✗ heat pumps noise (its search failed)"
    )


async def test_a_dingtalk_research_never_calls_a_server_scoped_to_another_platform(
    dingtalk: DingTalkFactory, tmp_path: Path
) -> None:
    from tests.test_team_knowledge import calls_of, write_config

    calls = tmp_path / "calls.jsonl"
    config = write_config(tmp_path / "mcp.json", calls, ["feishu"])
    bot = await dingtalk(FATHOM_MCP_CONFIG=str(config))
    await bot.send(bot.message("/research pump failures depth=1", msg_id="msg_kb"))
    (run,) = await bot.delivered()
    assert run.status == "succeeded", run.error
    assert "(notes)" not in (run.report_markdown or "") and calls_of(calls) == []
    await bot.send(bot.message("/research pump failures sources=internal", msg_id="msg_kb2"))
    refused = await wait_for(lambda: [s for s in bot.fake.sent if "sources=internal" in s.text])
    assert "No internal source is available in this channel" in refused[0].text
    assert len(await bot.served.runs(USER)) == 1


async def test_a_dingtalk_research_cites_the_team_server_its_platform_may_use(
    dingtalk: DingTalkFactory, tmp_path: Path
) -> None:
    from tests.test_team_knowledge import calls_of, write_config

    calls = tmp_path / "calls.jsonl"
    config = write_config(tmp_path / "mcp.json", calls, ["dingtalk"])
    bot = await dingtalk(FATHOM_MCP_CONFIG=str(config))
    await bot.send(bot.message("/research pump failures sources=internal depth=1", msg_id="msg_k"))
    (run,) = await bot.delivered()
    assert run.status == "succeeded", run.error
    cited = "(notes)](https://wiki.example.internal/runbook)"
    assert cited in (run.report_markdown or "")
    assert any(cited in sent.text for sent in bot.fake.sent)  # what the chat received
    assert len(calls_of(calls)) == 1 and "Design notes (notes)" in (run.report_markdown or "")


# -- buttons ---------------------------------------------------------------------------------


def started_card(bot: DingTalkBot, run_id: str) -> FakeCard | None:
    """The run's progress card once its research runs (before, while the request waits in
    line, it carries Cancel only)."""
    card = bot.fake.cards.get(f"fathom_{run_id}")
    return card if card is not None and "fathom_stop" in card.button_ids else None


async def test_a_request_waiting_in_line_gets_its_card_at_once_with_its_place_and_cancel(
    dingtalk: DingTalkFactory, search_server: FakeSearchServer
) -> None:
    """One research at a time (FATHOM_MAX_CONCURRENT_RUNS=1) and one running: the next
    request gets its progress card at once, saying its place in line, with Cancel only;
    Cancel takes it out of the line and the card says so, without its button."""
    bot = await dingtalk(mode="stream", FATHOM_MAX_CONCURRENT_RUNS="1")
    await wait_for(lambda: _stream_connected(bot.served))
    search_server.fake.hold_pages()
    await bot.push(bot.message("/research tidal power depth=2", group=True, msg_id="msg_q1"))
    await wait_for(lambda: search_server.fake.page_requests)
    await bot.push(bot.message("/research wave power depth=1", group=True, msg_id="msg_q2"))
    runs = await bot.served.runs(USER)
    (waiting,) = [r for r in runs if r.topic == "wave power"]
    card = await wait_for(lambda: bot.fake.cards.get(f"fathom_{waiting.id}"))
    assert card.button_ids == ["fathom_cancel"]
    assert "Queued: 1st in line." in json.dumps(card.params, ensure_ascii=False)
    await bot.press(card_callback(card, "fathom_cancel"))
    (answer,) = await bot.told("staff_1", 1)
    assert answer.text.startswith("🛑 Cancelling “wave power”")
    await wait_for(lambda: "Research cancelled" in json.dumps(card.params) and not card.button_ids)
    search_server.fake.release_pages()
    first, second = sorted(await bot.delivered(2), key=lambda r: r.created_at)
    assert (first.status, second.status) == ("succeeded", "cancelled")


async def test_card_buttons_over_the_stream_stop_the_run_and_rate_the_report(
    dingtalk: DingTalkFactory, search_server: FakeSearchServer
) -> None:
    bot = await dingtalk(mode="stream")
    await wait_for(lambda: _stream_connected(bot.served))
    search_server.fake.hold_pages()
    await bot.push(bot.message("/research tidal power depth=5", group=True, msg_id="msg_b1"))
    [run] = await bot.served.runs(USER)
    card = await wait_for(lambda: started_card(bot, run.id))
    assert card.template_id == "1366a1eb-bc54-4859-ac88-517c56a9acb1.schema"
    assert card.button_ids == ["fathom_stop", "fathom_cancel"]
    await wait_for(lambda: search_server.fake.page_requests)

    other = await bot.press(card_callback(card, "fathom_stop", user="staff_9"))
    assert other["code"] == 200
    [refusal] = await bot.told("staff_9", 1)
    assert refusal.text.startswith("Only the person who started this research")
    assert (await bot.press(card_callback(card, "fathom_stop")))["code"] == 200
    [stopping] = await bot.told("staff_1", 1)
    assert "Stopping **tidal power**" in stopping.text or "Stopping “tidal power”" in stopping.text
    search_server.fake.release_pages()

    (done,) = await bot.delivered()
    assert (done.status, done.stop_requested) == ("succeeded", True)
    assert len(search_server.fake.queries) == 1
    assert card.button_ids == []  # the final state has no buttons
    assert "stopped early after 1 of 5 searches" in card.params["markdown"]
    feedback = bot.fake.cards[f"fathom_fb_{run.id}"]
    assert feedback.button_ids == ["fathom_up", "fathom_down"]
    assert feedback.open_space_id == card.open_space_id  # in the same conversation
    await bot.press(card_callback(feedback, "fathom_down"))
    await bot.press(card_callback(feedback, "fathom_up"))
    answers = await bot.told("staff_1", 3)
    assert [a.text for a in answers[1:]] == [
        "Thanks: your 👎 is recorded.",
        "Changed your rating to 👍.",
    ]
    [vote] = await bot.served.store.feedback.feedback_since()
    assert (vote.run_id, vote.voter, vote.value) == (run.id, USER, "up")


async def test_a_card_callback_of_no_run_or_another_organisation_changes_nothing(
    dingtalk: DingTalkFactory, search_server: FakeSearchServer
) -> None:
    bot = await dingtalk(mode="stream")
    await wait_for(lambda: _stream_connected(bot.served))
    search_server.fake.hold_pages()
    await bot.push(bot.message("/research wave power depth=5", msg_id="msg_b2"))
    [run] = await bot.served.runs(USER)
    card = await wait_for(lambda: bot.fake.cards.get(f"fathom_{run.id}"))
    foreign = card_callback(card, "fathom_cancel", corp="ding_other_corp")
    unknown = {**card_callback(card, "fathom_cancel"), "outTrackId": "fathom_" + "0" * 32}
    not_ours = {**card_callback(card, "fathom_cancel"), "outTrackId": "someone_elses_card"}
    for data in (foreign, unknown, not_ours):
        assert (await bot.press(data))["code"] == 200
    answers = await bot.told("staff_1", 2)  # a card that is not ours gets no answer
    assert {a.text for a in answers} == {
        "This button does not belong to a research here; nothing changed."
    }
    still = await bot.served.store.runs.get_run(run.id)
    assert still is not None and not still.cancel_requested
    search_server.fake.release_pages()
    (done,) = await bot.delivered()
    assert done.status == "succeeded"


async def test_cards_in_http_mode_carry_no_buttons(dingtalk: DingTalkFactory) -> None:
    """Card callbacks come over the stream: in HTTP mode the progress card is the plain
    Markdown card, and no feedback card follows (typed stop and cancel still work)."""
    bot = await dingtalk()
    await bot.send(bot.message("/research heat pumps depth=1", msg_id="msg_b3"))
    (run,) = await bot.delivered()
    assert bot.card(run.id).template_id == "589420e2-c1e2-46ef-a5ed-b8728e654da9.schema"
    assert bot.card(run.id).button_ids == [] and f"fathom_fb_{run.id}" not in bot.fake.cards


async def test_card_buttons_over_the_http_callback_cancel_the_run(
    dingtalk: DingTalkFactory, search_server: FakeSearchServer
) -> None:
    public = "https://fathom.example.com/dingtalk/card"
    bot = await dingtalk(DINGTALK_CARD_CALLBACK_URL=public)
    search_server.fake.hold_pages()
    await bot.send(bot.message("/research geothermal depth=5", group=True, msg_id="msg_h1"))
    [run] = await bot.served.runs(USER)
    card = await wait_for(lambda: started_card(bot, run.id))
    assert card.callback == "fathom" and card.button_ids == ["fathom_stop", "fathom_cancel"]
    address = bot.fake.card_routes["fathom"]
    assert address.startswith(f"{public}?key=")
    # DingTalk posts to the registered address (a proxy in front of this server).
    here = f"{bot.served.url}/dingtalk/card"
    body = json.dumps(card_callback(card, "fathom_cancel")).encode()
    for forged in (here, f"{here}?key=forged"):
        assert (await bot.served.http.post(forged, content=body)).status_code == 403
    key = address.split("?", 1)[1]
    assert (await bot.served.http.post(f"{here}?{key}", content=b"[1]")).status_code == 400
    pressed = await bot.served.http.post(f"{here}?{key}", content=body)
    assert pressed.status_code == 200
    [answer] = await bot.told("staff_1", 1)
    assert "Cancelling" in answer.text
    search_server.fake.release_pages()
    (done,) = await bot.delivered()
    assert done.status == "cancelled" and card.button_ids == []


async def test_card_buttons_wait_until_dingtalk_registers_the_callback_address(
    dingtalk_server: FakeDingTalkServer,
) -> None:
    """A refused registration leaves cards without buttons and is tried again a minute
    later, not for every card."""
    from bots.dingtalk.api import DingTalkApi
    from bots.dingtalk.callbacks import RETRY_EVERY, CardCallbacks

    now = [1000.0]
    async with httpx.AsyncClient() as http:
        api = DingTalkApi(
            http,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            api_url=dingtalk_server.url,
            robot_code=None,
        )
        callbacks = CardCallbacks(
            api,
            stream=False,
            url="https://fathom.example.com/dingtalk/card",
            client_secret=CLIENT_SECRET,
            clock=lambda: now[0],
        )
        dingtalk_server.fake.fail_next("card_route", status=503)
        assert not await callbacks.ready()
        now[0] += RETRY_EVERY / 2
        assert not await callbacks.ready()  # not asked again yet
        tries = [c for c in dingtalk_server.fake.calls if c.path.endswith("/callbacks/register")]
        assert len(tries) == 1
        now[0] += RETRY_EVERY
        assert await callbacks.ready() and await callbacks.ready()
        tries = [c for c in dingtalk_server.fake.calls if c.path.endswith("/callbacks/register")]
        assert len(tries) == 2  # registered once, then known
        assert dingtalk_server.fake.card_routes["fathom"] == callbacks.address
        assert callbacks.accepts(callbacks.key) and not callbacks.accepts("x" * 40)
