"""Text out of documents (provisional: text and HTML only; PDF and DOCX come with the bounded
extractor of issue 20 part 1, which replaces this module)."""

from __future__ import annotations

import asyncio
import codecs
from dataclasses import dataclass

from core.attachments import attachment_kind
from core.pages.extract import main_text


@dataclass(frozen=True)
class DocumentText:
    text: str
    kind: str
    pages_read: int | None = None
    pages_total: int | None = None
    title: str | None = None
    published: str | None = None


class DocumentUnreadable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def document_kind(name: str | None, content_type: str | None, head: bytes) -> str | None:
    if head.startswith(b"%PDF-"):
        return "pdf"
    return attachment_kind(name or "", content_type)


class DocumentExtractor:
    async def extract(self, data: bytes, kind: str) -> DocumentText:
        if kind not in ("text", "html"):
            raise DocumentUnreadable(f"{kind} files are not read yet")
        text = _decode(data)
        if kind == "html":
            text = await asyncio.to_thread(main_text, text, "", "text/html")
        return DocumentText(text=text, kind=kind)

    def close(self) -> None:
        return None


def _decode(data: bytes) -> str:
    for bom, encoding in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    return data.decode("utf-8", errors="replace")
