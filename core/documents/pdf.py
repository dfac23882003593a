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
from collections.abc import Callable, Iterator
from typing import Any

from core.documents.accents import joined_accents
from core.documents.decode import undecodable
from core.documents.extract import bm25_scores, terms
from core.documents.legacy import is_mojibake, redecoded
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
#: At most this many pages' text is ranked to choose which pages of a long PDF to read.
SCAN_PAGES = 5000
#: A scan takes every this many pages first (:func:`scan_order`).
SCAN_STRIDE = 8
#: PDFium marks a hyphen it took for a word broken across lines with U+FFFE ("heat-" / "pump").
_SOFT_HYPHEN = "\ufffe"


def read_pdf(
    data: bytes, *, max_pages: int, max_chars: int, deadline: float, query: str = ""
) -> dict[str, Any]:
    """The text of ``max_pages`` pages (fewer once ``max_chars`` are read, or when
    ``deadline`` (``time.monotonic()``) passes after a page was read) without its cover,
    contents, references and running headers and footers (``core.documents.matter``), and
    without the pages whose text did not decode, as the fields of a ``DocumentText``
    (``pages``: the numbers of the pages read); :class:`DocumentUnreadable` when there is none.

    Which pages: the first ones; of a document longer than ``max_pages``, with a ``query``,
    those whose text ranks best for it (BM25 over every page's text, which PDFium reads in
    about a millisecond a page, for at most half the time left), so that a question answered
    on page 240 of a manual is read there, not on its first 50 pages."""
    document = _open(data)
    try:
        total = len(document)
        texts = _Texts(document)
        if query and total > max_pages:
            scan_until = time.monotonic() + (deadline - time.monotonic()) / 2
            wanted = _relevant(texts, total, max_pages, query, scan_until)
        else:
            wanted = list(range(min(total, max_pages)))
        kept: dict[int, str] = {}
        loaded: list[int] = []
        garbled = chars = 0
        for number in wanted:
            if loaded and time.monotonic() > deadline:
                break
            text = texts.get(number)
            if text is None:  # a page PDFium cannot load
                continue
            loaded.append(number)
            if text and undecodable(text):
                garbled += 1
            elif text:
                kept[number] = text
                chars += len(text) + 2
                if chars >= max_chars:
                    break
        if not loaded:
            raise DocumentUnreadable(TOO_COMPLEX if texts.failed and total else DAMAGED)
        if not kept:
            raise DocumentUnreadable(UNDECODABLE if garbled else NO_TEXT)
        title, published = _metadata(document)
    finally:
        document.close()
    pages = [kept[number] for number in sorted(kept)]
    body = [text for text in without_matter(without_running_lines(pages)) if text]
    return {
        "text": "\n\n".join(body)[:max_chars],
        "kind": "pdf",
        "pages_read": len(loaded),
        "pages_total": total,
        "pages": [number + 1 for number in sorted(loaded)],
        "title": title,
        "published": published,
    }


class _Texts:
    """The tidied text of a document's pages, each extracted once (None: it failed): a legacy
    font's 8-bit codes decoded again (``core.documents.legacy``; a page none of whose encodings
    gives words is left as it is, for :func:`undecodable` to judge), TeX's accents joined to
    their letters (``core.documents.accents``)."""

    def __init__(self, document: Any) -> None:
        self._document = document
        self._texts: dict[int, str | None] = {}
        self.failed = 0
        #: The legacy encoding the document's pages were found in so far (tried first).
        self._legacy: str | None = None

    def get(self, number: int) -> str | None:
        if number not in self._texts:
            try:
                self._texts[number] = self._readable(_tidy(_page_text(self._document, number)))
            except MemoryError:
                raise
            except Exception:
                self._texts[number] = None
                self.failed += 1
        return self._texts[number]

    def _readable(self, text: str) -> str:
        if is_mojibake(text):
            decoded = redecoded(text, self._legacy)
            if decoded is None:
                return text
            text, self._legacy = decoded
        return joined_accents(text)


def _relevant(
    texts: _Texts,
    total: int,
    count: int,
    query: str,
    until: float,
    clock: Callable[[], float] = time.monotonic,
) -> list[int]:
    """``count`` page numbers, best for ``query`` first (BM25 over the pages' text, for those
    read by ``until`` of at most ``SCAN_PAGES``, in :func:`scan_order`), then the first pages
    to make up the count."""
    scanned: list[int] = []
    for number in scan_order(min(total, SCAN_PAGES)):
        if scanned and clock() > until:
            break
        if texts.get(number) is not None:
            scanned.append(number)
    scores = bm25_scores([terms(texts.get(n) or "") or [""] for n in scanned], terms(query))
    ranked = sorted(zip(scores, scanned, strict=True), key=lambda pair: (-pair[0], pair[1]))
    best = [number for score, number in ranked if score > 0][:count]
    chosen = set(best)
    rest = [number for number in range(total) if number not in chosen]
    return best + rest[: count - len(best)]


def scan_order(pages: int) -> Iterator[int]:
    """The order a document's pages are scanned in: every :data:`SCAN_STRIDE`-th page, then
    the pages after those, and so on, so that a scan cut short by its time covers the whole
    document thinly rather than its first part only (a scan that ends scans every page, in
    whatever order)."""
    for offset in range(min(SCAN_STRIDE, pages)):
        yield from range(offset, pages, SCAN_STRIDE)


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
