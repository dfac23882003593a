"""Files given to ``fathom research --file``: checked before anything is spent, and read by
the run from the local disk (the console's ``core.documents.attachments.FileSource``)."""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import mimetypes
from collections.abc import Sequence
from pathlib import Path

from core.documents.attachments import (
    READABLE,
    AttachmentRefused,
    AttachmentTooLarge,
    attachment_kind,
)
from core.failures import PostFailure
from core.models import Attachment
from core.words.reasons import Reason


class FileProblem(ValueError):
    """A ``--file`` that cannot be read: the message says which and why."""


def local_attachments(
    paths: Sequence[Path], *, max_bytes: int, per_request: int
) -> list[Attachment]:
    """The files as attachments of a console request; :class:`FileProblem` for the first
    that is missing, unreadable, of a kind not read, or over a limit."""
    if len(paths) > per_request:
        raise FileProblem(
            f"--file: {len(paths)} files given; at most {per_request} are read per request "
            "(FATHOM_ATTACHMENTS_PER_REQUEST)"
        )
    user = _user()
    attachments: list[Attachment] = []
    for path in paths:
        if not path.is_file():
            raise FileProblem(f"--file {path}: there is no such file")
        mime = mimetypes.guess_type(path.name)[0]
        if attachment_kind(path.name, mime) is None:
            raise FileProblem(f"--file {path}: not a kind of file that is read ({READABLE})")
        try:
            data = path.read_bytes() if path.stat().st_size <= max_bytes else None
        except OSError as exc:
            raise FileProblem(f"--file {path} cannot be read: {exc.strerror or exc}") from None
        if data is None:
            raise FileProblem(
                f"--file {path}: larger than {max_bytes} bytes (FATHOM_ATTACHMENT_MAX_BYTES)"
            )
        digest = hashlib.sha256(data).hexdigest()
        attachments.append(
            Attachment(
                # The same content is read once per thread, wherever it lies.
                id=f"sha256:{digest[:32]}",
                name=path.name,
                mime=mime,
                size=len(data),
                attached_by=user,
                extra={"path": str(path.resolve()), "sha256": digest},
            )
        )
    return attachments


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment
        return "you"


class LocalFiles:
    """The console's ``FileSource``: a file from the local disk, as it was when it was given."""

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        return await asyncio.to_thread(_read, attachment, max_bytes)

    def classify(self, error: Exception) -> PostFailure:
        return PostFailure(type(error).__name__, retryable=False)


def _read(attachment: Attachment, max_bytes: int) -> bytes:
    path = Path(attachment.extra.get("path", ""))
    try:
        if path.stat().st_size > max_bytes:
            raise AttachmentTooLarge.past(max_bytes)
        data = path.read_bytes()
    except OSError as exc:
        said = exc.strerror or str(exc)
        raise AttachmentRefused(
            Reason(f"it cannot be read ({said})", f"无法读取（{said}）")
        ) from None
    if hashlib.sha256(data).hexdigest() != attachment.extra.get("sha256"):
        raise AttachmentRefused(
            Reason("it changed since the research was asked for", "它在请求研究之后已被修改")
        )
    return data
