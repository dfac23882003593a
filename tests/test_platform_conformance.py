"""Every registered platform against one table, both ways (errbot's ``TestBackend`` idea).

Out: the same neutral steps of a run go in (progress events, the final state, the report's
parts, a notice) through the platform's own delivery factory and real client, and what the
platform's fake then shows in the run's thread is read back as neutral messages: one progress
message edited in place with each ``{i}/{depth}th search executed.`` and the run's buttons,
its final state without them, the report's parts in order after it with 👍/👎 on the last,
the notice. A platform that renders differently in ways a person would notice fails here.

In: the same neutral requests (said directly or in a group, with or without the bot's
mention, as a reply in a thread, by another bot, delivered twice, in Chinese) are written as
the platform's real payloads (the fakes' builders) and translated by the platform's own code;
each must give the same neutral ``ChatMessage``.

The chat layer's decisions (throttling, retries, redelivery, cancel) are tested once on the
in-memory platform (``test_chat_layer.py``), the platform's judgement of its failures in
``test_platform_errors.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import pytest

from bots.chat.announce import QueueAnnouncer
from bots.chat.controls import Control, control_of
from bots.chat.delivery import ChatDelivery
from bots.chat.message import ChatMessage
from bots.dingtalk.api import DingTalkApi
from bots.dingtalk.callbacks import CardCallbacks
from bots.dingtalk.delivery import DingTalkPosters
from bots.dingtalk.events import translate as dingtalk_translate
from bots.feishu.api import FeishuApi
from bots.feishu.delivery import FeishuPosters
from bots.feishu.events import translate as feishu_translate
from bots.platforms import PLATFORMS
from bots.slack.app import event_message, is_for_the_bot
from bots.slack.delivery import SlackPosters
from bots.slack.messenger import StaticSlackClients, make_web_client
from bots.teams.api import TeamsApi
from bots.teams.delivery import TeamsPosters
from bots.teams.events import translate as teams_translate
from core.engine.progress import ProgressEvent, ProgressKind, search_executed_text
from core.models import Source, Usage
from core.research.outcome import RunOutcome
from core.values import RunStatus, ThreadKey
from storage import RunRecord, Store
from tests.chat_app import wait_for
from tests.fakes import FakeSlackServer
from tests.fakes.dingtalk import CLIENT_SECRET as DINGTALK_SECRET
from tests.fakes.dingtalk import CORP, FakeDingTalk, FakeDingTalkServer, bot_message
from tests.fakes.dingtalk import _kind as dingtalk_kind
from tests.fakes.feishu import APP_ID, APP_SECRET, TENANT, FakeFeishuServer, message_event
from tests.fakes.feishu import BOT_OPEN_ID as FEISHU_BOT
from tests.fakes.slack import FakeSlack, app_mention_event, im_message_event
from tests.fakes.teams import APP_ID as TEAMS_ID
from tests.fakes.teams import APP_PASSWORD as TEAMS_PASSWORD
from tests.fakes.teams import BOT_ID as TEAMS_BOT
from tests.fakes.teams import TENANT as TEAMS_TENANT
from tests.fakes.teams import (
    FakeTeamsServer,
    channel_message,
    from_bot,
    new_activity_id,
    personal_message,
)

TOPIC = "heat pumps"
DEPTH = 2
REPORT = (
    "# Heat pumps\n\nHeat pumps move heat [1].\n\n## Main findings\n\n"
    + "They save energy in most climates [1]. " * 40
    + "\n\n## Sources\n\n- [1] [One](https://a.example/1)\n"
)
NOTICE = "A notice for the thread."


def new_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass
class Shown:
    """One of the bot's messages in the run's thread, as a person sees it over time."""

    versions: list[Any] = field(default_factory=list)  # each payload it showed, oldest first

    @property
    def text(self) -> str:
        """Every piece of text its last version shows."""
        return "\n".join(_strings(self.versions[-1]))

    def texts(self) -> list[str]:
        return ["\n".join(_strings(v)) for v in self.versions]

    @property
    def controls(self) -> set[Control]:
        """The buttons its last version carries."""
        return {c for s in _strings(self.versions[-1]) if (c := control_of(s)) is not None}


def _strings(value: Any) -> Iterator[str]:
    """Every string in a payload, JSON inside strings included (cards nest JSON as text)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
            try:
                yield from _strings(json.loads(stripped))
                return
            except ValueError:
                pass
        yield value


class Rig(Protocol):
    """A platform under the table: its fake, its factory, and the thread read back."""

    async def run(self, store: Store, topic: str = TOPIC) -> RunRecord: ...

    def factory(self, store: Store) -> Any: ...

    def shown(self, run: RunRecord) -> list[Shown]:
        """The bot's messages in the run's thread (the request itself excluded), in order."""
        ...


async def _create(
    store: Store, key: str, context: dict[str, str] | None = None, topic: str = TOPIC
) -> RunRecord:
    thread = ThreadKey.parse(key)
    run, _ = await store.runs.create_run(
        thread=thread,
        topic=topic,
        depth=DEPTH,
        strategy="iterative",
        requested_by=f"{thread.platform}:{thread.workspace}:U1",
        platform_context=context,
    )
    return run


class SlackRig:
    def __init__(self, server: FakeSlackServer) -> None:
        self.server = server
        self.client = make_web_client("xoxb-conformance", server.api_url)

    async def run(self, store: Store, topic: str = TOPIC) -> RunRecord:
        request = await self.client.chat_postMessage(channel="C0001", text=f"research {topic}")
        return await _create(store, f"slack:T0001:C0001:{request['ts']}", topic=topic)

    def factory(self, store: Store) -> SlackPosters:
        return SlackPosters(StaticSlackClients(self.client), store, edit_interval=0.0)

    def shown(self, run: RunRecord) -> list[Shown]:
        fake, thread = self.server.fake, run.thread_key.rsplit(":", 1)[1]
        shown = []
        for message in list(fake.history):
            if message.get("thread_ts") != thread or message["ts"] == thread:
                continue
            edits = [
                c.params
                for c in fake.calls_to("chat.update")
                if c.params.get("ts") == message["ts"]
            ]
            shown.append(Shown([message, *edits]))
        return shown


class FeishuRig:
    def __init__(self, server: FakeFeishuServer, api: FeishuApi) -> None:
        self.server, self.api = server, api

    async def run(self, store: Store, topic: str = TOPIC) -> RunRecord:
        content = json.dumps({"text": f"/research {topic}"})
        root = await self.api.create_message("oc_conformance", "text", content, uuid=new_id())
        return await _create(store, f"feishu:{TENANT}:oc_conformance:{root}", topic=topic)

    def factory(self, store: Store) -> FeishuPosters:
        return FeishuPosters(self.api, store, edit_interval=0.0)

    def shown(self, run: RunRecord) -> list[Shown]:
        root = run.thread_key.rsplit(":", 1)[1]
        return [Shown(list(m.versions) or [m.content]) for m in self.server.fake.thread(root)]


class DingTalkRig:
    def __init__(self, server: FakeDingTalkServer, api: DingTalkApi) -> None:
        self.server, self.api = server, api
        self.conversation = f"cid_{new_id()}"

    async def run(self, store: Store, topic: str = TOPIC) -> RunRecord:
        data = bot_message(
            self.server.fake, f"/research {topic}", group=True, conversation=self.conversation
        )
        request = dingtalk_translate(data)
        assert request is not None
        message = request.message
        key = f"dingtalk:{CORP}:{self.conversation}:{message.thread}"
        return await _create(store, key, message.context, topic=topic)

    def factory(self, store: Store) -> DingTalkPosters:
        # The stream brings presses back, so cards carry buttons.
        callbacks = CardCallbacks(self.api, stream=True, url=None, client_secret=DINGTALK_SECRET)
        return DingTalkPosters(self.api, store, edit_interval=0.0, callbacks=callbacks)

    def shown(self, run: RunRecord) -> list[Shown]:
        """Cards (with every version the fake keeps) and sent messages, in the order the
        calls that made them came."""
        fake = self.server.fake
        shown: list[Shown] = []
        for call in list(fake.calls):
            kind, body = dingtalk_kind(call.method, call.path), call.body
            track = str(body.get("outTrackId") or "")
            if kind == "card_create" and run.id in track and track in fake.cards:
                shown.append(Shown(list(fake.cards[track].versions)))
            elif kind == "group" and body.get("openConversationId") == self.conversation:
                shown.append(Shown([json.loads(str(body.get("msgParam") or "{}"))]))
            elif kind == "webhook":
                hook = call.path.rsplit("/", 1)[-1]
                if fake.webhooks.get(hook, ("", 0.0))[0] == self.conversation:
                    shown.append(Shown([body]))
        return shown


class TeamsRig:
    """A request in a channel; the run's messages are its reply chain."""

    channel = "19:conformance@thread.tacv2"

    def __init__(self, server: FakeTeamsServer, api: TeamsApi) -> None:
        self.server, self.api = server, api

    async def run(self, store: Store, topic: str = TOPIC) -> RunRecord:
        activity = channel_message(self.server.url, f"research {topic}", channel_id=self.channel)
        request = teams_translate(activity, TEAMS_BOT)
        assert request is not None
        message = request.message
        key = f"teams:{TEAMS_TENANT}:{message.channel}:{message.thread}"
        return await _create(store, key, message.context, topic=topic)

    def factory(self, store: Store) -> TeamsPosters:
        return TeamsPosters(self.api, store, None, edit_interval=0.0)

    def shown(self, run: RunRecord) -> list[Shown]:
        root = run.thread_key.rsplit(":", 1)[1]
        return [Shown(list(m.versions)) for m in self.server.fake.chain(self.channel, root)]


RIGS = ("slack", "feishu", "dingtalk", "teams")


def test_every_registered_platform_is_under_the_table() -> None:
    assert {platform.name for platform in PLATFORMS} == set(RIGS)


@pytest.fixture(params=RIGS)
async def rig(
    request: pytest.FixtureRequest,
    slack_server: FakeSlackServer,
    feishu_server: FakeFeishuServer,
    dingtalk_server: FakeDingTalkServer,
    dingtalk_api: DingTalkApi,
    teams_server: FakeTeamsServer,
) -> AsyncIterator[Rig]:
    if request.param == "slack":
        yield SlackRig(slack_server)
    elif request.param == "feishu":
        api = FeishuApi(APP_ID, APP_SECRET, feishu_server.url)
        try:
            yield FeishuRig(feishu_server, api)
        finally:
            await api.aclose()
    elif request.param == "dingtalk":
        yield DingTalkRig(dingtalk_server, dingtalk_api)
    else:
        async with httpx.AsyncClient(timeout=5.0) as http:
            api = TeamsApi(
                http,
                app_id=TEAMS_ID,
                app_password=TEAMS_PASSWORD,
                token_url=teams_server.token_url(),
            )
            yield TeamsRig(teams_server, api)


def _event(run: RunRecord, kind: ProgressKind, text: str, done: int) -> ProgressEvent:
    return ProgressEvent(run.id, kind, text, done, run.depth)


def _outcome(run: RunRecord) -> RunOutcome:
    return RunOutcome(
        run_id=run.id,
        thread=run.thread_key,
        status=RunStatus.SUCCEEDED,
        topic=TOPIC,
        depth=DEPTH,
        topics=["heat pumps efficiency", "heat pumps costs"],
        report_markdown=REPORT,
        sources=[Source(n=1, title="One", url="https://a.example/1")],
        usage=Usage(),
        seconds=1.0,
    )


async def _progress_of(rig: Rig, run: RunRecord) -> Shown:
    (progress,) = await wait_for(lambda: rig.shown(run)[:1])
    return progress


async def test_the_progress_is_one_message_edited_in_place_with_each_step_then_its_end(
    rig: Rig, store: Store
) -> None:
    run = await rig.run(store)
    delivery: ChatDelivery = await rig.factory(store).for_run(run)
    for done in range(1, DEPTH + 1):
        line = search_executed_text(done, DEPTH)
        await delivery.publish(_event(run, ProgressKind.SEARCHED, line, done))
        await wait_for(lambda line=line: line in (rig.shown(run) or [Shown([""])])[0].text)
        progress = await _progress_of(rig, run)
        assert progress.controls == {Control.STOP, Control.CANCEL}, progress.versions[-1]
    done_line = f"Research done: {DEPTH}/{DEPTH} searches, 1 sources."
    await delivery.publish(_event(run, ProgressKind.FINISHED, done_line, DEPTH))
    await delivery.aclose()
    (progress,) = rig.shown(run)  # one message: every step was an edit of it
    steps = [s for s in (search_executed_text(i, DEPTH) for i in (1, 2))]
    seen = [next(i for i, t in enumerate(progress.texts()) if s in t) for s in steps]
    assert seen == sorted(seen)  # each step shown, in order
    assert done_line in progress.text and not progress.controls  # the end has no buttons


async def test_the_report_follows_in_the_thread_in_order_with_votes_on_its_last_part(
    rig: Rig, store: Store
) -> None:
    run = await rig.run(store)
    delivery: ChatDelivery = await rig.factory(store).for_run(run)
    await delivery.publish(_event(run, ProgressKind.SEARCHED, search_executed_text(1, 2), 1))
    await _progress_of(rig, run)
    parts: Sequence[Any] = delivery.report_parts(_outcome(run))
    for part in parts:
        await delivery.post_report_part(part)
    await delivery.post_notice(NOTICE)
    await delivery.aclose()
    progress, *after = rig.shown(run)
    assert search_executed_text(1, 2) in progress.text  # the progress message comes first
    reports, notice = after[:-1], after[-1]
    text = "\n".join(r.text for r in reports)
    assert "Heat pumps move heat" in text and "a.example/1" in text
    assert text.index("Heat pumps move heat") < text.index("a.example/1")  # in order
    assert NOTICE in notice.text
    assert reports[-1].controls == {Control.UP, Control.DOWN}
    assert all(not r.controls for r in reports[:-1])


async def test_a_chinese_run_shows_its_steps_and_buttons_in_chinese_around_the_fixed_line(
    rig: Rig, store: Store
) -> None:
    run = await rig.run(store, topic="热泵的最新进展")
    delivery: ChatDelivery = await rig.factory(store).for_run(run)
    line = search_executed_text(1, DEPTH)
    await delivery.publish(_event(run, ProgressKind.SEARCHED, line, 1))
    progress = await _progress_of(rig, run)
    assert line in progress.text  # the contract's line is never translated
    assert "停止并撰写" in progress.text and "取消" in progress.text
    assert "Stop and write now" not in progress.text
    for part in delivery.report_parts(_outcome(run)):
        await delivery.post_report_part(part)
    await delivery.aclose()
    last = rig.shown(run)[-1]
    assert last.controls == {Control.UP, Control.DOWN} and "👍 有用" in last.text


async def test_a_run_waiting_in_line_is_announced_and_its_delivery_edits_that_message(
    rig: Rig, store: Store
) -> None:
    """A request accepted while its run waits in line gets the run's progress message at
    once (its place in line, a Cancel button and no Stop); the run's delivery, built later
    from the run as it was read before (another process), edits that same message."""
    run = await rig.run(store)
    read_before = await store.runs.get_run(run.id)
    assert read_before is not None
    announcer = QueueAnnouncer(rig.factory(store), store)
    marker = await announcer.reserve(run)
    assert marker is not None
    announcer.announce(run, marker)
    await announcer.aclose()
    queued = await _progress_of(rig, run)
    assert "Queued: 1st in line." in queued.text and queued.controls == {Control.CANCEL}
    delivery: ChatDelivery = await rig.factory(store).for_run(read_before)
    line = search_executed_text(1, DEPTH)
    await delivery.publish(_event(run, ProgressKind.SEARCHED, line, 1))
    await wait_for(lambda: line in (rig.shown(run) or [Shown([""])])[0].text)
    await delivery.post_status(f"Research done: 1/{DEPTH} searches, 1 sources.")
    await delivery.aclose()
    (progress,) = rig.shown(run)  # one message: announced, then edited
    assert "Queued: 1st in line." in progress.texts()[0]
    assert "Research done" in progress.text and not progress.controls


# -- in: the same requests, written on each platform, make the same neutral message --------


@dataclass(frozen=True)
class Said:
    """What a person did, in neutral words."""

    text: str
    where: str = "group"  # "group" (a channel, a group chat) or "direct" (with the bot alone)
    mention: bool = True  # the bot is @-mentioned (the platform's own mention markup)
    reply_to: str | None = None  # a reply in the thread of this message
    by_bot: bool = False  # another bot wrote it


class Inbound(Protocol):
    """A platform's delivery of what was said (its real payload shape, from the fakes'
    builders) translated by the platform's own code; None when it is not for the bot."""

    threads: bool  # the platform has reply threads

    def message_id(self, delivery: str) -> str:
        """The platform's id of the message of ``delivery`` (what a thread is named by)."""
        ...

    def say(self, said: Said, delivery: str) -> ChatMessage | None: ...


class SlackInbound:
    threads = True

    def message_id(self, delivery: str) -> str:
        return f"1700000000.{int(delivery, 16) % 10**6:06d}"

    def say(self, said: Said, delivery: str) -> ChatMessage | None:
        ts = self.message_id(delivery)
        if said.where == "direct":
            event = im_message_event(said.text, ts=ts, thread_ts=said.reply_to)
        elif said.mention:
            event = app_mention_event(said.text, ts=ts, thread_ts=said.reply_to)
        else:
            event = {**im_message_event(said.text, ts=ts), "channel": "C0001"}
            event["channel_type"] = "channel"
        if said.by_bot:
            event = {**event, "user": "UOTHERBOT", "bot_id": "BOTHER"}
        body = {"event_id": f"Ev{delivery}", "team_id": FakeSlack.team_id}
        if not is_for_the_bot(event, FakeSlack.bot_user_id):
            return None
        return event_message(event, body, team=FakeSlack.team_id, bot_user_id=FakeSlack.bot_user_id)


class FeishuInbound:
    threads = True

    def message_id(self, delivery: str) -> str:
        return f"om_{delivery}"

    def say(self, said: Said, delivery: str) -> ChatMessage | None:
        payload = message_event(
            said.text,
            chat_type="p2p" if said.where == "direct" else "group",
            mention_bot=said.mention and said.where == "group",
            message_id=self.message_id(delivery),
            event_id=f"ev_{delivery}",
            root_id=said.reply_to or "",
            sender_type="app" if said.by_bot else "user",
        )
        request = feishu_translate(payload, FEISHU_BOT)
        return None if request is None else request.message


class DingTalkInbound:
    threads = False  # a quote-reply continues a research (the app's follow-up, not here)

    def __init__(self) -> None:
        self.fake = FakeDingTalk()

    def message_id(self, delivery: str) -> str:
        return f"msg{delivery}"

    def say(self, said: Said, delivery: str) -> ChatMessage | None:
        if said.by_bot:
            return None  # DingTalk delivers people's messages to a robot only
        data = bot_message(
            self.fake,
            said.text,
            group=said.where == "group",
            at_bot=said.mention,
            msg_id=self.message_id(delivery),
        )
        request = dingtalk_translate(data)
        return None if request is None else request.message


class TeamsInbound:
    threads = True  # a channel's reply chains

    url = "http://127.0.0.1:9"  # where the activities' serviceUrl points (never called)

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def message_id(self, delivery: str) -> str:
        return self.ids.setdefault(delivery, new_activity_id())

    def say(self, said: Said, delivery: str) -> ChatMessage | None:
        activity_id = self.message_id(delivery)
        if said.by_bot:
            activity = from_bot(self.url, said.text, activity_id=activity_id)
        elif said.where == "direct":
            activity = personal_message(self.url, said.text, activity_id=activity_id)
        else:
            activity = channel_message(
                self.url,
                said.text,
                mention=said.mention,
                activity_id=activity_id,
                root_id=said.reply_to,
            )
        request = teams_translate(activity, TEAMS_BOT)
        return None if request is None else request.message


INBOUND: dict[str, Callable[[], Inbound]] = {
    "slack": SlackInbound,
    "feishu": FeishuInbound,
    "dingtalk": DingTalkInbound,
    "teams": TeamsInbound,
}


def test_every_registered_platform_is_under_the_inbound_table() -> None:
    assert {platform.name for platform in PLATFORMS} == set(INBOUND)


@pytest.fixture(params=sorted(INBOUND))
def inbound(request: pytest.FixtureRequest) -> Inbound:
    return INBOUND[request.param]()


def _addressed(message: ChatMessage | None) -> ChatMessage:
    assert message is not None and message.addressed, message
    return message


@pytest.mark.parametrize("where", ["direct", "group"])
def test_a_request_becomes_its_words_in_its_own_thread(inbound: Inbound, where: str) -> None:
    message = _addressed(inbound.say(Said("heat pumps depth=2", where=where), "a1"))
    assert message.text == "heat pumps depth=2"  # the bot's mention is gone
    assert not message.in_thread and message.thread == inbound.message_id("a1")  # its own
    assert message.user and message.workspace and message.channel


def test_a_group_message_without_the_mention_starts_nothing(inbound: Inbound) -> None:
    message = inbound.say(Said("heat pumps depth=2", mention=False), "a2")
    assert message is None or not message.addressed


def test_another_bots_message_starts_nothing(inbound: Inbound) -> None:
    assert inbound.say(Said("heat pumps depth=2", by_bot=True), "a3") is None


def test_a_redelivery_has_the_same_identity_and_another_request_another(
    inbound: Inbound,
) -> None:
    first = _addressed(inbound.say(Said("heat pumps"), "b1"))
    again = _addressed(inbound.say(Said("heat pumps"), "b1"))
    other = _addressed(inbound.say(Said("heat pumps"), "b2"))
    assert first.dedupe_key == again.dedupe_key != other.dedupe_key


@pytest.mark.parametrize("name", sorted(n for n, made in INBOUND.items() if made().threads))
def test_a_reply_in_a_thread_belongs_to_that_thread(name: str) -> None:
    """(DingTalk has no reply threads: a quote continues a research, in the app.)"""
    inbound = INBOUND[name]()
    root = inbound.message_id("ff")
    message = _addressed(inbound.say(Said("what about costs?", reply_to=root), "c1"))
    assert message.in_thread and message.thread == root
    assert message.text == "what about costs?"


def test_chinese_words_arrive_as_written_and_are_answered_in_chinese(inbound: Inbound) -> None:
    message = _addressed(inbound.say(Said("热泵的最新进展 depth=2"), "d1"))
    assert message.text == "热泵的最新进展 depth=2" and message.lang == "zh"
