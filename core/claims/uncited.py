"""The report's uncited factual sentences: what its claim check never saw.

The claim check counts how the cited sentences held; a writer that cites less would look
better by it. This counts the other side: the sentences (list items, table rows) of the
writer's report that cite nothing, not even as their paragraph's closing citations
(``core.claims.split``), and state something a source could confirm or refute, by this rule:

- a number written in digits (``12``, ``3.5``, ``1,200``, ``2026``, ``12%``), not one that is
  part of a name (``GPT-4``, ``COVID-19``, ``H100``: letters, or letters and a hyphen, right
  before it);
- a number in words: two to twenty, dozen, hundred, thousand, million, billion, trillion;
  doubled, tripled, quadrupled, halved, twofold to tenfold; percent, per cent;
- in Chinese: ``百分之``; ``万`` or ``亿`` after a numeral (``3万``, ``两千万``, ``数亿``); ``倍``
  after a numeral, ``翻番``, ``翻倍``; a year in numerals (``二〇二四年``); a month (``三月``);
  a numeral from two up before a measure word (``三家``, ``五个``, ``两项``, ``十吨``).

Not counted: the title and headings, a question, a sentence of the sources, references or
notes sections, and of the open questions section the writer is asked for (a heading of level
1 or 2 that names open questions, uncertainties, unknowns, limitations or further research;
``未解决的问题``, ``不确定性``, ``局限``, ...), up to the next heading of its level. ``一`` alone is
no number (``一个``, ``一种`` mean "a"), nor is ``one`` (``one of the``).
"""

from __future__ import annotations

import re

from core.claims.split import statements
from core.words.wording import notes_heading

_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)")
_DIGITS = re.compile(r"(?<![A-Za-z\d])(?<![A-Za-z]-)\d+(?:[.,]\d+)*")
_WORDS = re.compile(
    r"\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
    r"fifteen|sixteen|seventeen|eighteen|nineteen|twenty|dozens?|hundreds?|thousands?|"
    r"millions?|billions?|trillions?|doubled?|doubling|tripled?|quadrupled?|halved|"
    r"(?:two|three|four|five|six|seven|eight|nine|ten)-?fold|percent|per cent)\b",
    re.IGNORECASE,
)
_NUMERAL = "零〇一二两三四五六七八九十百千"
_CHINESE = re.compile(
    rf"百分之|[\d{_NUMERAL}几数]\s*[万亿]|[\d{_NUMERAL}几数]\s*倍|翻[了一两\d]*番|翻倍"
    rf"|[〇零一二三四五六七八九]{{4}}年|(?<![{_NUMERAL}])[一二三四五六七八九十]{{1,2}}月"
    rf"|[二两三四五六七八九十百千][{_NUMERAL}]*"
    r"(?:个|家|名|位|座|项|种|次|辆|台|吨|公里|千米|米|元|美元|人|国|年|天|小时|季度)"
)
#: Sections whose sentences are not counted: sources, notes, open questions.
_UNCOUNTED = re.compile(
    r"^#{1,6}\s*(?:\d+[.)]?\s*)?(?:sources|references|bibliography|citations|来源|参考文献"
    rf"|参考资料|引用|{notes_heading('en')}|{notes_heading('zh')})\s*[:：]?\s*$"
    r"|^#{1,2}\s.*(?:open questions?|uncertaint|unanswered|unresolved|unknowns|limitations"
    r"|further research|knowledge gaps|开放(?:性)?问题|未解|待解|悬而未决|不确定|局限|有待研究"
    r"|进一步研究|未知)",
    re.IGNORECASE,
)


def uncited_statements(markdown: str) -> list[str]:
    """The sentences, list items and table rows of ``markdown`` (a report, citing as ``[n]``)
    that cite nothing and state something checkable (see the module), in order."""
    return [
        text
        for text, _, cites, _ in statements(markdown, _UNCOUNTED)
        if not cites and states_a_number(text)
    ]


def states_a_number(sentence: str) -> bool:
    """Whether ``sentence`` states a number a source could confirm (see the module); a
    question does not."""
    plain = _EMPHASIS.sub("", sentence).strip()
    if plain.rstrip(" )]」』\"'”").endswith(("?", "？")):
        return False
    return any(pattern.search(plain) for pattern in (_DIGITS, _WORDS, _CHINESE))
