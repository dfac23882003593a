"""The claim check's benchmark (issues 37 and 52): what it catches, what it wrongly changes, what a
malformed verifier leaves, and what it costs a run.

(i) Accuracy. Generated reports, each on its own 8 sources (3 passages each, every passage two
sentences of generated facts: organisations, places, years, amounts), checked as the writer
checks its own (:func:`core.engine.sources.cited_body` makes every citation form ``[n]``, then
:func:`core.claims.check.check_claims`), with a verifier that answers as a perfect judge would
from what it is shown: it knows where each sentence came from, names the true source only when
the request shows it, and rewrites a failing claim to the sentence its source says when that
source is shown (else null), in the same answer (``text``) or, for a verifier that gives none,
as the reviser. So the figures measure Fathom's part (citation forms, splitting, the lexical
pass, batching, what is shown, re-citing, revising, marking, reading answers strictly), not a
model's judgement; ``fathom eval --judge-check`` with a real model measures that. A fault is
caught when its claim is re-cited, revised, dropped or marked; a correct claim is changed when
any of these happens to it. Families:

- ``generated`` (issue 37): 50 reports of 16 cited claims: 9 correct (5 copied from the cited
  source, 3 reworded with its numbers and most of its words kept, one citing two sources) and
  7 planted faults (two sentences copied from another source than the one cited, two taking a
  number from the next sentence of the same passage, two with a number changed, one invented).
  Also checked with a verifier that gives no ``text`` (the reviser then rewrites).
- ``meaning flips`` (issue 52): 50 English reports (2 flips of each of 6 kinds and 6 copied
  correct claims) and 50 Chinese ones (2 flips of each of 3 kinds, 6 copied claims). A flip
  is a source's sentence with the same words saying something else: negation (a "not" added or
  dropped), million<->billion, a month changed (March->May), the two organisations' roles
  swapped, more<->less and higher<->lower, before<->after; 完成了<->未能完成, 亿<->万,
  增加<->减少. The judge calls each "contradicted". Each must reach the verifier: the lexical
  pass (no model) may settle none of them.
- ``citation forms`` (issue 52): the ``generated`` reports (other seeds, 25 of each form)
  citing as models do: ``[1, 2]``, ``[1-3]``, ``[1; 2]``, Markdown links of the found sources
  (the organisation's name linked), bare URLs in parentheses, ``【1】``, footnotes ``[^1]`` whose
  definitions link the sources (numbered in the order of first use, so not the sources'
  numbers), and paragraphs whose citations all sit at their end (``A. B. C. D. [1][2][3]``,
  each sentence's true source among them, a miscited sentence's not).
- ``malformed verifiers`` (issue 52): 20 ``generated`` reports (other seeds) per shape, checked
  by the real client (:class:`core.llm.ChatModel`, with its one re-ask) against the fake LLM
  (``tests/fakes/llm.py``) answering in each shape of ``VERIFIER_SHAPES`` (ids from 0, ids
  past the last claim, a renamed key, ``"id"`` for ``"claim"``, an empty list, "yes"/"not
  supported", a claim left out, one twice, JSON cut off with ``length`` or ``stop``, a
  rewrite given as a list), and a verifier that sends its headers and then nothing (cut at a
  0.5 s check budget); as a control, a well-formed answer (``contract``: not partial, its
  verdicts used). Half the reports with a lenient verdict inside (every claim supported:
  were it used, faults would pass), half with the literal one. A report "says partial" when
  its note is the "Citations checked in part" one; nothing may be supported or fixed on such
  an answer's word.

Goals: at least 95 % of the faults caught in each family with a correct verifier, at most 3 %
of the correct claims changed, 100 % of the reports "partial" with a malformed verifier.

(ii) Cost. Depth-3 runs through ``open_runtime`` (pages read, 3 per search) against the fakes
at 400 ms per LLM call, 300 ms per search and 150 ms per page, with the check on and off, for
four writers: one that cites correctly (the lexical pass settles every claim), one that
miscites a sentence (one verifier call, re-cited), one that also invents a number (one call:
the verifier rewrites it in the same answer), and the same with a verifier that gives no
rewrite (the verifier and then the reviser). The extra LLM calls (goal at most 2) and the
extra wall time as a share of the run's waits (LLM calls × 0.4 + searches × (0.3 + 0.15);
goal at most 15 %), median of :data:`COST_RUNS` runs.

Run: ``.venv/bin/python -m bench.claims [--quick] [--output FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from bench.common import cpu_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "claims.json"
REPORTS = 50
FORM_REPORTS = 25
MALFORMED_REPORTS = 20
SOURCES = 8
LLM_LATENCY, SEARCH_LATENCY, PAGE_LATENCY = 0.4, 0.3, 0.15
DEPTH = 3
#: Runs per writer in (ii), checked and unchecked (the median is reported).
COST_RUNS = 5
#: The check's time budget for the hanging verifier (real seconds).
HANG_BUDGET = 0.5

T = TypeVar("T", bound=BaseModel)

ORGS = [
    "Northwind Energy",
    "the Helios Institute",
    "Baltic Grid",
    "Meridian Labs",
    "Orion Motors",
    "the Kestrel Foundation",
    "Atlas Storage",
    "Vireo Analytics",
    "Crescent Power",
    "Tamarack Bio",
    "Lumen Materials",
    "Harbor Cities Council",
    "Pinecrest University",
    "Solace Health",
]
PLACES = [
    "Rotterdam",
    "Ohio",
    "Bavaria",
    "Queensland",
    "Gujarat",
    "Ontario",
    "Chile",
    "Kenya",
    "Hokkaido",
    "Andalusia",
    "Texas",
    "Sichuan",
    "Norway",
    "Morocco",
]
SUBJECTS = [
    "heat pumps",
    "sodium-ion batteries",
    "offshore wind",
    "green hydrogen",
    "grid storage",
    "electric buses",
    "solid-state batteries",
    "carbon capture",
    "small modular reactors",
    "perovskite solar cells",
]
MONTHS = (
    "January February March April May June July August September October November December"
).split()
#: Made-up organisations, and places and subjects, for the Chinese reports.
ORGS_ZH = ["北辰能源", "华岳研究院", "东海电网", "明川实验室", "星河汽车", "青松基金会", "云杉储能"]
PLACES_ZH = ["四川", "广东", "江苏", "内蒙古", "甘肃", "浙江", "云南", "山东", "新疆", "福建"]
SUBJECTS_ZH = ["热泵", "钠离子电池", "海上风电", "绿氢", "储能电站", "电动公交"]
TEMPLATES = [
    "{org} reported that installations of {subject} in {place} rose {pct}% in {year}.",
    "According to {org}, a typical {subject} project in {place} cost {amount} million dollars "
    "in {year}.",
    "{org} plans to build {count} {subject} sites in {place} by {year}.",
    "In {year}, {org} measured an efficiency of {pct}% for {subject} in {place}.",
    "{org} estimated that {subject} employed {count} thousand people in {place} in {year}.",
    "A survey by {org} found that {pct}% of households in {place} considered {subject} in {year}.",
]
#: A rewording of each template that keeps its numbers and most of its words (what a writer
#: does to a source's sentence).
REWORDED = [
    "In {year}, installations of {subject} in {place} rose {pct}%, {org} reported.",
    "A typical {subject} project in {place} cost {amount} million dollars in {year}, "
    "according to {org}.",
    "By {year}, {org} plans to build {count} {subject} sites in {place}.",
    "{org} measured a {pct}% efficiency for {subject} in {place} in {year}.",
    "In {place}, {subject} employed {count} thousand people in {year}, {org} estimated.",
    "In {year}, {pct}% of households in {place} considered {subject}, a survey by {org} found.",
]
#: Each meaning flip: pairs of sentences with the same words that say different things (a
#: source says one, the claim the other, either way round).
FLIPS: dict[str, list[tuple[str, str]]] = {
    "negation": [
        (
            "{org} said {subject} sites in {place} were profitable in {year}.",
            "{org} said {subject} sites in {place} were not profitable in {year}.",
        ),
        (
            "{org} will build {count} {subject} sites in {place} by {year}.",
            "{org} will not build {count} {subject} sites in {place} by {year}.",
        ),
    ],
    "million/billion": [
        (
            "{org} invested {amount} million dollars in {subject} in {place} in {year}.",
            "{org} invested {amount} billion dollars in {subject} in {place} in {year}.",
        ),
    ],
    "month": [
        (
            "{org} opened its first {subject} plant in {place} in {month} {year}.",
            "{org} opened its first {subject} plant in {place} in {month2} {year}.",
        ),
    ],
    "swapped roles": [
        (
            "{org} acquired the {subject} business of {org2} in {year}.",
            "{org2} acquired the {subject} business of {org} in {year}.",
        ),
        (
            "{org} supplied {subject} equipment to {org2} in {place} in {year}.",
            "{org2} supplied {subject} equipment to {org} in {place} in {year}.",
        ),
    ],
    "comparatives": [
        (
            "In {place}, {subject} cost more than gas boilers in {year}, {org} found.",
            "In {place}, {subject} cost less than gas boilers in {year}, {org} found.",
        ),
        (
            "{org} reported higher {subject} sales in {place} than in {place2} in {year}.",
            "{org} reported lower {subject} sales in {place} than in {place2} in {year}.",
        ),
    ],
    "before/after": [
        (
            "{org} finished the {subject} trial in {place} before the {year} election.",
            "{org} finished the {subject} trial in {place} after the {year} election.",
        ),
    ],
    "未能 (zh)": [
        (
            "{org_zh}在{year}年完成了{place_zh}的{subject_zh}项目。",
            "{org_zh}在{year}年未能完成{place_zh}的{subject_zh}项目。",
        ),
    ],
    "亿/万 (zh)": [
        (
            "{org_zh}在{place_zh}投资了{amount}亿元建设{subject_zh}项目。",
            "{org_zh}在{place_zh}投资了{amount}万元建设{subject_zh}项目。",
        ),
    ],
    "增加/减少 (zh)": [
        (
            "{year}年{place_zh}的{subject_zh}装机量增加了{pct}%。",
            "{year}年{place_zh}的{subject_zh}装机量减少了{pct}%。",
        ),
    ],
}
FLIPS_EN = [kind for kind in FLIPS if not kind.endswith("(zh)")]
FLIPS_ZH = [kind for kind in FLIPS if kind.endswith("(zh)")]
#: Flips planted of each kind in one report, and copied correct claims beside them.
FLIPS_PER_KIND = 2
COPIES_BESIDE_FLIPS = 6


@dataclass
class Fact:
    template: int
    values: dict[str, Any]
    source: int  # the source number that says it

    def text(self, reworded: bool = False) -> str:
        return (REWORDED if reworded else TEMPLATES)[self.template].format(**self.values)


@dataclass
class PlantedClaim:
    text: str  # as written in the report, without its citations
    cites: tuple[int, ...]
    #: Where the sentence truly comes from (None: no source says it).
    truth: int | None
    fault: str | None = None  # miscited, swapped, number, invented, or a flip's kind
    #: A correct sentence a reviser could write instead, and the source that says it.
    correct: str | None = None
    origin: int | None = None
    #: The organisation the sentence names (a Markdown link's text).
    org: str = ""


@dataclass
class Report:
    markdown: str
    evidence: dict[int, Any]
    claims: list[PlantedClaim] = field(default_factory=list)
    subject: str = ""
    language: str = "en"


def _fact(rng: random.Random, subject: str, source: int) -> Fact:
    values = {
        "org": rng.choice(ORGS),
        "place": rng.choice(PLACES),
        "subject": subject,
        "year": rng.randint(2015, 2026),
        "pct": rng.randint(3, 97),
        "amount": rng.randint(2, 900),
        "count": rng.randint(2, 400),
    }
    return Fact(rng.randrange(len(TEMPLATES)), values, source)


def _number_keys(fact: Fact) -> list[str]:
    """The values of ``fact``'s sentence that are amounts (not its year)."""
    return [k for k in ("pct", "count", "amount") if f"{{{k}}}" in TEMPLATES[fact.template]]


def _evidence(n: int, subject: str, index: int, passages: tuple[str, ...]) -> Any:
    from core.claims.lexical import Evidence

    return Evidence(
        n, f"{subject.title()} report {n}", f"https://site{n}.example/{index}", passages
    )


def build_report(rng: random.Random, index: int) -> Report:
    """One ``generated`` report on its own sources, with its planted faults (see the module's
    docstring), its claims citing as ``[n]``."""
    subject = SUBJECTS[index % len(SUBJECTS)]
    facts: dict[int, list[Fact]] = {}
    evidence: dict[int, Any] = {}
    for n in range(1, SOURCES + 1):
        facts[n] = [_fact(rng, subject, n) for _ in range(6)]
        passages = tuple(" ".join(f.text() for f in facts[n][i : i + 2]) for i in range(0, 6, 2))
        evidence[n] = _evidence(n, subject, index, passages)
    report = Report("", evidence, subject=subject)
    planted: list[PlantedClaim] = []
    used: set[tuple[int, int]] = set()

    def pick() -> Fact:
        while True:
            n, k = rng.randint(1, SOURCES), rng.randrange(6)
            if (n, k) not in used:
                used.add((n, k))
                return facts[n][k]

    for i in range(9):  # correct: copied (5), reworded (3), one citing two sources
        fact = pick()
        reworded = 5 <= i < 8
        cites: tuple[int, ...] = (fact.source,)
        if i == 8:
            other = rng.choice([n for n in range(1, SOURCES + 1) if n != fact.source])
            cites = (other, fact.source)
        org = fact.values["org"]
        planted.append(PlantedClaim(fact.text(reworded), cites, fact.source, org=org))
    for _ in range(2):  # copied from another source than the one cited
        fact = pick()
        wrong = rng.choice([n for n in range(1, SOURCES + 1) if n != fact.source])
        planted.append(
            PlantedClaim(
                fact.text(),
                (wrong,),
                fact.source,
                "miscited",
                fact.text(),
                fact.source,
                fact.values["org"],
            )
        )
    for _ in range(2):  # a number taken from the next sentence of the same passage
        fact = pick()
        k = facts[fact.source].index(fact)
        neighbour = facts[fact.source][k + 1 if k % 2 == 0 else k - 1]
        mine = _number_keys(fact)[0]
        theirs = [neighbour.values[key] for key in _number_keys(neighbour)]
        taken = next((v for v in theirs if v != fact.values[mine]), fact.values[mine] + 1)
        swapped = Fact(fact.template, {**fact.values, mine: taken}, fact.source)
        planted.append(
            PlantedClaim(
                swapped.text(),
                (fact.source,),
                None,
                "swapped",
                fact.text(),
                fact.source,
                fact.values["org"],
            )
        )
    for _ in range(2):  # a number changed
        fact = pick()
        key = _number_keys(fact)[0]
        changed = Fact(fact.template, {**fact.values, key: fact.values[key] + 11}, fact.source)
        planted.append(
            PlantedClaim(
                changed.text(),
                (fact.source,),
                None,
                "number",
                fact.text(),
                fact.source,
                fact.values["org"],
            )
        )
    invented = _fact(rng, subject, 0)  # nobody says it
    invented.values["org"], invented.values["place"] = "Quillon Partners", "Tasmania"
    planted.append(
        PlantedClaim(
            invented.text(), (rng.randint(1, SOURCES),), None, "invented", org="Quillon Partners"
        )
    )
    rng.shuffle(planted)
    report.claims = planted
    report.markdown = _layout(subject, [_bracketed(c) for c in planted])
    return report


def _bracketed(claim: PlantedClaim) -> str:
    """The claim as the ``generated`` family writes it: its citations after its full stop."""
    return f"{claim.text} {''.join(f'[{n}]' for n in claim.cites)}"


def _layout(subject: str, sentences: Sequence[str], paragraphs: Sequence[str] = ()) -> str:
    """A report: the first 7 cited sentences as list items, the others one paragraph (or
    ``paragraphs``, as given)."""
    lines = [f"# {subject.title()}: where things stand", "", "## Summary", ""]
    lines.append(f"This report looks at {subject} across several markets.")
    lines += ["", "## Main findings", ""]
    if paragraphs:
        lines.append("\n\n".join(paragraphs))
    else:
        lines += [f"- {sentence}" for sentence in sentences[:7]]
        lines += ["", "## Details", "", " ".join(sentences[7:])]
    lines += ["", "## Open questions", "", f"How {subject} will develop after 2030 is unclear."]
    return "\n".join(lines) + "\n"


# --- meaning flips --------------------------------------------------------------------------


#: The organisations a flip names (none with an article: a sentence may start with either).
FLIP_ORGS = [org for org in ORGS if not org.startswith("the ")]


def _flip_values(rng: random.Random, subject: str, subject_zh: str) -> dict[str, Any]:
    org, org2 = rng.sample(FLIP_ORGS, 2)
    place, place2 = rng.sample(PLACES, 2)
    month, month2 = rng.sample(MONTHS, 2)
    return {
        "org": org,
        "org2": org2,
        "place": place,
        "place2": place2,
        "subject": subject,
        "year": rng.randint(2015, 2026),
        "pct": rng.randint(3, 97),
        "amount": rng.randint(2, 900),
        "count": rng.randint(2, 400),
        "month": month,
        "month2": month2,
        "org_zh": rng.choice(ORGS_ZH),
        "place_zh": rng.choice(PLACES_ZH),
        "subject_zh": subject_zh,
    }


def build_flip_report(rng: random.Random, index: int, language: str) -> Report:
    """One report whose sources state sentences of the flips' kinds (``language``'s), with
    :data:`FLIPS_PER_KIND` flips of each kind cited to the source whose sentence they flip, and
    :data:`COPIES_BESIDE_FLIPS` sentences copied from their sources."""
    kinds = FLIPS_EN if language == "en" else FLIPS_ZH
    subject = SUBJECTS[index % len(SUBJECTS)]
    subject_zh = SUBJECTS_ZH[index % len(SUBJECTS_ZH)]
    said: list[tuple[str, str, str, int]] = []  # (kind, the source's sentence, its flip, n)
    evidence: dict[int, Any] = {}
    for n in range(1, SOURCES + 1):
        sentences = []
        for k in range(6):
            kind = kinds[(n * 6 + k) % len(kinds)]
            sentence = flipped = ""
            while not sentence or any(sentence in (s[1], s[2]) for s in said):
                pair = rng.choice(FLIPS[kind])
                first = rng.randrange(2)
                values = _flip_values(rng, subject, subject_zh)
                sentence, flipped = pair[first].format(**values), pair[1 - first].format(**values)
            sentences.append(sentence)
            said.append((kind, sentence, flipped, n))
        joiner = " " if language == "en" else ""
        passages = tuple(joiner.join(sentences[i : i + 2]) for i in range(0, 6, 2))
        evidence[n] = _evidence(n, subject, index, passages)
    everything = " ".join(p for source in evidence.values() for p in source.passages)
    rng.shuffle(said)
    planted: list[PlantedClaim] = []
    for kind in kinds:
        of_kind = [s for s in said if s[0] == kind and s[2] not in everything]
        for _, sentence, flipped, n in of_kind[:FLIPS_PER_KIND]:
            planted.append(PlantedClaim(flipped, (n,), None, kind, sentence, n))
            said.remove((kind, sentence, flipped, n))
    for _, sentence, _, n in said[:COPIES_BESIDE_FLIPS]:
        planted.append(PlantedClaim(sentence, (n,), n))
    rng.shuffle(planted)
    report = Report("", evidence, planted, subject if language == "en" else subject_zh, language)
    if language == "en":
        report.markdown = _layout(subject, [_cited_before_stop(c, c.cites) for c in planted])
    else:
        items = "\n".join(f"- {_cited_before_stop(c, c.cites)}" for c in planted)
        report.markdown = (
            f"# {subject_zh}的现状\n\n## 摘要\n\n本报告介绍{subject_zh}在各地的情况。\n\n"
            f"## 主要发现\n\n{items}\n\n## 未解决的问题\n\n{subject_zh}在2030年后的发展尚不清楚。\n"
        )
    return report


def _cited_before_stop(claim: PlantedClaim, cites: Sequence[int], marker: str = "") -> str:
    """The claim with ``marker`` (else ``[n]`` for each of ``cites``) before its closing mark."""
    cited = marker or "".join(f"[{n}]" for n in cites)
    if claim.text.endswith("。"):
        return f"{claim.text[:-1]}{cited}。"
    return f"{claim.text[:-1]} {cited}."


# --- citation forms ---------------------------------------------------------------------------


def _others(claim: PlantedClaim, rng: random.Random, count: int) -> tuple[int, ...]:
    """``count`` more sources for ``claim`` to cite: none it cites, nor the one that says a
    miscited claim (its fault would be gone)."""
    banned = set(claim.cites) | ({claim.truth} if claim.fault == "miscited" else set())
    return tuple(rng.sample([n for n in range(1, SOURCES + 1) if n not in banned], count))


def _range_of(claim: PlantedClaim, rng: random.Random) -> tuple[int, int]:
    """A range of 3 sources (2 where 3 cannot be had) holding the source a correct claim
    comes from, or the first a faulty one cites, and not a miscited claim's true source."""
    anchor = claim.truth if claim.fault is None and claim.truth is not None else claim.cites[0]
    for size in (3, 2):
        starts = [
            s
            for s in range(max(1, anchor - size + 1), min(anchor, SOURCES - size + 1) + 1)
            if claim.fault != "miscited" or not s <= (claim.truth or 0) < s + size
        ]
        if starts:
            start = rng.choice(starts)
            return start, start + size - 1
    return anchor, anchor


def _form_sentences(
    report: Report, form: str, rng: random.Random
) -> tuple[list[str], list[str], str]:
    """The report's claims written in ``form``: the sentences of the usual layout, or its
    paragraphs (``paragraph end``), and what follows the report (footnote definitions)."""
    url = {n: source.url for n, source in report.evidence.items()}
    title = {n: source.title for n, source in report.evidence.items()}
    sentences: list[str] = []
    after = ""
    if form == "paragraph end":
        return [], _closing_paragraphs(report.claims, rng), ""
    labels: dict[int, int] = {}
    for claim in report.claims:
        if form in ("grouped [1, 2]", "separated [1; 2]"):
            cites = claim.cites + _others(claim, rng, 1)
            separator = ", " if form.startswith("grouped") else "; "
            sentences.append(
                _cited_before_stop(claim, cites, f"[{separator.join(map(str, cites))}]")
            )
        elif form == "ranged [1-3]":
            low, high = _range_of(claim, rng)
            sentences.append(_cited_before_stop(claim, (), f"[{low}-{high}]"))
        elif form == "full-width 【1】":
            marker = "【" + "，".join(map(str, claim.cites)) + "】"
            sentences.append(_cited_before_stop(claim, (), marker))
        elif form == "Markdown links":
            first, *rest = claim.cites
            text = claim.text.replace(claim.org, f"[{claim.org}]({url[first]})", 1)
            numbered = " ".join(f"[{n}]({url[n]})" for n in rest)
            sentences.append(f"{text[:-1]} {numbered}." if numbered else text)
        elif form == "bare URLs":
            addresses = " ".join(f"({url[n]})" for n in claim.cites)
            sentences.append(f"{claim.text[:-1]} {addresses}.")
        elif form == "footnotes [^1]":
            marks = ""
            for n in claim.cites:
                labels.setdefault(n, len(labels) + 1)
                marks += f"[^{labels[n]}]"
            sentences.append(f"{claim.text[:-1]}{marks}.")
        else:
            raise ValueError(f"unknown citation form {form!r}")
    if labels:
        after = "\n" + "\n".join(f"[^{k}]: [{title[n]}]({url[n]})" for n, k in labels.items())
    return sentences, [], after


FORMS = (
    "grouped [1, 2]",
    "ranged [1-3]",
    "separated [1; 2]",
    "Markdown links",
    "bare URLs",
    "full-width 【1】",
    "footnotes [^1]",
    "paragraph end",
)


def _closing_paragraphs(claims: Sequence[PlantedClaim], rng: random.Random) -> list[str]:
    """The claims as paragraphs of 4 sentences whose citations (all of theirs) sit at the
    paragraph's end, grouped so that no miscited claim's true source is among them."""
    for _ in range(10_000):
        order = list(claims)
        rng.shuffle(order)
        groups = [order[i : i + 4] for i in range(0, len(order), 4)]
        cited = [sorted({n for c in group for n in c.cites}) for group in groups]
        if all(
            c.truth not in numbers
            for group, numbers in zip(groups, cited, strict=True)
            for c in group
            if c.fault == "miscited"
        ):
            return [
                " ".join(c.text for c in group) + " " + "".join(f"[{n}]" for n in numbers)
                for group, numbers in zip(groups, cited, strict=True)
            ]
    raise RuntimeError("no grouping of the claims keeps the miscitations")


def form_report(report: Report, form: str, rng: random.Random) -> Report:
    """``report`` with its claims citing in ``form``."""
    sentences, paragraphs, after = _form_sentences(report, form, rng)
    markdown = _layout(report.subject, sentences, paragraphs) + after
    return replace(report, markdown=markdown)


# --- the judge ---------------------------------------------------------------------------------


def _plain(text: str) -> str:
    return " ".join(re.sub(r"\[\d+\]", " ", text).split()).strip(" .。")


#: A claim of a verifier's or a reviser's request: its number, its text, what it cites.
CLAIM_BLOCK = re.compile(r"^Claim (\d+): (.*)\nCited: (.*)$", re.MULTILINE)


class Judge:
    """The verifier and the reviser of one report, answering as a perfect judge from what it
    is shown; ``rewrites``: the verifier gives each failing claim's rewrite in its answer."""

    def __init__(self, claims: Sequence[PlantedClaim], rewrites: bool = True) -> None:
        self.truth = {_plain(c.text): c for c in claims}
        if len(self.truth) != len(claims):
            raise RuntimeError("two claims of a report say the same")
        self.rewrites = rewrites
        self.calls: dict[str, int] = {"verdicts": 0, "revisions": 0}

    async def complete_json(
        self, messages: list[dict[str, str]], schema: type[T], *, usage: Any, schema_name: str = ""
    ) -> T:
        prompt = messages[-1]["content"]
        shown = {int(n) for n in re.findall(r"^\[(\d+)\] ", prompt, re.MULTILINE)}
        usage.llm_calls += 1
        self.calls[schema_name] += 1
        entries: list[dict[str, Any]] = []
        for index, text, cited in CLAIM_BLOCK.findall(prompt):
            # (a sentence the report does not hold as written, with a form's marks left in it:
            # no source says it)
            claim = self.truth.get(_plain(text), PlantedClaim(text, (), None, "unknown"))
            cites = {int(n) for n in re.findall(r"\d+", cited)}
            if schema_name == "verdicts":
                supported = claim.truth is not None and claim.truth in cites
                source = claim.truth if claim.truth in shown and not supported else None
                verdict = "supported" if supported else "unsupported"
                if claim.fault in FLIPS:
                    verdict = "contradicted"
                entry: dict[str, Any] = {"claim": int(index), "verdict": verdict, "source": source}
                if not supported and self.rewrites:
                    entry["text"] = _rewrite(claim, shown)
                entries.append(entry)
            else:  # the reviser
                entries.append({"claim": int(index), "text": _rewrite(claim, shown)})
        return schema.model_validate({schema_name: entries})


def _rewrite(claim: PlantedClaim, shown: set[int]) -> str | None:
    """The sentence the source a failing claim comes from says, citing it, if it is shown."""
    if claim.correct is None or claim.origin not in shown:
        return None
    if claim.correct.endswith("。"):
        return f"{claim.correct[:-1]}[{claim.origin}]。"
    return f"{claim.correct} [{claim.origin}]"


# --- (i) accuracy ------------------------------------------------------------------------------


@dataclass
class Tally:
    """What happened to the claims of one family."""

    faults: int = 0
    caught: int = 0
    settled_without_a_model: int = 0  # faults the lexical pass called supported
    correct: int = 0
    changed: int = 0
    correct_settled: int = 0
    recited_right: int = 0
    miscited: int = 0
    by_fault: dict[str, list[int]] = field(default_factory=dict)
    by_fix: dict[str, int] = field(default_factory=dict)
    calls: list[int] = field(default_factory=list)
    reports: int = 0
    not_found: int = 0  # planted claims the check did not find
    unexpected: int = 0  # claims the check found that were not planted as written

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "reports": self.reports,
            "faults": self.faults,
            "caught_share": _share(self.caught, self.faults),
            "faults_settled_without_a_model": self.settled_without_a_model,
            "caught_by_fault": {k: _share(v[1], v[0]) for k, v in sorted(self.by_fault.items())},
            "faults_by_fix": dict(sorted(self.by_fix.items())),
            "claims_not_found": self.not_found,
            "unexpected_claims": self.unexpected,
            "correct": self.correct,
            "correct_changed_share": _share(self.changed, self.correct),
            "correct_settled_lexically_share": _share(self.correct_settled, self.correct),
            "calls_per_report": {
                "mean": round(statistics.mean(self.calls), 3) if self.calls else 0,
                "max": max(self.calls, default=0),
            },
        }
        if self.miscited:
            found["miscited_recited_to_true_source"] = _share(self.recited_right, self.miscited)
        return found


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


async def check_report(report: Report, judge: Any, deadline: Any = None) -> Any:
    """The report checked as the writer checks its own: every citation form made ``[n]``
    (``cited_body``), then ``check_claims``."""
    from core.claims.check import check_claims
    from core.engine.sources import NumberedSource, cited_body
    from core.models import Usage

    numbered = [
        NumberedSource(s.n, s.title, s.url, "", "bench", passages=s.passages)
        for s in report.evidence.values()
    ]
    normal = cited_body(report.markdown, numbered)
    language: Any = report.language
    return await check_claims(
        normal.markdown, report.evidence, judge, Usage(), language, deadline=deadline
    )


async def tally(reports: Sequence[Report], rewrites: bool = True) -> Tally:
    """Each report checked with a perfect judge (:class:`Judge`), what happened to its claims."""
    counted = Tally()
    for report in reports:
        judge = Judge(report.claims, rewrites)
        check = await check_report(report, judge)
        counted.reports += 1
        counted.calls.append(sum(judge.calls.values()))
        outcome = {_plain(c.text): c for c in check.claims}
        counted.unexpected += len(set(outcome) - set(judge.truth))
        for claim in report.claims:
            checked = outcome.get(_plain(claim.text))
            if checked is None:  # the check did not read it as a claim: nothing was checked
                counted.not_found += 1
                counted.faults += claim.fault is not None
                counted.correct += claim.fault is None
                if claim.fault is not None:
                    counted.by_fault.setdefault(claim.fault, [0, 0])[0] += 1
                    counted.by_fix["not a claim"] = counted.by_fix.get("not a claim", 0) + 1
                continue
            if claim.fault is None:
                counted.correct += 1
                counted.correct_settled += checked.lexical
                counted.changed += checked.fix is not None
                continue
            counted.faults += 1
            hit = checked.fix is not None
            counted.caught += hit
            counted.settled_without_a_model += checked.lexical
            fix = checked.fix.value if checked.fix is not None else "none"
            counted.by_fix[fix] = counted.by_fix.get(fix, 0) + 1
            counted.by_fault.setdefault(claim.fault, [0, 0])
            counted.by_fault[claim.fault][0] += 1
            counted.by_fault[claim.fault][1] += hit
            if claim.fault == "miscited":
                counted.miscited += 1
                counted.recited_right += checked.source == claim.truth
    return counted


async def accuracy(reports: int, seed: int = 37) -> dict[str, Any]:
    """The ``generated`` family, with a verifier that rewrites and one that does not."""
    from core.claims.check import check_claims
    from core.models import Usage

    rng = random.Random(seed)
    built = [build_report(rng, i) for i in range(reports)]
    found = (await tally(built)).as_json()
    without = (await tally(built, rewrites=False)).as_json()
    unchecked = claims = caught = 0
    for report in built:  # the lexical pass alone (no verifier)
        lexical = await check_claims(report.markdown, report.evidence, None, Usage(), "en")
        unchecked += sum(1 for c in lexical.claims if c.verdict is None)
        caught += sum(1 for c in lexical.claims if c.fix is not None)
        claims += len(lexical.claims)
    found["claims"] = claims
    found["lexical_only"] = {
        "caught_share": _share(caught, found["faults"]),
        "unchecked_share": _share(unchecked, claims),
    }
    found["without_rewrites"] = {
        k: without[k] for k in ("caught_share", "correct_changed_share", "calls_per_report")
    }
    return found


async def meaning_flips(reports: int, seed: int = 52) -> dict[str, Any]:
    """The ``meaning flips`` family: English and Chinese reports, by flip kind."""
    rng = random.Random(seed)
    english = [build_flip_report(rng, i, "en") for i in range(reports)]
    chinese = [build_flip_report(rng, i, "zh") for i in range(reports)]
    both = {"en": await tally(english), "zh": await tally(chinese)}
    return {language: counted.as_json() for language, counted in both.items()}


async def citation_forms(reports: int, seed: int = 5201) -> dict[str, Any]:
    """The ``citation forms`` family: ``generated`` reports citing in each form."""
    found: dict[str, Any] = {}
    for place, form in enumerate(FORMS):
        rng = random.Random(seed + place)
        built = [form_report(build_report(rng, i), form, rng) for i in range(reports)]
        found[form] = (await tally(built)).as_json()
    return found


async def malformed_verifiers(reports: int, seed: int = 5202) -> dict[str, Any]:
    """The ``malformed verifiers`` family: each shape through the real client and the fake."""
    from core.claims.deadline import Deadline
    from core.claims.verifier import Verdict
    from core.llm import ChatModel
    from tests.fakes import FakeLLMServer
    from tests.fakes.llm import VERIFIER_SHAPES, Silent

    # The control (a well-formed answer), every shape the fake answers in, and a silent one.
    shapes = ("contract", *VERIFIER_SHAPES, "hanging")
    rng = random.Random(seed)
    built = [build_report(rng, i) for i in range(reports)]
    found: dict[str, Any] = {}
    with FakeLLMServer() as llm:
        model = ChatModel(model="verifier-model", api_key="bench", base_url=llm.base_url)
        try:
            for shape in shapes:
                said_partial = supported = fixed = requests = 0
                reasons: set[str] = set()
                for place, report in enumerate(built):
                    llm.fake.reset()
                    llm.fake.judge = "lenient" if place % 2 == 0 else "literal"
                    if shape == "hanging":
                        llm.fake.script("verifier", Silent())
                    else:
                        llm.fake.verifier_shape = shape
                    budget = HANG_BUDGET if shape == "hanging" else 30.0
                    check = await check_report(report, model, Deadline(budget))
                    summary = check.summary()
                    said_partial += summary.note("en").startswith("Citations checked in part")
                    supported += sum(
                        1 for c in check.claims if c.verdict is Verdict.SUPPORTED and not c.lexical
                    )
                    fixed += sum(1 for c in check.claims if c.fix is not None)
                    requests += len(llm.fake.requests_for("verifier"))
                    reasons.update(summary.reasons)
                found[shape] = {
                    "reports": len(built),
                    "partial_share": _share(said_partial, len(built)),
                    "supported_by_the_answer": supported,
                    "fixed_on_the_answer": fixed,
                    "verifier_requests_per_report": round(requests / len(built), 2),
                    "reasons": sorted(reasons),
                }
        finally:
            await model.aclose()
    return found


# --- (ii) what the check costs a run ------------------------------------------------------

#: Each writer: how the fake cites (``tests.fakes.llm.FakeLLM.citing``), and whether the fake
#: verifier gives its rewrites in its answer.
WRITERS: dict[str, tuple[str, bool]] = {
    "cites well": ("well", True),
    "miscites one": ("miscited", True),
    "miscites and invents": ("mixed", True),
    "miscites and invents, verifier gives no text": ("mixed", False),
}


def _configure_fake(llm_url: str, **config: Any) -> None:
    with httpx.Client(trust_env=False) as client:
        base = llm_url.removesuffix("/v1")
        client.post(f"{base}/_fake/config", json=config).raise_for_status()


async def cost(runs: int) -> dict[str, Any]:
    from bench.engine import fakes_process, fathom_env, one_run, sqlite_url
    from core.runtime import open_runtime
    from core.settings import load_settings
    from tests.env import is_fathom_setting

    rows: dict[str, Any] = {}
    with fakes_process() as fakes, sqlite_url() as db_url:
        env = fathom_env(db_url, fakes.llm_url, fakes.search_url)
        overrides = {k: v for k, v in env.items() if is_fathom_setting(k)}
        checked = load_settings(_env_file=None, **overrides, FATHOM_VERIFY_CLAIMS="1")
        unchecked = load_settings(_env_file=None, **overrides, FATHOM_VERIFY_CLAIMS="0")
        async with open_runtime(checked) as on, open_runtime(unchecked) as off:
            fakes.configure(0.0, 0.0)
            await one_run(on.research, "warm-up")
            for label, (citing, rewrites) in WRITERS.items():
                samples = []
                for i in range(runs):
                    topic = f"grid-scale battery storage {label} {i}"
                    fakes.configure(LLM_LATENCY, SEARCH_LATENCY, PAGE_LATENCY)
                    fakes.cite(citing)
                    _configure_fake(fakes.llm_url, verifier_rewrites=rewrites)
                    wall_on, with_check = await one_run(on.research, topic)
                    wall_off, without = await one_run(off.research, topic + " unchecked")
                    usage = without.usage
                    waits = usage.llm_calls * LLM_LATENCY + usage.searches * (
                        SEARCH_LATENCY + PAGE_LATENCY
                    )
                    samples.append(
                        {
                            "wall_checked_s": round(wall_on, 4),
                            "wall_unchecked_s": round(wall_off, 4),
                            "extra_s": round(wall_on - wall_off, 4),
                            "waits_s": round(waits, 4),
                            "extra_share_of_waits": round((wall_on - wall_off) / waits, 4),
                            "extra_calls": with_check.usage.llm_calls - usage.llm_calls,
                            "verifier_calls": with_check.usage.verifier_calls,
                            "checking_s": with_check.usage.seconds_by_step.get("checking", 0.0),
                            "claims": [
                                f"{c.verdict} ({c.fixed or 'kept'})"
                                for c in (with_check.claims.claims if with_check.claims else [])
                            ],
                        }
                    )
                middle = sorted(samples, key=lambda s: s["extra_share_of_waits"])[runs // 2]
                rows[label] = {"median": middle, "samples": samples}
    return rows


def _load() -> str:
    """The machine's load averages (``/proc/loadavg``), as ``uptime`` shows them."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


def _families(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, a family's tally) for the printout."""
    return [
        ("generated", result["accuracy"]),
        ("flips (en)", result["meaning_flips"]["en"]),
        ("flips (zh)", result["meaning_flips"]["zh"]),
        *((f"form {form}", row) for form, row in result["citation_forms"].items()),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer reports, 1 run per writer")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    # The malformed verifiers warn of each unusable answer, by design: only errors are shown.
    logging.basicConfig(level=logging.ERROR)
    started = time.time()
    quick = args.quick
    result: dict[str, Any] = {"machine": {"cpu": cpu_model(), "load_before": _load()}}
    result["accuracy"] = asyncio.run(accuracy(10 if quick else REPORTS))
    result["meaning_flips"] = asyncio.run(meaning_flips(10 if quick else REPORTS))
    result["citation_forms"] = asyncio.run(citation_forms(5 if quick else FORM_REPORTS))
    result["malformed_verifiers"] = asyncio.run(
        malformed_verifiers(4 if quick else MALFORMED_REPORTS)
    )
    result["cost"] = asyncio.run(cost(1 if quick else COST_RUNS))
    result["machine"]["load_after"] = _load()
    result["seconds"] = round(time.time() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    a = result["accuracy"]
    print("(i) goals: faults caught >= 95 % per family, correct claims changed <= 3 %")
    for label, row in _families(result):
        print(
            f"    {label:26} {row['reports']:3} reports: caught {row['caught_share']:.1%} of "
            f"{row['faults']} {row['caught_by_fault']}, settled without a model "
            f"{row['faults_settled_without_a_model']}; correct changed "
            f"{row['correct_changed_share']:.1%} of {row['correct']}; calls "
            f"{row['calls_per_report']}"
        )
    print(
        f"    generated: miscited re-cited to their true source: "
        f"{a['miscited_recited_to_true_source']:.1%}; correct settled without a model: "
        f"{a['correct_settled_lexically_share']:.1%}; a verifier giving no text: "
        f"{a['without_rewrites']}"
    )
    print("    malformed verifiers (goal: 100 % partial, nothing supported or fixed on them;")
    print("    contract: the control, a well-formed answer):")
    for shape, row in result["malformed_verifiers"].items():
        print(
            f"      {shape:14} partial {row['partial_share']:.0%} of {row['reports']}, "
            f"supported {row['supported_by_the_answer']}, fixed {row['fixed_on_the_answer']}, "
            f"requests {row['verifier_requests_per_report']}, {row['reasons']}"
        )
    print("(ii) depth-3 run, 400 ms LLM / 300 ms search / 150 ms page, check on vs off (median)")
    for label, row in result["cost"].items():
        m = row["median"]
        print(
            f"    {label:46} extra calls {m['extra_calls']} (goal <= 2), extra wall "
            f"{m['extra_s']:.2f} s = {m['extra_share_of_waits']:.1%} of {m['waits_s']:.2f} s "
            "waits (goal <= 15 %)"
        )
    print(
        f"load {result['machine']['load_before']} -> {result['machine']['load_after']}; "
        f"{result['seconds']} s; details: {args.output}"
    )


if __name__ == "__main__":
    main()
