"""``fathom eval QUESTIONS.jsonl``: research a question set and measure the reports."""

from __future__ import annotations

import json
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
    from core.config import Settings
    from core.evaluation.questions import EvalQuestion
    from core.evaluation.score import EvalResult

RESULTS = "results.jsonl"
TABLE = "results.md"


@dataclass
class _Evaluation(StartedRun):
    """What an interrupted evaluation says: where the results so far are."""

    results: Path | None = None

    def interrupted_line(self) -> str:
        return f"interrupted; the results so far are in {self.results}"


@app.command("eval")
def evaluate(
    questions: Annotated[
        Path,
        typer.Argument(
            help='A JSONL question set: {"id", "question", "language"?, "depth"?, "strategy"?, '
            '"sources"?, "expected"?: [facts]} per line (bench/questions/ has one).'
        ),
    ],
    concurrency: Annotated[
        int, typer.Option(min=1, max=10, help="Questions researched at once.")
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
        typer.Option(help=f"An earlier {RESULTS}: the table shows each total's change."),
    ] = None,
) -> None:
    """Research every question of QUESTIONS.jsonl and measure the reports: claims supported,
    sources and sites cited, expected facts covered, tokens, cost, seconds."""
    from core.evaluation.questions import QuestionsError, parse_questions

    settings = core_settings()
    lines = _read_lines(questions, "QUESTIONS")
    try:
        asked = parse_questions(
            lines,
            default_depth=settings.default_depth,
            max_depth=settings.max_depth,
            default_strategy=settings.strategy,
        )
    except QuestionsError as exc:
        raise fail(f"{questions}: {exc}") from None
    earlier = _earlier_results(compare) if compare is not None else None
    folder = output or Path(f"eval-{datetime.now(UTC):%Y%m%d-%H%M%S}")
    results_file = _results_file(folder)
    setup_logging(settings, quiet_below_warning=True)
    started = _Evaluation(results=results_file)
    results = run_command(_evaluate(settings, asked, concurrency, results_file), started)

    from core.evaluation.table import comparison_table, results_table

    _write_in_order(results_file, results)
    table = results_table(results)
    if earlier is not None:
        table += "\n" + comparison_table(earlier, results)
    (folder / TABLE).write_text(table, encoding="utf-8")
    sys.stdout.write(table)
    stderr().print(f"results written to {results_file} and {folder / TABLE}", highlight=False)
    if any(r.status != "succeeded" for r in results):
        raise typer.Exit(EXIT_FAILED)


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise fail(f"{what} {path} does not exist") from None
    except UnicodeDecodeError:
        raise fail(f"{what} {path} is not UTF-8 text") from None
    except OSError as exc:
        raise fail(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def _earlier_results(path: Path) -> list[EvalResult]:
    """The results of an earlier evaluation (exit 2 when it is not one)."""
    from pydantic import ValidationError

    from core.evaluation.score import EvalResult

    results = []
    for number, line in enumerate(_read_lines(path, "--compare"), start=1):
        if not line.strip():
            continue
        try:
            results.append(EvalResult.model_validate_json(line))
        except ValidationError:
            raise fail(f"--compare {path}: line {number} is not a result of fathom eval") from None
    return results


def _results_file(folder: Path) -> Path:
    """``folder``'s results file, made ready (exit 2 when the folder cannot hold it, or
    already holds results: they would be mixed)."""
    results = folder / RESULTS
    if results.exists():
        raise fail(f"{results} already exists; name another folder with --output")
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
    settings: Settings, questions: list[EvalQuestion], concurrency: int, results: Path
) -> list[EvalResult]:
    from core.config import ConfigError
    from core.evaluation.runner import evaluate
    from core.runtime import open_runtime

    err, done = stderr(), 0

    def written(result: EvalResult) -> None:
        nonlocal done
        done += 1
        with results.open("a", encoding="utf-8") as out:
            out.write(json.dumps(result.model_dump(), ensure_ascii=False) + "\n")
        err.print(
            f"[{done}/{len(questions)}] {result.id}: {result.status} in {result.seconds:.1f} s",
            highlight=False,
            markup=False,
        )

    try:
        async with open_runtime(settings) as runtime:
            return await evaluate(
                questions,
                runtime.research,
                runtime.llm.verifier,
                concurrency=concurrency,
                on_result=written,
            )
    except ConfigError as exc:
        raise fail(str(exc)) from None
