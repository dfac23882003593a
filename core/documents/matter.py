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

Running headers and footers (a book's title on every page, "Page 12 of 311") go too
(:func:`without_running_lines`): they repeat on most pages, and would otherwise sit in every
passage cut from a page's start or end.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

COVER_WORDS = 60
_CONTENTS = re.compile(
    r"(table of )?contents|contents of the report|inhalt(sverzeichnis)?|sommaire|目\s*录|目\s*次",
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
#: A word: a run of letters and digits, or one CJK character (Chinese has no spaces).
_WORD = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\W\u3400-\u9fff\uf900-\ufaff]+")
#: Lines at each end of a page where running headers and footers are looked for.
_EDGE_LINES = 2
#: A line is running when it (digits aside) is at an edge of this share of the pages, and of
#: at least three.
_RUNNING_SHARE = 0.5


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
        if _CONTENTS.fullmatch(lines[0]) or _mostly(lines, _contents_entry):
            kept.append("")
            continue
        body: list[str] = []
        for line in page.splitlines():
            if _REFERENCES.fullmatch(line.strip()):
                in_references = True
                break
            if not _contents_entry(line.strip()):
                body.append(line)
        kept.append("\n".join(body).strip())
    if len(kept) > 1 and _words(kept[0]) < COVER_WORDS:
        if any(_words(page) >= COVER_WORDS for page in kept[1:]):
            kept[0] = ""
    if not any(page.strip() for page in kept):
        return list(pages)
    return kept


def without_running_lines(pages: Sequence[str]) -> list[str]:
    """``pages`` without their running headers and footers: a line that, its digits and the
    order of its words aside, is in the same place (one of the first or last ``_EDGE_LINES``
    non-empty lines) on at least half of the pages (and three). A page that is only such lines
    is kept as it is."""
    if len(pages) < 3:
        return list(pages)
    split = [page.splitlines() for page in pages]
    seen: Counter[tuple[int, str]] = Counter()
    for lines in split:
        seen.update({(place, _running_key(lines[i])) for place, i in _edges(lines)})
    needed = max(3, math.ceil(_RUNNING_SHARE * len(pages)))
    running = {key for key, count in seen.items() if key[1] and count >= needed}
    if not running:
        return list(pages)
    kept: list[str] = []
    for page, lines in zip(pages, split, strict=True):
        drop = {i for place, i in _edges(lines) if (place, _running_key(lines[i])) in running}
        body = [line for i, line in enumerate(lines) if i not in drop]
        kept.append("\n".join(body).strip() if any(line.strip() for line in body) else page)
    return kept


def _edges(lines: Sequence[str]) -> list[tuple[int, int]]:
    """A page's first and last ``_EDGE_LINES`` non-empty lines: (place, index), the place
    counted from the top (0, 1) or from the foot (-1, -2)."""
    filled = [i for i, line in enumerate(lines) if line.strip()]
    top = list(enumerate(filled[:_EDGE_LINES]))
    foot = [(-1 - n, i) for n, i in enumerate(reversed(filled[-_EDGE_LINES:]))]
    return top + foot


def _running_key(line: str) -> str:
    """A line as running lines repeat: its digits (page numbers), spacing and the order of its
    words aside (a book's even pages carry "42 gnuplot 5.4", its odd ones "gnuplot 5.4 43")."""
    return " ".join(sorted(re.sub(r"\d+", "#", line).casefold().split()))


def _contents_entry(line: str) -> bool:
    """Whether ``line`` (stripped) is a contents entry (only a line ending in a digit can be:
    checked first, as the pattern is searched from every position of the line)."""
    return line[-1:].isdigit() and _CONTENTS_ENTRY.search(line) is not None


def _mostly(lines: Sequence[str], test: Callable[[str], object]) -> bool:
    """Whether at least 60% of ``lines`` pass ``test``."""
    return sum(1 for line in lines if test(line)) >= 0.6 * len(lines)


def _words(text: str) -> int:
    return len(_WORD.findall(text))
