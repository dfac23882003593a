"""Each platform's failures, judged: the table every platform fills in.

The chat layer decides what a failure means for a run (a progress edit waited out and
written in the end, a report part retried, given up at once) from one judgement,
``core.failures.PostFailure``: worth another try or not, and how long the platform asked to
wait. That logic is tested once, on the in-memory platform (``tests/test_chat_layer.py``).
What each platform adds is the judgement of its own answers, tested here: the platform's
real client calls its fake (started once per session), the fake answers with the shape the
platform sends (its rate limit and ``Retry-After``, its error codes, an edge's HTML or empty
body), and the platform's ``classify_error`` judges what its client raised.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bots.dingtalk.api import DingTalkApi, Space
from bots.dingtalk.delivery import classify_error as dingtalk_classify
from bots.feishu.api import FeishuApi
from bots.feishu.delivery import classify_error as feishu_classify
from bots.slack.errors import classify_error as slack_classify
from bots.slack.messenger import make_web_client
from bots.teams.api import TeamsApi
from bots.teams.delivery import classify_error as teams_classify
from core.failures import PostFailure
from tests.fakes import FakeSlackServer
from tests.fakes.dingtalk import FakeDingTalkServer
from tests.fakes.feishu import APP_ID, APP_SECRET, FakeFeishuServer
from tests.fakes.server import BROKEN_BODIES
from tests.fakes.teams import APP_ID as TEAMS_ID
from tests.fakes.teams import APP_PASSWORD as TEAMS_PASSWORD
from tests.fakes.teams import FakeTeamsServer

# One row: what the fake answers, then whether the failure is worth another try and the wait
# the platform asked for (None: no particular wait).


def judged(failure: PostFailure) -> tuple[bool, float | None]:
    return failure.retryable, (failure.retry_after or None)


#: The calls whose failures matter most to a run: editing its progress message, and posting
#: a part of its report (each platform's fake names them its own way).
CALLS = ("edit", "report")

# -- Slack: chat.update edits the progress message, chat.postMessage posts a report part ----


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"status": 429, "retry_after": 7}, (True, 7.0)),  # Tier 3 limit, Retry-After: 7
        ({"status": 429, "retry_after": 3600}, (True, 30.0)),  # an hour is capped
        ({"status": 200, "error": "ratelimited"}, (True, 1.0)),  # ok: false, ratelimited
        ({"status": 500}, (True, None)),
        ({"status": 503, "body": "html"}, (True, None)),  # Slack's edge during an outage
        ({"status": 502, "body": "empty"}, (True, None)),
        ({"status": 500, "body": "truncated"}, (True, None)),
        ({"status": 503, "body": "text"}, (True, None)),
        ({"status": 200, "error": "fatal_error"}, (True, None)),  # not documented as final
        ({"status": 200, "error": "message_not_found"}, (False, None)),
        ({"status": 200, "error": "channel_not_found"}, (False, None)),
        ({"status": 200, "error": "token_revoked"}, (False, None)),
        ({"status": 200, "error": "msg_too_long"}, (False, None)),
    ],
)
@pytest.mark.parametrize("call", CALLS)
async def test_slack_answers(
    slack_server: FakeSlackServer,
    call: str,
    answer: dict[str, object],
    expected: tuple[bool, float | None],
) -> None:
    client = make_web_client("xoxb-errors", slack_server.api_url)
    posted = await client.chat_postMessage(channel="C0001", text="progress")
    method = "chat.update" if call == "edit" else "chat.postMessage"
    slack_server.fake.fail_next(method, **answer)  # type: ignore[arg-type]
    with pytest.raises(Exception) as failed:
        if call == "edit":
            await client.chat_update(channel="C0001", ts=str(posted["ts"]), text="1/3")
        else:
            await client.chat_postMessage(channel="C0001", thread_ts=posted["ts"], text="# r")
    failure = slack_classify(failed.value)
    assert judged(failure) == expected
    # What the run's delivery_error and the logs say: the status, and Slack's code if any.
    assert failure.reason.startswith(f"HTTP {answer['status']}")
    assert str(answer.get("error", "")) in failure.reason


# -- Feishu: PATCH of the progress card, a reply in the thread for a report card --------------


@pytest.fixture
async def feishu(feishu_server: FakeFeishuServer) -> AsyncIterator[tuple[FeishuApi, str]]:
    """The real API client, and a card it may patch."""
    api = FeishuApi(APP_ID, APP_SECRET, feishu_server.url)
    card = await api.create_message("oc_errors", "interactive", '{"elements": []}', uuid="e1")
    try:
        yield api, card
    finally:
        await api.aclose()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"status": 429}, (True, 1.0)),  # 99991400, "request trigger frequency limit"
        ({"status": 400, "code": 230020}, (True, 1.0)),  # the card's 5-a-second limit
        ({"status": 500}, (True, None)),
        ({"status": 502, "body": "html"}, (True, None)),
        ({"status": 500, "body": "empty"}, (True, None)),
        ({"status": 500, "body": "text"}, (True, None)),
        ({"status": 500, "body": "truncated"}, (True, None)),
        ({"status": 400, "code": 234567}, (True, None)),  # not documented as final
        ({"status": 400, "code": 230002}, (False, None)),  # the bot is not in the chat
        ({"status": 403, "code": 230027}, (False, None)),  # no permission
    ],
)
@pytest.mark.parametrize("call", CALLS)
async def test_feishu_answers(
    feishu_server: FakeFeishuServer,
    feishu: tuple[FeishuApi, str],
    call: str,
    answer: dict[str, object],
    expected: tuple[bool, float | None],
) -> None:
    api, card = feishu
    feishu_server.fake.fail_next("patch" if call == "edit" else "reply", **answer)  # type: ignore[arg-type]
    with pytest.raises(Exception) as failed:
        if call == "edit":
            await api.patch_card(card, '{"elements": []}')
        else:
            await api.reply(card, "interactive", '{"elements": []}', uuid="r1")
    assert judged(feishu_classify(failed.value)) == expected


# -- DingTalk: PUT of the progress card, the robot OpenAPI's group send for a report ---------


@pytest.fixture
def dingtalk(dingtalk_api: DingTalkApi) -> DingTalkApi:
    return dingtalk_api


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"status": 429}, (True, 2.0)),  # Throttling.Api
        ({"status": 403, "code": "Throttling.Api"}, (True, 2.0)),
        ({"status": 500}, (True, None)),
        ({"status": 502, "body": "html"}, (True, None)),
        ({"status": 404, "body": "html"}, (True, None)),  # a proxy's page, not DingTalk's answer
        ({"status": 500, "body": "empty"}, (True, None)),
        ({"status": 500, "body": "truncated"}, (True, None)),
        ({"status": 503, "body": "text"}, (True, None)),
        (
            {"status": 403, "code": "Forbidden.AccessDenied.AccessTokenPermissionDenied"},
            (False, None),
        ),
        # a refused token is fetched again once; refused again, it is final
        ({"status": 401, "code": "InvalidAuthentication", "times": 2}, (False, None)),
    ],
)
@pytest.mark.parametrize("call", CALLS)
async def test_dingtalk_answers(
    dingtalk_server: FakeDingTalkServer,
    dingtalk: DingTalkApi,
    call: str,
    answer: dict[str, object],
    expected: tuple[bool, float | None],
) -> None:
    kind = "card_update" if call == "edit" else "group"
    dingtalk_server.fake.fail_next(kind, **answer)  # type: ignore[arg-type]
    with pytest.raises(Exception) as failed:
        if call == "edit":
            await dingtalk.update_card("track-errors", {"markdown": "1/3"})
        else:
            group = Space(group=True, conversation_id="cid_errors", staff_id="staff1")
            await dingtalk.send_markdown(group, "r", "# r")
    assert judged(dingtalk_classify(failed.value)) == expected


@pytest.mark.parametrize("body", BROKEN_BODIES)
async def test_dingtalk_session_webhook_answers(
    dingtalk_server: FakeDingTalkServer, dingtalk: DingTalkApi, body: str
) -> None:
    """A report part goes out through the request's session webhook first; an edge's page
    in place of DingTalk's JSON is worth another try."""
    url, _ = dingtalk_server.fake.session_webhook("cid_errors")
    dingtalk_server.fake.fail_next("webhook", status=503, body=body)
    with pytest.raises(Exception) as failed:
        await dingtalk.post_webhook(
            url, {"msgtype": "markdown", "markdown": {"title": "r", "text": "# r"}}
        )
    assert judged(dingtalk_classify(failed.value)) == (True, None)


# -- Teams: PUT .../activities/<id> edits the progress card, POST .../activities posts a part --

_HTML = b"<html><body><h1>Service Unavailable</h1></body></html>"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"status": 429, "retry_after": 7}, (True, 7.0)),  # TooManyRequests, Retry-After: 7
        ({"status": 429}, (True, 1.0)),
        ({"status": 500}, (True, None)),  # the fake's default for 5xx: an HTML page
        ({"status": 502, "body": b"", "content_type": "text/plain"}, (True, None)),
        ({"status": 412}, (True, None)),  # PreconditionFailed: the conversation is busy
        ({"status": 401}, (True, None)),  # a token just revoked: fetched again next time
        ({"status": 403}, (False, None)),  # Teams' own 403 (the bot removed, blocked)
        ({"status": 404}, (False, None)),
        ({"status": 400}, (False, None)),
        ({"status": 413}, (False, None)),
        # The same statuses from a proxy's page say nothing final.
        ({"status": 403, "body": _HTML, "content_type": "text/html"}, (True, None)),
        ({"status": 404, "body": b"", "content_type": "text/plain"}, (True, None)),
    ],
)
@pytest.mark.parametrize("call", CALLS)
async def test_teams_answers(
    teams_server: FakeTeamsServer,
    call: str,
    answer: dict[str, Any],
    expected: tuple[bool, float | None],
) -> None:
    async with httpx.AsyncClient(timeout=5.0) as http:
        api = TeamsApi(
            http, app_id=TEAMS_ID, app_password=TEAMS_PASSWORD, token_url=teams_server.token_url()
        )
        service, chain = teams_server.service_url, "19:errors@thread.tacv2;messageid=1"
        card = await api.send(service, chain, {"type": "message", "text": "1/3"})
        options = dict(answer)  # (the parameters are shared by both calls)
        status = options.pop("status")
        teams_server.fake.fail_next("update" if call == "edit" else "send", status, **options)
        with pytest.raises(Exception) as failed:
            if call == "edit":
                await api.update(service, chain, card, {"type": "message", "text": "2/3"})
            else:
                await api.send(service, chain, {"type": "message", "text": "# r"})
    assert judged(teams_classify(failed.value)) == expected


@pytest.mark.parametrize(
    ("status", "code", "message", "gone"),
    [
        (
            403,
            "BotNotInConversationRoster",
            "The bot is not part of the conversation roster.",
            True,
        ),
        (403, "ConversationBlockedByUser", "User blocked the conversation with the bot.", True),
        (403, "BotDisabledByAdmin", "The tenant admin disabled this bot.", True),
        (404, "ConversationNotFound", "Conversation not found.", True),
        # An update of a deleted message (microsoft/BotFramework-Services#269): final, but the
        # bot may still post in the conversation.
        (403, "ServiceError", "Unknown", False),
        (404, "ActivityNotFoundInConversation", "Message does not exist in the thread.", False),
        (400, "BadArgument", "Activity type is required.", False),
    ],
)
async def test_teams_answers_that_the_bot_cannot_post_there_any_more(
    teams_server: FakeTeamsServer, status: int, code: str, message: str, gone: bool
) -> None:
    """msteams-docs ``bots/how-to/conversations/conversation-messages.md``, "Status code
    responses": for these codes and messages the developer action is to stop posting to the
    conversation (the bot removed: "App needs to be reinstalled in conversation"; blocked by
    the user; disabled by the admin; the conversation not found). Every answer here is final;
    only those four say the bot is gone (``TeamsError.bot_gone``: its run is cancelled)."""
    from bots.teams.api import TeamsError

    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    teams_server.fake.fail_next("send", status, body=body)
    async with httpx.AsyncClient(timeout=5.0) as http:
        api = TeamsApi(
            http, app_id=TEAMS_ID, app_password=TEAMS_PASSWORD, token_url=teams_server.token_url()
        )
        with pytest.raises(TeamsError) as failed:
            await api.send(teams_server.service_url, "19:c@thread.tacv2", {"type": "message"})
    assert judged(teams_classify(failed.value)) == (False, None)
    assert failed.value.bot_gone is gone


@pytest.mark.parametrize(
    ("error", "status", "expected"),
    [
        ("invalid_client", 401, (False, None)),  # a wrong or expired secret: no retry helps
        ("unauthorized_client", 400, (False, None)),  # an app id the tenant does not know
        ("temporarily_unavailable", 503, (True, None)),
    ],
)
async def test_teams_token_answers(
    teams_server: FakeTeamsServer, error: str, status: int, expected: tuple[bool, float | None]
) -> None:
    """The identity platform's OAuth errors (``{"error": ..., "error_description": ...}``)."""
    body = json.dumps({"error": error, "error_description": f"AADSTS: {error}"}).encode()
    teams_server.fake.fail_next("token", status, body=body)
    async with httpx.AsyncClient(timeout=5.0) as http:
        api = TeamsApi(
            http, app_id=TEAMS_ID, app_password=TEAMS_PASSWORD, token_url=teams_server.token_url()
        )
        with pytest.raises(Exception) as failed:
            await api.send(teams_server.service_url, "19:c@thread.tacv2", {"type": "message"})
    assert judged(teams_classify(failed.value)) == expected


def test_a_teams_retry_after_date_is_read_as_seconds_from_now() -> None:
    """``Retry-After`` may be an HTTP date (RFC 9110 §10.2.3), not only seconds."""
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from bots.teams.api import _retry_after

    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= _retry_after(soon) <= 30
    assert _retry_after("12") == 12.0 and _retry_after("soon") == 0.0
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # past
