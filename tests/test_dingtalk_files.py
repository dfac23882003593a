"""Files attached in DingTalk (issue 20): a ``file`` message kept for its sender's next request
in the conversation, a request quoting a file message, and the download through the robot's
file-download OpenAPI, against the fake DingTalk (``tests.fakes.dingtalk``).

DingTalk delivers files only in a one-to-one chat with the robot; a request in a group can
still quote a file message. Shapes: a ``file`` message as the stream delivers it
(dingtalk-stream-sdk's Rust test resource ``cb_msg_file.json``), a quoted one as third-party
integrations receive it (``text.repliedMsg`` with ``msgType: "file"``).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from bots.dingtalk import files
from bots.dingtalk.api import DingTalkApi, DingTalkError
from bots.dingtalk.delivery import classify_error
from bots.dingtalk.events import translate
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge
from core.models import Attachment
from storage.tables import ChatFile
from tests.chat_app import wait_for
from tests.fakes import FakeLLMServer
from tests.fakes.dingtalk import (
    CLIENT_ID,
    CLIENT_SECRET,
    CORP,
    FakeDingTalk,
    FakeDingTalkServer,
    bot_message,
)
from tests.test_dingtalk import (  # noqa: F401  (the fixtures)
    USER,
    DingTalkBot,
    DingTalkFactory,
    dingtalk,
)

NOTES = b"# Heat pump notes\n\nA heat pump moves heat; its COP is about 3 to 4 in winter.\n"


def answers(bot: DingTalkBot, conversation: str = "cid_single_1") -> list[str]:
    return [s.text for s in bot.fake.sent_to(conversation) if s.title == "Fathom"]


async def attachments_of(bot: DingTalkBot, user: str = USER) -> list[list[dict[str, Any]]]:
    """Each delivered run's attachments, newest run first."""
    return [list(run.attachments or []) for run in await bot.served.delivered(user)]


# -- inbound ----------------------------------------------------------------------------------


def test_a_file_message_becomes_an_attachment_and_a_quote_of_one_attaches_it() -> None:
    fake = FakeDingTalk()
    data = bot_message(fake, None, file=("code+1/==", "heat pumps.pdf"), msg_id="m1")
    request = translate(data, files_window=600)
    assert request is not None and request.files_only and request.readable
    (file,) = request.message.attachments
    assert (file.id, file.name, file.attached_by, file.url) == (
        "code+1/==",
        "heat pumps.pdf",
        "Alice",
        None,
    )
    assert file.attacher_id == "staff_1"  # the sender's id beside their nickname (issue 54)
    assert request.message.earlier_files == f"dingtalk:{CORP}:cid_single_1:staff_1"
    assert request.message.earlier_window == 600
    # A request quoting a file message carries that file (attached by who sent it).
    quoting = bot_message(fake, "/research costs", quoted_file=("code+2", "a.md"), group=True)
    request = translate(quoting, files_window=600)
    assert request is not None and not request.files_only
    assert [(a.id, a.attached_by) for a in request.message.attachments] == [("code+2", "Bob")]
    # Not the requester's file: who sent it is not known by id (the quote gives no senderId).
    assert [a.attacher_id for a in request.message.attachments] == ["?"]
    named = bot_message(
        fake, "/research costs", quoted_file=("code+3", "b.md"), quoted_sender="$:LWCP_v1:$bob"
    )
    request = translate(named, files_window=600)
    assert request is not None
    assert [a.attacher_id for a in request.message.attachments] == ["$:LWCP_v1:$bob"]
    # Files sent alone are not kept when the window is off; a file without a code is none.
    off = translate(data, files_window=0)
    assert off is not None and off.message.earlier_files is None
    broken = bot_message(fake, None, file=("", "x.pdf"))
    request = translate(broken)
    assert request is not None and not request.readable and not request.message.attachments


async def test_a_file_then_the_same_users_research_reads_it_and_others_do_not(
    dingtalk: DingTalkFactory,  # noqa: F811
    llm_server: FakeLLMServer,
) -> None:
    bot = await dingtalk()
    code = bot.fake.add_file(NOTES)
    await bot.send(bot.message(None, file=(code, "notes.md"), msg_id="msg_file1"))
    kept = await wait_for(lambda: [a for a in answers(bot) if "Got" in a])
    assert "notes.md" in kept[0] and "within 10 min" in kept[0]
    # Another user's request in another chat does not take it ...
    other = bot.message(
        "/research heat pumps depth=1",
        msg_id="msg_other",
        sender_staff_id="staff_2",
        conversation="cid_single_2",
    )
    await bot.send(other)
    (theirs,) = await bot.served.delivered(f"dingtalk:{CORP}:staff_2")
    assert not theirs.attachments and bot.fake.calls_to("file_code") == []
    # ... the sender's next request in that chat does, and reads it (DingTalk fails once).
    bot.fake.fail_next("file_code", status=500)
    await bot.send(bot.message("/research heat pumps depth=1", msg_id="msg_r1"))
    (run,) = await bot.served.delivered(USER)
    assert run.status == "succeeded" and run.attachments_read == 1
    (attached,) = run.attachments or []
    assert (attached["id"], attached["name"], attached["attached_by"]) == (
        code,
        "notes.md",
        "Alice",
    )
    exchanges = bot.fake.calls_to("file_code")
    assert len(exchanges) == 2  # the 500, then the exchange that worked
    assert all(c.body == {"downloadCode": code, "robotCode": CLIENT_ID} for c in exchanges)
    assert exchanges[-1].token in bot.fake.tokens
    (get,) = bot.fake.file_gets
    assert "x-acs-dingtalk-access-token" not in get
    # Its passages reached the writer, and the report cites it.
    prompt = str(llm_server.fake.requests_for("writer")[-1].body["messages"][-1]["content"])
    assert "notes.md (attached by Alice)" in prompt and "COP is about 3 to 4" in prompt
    report = "\n".join(s.text for s in bot.fake.sent_to("cid_single_1") if s.title != "Fathom")
    assert "notes.md (attached by Alice)" in report
    # Taken once: the next request has none.
    await bot.send(bot.message("/research wind power depth=1", msg_id="msg_r2"))
    newest, _ = await bot.served.delivered(USER, 2)
    assert not newest.attachments


async def test_a_file_over_the_limit_is_not_read_and_the_report_says_why(
    dingtalk: DingTalkFactory,  # noqa: F811
) -> None:
    """DingTalk's file message gives no size: the limit is met while downloading."""
    bot = await dingtalk(FATHOM_ATTACHMENT_MAX_BYTES="1024")
    code = bot.fake.add_file(b"a" * 4096)
    await bot.send(bot.message(None, file=(code, "big.txt"), msg_id="msg_big"))
    await wait_for(lambda: answers(bot))
    await bot.send(bot.message("/research heat pumps depth=1", msg_id="msg_big2"))
    (run,) = await bot.served.delivered(USER)
    assert run.status == "succeeded" and run.attachments_read == 0
    assert 'The attached file "big.txt" was not read: it is larger than' in (
        run.report_markdown or ""
    )
    assert len(bot.fake.file_gets) == 1  # not downloaded again: too large is final


async def test_a_file_is_not_taken_after_the_window_nor_by_another_conversation(
    dingtalk: DingTalkFactory,  # noqa: F811
) -> None:
    bot = await dingtalk(FATHOM_DINGTALK_FOLLOWUP_WINDOW="1")
    code = bot.fake.add_file(NOTES)
    await bot.send(bot.message(None, file=(code, "notes.md"), msg_id="msg_w1"))
    await wait_for(lambda: [a for a in answers(bot) if "Got" in a])
    elsewhere = bot.message("/research tides depth=1", msg_id="msg_w2", conversation="cid_9")
    await bot.send(elsewhere)
    (run,) = await bot.served.delivered(USER)
    assert not run.attachments
    # The file has waited longer than the 1 s window (aged in the database, not slept on).
    async with bot.served.database.sessionmaker.begin() as session:
        then = datetime.now(UTC) - timedelta(seconds=2)
        await session.execute(update(ChatFile).values(created_at=then))
    await bot.send(bot.message("/research heat pumps depth=1", msg_id="msg_w3"))
    newest, _ = await bot.served.delivered(USER, 2)
    assert not newest.attachments


async def test_a_request_quoting_a_file_message_reads_that_file(
    dingtalk: DingTalkFactory,  # noqa: F811
) -> None:
    bot = await dingtalk(FATHOM_DINGTALK_FOLLOWUP_WINDOW="0")
    code = bot.fake.add_file(NOTES)
    data = bot.message(
        "/research heat pumps depth=1", group=True, msg_id="msg_q1", quoted_file=(code, "a.md")
    )
    assert (await bot.send(data)).status_code == 200
    (run,) = await bot.served.delivered(USER)
    assert [(a["id"], a["attached_by"]) for a in run.attachments or []] == [(code, "Bob")]
    assert run.attachments_read == 1
    assert run.thread_key == f"dingtalk:{CORP}:cid_group_1:msg_q1"  # a new research


async def test_a_file_of_a_kind_not_read_gets_the_not_read_answer(
    dingtalk: DingTalkFactory,  # noqa: F811
) -> None:
    bot = await dingtalk()
    await bot.send(bot.message(None, file=(bot.fake.add_file(b"PK"), "data.zip"), msg_id="m_z"))
    (answer,) = await wait_for(lambda: answers(bot))
    assert answer.startswith("📎 Not read: data.zip (not a file I read")
    # Quoted with a request: the research goes on without it, and says so once.
    zipped = bot.fake.add_file(b"PK")
    quoting = bot.message("/research x depth=1", msg_id="m_q", quoted_file=(zipped, "b.zip"))
    await bot.send(quoting)
    (run,) = await bot.served.delivered(USER)
    assert not run.attachments
    notes = await wait_for(lambda: [a for a in answers(bot) if "b.zip" in a])
    assert notes == [notes[0]] and "The research goes on without them" in notes[0]
    # A Chinese file name is answered in Chinese.
    await bot.send(bot.message(None, file=(bot.fake.add_file(b"x"), "数据.zip"), msg_id="m_c"))
    assert (await wait_for(lambda: [a for a in answers(bot) if "数据.zip" in a]))[0].startswith(
        "📎 未读取："
    )


async def test_a_redelivered_file_message_is_kept_once(
    dingtalk: DingTalkFactory,  # noqa: F811
) -> None:
    bot = await dingtalk()
    code = bot.fake.add_file(NOTES)
    data = bot.message(None, file=(code, "notes.md"), msg_id="msg_twice")
    for _ in range(3):
        assert (await bot.send(data)).status_code == 200
    await wait_for(lambda: answers(bot))
    # Each delivery was judged before its 200; stopping the app drains every answer spawned.
    await asyncio.to_thread(bot.served.server.stop)
    assert len(answers(bot)) == 1
    scope = f"dingtalk:{CORP}:cid_single_1:staff_1"
    rows = await bot.served.store.files.take_files(scope, datetime(2000, 1, 1, tzinfo=UTC))
    assert [r["id"] for r in rows] == [code]


async def test_in_stream_mode_a_file_then_a_request_takes_it(
    dingtalk: DingTalkFactory,  # noqa: F811
) -> None:
    bot = await dingtalk(mode="stream")
    await wait_for(lambda: bot.fake.stream_open == 1)
    code = bot.fake.add_file(NOTES)
    data = bot.message(None, file=(code, "notes.md"), msg_id="msg_sf")
    assert (await bot.push(data, message_id="s-1"))["code"] == 200
    assert (await bot.push(data, message_id="s-2"))["code"] == 200  # redelivered
    await wait_for(lambda: answers(bot))
    await bot.push(bot.message("/research heat pumps depth=1", msg_id="msg_sr"))
    (run,) = await bot.served.delivered(USER)
    assert [a["id"] for a in run.attachments or []] == [code]
    assert run.attachments_read == 1 and len(answers(bot)) == 1


# -- the download ---------------------------------------------------------------------------


@pytest.fixture
def api(dingtalk_api: DingTalkApi) -> DingTalkApi:
    return dingtalk_api


def attachment(code: str, name: str = "notes.md") -> Attachment:
    return Attachment(id=code, name=name, attached_by="Alice")


async def test_a_file_is_read_with_the_token_and_the_storage_gets_none(
    api: DingTalkApi,
    dingtalk_server: FakeDingTalkServer,
) -> None:
    fake = dingtalk_server.fake
    code = fake.add_file(NOTES)
    assert await files.download(api, attachment(code), 1000) == NOTES
    (call,) = fake.calls_to("file_code")
    assert call.body == {"downloadCode": code, "robotCode": CLIENT_ID}
    assert call.token in fake.tokens  # the app's access token
    (get,) = fake.file_gets
    assert "x-acs-dingtalk-access-token" not in get and "content-type" not in get


async def test_over_the_limit_the_download_stops(
    api: DingTalkApi,
    dingtalk_server: FakeDingTalkServer,
) -> None:
    code = dingtalk_server.fake.add_file(b"x" * 5000)
    with pytest.raises(AttachmentTooLarge):
        await files.download(api, attachment(code), 4999)
    assert await files.download(api, attachment(code), 5000) == b"x" * 5000


async def test_dingtalks_refusals_are_final_and_outages_retried(
    api: DingTalkApi,
    dingtalk_server: FakeDingTalkServer,
) -> None:
    fake = dingtalk_server.fake
    code = fake.add_file(NOTES)
    fake.expired_codes.add(code)
    with pytest.raises(AttachmentRefused, match="downloadCode"):
        await files.download(api, attachment(code), 1000)
    fake.expired_codes.clear()
    fake.files_forbidden = True
    with pytest.raises(AttachmentRefused, match="qyapi_robot_sendmsg"):
        await files.download(api, attachment(code), 1000)
    fake.files_forbidden = False
    async with httpx.AsyncClient(timeout=5.0) as http:
        other = DingTalkApi(
            http,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            api_url=dingtalk_server.url,
            robot_code="another-robot",
        )
        with pytest.raises(AttachmentRefused, match=r"robot\.not\.exist"):
            await files.download(other, attachment(code), 1000)
    # Transient: a 500 once (then it works), throttling, the storage's outage or HTML page.
    for kind, status, body in (
        ("file_code", 500, None),
        ("file_code", 429, None),
        ("file_code", 502, "html"),
        ("file_get", 503, "empty"),
        ("file_get", 404, "html"),
    ):
        fake.fail_next(kind, status=status, body=body)
        with pytest.raises(DingTalkError) as raised:
            await files.download(api, attachment(code), 1000)
        failure = classify_error(raised.value)
        assert failure.retryable, (kind, status, body)
        assert await files.download(api, attachment(code), 1000) == NOTES
    # The storage's own refusal (OSS's XML AccessDenied) is final.
    fake.fail_next("file_get", status=403, body="text")
    with pytest.raises(AttachmentRefused, match="HTTP 403"):
        await files.download(api, attachment(code), 1000)


async def test_an_address_off_the_allow_list_is_never_read(
    api: DingTalkApi,
    dingtalk_server: FakeDingTalkServer,
) -> None:
    fake = dingtalk_server.fake
    code = fake.add_file(NOTES)
    fake.base_url = "http://127.0.0.2:9"  # the downloadUrl it answers points elsewhere
    with pytest.raises(AttachmentRefused, match="not DingTalk's storage"):
        await files.download(api, attachment(code), 1000)
    assert fake.file_gets == []


def test_the_storage_allow_list() -> None:
    api = "https://api.dingtalk.com"
    oss = "http://wukong-file-im-zjk.oss-cn-zhangjiakou.aliyuncs.com/ddmedia%2Fa.file?x=1"
    url = files.storage_url(oss, api)
    assert url is not None and url.scheme == "https" and url.query == b"x=1"
    assert files.storage_url("https://static.dingtalk.com/a", api) is not None
    assert files.storage_url("http://127.0.0.1:5/a", "http://127.0.0.1:5") is not None
    for bad in (
        "https://evil.example/a",
        "https://dingtalk.com.evil.example/a",
        "https://aliyuncs.com/a",
        "https://bucket.aliyuncs.com/a",  # not an OSS endpoint
        "https://user:pw@static.dingtalk.com/a",
        "https://static.dingtalk.com:8443/a",
        "ftp://static.dingtalk.com/a",
        "http://127.0.0.1:6/a",
        "not a url",
    ):
        assert files.storage_url(bad, api) is None, bad


async def test_a_redirect_is_followed_only_on_the_allow_list() -> None:
    """The real hosts (an OSS bucket over https, an http address upgraded), without a network:
    a redirect to another bucket is followed, one off the list is not."""
    oss = "wukong-file-im-zjk.oss-cn-zhangjiakou.aliyuncs.com"
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        path = request.url.path
        if path == "/v1.0/oauth2/accessToken":
            return httpx.Response(200, json={"accessToken": "t", "expireIn": 7200})
        if path == "/v1.0/robot/messageFiles/download":
            code = json.loads(request.read())["downloadCode"]
            return httpx.Response(200, json={"downloadUrl": f"http://{oss}/{code}"})
        if request.url.host == oss and path == "/good":
            other = "https://b2.oss-cn-beijing.aliyuncs.com/x"
            return httpx.Response(302, headers={"location": other})
        if request.url.host == oss and path == "/evil":
            return httpx.Response(302, headers={"location": "https://evil.example/x"})
        if request.url.host == "b2.oss-cn-beijing.aliyuncs.com":
            return httpx.Response(200, content=NOTES)
        return httpx.Response(500)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        api = DingTalkApi(
            http, client_id=CLIENT_ID, client_secret="s", api_url="https://api.dingtalk.com"
        )
        assert await files.download(api, attachment("good"), 1000) == NOTES
        assert f"https://{oss}/good" in seen  # upgraded to https
        with pytest.raises(AttachmentRefused, match="not DingTalk's storage"):
            await files.download(api, attachment("evil"), 1000)
    assert not any("evil.example" in url for url in seen)
