"""The Markdown of an evaluation: what made it (its provenance), one row per question grouped
by the question set's ``language``, and the totals, overall and per language, each with its
interval from 10 questions on."""

from __future__ import annotations

from collections.abc import Sequence

from core.evaluation import bootstrap
from core.evaluation.measures import MEASURES, Measure
from core.evaluation.provenance import Provenance
from core.evaluation.score import EvalResult
from core.words.note_words import UNCHECKED_REASONS

HEADER = (
    "| Question | Status | Claims supported | Fixed | Uncited | Sources (sites) | "
    "Expected facts | Tokens | Cost | Seconds |"
)
#: How the table names the question set's languages (others are shown by their code).
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


def cell(text: str) -> str:
    """``text`` safe in a table cell (one line, no column breaks)."""
    return " ".join(text.split()).replace("|", "\\|")


def language_name(code: str) -> str:
    return f"{LANGUAGE_NAMES.get(code, code)} ({code})"


def languages(results: Sequence[EvalResult]) -> list[str]:
    """The languages of ``results``, in the order they first appear."""
    return list(dict.fromkeys(r.language for r in results))


def provenance_lines(provenance: Provenance, results: Sequence[EvalResult]) -> list[str]:
    """What made the results, one line each (the table's header)."""
    per_language = ", ".join(
        f"{sum(1 for r in results if r.language == code)} {code}" for code in languages(results)
    )
    check = "claim check on" if provenance.claim_check else "claim check off"
    return [
        f"- Question set: {provenance.question_set} ({_questions(provenance.questions)}: "
        f"{per_language})",
        f"- Planner: {provenance.planner_model} at {provenance.planner_endpoint}",
        f"- Writer: {provenance.writer_model} at {provenance.writer_endpoint}",
        f"- Verifier: {provenance.verifier_model} at {provenance.verifier_endpoint} ({check})",
        f"- Search: {provenance.search}",
        f"- Fathom: {provenance.fathom_version}",
        f"- Date: {provenance.date}",
    ]


def _questions(count: int) -> str:
    return f"{count} question" if count == 1 else f"{count} questions"


def status_text(result: EvalResult) -> str:
    """How a question's run ended, why it is kept out of the quality totals if it is, and
    why some of its claims were not checked if some were."""
    if result.error is not None:
        return f"{result.status}: {result.error[:80]}"
    unchecked = ""
    if result.check_partial:
        words = [UNCHECKED_REASONS.get(r, (r,))[0] for r in result.check_reasons]
        unchecked = f"{result.claims_not_checked} not checked" + (
            f": {'; '.join(words)}" if words else ""
        )
    if result.kept_out == "check partial":
        return f"{result.status} (check partial: {unchecked})"
    if result.kept_out is not None and result.kept_out != result.status:
        return f"{result.status} ({result.kept_out})"
    return f"{result.status} ({unchecked})" if unchecked else result.status


def _row(result: EvalResult) -> str:
    claims = f"{result.claims_supported} / {result.claims}" if result.claims else "–"
    facts = (
        f"{result.expected_covered} / {result.expected}"
        if result.expected and result.expected_covered is not None
        else ("not checked" if result.expected else "–")
    )
    cost = f"{result.cost:.4f}" if result.cost is not None else "–"
    cells = [
        result.id,
        status_text(result),
        claims,
        str(result.claims_fixed),
        str(result.uncited_claims) if result.uncited_claims is not None else "–",
        f"{result.sources_cited} ({result.sites})",
        facts,
        f"{result.tokens:,}",
        cost,
        f"{result.seconds:.1f}",
    ]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def total_text(measure: Measure, results: Sequence[EvalResult]) -> str:
    """``measure`` of ``results``, with its interval when it has one."""
    value = measure.of(results)
    if value is None:
        return "–"
    shown = measure.shown(value)
    if measure.spread:
        about = [r for r in results if measure.about(r)]
        bounds = bootstrap.interval(about, measure.compute)
        if bounds is not None:
            shown += f" [{measure.shown(bounds[0])} – {measure.shown(bounds[1])}]"
    return shown


def results_table(results: Sequence[EvalResult], provenance: Provenance | None) -> str:
    """The provenance, one row per question under its language, then the totals (overall
    and per language when there are several)."""
    lines = ["# fathom eval", ""]
    if provenance is not None:
        lines += [*provenance_lines(provenance, results), ""]
    lines += ["## Results", ""]
    codes = languages(results)
    for code in codes:
        if len(codes) > 1:
            lines += [f"### {language_name(code)}", ""]
        lines += [HEADER, "|" + "---|" * (HEADER.count(" | ") + 1)]
        lines += [_row(r) for r in results if r.language == code]
        lines.append("")
    columns = ["All", *codes] if len(codes) > 1 else ["Value"]
    groups = [list(results)] + (
        [[r for r in results if r.language == code] for code in codes] if len(codes) > 1 else []
    )
    lines += ["## Totals", "", "| Measure | " + " | ".join(columns) + " |"]
    lines.append("|---|" + "---|" * len(columns))
    for measure in MEASURES:
        values = [total_text(measure, group) for group in groups]
        lines.append(f"| {measure.label} | " + " | ".join(values) + " |")
    lines += ["", "\n\n".join(_footnotes(results))]
    return "\n".join(lines) + "\n"


def _footnotes(results: Sequence[EvalResult]) -> list[str]:
    kept = [r for r in results if r.kept_out is not None]
    notes = [
        "Claims, uncited claims, sources, sites and expected facts count the measured "
        "questions only; "
        + (
            "kept out: " + ", ".join(f"{r.id} ({r.kept_out})" for r in kept) + "."
            if kept
            else "every question was measured."
        ),
    ]
    if any(
        len([r for r in results if m.about(r)]) >= bootstrap.MIN_QUESTIONS
        for m in MEASURES
        if m.spread
    ):
        notes.append(f"Intervals in brackets: {bootstrap.described()}.")
    return [cell(n) for n in notes]
