"""A PDF's text with PDFium (pypdfium2), page by page, within limits. Runs in the document
worker process (``core.documents.worker``), never in the bot's own: PDFium is C++ and a hostile
file can make it slow or hungry, which only the worker's time and memory limits stop for sure.

PDFium reads the text the way a viewer shows it: CJK text set with TeX's CID fonts, whose
``ToUnicode`` maps a pure-Python reader misses, comes out as characters, and a page of a long
manual takes about a millisecond. It opens a file encrypted with an empty user password by
itself (RC4 and AES), with no cryptography package.
"""

from __future__ import annotations

import re
import time
from typing import Any

from core.documents.decode import undecodable
from core.documents.matter import without_matter, without_running_lines
from core.documents.result import (
    DAMAGED,
    ENCRYPTED,
    NO_TEXT,
    TOO_COMPLEX,
    UNDECODABLE,
    DocumentUnreadable,
    plausible_date,
)

_PDF_DATE = re.compile(r"(?:D:)?(\d{4})(\d{2})(\d{2})")
_TITLE_CHARS = 300
_OBJECT = re.compile(rb"(?<![0-9])(\d{1,7})\s+\d{1,5}\s+obj\b")
_CATALOG = re.compile(
    rb"(?<![0-9])(\d{1,7})\s+(\d{1,5})\s+obj\s*<<(?:(?!endobj).){0,300}?/Type\s*/Catalog\b", re.S
)
#: PDFium's FPDF_ERR_PASSWORD: the file needs a password it was not given.
_ERR_PASSWORD = 4
#: PDFium marks a hyphen it took for a word broken across lines with U+FFFE ("heat-" / "pump").
_SOFT_HYPHEN = "\ufffe"


def read_pdf(data: bytes, *, max_pages: int, max_chars: int, deadline: float) -> dict[str, Any]:
    """The text of the first ``max_pages`` pages (fewer once ``max_chars`` are read, or when
    ``deadline`` (``time.monotonic()``) passes after a page was read) without its cover,
    contents, references and running headers and footers (``core.documents.matter``), and
    without the pages whose text did not decode, as the fields of a ``DocumentText``;
    :class:`DocumentUnreadable` when there is none."""
    document = _open(data)
    try:
        total = len(document)
        texts: list[str] = []
        read = failed = garbled = chars = 0
        for number in range(min(total, max_pages)):
            if read and time.monotonic() > deadline:
                break
            try:
                text = _page_text(document, number)
            except MemoryError:
                raise
            except Exception:  # a page PDFium cannot load
                failed += 1
                continue
            read += 1
            text = _tidy(text)
            if text and undecodable(text):
                garbled += 1
            elif text:
                texts.append(text)
                chars += len(text) + 2
                if chars >= max_chars:
                    break
        if not read:
            raise DocumentUnreadable(TOO_COMPLEX if failed and total else DAMAGED)
        if not texts:
            raise DocumentUnreadable(UNDECODABLE if garbled else NO_TEXT)
        title, published = _metadata(document)
    finally:
        document.close()
    body = [text for text in without_matter(without_running_lines(texts)) if text]
    return {
        "text": "\n\n".join(body)[:max_chars],
        "kind": "pdf",
        "pages_read": read,
        "pages_total": total,
        "title": title,
        "published": published,
    }


def _page_text(document: Any, number: int) -> str:
    page = document[number]
    try:
        textpage = page.get_textpage()
        try:
            return str(textpage.get_text_range())
        finally:
            textpage.close()
    finally:
        page.close()


def _open(data: bytes) -> Any:
    """A PDFium document of ``data``; of what is left of it when the file was cut short (a
    download stopped at the size limit): its complete objects, with a trailer naming its
    catalog. :class:`DocumentUnreadable` when neither opens."""
    import pypdfium2 as pdfium

    try:
        # An empty user password opens for anyone: PDFium tries it by itself.
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if exc.err_code == _ERR_PASSWORD:
            raise DocumentUnreadable(ENCRYPTED) from None
    salvaged = _salvage(data)
    if salvaged is None:
        raise DocumentUnreadable(DAMAGED)
    try:
        return pdfium.PdfDocument(salvaged)
    except pdfium.PdfiumError:
        raise DocumentUnreadable(DAMAGED) from None


def _salvage(data: bytes) -> bytes | None:
    """``data`` cut after its last complete object, with a trailer that PDFium can rebuild the
    cross-reference table from (None when ``data`` was not cut short or has no catalog)."""
    if b"%%EOF" in data[-2048:]:
        return None
    end = data.rfind(b"endobj")
    catalog = _CATALOG.search(data, 0, end)
    if end < 0 or catalog is None:
        return None
    size = max(int(m.group(1)) for m in _OBJECT.finditer(data, 0, end)) + 1
    trailer = b"\ntrailer\n<< /Size %d /Root %s %s R >>\nstartxref\n0\n%%%%EOF\n" % (
        size,
        catalog.group(1),
        catalog.group(2),
    )
    return data[: end + len(b"endobj")] + trailer


def _tidy(text: str) -> str:
    """A page's text without NULs, trailing spaces or words hyphenated across lines (PDFium
    ends lines with CR LF)."""
    text = text.replace("\x00", "").replace(_SOFT_HYPHEN, "")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return text.strip()


def _metadata(document: Any) -> tuple[str | None, str | None]:
    """The document information's title and creation date (None when absent or broken)."""
    try:
        info = document.get_metadata_dict(skip_empty=True)
    except MemoryError:
        raise
    except Exception:
        return None, None
    title, created = info.get("Title"), info.get("CreationDate")
    title = " ".join(title.split())[:_TITLE_CHARS] if isinstance(title, str) else None
    published = None
    if isinstance(created, str):
        match = _PDF_DATE.match(created.strip())
        if match is not None:
            published = plausible_date(*(int(g) for g in match.groups()))
    return title or None, published
