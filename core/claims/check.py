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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from core.claims.lexical import Evidence, plainly_supported
from core.claims.split import CITATION, Claim, claims_of
from core.claims.verifier import ClaimVerdict, Verdict, verdicts
from core.engine.state import JsonModel
from core.llm import LLMError
from core.models import Usage
from core.wording import Language, unverified_mark

log = logging.getLogger(__name__)


class Fix(StrEnum):
    """What was done to a claim that failed."""

    RECITED = "recited"  # cited to the source that says it instead
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


async def check_claims(
    markdown: str,
    evidence: Mapping[int, Evidence],
    model: JsonModel | None,
    usage: Usage,
    language: Language,
) -> ClaimCheck:
    """Check every cited claim of ``markdown`` against ``evidence`` (what each source gave the
    writer, by number); ``model``: the verifier (None: the lexical pass only)."""
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
    checked: list[CheckedClaim] = []
    rewrites: list[tuple[Claim, str]] = []
    for claim in claims:
        if settled[claim.index]:
            checked.append(CheckedClaim(claim.statement, claim.cites, Verdict.SUPPORTED, True))
            continue
        verdict = found.get(claim.index)
        if verdict is None or verdict.verdict is not Verdict.UNSUPPORTED:
            checked.append(
                CheckedClaim(claim.statement, claim.cites, verdict.verdict if verdict else None)
            )
            continue
        if verdict.source is not None and verdict.source not in claim.cites:
            rewrites.append((claim, _recited(claim.text, verdict.source)))
            checked.append(
                CheckedClaim(
                    claim.statement,
                    claim.cites,
                    Verdict.UNSUPPORTED,
                    False,
                    verdict.source,
                    Fix.RECITED,
                )
            )
            continue
        rewrites.append((claim, _unverified(claim.text, language)))
        checked.append(
            CheckedClaim(claim.statement, claim.cites, Verdict.UNSUPPORTED, fix=Fix.UNVERIFIED)
        )
    return ClaimCheck(_rewritten(markdown, rewrites), tuple(checked), partial)


def _recited(text: str, source: int) -> str:
    """``text`` citing ``source`` where it cited others (once, where its first citation was)."""
    first = CITATION.search(text)
    assert first is not None
    head, tail = text[: first.start()], CITATION.sub("", text[first.start() :])
    return f"{head}[{source}]{tail}"


def _unverified(text: str, language: Language) -> str:
    """``text`` without its citations, marked as not verified before its closing mark."""
    plain = CITATION.sub("", text).rstrip()
    end = len(plain)
    while end and plain[end - 1] in ".!?。！？":
        end -= 1
    body, closing = plain[:end].rstrip(), plain[end:]
    return f"{body}{unverified_mark(language)}{closing}"


def _rewritten(markdown: str, rewrites: Sequence[tuple[Claim, str]]) -> str:
    """``markdown`` with each claim's text replaced (from the end, so the places hold)."""
    for claim, text in sorted(rewrites, key=lambda r: r[0].start, reverse=True):
        markdown = markdown[: claim.start] + text + markdown[claim.end :]
    return markdown
