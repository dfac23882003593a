"""``fathom eval`` against the fake model and search servers, offline: the question set is
read and checked, every question researched, its report measured and the table written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.evaluation.questions import parse_questions
from storage.values import RunStatus
from tests.cli import fathom
from tests.fakes import FakeLLMServer, FakeSearchServer, Reply

BENCH_QUESTIONS = Path(__file__).parent.parent / "bench" / "questions" / "questions.jsonl"
#: A fact the fake writer's report states (it copies the pages' passages), and one it does not.
STATED = "measured adoption rose 11% in 2026"
NOT_STATED = "Heat pumps were invented in 1856"


def question_file(tmp_path: Path, *lines: dict[str, Any] | str) -> Path:
    path = tmp_path / "questions.jsonl"
    text = [
        line if isinstance(line, str) else json.dumps(line, ensure_ascii=False) for line in lines
    ]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


THREE = (
    {
        "id": "heat-pumps",
        "question": "heat pumps in cold climates",
        "expected": [STATED, NOT_STATED],
    },
    {"id": "zh-battery", "question": "固态电池的最新进展", "depth": 1},
    {"id": "graph", "question": "grid storage", "strategy": "graph", "depth": 2},
)


def results_of(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "results.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_eval_researches_a_question_set_and_writes_its_table(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """Three questions (English with expected facts, Chinese, graph), two at a time: one
    result line each in the file's order, the table on stdout and in results.md."""
    questions = question_file(tmp_path, *THREE)
    result = fathom(
        "eval", str(questions), "--concurrency", "2", "-o", "first", env=cli_env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    results = results_of(tmp_path / "first")
    assert [r["id"] for r in results] == ["heat-pumps", "zh-battery", "graph"]
    assert {r["status"] for r in results} == {RunStatus.SUCCEEDED.value}
    assert [r["language"] for r in results] == ["en", "zh", "en"]
    for r in results:  # the fake writer cites what its sources say: every claim holds
        assert r["claims"] > 0 and r["claims_supported"] == r["claims"], r
        assert r["sources_cited"] > 0 and r["sites"] == 1  # every fake page is on 127.0.0.1
        assert r["tokens"] > 0 and r["seconds"] > 0 and r["cost"] is None
        assert 0 <= r["checking_seconds"] <= r["seconds"]  # the lexical pass only: ~1 ms
    first = results[0]
    assert (first["expected"], first["expected_covered"]) == (2, 1)
    assert results[1]["expected_covered"] is None  # nothing was expected of it
    assert len(llm_server.fake.requests_for("facts")) == 1  # only the first expects facts

    table = result.stdout
    assert table == (tmp_path / "first" / "results.md").read_text(encoding="utf-8")
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| Question | Status | Claims supported |")
    assert rows[1].startswith("| heat-pumps | succeeded | ") and "| 1 / 2 |" in rows[1]
    assert "| Questions | 3 |" in table and "| Succeeded | 3 |" in table
    assert "| Claims supported | 100.0 % |" in table
    assert "| Expected facts covered | 50.0 % |" in table
    assert "| Cost (USD) | – |" in table  # no FATHOM_PRICES
    assert "[3/3]" in result.stderr


def test_eval_compares_its_totals_with_earlier_results(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """``--compare`` adds each total before, now and the change."""
    questions = question_file(tmp_path, THREE[0])
    assert fathom("eval", str(questions), "-o", "now", env=cli_env, cwd=tmp_path).returncode == 0
    (now,) = results_of(tmp_path / "now")
    older = {**now, "claims_supported": 0, "claims_fixed": now["claims"], "expected_covered": 0}
    (tmp_path / "old.jsonl").write_text(json.dumps(older) + "\n", encoding="utf-8")
    result = fathom(
        "eval", str(questions), "-o", "again", "--compare", "old.jsonl", env=cli_env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "## Compared with the earlier results" in result.stdout
    assert "| Claims supported | 0.0 % | 100.0 % | +100.0 % |" in result.stdout
    assert "| Claims fixed | 100.0 % | 0.0 % | −100.0 % |" in result.stdout
    assert "| Expected facts covered | 0.0 % | 50.0 % | +50.0 % |" in result.stdout
    assert "| Questions | 1 | 1 | +0 |" in result.stdout


def test_a_bad_question_set_is_refused_by_line_before_anything_runs(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    cases = [
        ((THREE[0], "{not json"), "line 2: not JSON"),
        ((THREE[0], THREE[0]), "line 2: the id 'heat-pumps' is used twice"),
        (({"id": "x", "question": "a", "depth": 99},), "line 1: depth must be from 1 to 10"),
        (({"id": "x", "question": " "},), "line 1: The topic is empty"),
        (({"id": "x", "question": "a", "strategy": "magic"},), "line 1: Unknown strategy"),
        (({"id": "x", "question": "a", "expect": ["typo"]},), "line 1: expect: Extra inputs"),
        (({"question": "a"},), "line 1: id: Field required"),
        (("",), "there is no question in it"),
    ]
    for lines, said in cases:
        questions = question_file(tmp_path, *lines)
        result = fathom("eval", str(questions), "-o", "out", env=cli_env, cwd=tmp_path)
        assert result.returncode == 2, (lines, result.stderr)
        assert said in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert not (tmp_path / "out").exists()
    missing = fathom("eval", "nowhere.jsonl", env=cli_env, cwd=tmp_path)
    assert missing.returncode == 2 and "QUESTIONS nowhere.jsonl does not exist" in missing.stderr
    assert llm_server.fake.requests == []  # nothing was researched


def test_eval_never_mixes_its_results_with_an_earlier_evaluation_s(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    questions = question_file(tmp_path, THREE[1])
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "results.jsonl").write_text("{}\n", encoding="utf-8")
    result = fathom("eval", str(questions), "-o", "done", env=cli_env, cwd=tmp_path)
    assert result.returncode == 2 and "done/results.jsonl already exists" in result.stderr
    assert (tmp_path / "done" / "results.jsonl").read_text(encoding="utf-8") == "{}\n"


def test_a_question_that_fails_is_a_result_and_the_exit_code_says_so(
    cli_env: dict[str, str],
    tmp_path: Path,
    search_server: FakeSearchServer,
    llm_server: FakeLLMServer,
) -> None:
    """No search finds anything: the research fails, its line says why, the others' are
    measured, and eval exits 1. A verifier answering garbage about the facts leaves them
    not checked."""
    search_server.fake.empty = True
    garbage = Reply("Both facts are in there, trust me.")
    llm_server.fake.script("facts", garbage, garbage)
    questions = question_file(tmp_path, THREE[0])
    result = fathom("eval", str(questions), "-o", "out", env=cli_env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    (failed,) = results_of(tmp_path / "out")
    assert failed["status"] == "failed" and "search" in (failed["error"] or "").lower()
    assert failed["expected_covered"] is None and failed["claims"] == 0
    assert "| heat-pumps | failed: " in result.stdout


def test_the_shipped_question_set_is_valid() -> None:
    """bench/questions: 20 questions, English and Chinese, some with expected facts."""
    lines = BENCH_QUESTIONS.read_text(encoding="utf-8").splitlines()
    questions = parse_questions(lines, default_depth=3, max_depth=10, default_strategy="iterative")
    assert len(questions) == 20
    assert {q.language for q in questions} == {"en", "zh"}
    assert {q.strategy for q in questions} == {"iterative", "graph"}
    assert sum(1 for q in questions if q.expected) >= 10
