"""Which kind of document some bytes are: by their first bytes, then the declared content type,
then the file name's extension."""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePosixPath

_TYPES = {
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/plain": "text",
    "text/markdown": "text",
    "text/x-markdown": "text",
}
_EXTENSIONS = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".txt": "text",
    ".md": "text",
    ".markdown": "text",
}
#: The first bytes of formats that are never read as text, whatever they are called.
_BINARY = (
    b"\x89PNG",
    b"\xff\xd8\xff",  # JPEG
    b"GIF8",
    b"\x1f\x8b",  # gzip
    b"BM",
    b"Rar!",
    b"7z\xbc\xaf",
    b"%!PS",
    b"\x7fELF",
    b"MZ",
    b"RIFF",
    b"OggS",
    b"ID3",
)
#: ``%PDF-`` may follow a little junk (the format allows it within the first 1024 bytes).
_PDF_WINDOW = 1024


def document_kind(name: str | None, content_type: str | None, head: bytes) -> str | None:
    """``"pdf"``, ``"docx"``, ``"html"`` or ``"text"``, None when the document is not read.

    ``head``: the document's first bytes (all of it, for a DOCX to be recognised as one even
    when it is called something else); ``name``: a file name or a URL path."""
    if b"%PDF-" in head[:_PDF_WINDOW]:
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        members = _zip_members(head)
        if members is not None:
            return "docx" if "word/document.xml" in members else None
        # A zip cut short: what it says it is decides (below).
    elif head.startswith(_BINARY):
        return None
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in _TYPES:
        return _TYPES[media]
    suffix = PurePosixPath((name or "").split("?", 1)[0].split("#", 1)[0]).suffix.lower()
    return _EXTENSIONS.get(suffix)


def _zip_members(data: bytes) -> set[str] | None:
    """The names in a zip archive, None when it cannot be opened (e.g. cut short)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return set(archive.namelist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return None
