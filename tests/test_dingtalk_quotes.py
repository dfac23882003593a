"""DingTalk: a control word that quotes a research acts on that research, and on no other.

DingTalk robots have no threads: a user points at a research by quoting (replying to) its
request or one of Fathom's messages about it. The quote arrives as ``repliedMsg`` beside
``isReplyMsg`` in the robot message (the shape public integrations receive; see
``bots.dingtalk.events.quote_of``): with the quoted message's ``msgId`` for a user's message,
and for one of the robot's own messages (whose ids DingTalk does not give the robot when it
sends) its sender and the text it shows. ``stop`` or ``cancel`` in such a message follows the
buttons' rule (the requester or an admin; anyone else is told who may); a quote that ties to
no research here is answered so, and never falls back to the sender's newest research.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storage import RunRecord
from tests.chat_app import wait_for
from tests.conftest import ServeFathom
from tests.fakes import FakeSearchServer
from tests.fakes.dingtalk import CLIENT_ID, CLIENT_SECRET, FakeDingTalkServer
from tests.test_dingtalk import USER, DingTalkBot, DingTalkFactory

GROUP = "cid_group_1"
ONLY_STARTER = "Only the person who started this research (or an admin) can stop it."
UNTIED = "I can't tell which research here the quoted message belongs to"


@pytest.fixture
async def dingtalk(
    serve_fathom: ServeFathom, dingtalk_server: FakeDingTalkServer
) -> AsyncIterator[DingTalkFactory]:
    """``await dingtalk(**env)``: Fathom served with DingTalk alone, in HTTP mode."""

    async def start(**env: str) -> DingTalkBot:
        served = await serve_fathom(
            DINGTALK_CLIENT_ID=CLIENT_ID,
            DINGTALK_CLIENT_SECRET=CLIENT_SECRET,
            DINGTALK_API_URL=dingtalk_server.url,
            DINGTALK_MODE="http",
            FATHOM_DINGTALK_EDIT_INTERVAL="0.05",
            FATHOM_DELIVERY_BACKOFF="0.05",
            **env,
        )
        return DingTalkBot(served, dingtalk_server.fake)

    yield start


async def _answered(bot: DingTalkBot, before: int) -> str:
    """The next answer posted in the group after the first ``before`` messages there."""
    sent = await wait_for(lambda: len(found := bot.fake.sent_to(GROUP)) > before and found)
    return str(sent[before].text)


async def _state(bot: DingTalkBot, run_id: str) -> tuple[bool, bool]:
    run = await bot.served.store.runs.get_run(run_id)
    assert run is not None
    return run.stop_requested, run.cancel_requested


async def test_a_quoted_stop_or_cancel_acts_on_the_quoted_research_and_no_other(
    dingtalk: DingTalkFactory, search_server: FakeSearchServer
) -> None:
    """One user's two researches run in a group (X older, Y newer). Another member quoting
    X's request with ``stop`` is told who may stop it; the requester quoting something that
    ties to no research is told so (today's rule would have stopped Y, the newest); the
    requester quoting X's request stops X and not Y; an admin quoting Fathom's progress card
    of Y (the robot's message, no id the robot knows) cancels Y and not X."""
    bot = await dingtalk(FATHOM_ADMINS="staff_9")
    search_server.fake.hold_pages()
    group = {"group": True}
    await bot.send(bot.message("/research tidal power depth=5", msg_id="msg_x", **group))
    await bot.send(bot.message("/research wave power depth=5", msg_id="msg_y", **group))
    runs = await wait_for(lambda: _two(bot))
    y, x = runs  # newest first
    await wait_for(lambda: search_server.fake.page_requests)
    seen = len(bot.fake.sent_to(GROUP))

    other = bot.message(
        "stop", msg_id="msg_s1", replied_to="msg_x", sender_staff_id="staff_2", **group
    )
    await bot.send(other)
    assert await _answered(bot, seen) == ONLY_STARTER
    seen += 1
    assert await _state(bot, x.id) == (False, False) == await _state(bot, y.id)

    chatter = bot.message(
        "stop", msg_id="msg_s2", replied_to="msg_lunch", quoted_sender="staff_5", **group
    )
    await bot.send(chatter)
    assert (await _answered(bot, seen)).startswith(UNTIED)
    seen += 1
    assert await _state(bot, x.id) == (False, False) == await _state(bot, y.id)

    await bot.send(bot.message("stop", msg_id="msg_s3", replied_to="msg_x", **group))
    assert "Stopping “tidal power”" in await _answered(bot, seen)
    seen += 1
    assert await _state(bot, x.id) == (True, False)
    assert await _state(bot, y.id) == (False, False)

    card_of_y = bot.message(
        "cancel",
        msg_id="msg_s4",
        replied_to="",
        quoted_sender="bot_user_1",
        quoted_text="Researching **wave power** (depth 5) 1/5th search executed.",
        sender_staff_id="staff_9",
        quote_under_text=True,
        **group,
    )
    await bot.send(card_of_y)
    assert "Cancelling “wave power”" in await _answered(bot, seen)
    assert (await _state(bot, y.id))[1] and not (await _state(bot, x.id))[1]

    search_server.fake.release_pages()
    done = {r.id: r.status for r in await bot.delivered(2)}
    assert done == {x.id: "succeeded", y.id: "cancelled"}


async def _two(bot: DingTalkBot) -> list[RunRecord] | None:
    return await _count(bot, 2)


async def test_a_quoted_stop_of_an_ended_research_says_so_and_an_unquoted_one_is_unchanged(
    dingtalk: DingTalkFactory, search_server: FakeSearchServer
) -> None:
    """Quoting a research that has ended: "That research has already finished.", even while
    another of the user's researches runs (which it leaves alone). Fathom's message whose
    text shows two researches' topics equally (the same topic asked twice) ties to neither.
    An unquoted ``stop`` still means the sender's newest research in the conversation."""
    bot = await dingtalk()
    group = {"group": True}
    await bot.send(bot.message("/research geothermal depth=1", msg_id="msg_e1", **group))
    await bot.delivered()
    search_server.fake.hold_pages()
    await bot.send(bot.message("/research geothermal depth=5", msg_id="msg_e2", **group))
    running = await wait_for(lambda: _two(bot))
    newest = running[0]
    await wait_for(lambda: search_server.fake.page_requests)
    seen = len(bot.fake.sent_to(GROUP))

    await bot.send(bot.message("cancel", msg_id="msg_e3", replied_to="msg_e1", **group))
    assert await _answered(bot, seen) == "That research has already finished."
    seen += 1
    same_topic = bot.message(
        "stop",
        msg_id="msg_e4",
        replied_to="",
        quoted_sender="bot_user_1",
        quoted_text="Researching **geothermal** (depth 5)",
        **group,
    )
    await bot.send(same_topic)
    assert (await _answered(bot, seen)).startswith(UNTIED)
    seen += 1
    assert await _state(bot, newest.id) == (False, False)

    await bot.send(bot.message("stop", msg_id="msg_e5", **group))
    assert "Stopping “geothermal”" in await _answered(bot, seen)
    assert await _state(bot, newest.id) == (True, False)
    search_server.fake.release_pages()
    await bot.delivered(2)


async def test_a_quoted_stop_of_a_follow_up_request_stops_that_follow_up(
    dingtalk: DingTalkFactory, search_server: FakeSearchServer
) -> None:
    """A follow-up's request (itself a quote of the first request) lives in the first one's
    thread: quoting it with ``stop`` stops that follow-up, not the user's newer research."""
    bot = await dingtalk()
    group = {"group": True}
    await bot.send(bot.message("/research heat pumps depth=1", msg_id="msg_f1", **group))
    await bot.delivered()
    search_server.fake.hold_pages()
    await bot.send(
        bot.message("and the costs? depth=5", msg_id="msg_f2", replied_to="msg_f1", **group)
    )
    await bot.send(bot.message("/research solar sails depth=5", msg_id="msg_f3", **group))
    runs = await wait_for(lambda: _count(bot, 3))
    newest, follow_up = runs[0], runs[1]
    assert follow_up.thread_key.endswith(":msg_f1") and newest.thread_key.endswith(":msg_f3")
    await wait_for(lambda: len(search_server.fake.page_requests) >= 2)
    seen = len(bot.fake.sent_to(GROUP))
    await bot.send(bot.message("stop", msg_id="msg_f4", replied_to="msg_f2", **group))
    assert "Stopping “and the costs?”" in await _answered(bot, seen)
    assert await _state(bot, follow_up.id) == (True, False)
    assert await _state(bot, newest.id) == (False, False)
    search_server.fake.release_pages()
    await bot.delivered(3)


async def _count(bot: DingTalkBot, count: int) -> list[RunRecord] | None:
    runs = await bot.served.runs(USER)
    return runs if len(runs) == count else None
