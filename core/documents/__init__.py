"""Documents' text, within limits: PDF (PDFium, through pypdfium2) and DOCX (python-docx) in
worker processes with time and memory limits, HTML (trafilatura) and plain text in the bot's
own process.

The surface: :func:`document_kind` (what some bytes are), :class:`DocumentExtractor` (their
text), :class:`DocumentText` and :class:`DocumentUnreadable` (its reason is safe to show).
"""

from core.documents.extractor import DocumentExtractor
from core.documents.kinds import document_kind
from core.documents.result import DocumentText, DocumentUnreadable

__all__ = ["DocumentExtractor", "DocumentText", "DocumentUnreadable", "document_kind"]
