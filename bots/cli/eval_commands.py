"""``fathom eval QUESTIONS.jsonl``: research a question set and measure the reports (with
``--compare``: against an earlier evaluation of the same set); ``fathom eval --judge-check
[PAIRS.jsonl]``: measure the verifier against labelled claim/evidence pairs."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bots.cli.apps import app
from bots.cli.common import (
    EXIT_FAILED,
    StartedRun,
    core_settings,
    fail,
    run_command,
    setup_logging,
    stderr,
)

if TYPE_CHECKING:
    from core.evaluation.judge import Agreement
    from core.evaluation.pairs import JudgePair
    from core.evaluation.provenance import Provenance
    from core.evaluation.questions import EvalQuestion
    from core.evaluation.score import EvalResult
    from core.llm import ChatModel
    from core.settings import Settings

RESULTS = "results.jsonl"
TABLE = "results.md"


@dataclass
class _Evaluation(StartedRun):
    """What an interrupted evaluation says: where the results so far are (None: nothing was
    written, no question had started)."""

    results: Path | None = None

    def interrupted_line(self) -> str:
        if self.results is None:
            return "interrupted before any question started; nothing was written"
        return f"interrupted; the results so far are in {self.results}"


@app.command("eval")
def evaluate(
    questions: Annotated[
        Path | None,
        typer.Argument(
            help='A JSONL question set: {"id", "question", "language"?, "depth"?, "strategy"?, '
            '"sources"?, "expected"?: [facts]} per line (bench/questions/ has one). With '
            f"--compare, an evaluation's {RESULTS} instead compares the two without researching. "
            "With --judge-check, a file of labelled pairs (default: the shipped set).",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, max=10, help="Questions researched (or pairs judged) at once.")
    ] = 2,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help=f"The folder for {RESULTS} and {TABLE} (default: eval-<UTC time> here).",
        ),
    ] = None,
    compare: Annotated[
        Path | None,
        typer.Option(
            help=f"An earlier evaluation's {RESULTS} of the same question set: each total's "
            "change, with its interval, and each question's."
        ),
    ] = None,
    allow_different_questions: Annotated[
        bool,
        typer.Option(
            "--allow-different-questions",
            help="With --compare: compare the questions both evaluations hold (same id and "
            "text) even when their question sets differ.",
        ),
    ] = False,
    judge_check: Annotated[
        bool,
        typer.Option(
            "--judge-check",
            help="Measure the verifier model's agreement with labelled claim/evidence pairs.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --judge-check: one JSON object.")
    ] = False,
) -> None:
    """Research every question of QUESTIONS.jsonl and measure the reports: claims supported,
    sources and sites cited, expected facts covered, tokens, cost, seconds. With
    --judge-check, measure the verifier model on labelled claim/evidence pairs instead."""
    if judge_check:
        if output is not None or compare is not None:
            raise fail("--judge-check writes no folder and compares nothing: drop -o/--compare")
        _judge_check(questions, concurrency, as_json)
        return
    if as_json:
        raise fail("--json goes with --judge-check (an evaluation writes results.jsonl)")
    if questions is None:
        raise fail("QUESTIONS is missing: fathom eval QUESTIONS.jsonl (or --judge-check)")
    if allow_different_questions and compare is None:
        raise fail("--allow-different-questions goes with --compare")
    lines = _read_lines(questions, "QUESTIONS")
    earlier = _earlier_results(compare) if compare is not None else None
    if earlier is not None and _are_results(lines):
        assert compare is not None
        if output is not None:
            raise fail("comparing two results files researches and writes nothing: drop -o")
        now = _results_of(lines, questions, "QUESTIONS")
        _compare_only(earlier, now, compare, allow_different_questions)
        return
    _evaluate_set(
        questions, lines, concurrency, output, compare, earlier, allow_different_questions
    )


def _evaluate_set(
    path: Path,
    lines: list[str],
    concurrency: int,
    output: Path | None,
    compare: Path | None,
    earlier: list[EvalResult] | None,
    any_questions: bool,
) -> None:
    from core.evaluation.compare import CompareError, comparable
    from core.evaluation.provenance import question_set_id
    from core.evaluation.questions import QuestionsError, parse_questions

    settings = core_settings()
    try:
        asked = parse_questions(
            lines,
            default_depth=settings.default_depth,
            max_depth=settings.max_depth,
            default_strategy=settings.strategy,
        )
    except QuestionsError as exc:
        raise fail(f"{path}: {exc}") from None
    if earlier is not None:
        try:
            comparable(earlier, question_set_id(asked), any_questions=any_questions)
        except CompareError as exc:
            raise fail(f"--compare {compare}: {exc}") from None
    folder = output or Path(f"eval-{datetime.now(UTC):%Y%m%d-%H%M%S}")
    _check_folder(folder)
    setup_logging(settings, quiet_below_warning=True)
    started = _Evaluation()
    results, provenance = run_command(_evaluate(settings, asked, concurrency, folder, started))

    from core.evaluation.compare import compare as compared
    from core.evaluation.compare import comparison_table, warnings
    from core.evaluation.table import results_table

    results_file = folder / RESULTS
    _write_in_order(results_file, results)
    table = results_table(results, provenance)
    if earlier is not None:
        comparison = compared(earlier, results, any_questions=any_questions)
        for line in warnings(comparison):
            stderr().print(f"warning: {line}", highlight=False, markup=False, soft_wrap=True)
        table += "\n" + comparison_table(comparison)
    (folder / TABLE).write_text(table, encoding="utf-8")
    sys.stdout.write(table)
    err = stderr()
    err.print(f"results written to {results_file} and {folder / TABLE}", highlight=False)
    kept = [r for r in results if r.kept_out is not None]
    if kept:
        err.print(
            f"{len(kept)} of {len(results)} questions were not measured whole (kept out of the "
            "quality totals): " + ", ".join(f"{r.id} ({r.kept_out})" for r in kept),
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILED)


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise fail(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise fail(f"{what} {path} is a folder, not a file") from None
    except UnicodeDecodeError:
        raise fail(f"{what} {path} is not UTF-8 text") from None
    except OSError as exc:
        raise fail(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def _are_results(lines: list[str]) -> bool:
    """Whether ``lines`` are an evaluation's results rather than questions (a result has a
    ``status``; a question line with one is refused)."""
    first = next((line for line in lines if line.strip()), "")
    try:
        data = json.loads(first)
    except ValueError:
        return False
    return isinstance(data, dict) and "status" in data


def _results_of(lines: list[str], path: Path, what: str) -> list[EvalResult]:
    """The results of an evaluation (exit 2 when they are not)."""
    from pydantic import ValidationError

    from core.evaluation.score import EvalResult

    results = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            results.append(EvalResult.model_validate_json(line))
        except ValidationError:
            raise fail(f"{what} {path}: line {number} is not a result of fathom eval") from None
    if not results:
        raise fail(f"{what} {path} holds no result")
    return results


def _earlier_results(path: Path) -> list[EvalResult]:
    return _results_of(_read_lines(path, "--compare"), path, "--compare")


def _compare_only(
    earlier: list[EvalResult], now: list[EvalResult], path: Path, any_questions: bool
) -> None:
    """Two evaluations' results compared, nothing researched."""
    from core.evaluation.compare import CompareError, compare, comparison_table, warnings

    try:
        comparison = compare(earlier, now, any_questions=any_questions)
    except CompareError as exc:
        raise fail(f"--compare {path}: {exc}") from None
    for line in warnings(comparison):
        stderr().print(f"warning: {line}", highlight=False, markup=False, soft_wrap=True)
    sys.stdout.write(comparison_table(comparison))


def _check_folder(folder: Path) -> None:
    """Refuse (exit 2) a folder that cannot take the results or already holds some (they
    would be mixed), without creating anything: a refused evaluation leaves nothing behind."""
    results = folder / RESULTS
    if folder.exists() and not folder.is_dir():
        raise fail(f"--output {folder} is a file, not a folder")
    if results.exists() and (not results.is_file() or results.stat().st_size > 0):
        raise fail(f"{results} already exists; name another folder with --output")
    existing = folder
    while not existing.exists():  # the nearest folder that exists must let us create in it
        existing = existing.parent
    if not existing.is_dir():
        raise fail(f"--output {folder} cannot be written: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise fail(f"--output {folder} cannot be written: {existing} is not writable")


def _made_folder(folder: Path) -> Path:
    """``folder``'s results file, created (exit 2 when it cannot be)."""
    results = folder / RESULTS
    try:
        folder.mkdir(parents=True, exist_ok=True)
        results.touch()
    except OSError as exc:
        raise fail(f"--output {folder} cannot be written: {exc.strerror or exc}") from None
    return results


def _write_in_order(path: Path, results: list[EvalResult]) -> None:
    """The results file again, in the questions' order (it was written as each finished)."""
    lines = "".join(json.dumps(r.model_dump(), ensure_ascii=False) + "\n" for r in results)
    draft = path.with_name(path.name + ".part")
    draft.write_text(lines, encoding="utf-8")
    draft.replace(path)


async def _evaluate(
    settings: Settings,
    questions: list[EvalQuestion],
    concurrency: int,
    folder: Path,
    started: _Evaluation,
) -> tuple[list[EvalResult], Provenance]:
    """The evaluation, its folder made once everything it needs is open (a settings problem
    found on the way leaves no folder)."""
    from core.config import ConfigError
    from core.evaluation.provenance import provenance_of
    from core.evaluation.runner import evaluate
    from core.evaluation.table import status_text
    from core.runtime import open_runtime

    err, done = stderr(), 0
    total = len(questions)
    place = {q.id: i for i, q in enumerate(questions, start=1)}

    def starting(question: EvalQuestion) -> None:
        err.print(
            f"[{place[question.id]}/{total}] {question.id}: started ({question.language}, "
            f"depth {question.depth}, {question.strategy})",
            highlight=False,
            markup=False,
        )

    def written(result: EvalResult) -> None:
        nonlocal done
        done += 1
        assert started.results is not None
        with started.results.open("a", encoding="utf-8") as out:
            out.write(json.dumps(result.model_dump(), ensure_ascii=False) + "\n")
        err.print(
            f"[{place[result.id]}/{total}] {result.id}: {status_text(result)} in "
            f"{result.seconds:.1f} s ({done} of {total} done)",
            highlight=False,
            markup=False,
        )

    try:
        async with open_runtime(settings) as runtime:
            provenance = provenance_of(
                questions,
                runtime.llm,
                claim_check=settings.verify_claims,
                search=settings.search,
                now=datetime.now(UTC),
            )
            started.results = _made_folder(folder)
            results = await evaluate(
                questions,
                runtime.research,
                runtime.llm.verifier,
                concurrency=concurrency,
                provenance=provenance,
                on_start=starting,
                on_result=written,
            )
            return results, provenance
    except ConfigError as exc:
        raise fail(str(exc)) from None


def _judge_check(path: Path | None, concurrency: int, as_json: bool) -> None:
    """The verifier's verdicts on a labelled set of pairs, and its agreement with them."""
    from core.build import version
    from core.evaluation.judge import agreement_json
    from core.evaluation.judge_table import agreement_table
    from core.evaluation.pairs import SHIPPED, PairsError, pairs_id, parse_pairs, shipped_lines
    from core.llm import public_endpoint

    settings = core_settings()
    name = str(path) if path is not None else f"the shipped set ({SHIPPED})"
    lines = _read_lines(path, "PAIRS") if path is not None else shipped_lines()
    try:
        pairs = parse_pairs(lines)
    except PairsError as exc:
        raise fail(f"{name}: {exc}") from None
    setup_logging(settings, quiet_below_warning=True)
    agreement, verifier = run_command(_judged(settings, pairs, concurrency))
    about = {
        "set": name,
        "set_id": pairs_id(pairs),
        "verifier_model": verifier[0],
        "verifier_endpoint": public_endpoint(verifier[1]),
        "fathom_version": version(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if as_json:
        sys.stdout.write(json.dumps({**about, **agreement_json(agreement)}, ensure_ascii=False))
        sys.stdout.write("\n")
    else:
        counts = ", ".join(
            f"{sum(1 for p in pairs if p.language == code)} {code}" for code in ("en", "zh")
        )
        header = [
            f"- Pairs: {len(pairs)} ({counts}) from {name}, set {about['set_id']}",
            f"- Verifier: {about['verifier_model']} at {about['verifier_endpoint']}",
            f"- Fathom: {about['fathom_version']}",
            f"- Date: {about['date']}",
        ]
        sys.stdout.write(agreement_table(agreement, header))
    unjudged = len(agreement.judged) - len(agreement.answered)
    if unjudged:
        stderr().print(
            f"{unjudged} of {len(pairs)} pairs got no verdict: the agreement counts them as "
            "not agreed",
            highlight=False,
        )
        raise typer.Exit(EXIT_FAILED)


async def _judged(
    settings: Settings, pairs: list[JudgePair], concurrency: int
) -> tuple[Agreement, tuple[str, str]]:
    """The agreement, and the verifier's model and endpoint."""
    from core.config import ConfigError
    from core.evaluation.judge import Agreement, JudgedPair, judge_pairs
    from core.llm import LLMClients
    from core.models import Usage

    err, done = stderr(), 0

    def judged(one: JudgedPair) -> None:
        nonlocal done
        done += 1
        verdict = one.verdict or "no verdict"
        err.print(
            f"[{done}/{len(pairs)}] {one.pair.id}: {verdict} (labelled {one.pair.label.value})",
            highlight=False,
            markup=False,
        )

    try:
        llm = LLMClients.from_settings(settings)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    verifier: ChatModel = llm.verifier
    try:
        found = await judge_pairs(
            pairs, verifier, Usage(), concurrency=concurrency, on_judged=judged
        )
    finally:
        await llm.aclose()
    return Agreement(found), (verifier.model, verifier.base_url)
