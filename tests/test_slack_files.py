"""Files attached in Slack: the event's file objects, the download, and the run reading them.

Payload shapes follow Slack's own (https://api.slack.com/types/file: the file object, its
``url_private_download`` needing ``Authorization: Bearer`` with ``files:read``, the Slack
Connect stub ``{"mode": "file_access", "file_access": "check_file_info"}``; deleted files as
``{"id", "mode": "tombstone"}``; Google Drive links as ``mode: external``). The fake Slack
serves hosted files at ``/files-pri/<team>-<id>/<name>`` and answers a token it does not
accept with its HTML sign-in page and HTTP 200, as Slack does.
"""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bots.chat.replies import Replies
from bots.slack.delivery import SlackPosters
from bots.slack.download import (
    NO_ACCESS,
    SlackDownloads,
    allowed_origins,
    download_client,
)
from bots.slack.errors import classify_error
from bots.slack.files import SlackFiles, attached_by, describe_files, describe_pending
from bots.slack.markup import SlackMarkup
from bots.slack.messenger import make_web_client
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge
from core.models import Attachment
from core.words.wording import Language
from storage import Store
from tests.fakes.slack import (
    FILES,
    FakeSlackServer,
)
from tests.runs import new_run
from tests.test_slack_app import BOT_TOKEN

NOTES = (
    "Heat pump field trial notes. In January the defrost cycles cost seven percent of the "
    "heat output at the Oslo site, and the night setback saved little."
)

# -- the event's file objects ------------------------------------------------------------

#: A DM with an upload as Slack sends it (``message``, ``subtype: file_share``, the file
#: object's public fields; https://api.slack.com/events/message/file_share and /types/file).
FILE_SHARE_DM: dict[str, Any] = {
    "type": "message",
    "subtype": "file_share",
    "text": "compare with the 2023 trial depth=1",
    "files": [
        {
            "id": "F0S43PZDF",
            "created": 1531763342,
            "timestamp": 1531763342,
            "name": "trial-2024.pdf",
            "title": "Trial 2024",
            "mimetype": "application/pdf",
            "filetype": "pdf",
            "pretty_type": "PDF",
            "user": "U061F7AUR",
            "editable": False,
            "size": 137531,
            "mode": "hosted",
            "is_external": False,
            "external_type": "",
            "is_public": False,
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "url_private": "https://files.slack.com/files-pri/T061EG9R6-F0S43PZDF/trial-2024.pdf",
            "url_private_download": (
                "https://files.slack.com/files-pri/T061EG9R6-F0S43PZDF/download/trial-2024.pdf"
            ),
            "permalink": "https://acme.slack.com/files/U061F7AUR/F0S43PZDF/trial-2024.pdf",
            "permalink_public": "https://slack-files.com/T061EG9R6-F0S43PZDF-2d9ff9b2e1",
            "has_rich_preview": False,
            "file_access": "visible",
        }
    ],
    "upload": True,
    "user": "U061F7AUR",
    "display_as_bot": False,
    "ts": "1531763348.000001",
    "channel": "D0PNCRP9N",
    "event_ts": "1531763348.000001",
    "channel_type": "im",
}


def test_a_file_share_becomes_an_attachment_with_its_download_address() -> None:
    files = describe_files(FILE_SHARE_DM)
    assert files.unreadable == () and files.pending == ()
    [attachment] = files.attachments
    assert attachment == Attachment(
        id="F0S43PZDF",
        name="trial-2024.pdf",
        mime="application/pdf",
        size=137531,
        url="https://acme.slack.com/files/U061F7AUR/F0S43PZDF/trial-2024.pdf",
        attached_by="U061F7AUR",
        extra={
            "download": "https://files.slack.com/files-pri/T061EG9R6-F0S43PZDF/download/"
            "trial-2024.pdf"
        },
    )


def test_deleted_external_hidden_and_connect_files_are_told_apart() -> None:
    event = dict(
        FILE_SHARE_DM,
        files=[
            {"id": "F1", "mode": "tombstone"},  # deleted since
            {
                "id": "F2",
                "name": "Roadmap",
                "title": "Roadmap",
                "mimetype": "application/vnd.google-apps.document",
                "filetype": "gdoc",
                "mode": "external",
                "is_external": True,
                "external_type": "gdrive",
                "url_private": "https://docs.google.com/document/d/1abc/edit",
            },
            {"id": "F3", "name": "old.txt", "mode": "hidden_by_limit"},
            {  # a Slack Connect channel: details by files.info
                "id": "F4",
                "mode": "file_access",
                "file_access": "check_file_info",
                "created": 0,
                "timestamp": 0,
                "user": "",
            },
            {  # a snippet: hosted text
                "id": "F5",
                "name": "-.txt",
                "title": "Untitled",
                "mimetype": "text/plain",
                "filetype": "text",
                "mode": "snippet",
                "editable": True,
                "size": 42,
                "url_private": "https://files.slack.com/files-pri/T1-F5/-.txt",
                "url_private_download": "https://files.slack.com/files-pri/T1-F5/download/-.txt",
            },
            {"id": "F6", "name": None, "title": "no name, only a title"},  # fields missing
            {"name": "no id"},
            "not an object",
        ],
    )
    files = describe_files(event)
    assert files.unreadable == (
        ("F1", "deleted"),
        ("Roadmap", "external"),
        ("old.txt", "unavailable"),
        ("no id", "unavailable"),
    )
    assert files.pending == ("F4",)
    snippet, untitled = files.attachments
    assert (snippet.name, snippet.mime, snippet.size) == ("-.txt", "text/plain", 42)
    assert snippet.extra["download"].endswith("/download/-.txt")
    assert untitled.name == "no name, only a title" and untitled.extra == {}
    assert untitled.mime is None and untitled.size is None and untitled.url is None


def test_who_attached_is_the_profile_name_else_the_user_id_never_a_mention() -> None:
    assert attached_by({"user": "U1"}) == "U1"
    profile = {"display_name": "", "real_name": "Alice\u202e Lee", "name": "alice"}
    assert attached_by({"user": "U1", "user_profile": profile}) == "Alice Lee"
    assert attached_by({"user": "U1", "user_profile": {"display_name": "ali"}}) == "ali"
    assert describe_files({"files": "nope"}) == SlackFiles()


# -- the download, against the fake Slack ---------------------------------------------------


@pytest.fixture
def server(slack_server: FakeSlackServer) -> FakeSlackServer:
    return slack_server


@pytest.fixture
async def http() -> Any:
    async with download_client() as client:
        yield client


def downloads_for(
    server: FakeSlackServer, http: httpx.AsyncClient, token: str = BOT_TOKEN
) -> SlackDownloads:
    client = make_web_client(token, server.api_url)
    return SlackDownloads(client, http, allowed_origins(server.api_url))


def hosted(server: FakeSlackServer, name: str, content: bytes, **fields: Any) -> Attachment:
    file = server.fake.host_file(name, content, **fields)
    [attachment] = describe_files({"user": "U123", "files": [file]}).attachments
    return attachment


async def test_a_file_is_fetched_with_the_bot_token_from_its_download_address(
    server: FakeSlackServer, http: httpx.AsyncClient
) -> None:
    notes = hosted(server, "notes.txt", NOTES.encode())
    assert await downloads_for(server, http).download(notes, 1_000_000) == NOTES.encode()
    [request] = server.fake.file_requests
    assert request.authorization == f"Bearer {BOT_TOKEN}"
    assert request.path == f"/files-pri/T0001-{notes.id}/download/notes.txt"


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/files-pri/T0001-F1/notes.txt",
        "https://files.slack.com.evil.example/x",
        "http://files.slack.com/files-pri/T0001-F1/notes.txt",  # not https
        "ftp://files.slack.com/x",
        "not a url",
    ],
)
async def test_an_address_off_slacks_file_host_is_refused_without_a_request(
    server: FakeSlackServer, http: httpx.AsyncClient, url: str
) -> None:
    sent: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        sent.append(request)

    http.event_hooks["request"].append(record)
    attachment = Attachment(id="F1", name="notes.txt", extra={"download": url})
    with pytest.raises(AttachmentRefused, match="not on Slack's file host"):
        await downloads_for(server, http).download(attachment, 1_000_000)
    assert sent == []
    assert allowed_origins("https://slack.com/api/") == {("https", "files.slack.com", 443)}


async def test_a_token_without_files_read_gets_the_sign_in_page_refused_naming_the_scope(
    server: FakeSlackServer, http: httpx.AsyncClient
) -> None:
    notes = hosted(server, "notes.txt", NOTES.encode())
    server.fake.files_read = False
    with pytest.raises(AttachmentRefused) as refused:
        await downloads_for(server, http).download(notes, 1_000_000)
    assert refused.value.reason == NO_ACCESS and "files:read" in str(NO_ACCESS)
    # A token Slack does not take at all gets the same page.
    server.fake.files_read = True
    with pytest.raises(AttachmentRefused, match="files:read"):
        await downloads_for(server, http, token="xoxp-not-a-bot").download(notes, 1_000_000)


async def test_an_html_file_is_not_mistaken_for_the_sign_in_page(
    server: FakeSlackServer, http: httpx.AsyncClient
) -> None:
    page = b"<html><body><p>Trial summary</p></body></html>"
    attachment = hosted(server, "summary.html", page)
    assert await downloads_for(server, http).download(attachment, 1_000_000) == page
    server.fake.files_read = False  # the sign-in page has no Content-Disposition
    with pytest.raises(AttachmentRefused, match="files:read"):
        await downloads_for(server, http).download(attachment, 1_000_000)


async def test_gone_files_and_final_answers_are_refused(
    server: FakeSlackServer, http: httpx.AsyncClient
) -> None:
    notes = hosted(server, "notes.txt", NOTES.encode())
    gone = notes.model_copy(update={"extra": {"download": notes.extra["download"] + "x"}})
    with pytest.raises(AttachmentRefused, match="gone"):
        await downloads_for(server, http).download(gone, 1_000_000)


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_an_outage_is_raised_as_retryable_and_the_next_try_succeeds(
    server: FakeSlackServer, http: httpx.AsyncClient, status: int
) -> None:
    notes = hosted(server, "notes.txt", NOTES.encode())
    downloads = downloads_for(server, http)
    server.fake.fail_next(FILES, status=status, retry_after=3)
    with pytest.raises(httpx.HTTPStatusError) as failed:
        await downloads.download(notes, 1_000_000)
    judged = classify_error(failed.value)
    assert judged.retryable and judged.reason.startswith(f"HTTP {status}")
    assert judged.retry_after == (3.0 if status == 429 else 0.0)
    assert await downloads.download(notes, 1_000_000) == NOTES.encode()
    assert len(server.fake.file_requests) == 2


async def test_a_network_failure_is_retryable(http: httpx.AsyncClient) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    api = f"http://127.0.0.1:{port}/api/"
    downloads = SlackDownloads(make_web_client(BOT_TOKEN, api), http, allowed_origins(api))
    attachment = Attachment(
        id="F1", name="n.txt", extra={"download": f"http://127.0.0.1:{port}/files-pri/T-F1/n.txt"}
    )
    with pytest.raises(httpx.TransportError) as failed:
        await downloads.download(attachment, 1_000)
    assert classify_error(failed.value).retryable


async def test_a_file_over_the_limit_stops_the_download(
    server: FakeSlackServer, http: httpx.AsyncClient
) -> None:
    big = hosted(server, "big.txt", b"x" * 50_000)
    with pytest.raises(AttachmentTooLarge):
        await downloads_for(server, http).download(big, 10_000)


async def test_redirects_are_followed_on_the_file_host_only(
    server: FakeSlackServer, http: httpx.AsyncClient
) -> None:
    notes = hosted(server, "notes.txt", NOTES.encode())
    moved = hosted(server, "moved.txt", b"moved here")
    server.fake.file_redirects[moved.id] = notes.extra["download"]
    assert await downloads_for(server, http).download(moved, 1_000_000) == NOTES.encode()
    assert [r.authorization for r in server.fake.file_requests] == [f"Bearer {BOT_TOKEN}"] * 2
    # Slack sends a token that may not read a file to the workspace's sign-in page.
    server.fake.file_redirects[moved.id] = "https://fathom-fake.slack.com/?redir=%2Ffiles-pri"
    with pytest.raises(AttachmentRefused, match="files:read"):
        await downloads_for(server, http).download(moved, 1_000_000)
    assert len(server.fake.file_requests) == 3  # the sign-in page itself was not requested


async def test_a_file_without_its_address_is_looked_up_with_files_info(
    server: FakeSlackServer, http: httpx.AsyncClient
) -> None:
    file = server.fake.host_file("shared.md", NOTES.encode())
    stub = Attachment(id=file["id"], name="shared.md", mime="text/markdown")
    assert await downloads_for(server, http).download(stub, 1_000_000) == NOTES.encode()
    [info] = server.fake.calls_to("files.info")
    assert info.params["file"] == file["id"] and info.token == BOT_TOKEN
    with pytest.raises(AttachmentTooLarge):
        await downloads_for(server, http).download(stub, 100)  # files.info says its size
    with pytest.raises(AttachmentRefused, match="gone"):
        await downloads_for(server, http).download(stub.model_copy(update={"id": "F404"}), 10)
    server.fake.files_read = False  # files.info: missing_scope
    with pytest.raises(AttachmentRefused, match="files:read"):
        await downloads_for(server, http).download(stub, 1_000_000)


async def test_slack_connect_stubs_are_described_by_files_info(server: FakeSlackServer) -> None:
    file = server.fake.host_file("partner-brief.txt", NOTES.encode(), team="T0OTHER")
    missing = {"id": "FNONE", "mode": "file_access", "file_access": "check_file_info"}
    event = {"user": "U123", "files": [server.fake.connect_stub(file), missing]}
    files = describe_files(event)
    assert files.attachments == () and files.pending == (file["id"], "FNONE")
    client = make_web_client(BOT_TOKEN, server.api_url)
    described = await describe_pending(files, client, "U123")
    [attachment] = described.attachments
    assert (attachment.name, attachment.mime, attachment.size) == (
        "partner-brief.txt",
        "text/plain",
        len(NOTES),
    )
    assert attachment.extra["download"] == file["url_private_download"]
    assert described.unreadable == (("FNONE", "deleted"),) and described.pending == ()


async def test_each_workspaces_files_are_fetched_with_its_own_token(
    server: FakeSlackServer, store: Store
) -> None:
    """Multi-workspace installs: the run's delivery downloads with the token of the run's
    workspace (the client it posts with)."""
    tokens = {"T0001": "xoxb-team-one", "T0002": "xoxb-team-two"}

    class Clients:
        async def client_for(self, team_id: str) -> AsyncWebClient:
            return make_web_client(tokens[team_id], server.api_url)

    factory = SlackPosters(Clients(), store, api_url=server.api_url)
    notes = hosted(server, "notes.txt", NOTES.encode(), team="T0002")
    run, _ = await new_run(store, thread_key="slack:T0002:C0001:1700000000.000100")
    delivery = await factory.for_run(run)
    assert await delivery.download(notes, 1_000_000) == NOTES.encode()
    assert [r.authorization for r in server.fake.file_requests] == ["Bearer xoxb-team-two"]
    await factory.aclose()


async def test_a_body_without_a_length_stops_as_soon_as_it_passes_the_limit() -> None:
    sent: list[int] = []

    async def body() -> Any:
        for _ in range(100):
            sent.append(1)
            yield b"x" * 1000

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {BOT_TOKEN}"
        return httpx.Response(200, content=body(), headers={"content-type": "text/plain"})

    api = "https://fathom-fake.test/api/"
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        downloads = SlackDownloads(make_web_client(BOT_TOKEN, api), http, allowed_origins(api))
        attachment = Attachment(
            id="F1", name="n.txt", extra={"download": "https://fathom-fake.test/files-pri/T-F1/n"}
        )
        with pytest.raises(AttachmentTooLarge):
            await downloads.download(attachment, 5_500)
    assert len(sent) == 6  # stopped at the chunk that passed the limit


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("en", "Not read: Roadmap (a link to a file kept outside the chat, not the file itself)"),
        ("zh", "未读取：Roadmap（只是存放在聊天之外的文件的链接，不是文件本身）"),
    ],
)
def test_files_slack_cannot_hand_over_are_named_with_why(language: Language, expected: str) -> None:
    text = Replies(SlackMarkup(), language).files_left_out(
        [("Roadmap", "external"), ("F1", "deleted")], max_bytes=2**20, per_request=5
    )
    assert expected in text and ("F1 (deleted)" in text or "F1（已被删除）" in text)
