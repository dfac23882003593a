"""The claim check's benchmark (issue 37): what it catches, what it wrongly changes, and what
it costs a run.

(i) Accuracy. 50 generated reports, each on its own 8 sources (3 passages each, every
passage two sentences of generated facts: organisations, places, years, amounts), with 16
cited claims: 9 correct (5 copied from the cited source, 3 reworded with its numbers and most
of its words kept, one citing two sources) and 7 planted faults (two sentences copied from
another source than the one cited, two taking a number from the next sentence of the same
passage, two with a number changed, one invented). Each report is checked by
:func:`core.claims.check.check_claims` with a verifier that answers as a perfect judge would
from what it is shown (it knows where each sentence came from, and names the true source only
when the request shows it), and a reviser that rewrites a sentence from the source that says
it when that source is shown, else drops it. So the figures measure Fathom's part (splitting,
the lexical pass, batching, re-citing, revising, marking), not a model's judgement; `fathom
eval` with a real model measures that. Goals: at least 95 % of the faults caught (re-cited,
revised, dropped or marked), at most 3 % of the correct claims changed.

(ii) Cost. Depth-3 runs through ``open_runtime`` (pages read, 3 per search) against the fakes
at 400 ms per LLM call, 300 ms per search and 150 ms per page, with the check on and off, for
three writers: one that cites correctly (the lexical pass settles every claim), one that
miscites a sentence (one verifier call, re-cited) and one that also invents a number (the
verifier and the reviser). The extra LLM calls (goal at most 2) and the extra wall time as a
share of the run's waits (LLM calls × 0.4 + searches × (0.3 + 0.15); goal at most 15 %).

Run: ``.venv/bin/python -m bench.claims [--quick] [--output FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from bench.common import cpu_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "claims.json"
REPORTS = 50
SOURCES = 8
LLM_LATENCY, SEARCH_LATENCY, PAGE_LATENCY = 0.4, 0.3, 0.15
DEPTH = 3

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
    fault: str | None = None  # miscited, number, invented
    #: A correct sentence from ``truth`` a reviser could write instead.
    correct: str | None = None


@dataclass
class Report:
    markdown: str
    evidence: dict[int, Any]
    claims: list[PlantedClaim] = field(default_factory=list)


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


def build_report(rng: random.Random, index: int) -> Report:
    """One report on its own sources, with its planted faults (see the module's docstring)."""
    from core.claims.lexical import Evidence

    subject = SUBJECTS[index % len(SUBJECTS)]
    facts: dict[int, list[Fact]] = {}
    evidence: dict[int, Evidence] = {}
    for n in range(1, SOURCES + 1):
        facts[n] = [_fact(rng, subject, n) for _ in range(6)]
        passages = tuple(" ".join(f.text() for f in facts[n][i : i + 2]) for i in range(0, 6, 2))
        evidence[n] = Evidence(
            n, f"{subject.title()} report {n}", f"https://site{n}.example/{index}", passages
        )
    report = Report("", evidence)
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
        planted.append(PlantedClaim(fact.text(reworded), cites, fact.source))
    for _ in range(2):  # copied from another source than the one cited
        fact = pick()
        wrong = rng.choice([n for n in range(1, SOURCES + 1) if n != fact.source])
        planted.append(PlantedClaim(fact.text(), (wrong,), fact.source, "miscited", fact.text()))
    for _ in range(2):  # a number taken from the next sentence of the same passage
        fact = pick()
        k = facts[fact.source].index(fact)
        neighbour = facts[fact.source][k + 1 if k % 2 == 0 else k - 1]
        mine = _number_keys(fact)[0]
        theirs = [neighbour.values[key] for key in _number_keys(neighbour)]
        taken = next((v for v in theirs if v != fact.values[mine]), fact.values[mine] + 1)
        swapped = Fact(fact.template, {**fact.values, mine: taken}, fact.source)
        planted.append(PlantedClaim(swapped.text(), (fact.source,), None, "swapped", fact.text()))
    for _ in range(2):  # a number changed
        fact = pick()
        key = _number_keys(fact)[0]
        changed = Fact(fact.template, {**fact.values, key: fact.values[key] + 11}, fact.source)
        planted.append(PlantedClaim(changed.text(), (fact.source,), None, "number", fact.text()))
    invented = _fact(rng, subject, 0)  # nobody says it
    invented.values["org"], invented.values["place"] = "Quillon Partners", "Tasmania"
    planted.append(PlantedClaim(invented.text(), (rng.randint(1, SOURCES),), None, "invented"))
    rng.shuffle(planted)
    lines = [f"# {subject.title()}: where things stand", "", "## Summary", ""]
    lines.append(f"This report looks at {subject} across several markets.")
    lines += ["", "## Main findings", ""]
    for claim in planted[:7]:
        lines.append(f"- {claim.text} {''.join(f'[{n}]' for n in claim.cites)}")
    lines += ["", "## Details", ""]
    paragraph = [f"{c.text} {''.join(f'[{n}]' for n in c.cites)}" for c in planted[7:]]
    lines.append(" ".join(paragraph))
    lines += ["", "## Open questions", "", f"How {subject} will develop after 2030 is unclear."]
    report.markdown = "\n".join(lines) + "\n"
    report.claims = planted
    return report


def _plain(text: str) -> str:
    return " ".join(re.sub(r"\[\d+\]", " ", text).split()).strip(" .")


class Judge:
    """The verifier and the reviser, answering as a perfect judge from what it is shown."""

    def __init__(self, reports: Sequence[Report]) -> None:
        self.truth = {_plain(c.text): c for r in reports for c in r.claims}
        self.calls: dict[str, int] = {"verdicts": 0, "revisions": 0}

    async def complete_json(
        self, messages: list[dict[str, str]], schema: type[T], *, usage: Any, schema_name: str = ""
    ) -> T:
        prompt = messages[-1]["content"]
        shown = {int(n) for n in re.findall(r"^\[(\d+)\] ", prompt, re.MULTILINE)}
        usage.llm_calls += 1
        self.calls[schema_name] += 1
        entries = []
        for index, text, cited in re.findall(
            r"^Claim (\d+): (.*)\nCited: (.*)$", prompt, re.MULTILINE
        ):
            claim = self.truth[_plain(text)]
            cites = {int(n) for n in re.findall(r"\d+", cited)}
            if schema_name == "verdicts":
                supported = claim.truth is not None and claim.truth in cites
                source = claim.truth if claim.truth in shown and not supported else None
                verdict = "supported" if supported else "unsupported"
                entries.append({"claim": int(index), "verdict": verdict, "source": source})
            else:  # the reviser: the sentence its source says, if it is shown
                origin = claim.truth if claim.fault == "miscited" else next(iter(cites))
                fixed = claim.correct if claim.correct and origin in shown else None
                entries.append(
                    {"claim": int(index), "text": f"{fixed} [{origin}]" if fixed else None}
                )
        return schema.model_validate({schema_name: entries})


async def accuracy(reports: int, seed: int = 37) -> dict[str, Any]:
    from core.claims.check import check_claims
    from core.models import Usage

    rng = random.Random(seed)
    built = [build_report(rng, i) for i in range(reports)]
    judge = Judge(built)
    faults = caught = recited_right = correct = changed = settled = 0
    by_fault: dict[str, list[int]] = {}
    calls: list[int] = []
    lexical_only_unchecked = 0
    for report in built:
        before = dict(judge.calls)
        check = await check_claims(report.markdown, report.evidence, judge, Usage(), "en")
        calls.append(sum(judge.calls.values()) - sum(before.values()))
        lexical = await check_claims(report.markdown, report.evidence, None, Usage(), "en")
        lexical_only_unchecked += sum(1 for c in lexical.claims if c.verdict is None)
        outcome = {_plain(c.text): c for c in check.claims}
        if len(outcome) != len(report.claims):
            raise RuntimeError(f"the split found {len(outcome)} claims, not {len(report.claims)}")
        for claim in report.claims:
            checked = outcome[_plain(claim.text)]
            if claim.fault is None:
                correct += 1
                settled += checked.lexical
                changed += checked.fix is not None
                continue
            faults += 1
            hit = checked.fix is not None
            caught += hit
            by_fault.setdefault(claim.fault, [0, 0])
            by_fault[claim.fault][0] += 1
            by_fault[claim.fault][1] += hit
            if claim.fault == "miscited" and checked.source == claim.truth:
                recited_right += 1
    claims = faults + correct
    return {
        "reports": reports,
        "claims": claims,
        "faults": faults,
        "caught_share": round(caught / faults, 4),
        "caught_by_fault": {k: round(v[1] / v[0], 4) for k, v in sorted(by_fault.items())},
        "miscited_recited_to_true_source": round(recited_right / by_fault["miscited"][0], 4),
        "correct_changed_share": round(changed / correct, 4),
        "correct_settled_lexically_share": round(settled / correct, 4),
        "calls_per_report": {"mean": round(statistics.mean(calls), 3), "max": max(calls)},
        "lexical_only": {
            "caught_share": 0.0,
            "unchecked_share": round(lexical_only_unchecked / claims, 4),
        },
    }


# --- (ii) what the check costs a run ------------------------------------------------------

WRITERS = {"cites well": "well", "miscites one": "miscited", "miscites and invents": "mixed"}


async def cost(runs: int) -> dict[str, Any]:
    from bench.engine import fakes_process, fathom_env, one_run, sqlite_url
    from core.config import load_settings
    from core.runtime import open_runtime
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
            for label, citing in WRITERS.items():
                samples = []
                for i in range(runs):
                    topic = f"grid-scale battery storage {label} {i}"
                    fakes.configure(LLM_LATENCY, SEARCH_LATENCY, PAGE_LATENCY)
                    fakes.cite(citing)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 reports, 1 run per writer")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = time.time()
    result: dict[str, Any] = {
        "machine": {"cpu": cpu_model()},
        "accuracy": asyncio.run(accuracy(10 if args.quick else REPORTS)),
        "cost": asyncio.run(cost(1 if args.quick else 3)),
    }
    result["seconds"] = round(time.time() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    a = result["accuracy"]
    print(f"(i) {a['reports']} reports, {a['claims']} claims, {a['faults']} planted faults")
    print(f"    caught: {a['caught_share']:.1%} (goal >= 95 %) by fault {a['caught_by_fault']}")
    print(f"    miscited re-cited to their true source: {a['miscited_recited_to_true_source']:.1%}")
    print(f"    correct claims changed: {a['correct_changed_share']:.1%} (goal <= 3 %)")
    settled = a["correct_settled_lexically_share"]
    print(f"    correct claims settled without a model call: {settled:.1%}")
    print(f"    model calls per report: {a['calls_per_report']}")
    print("(ii) depth-3 run, 400 ms LLM / 300 ms search / 150 ms page, check on vs off (median)")
    for label, row in result["cost"].items():
        m = row["median"]
        print(
            f"    {label:22} extra calls {m['extra_calls']} (goal <= 2), extra wall "
            f"{m['extra_s']:.2f} s = {m['extra_share_of_waits']:.1%} of {m['waits_s']:.2f} s "
            "waits (goal <= 15 %)"
        )
    print(f"details: {args.output}")


if __name__ == "__main__":
    main()
