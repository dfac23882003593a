"""The Markdown of an evaluation: one row per question, the totals, and the change from an
earlier evaluation's results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.evaluation.score import EvalResult

HEADER = (
    "| Question | Status | Claims supported | Fixed | Sources (sites) | Expected facts | "
    "Tokens | Cost | Seconds |"
)


@dataclass(frozen=True)
class Measure:
    """One total of an evaluation: its label, how to compute it, how to show it."""

    label: str
    compute: Callable[[Sequence[EvalResult]], float | None]
    shown: Callable[[float], str]


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


def _cost(results: Sequence[EvalResult]) -> float | None:
    costs = [r.cost for r in results]
    return sum(c for c in costs if c is not None) if costs and None not in costs else None


def _judged(r: EvalResult) -> int:
    return r.expected if r.expected_covered is not None else 0


def _percent(value: float) -> str:
    return f"{value:.1f} %"


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _tenths(value: float) -> str:
    return f"{value:,.1f}"


MEASURES = (
    Measure("Questions", lambda rs: float(len(rs)), _count),
    Measure("Succeeded", lambda rs: float(sum(1 for r in rs if r.status == "succeeded")), _count),
    Measure("Claims checked", lambda rs: float(sum(r.claims for r in rs)), _count),
    Measure("Claims supported", _share(lambda r: r.claims_supported, lambda r: r.claims), _percent),
    Measure("Claims fixed", _share(lambda r: r.claims_fixed, lambda r: r.claims), _percent),
    Measure("Sources cited per report", _mean(lambda r: r.sources_cited), _tenths),
    Measure("Sites per report", _mean(lambda r: r.sites), _tenths),
    Measure("Expected facts covered", _share(lambda r: r.expected_covered or 0, _judged), _percent),
    Measure("Tokens", lambda rs: float(sum(r.tokens for r in rs)), _count),
    Measure("Verifier tokens", lambda rs: float(sum(r.verifier_tokens for r in rs)), _count),
    Measure("Cost (USD)", _cost, lambda v: f"{v:.4f}"),
    Measure("Seconds per report", _mean(lambda r: r.seconds), _tenths),
    Measure("Of which checking claims", _mean(lambda r: r.checking_seconds), _tenths),
)


def _cell(text: str) -> str:
    """``text`` safe in a table cell (one line, no column breaks)."""
    return " ".join(text.split()).replace("|", "\\|")


def _row(result: EvalResult) -> str:
    claims = f"{result.claims_supported} / {result.claims}" if result.claims else "–"
    facts = (
        f"{result.expected_covered} / {result.expected}"
        if result.expected and result.expected_covered is not None
        else ("not checked" if result.expected else "–")
    )
    status = result.status if result.error is None else f"{result.status}: {result.error[:80]}"
    cost = f"{result.cost:.4f}" if result.cost is not None else "–"
    cells = [
        result.id,
        status,
        claims,
        str(result.claims_fixed),
        f"{result.sources_cited} ({result.sites})",
        facts,
        f"{result.tokens:,}",
        cost,
        f"{result.seconds:.1f}",
    ]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def results_table(results: Sequence[EvalResult]) -> str:
    """One row per question, then the totals."""
    rows = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|", *map(_row, results)]
    totals = ["| Measure | Value |", "|---|---|"]
    for measure in MEASURES:
        value = measure.compute(results)
        totals.append(f"| {measure.label} | {measure.shown(value) if value is not None else '–'} |")
    return "\n".join(["## Results", "", *rows, "", "## Totals", "", *totals]) + "\n"


def comparison_table(old: Sequence[EvalResult], new: Sequence[EvalResult]) -> str:
    """Each total before (``old``) and now, and the change."""
    lines = ["## Compared with the earlier results", "", "| Measure | Before | Now | Change |"]
    lines.append("|---|---|---|---|")
    for measure in MEASURES:
        before, now = measure.compute(old), measure.compute(new)
        change = "–"
        if before is not None and now is not None:
            change = ("+" if now >= before else "−") + measure.shown(abs(now - before))
        shown = [measure.shown(v) if v is not None else "–" for v in (before, now)]
        lines.append(f"| {measure.label} | {shown[0]} | {shown[1]} | {change} |")
    return "\n".join(lines) + "\n"
