"""Reading a file a user sent the robot: ``DingTalkThread.download``
(``core.documents.attachments``' ``FileSource`` for DingTalk).

Two steps, as DingTalk documents them ("download the file content of the robot receiving
message", https://open.dingtalk.com/document/orgapp/download-the-file-content-of-the-robot-receiving-message):
1. the message's ``downloadCode`` and this robot's code go to
   ``POST /v1.0/robot/messageFiles/download`` with the app's access token, which answers
   ``{"downloadUrl": ...}``, a temporary signed address (permission ``qyapi_robot_sendmsg``);
2. that address is read with a plain GET: no access token (it carries its own signature, and
   DingTalk's storage refuses headers it did not sign), no redirect off the allow-list, and
   never past ``max_bytes``.

The address is only ever DingTalk's own answer, never a URL from a message, and it is read
only when its host is DingTalk's storage (:func:`storage_url`). The addresses observed are
Alibaba Cloud OSS buckets (``http://wukong-file-im-zjk.oss-cn-zhangjiakou.aliyuncs.com/...``,
seen in several public integrations, sometimes as plain http: upgraded to https, which OSS
serves on the same host) and DingTalk's own hosts.

What the download raises (the contract of ``bots.chat.delivery.ThreadPoster.download``):
``AttachmentRefused`` when DingTalk's own answer says it can never work (its JSON refusal of
the code: invalid or expired ``downloadCode``, a missing permission, another robot's code;
the storage's 4xx that is not an HTML page), ``AttachmentTooLarge`` past the limit, and a
``DingTalkError`` or an httpx error for anything else (5xx, 429 and DingTalk's throttling, an
HTML page, the network), which ``classify_error`` judges retryable.
"""

from __future__ import annotations

import logging
import re

import httpx

from bots.dingtalk.api import DingTalkApi, DingTalkError
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge
from core.models import Attachment
from core.words.reasons import Reason

log = logging.getLogger(__name__)

#: An Alibaba Cloud OSS bucket's host (``<bucket>.oss-<region>.aliyuncs.com``).
OSS_HOST = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}\.oss-[a-z0-9-]+\.aliyuncs\.com$")
#: Redirects followed on the allow-list (a signed address is not expected to redirect).
MAX_REDIRECTS = 3
#: The permission the download needs (DingTalk's API page lists it).
FILE_PERMISSION = "qyapi_robot_sendmsg"


def storage_url(url: str, api_url: str) -> httpx.URL | None:
    """The address to read a file at, when ``url`` is on DingTalk's storage: an OSS bucket
    or a ``*.dingtalk.com`` host (over https; a plain http one is upgraded), or the
    configured API's own origin (a test server). None for anything else."""
    try:
        target, api = httpx.URL(url), httpx.URL(api_url)
    except (httpx.InvalidURL, TypeError):
        return None
    if target.userinfo or not target.host:
        return None
    if (target.scheme, target.host, target.port) == (api.scheme, api.host, api.port):
        return target
    host = target.host.lower()
    ours = host == "dingtalk.com" or host.endswith(".dingtalk.com") or OSS_HOST.match(host)
    if not ours or target.scheme not in ("http", "https") or target.port is not None:
        return None
    return target.copy_with(scheme="https")


async def download(api: DingTalkApi, attachment: Attachment, max_bytes: int) -> bytes:
    """The bytes of ``attachment`` (its ``id`` is the message's ``downloadCode``)."""
    try:
        address = await api.message_file_url(attachment.id)
    except DingTalkError as exc:
        if exc.final or (exc.answered and 400 <= exc.status < 500 and not exc.rate_limited):
            if exc.forbidden:
                raise AttachmentRefused(
                    Reason(
                        f"DingTalk refused it: the app lacks the {FILE_PERMISSION} permission",
                        f"钉钉拒绝提供：应用缺少 {FILE_PERMISSION} 权限",
                    )
                ) from None
            code = exc.code[:60]
            raise AttachmentRefused(
                Reason(f"DingTalk refused it ({code})", f"钉钉拒绝提供（{code}）")
            ) from None
        raise
    for _ in range(MAX_REDIRECTS + 1):
        target = storage_url(address, api.api_url)
        if target is None:
            host = httpx.URL(address).host if address.startswith("http") else "?"
            log.warning("dingtalk: a file's download address is not on the allow-list (%s)", host)
            raise AttachmentRefused(
                Reason("its download address is not DingTalk's storage", "其下载地址不是钉钉的存储")
            )
        async with api.stream(str(target)) as response:
            if response.is_redirect:
                address = str(target.join(response.headers.get("location", "")))
                continue
            if response.status_code == 200:
                return await _read(response, max_bytes)
            await _refusal(response)
    raise AttachmentRefused(
        Reason("DingTalk's storage redirected it too often", "钉钉存储的重定向次数过多")
    )


async def _read(response: httpx.Response, max_bytes: int) -> bytes:
    """The body, stopping as soon as it passes ``max_bytes`` (its length first, when said)."""
    too_large = AttachmentTooLarge.past(max_bytes)
    try:
        if int(response.headers.get("content-length", "0")) > max_bytes:
            raise too_large
    except ValueError:
        pass
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > max_bytes:
            raise too_large
    return bytes(data)


async def _refusal(response: httpx.Response) -> None:
    """Raise for the storage's non-200 answer: refused for good (a 4xx that is the storage's
    own answer, e.g. OSS's XML ``AccessDenied`` or ``NoSuchKey``), else a retryable error (a
    5xx, a 429, a timeout answer, an HTML page from a proxy)."""
    status = response.status_code
    kind = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    html = kind in ("text/html", "application/xhtml+xml")
    if 400 <= status < 500 and status not in (408, 425, 429) and not html:
        raise AttachmentRefused(
            Reason(
                f"DingTalk's storage refused it (HTTP {status})",
                f"钉钉存储拒绝提供（HTTP {status}）",
            )
        )
    try:
        retry_after = float(response.headers.get("retry-after", "0"))
    except ValueError:
        retry_after = 0.0
    raise DingTalkError(status, str(status), "the file storage did not answer", retry_after)
