"""The bytes of a file attached in Slack (``ThreadPoster.download`` for Slack runs).

Slack serves a file's contents at its ``url_private_download`` (or ``url_private``) on
``files.slack.com``, to a request carrying ``Authorization: Bearer <token>`` whose token has
the ``files:read`` scope (https://api.slack.com/types/file, "Authentication"). The token is the
bot token of the run's workspace: the same client the run posts with (one token, or the
workspace's OAuth installation).

- Only addresses on the allowed hosts are requested: ``files.slack.com``, plus the host of
  ``SLACK_API_URL`` when it is not Slack's own (a test's fake). Any other address, whatever the
  attachment says, is refused without a request, and the token never leaves those hosts:
  redirects are followed by hand, only to the same hosts.
- A token Slack does not accept for the file (no ``files:read``, or the file is not shared
  where the bot is) is answered with Slack's HTML sign-in page (HTTP 200), or a redirect to
  it on the workspace's host: both are a final refusal that names the scope. (An HTML file
  is told from the page by the download's ``Content-Disposition: attachment``.) 401/403/404/410
  are final too. 429, 5xx, a timeout or the network are raised as they are (an
  ``httpx.HTTPStatusError`` with the response, or the transport's error):
  ``bots.slack.errors.classify_error`` judges them worth another try.
- The body is streamed and stopped past the run's limit (``AttachmentTooLarge``), a
  ``Content-Length`` over it is refused before reading; the whole download has a time limit.
- A file without a download address (a Slack Connect stub) is looked up with ``files.info``
  first.

Never logs a file's contents.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

import httpx
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack.errors import error_code
from bots.slack.files import CHECK_FILE_INFO, GONE_ERRORS
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge, attachment_kind
from core.models import Attachment
from core.words.reasons import Reason

log = logging.getLogger(__name__)

#: Slack's file host (every workspace's ``url_private_download``).
FILES_HOST = "files.slack.com"
#: Seconds for one whole download (connect, redirects, body); per read, ``READ_TIMEOUT``.
DOWNLOAD_TIMEOUT = 120.0
READ_TIMEOUT = 30.0
MAX_REDIRECTS = 3

#: What the requester is told when Slack will not hand the file to the bot's token.
NO_ACCESS = Reason(
    "Slack did not let the bot read it: the app needs the files:read scope (reinstall it "
    "after adding the scope), and the file must be shared where the bot is",
    "Slack 不允许机器人读取该文件：应用需要 files:read 权限（添加后重新安装应用），"
    "且文件必须分享到机器人所在的地方",
)
GONE = Reason(
    "Slack says the file is gone or not shared with the bot",
    "Slack 表示该文件已不存在或未分享给机器人",
)
#: ``files.info`` errors that mean the token may not read files.
ACCESS_ERRORS = frozenset(
    {"missing_scope", "no_permission", "not_allowed_token_type", "access_denied"}
)

Origin = tuple[str, str, int]


def _origin(url: str) -> Origin | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in ("http", "https") or not host:
        return None
    return scheme, host, port or (443 if scheme == "https" else 80)


def allowed_origins(api_url: str) -> frozenset[Origin]:
    """``https://files.slack.com``, and ``SLACK_API_URL``'s own origin when it is not Slack's
    (tests point it at a fake that serves the files too)."""
    origins = {("https", FILES_HOST, 443)}
    api = _origin(api_url)
    if api is not None and api[1] != "slack.com" and not api[1].endswith(".slack.com"):
        origins.add(api)
    return frozenset(origins)


def download_client() -> httpx.AsyncClient:
    """The HTTP client of Slack downloads: redirects are followed by hand (host-checked)."""
    return httpx.AsyncClient(
        follow_redirects=False,
        timeout=httpx.Timeout(READ_TIMEOUT, connect=10.0),
        headers={"User-Agent": "fathom-bot/0.1"},
    )


class SlackDownloads:
    """Downloads for one workspace: its bot client (token, ``files.info``), the shared HTTP
    client and the hosts files may come from."""

    def __init__(
        self,
        client: AsyncWebClient,
        http: httpx.AsyncClient,
        origins: Iterable[Origin],
        *,
        timeout: float = DOWNLOAD_TIMEOUT,
    ) -> None:
        self._client = client
        self._http = http
        self._origins = frozenset(origins)
        self._timeout = timeout

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        async with asyncio.timeout(self._timeout):
            url = attachment.extra.get("download") or await self._address(attachment, max_bytes)
            html_expected = attachment_kind(attachment.name, attachment.mime) == "html"
            return await self._get(url, max_bytes, html_expected=html_expected)

    async def _address(self, attachment: Attachment, max_bytes: int) -> str:
        """A file described without its address: ``files.info`` gives it."""
        try:
            response = await self._client.files_info(file=attachment.id)
        except SlackApiError as exc:
            code = error_code(exc)
            if code in GONE_ERRORS:
                raise AttachmentRefused(GONE) from None
            if code in ACCESS_ERRORS:
                raise AttachmentRefused(NO_ACCESS) from None
            raise  # Slack's outage or rate limit: judged by classify_error
        file = response.get("file")
        if not isinstance(file, dict):
            raise AttachmentRefused(GONE)
        if file.get("mode") == "tombstone":
            raise AttachmentRefused(Reason("deleted", "已删除"))
        if file.get("mode") == "external" or file.get("is_external") is True:
            raise AttachmentRefused(
                Reason(
                    "a link to a file kept outside Slack, not the file itself",
                    "这是指向 Slack 之外文件的链接，不是文件本身",
                )
            )
        if file.get("file_access") == CHECK_FILE_INFO:
            raise AttachmentRefused(NO_ACCESS)
        size = file.get("size")
        if isinstance(size, int) and size > max_bytes:
            raise AttachmentTooLarge.past(max_bytes)
        url = file.get("url_private_download") or file.get("url_private")
        if not isinstance(url, str) or not url:
            raise AttachmentRefused(GONE)
        return url

    def _allowed(self, url: str) -> bool:
        return _origin(url) in self._origins

    async def _get(self, url: str, max_bytes: int, *, html_expected: bool) -> bytes:
        if not self._allowed(url):
            raise AttachmentRefused(
                Reason("its address is not on Slack's file host", "其地址不在 Slack 的文件主机上")
            )
        token = self._client.token
        if not token:
            raise AttachmentRefused(NO_ACCESS)
        headers = {"Authorization": f"Bearer {token}"}
        for _ in range(MAX_REDIRECTS + 1):
            async with self._http.stream("GET", url, headers=headers) as response:
                if response.is_redirect:
                    location = response.headers.get("location") or ""
                    url = str(response.url.join(location))
                    if not self._allowed(url):
                        # Slack sends a token that may not read the file to the workspace's
                        # sign-in page; the token goes nowhere else.
                        raise AttachmentRefused(NO_ACCESS)
                    continue
                _judge(response, html_expected=html_expected)
                return await _read(response, max_bytes)
        raise AttachmentRefused(
            Reason("Slack redirected the download too often", "Slack 对下载的重定向次数过多")
        )


def _judge(response: httpx.Response, *, html_expected: bool) -> None:
    """Final refusals as ``AttachmentRefused``; anything transient raised as it is."""
    status = response.status_code
    if status in (401,):
        raise AttachmentRefused(NO_ACCESS)
    if status in (403, 404, 410):
        raise AttachmentRefused(GONE)
    if status == 408 or status == 429 or status >= 500:
        raise httpx.HTTPStatusError(
            f"Slack answered the download with HTTP {status}",
            request=response.request,
            response=response,
        )
    if not 200 <= status < 300:
        raise AttachmentRefused(
            Reason(
                f"Slack refused the download (HTTP {status})", f"Slack 拒绝了下载（HTTP {status}）"
            )
        )
    media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media == "text/html":
        # Slack's sign-in page, unless it is the file: an HTML file, or a file Slack sends as
        # a download (``url_private_download`` "includes headers to force a browser
        # download": ``Content-Disposition: attachment``; the sign-in page has none).
        forced = "attachment" in response.headers.get("content-disposition", "").lower()
        via_download = "/download/" in response.url.path
        if not forced and (via_download or not html_expected):
            raise AttachmentRefused(NO_ACCESS)


async def _read(response: httpx.Response, max_bytes: int) -> bytes:
    """The body, stopped as soon as it passes ``max_bytes`` (decompressed bytes count)."""
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise AttachmentTooLarge.past(max_bytes)
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > max_bytes:
            raise AttachmentTooLarge.past(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)
