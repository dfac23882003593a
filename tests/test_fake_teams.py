"""The fake Teams keeps its word: what the Bot Framework, the identity platform and the Bot
Connector answer, as seen by a plain HTTP client and PyJWT."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import jwt
import pytest

from tests.fakes.teams import (
    APP_ID,
    APP_PASSWORD,
    BOT_ID,
    ISSUER,
    KEY_ID,
    MAX_ACTIVITY_BYTES,
    SCOPE,
    FakeTeamsServer,
    action_invoke,
    channel_message,
    personal_message,
    sign,
)

CHANNEL = "19:fathom-research@thread.tacv2"


@pytest.fixture
def teams(teams_server: FakeTeamsServer) -> FakeTeamsServer:
    """The fake Teams on 127.0.0.1, reset for each test (``tests/conftest.py``)."""
    return teams_server


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as client:
        yield client


def get_token(teams: FakeTeamsServer, http: httpx.Client, secret: str = APP_PASSWORD) -> str:
    form = {
        "grant_type": "client_credentials",
        "client_id": APP_ID,
        "client_secret": secret,
        "scope": SCOPE,
    }
    res = http.post(teams.token_url(), data=form)
    assert res.status_code == 200, res.text
    return str(res.json()["access_token"])


def activities(teams: FakeTeamsServer, conversation: str, activity: str = "") -> str:
    url = f"{teams.service_url}v3/conversations/{quote(conversation, safe='')}/activities"
    return f"{url}/{quote(activity, safe='')}" if activity else url


def message(text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "message", "text": text, "textFormat": "markdown", **extra}


def test_metadata_points_at_the_keys(teams: FakeTeamsServer, http: httpx.Client) -> None:
    metadata = http.get(teams.metadata_url).json()
    assert metadata["issuer"] == ISSUER
    assert metadata["jwks_uri"] == f"{teams.url}/openid/keys"
    keys = http.get(metadata["jwks_uri"]).json()["keys"]
    assert [(k["kid"], k["kty"], k["endorsements"]) for k in keys] == [
        (KEY_ID, "RSA", ["msteams", "skype"])
    ]
    assert (teams.fake.metadata_fetches, teams.fake.key_fetches) == (1, 1)


def test_published_key_verifies_and_the_forgers_does_not(
    teams: FakeTeamsServer, http: httpx.Client
) -> None:
    (jwk,) = http.get(f"{teams.url}/openid/keys").json()["keys"]
    public = jwt.PyJWK(jwk, algorithm="RS256").key
    activity = channel_message(teams.url, "heat pumps")
    scheme, token = sign(activity).split(" ")
    assert scheme == "Bearer" and jwt.get_unverified_header(token)["kid"] == KEY_ID
    claims = jwt.decode(token, public, algorithms=["RS256"], audience=APP_ID, issuer=ISSUER)
    assert claims["serviceurl"] == teams.service_url == activity["serviceUrl"]
    forged = sign(activity, key="forger").split(" ")[1]
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(forged, public, algorithms=["RS256"], audience=APP_ID, issuer=ISSUER)
    expired = sign(activity, issued_ago=7200).split(" ")[1]
    with pytest.raises(jwt.ExpiredSignatureError):
        jwt.decode(expired, public, algorithms=["RS256"], audience=APP_ID, issuer=ISSUER)


def test_token_for_the_right_secret_only(teams: FakeTeamsServer, http: httpx.Client) -> None:
    token = get_token(teams, http)
    assert token and teams.fake.tokens_issued == 1
    form = {
        "grant_type": "client_credentials",
        "client_id": APP_ID,
        "client_secret": "wrong",
        "scope": SCOPE,
    }
    res = http.post(teams.token_url("botframework.com"), data=form)
    assert res.status_code == 401
    assert (res.json()["error"], res.json()["error_codes"]) == ("invalid_client", [7000215])
    res = http.post(teams.token_url(), data={**form, "client_secret": APP_PASSWORD, "scope": "x"})
    assert res.status_code == 400
    assert teams.fake.tokens_issued == 1


def test_send_reply_update_delete_are_recorded(teams: FakeTeamsServer, http: httpx.Client) -> None:
    auth = {"Authorization": f"Bearer {get_token(teams, http)}"}
    root = "1700000000001"
    chain = f"{CHANNEL};messageid={root}"
    first = http.post(activities(teams, chain), json=message("Researching…"), headers=auth)
    assert first.status_code == 201
    first_id = first.json()["id"]
    second = http.post(activities(teams, chain, root), json=message("0/3"), headers=auth)
    assert second.status_code == 201 and int(second.json()["id"]) > int(first_id)
    for i in (1, 2):
        res = http.put(
            activities(teams, chain, second.json()["id"]), json=message(f"{i}/3"), headers=auth
        )
        assert (res.status_code, res.json()) == (200, {"id": second.json()["id"]})
    assert http.delete(activities(teams, chain, first_id), headers=auth).status_code == 200
    missing = http.put(activities(teams, chain, "404"), json=message("?"), headers=auth)
    assert (missing.status_code, missing.json()["error"]["code"]) == (
        404,
        "ActivityNotFoundInConversation",
    )
    gone = http.put(activities(teams, chain, first_id), json=message("?"), headers=auth)
    assert (gone.status_code, gone.json()["error"]) == (
        403,
        {"code": "ServiceError", "message": "Unknown"},
    )

    messages = teams.fake.chain(CHANNEL, root)
    assert [m.id for m in messages] == [first_id, second.json()["id"]]
    assert messages[0].deleted and not messages[1].deleted
    assert [v["text"] for v in messages[1].versions] == ["0/3", "1/3", "2/3"]
    assert messages[1].reply_to == root and messages[1].conversation_id == chain
    assert teams.fake.posted(CHANNEL) == messages
    call = teams.fake.calls_to("send")[0]
    assert call.conversation_id == chain and "%3B" in call.path

    no_token = http.post(activities(teams, chain), json=message("x"))
    assert no_token.status_code == 401
    assert no_token.json()["error"]["code"] == "Unauthorized"
    assert len(teams.fake.posted(CHANNEL)) == 2


def test_create_conversation_starts_a_chain(teams: FakeTeamsServer, http: httpx.Client) -> None:
    auth = {"Authorization": f"Bearer {get_token(teams, http)}"}
    body = {
        "isGroup": True,
        "channelData": {"channel": {"id": CHANNEL}},
        "activity": message("Daily digest"),
    }
    res = http.post(f"{teams.service_url}v3/conversations", json=body, headers=auth)
    assert res.status_code == 201
    created = res.json()
    assert created["id"] == f"{CHANNEL};messageid={created['activityId']}"
    reply = http.post(activities(teams, created["id"]), json=message("more"), headers=auth)
    assert reply.status_code == 201
    assert [m.text for m in teams.fake.posted(CHANNEL)] == ["Daily digest", "more"]
    assert [m.text for m in teams.fake.chain(CHANNEL, created["activityId"])] == ["more"]


def test_fail_next_429_then_success(teams: FakeTeamsServer, http: httpx.Client) -> None:
    auth = {"Authorization": f"Bearer {get_token(teams, http)}"}
    teams.fake.fail_next("send", 429, retry_after=2)
    teams.fake.fail_next("send", 502)
    url = activities(teams, "a:1personal-chat-id")
    throttled = http.post(url, json=message("hi"), headers=auth)
    assert throttled.status_code == 429 and throttled.headers["Retry-After"] == "2"
    assert throttled.json()["error"]["code"] == "TooManyRequests"
    gateway = http.post(url, json=message("hi"), headers=auth)
    assert gateway.status_code == 502 and gateway.headers["content-type"].startswith("text/html")
    assert http.post(url, json=message("hi"), headers=auth).status_code == 201
    assert len(teams.fake.calls_to("send")) == 3
    assert [m.text for m in teams.fake.chat("a:1personal-chat-id")] == ["hi"]


def test_oversized_activity_gets_413(teams: FakeTeamsServer, http: httpx.Client) -> None:
    auth = {"Authorization": f"Bearer {get_token(teams, http)}"}
    big = message("x" * MAX_ACTIVITY_BYTES)
    assert len(json.dumps(big)) > MAX_ACTIVITY_BYTES
    res = http.post(activities(teams, "a:1personal-chat-id"), json=big, headers=auth)
    assert (res.status_code, res.json()["error"]["code"]) == (413, "MessageSizeTooBig")
    assert teams.fake.messages == {}


def test_file_served_only_without_authorization(teams: FakeTeamsServer, http: httpx.Client) -> None:
    attachment = teams.fake.add_file(b"%PDF-1.7 report", "report.pdf")
    assert attachment["content"]["fileType"] == "pdf"
    url = attachment["content"]["downloadUrl"]
    activity = personal_message(teams.url, "", attachments=[attachment])
    assert activity["attachments"] == [attachment]
    res = http.get(url)
    assert (res.status_code, res.content) == (200, b"%PDF-1.7 report")
    assert http.get(url, headers={"Authorization": "Bearer bot-token"}).status_code == 401
    assert http.get(url.split("?")[0] + "?tempauth=guess").status_code == 401
    assert [f.status for f in teams.fake.file_fetches] == [200, 401, 401]


def test_builders_shape(teams: FakeTeamsServer) -> None:
    post = channel_message(teams.url, "heat pumps", activity_id="1700000000005")
    assert post["text"] == "<at>Fathom</at> heat pumps"
    assert post["conversation"]["id"] == f"{CHANNEL};messageid=1700000000005"
    assert post["entities"][0]["mentioned"] == {"id": BOT_ID, "name": "Fathom"}
    assert post["attachments"][0]["content"] == "<p><at>Fathom</at>&nbsp;heat pumps</p>"
    reply = channel_message(teams.url, "more", root_id="1700000000005")
    assert reply["replyToId"] == "1700000000005"
    assert reply["conversation"]["id"] == post["conversation"]["id"]
    press = action_invoke(
        teams.url,
        verb="stop",
        data={"run": "r1"},
        reply_to_id="1700000000009",
        conversation=post["conversation"],
    )
    assert press["value"]["action"] == {
        "type": "Action.Execute",
        "verb": "stop",
        "data": {"run": "r1"},
    }
    assert press["channelData"]["teamsChannelId"] == CHANNEL


def test_text_and_a_card_are_split_into_two_messages_answered_202_without_a_body(
    teams: FakeTeamsServer, http: httpx.Client
) -> None:
    """MicrosoftDocs/msteams-docs, ``msteams-platform/bots/how-to/conversations/
    conversation-messages.md`` (the note under "Send a message"): "Message splitting occurs
    when a text message and an attachment are sent in the same activity payload. Teams
    splits this activity into two separate activities ... you do not receive the message ID
    in response". OfficeDev/BotBuilder-MicrosoftTeams#125 (aosolis, of the Teams team):
    "1 message w/ text only + 1 message with card only ... the service return[s] a 202 status
    code with no activity id in the response"; MicrosoftDocs/bot-docs#1726 and
    microsoft/botframework-sdk#6155: "an empty 202 response"."""
    auth = {"Authorization": f"Bearer {get_token(teams, http)}"}
    chain = f"{CHANNEL};messageid=1700000000001"
    card = {"contentType": "application/vnd.microsoft.card.adaptive", "content": {"body": []}}
    res = http.post(
        activities(teams, chain), json=message("Report", attachments=[card]), headers=auth
    )
    assert (res.status_code, res.content) == (202, b"")
    assert "content-type" not in res.headers
    text, carded = teams.fake.posted(CHANNEL)
    assert (text.text, text.attachments) == ("Report", [])
    assert (carded.text, carded.attachments) == ("", [card])
    assert "textFormat" not in carded.body and teams.fake.splits == 1
    # Text alone, or one card alone, is one message with its id.
    alone = http.post(activities(teams, chain), json=message("Only text"), headers=auth)
    assert alone.status_code == 201 and alone.json()["id"]
    one_card = {"type": "message", "attachments": [card]}
    assert http.post(activities(teams, chain), json=one_card, headers=auth).json()["id"]
    assert teams.fake.splits == 1 and len(teams.fake.posted(CHANNEL)) == 4


def test_cards_in_list_layout_are_one_message_each_and_a_carousel_is_one(
    teams: FakeTeamsServer, http: httpx.Client
) -> None:
    """OfficeDev/BotBuilder-MicrosoftTeams#125: "activity with attachments (cards) in list
    layout = multiple messages, 1 for each card" (``list`` is the Bot Framework's default
    ``attachmentLayout``); a carousel is one message."""
    auth = {"Authorization": f"Bearer {get_token(teams, http)}"}
    cards = [
        {"contentType": "application/vnd.microsoft.card.hero", "content": {"title": t}}
        for t in "ab"
    ]
    url = activities(teams, "a:1personal-chat-id")
    listed = http.post(url, json={"type": "message", "attachments": cards}, headers=auth)
    assert listed.status_code == 202
    assert [m.attachments for m in teams.fake.chat("a:1personal-chat-id")] == [[c] for c in cards]
    carousel = {"type": "message", "attachmentLayout": "carousel", "attachments": cards}
    assert http.post(url, json=carousel, headers=auth).status_code == 201
    assert len(teams.fake.chat("a:1personal-chat-id")) == 3


def test_a_split_answered_as_the_sdks_hand_it_to_a_bot_has_an_empty_id(
    teams: FakeTeamsServer, http: httpx.Client
) -> None:
    """microsoft/BotFramework-Services#98 ("Observe the empty string in the resource
    response") and MicrosoftDocs/msteams-docs#1321 (``send_activity`` "returns {'id': ''}"
    when "both text and attachments are present"): the Bot Framework SDKs hand the 202 to a
    bot as a resource response whose id is empty; ``split_answer = "empty id"`` answers so."""
    auth = {"Authorization": f"Bearer {get_token(teams, http)}"}
    teams.fake.split_answer = "empty id"
    card = {"contentType": "application/vnd.microsoft.card.adaptive", "content": {"body": []}}
    res = http.post(
        activities(teams, "a:1chat"), json=message("x", attachments=[card]), headers=auth
    )
    assert (res.status_code, res.json()) == (200, {"id": ""})
    assert len(teams.fake.chat("a:1chat")) == 2


def test_unnamed_sends_are_posted_and_answered_202_whatever_they_hold(
    teams: FakeTeamsServer, http: httpx.Client
) -> None:
    """MicrosoftDocs/bot-docs#2263: a send to an existing conversation on the ``msteams``
    channel answered "HTTP/1.1 202 Accepted without any body"."""
    auth = {"Authorization": f"Bearer {get_token(teams, http)}"}
    teams.fake.unnamed_sends = 1
    url = activities(teams, "a:1chat")
    first = http.post(url, json=message("one"), headers=auth)
    second = http.post(url, json=message("two"), headers=auth)
    assert (first.status_code, first.content) == (202, b"")
    assert second.status_code == 201 and second.json()["id"]
    assert [m.text for m in teams.fake.chat("a:1chat")] == ["one", "two"]
