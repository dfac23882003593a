"""Files attached in the chat: what a request may carry, and how a run gets their bytes.

A platform's adapter describes each file of a request as a :class:`~core.models.Attachment`
(its name, type, size and the platform's id; never its contents). :func:`screen` decides at
once, in the webhook, which of them the run will read (a supported type, within
``FATHOM_ATTACHMENT_MAX_BYTES`` and ``FATHOM_ATTACHMENTS_PER_REQUEST``) and why the others are
not read, so the requester is told in one short reply. The run downloads the accepted ones
when it executes, through its platform's :class:`FileSource` (the run's delivery), with the
platform's credentials and from the platform's own hosts only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from core.documents.kinds import document_kind
from core.models import AttachedFile, Attachment
from core.untrusted import shown_name
from core.words.reasons import Reason

#: Defaults of ``FATHOM_ATTACHMENT_MAX_BYTES`` and ``FATHOM_ATTACHMENTS_PER_REQUEST``.
MAX_BYTES = 20 * 1024 * 1024
PER_REQUEST = 5

#: What the reply names as readable.
READABLE = "PDF, DOCX, HTML, Markdown, plain text"


class AttachmentRefused(Exception):
    """The platform will never give this file (gone, no permission, not a file): ``reason``
    is short and safe to show. Any other error of a download is judged by the delivery's
    ``classify`` (a retryable one is tried again)."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(str(reason))
        self.reason = reason


class AttachmentTooLarge(AttachmentRefused):
    """The file holds more than the limit (the download stopped there)."""

    @classmethod
    def past(cls, max_bytes: int) -> AttachmentTooLarge:
        return cls(Reason(f"larger than {max_bytes} bytes", f"超过 {max_bytes} 字节"))


class FileSource(Protocol):
    """How a run gets the bytes of its attachments (a run's platform delivery)."""

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file's contents, from the platform's own hosts with its credentials. Raises
        :class:`AttachmentTooLarge` past ``max_bytes`` (reading no further) and
        :class:`AttachmentRefused` when the platform refuses it for good."""
        ...


def attachment_kind(name: str, mime: str | None) -> str | None:
    """``pdf``, ``docx``, ``html`` or ``text`` by the file's name or media type, before its
    bytes are known (``core.documents.document_kind`` checks them when it is read); None
    when it is of no kind read."""
    return document_kind(name.strip(), mime, b"")


@dataclass(frozen=True)
class Screened:
    """A request's files: those the run reads, and those it does not, each with why."""

    accepted: list[Attachment]
    #: (file, reason): ``type`` (not a kind read), ``size`` (over the limit), ``count`` (over
    #: the per-request limit).
    rejected: list[tuple[Attachment, str]]


def screen(
    attachments: Sequence[Attachment], *, max_bytes: int = MAX_BYTES, per_request: int = PER_REQUEST
) -> Screened:
    """Which files of a request are read: a kind read, within the size limit (when the
    platform says the size; the download enforces it too), the first ``per_request``; the
    same file twice counts once."""
    accepted: list[Attachment] = []
    rejected: list[tuple[Attachment, str]] = []
    seen: set[str] = set()
    for attachment in attachments:
        if attachment.id in seen:
            continue
        seen.add(attachment.id)
        if attachment_kind(attachment.name, attachment.mime) is None:
            rejected.append((attachment, "type"))
        elif attachment.size is not None and attachment.size > max_bytes:
            rejected.append((attachment, "size"))
        elif len(accepted) >= per_request:
            rejected.append((attachment, "count"))
        else:
            accepted.append(attachment)
    return Screened(accepted, rejected)


def file_title(file: AttachedFile) -> str:
    """``<name> (attached by <who>)``: how the report's sources list an attached file; an
    HTML file by its ``<title>``: ``<title> (<name>, attached by <who>)``."""
    who = shown_name(file.attached_by) if file.attached_by else ""
    name = shown_name(file.name)
    title = shown_name(file.title) if file.title else ""
    if title and title != name:
        return f"{title} ({name}, attached by {who})" if who else f"{title} ({name})"
    return f"{name} (attached by {who})" if who else name
