"""A PDF's front and back matter left out: its cover, its table of contents and its list of
references. They share the document's key words, often more densely than its body (a
contents line is a title and a page number; a reference is mostly the titles of other work on
the same topic), so passage ranking alone would let them take the body's place in the budget.

The rules are few and conservative, and a document none of whose text survives them is kept
whole:
- a page whose first line is "Contents" (or "Table of contents"), or most of whose lines are
  contents entries (a title, dot leaders, a page number), goes, as does every contents entry;
- from a line that is only "References" (or "Bibliography", "Works cited", ...), the rest of
  the page goes, and so do the pages after it while most of their lines look like citations;
- the first page goes when it is short (under ``COVER_WORDS`` words, a cover or title page)
  and a later page is not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

COVER_WORDS = 60
_CONTENTS = re.compile(
    r"(table of )?contents|contents of the report|inhalt(sverzeichnis)?|sommaire|目录|目次",
    re.IGNORECASE,
)
_REFERENCES = re.compile(
    r"(\d{1,2}\.?\s+)?(references|bibliography|works cited|literature cited|reference list"
    r"|cited literature|literaturverzeichnis|bibliographie|参考文献)",
    re.IGNORECASE,
)
#: A contents entry: dot leaders (or an ellipsis) and a page number at the end of the line.
_CONTENTS_ENTRY = re.compile(r"(?:\.\s?){4,}\s*\d{1,4}$|…+\s*\d{1,4}$")
#: A citation: numbered ("[12]", "12."), or carrying a year in parentheses, "et al." or a DOI.
_CITATION = re.compile(
    r"^(?:\[\d{1,4}\]|\d{1,4}\.\s)|\(\d{4}[a-z]?\)|\bet al\.|\bdoi[:.]|doi\.org/", re.IGNORECASE
)
_WORD = re.compile(r"\w+")


def without_matter(pages: Sequence[str]) -> list[str]:
    """``pages`` (one text each) with their front and back matter emptied."""
    kept: list[str] = []
    in_references = False
    for page in pages:
        lines = [line.strip() for line in page.splitlines() if line.strip()]
        if not lines:
            kept.append("")
            continue
        if in_references:
            if _mostly(lines, _CITATION.search):
                kept.append("")
                continue
            in_references = False
        if _CONTENTS.fullmatch(lines[0]) or _mostly(lines, _CONTENTS_ENTRY.search):
            kept.append("")
            continue
        body: list[str] = []
        for line in page.splitlines():
            if _REFERENCES.fullmatch(line.strip()):
                in_references = True
                break
            if not _CONTENTS_ENTRY.search(line.strip()):
                body.append(line)
        kept.append("\n".join(body).strip())
    if len(kept) > 1 and _words(kept[0]) < COVER_WORDS:
        if any(_words(page) >= COVER_WORDS for page in kept[1:]):
            kept[0] = ""
    if not any(page.strip() for page in kept):
        return list(pages)
    return kept


def _mostly(lines: Sequence[str], test: Callable[[str], object]) -> bool:
    """Whether at least 60% of ``lines`` pass ``test``."""
    return sum(1 for line in lines if test(line)) >= 0.6 * len(lines)


def _words(text: str) -> int:
    return len(_WORD.findall(text))
