"""The lexical pass: a claim its cited source plainly says is supported without asking a model.

Plainly says: the claim is near-verbatim, in order, in one sentence of a cited source's
passages (among the :data:`CANDIDATES` passages BM25 ranks best for the claim). Words are
compared as written (lower case, NFKC, ``1,200`` as ``1200``, ``percent`` as ``%``, ``didn't``
as ``did not``, the articles a/an/the left out); Chinese character by character. Then:

- every word of the claim is found in the sentence, in the claim's order (only punctuation,
  了 and 的 may be the claim's own);
- inside the part of the sentence that says the claim, the sentence may hold a few words more
  (a dropped modifier: "cut household emissions" said as "cut emissions"), at most
  :data:`GAP_WORDS` words in one place and :data:`GAP_SHARE` of the claim in all (a Chinese
  character is half a word), and none of them carries meaning of the kinds below, ends a
  clause (punctuation, "and", "but", 和, 但...) or stands next to a number ("by up to 40%");
- what the claim leaves out of the clauses it is cut from carries no meaning either ("in
  2025" of "rose 40% in 2025", "billion" of "69 billion", "more than" of "more than 40%",
  "than gas boilers" of "cheaper than gas boilers"); other clauses, and who said it ("the
  agency said"), may be left out;
- the rest of the sentence holds no negation, condition or hedge ("It is not true that ...",
  "..., which the company denied", "if", "may", 可能, 如果, 未...);
- every phrase the claim quotes is in the sentence word for word.

The kinds of words that carry a claim's meaning: negations (not, no, never, without, 不, 没,
未, 无...), conditions and hedges (if, may, could, likely, 可能, 如果, 预计...), quantities and
their units and scale words (numbers, %, percentage points, thousand, million, billion, 万,
亿...), dates (months, weekdays, quarters, years, seasons, 年, 月, 日, 季...), comparisons and
directions (more, less, higher, lower, increased, decreased, before, after, only, about, 增,
减, 升, 降, 前, 后, 高于, 低于...).

So a claim that flips the meaning with the same words (negated, million for billion, May for
March, the roles swapped, more for less, after for before, 未能, 亿 for 万, 减少 for 增加) is
never plainly supported, and neither is a claim reworded or reordered ("In 2019, X rose" for
"X rose in 2019"): those go to the verifier. A claim that fails this is not unsupported, only
not plainly supported: the verifier model judges it. One sentence, not the passage: a writer
that takes a number from the next sentence ("rose 12% in 2019" where 12% belongs to another
finding) states what the passage holds word by word, yet not what it says.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from itertools import pairwise

from core.claims.evidence import EvidenceKind
from core.claims.split import sentences_of
from core.documents.extract import bm25_scores, terms

#: The passages of a source (the best for the claim by BM25) that are looked at.
CANDIDATES = 3
#: The most words (a Chinese character counts half) the sentence may hold in one place
#: between the claim's words.
GAP_WORDS = 2.0
#: The most words the sentence may hold between the claim's words in all, as a share of the
#: claim's words (at least one word).
GAP_SHARE = 0.2

#: What stands for any punctuation that ends a clause (``,`` ``;`` ``:`` ``(`` ``)`` dashes).
_BOUNDARY = "|"
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_CHARACTER = re.compile(f"[{_HAN}]")
_PUNCTUATION = ",;:()、—–"
_TOKEN = re.compile(
    rf"\d+(?:\.\d+)?|[a-z][a-z0-9]*(?:['-][a-z0-9]+)*|[%$€£¥]|[{_HAN}]|[{_PUNCTUATION}]"
)
_QUOTED = re.compile(r"[\"“”「『]([^\"“”「」『』]{4,200})[\"“”」』]")
_ARTICLES = frozenset({"a", "an", "the"})
#: The verbs of contractions that are not the word before n't (won't is will not).
_FULL = {"ca": "can", "wo": "will", "sha": "shall"}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


NEGATIONS = _words(
    "not no never none nobody nothing neither nor without lack lacks lacked lacking fail fails "
    "failed failing unable deny denies denied refute refutes refuted false untrue"
)
HEDGES = _words(
    "if unless whether may might could would should maybe perhaps possibly probably likely "
    "unlikely allegedly alleged reportedly rumored rumoured supposedly expected expects "
    "forecast forecasts projected predicted unclear uncertain doubt doubts doubted disputed "
    "claim claims claimed"
)
NUMBER_WORDS = _words(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy "
    "eighty ninety hundred hundreds thousand thousands million millions billion billions "
    "trillion trillions dozen dozens bn mn tn k m"
)
QUANTITIES = NUMBER_WORDS | _words(
    "% $ € £ ¥ percentage point points half halves quarter quarters third thirds double "
    "doubled doubles triple tripled twice times fold"
)
DATES = _words(
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
    "saturday sunday mon tue tues wed thu thur thurs fri sat sun q1 q2 q3 q4 h1 h2 fy year "
    "years annual annually month months monthly week weeks weekly day days daily decade "
    "decades century today yesterday tomorrow tonight spring summer autumn winter first "
    "second fourth last next previous recent recently current currently now then ago"
)
COMPARISONS = _words(
    "more most less least fewer fewest higher highest lower lowest greater greatest smaller "
    "smallest larger largest bigger biggest better best worse worst above below over under "
    "exceed exceeds exceeded exceeding than up down increase increases increased increasing "
    "decrease decreases decreased decreasing rise rises rose risen rising fall falls fell "
    "fallen falling grow grows grew grown growing growth decline declines declined declining "
    "drop drops dropped dropping gain gains gained gaining lose loses lost losing loss losses "
    "raise raises raised raising lowered lowering cut cuts cutting surge surges surged plunge "
    "plunges plunged jump jumps jumped slump slumped climb climbs climbed shrink shrinks "
    "shrank shrunk expand expands expanded contract contracted before after since until till "
    "prior ahead behind earlier later former latter top bottom only just almost nearly about "
    "around approximately roughly some"
)
CLAUSE_WORDS = _words(
    "and or but while whereas although though yet because so hence thus however unlike "
    "despite except plus versus vs"
)
#: Words that carry a claim's meaning: never skipped between the claim's words.
MEANINGFUL = NEGATIONS | HEDGES | QUANTITIES | DATES | COMPARISONS
#: Words that change what the rest of a sentence says: none may stand outside the claim's part.
GUARDS = NEGATIONS | HEDGES

HAN_NEGATIONS = "不没沒未无無非否别莫勿"
HAN_NUMERALS = "〇零一二三四五六七八九十百千万萬亿億兆两兩"
#: Chinese characters that carry a claim's meaning (negations, numerals and scale, dates,
#: comparisons and directions, conditions and hedges).
HAN_MEANINGFUL = (
    HAN_NEGATIONS + HAN_NUMERALS + "半倍年月日号號周週季旬增减減升降涨漲跌多少超逾前后後较較"
    "更最比约約近仅僅只余餘可或若如将將拟擬估预預望疑传傳"
)
#: Chinese words of that kind whose characters alone do not say it (高 of 高效 says nothing).
HAN_MEANINGFUL_WORDS = tuple(
    "高于 低于 大于 小于 更高 较高 提高 最高 更低 较低 降低 最低 上升 下降 下滑 上涨 以上 以下 "
    "上半 下半 扩大 缩小 星期 礼拜".split()
)
HAN_CLAUSE = "和与與及而但并並且或"
#: What may not stand in a Chinese sentence outside the claim's part: a negation, a condition
#: or a hedge.
HAN_GUARDS = (
    *HAN_NEGATIONS,
    *"可能 或许 也许 如果 假如 若 除非 预计 预期 估计 有望 据称 据说 传闻 是否 能否".split(),
)
#: Words with a negation's character that negate nothing (未来 is the future, 非洲 Africa).
HAN_NOT_NEGATIONS = ("未来", "非洲", "非常", "无人机", "不断", "不仅", "无论")
#: What the claim may hold that the sentence does not: punctuation, 了 and 的.
_CLAIM_ONLY = frozenset({_BOUNDARY, "了", "的"})


@dataclass(frozen=True)
class Evidence:
    """What source ``n`` gave the writer: its passages (a page's, a file's, an internal
    document's; its snippet when nothing else), and what they are (``kind``)."""

    n: int
    title: str
    url: str
    passages: tuple[str, ...]
    kind: EvidenceKind = EvidenceKind.PAGE


@dataclass(frozen=True)
class Found:
    """Where the lexical pass found a claim plainly said: source ``n``, the ``sentence`` that
    says it (as its passage has it) and that ``passage``."""

    n: int
    sentence: str
    passage: str


def plainly_supported(statement: str, evidence: Sequence[Evidence]) -> bool:
    """Whether one sentence of one of ``evidence`` (the sources a claim cites) plainly says
    ``statement``: near-verbatim and in order, as the module says."""
    return plain_support(statement, evidence) is not None


def plain_support(statement: str, evidence: Sequence[Evidence]) -> Found | None:
    """The first sentence of ``evidence`` (the sources a claim cites, in its order) that
    plainly says ``statement``, and its source (None: none does); the same pass as
    :func:`plainly_supported`, which stops at the same sentence."""
    for source in evidence:
        found = _saying(statement, source.passages)
        if found is not None:
            return Found(source.n, *found)
    return None


def _saying(statement: str, passages: Sequence[str]) -> tuple[str, str] | None:
    """The sentence of ``passages`` that plainly says ``statement``, and its passage."""
    if not passages:
        return None
    claim = _tokens(statement)
    if not any(t not in _CLAIM_ONLY for t in claim):
        return None
    quotes = [_tokens(quote) for quote in _QUOTED.findall(statement)]
    scores = bm25_scores([terms(p) or [""] for p in passages], terms(statement))
    ranked = sorted(range(len(passages)), key=lambda i: scores[i], reverse=True)
    for best in ranked[:CANDIDATES]:
        for sentence in sentences_of(passages[best]):
            said = _tokens(sentence)
            if all(_contains(said, quote) for quote in quotes) and _says(said, claim):
                return sentence, passages[best]
    return None


def _tokens(text: str) -> list[str]:
    """The words of ``text`` as the lexical pass compares them: lower case, numbers without
    thousands separators, ``%`` for percent, ``not`` for ``n't``, each Chinese character
    apart, clause punctuation as ``|``, the articles left out."""
    text = unicodedata.normalize("NFKC", text).lower().replace("’", "'").replace("‘", "'")
    text = re.sub(r"\b(ca|wo|sha)n't\b", lambda m: _FULL[m.group(1)] + " not", text)
    text = re.sub(r"n't\b", " not", text).replace("cannot", "can not")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"\bper ?cent\b", "%", text)
    found = []
    for token in _TOKEN.findall(text):
        if token in _ARTICLES:
            continue
        found.append(_BOUNDARY if token in _PUNCTUATION else token)
    return found


def _says(sentence: Sequence[str], claim: Sequence[str]) -> bool:
    """Whether ``sentence`` plainly says ``claim`` (both as :func:`_tokens` gives them)."""
    if not claim or not sentence:
        return False
    matcher = SequenceMatcher(None, claim, sentence, autojunk=False)
    blocks = [b for b in matcher.get_matching_blocks() if b.size]
    if not blocks:
        return False
    matched = {b.a + k for b in blocks for k in range(b.size)}
    if any(t not in _CLAIM_ONLY for i, t in enumerate(claim) if i not in matched):
        return False
    start, end = blocks[0].b, blocks[-1].b + blocks[-1].size  # the part that says the claim
    skipped = 0.0
    for before, after in pairwise(blocks):
        gap = list(range(before.b + before.size, after.b))
        if not gap:
            continue
        weight = sum(_weight(sentence[i]) for i in gap)
        skipped += weight
        if weight > GAP_WORDS or not _skippable(sentence, gap):
            return False
    if skipped > max(1.0, GAP_SHARE * sum(_weight(t) for t in claim)):
        return False
    return _clause_kept(sentence, start, end) and not _guarded(sentence, start, end)


def _skippable(sentence: Sequence[str], gap: list[int]) -> bool:
    """Whether the sentence's words at ``gap`` can be left out of the claim without changing
    what it says: none carries meaning, ends a clause or stands next to a number."""
    first, last = gap[0], gap[-1]
    if _numeric(sentence[first - 1]) or _numeric(sentence[last + 1]):
        return False
    if any(_meaningful(sentence[i]) or _clause(sentence[i]) for i in gap):
        return False
    # A Chinese word of meaning may begin before the gap or end after it (提 + 高).
    around = "".join(t for t in sentence[first - 1 : last + 2] if _is_han(t))
    return not any(word in around for word in HAN_MEANINGFUL_WORDS)


def _clause_kept(sentence: Sequence[str], start: int, end: int) -> bool:
    """Whether what the claim's part of ``sentence`` (``start:end``) leaves out of the clauses
    it is cut from carries no meaning ("in 2025" of "rose 40% in 2025", "billion" of "69
    billion", "more than" of "more than 40%", "than gas boilers" of "cheaper than gas
    boilers"); other clauses, and who said it, may be left out."""
    left, right = start, end
    while left > 0 and not _clause(sentence[left - 1]):
        left -= 1
    while right < len(sentence) and not _clause(sentence[right]):
        right += 1
    if any(_meaningful(sentence[i]) for i in (*range(left, start), *range(end, right))):
        return False
    # A Chinese word of meaning may be cut in two (较 | 高).
    cut = (
        "".join(t for t in part if _is_han(t))
        for part in (sentence[left : start + 1], sentence[end - 1 : right])
    )
    return not any(word in text for text in cut for word in HAN_MEANINGFUL_WORDS)


def _guarded(sentence: Sequence[str], start: int, end: int) -> bool:
    """Whether the rest of ``sentence`` (outside ``start:end``) negates, conditions or hedges
    what the claim's part says."""
    outside = [*sentence[:start], *sentence[end:]]
    if any(t in GUARDS for t in outside):
        return True
    han = "".join(t for t in outside if _is_han(t))
    for word in HAN_NOT_NEGATIONS:
        han = han.replace(word, " ")
    return any(guard in han for guard in HAN_GUARDS)


def _contains(sentence: Sequence[str], part: Sequence[str]) -> bool:
    """Whether ``part`` stands in ``sentence`` word for word (a quoted phrase)."""
    size = len(part)
    return any(list(sentence[i : i + size]) == list(part) for i in range(len(sentence) - size + 1))


def _weight(token: str) -> float:
    """What ``token`` counts for in :data:`GAP_WORDS`: a word 1, a Chinese character half,
    punctuation nothing."""
    return 0.0 if token == _BOUNDARY else 0.5 if _is_han(token) else 1.0


def _is_han(token: str) -> bool:
    return len(token) == 1 and _HAN_CHARACTER.match(token) is not None


def _numeric(token: str) -> bool:
    return token[0].isdigit() or token in NUMBER_WORDS or (_is_han(token) and token in HAN_NUMERALS)


def _meaningful(token: str) -> bool:
    return token in MEANINGFUL or _numeric(token) or (_is_han(token) and token in HAN_MEANINGFUL)


def _clause(token: str) -> bool:
    return token == _BOUNDARY or token in CLAUSE_WORDS or (_is_han(token) and token in HAN_CLAUSE)
