"""The verifier model's verdicts on the claims the lexical pass did not settle (with its rewrites
of those that fail), and the reviser's sentences for the claims that failed without one.

The contract (the tests' fake answers it, as it answers ``nextSearchTopic``): the user message
lists each claim as ``Claim <i>: <text>`` followed by ``Cited: [n][m]``, then each source shown
as ``[n] <title> — <url>``, a line saying what its evidence is (:class:`EvidenceKind`) and its
passages, all fenced as untrusted data; the model answers ``{"verdicts": [{"claim": <i>,
"verdict": "supported|partial|unsupported|contradicted", "source": <n or null>, "text":
<sentence or null>}]}``. ``text`` is optional: for a claim it finds unsupported or
contradicted, the claim rewritten from the passages shown, citing the sources that say it
(null: nothing shown supports it, drop it; absent: no rewrite offered). So one call both judges
and rewrites (issue 52's benchmark); the claims that failed without a rewrite go to the reviser
(:func:`revisions`), so a verifier model that ignores ``text`` still works, in two calls.

An answer is read strictly or not at all (issue 52, item 3): it must give exactly one entry for
each claim it was asked about, by the number it was given, each with one of the four verdicts.
A model that counts from 0, renames a key, leaves a claim out, answers one twice, says "yes"
or "not supported", or is cut off gives an answer whose verdicts cannot be matched to the
claims with certainty, so none of them is used: the model is asked once more, told exactly
what was wrong (the LLM client's one re-ask, :meth:`~core.llm.ChatModel.complete_json`), and
when the second answer is no better the claims of that request are "not checked"
(:class:`Unchecked`). A ``text`` that is neither a string nor null makes the answer unusable
in the same way. The reviser's answer is held to the same rule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from core.claims.deadline import Deadline, OutOfTime
from core.claims.lexical import Evidence
from core.claims.prompts import reviser_messages, verifier_messages
from core.claims.split import Claim
from core.documents.extract import bm25_scores, estimate_tokens, terms
from core.llm import LLMError, LLMInvalidJSON
from core.llm.protocols import JsonModel
from core.llm.tokens import TokenRoom
from core.models import Usage

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Passages of one source shown for one claim (the best for it), and the tokens one request's
#: sources may take: a depth-3 report's claims fit in one call.
PASSAGES_PER_CLAIM = 2
REQUEST_TOKENS = 12_000
#: The answer a request is allowed per claim it asks about, when its room is counted (a
#: verdict with a rewrite is about 60 tokens).
ANSWER_TOKENS_PER_CLAIM = 100


class OutOfTokens(Exception):
    """What the run's token limit left does not fit the check's next request."""


def _fits(room: TokenRoom | None, messages: list[dict[str, str]], claims: int) -> bool:
    return room is None or room.fits(messages, ANSWER_TOKENS_PER_CLAIM * claims)


def valid_entries(entry: type[BaseModel], value: Any) -> Any:
    """The entries of a list answer that are valid ``entry`` (a list: the others dropped).
    (``fathom eval``'s expected facts are read so; a verdict is not: :func:`answer_problems`.)"""
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
    #: The evidence says the opposite; fixed as an unsupported claim is.
    CONTRADICTED = "contradicted"

    @property
    def failing(self) -> bool:
        """Whether a claim with this verdict is fixed (re-cited, revised or marked)."""
        return self in (Verdict.UNSUPPORTED, Verdict.CONTRADICTED)


class Unchecked(StrEnum):
    """Why a claim the lexical pass did not settle has no verdict."""

    #: A verifier request failed (an error, a timeout of its own).
    VERIFIER_FAILED = "verifier_failed"
    #: The verifier answered twice, and neither answer named each claim by its number with a
    #: valid verdict.
    ANSWER_UNUSABLE = "answer_unusable"
    #: The check's time budget (FATHOM_VERIFY_SECONDS) ran out first.
    TIME_BUDGET = "time_budget"
    #: What the run's token limit (FATHOM_MAX_RUN_TOKENS, or its requester's daily quota)
    #: left did not fit its request.
    TOKEN_BUDGET = "token_budget"
    #: Its only sources speak to a model (:mod:`core.claims.addressing`): the verifier's
    #: "supported" for it is not taken.
    SOURCE_ADDRESSES_MODEL = "source_addresses_model"
    #: No verifier model was given (the lexical pass only).
    NO_VERIFIER = "no_verifier"


class ClaimVerdict(BaseModel):
    """The verifier's word on one claim (``source``: another source that supports it;
    ``text``: its rewrite of a claim it finds failing, None to drop it, when
    :attr:`rewrite_offered`)."""

    model_config = ConfigDict(extra="ignore")

    claim: int
    verdict: Verdict
    source: int | None = None
    text: str | None = None

    @property
    def rewrite_offered(self) -> bool:
        """Whether the answer gave ``text`` for it (a sentence, or null: drop it)."""
        return "text" in self.model_fields_set

    @field_validator("verdict", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class Verdicts(BaseModel):
    model_config = ConfigDict(extra="ignore")

    verdicts: list[ClaimVerdict]


@dataclass(frozen=True)
class Rewrite:
    """A model's sentence for a failing claim (``text`` None: drop it) and the sources it was
    shown (the only ones it may cite): the verifier's ``text`` or the reviser's."""

    text: str | None
    shown: frozenset[int]


class Revision(BaseModel):
    """The reviser's sentence for one failing claim (``text`` None: drop it)."""

    model_config = ConfigDict(extra="ignore")

    claim: int
    text: str | None = None


class Revisions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    revisions: list[Revision]


_VERDICT_WORDS = ", ".join(f'"{v.value}"' for v in Verdict)


def _claim_number(value: Any) -> int | None:
    """A claim's number as the model wrote it: an integer, or one written as digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _verdict_problems(entry: Mapping[str, Any], claim: int) -> list[str]:
    problems = []
    word = entry.get("verdict")
    if not isinstance(word, str) or word.strip().lower() not in set(Verdict):
        problems.append(f"claim {claim}'s verdict {_shown(word)} is not one of {_VERDICT_WORDS}")
    source = entry.get("source")
    if source is not None and _claim_number(source) is None:
        problems.append(f'claim {claim}\'s "source" {_shown(source)} is not a number or null')
    return problems + _revision_problems(entry, claim)


def _revision_problems(entry: Mapping[str, Any], claim: int) -> list[str]:
    """A ``text`` (the reviser's, or the verifier's optional rewrite) must be a sentence or
    null."""
    text = entry.get("text")
    if text is not None and not isinstance(text, str):
        return [f'claim {claim}\'s "text" {_shown(text)} is neither a sentence nor null']
    return []


def answer_problems(
    data: Any,
    key: str,
    asked: Sequence[int],
    entry_problems: Callable[[Mapping[str, Any], int], list[str]] = _verdict_problems,
) -> list[str]:
    """What is wrong with an answer that must be ``{key: [{"claim": <i>, ...}]}`` with exactly
    one entry for each number in ``asked`` (empty: nothing)."""
    if not isinstance(data, dict):
        return [f"it is not a JSON object with a {key!r} list"]
    entries = data.get(key)
    if not isinstance(entries, list):
        keys = ", ".join(repr(k) for k in data) or "none"
        return [f"it has no {key!r} list (its keys: {keys})"]
    problems: list[str] = []
    seen: list[int] = []
    for place, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            problems.append(f"entry {place} is not an object")
            continue
        if "claim" not in entry:
            keys = ", ".join(repr(k) for k in entry) or "none"
            problems.append(f'entry {place} has no "claim" (its keys: {keys})')
            continue
        claim = _claim_number(entry["claim"])
        if claim is None:
            problems.append(f'entry {place}\'s "claim" {_shown(entry["claim"])} is not a number')
            continue
        if claim not in asked:
            numbers = ", ".join(str(n) for n in asked)
            problems.append(f"claim {claim} was not asked about (the claims are {numbers})")
            continue
        if claim in seen:
            problems.append(f"claim {claim} is answered more than once")
            continue
        seen.append(claim)
        problems.extend(entry_problems(entry, claim))
    missing = [str(n) for n in asked if n not in seen]
    if missing:
        which = "claim " + missing[0] if len(missing) == 1 else "claims " + ", ".join(missing)
        problems.append(f"{which} {'has' if len(missing) == 1 else 'have'} no entry")
    return problems


def _shown(value: Any) -> str:
    """A value of the answer, quoted in a problem (short)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _asked_verdicts(asked: Sequence[int]) -> type[Verdicts]:
    """:class:`Verdicts` that validates only an answer for exactly the claims ``asked``."""

    class AskedVerdicts(Verdicts):
        model_config = ConfigDict(title="Verdicts")

        @model_validator(mode="before")
        @classmethod
        def _strict(cls, data: Any) -> Any:
            problems = answer_problems(data, "verdicts", asked)
            if problems:
                raise ValueError("; ".join(problems))
            return data

    return AskedVerdicts


def _asked_revisions(asked: Sequence[int]) -> type[Revisions]:
    """:class:`Revisions` that validates only an answer for exactly the claims ``asked``."""

    class AskedRevisions(Revisions):
        model_config = ConfigDict(title="Revisions")

        @model_validator(mode="before")
        @classmethod
        def _strict(cls, data: Any) -> Any:
            problems = answer_problems(data, "revisions", asked, _revision_problems)
            if problems:
                raise ValueError("; ".join(problems))
            return data

    return AskedRevisions


def claim_lines(claim: Claim) -> str:
    """``Claim <i>: <text>`` and ``Cited: [n][m]`` (``i``: its place in the report, from 1)."""
    cited = "".join(f"[{n}]" for n in claim.cites)
    return f"Claim {claim.index + 1}: {claim.statement}\nCited: {cited}"


def source_block(source: Evidence, passages: Sequence[str]) -> str:
    """``[n] <title> — <url>``, what its evidence is, and the passages shown, one ``> `` line
    each."""
    shown = "".join("\n    > " + " ".join(p.split()) for p in passages)
    return f"[{source.n}] {source.title} — {source.url}\n    Evidence: {source.kind.label}{shown}"


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


def batches(
    claims: Sequence[Claim], evidence: Mapping[int, Evidence], *, elsewhere: bool = True
) -> list[Batch]:
    """The claims in groups whose sources fit one request, with each group's source blocks
    (each source once per group, with the passages that matter for the group's claims: of the
    sources each cites, and, with ``elsewhere``, of the one other source that matters most
    for it)."""
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
        other = _best_elsewhere(claim, pool, corpus) if elsewhere else None
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


@dataclass
class Judged:
    """The verifier's verdicts, by claim index, and why each claim it gave none for has none
    (``failure``: what the last request that gave none said, for the logs); ``rewrites``: its
    rewrite of each claim it found failing and gave ``text`` for."""

    found: dict[int, ClaimVerdict] = field(default_factory=dict)
    unchecked: dict[int, Unchecked] = field(default_factory=dict)
    failure: str | None = None
    rewrites: dict[int, Rewrite] = field(default_factory=dict)


async def _within(deadline: Deadline | None, work: Coroutine[Any, Any, T]) -> T:
    return await work if deadline is None else await deadline.run(work)


async def verdicts(
    model: JsonModel,
    claims: Sequence[Claim],
    evidence: Mapping[int, Evidence],
    usage: Usage,
    deadline: Deadline | None = None,
    *,
    elsewhere: bool = True,
    room: TokenRoom | None = None,
) -> Judged:
    """The verifier's verdict on each of ``claims`` it answered for as asked, by claim index;
    the others unchecked with the reason. A request whose answers were unusable leaves its own
    claims unchecked and the next request is made; one that failed or ran out of time leaves
    its claims and those of every later request unchecked. ``elsewhere``: also show each
    claim's best other source, so the verifier can name it (off for a second verdict on one
    source alone). A failing claim's ``text`` is kept in ``rewrites`` with the sources its
    request showed. ``room``: what the run's token limit leaves the check; a request that does
    not fit it is not made, and its claims and those of every later request are unchecked."""
    judged = Judged()
    pending = batches(claims, evidence, elsewhere=elsewhere)
    for place, batch in enumerate(pending):
        asked = {claim.index + 1: claim for claim in batch.claims}
        messages = verifier_messages(
            [claim_lines(c) for c in batch.claims], list(batch.sources.values())
        )
        if not _fits(room, messages, len(asked)):
            log.warning("the claim check stopped: the run's token limit leaves too little")
            _unchecked(judged, pending[place:], Unchecked.TOKEN_BUDGET)
            break
        schema = _asked_verdicts(list(asked))
        try:
            answer = await _within(
                deadline,
                model.complete_json(messages, schema, usage=usage, schema_name="verdicts"),
            )
        except OutOfTime as exc:
            log.warning("the claim check stopped: %s", exc)
            _unchecked(judged, pending[place:], Unchecked.TIME_BUDGET)
            break
        except LLMInvalidJSON as exc:
            log.warning("the verifier's answer was unusable twice (%s); not checked", exc.said)
            _unchecked(judged, [batch], Unchecked.ANSWER_UNUSABLE)
            judged.failure = str(exc)
            continue
        except LLMError as exc:
            log.warning("the verifier failed (%s); the rest is not checked", exc)
            _unchecked(judged, pending[place:], Unchecked.VERIFIER_FAILED)
            judged.failure = str(exc)
            break
        for verdict in answer.verdicts:
            claim = asked[verdict.claim]
            source = verdict.source
            if source not in batch.sources or source in claim.cites:
                source = None
            judged.found[claim.index] = verdict.model_copy(update={"source": source})
            if verdict.verdict.failing and verdict.rewrite_offered:
                judged.rewrites[claim.index] = Rewrite(verdict.text, frozenset(batch.sources))
    return judged


def _unchecked(judged: Judged, left: Sequence[Batch], why: Unchecked) -> None:
    for batch in left:
        for claim in batch.claims:
            judged.unchecked[claim.index] = why


async def revisions(
    model: JsonModel,
    claims: Sequence[Claim],
    evidence: Mapping[int, Evidence],
    usage: Usage,
    deadline: Deadline | None = None,
    room: TokenRoom | None = None,
) -> dict[int, Rewrite]:
    """The reviser's sentence for each of ``claims`` it answered for as asked, by claim index,
    with the sources it was shown (the only ones a revision may cite); raises the model's
    ``LLMError`` (``LLMInvalidJSON``: twice no usable answer), :class:`OutOfTime` or
    :class:`OutOfTokens` (a request ``room`` does not fit is not made)."""
    found: dict[int, Rewrite] = {}
    for batch in batches(claims, evidence):
        asked = {claim.index + 1: claim for claim in batch.claims}
        messages = reviser_messages(
            [claim_lines(c) for c in batch.claims], list(batch.sources.values())
        )
        if not _fits(room, messages, len(asked)):
            raise OutOfTokens("the run's token limit leaves too little for the reviser")
        schema = _asked_revisions(list(asked))
        answer = await _within(
            deadline, model.complete_json(messages, schema, usage=usage, schema_name="revisions")
        )
        for revision in answer.revisions:
            claim = asked[revision.claim]
            found[claim.index] = Rewrite(revision.text, frozenset(batch.sources))
    return found
