"""The fake Slack behaves like Slack as seen through the real `slack_sdk` AsyncWebClient."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from urllib.parse import parse_qs

import httpx
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.fakes import FakeSlackServer
from tests.fakes.slack import (
    app_mention_event,
    event_callback_body,
    sign,
    slash_command_body,
    url_verification_body,
)

# Slack's published example (docs.slack.dev/authentication/verifying-requests-from-slack).
DOC_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
DOC_TIMESTAMP = 1531420618
DOC_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&"
    b"channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&"
    b"command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2F"
    b"commands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&"
    b"trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
DOC_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"


@pytest.fixture
def server(slack_server: FakeSlackServer) -> FakeSlackServer:
    return slack_server


def client(server: FakeSlackServer, token: str = "xoxb-test", **kw: object) -> AsyncWebClient:
    return AsyncWebClient(token=token, base_url=server.api_url, **kw)  # type: ignore[arg-type]


async def test_auth_test_reports_bot_identity(server: FakeSlackServer) -> None:
    res = await client(server).auth_test()
    assert (res["user_id"], res["team_id"], res["bot_id"]) == ("UBOT", "T0001", "BBOT")
    assert server.fake.calls_to("auth.test")[0].token == "xoxb-test"


async def test_post_then_update_same_ts(server: FakeSlackServer) -> None:
    web = client(server)
    root = await web.chat_postMessage(channel="C1", text="Researching AI chips…")
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "0/3"}}]
    progress = await web.chat_postMessage(
        channel="C1", text="0/3", blocks=blocks, thread_ts=root["ts"]
    )
    assert float(progress["ts"]) > float(root["ts"])
    for i in (1, 2, 3):
        res = await web.chat_update(channel="C1", ts=progress["ts"], text=f"{i}/3 searches")
        assert res["ts"] == progress["ts"]
    fake = server.fake
    current = fake.messages[("C1", progress["ts"])]
    assert current["text"] == "3/3 searches"
    assert current["blocks"] == blocks  # omitted blocks are kept, as on Slack
    assert current["thread_ts"] == root["ts"]
    assert [m["text"] for m in fake.history] == ["Researching AI chips…", "0/3"]
    assert [c.params["ts"] for c in fake.calls_to("chat.update")] == [progress["ts"]] * 3


def button(action_id: str, label: str = "Stop", **extra: str) -> dict[str, object]:
    text = {"type": "plain_text", "text": label}
    return {"type": "button", "action_id": action_id, "value": "run", "text": text, **extra}


@pytest.mark.parametrize(
    "elements",
    [
        [button("a"), button("a")],  # action ids are unique within a message
        [button("a", "x" * 76)],  # a label is at most 75 characters
        [button("a", style="warning")],  # styles are primary and danger only
        [{**button("a"), "text": {"type": "mrkdwn", "text": "*Stop*"}}],  # plain text only
        [],  # an actions block has 1 to 25 elements
    ],
)
async def test_malformed_buttons_are_refused_like_slack_does(
    server: FakeSlackServer, elements: list[dict[str, object]]
) -> None:
    blocks = [{"type": "actions", "elements": elements}]
    with pytest.raises(SlackApiError) as err:
        await client(server).chat_postMessage(channel="C1", text="0/3", blocks=blocks)
    assert err.value.response["error"] == "invalid_blocks"
    good = [{"type": "actions", "elements": [button("a"), button("b", style="danger")]}]
    posted = await client(server).chat_postMessage(channel="C1", text="0/3", blocks=good)
    removed = await client(server).chat_update(channel="C1", ts=posted["ts"], text="3/3", blocks=[])
    assert removed["ok"] and server.fake.messages[("C1", posted["ts"])]["blocks"] == []


async def test_update_unknown_ts_is_message_not_found(server: FakeSlackServer) -> None:
    with pytest.raises(SlackApiError) as err:
        await client(server).chat_update(channel="C1", ts="1.000001", text="x")
    assert err.value.response["error"] == "message_not_found"


async def test_form_encoded_blocks_are_decoded(server: FakeSlackServer) -> None:
    blocks = [{"type": "markdown", "text": "# Report"}]
    res = await client(server).api_call(
        "chat.postMessage", data={"channel": "C1", "text": "r", "blocks": json.dumps(blocks)}
    )
    assert server.fake.messages[("C1", res["ts"])]["blocks"] == blocks


async def test_rate_limited_without_and_with_retry_handler(server: FakeSlackServer) -> None:
    server.fake.fail_next("chat.postMessage", status=429, retry_after=1)
    with pytest.raises(SlackApiError) as err:  # the SDK's default handlers don't retry 429
        await client(server).chat_postMessage(channel="C1", text="hi")
    assert err.value.response.status_code == 429
    assert err.value.response.headers["Retry-After"] == "1"
    assert err.value.response["error"] == "ratelimited"

    server.fake.fail_next("chat.postMessage", status=429, retry_after=1)
    retrying = client(server, retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=1)])
    started = time.monotonic()
    res = await retrying.chat_postMessage(channel="C1", text="hi")
    assert res["ok"] and time.monotonic() - started >= 1.0  # honoured Retry-After
    assert len(server.fake.calls_to("chat.postMessage")) == 3


async def test_server_error_and_scripted_error(server: FakeSlackServer) -> None:
    server.fake.fail_next("chat.update", status=503)
    server.fake.fail_next("chat.postMessage", error="channel_not_found", times=2)
    web = client(server)
    with pytest.raises(SlackApiError) as err:
        await web.chat_update(channel="C1", ts="1.1", text="x")
    assert err.value.response.status_code == 503
    for _ in range(2):
        with pytest.raises(SlackApiError, match="channel_not_found"):
            await web.chat_postMessage(channel="C1", text="x")
    assert (await web.chat_postMessage(channel="C1", text="x"))["ok"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"text": "x" * 40_001}, "msg_too_long"),
        ({"text": "t", "blocks": [{"type": "divider"}] * 51}, "invalid_blocks"),
        ({"text": "t", "blocks": [{"type": "markdown", "text": "m" * 12_001}]}, "invalid_blocks"),
        (
            {"text": "t", "blocks": [{"type": "markdown", "text": "m" * 6_001}] * 2},
            "invalid_blocks",
        ),
    ],
)
async def test_oversize_messages_are_rejected(
    server: FakeSlackServer, kwargs: dict[str, object], error: str
) -> None:
    web = client(server)
    with pytest.raises(SlackApiError) as err:
        await web.chat_postMessage(channel="C1", **kwargs)  # type: ignore[arg-type]
    assert err.value.response["error"] == error
    ok = await web.chat_postMessage(channel="C1", text="small")
    with pytest.raises(SlackApiError) as err:
        await web.chat_update(channel="C1", ts=ok["ts"], **kwargs)  # type: ignore[arg-type]
    assert err.value.response["error"] == error
    assert server.fake.messages[("C1", ok["ts"])]["text"] == "small"


async def test_blocks_not_a_list_is_invalid(server: FakeSlackServer) -> None:
    with pytest.raises(SlackApiError, match="invalid_blocks"):
        await client(server).api_call(
            "chat.postMessage", json={"channel": "C1", "text": "t", "blocks": {"type": "divider"}}
        )


async def test_files_upload_v2_end_to_end(server: FakeSlackServer) -> None:
    report = "# Report\n\nÜber-long findings.\n" * 200
    res = await client(server).files_upload_v2(
        content=report,
        filename="report.md",
        title="AI chips report",
        channel="C1",
        thread_ts="1700000000.000100",
        initial_comment="Full report attached",
    )
    file_id = res["file"]["id"]
    stored = server.fake.files[file_id]
    assert stored["content"] == report.encode()
    assert stored["title"] == "AI chips report"
    assert (stored["channel"], stored["thread_ts"]) == ("C1", "1700000000.000100")
    step1 = server.fake.calls_to("files.getUploadURLExternal")[0].params
    assert (step1["filename"], int(step1["length"])) == ("report.md", len(report.encode()))


async def test_invalid_token_is_invalid_auth(server: FakeSlackServer) -> None:
    with pytest.raises(SlackApiError) as err:
        await client(server, token="xoxp-user").chat_postMessage(channel="C1", text="x")
    assert err.value.response["error"] == "invalid_auth"
    assert server.fake.history == []


async def test_response_url_and_misc_methods(server: FakeSlackServer) -> None:
    fake, web = server.fake, client(server)
    hook = AsyncWebhookClient(fake.response_url("r1"))
    sent = await hook.send(text="Working on it", response_type="ephemeral")
    assert sent.status_code == 200
    assert fake.responses_to("r1") == [{"text": "Working on it", "response_type": "ephemeral"}]
    assert (await web.chat_postEphemeral(channel="C1", user="U1", text="hi"))["message_ts"]
    assert (await web.conversations_info(channel="C1"))["channel"]["id"] == "C1"
    assert (await web.users_info(user="U9"))["user"]["id"] == "U9"
    assert (await web.reactions_add(channel="C1", timestamp="1.1", name="eyes"))["ok"]
    with pytest.raises(SlackApiError, match="unknown_method"):
        await web.api_call("chat.nope")


def test_http_control_routes(server: FakeSlackServer) -> None:
    with httpx.Client(base_url=server.url) as http:
        http.post("/_fake/fail_next", json={"method": "auth.test", "error": "account_inactive"})
        http.post("/api/auth.test", headers={"Authorization": "Bearer xoxb-1"})
        assert http.post("/api/auth.test", data={"token": "xoxb-1"}).json()["ok"] is True
        calls = http.get("/_fake/calls").json()
        assert [c["token"] for c in calls] == ["xoxb-1", "xoxb-1"]
        http.post("/_fake/reset")
        assert http.get("/_fake/calls").json() == []


def test_sign_matches_slack_doc_vector_and_sdk_verifier() -> None:
    headers = sign(DOC_BODY, DOC_SECRET, DOC_TIMESTAMP)
    assert headers == {
        "X-Slack-Request-Timestamp": str(DOC_TIMESTAMP),
        "X-Slack-Signature": DOC_SIGNATURE,
    }
    verifier = SignatureVerifier(DOC_SECRET)
    body = slash_command_body("AI chips depth=3")
    fresh = sign(body, "s3cret")
    assert SignatureVerifier("s3cret").is_valid(
        body, fresh["X-Slack-Request-Timestamp"], fresh["X-Slack-Signature"]
    )
    assert not SignatureVerifier("other").is_valid(
        body, fresh["X-Slack-Request-Timestamp"], fresh["X-Slack-Signature"]
    )
    assert verifier.generate_signature(timestamp=str(DOC_TIMESTAMP), body=DOC_BODY) == DOC_SIGNATURE


def test_inbound_body_builders() -> None:
    form = parse_qs(slash_command_body("AI chips depth=3", response_url="http://x/r"))
    assert form[b"command"] == [b"/research"] and form[b"text"] == [b"AI chips depth=3"]
    assert {b"token", b"team_id", b"trigger_id", b"user_id", b"channel_id"} <= set(form)
    event = app_mention_event("AI chips", thread_ts="1.5")
    envelope = json.loads(event_callback_body(event, event_id="Ev9"))
    assert envelope["type"] == "event_callback" and envelope["event_id"] == "Ev9"
    assert envelope["event"]["text"] == "<@UBOT> AI chips"
    assert envelope["event"]["thread_ts"] == "1.5"
    assert json.loads(url_verification_body("abc"))["challenge"] == "abc"


async def test_bolt_app_acks_responds_and_says_through_the_fake(server: FakeSlackServer) -> None:
    from slack_bolt.async_app import AsyncApp
    from slack_bolt.request.async_request import AsyncBoltRequest

    app = AsyncApp(client=client(server), signing_secret="s3cret")

    @app.command("/research")
    async def research(ack, respond, say, command):  # type: ignore[no-untyped-def]
        await ack()
        await respond(f"Researching {command['text']}")
        await say(text="Report", thread_ts="1700000000.000100")

    body = slash_command_body("AI chips", response_url=server.fake.response_url("cmd1"))
    headers: dict[str, str | Sequence[str]] = {
        **sign(body, "s3cret"),
        "Content-Type": "application/x-www-form-urlencoded",
    }
    res = await app.async_dispatch(AsyncBoltRequest(body=body.decode(), headers=headers))
    assert res.status == 200
    for _ in range(200):  # the listener runs after the ack
        if server.fake.history:
            break
        await asyncio.sleep(0.01)
    assert server.fake.responses_to("cmd1")[0]["text"] == "Researching AI chips"
    assert server.fake.history[0]["thread_ts"] == "1700000000.000100"
    assert server.fake.calls_to("auth.test")  # Bolt verifies its token first


# -- the agent surface: plan blocks and the assistant.threads methods -------------------

#: The plan block of Slack's Block Kit reference ("Plan block", its example), with the task
#: card of "Task card block" (sources).
DOC_PLAN = {
    "type": "plan",
    "title": "Thinking completed",
    "tasks": [
        {
            "task_id": "call_001",
            "title": "Fetched user profile information",
            "status": "in_progress",
            "details": {
                "type": "rich_text",
                "block_id": "viMWO",
                "elements": [
                    {
                        "type": "rich_text_section",
                        "elements": [{"type": "text", "text": "Searched database..."}],
                    }
                ],
            },
        },
        {"task_id": "call_002", "title": "Checked user permissions", "status": "pending"},
        {
            "type": "task_card",
            "task_id": "call_003",
            "title": "Fetching weather data",
            "status": "complete",
            "sources": [{"type": "url", "url": "https://weather.com/", "text": "weather.com"}],
        },
    ],
}


def _broken(**change: object) -> dict[str, object]:
    task = {**DOC_PLAN["tasks"][2], **change}  # type: ignore[index]
    return {**DOC_PLAN, "tasks": [task]}


@pytest.mark.parametrize(
    "plan",
    [
        {**DOC_PLAN, "title": ""},
        {**DOC_PLAN, "tasks": "not a list"},
        _broken(status="done"),
        _broken(task_id=""),
        _broken(title=" "),
        _broken(type="section"),
        _broken(sources=[{"type": "url", "url": "javascript:alert(1)", "text": "x"}]),
        _broken(sources=[{"type": "url", "url": "https://a.example/"}]),
        _broken(output={"type": "section", "elements": []}),
        {**DOC_PLAN, "tasks": [DOC_PLAN["tasks"][1], DOC_PLAN["tasks"][1]]},  # type: ignore[index]
    ],
)
async def test_a_malformed_plan_is_refused_like_slack_does(
    server: FakeSlackServer, plan: dict[str, object]
) -> None:
    with pytest.raises(SlackApiError) as refused:
        await client(server).chat_postMessage(channel="C1", text="plan", blocks=[plan])
    assert refused.value.response["error"] == "invalid_blocks"


async def test_the_documented_plan_is_taken_and_a_workspace_may_refuse_it(
    server: FakeSlackServer,
) -> None:
    posted = await client(server).chat_postMessage(channel="C1", text="plan", blocks=[DOC_PLAN])
    assert server.fake.messages[("C1", posted["ts"])]["blocks"] == [DOC_PLAN]
    server.fake.plan_blocks = False  # a workspace that does not take plan blocks
    with pytest.raises(SlackApiError) as refused:
        await client(server).chat_update(channel="C1", ts=posted["ts"], text="p", blocks=[DOC_PLAN])
    assert refused.value.response["error"] == "invalid_blocks"


async def test_the_thread_status_is_set_cleared_and_checked(server: FakeSlackServer) -> None:
    web = client(server)
    await web.assistant_threads_setStatus(
        channel_id="D1", thread_ts="1.2", status="is thinking…", loading_messages=["a", "b"]
    )
    assert server.fake.statuses == {("D1", "1.2"): ("is thinking…", ["a", "b"])}
    await web.assistant_threads_setStatus(channel_id="D1", thread_ts="1.2", status="")
    assert server.fake.statuses == {}
    for kwargs, code in [
        ({"channel_id": "D1", "thread_ts": "", "status": "x"}, "invalid_thread_ts"),
        ({"channel_id": "", "thread_ts": "1.2", "status": "x"}, "channel_not_found"),
        (
            {"channel_id": "D1", "thread_ts": "1.2", "status": "x", "loading_messages": ["m"] * 11},
            "invalid_arguments",
        ),
    ]:
        with pytest.raises(SlackApiError) as refused:
            await web.assistant_threads_setStatus(**kwargs)  # type: ignore[arg-type]
        assert refused.value.response["error"] == code


async def test_suggested_prompts_and_titles_are_checked(server: FakeSlackServer) -> None:
    web = client(server)
    prompt = {"title": "Latest", "message": "latest developments"}
    await web.assistant_threads_setSuggestedPrompts(
        channel_id="D1", thread_ts="1.2", title="Try", prompts=[prompt]
    )
    assert server.fake.prompts[("D1", "1.2")] == {"title": "Try", "prompts": [prompt]}
    for prompts in ([], [prompt] * 5, [{"title": "", "message": "m"}]):
        with pytest.raises(SlackApiError) as refused:
            await web.assistant_threads_setSuggestedPrompts(
                channel_id="D1", thread_ts="1.2", prompts=prompts
            )
        assert refused.value.response["error"] == "invalid_arguments"
    await web.assistant_threads_setTitle(channel_id="D1", thread_ts="1.2", title="Heat pumps")
    assert server.fake.titles[("D1", "1.2")] == "Heat pumps"
    with pytest.raises(SlackApiError):
        await web.assistant_threads_setTitle(channel_id="D1", thread_ts="1.2", title=" ")
