"""Every cited claim of a report checked against the sources it cites, and what happens to one
that fails.

The plain claims are settled by the lexical pass; the rest go to the verifier model. A claim
the verifier finds unsupported is re-cited to the source it names instead, when that source
says it (plainly, or in the verifier's word); otherwise it keeps its sentence, loses its
citations and is marked as not verified, in the report's language. Nothing the writer did
not write is added. When the verifier cannot be used, the lexical verdicts stand and the
check is partial (the claims it did not settle are left as they are).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from core.claims.lexical import Evidence, plainly_supported
from core.claims.split import CITATION, Claim, claims_of
from core.claims.summary import CheckSummary, ClaimSummary
from core.claims.verifier import ClaimVerdict, Verdict, revisions, verdicts
from core.engine.state import JsonModel
from core.llm import LLMError
from core.models import Usage
from core.wording import Language, unverified_mark

log = logging.getLogger(__name__)

#: A list item left with nothing in it (its one claim dropped).
_EMPTY_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]*\n", re.MULTILINE)


class Fix(StrEnum):
    """What was done to a claim that failed."""

    RECITED = "recited"  # cited to the source that says it instead
    REVISED = "revised"  # rewritten from its sources by the reviser
    DROPPED = "dropped"  # the reviser found nothing of it in the sources
    UNVERIFIED = "unverified"  # kept, its citations removed, marked as not verified


@dataclass(frozen=True)
class CheckedClaim:
    """One claim and its check: ``verdict`` None when nothing settled it (the verifier could
    not be used); ``lexical`` when the lexical pass settled it; ``source``: the source it was
    re-cited to."""

    text: str
    cited: tuple[int, ...]
    verdict: Verdict | None
    lexical: bool = False
    source: int | None = None
    fix: Fix | None = None


@dataclass(frozen=True)
class ClaimCheck:
    """The report with its failing claims fixed, and each claim's check."""

    markdown: str
    claims: tuple[CheckedClaim, ...]
    #: The verifier could not be used: the claims the lexical pass did not settle are unchecked.
    partial: bool = False

    @property
    def supported(self) -> int:
        return sum(1 for c in self.claims if c.verdict is Verdict.SUPPORTED and c.fix is None)

    @property
    def fixed(self) -> int:
        return sum(1 for c in self.claims if c.fix is not None)

    def summary(self) -> CheckSummary:
        """What the run keeps of it (stored, ``--json``'s ``claims``)."""
        return CheckSummary(
            claims=[
                ClaimSummary(
                    text=c.text,
                    cited=list(c.cited),
                    verdict=c.verdict.value if c.verdict is not None else None,
                    source=c.source,
                    fixed=c.fix.value if c.fix is not None else None,
                )
                for c in self.claims
            ],
            partial=self.partial,
        )


async def check_claims(
    markdown: str,
    evidence: Mapping[int, Evidence],
    model: JsonModel | None,
    usage: Usage,
    language: Language,
) -> ClaimCheck:
    """Check every cited claim of ``markdown`` against ``evidence`` (what each source gave the
    writer, by number); ``model``: the verifier (None: the lexical pass only). Its model calls
    are added to ``usage`` as the verifier's share too (:meth:`Usage.add_checking`)."""
    spent = Usage()
    try:
        return await _check(markdown, evidence, model, spent, language)
    finally:
        usage.add_checking(spent)


async def _check(
    markdown: str,
    evidence: Mapping[int, Evidence],
    model: JsonModel | None,
    usage: Usage,
    language: Language,
) -> ClaimCheck:
    claims = claims_of(markdown)
    settled: dict[int, bool] = {
        c.index: plainly_supported(c.statement, [evidence[n] for n in c.cites if n in evidence])
        for c in claims
    }
    rest = [c for c in claims if not settled[c.index]]
    found: dict[int, ClaimVerdict] = {}
    partial = False
    if rest and model is not None:
        try:
            found = await verdicts(model, rest, evidence, usage)
        except LLMError as exc:
            log.warning("the verifier failed (%s); the lexical verdicts stand", exc)
            partial = True
    elif rest:
        partial = True
    checked: dict[int, CheckedClaim] = {}
    rewrites: list[tuple[Claim, str]] = []
    failing: list[Claim] = []
    for claim in claims:
        said = claim.statement, claim.cites
        verdict = found.get(claim.index)
        if settled[claim.index]:
            checked[claim.index] = CheckedClaim(*said, Verdict.SUPPORTED, lexical=True)
        elif verdict is None or verdict.verdict is not Verdict.UNSUPPORTED:
            checked[claim.index] = CheckedClaim(*said, verdict.verdict if verdict else None)
        elif verdict.source is not None and verdict.source not in claim.cites:
            rewrites.append((claim, _recited(claim.text, verdict.source)))
            checked[claim.index] = CheckedClaim(
                *said, Verdict.UNSUPPORTED, source=verdict.source, fix=Fix.RECITED
            )
        else:
            failing.append(claim)
    fixes = await _revise(failing, evidence, model, usage, language) if failing else []
    for claim, (text, fix) in zip(failing, fixes, strict=True):
        rewrites.append((claim, text))
        checked[claim.index] = CheckedClaim(
            claim.statement, claim.cites, Verdict.UNSUPPORTED, fix=fix
        )
    rewrites += _paragraph_citations_kept(claims, checked)
    ordered = tuple(checked[claim.index] for claim in claims)
    return ClaimCheck(_rewritten(markdown, rewrites), ordered, partial)


async def _revise(
    failing: Sequence[Claim],
    evidence: Mapping[int, Evidence],
    model: JsonModel | None,
    usage: Usage,
    language: Language,
) -> list[tuple[str, Fix]]:
    """Each failing claim's new text and what was done: rewritten from its sources when the
    reviser's sentence plainly says what the sources it cites say (and cites only sources it
    was shown), dropped when the reviser found nothing of it, else marked as not verified."""
    answered: dict[int, tuple[str | None, frozenset[int]]] = {}
    if model is not None:
        try:
            answered = await revisions(model, failing, evidence, usage)
        except LLMError as exc:
            log.warning("the reviser failed (%s); the failing claims are marked", exc)
    fixes: list[tuple[str, Fix]] = []
    for claim in failing:
        unverified = (_unverified(claim.text, language), Fix.UNVERIFIED)
        if claim.index not in answered:
            fixes.append(unverified)
            continue
        text, shown = answered[claim.index]
        if text is None:
            fixes.append(("", Fix.DROPPED))
            continue
        sentence = " ".join(text.split())[: 2 * len(claim.text) + 200]
        cites = [int(n) for n in CITATION.findall(sentence)]
        revised = Claim(claim.index, sentence, tuple(cites), claim.start, claim.end)
        sources = [evidence[n] for n in cites if n in evidence]
        if cites and set(cites) <= shown and plainly_supported(revised.statement, sources):
            fixes.append((sentence, Fix.REVISED))
        else:
            fixes.append(unverified)
    return fixes


def _recited(text: str, source: int) -> str:
    """``text`` citing ``source`` where it cited others (once, where its first citation was;
    a sentence that cited its paragraph's citations, before its closing mark)."""
    first = CITATION.search(text)
    if first is None:
        body, closing = _closing_mark(text)
        return f"{body} [{source}]{closing}"
    head, tail = text[: first.start()], CITATION.sub("", text[first.start() :])
    return f"{head}[{source}]{tail}"


def _unverified(text: str, language: Language) -> str:
    """``text`` without its citations, marked as not verified before its closing mark."""
    body, closing = _closing_mark(CITATION.sub("", text))
    return f"{body}{unverified_mark(language)}{closing}"


def _closing_mark(text: str) -> tuple[str, str]:
    """``text`` (right-stripped) and the closing marks it ends with."""
    plain = text.rstrip()
    end = len(plain)
    while end and plain[end - 1] in ".!?。！？":
        end -= 1
    return plain[:end].rstrip(), plain[end:]


def _paragraph_citations_kept(
    claims: Sequence[Claim], checked: Mapping[int, CheckedClaim]
) -> list[tuple[Claim, str]]:
    """A paragraph whose citations sit at its end loses them when its last sentence is fixed:
    they are written again after the last sentence before it that cites them and stands."""
    kept: list[tuple[Claim, str]] = []
    for at, carrier in enumerate(claims):
        if carrier.shared or checked[carrier.index].fix is None:
            continue
        before = at - 1
        while before >= 0 and claims[before].shared and claims[before].cites == carrier.cites:
            standing = claims[before]
            if checked[standing.index].fix is None:
                space = "" if standing.text.endswith(("。", "！", "？")) else " "
                cited = "".join(f"[{n}]" for n in carrier.cites)
                kept.append((Claim(-1, "", (), standing.end, standing.end), space + cited))
                break
            before -= 1
    return kept


def _rewritten(markdown: str, rewrites: Sequence[tuple[Claim, str]]) -> str:
    """``markdown`` with each claim's text replaced (from the end, so the places hold; a
    replacement before an insertion at the same place); a dropped claim takes the space
    before it along, and leaves no empty list item."""
    for claim, text in sorted(rewrites, key=lambda r: (r[0].start, r[0].end), reverse=True):
        start = claim.start
        if not text and start and markdown[start - 1] == " ":
            start -= 1
        markdown = markdown[:start] + text + markdown[claim.end :]
    return _EMPTY_ITEM.sub("", markdown)
