"""The step that reads the files attached to a run's request, before any search.

Each attachment the thread has not read yet is downloaded through the run's platform (its
delivery is the :class:`~core.documents.attachments.FileSource`), its kind checked on its first
bytes, and its text extracted off the event loop (PDF and DOCX in the bounded worker process
of :mod:`core.documents`). The text is kept with the thread's variables (``files``), so a
resumed run or a follow-up in the thread reuses it without downloading it again.

A run never fails because of a file: one that cannot be downloaded or read is noted (with a
short reason, never its contents) under "Notes on this run", and the research goes on. A
download the platform refuses for good is not tried again; any other failure is retried a few
times, with the platform's own rate-limit delay when it gives one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from core.documents import DocumentExtractor, DocumentUnreadable, document_kind
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge, FileSource
from core.engine.state import RunState
from core.failures import PostFailure, judge
from core.models import AttachedFile, Attachment
from core.untrusted import shown_name
from core.words import note_words
from core.words.reasons import Reason

log = logging.getLogger(__name__)

#: At most this much of a file's text is kept (the passages come from all of it).
FILE_TEXT_CHARS = 200_000
#: Downloads tried per file when the platform fails in a way that may pass.
DOWNLOAD_ATTEMPTS = 3
RETRY_DELAY = 2.0
#: The longest wait between two attempts (a platform's Retry-After included).
MAX_RETRY_DELAY = 30.0
#: Why no file of a run is read when its chat cannot be reached.
NOT_CONNECTED = Reason("its chat is not connected", "所在的聊天未连接")


class PlatformFiles(FileSource, Protocol):
    """A run's delivery as the file step uses it: downloads, and the platform's judgement of
    a failed one."""

    def classify(self, error: Exception) -> PostFailure: ...


class FileReader:
    """Reads the attachments of runs (one per process, shared by its runs)."""

    def __init__(
        self,
        extractor: DocumentExtractor,
        *,
        max_bytes: int,
        retry_delay: float = RETRY_DELAY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._extractor = extractor
        self._max_bytes = max_bytes
        self._retry_delay = retry_delay
        self._sleep = sleep

    def unread(self, state: RunState, attachments: Sequence[Attachment]) -> list[Attachment]:
        """The attachments the thread has not read yet (a file is read once per thread)."""
        known = {file.id for file in state.variables.files}
        fresh: list[Attachment] = []
        for attachment in attachments:
            if attachment.id not in known:
                known.add(attachment.id)
                fresh.append(attachment)
        return fresh

    async def read(
        self,
        state: RunState,
        attachments: Sequence[Attachment],
        files: PlatformFiles | None,
        checkpoint: Callable[[RunState], Awaitable[None]],
        is_cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        """Read each unread attachment into the thread's variables, checkpointing after each
        one, so a resumed run does not download it again; a cancel stops before the next
        file (and the next attempt of a download)."""
        for attachment in self.unread(state, attachments):
            if is_cancelled():
                return
            name, language = shown_name(attachment.name), state.language
            if files is None:
                state.note(note_words.file_not_read_words(language, name, NOT_CONNECTED))
                continue
            try:
                read = await self._read_one(attachment, files, state, is_cancelled)
            except (AttachmentRefused, DocumentUnreadable) as exc:
                state.note(note_words.file_not_read_words(language, name, exc.reason))
                continue
            state.variables.files.append(read)
            state.usage.attachments_read += 1
            if read.coverage:
                state.note(note_words.file_coverage_words(language, name, read.coverage))
            await checkpoint(state)

    async def _read_one(
        self,
        attachment: Attachment,
        files: PlatformFiles,
        state: RunState,
        is_cancelled: Callable[[], bool],
    ) -> AttachedFile:
        data = await self._download(attachment, files, is_cancelled)
        kind = document_kind(attachment.name, attachment.mime, data)  # (a zip's index is last)
        if kind is None:
            raise AttachmentRefused(
                Reason("it is not a kind of file that is read", "不是会读取的文件类型")
            )
        document = await self._extractor.extract(data, kind, state.topic)
        text = document.text[:FILE_TEXT_CHARS].replace("\x00", "")
        if not text.strip():
            raise DocumentUnreadable(Reason("it has no readable text", "没有可读的文字"))
        return AttachedFile(
            id=attachment.id,
            name=attachment.name,
            kind=kind,
            size=len(data),
            url=attachment.url,
            attached_by=attachment.attached_by,
            attacher_id=attachment.attacher_id,
            pages_read=document.pages_read,
            pages_total=document.pages_total,
            coverage=document.coverage,
            title=document.title if kind == "html" else None,
            published=document.published,
            text=text,
            run_id=state.run_id,
            findings_before=len(state.variables.findings),
        )

    async def _download(
        self, attachment: Attachment, files: PlatformFiles, is_cancelled: Callable[[], bool]
    ) -> bytes:
        limit = self._max_bytes
        for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
            if is_cancelled():
                raise AttachmentRefused(Reason("the research was cancelled", "研究已取消"))
            try:
                return await files.download(attachment, limit)
            except AttachmentTooLarge:
                size = f"{limit / 1048576:g} MB"
                raise AttachmentTooLarge(
                    Reason(f"it is larger than {size}", f"超过 {size}")
                ) from None
            except AttachmentRefused:
                raise
            except Exception as exc:
                judged = judge(files, exc)
                if not judged.retryable:
                    said = judged.reason
                    raise AttachmentRefused(
                        Reason(f"the platform refused it ({said})", f"平台拒绝提供（{said}）")
                    ) from None
                if attempt == DOWNLOAD_ATTEMPTS:
                    said = judged.reason
                    raise AttachmentRefused(
                        Reason(
                            f"its download kept failing ({said}; {attempt} attempts)",
                            f"下载一再失败（{said}；尝试 {attempt} 次）",
                        )
                    ) from None
                delay = min(
                    MAX_RETRY_DELAY, max(judged.retry_after, self._retry_delay * 2 ** (attempt - 1))
                )
                log.warning(
                    "downloading an attached file failed (%s); retrying in %.1f s",
                    judged.reason,
                    delay,
                )
                await self._sleep(delay)
        raise AssertionError("unreachable")
