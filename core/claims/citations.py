"""Every form in which a writer cites a source, made one: ``[n]``, the source's own number.

The writer is shown its sources as ``[n] title — url`` and told to cite ``[n]``; models cite
as they were trained to all the same. :func:`normalise_citations` turns each of these into
``[n]`` before a report's claims are split (so every form is checked) and before
``core.research.report.finalize_report`` renumbers them (it calls this very function):

- grouped, ranged and separated numbers: ``[1, 2]``, ``[1,2][3]``, ``[1-3]``, ``[1–3]``,
  ``[1; 2]``, and the same in double brackets (``[[4]]``);
- the same numbers in full-width brackets, as Chinese text writes them: ``【1】``, ``【1，2】``,
  ``［1］``;
- a word before the number: ``[citation:2]`` (DeepSeek's search answers), ``[cite: 12]``,
  ``[Source 3]``, ``[Reference 1]``;
- Markdown footnotes ``[^1]``: a footnote whose definition (``[^1]: [Title](url)``) names the
  address of a found source cites that source; one whose definition names an address no
  search returned cites nothing; otherwise ``[^n]`` cites source ``n``. The definitions are
  taken out;
- Markdown links and bare addresses of a found source: ``[the study](url)`` becomes
  ``the study [n]``, ``[3](url)``, a bare ``url`` and ``(url)`` become ``[n]``; a link or
  address of a source no search returned is unlinked (its text kept; a number or a bare
  address dropped).

Numbers are kept as written, even those of no source (the check then finds no evidence for
them, and ``finalize_report`` drops them). Not citations, since the same marks mean other
things in prose: ``(1)`` (an enumeration, a year in parentheses), ``¹`` and ``^1``
(exponents). A sources or references section the writer wrote itself (against its
instructions) is taken out too: the report's is generated from data.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from core.untrusted import neutralise

#: The numbers of one group: ``1``, ``1, 2``, ``1-3``, ``1; 2`` (at most 4 digits each: no
#: source list is longer, and int() of a huge number raises).
_NUMBERS = r"\d{1,4}(?:\s*[,;，；、–-]\s*\d{1,4})*"
#: ``[1, 2]``, ``[1-3]``, ``[[4]]``, ``[citation:2]``, ``[Source 3]`` (not a link's text).
_GROUP = re.compile(
    r"\[\[?\s*(?:(?:citations?|cite|sources?|references?|refs?)\s*[:.]?\s*)?"
    rf"({_NUMBERS})\s*\]?\](?!\()",
    re.IGNORECASE,
)
#: ``【1】``, ``【1，2】``, ``［1］``.
_WIDE_GROUP = re.compile(rf"[【［]\s*({_NUMBERS})\s*[】］]")
#: Citations alone in parentheses (a link or address that was in them): ``([2])``.
_PARENTHESISED = re.compile(r"[(（]\s*((?:\[\d{1,4}\]\s*)+)[)）]")
#: The text of a link that is only a citation: ``[3](url)``.
_NUMERIC_TEXT = re.compile(rf"\s*{_NUMBERS}\s*")
# Links and images (their text may hold a citation: ``[[1]](url)``); the URL may be wrapped
# in <> and followed by a "title".
_LINK = re.compile(
    r"!?\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\(<?(https?://[^)\s>]+)>?(?:\s+\"[^\"\n]*\")?\)"
)
# Any other URL (or www. address), also inside (), <> or [] (links were handled before).
_BARE_URL = re.compile(r"<?(?:\bhttps?://|\bwww\.)[^\s<>\])]+>?", re.IGNORECASE)
#: A footnote's definition line, and a reference to one.
_FOOTNOTE_DEFINITION = re.compile(r"^[ \t]{0,3}\[\^([^\]\s]{1,40})\]:[ \t]*(.*)\n?", re.MULTILINE)
_FOOTNOTE = re.compile(r"\[\^([^\]\s]{1,40})\](?!:)")
_SOURCE_WORDS = r"(?:sources|references|bibliography|citations|works cited|links|further reading)"
# A heading that is only a sources list ("## References", "### Sources and links:"), not
# a theme that starts with such a word ("### Sources of uncertainty").
_SOURCES_HEADING = re.compile(
    rf"^#{{1,6}}\s*(?:\d+[.)]?\s*)?(?:{_SOURCE_WORDS}(?:\s*(?:and|&|/)\s*{_SOURCE_WORDS})?"
    r"|参考资料|参考来源|参考文献|来源|引用|参考链接|出典|参考)\s*[:：]?\s*$",
    re.IGNORECASE | re.MULTILINE,
)


@dataclass(frozen=True)
class NormalisedCitations:
    """A writer's Markdown citing only as ``[n]``, and how many links and addresses of no
    found source were unlinked."""

    markdown: str
    unlinked: int


def normalise_citations(
    markdown: str, source_at: Callable[[str], int | None]
) -> NormalisedCitations:
    """``markdown`` (a writer's answer, untrusted) with every citation form of the module made
    ``[n]``; ``source_at``: the number of the found source at an address (None: no search
    returned it). Mentions and platform link syntax are made inert first (``<url|text>`` is a
    link like any other)."""
    unlinked = 0

    def linked(url: str) -> int | None:
        nonlocal unlinked
        found = source_at(url)
        if found is None:
            unlinked += 1
        return found

    def fix_link(match: re.Match[str]) -> str:
        text, url = match.group(1).strip(), match.group(2)
        source = linked(url)
        # "[3](url)" and "[[3]](url)" are citations
        numeric = _NUMERIC_TEXT.fullmatch(text.strip("[]")) is not None
        if source is None:
            return "" if numeric else text
        return f"[{source}]" if numeric or not text else f"{text} [{source}]"

    def fix_bare(match: re.Match[str]) -> str:
        raw = match.group(0).strip("<>")
        url = raw.rstrip(".,;:!?")
        source = linked(url)
        return raw[len(url) :] if source is None else f"[{source}]{raw[len(url) :]}"

    text = neutralise(markdown.strip())
    notes: dict[str, list[int]] = {}

    def definition(match: re.Match[str]) -> str:
        label, said = match.group(1), match.group(2)
        links = [m.group(2) for m in _LINK.finditer(said)]
        addresses = links or [
            m.group(0).strip("<>").rstrip(".,;:!?") for m in _BARE_URL.finditer(said)
        ]
        if addresses:
            notes[label] = [n for n in map(linked, addresses) if n is not None]
        elif numbers := [n for group in _GROUP.findall(said) for n in expand(group)]:
            notes[label] = numbers
        return ""

    def footnote(match: re.Match[str]) -> str:
        label = match.group(1)
        if label in notes:
            return _cited(notes[label])
        return f"[{int(label)}]" if label.isdigit() and len(label) <= 4 else match.group(0)

    text = _FOOTNOTE_DEFINITION.sub(definition, text)
    text = _FOOTNOTE.sub(footnote, text)
    text = _strip_model_sources(text)
    text = _LINK.sub(fix_link, text)
    text = _BARE_URL.sub(fix_bare, text)
    text = re.sub(r"(?<![\w)\]])(?:\(\s*\)|\[\s*\])", "", text)  # brackets of a removed URL
    text = _WIDE_GROUP.sub(lambda m: _cited(expand(m.group(1))), text)
    text = _GROUP.sub(lambda m: _cited(expand(m.group(1))), text)
    text = _PARENTHESISED.sub(lambda m: m.group(1).strip(), text)
    return NormalisedCitations(text.strip(), unlinked)


def expand(group: str) -> list[int]:
    """The numbers of a group as written (``1, 2`` -> 1, 2; ``1-3`` -> 1, 2, 3; a range of
    20 or more is its two ends), each once."""
    numbers: list[int] = []
    for part in re.split(r"\s*[,;，；、]\s*", group.strip()):
        if re.fullmatch(r"\d+\s*[–-]\s*\d+", part):
            lo, hi = (int(x) for x in re.split(r"\s*[–-]\s*", part))
            numbers.extend(range(lo, hi + 1) if 0 < hi - lo < 20 else (lo, hi))
        elif part.isdigit():
            numbers.append(int(part))
    return list(dict.fromkeys(numbers))


def _cited(numbers: list[int]) -> str:
    return "".join(f"[{n}]" for n in numbers)


def _strip_model_sources(markdown: str) -> str:
    """Drop any sources/references section the model wrote despite being told not to."""
    match = _SOURCES_HEADING.search(markdown)
    if not match:
        return markdown
    level = len(match.group(0)) - len(match.group(0).lstrip("#"))
    rest = markdown[match.end() :]
    following = re.search(rf"^#{{1,{level}}}\s", rest, re.MULTILINE)
    tail = rest[following.start() :] if following else ""
    return markdown[: match.start()].rstrip() + ("\n\n" + tail if tail else "")
