"""What a document gives: its text and what is known of it, or why it could not be read."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from core.words.note_words import coverage_text
from core.words.reasons import Reason

#: The kinds of document read (markdown and plain text are both "text").
KINDS = ("pdf", "docx", "html", "text")

# Why a document was not read: short, safe to show under "Notes on this run" (never any of the
# document's content).
ENCRYPTED = Reason("it is password-protected", "文件有密码保护")
NO_TEXT = Reason("it has no text layer (scanned images?)", "文件没有文字层（可能是扫描图像）")
EMPTY = Reason("no readable text", "没有可读的文字")
DAMAGED = Reason("it is damaged", "文件已损坏")
TOO_COMPLEX = Reason("it is too large or complex to read", "文件过大或过于复杂，无法读取")
TOO_SLOW = Reason("its text took too long to extract", "提取文字耗时过长")
TOO_MUCH_MEMORY = Reason("reading it needed too much memory", "读取所需内存过多")
UNSUPPORTED = Reason("not a supported document type", "不是支持的文档类型")
#: Its fonts map glyphs to no characters (or to the wrong ones): what comes out is not language.
UNDECODABLE = Reason("its text could not be decoded", "文字无法解码")
STOPPED = Reason("its reader stopped unexpectedly", "读取程序意外停止")
#: Every reason by its English words (the worker process answers those, and only these).
REASONS: dict[str, Reason] = {
    str(reason): reason
    for reason in (
        ENCRYPTED,
        NO_TEXT,
        EMPTY,
        DAMAGED,
        TOO_COMPLEX,
        TOO_SLOW,
        TOO_MUCH_MEMORY,
        UNSUPPORTED,
        UNDECODABLE,
        STOPPED,
    )
}

_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
#: Dates before this are taken for a wrong clock or a default value, not a publication date.
EARLIEST = dt.date(1980, 1, 1)


class DocumentUnreadable(Exception):
    """The document was not read; ``reason`` is one of the short reasons above."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(str(reason))
        self.reason = reason


@dataclass(frozen=True)
class DocumentText:
    """A document's text. ``pages_read``/``pages_total``: for a PDF, how many pages were read
    and the pages it has (None for other kinds); ``published``: ``YYYY-MM-DD`` from the
    document's own metadata (a PDF's CreationDate, a DOCX's created date) when present and
    plausible."""

    text: str
    kind: str
    pages_read: int | None = None
    pages_total: int | None = None
    title: str | None = None
    published: str | None = None
    #: The numbers of the pages read (a PDF), in order.
    pages: tuple[int, ...] = ()

    @property
    def coverage(self) -> str | None:
        """``read pages 1-50 of 311`` when only some of a PDF's pages were read, else None."""
        total = self.pages_total
        if total is None or not self.pages or len(self.pages) >= total:
            return None
        return coverage_text(page_ranges(self.pages), total)


def page_ranges(pages: tuple[int, ...] | list[int]) -> str:
    """``1-3, 7, 9-10`` of the page numbers ``pages`` (in order)."""
    runs: list[list[int]] = []
    for page in sorted(set(pages)):
        if runs and page == runs[-1][1] + 1:
            runs[-1][1] = page
        else:
            runs.append([page, page])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def plausible_date(year: int, month: int, day: int, *, today: dt.date | None = None) -> str | None:
    """``YYYY-MM-DD`` when the date exists, is not before 1980 and not after tomorrow."""
    try:
        date = dt.date(year, month, day)
    except ValueError:
        return None
    latest = (today or dt.datetime.now(dt.UTC).date()) + dt.timedelta(days=1)
    return date.isoformat() if EARLIEST <= date <= latest else None


def checked_date(value: object) -> str | None:
    """``value`` when it is a plausible ``YYYY-MM-DD`` date, else None."""
    if not isinstance(value, str):
        return None
    match = _ISO_DATE.fullmatch(value)
    if match is None:
        return None
    return plausible_date(*(int(g) for g in match.groups()))
