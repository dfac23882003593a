"""Two evaluations side by side, honestly: only of the same question set (by its id), with what
else differs between them said, each total over the questions measured in both, its change
with a paired bootstrap interval, and each question's own change."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.evaluation import bootstrap
from core.evaluation.measures import MEASURES, Measure
from core.evaluation.provenance import Difference, Provenance, differences
from core.evaluation.score import EvalResult
from core.evaluation.table import cell, language_name, languages, status_text

#: The flag that compares evaluations of different question sets (README, ``fathom eval``).
ANY_QUESTIONS_FLAG = "--allow-different-questions"

Pair = tuple[EvalResult, EvalResult]


class CompareError(ValueError):
    """The two evaluations cannot be compared; the message is one line saying why."""


@dataclass(frozen=True)
class Comparison:
    """An earlier evaluation's results (``before``) and these (``now``), their questions
    paired, and how their provenance differs."""

    before: list[EvalResult]
    now: list[EvalResult]
    before_provenance: Provenance | None
    now_provenance: Provenance | None
    pairs: list[Pair]
    only_before: list[EvalResult]
    only_now: list[EvalResult]
    same_questions: bool
    differences: list[Difference]


def provenance_of_results(results: Sequence[EvalResult]) -> Provenance | None:
    """The provenance of one evaluation's results (None: some result has none, written by a
    release that did not record it). Raises :class:`CompareError` when the results mix
    evaluations of different question sets."""
    found = [r.provenance for r in results]
    if not found or any(p is None for p in found):
        return None
    sets = {p.question_set for p in found if p is not None}
    if len(sets) > 1:
        raise CompareError(
            f"its results come from evaluations of {len(sets)} different question sets"
        )
    return found[0]


def comparable(
    before: Sequence[EvalResult], question_set: str | None, *, any_questions: bool = False
) -> Provenance | None:
    """``before``'s provenance, when it is an evaluation of ``question_set`` (an id,
    :func:`~core.evaluation.provenance.question_set_id`; None: not known). Raises
    :class:`CompareError` otherwise, unless ``any_questions``. Checked before an evaluation
    starts, so that nothing is spent on a comparison that would be refused."""
    old = provenance_of_results(before)
    if any_questions or (old is not None and old.question_set == question_set):
        return old
    if old is None:
        raise CompareError(
            "its results do not say which question set they are of (written by a release "
            "that did not record it), so they cannot be known to match; "
            f"{ANY_QUESTIONS_FLAG} compares the questions both evaluations hold"
        )
    raise CompareError(
        f"it is an evaluation of another question set ({old.question_set}; this one is "
        f"{question_set or 'not known'}): compare evaluations of the same question file, or "
        f"pass {ANY_QUESTIONS_FLAG} to compare the questions both hold"
    )


def compare(
    before: Sequence[EvalResult], now: Sequence[EvalResult], *, any_questions: bool = False
) -> Comparison:
    """``before`` and ``now`` paired by question. Raises :class:`CompareError` when they are
    not evaluations of the same question set (unless ``any_questions``: then the questions
    both hold, same id and same text, are paired and the rest listed apart)."""
    new = provenance_of_results(now)
    old = comparable(
        before, new.question_set if new is not None else None, any_questions=any_questions
    )
    same = old is not None and new is not None and old.question_set == new.question_set
    earlier = {(r.id, r.question): r for r in before}
    pairs = [(earlier[(r.id, r.question)], r) for r in now if (r.id, r.question) in earlier]
    paired = {(n.id, n.question) for _, n in pairs}
    return Comparison(
        before=list(before),
        now=list(now),
        before_provenance=old,
        now_provenance=new,
        pairs=pairs,
        only_before=[r for r in before if (r.id, r.question) not in paired],
        only_now=[r for r in now if (r.id, r.question) not in paired],
        same_questions=same,
        differences=differences(old, new) if old is not None and new is not None else [],
    )


def warnings(comparison: Comparison) -> list[str]:
    """What a reader of the comparison must know before reading its numbers, one line each."""
    lines = [d.line() for d in comparison.differences]
    if not comparison.same_questions:
        lines.append(
            f"the question sets are not known to be the same: {len(comparison.pairs)} questions "
            f"paired by id and text, {len(comparison.only_before)} only before, "
            f"{len(comparison.only_now)} only now"
        )
    return lines


def _both(measure: Measure, pairs: Sequence[Pair]) -> list[Pair]:
    """The pairs ``measure`` is about on both sides (a question measured before and now)."""
    return [(o, n) for o, n in pairs if measure.about(o) and measure.about(n)]


def _difference(measure: Measure) -> Callable[[Sequence[Pair]], float | None]:
    def compute(pairs: Sequence[Pair]) -> float | None:
        before = measure.compute([o for o, _ in pairs])
        now = measure.compute([n for _, n in pairs])
        return now - before if before is not None and now is not None else None

    return compute


def _signed(measure: Measure, value: float) -> str:
    return ("+" if value >= 0 else "−") + measure.change(abs(value))


def _total_row(measure: Measure, comparison: Comparison) -> str:
    if measure.whole:
        before, now = measure.of(comparison.before), measure.of(comparison.now)
        bounds = None
    else:
        pairs = _both(measure, comparison.pairs)
        before = measure.compute([o for o, _ in pairs]) if pairs else None
        now = measure.compute([n for _, n in pairs]) if pairs else None
        bounds = bootstrap.interval(pairs, _difference(measure)) if measure.spread else None
    change = _signed(measure, now - before) if before is not None and now is not None else "–"
    spread = f"{_signed(measure, bounds[0])} – {_signed(measure, bounds[1])}" if bounds else "–"
    shown = [measure.shown(v) if v is not None else "–" for v in (before, now)]
    return f"| {measure.label} | {shown[0]} | {shown[1]} | {change} | {spread} |"


def _share_text(result: EvalResult) -> str:
    return f"{result.claims_supported}/{result.claims}" if result.claims else "0 claims"


def _question_row(old: EvalResult, new: EvalResult) -> str:
    both = old.kept_out is None and new.kept_out is None
    claims = facts = sources = uncited = "kept out"
    if both:
        uncited = "–"
        if old.uncited_claims is not None and new.uncited_claims is not None:
            grown = new.uncited_claims - old.uncited_claims
            uncited = (
                f"{old.uncited_claims} → {new.uncited_claims} "
                f"({'+' if grown >= 0 else '−'}{abs(grown)})"
            )
        claims = f"{_share_text(old)} → {_share_text(new)}"
        if old.claims and new.claims:
            change = 100 * (new.claims_supported / new.claims - old.claims_supported / old.claims)
            claims += f" ({'+' if change >= 0 else '−'}{abs(change):.1f} pp)"
        facts = "–"
        if old.expected_covered is not None and new.expected_covered is not None:
            gained = new.expected_covered - old.expected_covered
            facts = (
                f"{old.expected_covered}/{old.expected} → {new.expected_covered}/{new.expected}"
                f" ({'+' if gained >= 0 else '−'}{abs(gained)})"
            )
        moved = new.sources_cited - old.sources_cited
        sources = (
            f"{old.sources_cited} → {new.sources_cited} ({'+' if moved >= 0 else '−'}{abs(moved)})"
        )
    seconds = "–"
    if old.status == new.status == "succeeded":
        took = new.seconds - old.seconds
        seconds = (
            f"{old.seconds:.1f} → {new.seconds:.1f} ({'+' if took >= 0 else '−'}{abs(took):.1f})"
        )
    cells = [new.id, status_text(old), status_text(new), claims, uncited, facts, sources, seconds]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def _side(name: str, provenance: Provenance | None) -> str:
    if provenance is None:
        return f"- {name}: provenance not recorded"
    return (
        f"- {name}: {provenance.date}, question set {provenance.question_set}, planner "
        f"{provenance.planner_model}, writer {provenance.writer_model}, verifier "
        f"{provenance.verifier_model}, search {provenance.search}, Fathom "
        f"{provenance.fathom_version}"
    )


def comparison_table(comparison: Comparison) -> str:
    """Both sides' provenance and what differs, each total before, now, its change and the
    change's interval (totals over the questions measured in both), then each question."""
    lines = ["## Compared with the earlier results", ""]
    lines += [
        _side("Before", comparison.before_provenance),
        _side("Now", comparison.now_provenance),
    ]
    lines += [f"- Warning: {cell(w)}" for w in warnings(comparison)]
    lines += [
        f"- Paired: {len(comparison.pairs)} questions; measured in both: "
        f"{sum(1 for o, n in comparison.pairs if o.kept_out is None and n.kept_out is None)} "
        "(the totals of claims, uncited claims, sources, sites and expected facts are over "
        "these)",
        "",
        "| Measure | Before | Now | Change | Interval of the change |",
        "|---|---|---|---|---|",
    ]
    lines += [_total_row(m, comparison) for m in MEASURES]
    lines.append("")
    if any(
        len(_both(m, comparison.pairs)) >= bootstrap.MIN_QUESTIONS for m in MEASURES if m.spread
    ):
        lines += [f"Interval of the change: {bootstrap.described()}, paired.", ""]
    lines += ["### Per question", ""]
    codes = languages([n for _, n in comparison.pairs])
    for code in codes:
        if len(codes) > 1:
            lines += [f"#### {language_name(code)}", ""]
        lines += [
            "| Question | Before | Now | Claims supported | Uncited | Expected facts | "
            "Sources cited | Seconds |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [_question_row(o, n) for o, n in comparison.pairs if n.language == code]
        lines.append("")
    for label, unpaired in (
        ("Only before", comparison.only_before),
        ("Only now", comparison.only_now),
    ):
        if unpaired:
            lines += [cell(f"{label}: " + ", ".join(r.id for r in unpaired)), ""]
    return "\n".join(lines)
