"""A PDF's text with pypdf, page by page, within limits. Runs in the document worker process
(``core.documents.worker``), never in the bot's own: pypdf is pure Python and a hostile file can
make it slow or hungry, which only the worker's time and memory limits stop for sure.

pypdf's own limits are lowered too (one stream decompresses to at most ``STREAM_BYTES``): they
end most bombs early with an error for that page, while the worker's limits still hold for
whatever they miss.
"""

from __future__ import annotations

import io
import re
import time
from typing import Any

from core.documents.matter import without_matter
from core.documents.result import (
    DAMAGED,
    ENCRYPTED,
    NO_TEXT,
    TOO_COMPLEX,
    DocumentUnreadable,
    plausible_date,
)

#: At most this many bytes come out of one decompressed stream (pypdf's default is 75 MB).
STREAM_BYTES = 32_000_000
_PDF_DATE = re.compile(r"(?:D:)?(\d{4})(\d{2})(\d{2})")
_HYPHENATED = re.compile(r"(\w)-\n(?=[a-z])")
_TITLE_CHARS = 300
_OBJECT = re.compile(rb"(?<![0-9])(\d{1,7})\s+\d{1,5}\s+obj\b")
_CATALOG = re.compile(
    rb"(?<![0-9])(\d{1,7})\s+(\d{1,5})\s+obj\s*<<(?:(?!endobj).){0,300}?/Type\s*/Catalog\b", re.S
)


def pypdf_limits() -> dict[str, int]:
    """pypdf's configuration overwrites used for every file (those its version knows)."""
    import dataclasses

    import pypdf

    known = {f.name for f in dataclasses.fields(pypdf.Configuration)}
    limits = {
        "zlib_maximum_output_length": STREAM_BYTES,
        "lzw_maximum_output_length": STREAM_BYTES,
        "run_length_maximum_output_length": STREAM_BYTES,
        "brotli_maximum_output_length": STREAM_BYTES,
        "jbig2_maximum_output_length": STREAM_BYTES,
        "stream_decoding_work_maximum_length": 4 * STREAM_BYTES,
    }
    return {name: value for name, value in limits.items() if name in known}


def read_pdf(data: bytes, *, max_pages: int, max_chars: int, deadline: float) -> dict[str, Any]:
    """The text of the first ``max_pages`` pages (fewer once ``max_chars`` are read, or when
    ``deadline`` (``time.monotonic()``) passes after a page was read) without its cover,
    contents and references (``core.documents.matter``), as the fields of a
    ``DocumentText``; :class:`DocumentUnreadable` when there is none."""
    import pypdf
    from pypdf.errors import DependencyError, LimitReachedError

    with pypdf.apply_configuration(None, **pypdf_limits()):
        try:
            reader = _open(data)
            if reader.is_encrypted:
                # Many PDFs are encrypted with an empty user password: they open for anyone.
                try:
                    opened = reader.decrypt("")
                except (DependencyError, NotImplementedError):
                    raise DocumentUnreadable(ENCRYPTED) from None
                if opened == pypdf.PasswordType.NOT_DECRYPTED:
                    raise DocumentUnreadable(ENCRYPTED)
            pages = reader.pages
            total = len(pages)  # walks the page tree (pypdf bounds its depth and entries)
        except DocumentUnreadable:
            raise
        except (LimitReachedError, RecursionError):
            raise DocumentUnreadable(TOO_COMPLEX) from None
        except MemoryError:
            raise
        except Exception:
            raise DocumentUnreadable(DAMAGED) from None
        texts: list[str] = []
        read = failed = chars = 0
        for number in range(min(total, max_pages)):
            if read and time.monotonic() > deadline:
                break
            try:
                text = pages[number].extract_text()
            except MemoryError:
                raise
            except Exception:  # LimitReachedError, RecursionError, a broken stream...
                failed += 1
                continue
            read += 1
            text = _tidy(text)
            if text:
                texts.append(text)
                chars += len(text) + 2
                if chars >= max_chars:
                    break
        if not read:
            raise DocumentUnreadable(TOO_COMPLEX if failed and total else DAMAGED)
        if not texts:
            raise DocumentUnreadable(NO_TEXT)
        title, published = _metadata(reader)
    body = [text for text in without_matter(texts) if text]
    return {
        "text": "\n\n".join(body)[:max_chars],
        "kind": "pdf",
        "pages_read": read,
        "pages_total": total,
        "title": title,
        "published": published,
    }


def _open(data: bytes) -> Any:
    """A reader of ``data``; of what is left of it when the file was cut short (a download
    stopped at the size limit): its complete objects, with a trailer naming its catalog."""
    import pypdf

    try:
        return pypdf.PdfReader(io.BytesIO(data), strict=False)
    except MemoryError:
        raise
    except Exception:
        salvaged = _salvage(data)
        if salvaged is None:
            raise
        return pypdf.PdfReader(io.BytesIO(salvaged), strict=False)


def _salvage(data: bytes) -> bytes | None:
    """``data`` cut after its last complete object, with a trailer that pypdf can rebuild the
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
    """A page's text without NULs, trailing spaces or words hyphenated across lines."""
    text = text.replace("\x00", "")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return _HYPHENATED.sub(r"\1", text).strip()


def _metadata(reader: Any) -> tuple[str | None, str | None]:
    """The document information's title and creation date (None when absent or broken)."""
    try:
        info = reader.metadata
        if info is None:
            return None, None
        title = info.get("/Title")
        created = info.get("/CreationDate")
    except MemoryError:
        raise
    except Exception:
        return None, None
    title = " ".join(str(title).split())[:_TITLE_CHARS] if isinstance(title, str) else None
    published = None
    if isinstance(created, str):
        match = _PDF_DATE.match(created.strip())
        if match is not None:
            published = plausible_date(*(int(g) for g in match.groups()))
    return title or None, published
