"""Files attached in Slack, described for the run (the input side; the download is
``bots.slack.download``).

A message with files (``app_mention``, or a DM's ``message`` with ``subtype: file_share``)
carries Slack's file objects under ``files`` (https://api.slack.com/types/file): ``id``,
``name`` (may be null), ``title``, ``mimetype``, ``filetype``, ``size``, ``mode`` (``hosted``,
``external``, ``snippet``, ``post``; ``tombstone`` once deleted; ``hidden_by_limit`` past a
free plan's history), ``is_external``, ``url_private``, ``url_private_download`` (both need
``Authorization: Bearer`` with a ``files:read`` token) and ``permalink``. Each becomes an
:class:`~core.models.Attachment` (what the run downloads, its link for the report's sources)
or a (name, reason) the requester is told is not read:

- deleted (``mode: tombstone``): ``deleted``;
- a link to a file kept elsewhere (``mode: external`` / ``is_external``: Google Drive,
  Dropbox; Slack holds no copy to download): ``external``;
- hidden by the plan's limit, or ``file_access: access_denied``: ``unavailable``.

A file in a Slack Connect channel arrives as a stub, ``{"id", "mode": "file_access",
"file_access": "check_file_info", ...}`` with no name, type or size (same page, "Slack Connect
files"): :func:`describe_pending` asks ``files.info`` for it in the event's (lazy) listener,
after Slack has its acknowledgement, since what the run reads is decided from name, type and
size when the request arrives; the download falls back to ``files.info`` too when an
attachment has no download address.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack.errors import describe_error, error_code
from core.models import Attachment

log = logging.getLogger(__name__)

#: ``file_access`` of a Slack Connect file whose details only ``files.info`` gives.
CHECK_FILE_INFO = "check_file_info"
#: Seconds the listener waits for ``files.info`` of one such file.
FILE_INFO_TIMEOUT = 5.0
#: ``files.info`` errors that mean the file is gone (not just unreadable for the bot).
GONE_ERRORS = frozenset({"file_not_found", "file_deleted"})

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]")
MAX_NAME = 200


@dataclass(frozen=True)
class SlackFiles:
    """A message's files: those the run may read, those it cannot (name, reason code), and
    the ids of Slack Connect stubs still to be looked up (:func:`describe_pending`)."""

    attachments: tuple[Attachment, ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()
    pending: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.attachments or self.unreadable or self.pending)


def _text(value: object, limit: int = MAX_NAME) -> str:
    return _CONTROL.sub("", value).strip()[:limit] if isinstance(value, str) else ""


def attached_by(event: Mapping[str, Any]) -> str:
    """Who attached the files, as the report names them: the display (or real) name when the
    event carries the sender's ``user_profile``, else the user id; never a mention."""
    profile = event.get("user_profile")
    if isinstance(profile, Mapping):
        for key in ("display_name", "real_name", "name"):
            name = _text(profile.get(key), 80)
            if name:
                return name
    return _text(event.get("user"), 80)


def _url(value: object) -> str | None:
    text = _text(value, 2_000)
    return text if text.startswith(("https://", "http://")) else None


def file_attachment(file: Mapping[str, Any], by: str) -> Attachment | tuple[str, str] | None:
    """One file object: its :class:`Attachment`, or (name, reason) when it cannot be read,
    or None when it is no file at all (no id) or a Slack Connect stub (looked up later)."""
    file_id = _text(file.get("id"), 64)
    name = _text(file.get("name")) or _text(file.get("title")) or file_id
    if not file_id:
        return (name, "unavailable") if name else None
    mode = file.get("mode")
    if mode == "tombstone":
        return (name, "deleted")
    if mode == "external" or file.get("is_external") is True:
        return (name, "external")
    if mode == "hidden_by_limit" or file.get("file_access") == "access_denied":
        return (name, "unavailable")
    if file.get("file_access") == CHECK_FILE_INFO:
        return None
    size = file.get("size")
    download = _url(file.get("url_private_download")) or _url(file.get("url_private"))
    return Attachment(
        id=file_id,
        name=name,
        mime=_text(file.get("mimetype"), 255) or None,
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        url=_url(file.get("permalink")),
        attached_by=by,
        extra={"download": download} if download else {},
    )


def describe_files(event: Mapping[str, Any]) -> SlackFiles:
    """The files of a message event (none when ``files`` is absent or not a list)."""
    files = event.get("files")
    if not isinstance(files, list):
        return SlackFiles()
    by = attached_by(event)
    attachments: list[Attachment] = []
    unreadable: list[tuple[str, str]] = []
    pending: list[str] = []
    for file in files:
        if not isinstance(file, Mapping):
            continue
        described = file_attachment(file, by)
        if isinstance(described, Attachment):
            attachments.append(described)
        elif described is not None:
            unreadable.append(described)
        elif file.get("file_access") == CHECK_FILE_INFO and _text(file.get("id"), 64):
            pending.append(_text(file.get("id"), 64))
    return SlackFiles(tuple(attachments), tuple(unreadable), tuple(pending))


async def describe_pending(files: SlackFiles, client: AsyncWebClient | None, by: str) -> SlackFiles:
    """``files`` with its Slack Connect stubs looked up with ``files.info`` (the workspace's
    bot client, ``files:read``): each becomes an attachment, or is named as not read when
    Slack does not describe it (gone, no permission, no answer within
    :data:`FILE_INFO_TIMEOUT`)."""
    if not files.pending:
        return files
    attachments, unreadable = list(files.attachments), list(files.unreadable)
    for file_id in files.pending:
        described = await _file_info(client, file_id, by)
        if isinstance(described, Attachment):
            attachments.append(described)
        else:
            unreadable.append(described)
    return SlackFiles(tuple(attachments), tuple(unreadable))


async def _file_info(
    client: AsyncWebClient | None, file_id: str, by: str
) -> Attachment | tuple[str, str]:
    if client is None:
        return (file_id, "unavailable")
    try:
        async with asyncio.timeout(FILE_INFO_TIMEOUT):
            response = await client.files_info(file=file_id)
    except SlackApiError as exc:
        log.warning("slack: files.info of a shared file failed (%s)", describe_error(exc))
        return (file_id, "deleted" if error_code(exc) in GONE_ERRORS else "unavailable")
    except Exception as exc:  # Slack did not answer in time: the file is named as not read
        log.warning("slack: files.info of a shared file failed (%s)", describe_error(exc))
        return (file_id, "unavailable")
    file = response.get("file")
    if not isinstance(file, Mapping) or file.get("file_access") == CHECK_FILE_INFO:
        return (file_id, "unavailable")
    described = file_attachment({**file, "id": file_id}, by)
    return described if described is not None else (file_id, "unavailable")
