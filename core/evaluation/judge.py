"""``fathom eval --judge-check``: how far the configured verifier agrees with a labelled set of
claim/evidence pairs.

Each pair is sent as the claim check sends a claim (:func:`core.claims.verifier.verdicts`: the
claim citing ``[1]``, its evidence as source 1), one pair per request so that no other pair's
evidence is shown beside it. The verdicts are set against the labels: agreement overall (with
its bootstrap interval), per label and per language, a confusion table, and the error that
matters most for a claim check: "supported" said of a claim whose label is not. What the
claim check's model-free pass would say of each pair is shown beside (it settles a claim as
supported before any verifier sees it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.claims.lexical import Evidence, plainly_supported
from core.claims.split import Claim
from core.claims.verifier import verdicts
from core.evaluation import bootstrap
from core.evaluation.pairs import JudgePair, Label
from core.llm.protocols import JsonModel
from core.models import Usage

log = logging.getLogger(__name__)

#: What the table shows for a pair the verifier gave no verdict on.
NO_VERDICT = "no verdict"


@dataclass(frozen=True)
class JudgedPair:
    """One pair and the verifier's verdict on it (None: it gave none; ``error``: why);
    ``shortcut``: the claim check's model-free pass would call it supported without asking
    the verifier (``core.claims.lexical.plainly_supported``)."""

    pair: JudgePair
    verdict: str | None
    error: str | None = None
    shortcut: bool = False

    @property
    def agreed(self) -> bool:
        return self.verdict == self.pair.label.value


async def judge_pairs(
    pairs: Sequence[JudgePair],
    model: JsonModel,
    usage: Usage,
    *,
    concurrency: int,
    on_judged: Callable[[JudgedPair], None] = lambda judged: None,
) -> list[JudgedPair]:
    """The verifier's verdict on each of ``pairs`` (at most ``concurrency`` requests at once),
    in the pairs' order; its calls are counted in ``usage``."""
    slots = asyncio.Semaphore(concurrency)

    async def one(pair: JudgePair) -> JudgedPair:
        async with slots:
            judged = await _judged(pair, model, usage)
        on_judged(judged)
        return judged

    return list(await asyncio.gather(*(one(p) for p in pairs)))


async def _judged(pair: JudgePair, model: JsonModel, usage: Usage) -> JudgedPair:
    text = f"{pair.claim} [1]"
    claim = Claim(index=0, text=text, cites=(1,), start=0, end=len(text))
    evidence = {1: Evidence(n=1, title=pair.title, url=pair.url, passages=tuple(pair.evidence))}
    shortcut = plainly_supported(claim.statement, list(evidence.values()))
    judged = await verdicts(model, [claim], evidence, usage)  # (read strictly, or not at all)
    verdict = judged.found.get(claim.index)
    if verdict is None:
        error = judged.failure or "no verdict"
        log.warning("pair %s was not judged: %s", pair.id, error)
        return JudgedPair(pair, None, error[:300], shortcut)
    return JudgedPair(pair, verdict.verdict.value, None, shortcut)


@dataclass(frozen=True)
class Agreement:
    """The verdicts set against the labels."""

    judged: list[JudgedPair]

    @property
    def answered(self) -> list[JudgedPair]:
        return [j for j in self.judged if j.verdict is not None]

    @property
    def agreed(self) -> int:
        return sum(1 for j in self.judged if j.agreed)

    def share(self) -> float | None:
        """The share of pairs whose verdict is their label (of all pairs: a pair without a
        verdict is not agreement)."""
        return _agreement(self.judged)

    def interval(self) -> tuple[float, float] | None:
        return bootstrap.interval(self.judged, _agreement)

    def by(
        self, key: Callable[[JudgedPair], str], keys: Sequence[str]
    ) -> dict[str, tuple[int, int]]:
        """Per value of ``key``: pairs, and pairs agreed."""
        return {
            k: (
                sum(1 for j in self.judged if key(j) == k),
                sum(1 for j in self.judged if key(j) == k and j.agreed),
            )
            for k in keys
        }

    def confusion(self) -> dict[str, dict[str, int]]:
        """Label -> verdict (or :data:`NO_VERDICT`) -> pairs."""
        table = {label.value: dict.fromkeys([*VERDICTS, NO_VERDICT], 0) for label in Label}
        for j in self.judged:
            column = j.verdict if j.verdict in VERDICTS else NO_VERDICT
            table[j.pair.label.value][column] += 1
        return table

    def falsely_supported(self) -> tuple[int, int]:
        """Pairs labelled anything but supported that the verifier called supported, and
        the pairs labelled so: the error that lets a wrong claim stand as checked."""
        others = [j for j in self.judged if j.pair.label is not Label.SUPPORTED]
        return sum(1 for j in others if j.verdict == Label.SUPPORTED.value), len(others)

    def shortcut(self) -> tuple[int, int]:
        """Pairs the model-free pass would call supported, and those of them labelled
        otherwise (a meaning flip it lets through stands without any model's verdict)."""
        taken = [j for j in self.judged if j.shortcut]
        return len(taken), sum(1 for j in taken if j.pair.label is not Label.SUPPORTED)

    def supported_or_not(self) -> int:
        """Pairs where verdict and label agree on whether the claim is supported (what an
        evaluation's "Claims supported" counts)."""
        return sum(
            1
            for j in self.answered
            if (j.verdict == Label.SUPPORTED.value) == (j.pair.label is Label.SUPPORTED)
        )


#: The verdicts the table has a column for: the labels (a verifier that never says
#: ``contradicted`` shows an empty column).
VERDICTS = tuple(label.value for label in Label)


def _agreement(judged: Sequence[JudgedPair]) -> float | None:
    return 100 * sum(1 for j in judged if j.agreed) / len(judged) if judged else None


def agreement_json(agreement: Agreement) -> dict[str, object]:
    """``--judge-check --json``: the agreement and each pair's verdict."""
    share, bounds = agreement.share(), agreement.interval()
    wrong, others = agreement.falsely_supported()
    taken, wrongly_taken = agreement.shortcut()
    return {
        "pairs": len(agreement.judged),
        "judged": len(agreement.answered),
        "agreed": agreement.agreed,
        "agreement": round(share, 1) if share is not None else None,
        "interval": [round(b, 1) for b in bounds] if bounds is not None else None,
        "by_label": _counts(agreement.by(lambda j: j.pair.label.value, VERDICTS)),
        "by_language": _counts(agreement.by(lambda j: j.pair.language, ("en", "zh"))),
        "confusion": agreement.confusion(),
        "falsely_supported": {"pairs": wrong, "of": others},
        "supported_or_not_agreed": agreement.supported_or_not(),
        "shortcut": {"pairs": taken, "labelled_otherwise": wrongly_taken},
        "results": [
            {
                "id": j.pair.id,
                "language": j.pair.language,
                "label": j.pair.label.value,
                "flip": j.pair.flip,
                "verdict": j.verdict,
                "error": j.error,
                "shortcut": j.shortcut,
            }
            for j in agreement.judged
        ],
    }


def _counts(by: dict[str, tuple[int, int]]) -> dict[str, dict[str, object]]:
    return {
        k: {
            "pairs": pairs,
            "agreed": agreed,
            "agreement": round(100 * agreed / pairs, 1) if pairs else None,
        }
        for k, (pairs, agreed) in by.items()
    }
