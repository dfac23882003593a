"""Downloading the files of Feishu messages: ``FeishuThread.download`` with the real client
against the fake's message resource API (``GET /open-apis/im/v1/messages/:message_id/
resources/:file_key?type=file``, "获取消息中的资源文件"), and how each answer is judged: the
bytes to the tenant token, Feishu's final codes (234003 not in the message, 234004 the bot is
not in the chat, 234037 over Feishu's 100 MB) refused for good, anything else retried.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from bots.feishu.api import FeishuApi, FeishuError
from bots.feishu.delivery import FeishuThread, classify_error
from core.chat.stores import RunRecord
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge
from core.models import Attachment
from core.values import RunStatus, ThreadKey
from tests.fakes.feishu import APP_ID, APP_SECRET, TENANT, FakeFeishu, FakeFeishuServer
from tests.fakes.server import BROKEN_BODIES

PDF = b"%PDF-1.4\n" + b"x" * 5000


@pytest.fixture
def server(feishu_server: FakeFeishuServer) -> FakeFeishuServer:
    feishu_server.fake.add_file("om_file", "file_v3_00ab_pdf", PDF, "报告.pdf", "application/pdf")
    return feishu_server


@pytest.fixture
async def api(server: FakeFeishuServer) -> AsyncIterator[FeishuApi]:
    client = FeishuApi(APP_ID, APP_SECRET, server.url)
    yield client
    await client.aclose()


def thread(api: FeishuApi) -> FeishuThread:
    """The poster of a run whose request was the file's message."""
    run = RunRecord(
        id="r" * 32,
        thread_id=1,
        thread_key=f"feishu:{TENANT}:oc_chat_1:om_file",
        thread=ThreadKey.parse(f"feishu:{TENANT}:oc_chat_1:om_file"),
        topic="heat pumps",
        depth=1,
        strategy="iterative",
        status=RunStatus.RUNNING,
        rounds_done=0,
        requested_by=f"feishu:{TENANT}:ou_user_1",
        dedupe_key=None,
        cancel_requested=False,
        progress_message_id=None,
        error=None,
        notes=[],
        report_markdown=None,
        llm_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        searches=0,
        created_at=datetime.now(UTC),
        started_at=None,
        finished_at=None,
        heartbeat_at=None,
    )
    return FeishuThread(run, api)


def the_file(key: str = "file_v3_00ab_pdf", message_id: str | None = "om_file") -> Attachment:
    return Attachment(id=key, name="报告.pdf", message_id=message_id, attached_by="ou_user_1")


def resource_calls(fake: FakeFeishu) -> list[tuple[str, str, dict[str, str]]]:
    return [(c.path, c.token, c.query) for c in fake.calls_to("resource")]


async def test_a_file_is_read_from_its_message_with_the_tenant_token(
    api: FeishuApi, server: FakeFeishuServer
) -> None:
    data = await thread(api).download(the_file(), 1_000_000)
    assert data == PDF
    ((path, token, query),) = resource_calls(server.fake)
    assert path == "/open-apis/im/v1/messages/om_file/resources/file_v3_00ab_pdf"
    assert query == {"type": "file"}
    assert token in server.fake.tokens  # a tenant token the fake issued, not a guess


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_file_over_the_limit_is_too_large_and_is_not_read_past_it(
    api: FeishuApi, server: FakeFeishuServer, chunked: bool
) -> None:
    """With a Content-Length the download stops before reading; without one, as soon as the
    bytes pass the limit."""
    big = b"y" * 1_000_000
    server.fake.add_file("om_big", "file_big", big, "big.txt", "text/plain", chunked=chunked)
    with pytest.raises(AttachmentTooLarge):
        await thread(api).download(the_file("file_big", "om_big"), 100_000)


@pytest.mark.parametrize(
    ("code", "too_large"),
    [(234003, False), (234004, False), (234043, False), (230110, False), (234037, True)],
)
async def test_final_answers_of_feishu_refuse_the_file(
    api: FeishuApi, server: FakeFeishuServer, code: int, too_large: bool
) -> None:
    server.fake.fail_next("resource", status=400, code=code)
    with pytest.raises(AttachmentRefused) as refused:
        await thread(api).download(the_file(), 1_000_000)
    assert isinstance(refused.value, AttachmentTooLarge) == too_large
    assert str(refused.value.reason) and "code" not in str(refused.value.reason)


async def test_a_file_not_in_the_message_is_refused(
    api: FeishuApi, server: FakeFeishuServer
) -> None:
    with pytest.raises(AttachmentRefused, match="not in that message"):
        await thread(api).download(the_file("file_v3_unknown"), 1_000_000)


async def test_ids_that_could_change_the_path_are_refused_without_a_call(
    api: FeishuApi, server: FakeFeishuServer
) -> None:
    for attachment in (
        the_file("../../bot/v3/info"),
        the_file("file_k?type=image"),
        the_file(message_id="om_1/../om_2"),
        the_file(message_id=None),
    ):
        with pytest.raises(AttachmentRefused):
            await thread(api).download(attachment, 1_000_000)
    assert resource_calls(server.fake) == []


@pytest.mark.parametrize("body", [None, *BROKEN_BODIES])
async def test_an_outage_is_retryable_and_the_next_try_reads_the_file(
    api: FeishuApi, server: FakeFeishuServer, body: str | None
) -> None:
    """A 500 (Feishu's JSON or a proxy's HTML page, an empty, cut-off or text body) is not the
    file's fault: the run's retry reads it."""
    server.fake.fail_next("resource", status=500, body=body)
    poster = thread(api)
    with pytest.raises(FeishuError) as failed:
        await poster.download(the_file(), 1_000_000)
    assert poster.classify(failed.value).retryable
    assert await poster.download(the_file(), 1_000_000) == PDF


async def test_an_html_page_instead_of_a_file_is_retried(
    api: FeishuApi, server: FakeFeishuServer
) -> None:
    """A proxy's sign-in or error page with HTTP 200 is not the PDF: retried, never read as
    the file; an HTML file itself is read."""
    server.fake.fail_next("resource", status=200, body="html")
    poster = thread(api)
    with pytest.raises(FeishuError) as failed:
        await poster.download(the_file(), 1_000_000)
    assert poster.classify(failed.value).retryable
    page = b"<html><body><p>Heat pumps</p></body></html>"
    server.fake.add_file("om_h", "file_html", page, "page.html", "text/html")
    html = Attachment(id="file_html", name="page.html", message_id="om_h")
    assert await poster.download(html, 1_000_000) == page


async def test_a_rate_limit_waits_as_feishu_says(api: FeishuApi, server: FakeFeishuServer) -> None:
    server.fake.fail_next("resource", status=429)
    with pytest.raises(FeishuError) as failed:
        await thread(api).download(the_file(), 1_000_000)
    judged = classify_error(failed.value)
    assert judged.retryable and judged.retry_after == 1.0


async def test_an_expired_tenant_token_is_fetched_again_once(
    api: FeishuApi, server: FakeFeishuServer
) -> None:
    assert await thread(api).download(the_file(), 1_000_000) == PDF
    server.fake.tokens.clear()  # Feishu no longer knows the cached token
    assert await thread(api).download(the_file(), 1_000_000) == PDF
    tokens = [token for _, token, _ in resource_calls(server.fake)]
    assert len(tokens) == 3 and tokens[0] == tokens[1] != tokens[2]
    assert len(server.fake.calls_to("token")) == 2


async def test_a_missing_permission_is_final(api: FeishuApi, server: FakeFeishuServer) -> None:
    server.fake.fail_next("resource", status=400, code=99991672)
    with pytest.raises(AttachmentRefused, match="permission"):
        await thread(api).download(the_file(), 1_000_000)
