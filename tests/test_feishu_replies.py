"""Feishu/Lark: replies in a research's thread that do not @-mention the bot.

With the ``im:message.group_msg`` scope ("获取群组中所有消息") Feishu delivers every group
message as ``im.message.receive_v1``; a reply in a topic carries ``root_id`` (the topic's first
message), ``parent_id`` and ``thread_id`` (Feishu's "消息管理概述": inside a topic every reply
answers the root; the SDK's ``EventMessage`` has the three fields). Such a reply in the
thread of a research steers it, and ``stop``, ``cancel`` and ``status`` typed there work;
anything else in the group stays unread. Whether the app holds the scope is asked of Feishu's
scope-status API (``GET /open-apis/application/v6/scopes``, "查询租户授权状态": ``grant_status``
1 granted, 2 not), or told by ``FATHOM_FEISHU_GROUP_MESSAGES``: without it the progress card
says to mention the bot, and the start-up line says which scope turns plain replies on.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.chat_app import wait_for
from tests.conftest import ServeFathom
from tests.fakes import FakeSearchServer
from tests.fakes.feishu import (
    APP_ID,
    APP_SECRET,
    GROUP_MESSAGES_SCOPE,
    TENANT,
    FakeFeishuServer,
    FeishuMessage,
    file_event,
    message_event,
)
from tests.test_feishu import KEY, TOKEN, USER, FeishuBot, FeishuFactory, card_texts

MENTION_HINT = "mention me in a reply in this thread"
MENTION_HINT_ZH = "请在本话题的回复中 @我"


@pytest.fixture
async def feishu(serve_fathom: ServeFathom, feishu_server: FakeFeishuServer) -> FeishuFactory:
    """``await feishu(**env)``: Fathom served with Feishu alone, in webhook mode."""

    async def start(**env: str) -> FeishuBot:
        served = await serve_fathom(
            FEISHU_APP_ID=APP_ID,
            FEISHU_APP_SECRET=APP_SECRET,
            FEISHU_VERIFICATION_TOKEN=TOKEN,
            FEISHU_ENCRYPT_KEY=KEY,
            FEISHU_DOMAIN=feishu_server.url,
            FEISHU_MODE="webhook",
            FATHOM_FEISHU_EDIT_INTERVAL="0.05",
            **env,
        )
        return FeishuBot(served, feishu_server.fake)

    return start


async def _research(bot: FeishuBot, topic: str, root: str) -> FeishuMessage:
    """A research asked with the bot's mention in a group; its progress card once posted."""
    asked = message_event(
        f"/research {topic} depth=3",
        chat_type="group",
        mention_bot=True,
        token=TOKEN,
        message_id=root,
    )
    assert (await bot.send(asked)).status_code == 200
    (card,) = await wait_for(lambda: [m for m in bot.thread(root) if m.uuid.endswith(":progress")])
    return card


def _reply(
    text: str, root: str, parent: str, message_id: str, sender: str = "ou_user_1"
) -> dict[str, Any]:
    """A reply without the bot's mention inside the topic of ``root``, answering ``parent``
    (the progress card), as Feishu delivers it with ``im:message.group_msg``."""
    return message_event(
        text,
        chat_type="group",
        root_id=root,
        parent_id=parent,
        thread_id=f"omt_{root}",
        token=TOKEN,
        message_id=message_id,
        sender=sender,
    )


async def _answer_to(bot: FeishuBot, message_id: str) -> str:
    """The text of the bot's answer to the message ``message_id`` (a reply to it)."""
    (answer,) = await wait_for(
        lambda: [m for m in bot.fake.messages.values() if m.parent_id == message_id]
    )
    return answer.markdown


async def _seen(bot: FeishuBot, message_id: str) -> bool:
    return await bot.served.store.events.events_seen([f"feishu:msg:{TENANT}:{message_id}"])


async def test_a_plain_reply_in_a_running_researchs_thread_steers_it_and_stop_status_work(
    feishu: FeishuFactory, feishu_server: FakeFeishuServer, search_server: FakeSearchServer
) -> None:
    """Replies without a mention in the research's topic: guidance is kept and noted,
    ``status`` is answered, ``stop`` stops the research (its report follows). A group message
    outside any thread and a reply in another topic are dropped unread (nothing recorded)."""
    feishu_server.fake.scopes[GROUP_MESSAGES_SCOPE] = True
    bot = await feishu()
    search_server.fake.hold_pages()
    card = await _research(bot, "deep sea mining", "om_root")
    chatter = message_event("lunch anyone?", chat_type="group", token=TOKEN, message_id="om_chat")
    elsewhere = _reply("nice", "om_other", "om_other", "om_else")
    for event in (chatter, elsewhere):
        assert (await bot.send(event)).status_code == 200
    await bot.send(_reply("focus on the Pacific", "om_root", card.message_id, "om_steer"))
    assert (await _answer_to(bot, "om_steer")).startswith("Noted")
    await bot.send(_reply("status", "om_root", card.message_id, "om_status"))
    assert "deep sea mining" in await _answer_to(bot, "om_status")
    await bot.send(_reply("stop", "om_root", card.message_id, "om_stop"))
    assert "Stopping “deep sea mining”" in await _answer_to(bot, "om_stop")
    search_server.fake.release_pages()
    (run,) = await bot.delivered()
    assert run.status == "succeeded" and run.stop_requested
    thread = await bot.served.store.threads.get_thread(run.thread_key)
    assert thread is not None
    variables = await bot.served.store.threads.load_variables(thread.id)
    assert variables is not None
    assert [g["text"] for g in variables["guidance"]] == ["focus on the Pacific"]
    assert not await _seen(bot, "om_chat") and not await _seen(bot, "om_else")
    answered = {m.parent_id for m in bot.fake.messages.values()}
    assert not answered & {"om_chat", "om_else"}


async def test_a_file_posted_in_a_running_researchs_thread_is_answered_not_kept_silently(
    feishu: FeishuFactory, feishu_server: FakeFeishuServer, search_server: FakeSearchServer
) -> None:
    """A file message (no words, no mention: a file cannot mention anyone) posted in the
    thread of a running research: the research reads only the files of its own request, so
    the answer says the file waits for the next request there instead of saying nothing."""
    feishu_server.fake.scopes[GROUP_MESSAGES_SCOPE] = True
    bot = await feishu()
    search_server.fake.hold_pages()
    card = await _research(bot, "deep sea mining", "om_froot")
    posted = file_event(
        "file_v3_spec",
        "spec.pdf",
        chat_type="group",
        root_id="om_froot",
        parent_id=card.message_id,
        thread_id="omt_om_froot",
        token=TOKEN,
        message_id="om_ffile",
    )
    assert (await bot.send(posted)).status_code == 200
    answer = await _answer_to(bot, "om_ffile")
    assert answer.startswith("📎 Got spec.pdf. The research running here does not read it")
    search_server.fake.release_pages()
    (run,) = await bot.delivered()
    assert run.attachments_read == 0


async def test_a_plain_cancel_is_the_requesters_and_a_late_one_is_answered(
    feishu: FeishuFactory, feishu_server: FakeFeishuServer, search_server: FakeSearchServer
) -> None:
    """``cancel`` typed without a mention follows the buttons' rule: another member is told
    who may cancel and the research goes on; the requester's cancels it. Once it has ended, a
    typed ``stop`` in its thread is still answered (nothing runs there), while other words
    there are not."""
    feishu_server.fake.scopes[GROUP_MESSAGES_SCOPE] = True
    bot = await feishu()
    search_server.fake.hold_pages()
    card = await _research(bot, "tidal power", "om_r2")
    await bot.send(_reply("cancel", "om_r2", card.message_id, "om_c1", sender="ou_bob"))
    assert "Only the person who started this research" in await _answer_to(bot, "om_c1")
    [running] = await bot.served.runs(USER)
    assert not running.status.finished and not running.cancel_requested
    await bot.send(_reply("cancel", "om_r2", card.message_id, "om_c2"))
    assert "Cancelling “tidal power”" in await _answer_to(bot, "om_c2")
    search_server.fake.release_pages()
    (run,) = await bot.delivered()
    assert run.status == "cancelled"
    await bot.send(_reply("stop", "om_r2", card.message_id, "om_late"))
    assert "Nothing is running in this thread" in await _answer_to(bot, "om_late")
    await bot.send(_reply("thanks!", "om_r2", card.message_id, "om_thanks"))
    assert not await _seen(bot, "om_thanks")


@pytest.mark.parametrize(
    ("granted", "setting", "hinted"),
    [
        (False, None, True),
        (True, None, False),
        (False, "true", False),  # the operator says it is granted (the API may not say)
        (True, "false", True),
    ],
)
async def test_the_card_says_to_mention_the_bot_unless_plain_replies_reach_it(
    feishu: FeishuFactory,
    feishu_server: FakeFeishuServer,
    search_server: FakeSearchServer,
    caplog: pytest.LogCaptureFixture,
    granted: bool,
    setting: str | None,
    hinted: bool,
) -> None:
    """Without ``im:message.group_msg`` Feishu never delivers a reply that does not mention
    the bot: while the research runs, its progress card says to mention the bot (in the
    card's language); its final state does not. The start-up line names the scope."""
    caplog.set_level(logging.INFO, logger="bots.feishu")
    bot_env = {} if setting is None else {"FATHOM_FEISHU_GROUP_MESSAGES": setting}
    feishu_server.fake.scopes[GROUP_MESSAGES_SCOPE] = granted  # as Feishu says at start
    bot = await feishu(**bot_env)
    search_server.fake.hold_pages()
    card = await _research(bot, "海上风电", "om_h1")
    await wait_for(lambda: any("search" in t or "搜索" in t for t in card_texts(card)))
    running = card_texts(card)[-1]
    search_server.fake.release_pages()
    await bot.delivered()
    assert (MENTION_HINT_ZH in running) is hinted, running
    assert MENTION_HINT_ZH not in card_texts(card)[-1]  # the final state: no buttons, no hint
    lines = [r.getMessage() for r in caplog.records if GROUP_MESSAGES_SCOPE in r.getMessage()]
    assert lines, "the start-up line names the scope"
    heard = "plain replies in research threads are heard"
    assert any(heard in line for line in lines) is not hinted


async def test_a_private_chats_card_has_no_mention_hint(
    feishu: FeishuFactory, search_server: FakeSearchServer
) -> None:
    """In a private chat every message reaches the bot: no hint, whatever the scopes."""
    bot = await feishu()
    search_server.fake.hold_pages()
    asked = message_event("/research solar sails depth=2", token=TOKEN, message_id="om_p2p")
    await bot.send(asked)
    (card,) = await wait_for(
        lambda: [m for m in bot.thread("om_p2p") if m.uuid.endswith(":progress")]
    )
    await wait_for(lambda: any("search" in t for t in card_texts(card)))
    search_server.fake.release_pages()
    await bot.delivered()
    assert not any(MENTION_HINT in t for t in card_texts(card))


async def test_the_scope_is_asked_again_after_a_while_and_a_failed_ask_changes_nothing(
    feishu_server: FakeFeishuServer,
) -> None:
    """The scope-status API through the real SDK client: a scope with ``grant_status`` 2 is
    not held; a grant is seen at the next ask (at most every ``CHECK_EVERY`` seconds, never
    on every run); a failed ask (HTTP 500) keeps what was known and says why; the setting,
    when given, is never second-guessed."""
    from bots.feishu.api import FeishuApi
    from bots.feishu.scopes import CHECK_EVERY, GroupMessages
    from tests.timers import ManualTimer

    api = FeishuApi(APP_ID, APP_SECRET, feishu_server.url)
    timer = ManualTimer()
    try:
        feishu_server.fake.scopes[GROUP_MESSAGES_SCOPE] = False  # listed, not granted
        group = GroupMessages(api.granted_scopes, None, timer=timer)
        assert group.known is None and not group.heard
        await group.refresh()
        assert group.known is False
        feishu_server.fake.scopes[GROUP_MESSAGES_SCOPE] = True  # an admin approves it
        await group.refresh()
        assert group.known is False  # not asked again yet
        timer.advance(CHECK_EVERY)
        await group.refresh()
        assert group.heard
        feishu_server.fake.fail_next("scopes", 500)
        timer.advance(CHECK_EVERY)
        await group.refresh()
        assert group.heard and "HTTP 500" in group.failure
        assert len(feishu_server.fake.calls_to("scopes")) == 3
        told = GroupMessages(api.granted_scopes, False, timer=timer)
        timer.advance(CHECK_EVERY)
        await told.refresh()
        assert told.known is False and len(feishu_server.fake.calls_to("scopes")) == 3
        assert "FATHOM_FEISHU_GROUP_MESSAGES" in told.start_up_line()
    finally:
        await api.aclose()
