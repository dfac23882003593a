"""The Markdown of a judge check: the verifier's agreement with the labels, overall, per label
and per language, the confusion table and the pairs it got wrong."""

from __future__ import annotations

from collections.abc import Sequence

from core.evaluation import bootstrap
from core.evaluation.judge import NO_VERDICT, VERDICTS, Agreement
from core.evaluation.table import cell, language_name


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "–"


def agreement_table(agreement: Agreement, header: Sequence[str]) -> str:
    """``header``: what was judged with what (one Markdown line each)."""
    judged = agreement.judged
    share, bounds = agreement.share(), agreement.interval()
    overall = f"{share:.1f} %" if share is not None else "–"
    if bounds is not None:
        overall += f" [{bounds[0]:.1f} % – {bounds[1]:.1f} %]"
    lines = ["# fathom eval --judge-check", "", *header, ""]
    lines += [
        f"Agreement with the labels: {agreement.agreed} of {len(judged)} pairs, {overall}.",
        "",
        "| Label | Pairs | Agreed | Agreement |",
        "|---|---|---|---|",
    ]
    for label, (pairs, agreed) in agreement.by(lambda j: j.pair.label.value, VERDICTS).items():
        lines.append(f"| {label} | {pairs} | {agreed} | {_percent(agreed, pairs)} |")
    lines.append(f"| all | {len(judged)} | {agreement.agreed} | {overall} |")
    lines += ["", "| Language | Pairs | Agreed | Agreement |", "|---|---|---|---|"]
    for code, (pairs, agreed) in agreement.by(lambda j: j.pair.language, ("en", "zh")).items():
        if pairs:
            lines.append(
                f"| {language_name(code)} | {pairs} | {agreed} | {_percent(agreed, pairs)} |"
            )
    wrong, others = agreement.falsely_supported()
    taken, wrongly_taken = agreement.shortcut()
    answered = len(agreement.answered)
    lines += [
        "",
        f'- Said "supported" of a claim labelled otherwise: {wrong} of {others} pairs '
        f"({_percent(wrong, others)}): such a claim would stand in a report as checked.",
        f"- Agreed on whether the claim is supported at all: {agreement.supported_or_not()} of "
        f"{answered} pairs with a verdict ({_percent(agreement.supported_or_not(), answered)}).",
        f"- No verdict: {len(judged) - answered} pairs.",
        f"- The claim check's model-free pass would call {taken} pairs supported without "
        f"asking the verifier; {wrongly_taken} of them are labelled otherwise.",
    ]
    if bounds is not None:
        lines.append(f"- Interval in brackets: {bootstrap.described('pairs')}.")
    columns = [*VERDICTS, NO_VERDICT]
    lines += [
        "",
        "## Confusion (rows: the label; columns: the verifier's verdict)",
        "",
        "| Label | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for label, row in agreement.confusion().items():
        lines.append(f"| {label} | " + " | ".join(str(row[c]) for c in columns) + " |")
    wrongly = [j for j in judged if not j.agreed]
    if wrongly:
        lines += ["", "## Not agreed", "", "| Pair | Flip | Label | Verdict |", "|---|---|---|---|"]
        for j in wrongly:
            verdict = j.verdict or (f"{NO_VERDICT}: {j.error}" if j.error else NO_VERDICT)
            cells = [j.pair.id, j.pair.flip or "–", j.pair.label.value, verdict]
            lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
