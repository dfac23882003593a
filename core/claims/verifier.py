"""The verifier model's verdicts on the claims the lexical pass did not settle.

The contract (the tests' fake answers it, as it answers ``nextSearchTopic``): the user message
lists each claim as ``Claim <i>: <text>`` followed by ``Cited: [n][m]``, then each cited source
as ``[n] <title> — <url>`` with its passages, all fenced as untrusted data; the model answers
``{"verdicts": [{"claim": <i>, "verdict": "supported|partial|unsupported", "source": <n or
null>}]}``. The answer is read like the planner's (lenient parsing, one retry); what it says of
a claim it was not asked about, or of a source it was not shown, is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.claims.lexical import Evidence
from core.claims.split import Claim
from core.engine.state import JsonModel
from core.models import Usage
from core.pages.extract import bm25_scores, estimate_tokens, terms
from core.research.prompts import reviser_messages, verifier_messages

log = logging.getLogger(__name__)

#: Passages of one source shown for one claim (the best for it), and the tokens one request's
#: sources may take: a depth-3 report's claims fit in one call.
PASSAGES_PER_CLAIM = 2
REQUEST_TOKENS = 12_000


def valid_entries(entry: type[BaseModel], value: Any) -> Any:
    """The entries of a list answer that are valid ``entry`` (a list: the others dropped)."""
    if not isinstance(value, list):
        return value
    kept = []
    for item in value:
        try:
            kept.append(entry.model_validate(item))
        except ValueError:
            continue
    return kept


class Verdict(StrEnum):
    SUPPORTED = "supported"
    PARTIAL = "partial"
    UNSUPPORTED = "unsupported"


class ClaimVerdict(BaseModel):
    """The verifier's word on one claim (``source``: another source that supports it)."""

    model_config = ConfigDict(extra="ignore")

    claim: int
    verdict: Verdict
    source: int | None = None

    @field_validator("verdict", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class Verdicts(BaseModel):
    model_config = ConfigDict(extra="ignore")

    verdicts: list[ClaimVerdict] = Field(default_factory=list)

    @field_validator("verdicts", mode="before")
    @classmethod
    def _valid_only(cls, value: Any) -> Any:
        """An entry that is not a verdict is dropped, not the whole answer."""
        return valid_entries(ClaimVerdict, value)


def claim_lines(claim: Claim) -> str:
    """``Claim <i>: <text>`` and ``Cited: [n][m]`` (``i``: its place in the report, from 1)."""
    cited = "".join(f"[{n}]" for n in claim.cites)
    return f"Claim {claim.index + 1}: {claim.statement}\nCited: {cited}"


def source_block(source: Evidence, passages: Sequence[str]) -> str:
    """``[n] <title> — <url>`` and the passages shown, one ``> `` line each."""
    shown = "".join("\n    > " + " ".join(p.split()) for p in passages)
    return f"[{source.n}] {source.title} — {source.url}{shown}"


def best_passages(statement: str, source: Evidence, count: int = PASSAGES_PER_CLAIM) -> list[int]:
    """The indexes of ``source``'s passages that matter most for ``statement`` (BM25)."""
    if not source.passages:
        return []
    scores = bm25_scores([terms(p) or [""] for p in source.passages], terms(statement))
    ranked = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    return sorted(ranked[:count])


@dataclass(frozen=True)
class Batch:
    """The claims of one request, and the sources shown with them (their blocks, by number)."""

    claims: list[Claim]
    sources: dict[int, str]


def batches(claims: Sequence[Claim], evidence: Mapping[int, Evidence]) -> list[Batch]:
    """The claims in groups whose sources fit one request, with each group's source blocks
    (each source once per group, with the passages that matter for the group's claims: of the
    sources each cites, and of the one other source that matters most for it)."""
    groups: list[Batch] = []
    chosen: dict[int, set[int]] = {}
    group: list[Claim] = []
    spent = 0
    pool = [(n, i) for n, source in sorted(evidence.items()) for i in range(len(source.passages))]
    corpus = [terms(evidence[n].passages[i]) or [""] for n, i in pool]
    for claim in claims:
        wanted: dict[int, set[int]] = {}
        for n in claim.cites:
            source = evidence.get(n)
            if source is not None:
                wanted[n] = set(best_passages(claim.statement, source))
        other = _best_elsewhere(claim, pool, corpus)
        if other is not None:
            wanted.setdefault(other[0], set()).add(other[1])
        cost = sum(
            estimate_tokens(evidence[n].passages[i])
            for n, picks in wanted.items()
            for i in picks - chosen.get(n, set())
        )
        if group and spent + cost > REQUEST_TOKENS:
            groups.append(Batch(group, _blocks(chosen, evidence)))
            group, chosen, spent = [], {}, 0
            cost = sum(
                estimate_tokens(evidence[n].passages[i]) for n, p in wanted.items() for i in p
            )
        group.append(claim)
        spent += cost
        for n, picks in wanted.items():
            chosen.setdefault(n, set()).update(picks)
    if group:
        groups.append(Batch(group, _blocks(chosen, evidence)))
    return groups


def _best_elsewhere(
    claim: Claim, pool: Sequence[tuple[int, int]], corpus: Sequence[Sequence[str]]
) -> tuple[int, int] | None:
    """The passage of a source the claim does not cite that matters most for it (BM25 over
    every source's passages), shown so the verifier can name the source that says it."""
    if not pool:
        return None
    wanted = terms(claim.statement)
    scores = bm25_scores(corpus, wanted)
    ranked = sorted(range(len(pool)), key=lambda i: scores[i], reverse=True)
    best = next((i for i in ranked if pool[i][0] not in claim.cites), None)
    if best is None or not set(wanted) & set(corpus[best]):
        return None  # (a score may be below zero where every passage shares most words)
    return pool[best]


def _blocks(chosen: Mapping[int, set[int]], evidence: Mapping[int, Evidence]) -> dict[int, str]:
    return {
        n: source_block(evidence[n], [evidence[n].passages[i] for i in sorted(picks)])
        for n, picks in sorted(chosen.items())
    }


async def verdicts(
    model: JsonModel, claims: Sequence[Claim], evidence: Mapping[int, Evidence], usage: Usage
) -> dict[int, ClaimVerdict]:
    """The verifier's verdict on each of ``claims`` it answered for, by claim index; raises
    the model's ``LLMError`` when a request fails (the caller keeps the lexical verdicts)."""
    found: dict[int, ClaimVerdict] = {}
    for batch in batches(claims, evidence):
        asked = {claim.index + 1: claim for claim in batch.claims}
        messages = verifier_messages(
            [claim_lines(c) for c in batch.claims], list(batch.sources.values())
        )
        answer = await model.complete_json(messages, Verdicts, usage=usage, schema_name="verdicts")
        for verdict in answer.verdicts:
            claim = asked.get(verdict.claim)
            if claim is None:
                continue
            source = verdict.source if verdict.source in batch.sources else None
            found[claim.index] = verdict.model_copy(update={"source": source})
    return found


class Revision(BaseModel):
    """The reviser's sentence for one failing claim (``text`` None: drop it)."""

    model_config = ConfigDict(extra="ignore")

    claim: int
    text: str | None = None


class Revisions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    revisions: list[Revision] = Field(default_factory=list)

    @field_validator("revisions", mode="before")
    @classmethod
    def _valid_only(cls, value: Any) -> Any:
        return valid_entries(Revision, value)


async def revisions(
    model: JsonModel, claims: Sequence[Claim], evidence: Mapping[int, Evidence], usage: Usage
) -> dict[int, tuple[str | None, frozenset[int]]]:
    """The reviser's sentence for each of ``claims`` it answered for, by claim index, with the
    sources it was shown (the only ones a revision may cite); raises the model's ``LLMError``."""
    found: dict[int, tuple[str | None, frozenset[int]]] = {}
    for batch in batches(claims, evidence):
        asked = {claim.index + 1: claim for claim in batch.claims}
        messages = reviser_messages(
            [claim_lines(c) for c in batch.claims], list(batch.sources.values())
        )
        answer = await model.complete_json(
            messages, Revisions, usage=usage, schema_name="revisions"
        )
        for revision in answer.revisions:
            claim = asked.get(revision.claim)
            if claim is not None:
                found[claim.index] = (revision.text, frozenset(batch.sources))
    return found
