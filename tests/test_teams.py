"""Microsoft Teams end to end: the real ``fathom serve`` against a fake Bot Framework on
127.0.0.1 (its OpenID metadata with a real signing key, the identity platform's token
endpoint, the Bot Connector), with activities built and signed as Teams sends them.

What the shared chat layer guarantees is proven in test_chat_layer.py and the rendering in
test_platform_conformance.py; here: the token check, translation, the card and its buttons,
reply chains, personal chats, files, stored conversation references, digests, replicas.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from bots.teams.api import TeamsApi
from bots.teams.auth import KEYS_FOR, REFETCH_AFTER, ActivityAuth, Unauthenticated
from bots.teams.events import encode_conversation
from bots.teams.render import report_parts
from core.models import Source
from tests.chat_app import ServedFathom, wait_for
from tests.conftest import ServeFathom
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.fakes.teams import (
    AAD_ID,
    APP_ID,
    APP_PASSWORD,
    BOT_ID,
    CHANNEL_ID,
    GROUP_CHAT,
    MAX_ACTIVITY_BYTES,
    PERSONAL_CHAT,
    TEAM_ID,
    TENANT,
    USER_NAME,
    FakeTeams,
    FakeTeamsServer,
    Posted,
    action_invoke,
    channel_message,
    conversation_update_bot_removed,
    from_bot,
    group_chat_message,
    installation_update,
    personal_message,
    sign,
)

USER = f"teams:{TENANT}:{AAD_ID}"
OTHER_AAD = "00000000-0000-0000-0000-0000000000b2"
LINES = ["1/3th search executed.", "2/3th search executed.", "3/3th search executed."]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def shown(body: dict[str, Any]) -> str:
    """What a person reads in one version of a message: its text and its cards' text runs."""
    cards = [a.get("content") for a in body.get("attachments") or []]
    runs = [
        inline.get("text", "")
        for card in cards
        if isinstance(card, dict)
        for block in card.get("body", [])
        for inline in block.get("inlines", [])
    ]
    return "\n".join([str(body.get("text") or ""), *runs])


def verbs(body: dict[str, Any]) -> list[str]:
    """The verbs of the buttons on one version of a message."""
    return [
        str(action.get("verb"))
        for a in body.get("attachments") or []
        for action in (a.get("content") or {}).get("actions", [])
    ]


@dataclass
class TeamsBot:
    served: ServedFathom
    server: FakeTeamsServer

    @property
    def fake(self) -> FakeTeams:
        return self.server.fake

    @property
    def url(self) -> str:
        return self.server.url

    async def send(
        self, activity: dict[str, Any], authorization: str | None = None
    ) -> httpx.Response:
        """``activity`` as the Bot Connector delivers it (signed, unless ``authorization``)."""
        return await self.served.http.post(
            f"{self.served.url}/teams/messages",
            content=json.dumps(activity).encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": sign(activity) if authorization is None else authorization,
            },
        )

    async def press(self, card: Posted, verb: str, asked: dict[str, Any], **who: Any) -> str:
        """A press on ``card``'s button ``verb`` (in the conversation of the request
        ``asked``); the text Teams shows the presser."""
        (data,) = [
            action["data"]
            for a in card.body.get("attachments") or []
            for action in a["content"].get("actions", [])
            if action["verb"] == verb
        ]
        invoke = action_invoke(
            self.url,
            verb=verb,
            data=data,
            reply_to_id=card.id,
            conversation=asked["conversation"],
            **who,
        )
        response = await self.send(invoke)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["statusCode"] == 200
        assert answer["type"] == "application/vnd.microsoft.activity.message"
        return str(answer["value"])

    async def delivered(self, count: int = 1, user: str = USER) -> list[Any]:
        return await self.served.delivered(user, count)

    async def references(self) -> list[tuple[str, str, str, str]]:
        async with self.served.database.engine.connect() as connection:
            rows = await connection.execute(
                text(
                    "SELECT tenant, conversation, service_url, kind FROM teams_conversations "
                    "ORDER BY conversation"
                )
            )
            return [tuple(row) for row in rows]


TeamsFactory = Callable[..., Awaitable[TeamsBot]]


def teams_env(server: FakeTeamsServer) -> dict[str, str]:
    return {
        "TEAMS_APP_ID": APP_ID,
        "TEAMS_APP_PASSWORD": APP_PASSWORD,
        "TEAMS_OPENID_METADATA_URL": server.metadata_url,
        "TEAMS_TOKEN_URL": server.token_url(),
        "FATHOM_TEAMS_EDIT_INTERVAL": "0.05",
        "FATHOM_DELIVERY_BACKOFF": "0.05",
    }


@pytest.fixture
async def teams(
    serve_fathom: ServeFathom, teams_server: FakeTeamsServer
) -> AsyncIterator[TeamsFactory]:
    """``await teams(database_url=None, **env)``: Fathom served with Teams alone."""

    async def start(database_url: str | None = None, **env: str) -> TeamsBot:
        served = await serve_fathom(database_url, **{**teams_env(teams_server), **env})
        return TeamsBot(served, teams_server)

    yield start


# -- the token on every activity ----------------------------------------------------------------


async def test_unsigned_forged_expired_or_misaddressed_activities_get_401_and_store_nothing(
    teams: TeamsFactory,
) -> None:
    """ "Authenticate requests from the Bot Connector service to your bot": the token must be
    signed by a published key, for this app, by the Bot Framework, in date, and for the
    activity's serviceUrl."""
    bot = await teams()
    activity = channel_message(bot.url, "research heat pumps depth=1")
    refused = {
        "no header": "",
        "not bearer": "Basic " + APP_ID,
        "not a JWT": "Bearer not.a.jwt",
        "forged": sign(activity, key="forger"),
        "expired": sign(activity, issued_ago=7200, expires_in=3600),
        "not yet valid": sign(activity, issued_ago=-3600),
        "another app": sign(activity, audience="11111111-2222-3333-4444-555555555555"),
        "another issuer": sign(activity, issuer="https://sts.windows.net/attacker/"),
        "another serviceUrl": sign(activity, service_url="https://evil.example/amer/"),
        "an unknown key": sign(activity, key="forger", kid="rolled-key-2"),
    }
    for why, authorization in refused.items():
        response = await bot.send(activity, authorization)
        assert response.status_code == 401, (why, response.text)
    # A token for another activity's service URL does not carry this one.
    elsewhere = {**activity, "serviceUrl": "https://smba.trafficmanager.net/emea/"}
    assert (await bot.send(elsewhere, sign(activity))).status_code == 401
    not_json = await bot.served.http.post(
        f"{bot.served.url}/teams/messages", content=b"[1", headers={"Authorization": "x"}
    )
    assert not_json.status_code == 400
    assert await bot.served.runs(USER) == []
    assert bot.fake.messages == {} and bot.fake.calls_to("send") == []
    assert bot.fake.tokens_issued == 1  # the credentials' check at start, nothing else
    assert await bot.references() == []
    # The signed one, for comparison, is taken.
    assert (await bot.send(activity)).status_code == 200
    (run,) = await bot.delivered()
    assert run.status == "succeeded"


async def test_keys_are_fetched_once_and_an_unknown_key_refetches_at_most_every_few_minutes(
    teams_server: FakeTeamsServer,
) -> None:
    fake = teams_server.fake
    now = [1_000_000.0]
    activity = channel_message(teams_server.url, "hello")
    async with httpx.AsyncClient() as http:
        auth = ActivityAuth(
            http, metadata_url=teams_server.metadata_url, app_id=APP_ID, clock=lambda: now[0]
        )
        for _ in range(3):
            claims = await auth.verify(sign(activity), activity["serviceUrl"])
            assert claims["aud"] == APP_ID
        assert (fake.metadata_fetches, fake.key_fetches) == (1, 1)
        unknown = sign(activity, key="forger", kid="unknown-kid")
        for _ in range(5):  # just fetched: an unknown kid is not a reason to fetch again
            with pytest.raises(Unauthenticated, match="does not publish"):
                await auth.verify(unknown, activity["serviceUrl"])
        assert fake.key_fetches == 1
        # The Bot Framework rolls its keys: a token with the new kid is taken once the
        # refetch window has passed, with one fetch.
        fake.key_ids = ["rolled-key-2"]
        rolled = sign(activity, kid="rolled-key-2")
        with pytest.raises(Unauthenticated):
            await auth.verify(rolled, activity["serviceUrl"])
        now[0] += REFETCH_AFTER + 1
        for _ in range(3):
            assert (await auth.verify(rolled, activity["serviceUrl"]))["aud"] == APP_ID
        for _ in range(5):  # a forger's unknown kids: no fetch per request
            with pytest.raises(Unauthenticated, match="does not publish"):
                await auth.verify(unknown, activity["serviceUrl"])
        assert fake.key_fetches == 2
        # A day later the keys are stale, and the metadata is down: the old keys go on
        # serving, and the next try waits for the refetch window, not the next activity.
        fake.fail_next("metadata", 503, times=5)
        now[0] += KEYS_FOR + 1
        fetches = fake.metadata_fetches
        for _ in range(4):
            assert (await auth.verify(rolled, activity["serviceUrl"]))["aud"] == APP_ID
        assert fake.metadata_fetches == fetches + 1


async def test_a_key_not_endorsed_for_teams_or_unreachable_keys_refuse_the_activity(
    teams: TeamsFactory,
) -> None:
    """A key endorsed for other channels only is refused (401); metadata that cannot be
    fetched gives 503, so the Bot Connector delivers the activity again."""
    bot = await teams()
    bot.fake.fail_next("metadata", 503)
    activity = channel_message(bot.url, "research heat pumps depth=1")
    assert (await bot.send(activity)).status_code == 503
    assert await bot.served.runs(USER) == []
    bot.fake.endorsements = ("skype",)
    other = channel_message(bot.url, "research wind depth=1")
    assert (await bot.send(other)).status_code == 401
    assert await bot.served.runs(USER) == []


async def test_a_signed_activity_of_another_channel_of_the_bot_is_refused(
    teams: TeamsFactory,
) -> None:
    """The Azure Bot's other channels (Web Chat is on by default, Direct Line) are signed
    with the same Bot Framework keys for the same app id, and their clients write
    ``channelData`` and ``from``: only ``channelId: msteams`` is Teams."""
    bot = await teams(TEAMS_APP_TENANT_ID=TENANT)
    for channel in ("directline", "webchat", None):
        activity = {**channel_message(bot.url, "research heat pumps"), "channelId": channel}
        assert (await bot.send(activity)).status_code == 403, channel
    assert await bot.served.runs(USER) == [] and await bot.references() == []


async def test_a_single_tenant_bot_refuses_another_tenant(teams: TeamsFactory) -> None:
    bot = await teams(TEAMS_APP_TENANT_ID=TENANT)
    stranger = channel_message(bot.url, "research heat pumps", tenant="another-tenant-id")
    assert (await bot.send(stranger)).status_code == 403
    assert await bot.served.runs(f"teams:another-tenant-id:{AAD_ID}") == []
    assert await bot.references() == []


# -- a request in a channel, end to end -----------------------------------------------------------


async def test_a_channel_mention_gets_one_card_edited_each_round_and_the_report_in_its_chain(
    teams: TeamsFactory, llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    bot = await teams()
    llm_server.fake.latency = search_server.fake.latency = 0.1
    activity = channel_message(bot.url, "research heat pumps depth=3")
    # Another person named in the text: shown as their name, and addresses nobody.
    activity["text"] = "<at>Fathom</at> research heat pumps for <at>Grace</at> depth=3"
    activity["entities"].append(
        {"type": "mention", "text": "<at>Grace</at>", "mentioned": {"id": "29:1g", "name": "Grace"}}
    )
    response = await bot.send(activity)
    assert response.status_code == 200
    (queued,) = await bot.served.runs(USER)  # committed before the answer
    root = activity["id"]
    assert queued.thread_key == f"teams:{TENANT}:{encode_conversation(CHANNEL_ID)}:{root}"
    assert queued.topic == "heat pumps for Grace"  # the bot's mention gone, others named
    (run,) = await bot.delivered()
    assert run.status == "succeeded" and run.delivery == "posted"
    progress, *reports = bot.fake.chain(CHANNEL_ID, root)
    texts = [shown(version) for version in progress.versions]
    positions = [next(i for i, t in enumerate(texts) if line in t) for line in LINES]
    assert positions == sorted(positions)  # one card, edited for each round
    assert "Researching \nheat pumps for Grace\n (depth 3)" in texts[0]
    assert verbs(progress.versions[1]) == ["fathom_stop", "fathom_cancel"]
    assert "Research done: 3/3 searches" in texts[-1] and verbs(progress.body) == []
    assert progress.conversation_id == f"{CHANNEL_ID};messageid={root}"
    assert len(reports) == run.report_parts_posted >= 2
    *texts_posted, vote = reports  # the votes in a card of their own: nothing for Teams to split
    assert all(r.body["textFormat"] == "markdown" and not r.attachments for r in texts_posted)
    assert "](http" in reports[0].text  # the sources list links the sources found
    # each [n] is Teams' citation of its source, the claim check's quote as its abstract
    # (the shape: tests/test_teams_citations.py)
    citations = [c for r in texts_posted for e in r.body["entities"] for c in e["citation"]]
    marked = {n for r in texts_posted for n in re.findall(r"(?<!\[)\[(\d+)\](?!\()", r.text)}
    assert {c["position"] for c in citations} == {int(n) for n in marked} != set()
    assert any(c["appearance"]["abstract"].startswith("“") for c in citations)
    assert "<at>" not in "".join(r.text for r in reports)
    assert verbs(vote.body) == ["fathom_up", "fathom_down"] and not vote.text
    assert bot.fake.splits == 0
    updates = bot.fake.calls_to("update")
    assert updates and all(u.activity_id == progress.id for u in updates)
    assert bot.fake.tokens_issued == 1  # one token for every call
    assert await bot.references() == [(TENANT, CHANNEL_ID, bot.server.service_url, "channel")]
    metrics = (await bot.served.http.get(f"{bot.served.url}/metrics")).text
    assert 'fathom_platform_calls_total{outcome="delivered",platform="teams"} 1.0' in metrics
    ready = await bot.served.readyz()
    assert ready["platforms"] == {"teams": {"mode": "http", "credentials": "accepted"}}


async def test_a_redelivered_activity_starts_one_run(teams: TeamsFactory) -> None:
    bot = await teams()
    activity = channel_message(bot.url, "research heat pumps depth=1")
    for _ in range(3):
        assert (await bot.send(activity)).status_code == 200
    (run,) = await bot.delivered()
    assert len(await bot.served.runs(USER)) == 1
    chain = bot.fake.chain(CHANNEL_ID, activity["id"])
    assert len(chain) == 1 + run.report_parts_posted


async def test_a_reply_in_the_chain_follows_up_on_its_variables(teams: TeamsFactory) -> None:
    bot = await teams()
    first = channel_message(bot.url, "research heat pumps depth=1")
    await bot.send(first)
    await bot.delivered()
    root = first["id"]
    follow_up = channel_message(bot.url, "what about noise? depth=1", root_id=root)
    await bot.send(follow_up)
    newest, oldest = await bot.delivered(2)
    assert newest.thread_key == oldest.thread_key
    assert newest.thread_key.endswith(f":{root}")
    thread = await bot.served.store.threads.get_thread(newest.thread_key)
    assert thread is not None
    variables = await bot.served.store.threads.load_variables(thread.id)
    assert variables is not None and len(variables["topics"]) == 2
    chain = bot.fake.chain(CHANNEL_ID, root)
    cards = [m for m in chain if "Researching" in shown(m.versions[0])]
    assert len(cards) == 2  # one progress card per run, both in the chain


async def test_messages_without_the_mention_or_from_bots_start_nothing(
    teams: TeamsFactory,
) -> None:
    bot = await teams()
    quiet = channel_message(bot.url, "research heat pumps", mention=False)
    robot = from_bot(bot.url, "research heat pumps")
    for activity in (quiet, robot):
        assert (await bot.send(activity)).status_code == 200
    answered = channel_message(bot.url, "help")
    await bot.send(answered)
    (reply,) = await wait_for(lambda: bot.fake.chain(CHANNEL_ID, answered["id"]))
    assert "research" in reply.text
    assert await bot.served.runs(USER) == [] and len(bot.fake.messages) == 1


async def test_a_chinese_request_in_a_group_chat_is_answered_in_chinese_as_replies(
    teams: TeamsFactory,
) -> None:
    bot = await teams()
    activity = group_chat_message(bot.url, "热泵 depth=1", locale="zh-CN")
    await bot.send(activity)
    (run,) = await bot.delivered()
    progress, *reports = bot.fake.chat(GROUP_CHAT)
    assert progress.reply_to == activity["id"] and all(
        r.reply_to == activity["id"] for r in reports
    )
    assert "正在研究 \n热泵\n（深度 1）" in shown(progress.versions[0])
    assert "研究完成：1/1 次搜索" in shown(progress.body)
    assert run.thread_key == (f"teams:{TENANT}:{encode_conversation(GROUP_CHAT)}:{activity['id']}")
    bad = group_chat_message(bot.url, "热泵 depth=0")
    await bot.send(bad)
    (answer,) = await wait_for(
        lambda: [m for m in bot.fake.chat(GROUP_CHAT) if "depth 必须" in m.text]
    )
    assert answer.reply_to == bad["id"] and len(await bot.served.runs(USER)) == 1


async def test_a_plain_reply_in_a_running_research_chain_steers_it(
    teams: TeamsFactory, search_server: FakeSearchServer
) -> None:
    """With the channel permission (``ChannelMessage.Read.Group``) Teams delivers every channel
    message: a reply without the mention in the chain of a running research is guidance;
    chatter elsewhere is read no further and leaves no reference behind."""
    bot = await teams()
    search_server.fake.hold_pages()
    asked = channel_message(bot.url, "research deep sea mining depth=5")
    await bot.send(asked)
    await wait_for(lambda: search_server.fake.page_requests)
    chatter = channel_message(
        bot.url, "lunch anyone?", mention=False, channel_id="19:watercooler@thread.tacv2"
    )
    steer = channel_message(bot.url, "focus on the Pacific", mention=False, root_id=asked["id"])
    for activity in (chatter, steer):
        assert (await bot.send(activity)).status_code == 200
    (noted,) = await wait_for(
        lambda: [m for m in bot.fake.chain(CHANNEL_ID, asked["id"]) if "Noted" in m.text]
    )
    assert noted.text.startswith("Noted: this research takes it into account")
    # A file on a reply in a channel is a reference to SharePoint ("Send and receive
    # files"): named as not read instead of being dropped without a word.
    roadmap = {
        "contentType": "reference",
        "contentUrl": "https://contoso.sharepoint.com/sites/x/Shared%20Documents/Roadmap.docx",
        "name": "Roadmap.docx",
    }
    with_file = channel_message(
        bot.url, "", mention=False, root_id=asked["id"], attachments=[roadmap]
    )
    assert (await bot.send(with_file)).status_code == 200
    (not_read,) = await wait_for(
        lambda: [m for m in bot.fake.chain(CHANNEL_ID, asked["id"]) if "Not read" in m.text]
    )
    assert "Roadmap.docx (a link to a file kept outside the chat" in not_read.text
    search_server.fake.release_pages()
    (done,) = await bot.delivered()
    thread = await bot.served.store.threads.get_thread(done.thread_key)
    assert thread is not None
    variables = await bot.served.store.threads.load_variables(thread.id)
    assert variables is not None
    assert [g["text"] for g in variables["guidance"]] == ["focus on the Pacific"]
    # The steerer is named by the name the activity carries (``from.name``), not by their
    # Entra object id.
    report = "\n".join(m.text for m in bot.fake.chain(CHANNEL_ID, asked["id"]))
    assert f"Guidance followed: focus on the Pacific ({USER_NAME}, " in report
    assert AAD_ID not in report
    assert [r[1] for r in await bot.references()] == [CHANNEL_ID]
    assert bot.fake.posted("19:watercooler") == []


async def test_the_app_removed_from_a_team_forgets_where_it_was(teams: TeamsFactory) -> None:
    bot = await teams()
    await bot.send(installation_update(bot.url, scope="team"))
    assert [r[1] for r in await bot.references()] == [TEAM_ID]
    await bot.send(installation_update(bot.url, scope="team", action="remove"))
    assert await bot.references() == []


def test_odd_activity_shapes_are_read_as_absent_fields_never_an_error() -> None:
    """Found by the route fuzzer (``python -m bench.fuzz``): a signed message whose
    ``attachments`` was ``true`` crashed the translation (500, so the Bot Connector would
    deliver it again and again). A field of another type than Teams sends is read as
    absent."""
    from bots.teams.events import reference_of, translate, translate_press

    url = "http://127.0.0.1:9"
    good = channel_message(url, "research heat pumps")
    odd_fields: dict[str, Any] = {
        "attachments": True,
        "entities": "mention",
        "text": 42,
        "from": ["29:1user"],
        "conversation": "19:abc@thread.tacv2",
        "channelData": [],
        "serviceUrl": None,
        "value": "press",
    }
    for key, value in odd_fields.items():
        activity = {**good, key: value}
        request = translate(activity, BOT_ID)
        reference_of(activity)
        translate_press({**activity, "type": "invoke", "name": "adaptiveCard/action"})
        if key in ("attachments", "entities", "text", "channelData"):
            assert request is not None, key  # still a message, without that field
    with_true = translate({**good, "attachments": True}, BOT_ID)
    assert with_true is not None and with_true.message.attachments == ()


@pytest.mark.parametrize(
    ("action", "kept"),
    [("add", True), ("add-upgrade", True), ("remove", False), ("remove-upgrade", False)],
)
async def test_an_installation_update_keeps_or_forgets_the_channel(
    teams: TeamsFactory, action: str, kept: bool
) -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    subscribe-to-conversation-events.md``, "Installation update event" (the sample in
    tests/samples/teams/), with each ``action`` the section names: "add" when installed,
    "remove" when uninstalled, "add-upgrade"/"remove-upgrade" when an app upgrade adds or
    removes the bot. Its serviceUrl is the fake's, so it can be signed for it."""
    from tests.test_teams_shapes import INSTALLED_CHANNEL, INSTALLED_TENANT, sample

    bot = await teams()
    activity = sample("installation_update_team")
    activity["serviceUrl"] = bot.server.service_url
    where = (INSTALLED_TENANT, INSTALLED_CHANNEL, bot.server.service_url, "channel")
    assert (await bot.send({**activity, "action": "add"})).status_code == 200
    assert await bot.references() == [where]
    assert (await bot.send({**activity, "action": action})).status_code == 200
    assert await bot.references() == ([where] if kept else [])


async def test_the_app_removed_from_a_team_forgets_every_channel_of_it(
    teams: TeamsFactory,
) -> None:
    """A digest of any channel of a team the app left would only be refused: the removal
    (the team's installationUpdate) forgets the General channel and the channels the bot was
    addressed in; another team's channel stays. A deleted channel is forgotten alone."""
    bot = await teams()
    await bot.send(installation_update(bot.url, scope="team"))
    await bot.send(channel_message(bot.url, "help"))  # CHANNEL_ID, of the same team
    elsewhere = "19:other-team-channel@thread.tacv2"
    await bot.send(channel_message(bot.url, "help", team_id="19:other@thread.tacv2",
        channel_id=elsewhere))  # fmt: skip
    assert sorted(r[1] for r in await bot.references()) == sorted([TEAM_ID, CHANNEL_ID, elsewhere])
    deleted = installation_update(bot.url, scope="team")
    deleted.update(type="conversationUpdate")
    deleted.pop("action")
    deleted["channelData"] = {
        "eventType": "channelDeleted",
        "channel": {"id": CHANNEL_ID},
        "team": {"id": TEAM_ID},
        "tenant": {"id": TENANT},
    }
    await bot.send(deleted)
    assert sorted(r[1] for r in await bot.references()) == sorted([TEAM_ID, elsewhere])
    await bot.send(channel_message(bot.url, "help"))
    await bot.send(installation_update(bot.url, scope="team", action="remove"))
    assert [r[1] for r in await bot.references()] == [elsewhere]


async def test_the_bot_removed_or_its_channel_deleted_forgets_the_channel(
    teams: TeamsFactory,
) -> None:
    """``conversationUpdate`` (same page): the bot in ``membersRemoved``, or the event type
    ``channelDeleted``, forgets the conversation; other updates (a member added who is not
    the bot) record nothing."""
    from tests.fakes.teams import conversation_update_bot_added

    bot = await teams()
    added = conversation_update_bot_added(bot.url)
    assert (await bot.send(added)).status_code == 200
    assert [r[1] for r in await bot.references()] == [TEAM_ID]
    someone = {**added, "membersAdded": [{"id": "29:1someone-else"}]}
    removed = {**added, "membersRemoved": [{"id": BOT_ID}]}
    removed.pop("membersAdded")
    assert (await bot.send(removed)).status_code == 200
    assert await bot.references() == []
    assert (await bot.send(someone)).status_code == 200
    assert await bot.references() == []
    await bot.send(added)
    deleted = {**added, "channelData": {**added["channelData"], "eventType": "channelDeleted"}}
    deleted.pop("membersAdded")
    deleted["channelData"]["channel"] = {"id": TEAM_ID}
    assert (await bot.send(deleted)).status_code == 200
    assert await bot.references() == []


# -- personal chats and files -----------------------------------------------------------------


async def test_a_personal_chat_needs_no_mention_and_gets_its_answers_as_replies(
    teams: TeamsFactory,
) -> None:
    bot = await teams()
    activity = personal_message(bot.url, "research heat pumps depth=1")
    await bot.send(activity)
    (run,) = await bot.delivered()
    progress, *reports = bot.fake.chat(PERSONAL_CHAT)
    assert "Researching \nheat pumps\n (depth 1)" in shown(progress.versions[0])
    assert "Research done: 1/1 searches" in shown(progress.body)
    assert progress.reply_to == activity["id"]
    assert len(reports) == run.report_parts_posted
    assert await bot.references() == [(TENANT, PERSONAL_CHAT, bot.server.service_url, "personal")]


async def test_hi_alone_in_a_personal_chat_gets_the_help_and_starts_nothing(
    teams: TeamsFactory,
) -> None:
    """The first thing people write to a bot in its personal chat; the Teams Store
    validation guidelines ask that "Hi", "Hello" and "Help" work (msteams-docs,
    teams-store-validation-guidelines.md, "Bot commands")."""
    bot = await teams()
    for greeting in ("hi", "Hello!", "你好"):
        said = personal_message(bot.url, greeting)
        assert (await bot.send(said)).status_code == 200
        (answer,) = await wait_for(
            lambda said=said: [m for m in bot.fake.chat(PERSONAL_CHAT) if m.reply_to == said["id"]]
        )
        assert "research" in answer.text and answer.body["textFormat"] == "markdown"
    assert await bot.served.runs(USER) == []


async def test_a_personal_file_then_a_request_reads_the_file_into_the_report(
    teams: TeamsFactory, llm_server: FakeLLMServer
) -> None:
    """ "Send and receive files": a file sent to the bot in a personal chat arrives as a file
    download info attachment; kept (and answered), then read by the sender's next request
    from its pre-authenticated address, without the bot's token."""
    bot = await teams()
    notes = "# Field notes\n\nThe heat pump's seasonal coefficient of performance was 3.4.\n"
    attachment = bot.fake.add_file(notes.encode(), "notes.md")
    sent = personal_message(bot.url, "", attachments=[attachment])
    assert (await bot.send(sent)).status_code == 200
    (kept,) = await wait_for(lambda: bot.fake.chat(PERSONAL_CHAT))
    assert "notes.md" in kept.text and kept.reply_to == sent["id"]
    await bot.send(personal_message(bot.url, "research heat pumps depth=1"))
    (run,) = await bot.delivered()
    assert run.status == "succeeded" and run.attachments_read == 1
    (fetch,) = bot.fake.file_fetches
    assert fetch.status == 200 and "authorization" not in fetch.headers
    prompt = str(llm_server.fake.requests_for("writer")[-1].body["messages"][-1]["content"])
    assert "notes.md" in prompt and "coefficient of performance was 3.4" in prompt


async def test_a_file_in_a_channel_is_named_as_not_read_with_the_reason(
    teams: TeamsFactory,
) -> None:
    """Files in channels and group chats are SharePoint references the bot's credentials
    cannot open: the research starts and says so."""
    bot = await teams()
    reference = {
        "contentType": "reference",
        "contentUrl": "https://contoso.sharepoint.com/sites/Research/Shared Documents/spec.pdf",
        "name": "spec.pdf",
    }
    activity = channel_message(bot.url, "research heat pumps depth=1", attachments=[reference])
    await bot.send(activity)
    (run,) = await bot.delivered()
    assert run.attachments_read == 0
    said = "\n".join(shown(m.body) for m in bot.fake.chain(CHANNEL_ID, activity["id"]))
    assert "spec.pdf" in said and "Not read" in said


# -- buttons -------------------------------------------------------------------------------------


async def test_stop_pressed_by_someone_else_is_refused_and_by_the_requester_stops(
    teams: TeamsFactory, search_server: FakeSearchServer
) -> None:
    bot = await teams()
    search_server.fake.hold_pages()
    asked = channel_message(bot.url, "research tidal power depth=5")
    await bot.send(asked)
    (run,) = await bot.served.runs(USER)
    card = await wait_for(
        lambda: [m for m in bot.fake.chain(CHANNEL_ID, asked["id"]) if verbs(m.body)]
    )
    await wait_for(lambda: search_server.fake.page_requests)
    refused = await bot.press(card[0], "fathom_stop", asked, user_id="29:1other", aad_id=OTHER_AAD)
    assert refused.startswith("Only the person who started this research")
    stopping = await bot.press(card[0], "fathom_stop", asked)
    assert "Stopping" in stopping and "tidal power" in stopping
    search_server.fake.release_pages()
    (done,) = await bot.delivered()
    assert (done.status, done.stop_requested) == ("succeeded", True)
    assert len(search_server.fake.queries) == 1
    progress, *reports = bot.fake.chain(CHANNEL_ID, asked["id"])
    assert verbs(progress.body) == [] and "stopped early after 1 of 5" in shown(progress.body)
    vote = await bot.press(reports[-1], "fathom_down", asked)
    assert vote == "Thanks: your 👎 is recorded."
    [feedback] = await bot.served.store.feedback.feedback_since()
    assert (feedback.run_id, feedback.voter, feedback.value) == (run.id, USER, "down")


async def test_cancel_pressed_by_the_requester_cancels_and_by_someone_else_does_not(
    teams: TeamsFactory, search_server: FakeSearchServer
) -> None:
    bot = await teams()
    search_server.fake.hold_pages()
    asked = personal_message(bot.url, "research geothermal depth=5")
    await bot.send(asked)
    card = await wait_for(lambda: [m for m in bot.fake.chat(PERSONAL_CHAT) if verbs(m.body)])
    refused = await bot.press(
        card[0], "fathom_cancel", asked, user_id="29:1other", aad_id=OTHER_AAD
    )
    assert refused.startswith("Only the person who started this research")
    (running,) = await bot.served.runs(USER)
    assert not running.cancel_requested
    assert "Cancelling" in await bot.press(card[0], "fathom_cancel", asked)
    search_server.fake.release_pages()
    (done,) = await bot.delivered()
    assert done.status == "cancelled"
    assert verbs(bot.fake.chat(PERSONAL_CHAT)[0].body) == []


async def test_a_request_waiting_in_line_gets_its_card_at_once_with_its_place_and_cancel(
    teams: TeamsFactory, search_server: FakeSearchServer
) -> None:
    """One research at a time (FATHOM_MAX_CONCURRENT_RUNS=1) and one running: the next
    request's reply chain gets its progress card at once, saying its place in line, with
    Cancel only; Cancel takes it out of the line and the card says so, without its button."""
    bot = await teams(FATHOM_MAX_CONCURRENT_RUNS="1")
    search_server.fake.hold_pages()
    await bot.send(channel_message(bot.url, "research tidal power depth=2"))
    await wait_for(lambda: search_server.fake.page_requests)
    asked = channel_message(bot.url, "research wave power depth=1")
    await bot.send(asked)
    (card,) = await wait_for(lambda: bot.fake.chain(CHANNEL_ID, asked["id"]))
    assert verbs(card.body) == ["fathom_cancel"]
    assert "Queued: 1st in line." in shown(card.body)
    assert (await bot.press(card, "fathom_cancel", asked)).startswith("🛑 Cancelling")

    def cancelled() -> bool:
        (now,) = bot.fake.chain(CHANNEL_ID, asked["id"])
        return "Research cancelled" in shown(now.body) and not verbs(now.body)

    await wait_for(cancelled)
    search_server.fake.release_pages()
    (first, second) = sorted(await bot.delivered(2), key=lambda r: r.created_at)
    assert (first.status, second.status) == ("succeeded", "cancelled")
    assert len(bot.fake.chain(CHANNEL_ID, asked["id"])) == 1


async def test_a_press_on_a_card_of_no_run_changes_nothing(teams: TeamsFactory) -> None:
    bot = await teams()
    asked = channel_message(bot.url, "research heat pumps depth=1")
    invoke = action_invoke(
        bot.url,
        verb="fathom_cancel",
        data={"run": "0" * 32, "lang": "en"},
        reply_to_id="1700000000000",
        conversation=asked["conversation"],
    )
    response = await bot.send(invoke)
    assert response.status_code == 200
    assert "does not belong to a research" in response.json()["value"]
    foreign = {**invoke, "value": {"action": {"verb": "someone_else", "data": {}}}}
    assert (await bot.send(foreign)).json()["value"] == ""
    assert (await bot.send(invoke, sign(invoke, key="forger"))).status_code == 401


# -- failures ------------------------------------------------------------------------------------


async def test_rate_limits_and_server_errors_are_retried_until_the_report_is_posted(
    teams: TeamsFactory,
) -> None:
    bot = await teams()
    bot.fake.fail_next("send", 429, retry_after=0.1)
    bot.fake.fail_next("update", 502)
    bot.fake.fail_next("token", 503)
    activity = channel_message(bot.url, "research heat pumps depth=1")
    await bot.send(activity)
    (run,) = await bot.delivered()
    assert run.delivery == "posted" and run.status == "succeeded"
    progress, *reports = bot.fake.chain(CHANNEL_ID, activity["id"])
    assert "Research done" in shown(progress.body)
    assert len(reports) == run.report_parts_posted >= 1


async def test_a_progress_card_deleted_mid_run_is_not_updated_again(
    teams: TeamsFactory, search_server: FakeSearchServer
) -> None:
    """Someone deletes the progress card while the research runs. Teams answers an update
    of a deleted message ``403`` ``{"error": {"code": "ServiceError", "message": "Unknown"}}``
    (microsoft/BotFramework-Services#269; an id the thread never had gets 404
    ActivityNotFoundInConversation): the card is not asked for again at each step, and the
    final state is one new card; the report is posted."""
    bot = await teams()
    search_server.fake.hold_pages()
    asked = channel_message(bot.url, "research tidal power depth=4")
    await bot.send(asked)
    (card,) = await wait_for(lambda: bot.fake.chain(CHANNEL_ID, asked["id"]))
    await wait_for(lambda: search_server.fake.page_requests)
    card.deleted = True  # as a person deleting it in Teams
    updates_before = len(bot.fake.calls_to("update"))
    search_server.fake.release_pages()
    (run,) = await bot.delivered()
    assert (run.status, run.delivery, run.delivery_attempts) == ("succeeded", "posted", 0)
    assert len(bot.fake.calls_to("update")) == updates_before + 1  # the refused one only
    final, *reports = [m for m in bot.fake.chain(CHANNEL_ID, asked["id"]) if not m.deleted]
    assert "Research done: 4/4 searches" in shown(final.body) and verbs(final.body) == []
    assert len(reports) == run.report_parts_posted >= 2


async def test_a_bot_no_longer_in_the_conversation_cancels_its_run_and_posts_nothing_more(
    teams: TeamsFactory, llm_server: FakeLLMServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Teams' answer to a post where the bot is no longer a member: ``403``
    ``{"error": {"code": "BotNotInConversationRoster", "message": "The bot is not part of the
    conversation roster."}}`` (MicrosoftDocs/bot-docs#1527; msteams-docs
    conversation-messages.md, "Status code responses": the app "needs to be reinstalled").
    The research stops (cancelled: none of it could be shown), and the log says why. The
    refused post is its progress message announced while the request waited in line: no post
    is tried again but its final state, once, by its delivery."""
    bot = await teams()
    bot.fake.remove_bot(CHANNEL_ID)
    await bot.send(channel_message(bot.url, "research heat pumps depth=5"))
    (run,) = await bot.delivered()
    assert (run.status, run.delivery) == ("cancelled", "failed")
    assert run.delivery_error is not None and "BotNotInConversationRoster" in run.delivery_error
    assert len(bot.fake.calls_to("send")) == 2 and bot.fake.calls_to("update") == []
    assert bot.fake.messages == {}
    assert len(llm_server.fake.requests_for("writer")) == 0  # no report written for nobody
    assert any("cannot post in its conversation any more" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("scope", ["team", "groupChat"])
async def test_the_bot_removed_mid_research_stops_the_runs_there(
    teams: TeamsFactory,
    search_server: FakeSearchServer,
    caplog: pytest.LogCaptureFixture,
    scope: Any,
) -> None:
    """The bot removed from a team (a ``conversationUpdate`` whose ``membersRemoved`` names
    the bot, ``teamMemberRemoved``: the conversation is the team's, and every channel of it
    where a research runs is stopped) or from a group chat, while a research runs there:
    the run is cancelled at once, and once Teams refuses the post of its end (the bot is no
    longer in the roster) nothing more is asked of it."""
    bot = await teams()
    search_server.fake.hold_pages()
    if scope == "team":
        asked = channel_message(bot.url, "research tidal power depth=5")
        where = CHANNEL_ID
    else:
        asked = group_chat_message(bot.url, "research tidal power depth=5")
        where = GROUP_CHAT
    await bot.send(asked)
    await wait_for(lambda: search_server.fake.page_requests)
    (running,) = await bot.served.runs(USER)
    bot.fake.remove_bot(where)  # Teams refuses its posts from now on
    before = len(bot.fake.calls)
    removed = conversation_update_bot_removed(bot.url, scope=scope)
    assert (await bot.send(removed)).status_code == 200
    (cancelled,) = await bot.served.runs(USER)
    assert cancelled.cancel_requested  # at once, not at the end of the research
    search_server.fake.release_pages()
    (run,) = await bot.delivered()
    assert run.id == running.id and (run.status, run.delivery) == ("cancelled", "failed")
    asked = [c for c in bot.fake.calls[before:] if c.kind in ("send", "update", "create")]
    assert len(asked) == 1  # its end, refused (403): nothing asked after that answer
    assert len(search_server.fake.queries) == 1  # the search in flight, no other
    assert any(
        "the bot was removed from" in r.getMessage() and run.id in r.getMessage()
        for r in caplog.records
    )
    assert await bot.references() == []


@pytest.mark.parametrize("answer", ["202", "empty id"])
async def test_an_activity_teams_splits_is_delivered_and_answered_without_an_id(
    teams_server: FakeTeamsServer, answer: Any
) -> None:
    """Text and a card in one activity: Teams posts two messages and answers ``202`` with
    no body (OfficeDev/BotBuilder-MicrosoftTeams#125, MicrosoftDocs/bot-docs#1726; "Message
    splitting" in msteams-docs' conversation-messages.md), or, through a Bot Framework SDK, an
    empty id (microsoft/BotFramework-Services#98, MicrosoftDocs/msteams-docs#1321). That is
    a message delivered: the send returns "" and is not repeated."""
    teams_server.fake.split_answer = answer
    card = {"contentType": "application/vnd.microsoft.card.adaptive", "content": {"body": []}}
    activity = {"type": "message", "text": "Report", "attachments": [card]}
    async with httpx.AsyncClient() as http:
        api = TeamsApi(
            http, app_id=APP_ID, app_password=APP_PASSWORD, token_url=teams_server.token_url()
        )
        assert await api.send(teams_server.service_url, GROUP_CHAT, activity) == ""
    assert len(teams_server.fake.calls_to("send")) == 1
    assert [bool(m.attachments) for m in teams_server.fake.chat(GROUP_CHAT)] == [False, True]


async def test_a_run_whose_posts_are_all_answered_without_an_id_posts_everything_once(
    teams: TeamsFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Every send answered ``202 Accepted`` with no body (MicrosoftDocs/bot-docs#2263, a send
    to a conversation on the msteams channel): the report's parts are delivered once each.
    The progress card, whose id Teams did not give, cannot be edited: its steps are not
    shown, and its final state is one new card (said in the log), never a card per step."""
    bot = await teams()
    bot.fake.unnamed_sends = 1000
    activity = channel_message(bot.url, "research heat pumps depth=2")
    await bot.send(activity)
    (run,) = await bot.delivered()
    assert (run.status, run.delivery, run.delivery_attempts) == ("succeeded", "posted", 0)
    first, final, *reports = bot.fake.chain(CHANNEL_ID, activity["id"])
    assert "Researching" in shown(first.body) and len(first.versions) == 1
    assert "Research done: 2/2 searches" in shown(final.body) and verbs(final.body) == []
    assert len(reports) == run.report_parts_posted >= 2
    assert verbs(reports[-1].body) == ["fathom_up", "fathom_down"]
    assert bot.fake.calls_to("update") == []
    assert len(bot.fake.calls_to("send")) == 2 + run.report_parts_posted
    assert any("posted without an id" in r.getMessage() for r in caplog.records)


async def test_a_wrong_app_password_makes_readyz_not_ready_before_any_research(
    teams: TeamsFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The identity platform's answer to a client secret that is not the app's (its ID
    pasted instead of its value, or an expired one): ``401`` with ``"error":
    "invalid_client"`` and "AADSTS7000215: Invalid client secret provided" (the fake's token
    endpoint answers Microsoft's error shape). The token is asked for at start; /readyz says
    why it is not ready, and probing again does not ask the identity platform each time."""
    bot = await teams(TEAMS_APP_PASSWORD="the-secret-id-not-its-value")
    response = await bot.served.http.get(f"{bot.served.url}/readyz")
    assert response.status_code == 503
    ready = response.json()
    assert ready["status"] == "unavailable"
    assert ready["reason"].startswith("teams: the identity platform refuses the bot's token")
    assert "invalid_client" in ready["reason"] and "AADSTS7000215" in ready["reason"]
    assert "Trace ID" not in ready["reason"]
    teams_status = ready["platforms"]["teams"]
    assert teams_status["credentials"] == "refused" and teams_status["ready"] is False
    for _ in range(3):
        assert (await bot.served.http.get(f"{bot.served.url}/readyz")).status_code == 503
    assert len(bot.fake.calls_to("token")) == 1  # asked at start; refusals asked again later
    assert any("refuses the bot's token" in r.getMessage() for r in caplog.records)
    assert await bot.served.runs(USER) == []


async def test_the_credentials_are_asked_again_at_a_pace_and_a_secret_accepted_later_is_ready(
    teams_server: FakeTeamsServer,
) -> None:
    """A client secret just added can be refused for a while (AADSTS7000215) before the
    identity platform accepts it. A refusal is asked again once RECHECK_AFTER has passed
    (on the check's clock), not at every probe; a network failure says nothing of the
    credentials and leaves the bot ready, shown as not checked."""
    from bots.teams.credentials import RECHECK_AFTER, CredentialsCheck

    fake = teams_server.fake
    refusal = json.dumps(
        {
            "error": "invalid_client",
            "error_description": "AADSTS7000215: Invalid client secret provided. Ensure the "
            "secret being sent in the request is the client secret value, not the client "
            "secret ID, for a secret added to app '" + APP_ID + "'. Trace ID: 1 Correlation "
            "ID: 2 Timestamp: 2026-12-07 09:00:00Z",
            "error_codes": [7000215],
        }
    ).encode()
    fake.fail_next("token", 401, body=refusal, times=2)
    now = [1_000.0]
    async with httpx.AsyncClient() as http:
        api = TeamsApi(
            http, app_id=APP_ID, app_password=APP_PASSWORD, token_url=teams_server.token_url()
        )
        check = CredentialsCheck(api, clock=lambda: now[0])
        first = await check.problem()
        assert first is not None and "AADSTS7000215" in first and "Trace ID" not in first
        assert await check.problem() == first and len(fake.calls_to("token")) == 1
        now[0] += RECHECK_AFTER
        assert await check.problem() == first and len(fake.calls_to("token")) == 2
        now[0] += RECHECK_AFTER
        assert await check.problem() is None  # the identity platform now gives the token
        assert check.status() == {"credentials": "accepted"}
        for _ in range(3):  # a kept token: asking costs no request
            assert await check.problem() is None
        assert len(fake.calls_to("token")) == 3
    async with httpx.AsyncClient() as http:
        unreachable = TeamsApi(
            http, app_id=APP_ID, app_password=APP_PASSWORD, token_url="http://127.0.0.1:9/t"
        )
        check = CredentialsCheck(unreachable, clock=lambda: now[0])
        assert await check.problem() is None
        status = check.status()
        assert status["credentials"] == "not checked" and "ConnectError" in str(
            status["credentials_error"]
        )


async def test_an_expired_token_is_fetched_again_and_the_call_retried(
    teams: TeamsFactory,
) -> None:
    bot = await teams()
    await bot.send(channel_message(bot.url, "research heat pumps depth=1"))
    await bot.delivered()
    bot.fake.expire_tokens()
    activity = channel_message(bot.url, "research wind power depth=1")
    await bot.send(activity)
    newest, _ = await bot.delivered(2)
    assert newest.delivery == "posted" and bot.fake.tokens_issued == 2


def test_a_report_links_only_to_the_sources_found() -> None:
    """Ways around the report's removal of unfound addresses (a reviewer's list): an entity
    spelling the scheme, a protocol-relative link, raw HTML behind an escaped backtick, an
    autolink. Rendered as CommonMark with HTML on (the most Teams could do), the text links
    nowhere; the only address is the found source's, on its citation."""
    import re

    from markdown_it import MarkdownIt

    found = Source(n=1, title="One", url="https://a.example/1")
    markdown = (
        "# Heat pumps\n\nThey move heat [1]. AT&T keeps `a<b` as code.\n\n"
        "See [data](&#104;ttps://evil.example/x), [more](//evil.example/y), "
        '\\`<a href="//evil.example/z">z</a>` and <https://evil.example/w>.\n'
    )
    (part,) = report_parts(markdown, [found], (), "en")
    rendered = MarkdownIt("commonmark", {"html": True}).render(part.activity["text"])
    assert re.findall(r'href="([^"]*)"', rendered) == []
    (entity,) = part.activity["entities"]
    assert [c["appearance"]["url"] for c in entity["citation"]] == ["https://a.example/1"]
    assert "AT&amp;T" in rendered and "<code>a&lt;b</code>" in rendered


def test_untrusted_words_in_an_answer_are_shown_as_written() -> None:
    """A topic echoed in an answer (status, errors, "Noted"): no emphasis, heading, code,
    link or mention in Teams' Markdown, and its characters all still there."""
    import html as entities
    import re

    from markdown_it import MarkdownIt

    from bots.teams.app import escape_text
    from core.untrusted import WORD_JOINER

    topic = "# *big* _news_ `x` [site](https://evil.example) www.evil.example <at>Bob</at> &amp;"
    rendered = MarkdownIt("commonmark", {"html": True}).enable("linkify").render(escape_text(topic))
    assert not re.search(r"<(h1|em|strong|code|a|at)\b", rendered), rendered
    plain = re.sub(r"<[^>]+>", "", rendered).replace(WORD_JOINER, "").strip()

    assert entities.unescape(plain) == topic.replace("<at>Bob</at>", "@Bob")  # made inert


def test_a_long_report_is_split_under_teams_size_limit() -> None:
    section = "## Part {n}\n\n" + "Heat pumps move heat from outside air [1]. " * 80 + "\n\n"
    markdown = "# Heat pumps\n\n" + "".join(section.format(n=n) for n in range(30))
    sources = [Source(n=1, title="One", url="https://a.example/1")]
    parts = report_parts(markdown, sources, (), "en")
    assert len(parts) > 3
    sizes = [len(json.dumps(p.activity, ensure_ascii=False).encode()) for p in parts]
    assert max(sizes) < MAX_ACTIVITY_BYTES
    assert "".join(p.activity["text"] for p in parts).count("**Part ") == 30  # bold headings


# -- proactive posts -----------------------------------------------------------------------------


OPERATOR = "cli:local:operator"


async def fire_digest(bot: TeamsBot, channel: str) -> Any:
    """A schedule of "heat pumps" for ``channel`` added as ``fathom digest add`` adds it (no
    request, so no conversation reference of its own), fired once; its run, delivered."""
    from core.chat.grammar import ScheduleCommand
    from core.operations.digests import DigestService
    from core.values import SourceChoice, ThreadKey
    from storage import DigestStore

    digests = DigestService(
        DigestStore(bot.served.database),
        bot.served.store.runs,
        min_interval=3600,
        grace=3600,
        max_per_channel=10,
    )
    command = ScheduleCommand(
        topic="heat pumps",
        cron="0 9 * * MON",
        timezone="UTC",
        depth=1,
        strategy="iterative",
        sources=SourceChoice.ALL,
    )
    key = encode_conversation(channel)
    where = ThreadKey(platform="teams", workspace=TENANT, channel=key, thread="cli")
    digest = await digests.add(command, thread=where, created_by=OPERATOR)
    await digests.fire(digest, datetime(2026, 12, 7, 9, 0, tzinfo=UTC))
    (run,) = await bot.delivered(user=OPERATOR)
    return run


async def test_a_digest_posts_to_a_channel_from_the_reference_kept_at_install(
    teams: TeamsFactory,
) -> None:
    """The app installed in a team records where its General channel is; a schedule added
    for that channel from the command line posts there: a new post whose reply chain carries
    the report."""
    bot = await teams(FATHOM_STALE_RUN_AFTER="4")  # the sweep takes queued runs every 2 s
    assert (await bot.send(installation_update(bot.url, scope="team"))).status_code == 200
    assert await bot.references() == [(TENANT, TEAM_ID, bot.server.service_url, "channel")]
    run = await fire_digest(bot, TEAM_ID)
    assert run.delivery == "posted"
    (create,) = bot.fake.calls_to("create")
    assert create.body["channelData"]["channel"]["id"] == TEAM_ID
    (opener,) = bot.fake.posted(TEAM_ID)[:1]
    assert "Digest: heat pumps" in shown(opener.versions[0])
    assert run.thread_key == f"teams:{TENANT}:{encode_conversation(TEAM_ID)}:{opener.id}"
    reports = bot.fake.chain(TEAM_ID, opener.id)
    assert len(reports) == run.report_parts_posted >= 1


async def test_a_digest_for_a_channel_never_seen_is_undeliverable(teams: TeamsFactory) -> None:
    bot = await teams(FATHOM_STALE_RUN_AFTER="4")
    run = await fire_digest(bot, "19:unknown@thread.tacv2")
    assert run.delivery == "failed" and bot.fake.messages == {}


# -- replicas ------------------------------------------------------------------------------------


async def test_two_replicas_share_one_run_its_buttons_and_the_references(
    teams: TeamsFactory, database_url: str, search_server: FakeSearchServer
) -> None:
    """The Bot Connector may deliver an activity to any replica, and deliver it again to
    another: one run; a press on the other replica stops it; both know the conversation."""
    first = await teams(database_url)
    second = await teams(database_url)
    search_server.fake.hold_pages()
    asked = channel_message(first.url, "research tidal power depth=5")
    assert (await first.send(asked)).status_code == 200
    assert (await second.send(asked)).status_code == 200  # redelivered elsewhere
    card = await wait_for(
        lambda: [m for m in first.fake.chain(CHANNEL_ID, asked["id"]) if verbs(m.body)]
    )
    await wait_for(lambda: search_server.fake.page_requests)
    stopping = await second.press(card[0], "fathom_stop", asked)
    assert "Stopping" in stopping
    search_server.fake.release_pages()
    (done,) = await first.delivered()
    assert (done.status, done.stop_requested) == ("succeeded", True)
    assert len(await second.served.runs(USER)) == 1
    chain = first.fake.chain(CHANNEL_ID, asked["id"])
    assert len(chain) == 1 + done.report_parts_posted
    assert await second.references() == await first.references() != []
