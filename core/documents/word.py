"""A DOCX's text with python-docx: its paragraphs and tables in document order. Runs in the
document worker process, like PDFs (a DOCX is a zip of XML: it can be a bomb too)."""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from typing import Any

from core.documents.result import (
    DAMAGED,
    ENCRYPTED,
    TOO_MUCH_MEMORY,
    DocumentUnreadable,
    plausible_date,
)

#: The most a DOCX may say its parts unpack to (a zip's sizes are checked before any is read).
UNPACKED_BYTES = 200_000_000
#: An encrypted Office document is not a zip but an OLE compound file.
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_TITLE_CHARS = 300


def read_docx(data: bytes, *, max_chars: int) -> dict[str, Any]:
    """The text of a DOCX (at most ``max_chars``), as the fields of a ``DocumentText``."""
    if data.startswith(OLE_MAGIC):
        raise DocumentUnreadable(ENCRYPTED)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if sum(info.file_size for info in archive.infolist()) > UNPACKED_BYTES:
                raise DocumentUnreadable(TOO_MUCH_MEMORY)
    except zipfile.BadZipFile:
        raise DocumentUnreadable(DAMAGED) from None
    import docx
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
        blocks: list[str] = []
        chars = 0
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                text = "\n".join(
                    " | ".join(cell.text.strip() for cell in row.cells) for row in block.rows
                )
            else:
                text = block.text
            text = text.replace("\x00", "").strip()
            if text:
                blocks.append(text)
                chars += len(text) + 2
                if chars >= max_chars:
                    break
        properties = document.core_properties
        title, created = properties.title, properties.created
    except (MemoryError, DocumentUnreadable):
        raise
    except Exception:
        raise DocumentUnreadable(DAMAGED) from None
    published = None
    if isinstance(created, dt.datetime):
        published = plausible_date(created.year, created.month, created.day)
    return {
        "text": "\n\n".join(blocks)[:max_chars],
        "kind": "docx",
        "pages_read": None,
        "pages_total": None,
        "title": " ".join(title.split())[:_TITLE_CHARS] or None if title else None,
        "published": published,
    }
