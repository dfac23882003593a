"""Every cited claim of a report checked against the sources it cites, and what happens to one
that fails.

The plain claims are settled by the lexical pass; the rest go to the verifier model, whose
answer is read strictly (:mod:`core.claims.verifier`). A claim the verifier finds unsupported
or contradicted is re-cited to another source only on evidence (issue 52, item 4): that source
plainly says it (the lexical pass), or a second verdict, asked of that source alone, finds it
supported; the verifier naming a source is not enough, and a source whose text speaks to a
model (:mod:`core.claims.addressing`) is never re-cited to on a model's word. Otherwise the
claim is rewritten from its sources, or keeps its sentence, loses its citations and is marked
as not verified, in the report's language. Nothing the writer did not write is added.

The rewrite is the one the verifier gave in its answer (``text``), so a report with a
miscited claim and an invented number costs one call; only the failing claims it gave no
rewrite for go to the reviser, in one more call. Either rewrite is held to the same rule: it
cites only sources its request showed, and those sources plainly say it (the lexical pass);
else the claim is marked.

A claim whose cited sources are search snippets only (their pages were not read) is
"supported" only when a snippet plainly holds it; the verifier's "supported" for it becomes
"partial" (:mod:`core.claims.evidence`). A claim whose only cited sources speak to a model is
not taken as supported on the verifier's word: it is not checked.

Each claim found supported (plainly, or on the verifier's word), re-cited or revised keeps the
sentence of its source that supported it, as a short quote of the source's own text
(:mod:`core.claims.excerpt`): the sentence the lexical pass found, or the one that holds most
of the claim among the passages the verifier was shown for it. No model writes a quote and no
call is added for it; a claim marked, dropped, partial, contradicted or not checked keeps none.

What is not settled (the verifier failed, answered twice unusably, the check's time budget
ran out, ``deadline``, or what the run's token limit left did not fit a request, ``room``) is
"not checked" and the check is partial.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from core.claims.addressing import addressing_phrase
from core.claims.deadline import Deadline, OutOfTime
from core.claims.evidence import EvidenceKind
from core.claims.excerpt import Quote, best_sentence, quote_from
from core.claims.lexical import Evidence, Found, plain_support
from core.claims.split import CITATION, Claim, claims_of
from core.claims.summary import CheckSummary, ClaimSummary
from core.claims.verifier import (
    ClaimVerdict,
    Judged,
    OutOfTokens,
    Rewrite,
    Unchecked,
    Verdict,
    best_passages,
    revisions,
    verdicts,
)
from core.llm import LLMError
from core.llm.protocols import JsonModel
from core.llm.tokens import TokenRoom
from core.models import Usage
from core.words.wording import Language, unverified_mark

log = logging.getLogger(__name__)

#: A list item left with nothing in it (its one claim dropped).
_EMPTY_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]*\n", re.MULTILINE)


class Fix(StrEnum):
    """What was done to a claim that failed."""

    RECITED = "recited"  # cited to the source that says it instead
    REVISED = "revised"  # rewritten from its sources (by the verifier or the reviser)
    DROPPED = "dropped"  # the verifier or the reviser found nothing of it in the sources
    UNVERIFIED = "unverified"  # kept, its citations removed, marked as not verified


@dataclass(frozen=True)
class CheckedClaim:
    """One claim and its check: ``verdict`` None when nothing settled it (``unchecked``: why);
    ``lexical`` when the lexical pass settled it; ``source``: the source it was re-cited to;
    ``quote``: the passage that supported it (a claim supported, re-cited or revised)."""

    text: str
    cited: tuple[int, ...]
    verdict: Verdict | None
    lexical: bool = False
    source: int | None = None
    fix: Fix | None = None
    unchecked: Unchecked | None = None
    quote: Quote | None = None


@dataclass(frozen=True)
class ClaimCheck:
    """The report with its failing claims fixed, each claim's check, and the sources whose
    text speaks to a model (``addressing``: by number, the words found)."""

    markdown: str
    claims: tuple[CheckedClaim, ...]
    addressing: dict[int, str] = field(default_factory=dict)

    @property
    def supported(self) -> int:
        return sum(1 for c in self.claims if c.verdict is Verdict.SUPPORTED and c.fix is None)

    @property
    def fixed(self) -> int:
        return sum(1 for c in self.claims if c.fix is not None)

    @property
    def unchecked(self) -> int:
        return sum(1 for c in self.claims if c.verdict is None)

    @property
    def partial(self) -> bool:
        """Whether some claims were not checked."""
        return self.unchecked > 0

    @property
    def reasons(self) -> list[str]:
        """Why claims were not checked (each reason once, in the claims' order)."""
        found = (c.unchecked.value for c in self.claims if c.unchecked is not None)
        return list(dict.fromkeys(found))

    def summary(self) -> CheckSummary:
        """What the run keeps of it (stored, ``--json``'s ``claims`` and ``claim_check``)."""
        return CheckSummary(
            claims=[
                ClaimSummary(
                    text=c.text,
                    cited=list(c.cited),
                    verdict=c.verdict.value if c.verdict is not None else None,
                    source=c.source,
                    fixed=c.fix.value if c.fix is not None else None,
                    quote=c.quote.text if c.quote is not None else None,
                    quote_source=c.quote.source if c.quote is not None else None,
                )
                for c in self.claims
            ],
            partial=self.partial,
            reasons=self.reasons,
        )


async def check_claims(
    markdown: str,
    evidence: Mapping[int, Evidence],
    model: JsonModel | None,
    usage: Usage,
    language: Language,
    *,
    deadline: Deadline | None = None,
    room: TokenRoom | None = None,
) -> ClaimCheck:
    """Check every cited claim of ``markdown`` against ``evidence`` (what each source gave the
    writer, by number); ``model``: the verifier (None: the lexical pass only); ``deadline``:
    when the check must end (None: when its model calls end); ``room``: what the run's token
    limit leaves (None: unlimited; a request that does not fit is not made). Its model calls
    are added to ``usage`` as the verifier's share too (:meth:`Usage.add_checking`)."""
    spent = Usage()
    own = TokenRoom(room.left(), spent, quota=room.quota) if room is not None else None
    try:
        return await _check(markdown, evidence, model, spent, language, deadline, own)
    finally:
        usage.add_checking(spent)


async def _check(
    markdown: str,
    evidence: Mapping[int, Evidence],
    model: JsonModel | None,
    usage: Usage,
    language: Language,
    deadline: Deadline | None,
    room: TokenRoom | None = None,
) -> ClaimCheck:
    claims = claims_of(markdown)
    addressing = _addressing(evidence)
    settled: dict[int, Found | None] = {
        c.index: plain_support(c.statement, _cited(c, evidence)) for c in claims
    }
    rest = [c for c in claims if settled[c.index] is None]
    judged = Judged()
    if rest and model is not None:
        judged = await verdicts(model, rest, evidence, usage, deadline, room=room)
    elif rest:
        judged.unchecked = {c.index: Unchecked.NO_VERIFIER for c in rest}
    checked: dict[int, CheckedClaim] = {}
    rewrites: list[tuple[Claim, str]] = []
    failing: list[tuple[Claim, Verdict]] = []
    second: list[tuple[Claim, ClaimVerdict, int]] = []  # re-citations a verdict must confirm
    for claim in claims:
        said = claim.statement, claim.cites
        verdict = judged.found.get(claim.index)
        found = settled[claim.index]
        if found is not None:
            quote = _found_quote(claim.statement, found)
            checked[claim.index] = CheckedClaim(*said, Verdict.SUPPORTED, lexical=True, quote=quote)
        elif verdict is None:
            why = judged.unchecked.get(claim.index, Unchecked.VERIFIER_FAILED)
            checked[claim.index] = CheckedClaim(*said, None, unchecked=why)
        elif verdict.verdict is Verdict.SUPPORTED:
            checked[claim.index] = _supported(claim, evidence, addressing)
        elif not verdict.verdict.failing:
            checked[claim.index] = CheckedClaim(*said, verdict.verdict)
        elif verdict.source is None:
            failing.append((claim, verdict.verdict))
        elif (said_by := plain_support(claim.statement, [evidence[verdict.source]])) is not None:
            rewrites.append((claim, _recited(claim.text, verdict.source)))
            quote = _found_quote(claim.statement, said_by)
            checked[claim.index] = _recited_claim(claim, verdict.verdict, verdict.source, quote)
        elif _confirmable(verdict.source, evidence, addressing):
            second.append((claim, verdict, verdict.source))
        else:
            failing.append((claim, verdict.verdict))
    for claim, first, source in await _confirmed(second, evidence, model, usage, deadline, room):
        rewrites.append((claim, _recited(claim.text, source)))
        quote = _shown_quote(claim.statement, [source], evidence, addressing)
        checked[claim.index] = _recited_claim(claim, first.verdict, source, quote)
    failing += [(c, v.verdict) for c, v, _ in second if c.index not in checked]
    failing.sort(key=lambda item: item[0].index)
    fixes = await _revise(
        [c for c, _ in failing], judged.rewrites, evidence, model, usage, language, deadline, room
    )
    for (claim, judged_as), (text, fix, quote) in zip(failing, fixes, strict=True):
        rewrites.append((claim, text))
        checked[claim.index] = CheckedClaim(
            claim.statement, claim.cites, judged_as, fix=fix, quote=quote
        )
    rewrites += _paragraph_citations_kept(claims, checked)
    ordered = tuple(checked[claim.index] for claim in claims)
    return ClaimCheck(_rewritten(markdown, rewrites), ordered, addressing)


def _cited(claim: Claim, evidence: Mapping[int, Evidence]) -> list[Evidence]:
    return [evidence[n] for n in claim.cites if n in evidence]


def _addressing(evidence: Mapping[int, Evidence]) -> dict[int, str]:
    """The sources whose title or passages speak to a model, and the words found."""
    found: dict[int, str] = {}
    for n, source in sorted(evidence.items()):
        phrase = addressing_phrase([source.title, *source.passages])
        if phrase is not None:
            found[n] = phrase
    return found


def _supported(
    claim: Claim, evidence: Mapping[int, Evidence], addressing: Mapping[int, str]
) -> CheckedClaim:
    """A claim the verifier found supported: so, unless all its cited sources are snippets
    (then "partial": the lexical pass found no snippet that plainly holds it) or all speak to
    a model (then not checked: the verifier may have obeyed them)."""
    said = claim.statement, claim.cites
    cited = _cited(claim, evidence)
    if cited and all(source.n in addressing for source in cited):
        return CheckedClaim(*said, None, unchecked=Unchecked.SOURCE_ADDRESSES_MODEL)
    if cited and all(source.kind is EvidenceKind.SNIPPET for source in cited):
        return CheckedClaim(*said, Verdict.PARTIAL)
    quote = _shown_quote(claim.statement, claim.cites, evidence, addressing)
    return CheckedClaim(*said, Verdict.SUPPORTED, quote=quote)


def _recited_claim(
    claim: Claim, verdict: Verdict, source: int, quote: Quote | None
) -> CheckedClaim:
    return CheckedClaim(
        claim.statement, claim.cites, verdict, source=source, fix=Fix.RECITED, quote=quote
    )


def _found_quote(statement: str, found: Found) -> Quote | None:
    """The quote of the sentence the lexical pass found saying ``statement``."""
    return quote_from(found.n, statement, found.sentence, [found.passage])


def _shown_quote(
    statement: str,
    sources: Sequence[int],
    evidence: Mapping[int, Evidence],
    addressing: Mapping[int, str],
) -> Quote | None:
    """The quote of a claim a verdict found supported by ``sources``: the sentence that holds
    most of it among the passages the verifier was shown of them (:func:`best_passages`, as
    its request chose them), from a source that does not speak to a model; None when no
    sentence holds enough of it (:data:`core.claims.excerpt.MIN_SHARE`). No model call."""
    best: tuple[int, str, list[str], float] | None = None
    for n in sources:
        source = evidence.get(n)
        if source is None or n in addressing:
            continue
        shown = [source.passages[i] for i in best_passages(statement, source)]
        found = best_sentence(statement, shown)
        if found is not None and (best is None or found[1] > best[3]):
            best = n, found[0], shown, found[1]
    if best is None:
        return None
    return quote_from(best[0], statement, best[1], best[2])


def _confirmable(
    source: int, evidence: Mapping[int, Evidence], addressing: Mapping[int, str]
) -> bool:
    """Whether a second verdict may move a claim to ``source``: not one that speaks to a model,
    nor a snippet only (a snippet supports only what it plainly holds, which the lexical pass
    found it does not)."""
    return source not in addressing and evidence[source].kind is not EvidenceKind.SNIPPET


async def _confirmed(
    candidates: Sequence[tuple[Claim, ClaimVerdict, int]],
    evidence: Mapping[int, Evidence],
    model: JsonModel | None,
    usage: Usage,
    deadline: Deadline | None,
    room: TokenRoom | None = None,
) -> list[tuple[Claim, ClaimVerdict, int]]:
    """The re-citations a second verdict confirms: each claim asked again (in one request for
    all) as if it cited only the source the verifier named, that source alone shown."""
    if not candidates or model is None:
        return []
    asked = [replace(claim, cites=(source,)) for claim, _, source in candidates]
    judged = await verdicts(model, asked, evidence, usage, deadline, elsewhere=False, room=room)
    return [
        candidate
        for candidate in candidates
        if (found := judged.found.get(candidate[0].index)) is not None
        and found.verdict is Verdict.SUPPORTED
    ]


async def _revise(
    failing: Sequence[Claim],
    offered: Mapping[int, Rewrite],
    evidence: Mapping[int, Evidence],
    model: JsonModel | None,
    usage: Usage,
    language: Language,
    deadline: Deadline | None,
    room: TokenRoom | None = None,
) -> list[tuple[str, Fix, Quote | None]]:
    """Each failing claim's new text, what was done and the quote of a revised one (from the
    sentence the lexical pass found saying it): rewritten from its sources when its
    rewrite (the verifier's, ``offered``, else the reviser's, asked for the claims without
    one) plainly says what the sources it cites say (and cites only sources it was shown),
    dropped when the rewrite is null (nothing of it in the sources), else marked as not
    verified (also when the reviser failed, answered unusably or the time ran out)."""
    answered = {c.index: offered[c.index] for c in failing if c.index in offered}
    asked = [c for c in failing if c.index not in answered]
    if asked and model is not None:
        try:
            answered |= await revisions(model, asked, evidence, usage, deadline, room)
        except (LLMError, OutOfTime, OutOfTokens) as exc:
            log.warning("the reviser failed (%s); the failing claims are marked", exc)
    fixes: list[tuple[str, Fix, Quote | None]] = []
    for claim in failing:
        unverified = (_unverified(claim.text, language), Fix.UNVERIFIED, None)
        if claim.index not in answered:
            fixes.append(unverified)
            continue
        text, shown = answered[claim.index].text, answered[claim.index].shown
        if text is None:
            fixes.append(("", Fix.DROPPED, None))
            continue
        sentence = " ".join(text.split())[: 2 * len(claim.text) + 200]
        cites = [int(n) for n in CITATION.findall(sentence)]
        revised = Claim(claim.index, sentence, tuple(cites), claim.start, claim.end)
        sources = [evidence[n] for n in cites if n in evidence]
        found = plain_support(revised.statement, sources) if set(cites) <= shown else None
        if cites and found is not None:
            fixes.append((sentence, Fix.REVISED, _found_quote(revised.statement, found)))
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
