"""The totals of an evaluation, each over the questions it is about.

Quality totals (claims supported and fixed, sources and sites, expected facts) count only the
questions that were measured whole (:attr:`EvalResult.kept_out` is None): a question whose run
failed, whose writer fell back to listing the findings, or whose claim check was partial is
counted as such and kept out of them, so a verifier outage reads as questions not measured,
never as a quality drop. A writer that cites less is not better for it: its uncited factual
sentences are counted (``uncited_claims``), and as not supported in "Supported of all claims,
uncited too". Tokens and cost count every question; seconds every report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.evaluation.score import EvalResult
from core.values import RunStatus


@dataclass(frozen=True)
class Measure:
    """One total: its label, the results it is about (``about``), how it is computed from
    them, and how it is shown. ``spread``: a bootstrap interval is worth showing (a share or
    a mean; not a count). ``whole``: computed over every question of each side even in a
    comparison (the counts of what happened), not over the pairs."""

    label: str
    about: Callable[[EvalResult], bool]
    compute: Callable[[Sequence[EvalResult]], float | None]
    shown: Callable[[float], str]
    change: Callable[[float], str]
    spread: bool = False
    whole: bool = False

    def of(self, results: Sequence[EvalResult]) -> float | None:
        """This total of ``results`` (those it is about; None: none, or nothing to divide)."""
        return self.compute([r for r in results if self.about(r)])


def _share(
    part: Callable[[EvalResult], int], whole: Callable[[EvalResult], int]
) -> Callable[[Sequence[EvalResult]], float | None]:
    def compute(results: Sequence[EvalResult]) -> float | None:
        total = sum(whole(r) for r in results)
        return 100 * sum(part(r) for r in results) / total if total else None

    return compute


def _mean(value: Callable[[EvalResult], float]) -> Callable[[Sequence[EvalResult]], float | None]:
    def compute(results: Sequence[EvalResult]) -> float | None:
        return sum(value(r) for r in results) / len(results) if results else None

    return compute


def _sum(value: Callable[[EvalResult], float]) -> Callable[[Sequence[EvalResult]], float | None]:
    def compute(results: Sequence[EvalResult]) -> float | None:
        return float(sum(value(r) for r in results))

    return compute


def _cost(results: Sequence[EvalResult]) -> float | None:
    costs = [r.cost for r in results]
    return sum(c for c in costs if c is not None) if costs and None not in costs else None


def _judged(r: EvalResult) -> int:
    return r.expected if r.expected_covered is not None else 0


def _percent(value: float) -> str:
    return f"{value:.1f} %"


def _points(value: float) -> str:
    return f"{value:.1f} pp"


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _tenths(value: float) -> str:
    return f"{value:,.1f}"


def _dollars(value: float) -> str:
    return f"{value:.4f}"


def measured(result: EvalResult) -> bool:
    """Whether ``result`` counts in the quality totals."""
    return result.kept_out is None


def _facts_judged(result: EvalResult) -> bool:
    return measured(result) and result.expected > 0 and result.expected_covered is not None


def _uncited_counted(result: EvalResult) -> bool:
    return measured(result) and result.uncited_claims is not None


def _any(result: EvalResult) -> bool:
    return True


def _report(result: EvalResult) -> bool:
    return result.status == RunStatus.SUCCEEDED.value


def _failed(result: EvalResult) -> bool:
    return result.status != RunStatus.SUCCEEDED.value


def _counted(reason: str) -> Callable[[Sequence[EvalResult]], float | None]:
    return lambda rs: float(sum(1 for r in rs if r.kept_out == reason))


MEASURES = (
    Measure("Questions", _any, lambda rs: float(len(rs)), _count, _count, whole=True),
    Measure("Measured", measured, lambda rs: float(len(rs)), _count, _count, whole=True),
    Measure("Check partial", _any, _counted("check partial"), _count, _count, whole=True),
    Measure("Writer fell back", _any, _counted("writer fell back"), _count, _count, whole=True),
    Measure("Failed", _failed, lambda rs: float(len(rs)), _count, _count, whole=True),
    Measure("Claims checked", measured, _sum(lambda r: r.claims), _count, _count),
    Measure(
        "Claims supported",
        measured,
        _share(lambda r: r.claims_supported, lambda r: r.claims),
        _percent,
        _points,
        spread=True,
    ),
    Measure(
        "Claims fixed",
        measured,
        _share(lambda r: r.claims_fixed, lambda r: r.claims),
        _percent,
        _points,
        spread=True,
    ),
    Measure(
        "Uncited claims per report",
        _uncited_counted,
        _mean(lambda r: r.uncited_claims or 0),
        _tenths,
        _tenths,
        spread=True,
    ),
    Measure(
        "Supported of all claims, uncited too",
        _uncited_counted,
        _share(lambda r: r.claims_supported, lambda r: r.claims + (r.uncited_claims or 0)),
        _percent,
        _points,
        spread=True,
    ),
    Measure(
        "Sources cited per report",
        measured,
        _mean(lambda r: r.sources_cited),
        _tenths,
        _tenths,
        spread=True,
    ),
    Measure("Sites per report", measured, _mean(lambda r: r.sites), _tenths, _tenths, spread=True),
    Measure(
        "Expected facts covered",
        _facts_judged,
        _share(lambda r: r.expected_covered or 0, _judged),
        _percent,
        _points,
        spread=True,
    ),
    Measure("Tokens", _any, _sum(lambda r: r.tokens), _count, _count),
    Measure("Verifier tokens", _any, _sum(lambda r: r.verifier_tokens), _count, _count),
    Measure("Cost (USD)", _any, _cost, _dollars, _dollars),
    Measure(
        "Seconds per report", _report, _mean(lambda r: r.seconds), _tenths, _tenths, spread=True
    ),
    Measure(
        "Of which checking claims",
        _report,
        _mean(lambda r: r.checking_seconds),
        _tenths,
        _tenths,
        spread=True,
    ),
)
