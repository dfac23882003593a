"""What one question's research came to, measured: a line of ``results.jsonl``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from core.claims.verifier import Unchecked
from core.evaluation.provenance import Provenance
from core.evaluation.questions import EvalQuestion
from core.research.outcome import RunOutcome
from core.values import RunStatus
from core.words.wording import sources_heading

_CITATION = re.compile(r"\[(\d{1,4})\]")
#: Why claims may be unchecked that is no fault of the verifier (a partial check for these
#: alone keeps a question measured). Any other reason, or none recorded, is an outage.
_THE_REPORTS_OWN = frozenset({Unchecked.SOURCE_ADDRESSES_MODEL.value})


class EvalResult(BaseModel):
    """One question's measures (``None``: not measured, e.g. no report or no prices)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    question: str
    language: str
    status: str
    error: str | None = None
    run_id: str | None = None
    #: Its run's writer model failed: the report is the findings listed, nothing to judge.
    writer_fallback: bool = False
    #: Its report's claim check was partial: ``claims_not_checked`` of its claims have no
    #: verdict, for ``check_reasons`` (``core.claims.verifier.Unchecked``'s values; empty
    #: from a release before issue 52, when it meant the verifier could not be used).
    check_partial: bool = False
    claims_not_checked: int = 0
    check_reasons: list[str] = Field(default_factory=list)
    #: Cited claims of the report, those supported by their sources as written, those fixed.
    claims: int = 0
    claims_supported: int = 0
    claims_fixed: int = 0
    #: The writer's sentences that cite nothing and state something checkable
    #: (``core.claims.uncited``; None: not counted, e.g. no report).
    uncited_claims: int | None = None
    #: Sources the report cites, and the distinct sites (host names) among them.
    sources_cited: int = 0
    sites: int = 0
    #: Facts the question set expects, and those the verifier model found in the report.
    expected: int = 0
    expected_covered: int | None = None
    llm_calls: int = 0
    tokens: int = 0
    verifier_tokens: int = 0
    cost: float | None = None
    seconds: float = 0.0
    #: Of ``seconds``, the claim check's (its model calls and the lexical pass).
    checking_seconds: float = 0.0
    #: What made it (None: written by a release that did not record it).
    provenance: Provenance | None = None

    @property
    def kept_out(self) -> str | None:
        """Why this result is kept out of the quality totals (None: it is measured): its run
        did not succeed, its writer fell back, or its claim check was partial because the
        verifier could not be used for some claims. A verifier outage is then a question not
        measured, never a quality drop. A claim left unchecked only because its sources speak
        to AI models is the report's evidence, not an outage: it counts as not supported."""
        if self.status != RunStatus.SUCCEEDED.value:
            return self.status
        if self.writer_fallback:
            return "writer fell back"
        outage = not self.check_reasons or not set(self.check_reasons) <= _THE_REPORTS_OWN
        if self.check_partial and outage:
            return "check partial"
        return None


def score(
    question: EvalQuestion,
    outcome: RunOutcome,
    covered: Sequence[bool | None] | None,
    provenance: Provenance | None = None,
) -> EvalResult:
    """``outcome`` measured; ``covered``: the verifier's answer per expected fact (None: not
    asked, or the request failed)."""
    report = outcome.report_markdown or ""
    body = _without_sources_list(report)
    numbers = {int(n) for n in _CITATION.findall(body)}
    cited = [s for s in outcome.sources if s.n in numbers]
    sites = {urlsplit(s.url).hostname or "" for s in cited if s.url}
    check = outcome.claims
    usage = outcome.usage
    known = [c for c in covered or () if c is not None]
    return EvalResult(
        id=question.id,
        question=question.question,
        language=question.language,
        status=outcome.status.value,
        error=outcome.error,
        run_id=outcome.run_id,
        writer_fallback=bool(outcome.writer_fallback),
        check_partial=check is not None and check.partial,
        claims_not_checked=check.unchecked if check is not None else 0,
        check_reasons=list(check.reasons) if check is not None and check.partial else [],
        uncited_claims=check.uncited if check is not None and outcome.report_markdown else None,
        claims=len(check.claims) if check is not None else 0,
        claims_supported=check.supported if check is not None else 0,
        claims_fixed=check.fixed if check is not None else 0,
        sources_cited=len(cited),
        sites=len(sites - {""}),
        expected=len(question.expected),
        expected_covered=sum(known) if question.expected and covered is not None else None,
        llm_calls=usage.llm_calls,
        tokens=usage.prompt_tokens + usage.completion_tokens,
        verifier_tokens=usage.verifier_prompt_tokens + usage.verifier_completion_tokens,
        cost=outcome.cost,
        seconds=round(outcome.seconds, 3),
        checking_seconds=round(usage.seconds_by_step.get("checking", 0.0), 3),
        provenance=provenance,
    )


def _without_sources_list(report: str) -> str:
    """The report above its generated sources list (whose lines name every source)."""
    for language in ("en", "zh"):
        heading = f"\n## {sources_heading(language)}\n"
        if heading in report:
            return report.rsplit(heading, 1)[0]
    return report


def failed(question: EvalQuestion, error: str, provenance: Provenance | None = None) -> EvalResult:
    """A question whose research could not be run at all."""
    return EvalResult(
        id=question.id,
        question=question.question,
        language=question.language,
        status=RunStatus.FAILED.value,
        error=error,
        expected=len(question.expected),
        provenance=provenance,
    )
