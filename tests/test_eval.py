"""``fathom eval`` against the fake model and search servers, offline: the question set is
read and checked, every question researched, its report measured and the table written with
what made it; two evaluations compared only when they are of the same question set, per
question and with intervals; degraded runs kept out of the quality totals; the offline
``dev.py eval``; and ``--judge-check``, the verifier measured on labelled pairs (issue 52,
items 8 and 9)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from core.claims.verifier import Verdict
from core.evaluation.pairs import Label, parse_pairs, shipped_lines
from core.evaluation.questions import parse_questions
from core.evaluation.score import EvalResult
from core.evaluation.table import results_table
from core.values import RunStatus
from tests.cli import fathom
from tests.conftest import FAKE_API_KEY
from tests.fakes import Fail, FakeLLMServer, FakeSearchServer, Reply
from tests.test_citation_forms import TOPIC as CITED_TOPIC
from tests.test_claim_numbers import UNCITED

ROOT = Path(__file__).resolve().parent.parent
BENCH_QUESTIONS = ROOT / "bench" / "questions" / "questions.jsonl"
#: A fact the fake writer's report states (it copies the pages' passages), and one it does not.
STATED = "measured adoption rose 11% in 2026"
NOT_STATED = "Heat pumps were invented in 1856"
#: A 503 as OpenAI's API sends it when overloaded ("503 - Slow Down" / "The engine is
#: currently overloaded, please try again later", platform.openai.com/docs/guides/error-codes),
#: with a short Retry-After so that the SDK's one retry does not wait (tests/test_engine.py).
OVERLOADED = Fail(
    503,
    {"error": {"message": "The engine is currently overloaded, please try again later.",
               "type": "server_error", "param": None, "code": None}},
    {"retry-after-ms": "1"},
)  # fmt: skip
#: HTTP requests of one failed model call (cli_env: FATHOM_LLM_MAX_RETRIES=1).
ATTEMPTS = 2


def question_file(tmp_path: Path, *lines: dict[str, Any] | str, name: str = "q.jsonl") -> Path:
    path = tmp_path / name
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


def write_results(path: Path, results: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in results), encoding="utf-8")
    return path


def section(text: str, heading: str) -> str:
    """The part of ``text`` from ``heading`` to the next heading of its level or above."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1 :]
    ends = [
        m.start() for m in re.finditer(r"^(#+) ", rest, re.MULTILINE) if len(m[1]) <= len(level)
    ]
    return rest[: ends[0]] if ends else rest


def row(text: str, first_cell: str) -> list[str]:
    """The cells of the table row of ``text`` that starts with ``first_cell``."""
    line = next(x for x in text.splitlines() if x.startswith(f"| {first_cell} |"))
    return [c.strip() for c in line.strip("|").split(" | ")]


# --- an evaluation, its provenance and its table ------------------------------------------------


def test_eval_researches_a_question_set_and_writes_its_table(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """Three questions (English with expected facts, Chinese, graph), two at a time: one
    result line each in the file's order, the table on stdout and in results.md, its rows
    grouped by the set's languages and its totals per language; stderr says when each
    question starts and ends."""
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
        assert not r["check_partial"] and not r["writer_fallback"]
    first = results[0]
    assert (first["expected"], first["expected_covered"]) == (2, 1)
    assert results[1]["expected_covered"] is None  # nothing was expected of it
    assert len(llm_server.fake.requests_for("facts")) == 1  # only the first expects facts

    table = result.stdout
    assert table == (tmp_path / "first" / "results.md").read_text(encoding="utf-8")
    english, chinese = section(table, "### English (en)"), section(table, "### Chinese (zh)")
    assert "| heat-pumps |" in english and "| graph |" in english and "zh-battery" not in english
    assert "| zh-battery |" in chinese and "heat-pumps" not in chinese
    assert row(english, "Question")[:3] == ["Question", "Status", "Claims supported"]
    assert row(english, "heat-pumps")[1] == "succeeded" and row(english, "heat-pumps")[6] == "1 / 2"
    assert row(english, "heat-pumps")[4] == str(first["uncited_claims"]) == "0"
    totals = section(table, "## Totals")
    assert row(totals, "Measure") == ["Measure", "All", "en", "zh"]
    assert row(totals, "Questions") == ["Questions", "3", "2", "1"]
    assert row(totals, "Measured") == ["Measured", "3", "2", "1"]
    assert row(totals, "Claims supported")[1:] == ["100.0 %"] * 3
    assert row(totals, "Expected facts covered") == [
        "Expected facts covered",
        "50.0 %",
        "50.0 %",
        "–",
    ]
    assert row(totals, "Cost (USD)")[1] == "–"  # no FATHOM_PRICES
    assert "[" not in totals.split("\n\n")[1]  # 3 questions: no interval

    err = result.stderr
    for number, (q, shown) in enumerate(
        zip(THREE, ("en, depth 3", "zh, depth 1", "en, depth 2"), strict=True), 1
    ):
        began = err.index(f"[{number}/3] {q['id']}: started ({shown}")
        ended = err.index(f"[{number}/3] {q['id']}: succeeded in ")
        assert began < ended
    assert "(3 of 3 done)" in err


def test_each_result_and_the_header_say_what_made_them(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """Planner, writer and verifier models and endpoints (a judge of another family behind
    another endpoint: FATHOM_VERIFIER_MODEL, FATHOM_VERIFIER_BASE_URL, FATHOM_VERIFIER_API_KEY),
    the search provider, the release, the date and the question set's id: in every line of
    results.jsonl and in the table's header; no key anywhere. The judge's endpoint gets every
    verifier and facts request, the planner's none."""
    judge_key = "judge-secret-key-1234"
    with FakeLLMServer() as judge:
        env = {
            **cli_env,
            "FATHOM_PLANNER_MODEL": "planner-x",
            "FATHOM_WRITER_MODEL": "writer-y",
            "FATHOM_VERIFIER_MODEL": "judge-z",
            "FATHOM_VERIFIER_BASE_URL": judge.base_url,
            "FATHOM_VERIFIER_API_KEY": judge_key,
        }
        llm_server.fake.citing = "miscited"  # claims the lexical pass leaves to the verifier
        questions = question_file(tmp_path, THREE[0])
        result = fathom("eval", str(questions), "-o", "out", env=env, cwd=tmp_path)
        judged = {r.role for r in judge.fake.requests}
    assert result.returncode == 0, result.stderr
    (line,) = results_of(tmp_path / "out")
    made = line["provenance"]
    assert made["planner_model"] == "planner-x" and made["writer_model"] == "writer-y"
    assert made["verifier_model"] == "judge-z"
    assert made["planner_endpoint"] == made["writer_endpoint"] == llm_server.base_url
    assert made["verifier_endpoint"] == judge.base_url and made["claim_check"] is True
    assert made["search"] == "searxng" and made["questions"] == 1
    assert made["fathom_version"] == fathom("--version", env=env, cwd=tmp_path).stdout.split()[1]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", made["date"])
    assert re.fullmatch(r"[0-9a-f]{12}", made["question_set"])
    assert judged == {"verifier", "facts"}
    assert not {"verifier", "facts"} & {r.role for r in llm_server.fake.requests}
    header = result.stdout.split("## Results")[0]
    assert f"- Question set: {made['question_set']} (1 question: 1 en)" in header
    assert f"- Planner: planner-x at {llm_server.base_url}" in header
    assert f"- Writer: writer-y at {llm_server.base_url}" in header
    assert f"- Verifier: judge-z at {judge.base_url} (claim check on)" in header
    assert "- Search: searxng" in header and f"- Fathom: {made['fathom_version']}" in header
    assert f"- Date: {made['date']}" in header
    for text in (result.stdout, (tmp_path / "out" / "results.jsonl").read_text()):
        assert judge_key not in text and FAKE_API_KEY not in text


def test_the_question_set_id_is_what_was_asked(cli_env: dict[str, str], tmp_path: Path) -> None:
    """The same questions in another file (blank lines, key order) are the same set; another
    default depth or one changed word is another."""
    one = THREE[1]
    first = question_file(tmp_path, one, name="a.jsonl")
    same = question_file(
        tmp_path, "", json.dumps(dict(reversed(one.items())), ensure_ascii=False), name="b.jsonl"
    )
    other = question_file(tmp_path, {**one, "question": "固态电池的最新进展？"}, name="c.jsonl")
    ids = []
    for path, extra in (
        (first, {}),
        (same, {}),
        (other, {}),
        (first, {"FATHOM_DEFAULT_DEPTH": "2"}),
    ):
        folder = f"out-{len(ids)}"
        done = fathom("eval", str(path), "-o", folder, env={**cli_env, **extra}, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        ids.append(results_of(tmp_path / folder)[0]["provenance"]["question_set"])
    assert ids[0] == ids[1] and len({ids[0], ids[2]}) == 2
    assert ids[3] == ids[0]  # its depth is given: the default does not enter it
    no_depth = {k: v for k, v in THREE[0].items() if k != "expected"}
    for extra in ({}, {"FATHOM_DEFAULT_DEPTH": "1"}):
        path = question_file(tmp_path, no_depth, name="d.jsonl")
        folder = f"d-{len(extra)}"
        assert (
            fathom(
                "eval", str(path), "-o", folder, env={**cli_env, **extra}, cwd=tmp_path
            ).returncode
            == 0
        )
    assert (
        results_of(tmp_path / "d-0")[0]["provenance"]["question_set"]
        != results_of(tmp_path / "d-1")[0]["provenance"]["question_set"]
    )


# --- comparing two evaluations ------------------------------------------------------------------


def test_compare_shows_each_total_and_each_question_s_change(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """``--compare`` of an evaluation of the same set: both sides' provenance, each total
    before, now and its change (shares in percentage points), and a row per question with its
    own change; with fewer than 10 questions no interval."""
    questions = question_file(tmp_path, THREE[0], THREE[1])
    assert fathom("eval", str(questions), "-o", "now", env=cli_env, cwd=tmp_path).returncode == 0
    now = results_of(tmp_path / "now")
    older = [
        {**now[0], "claims_supported": 0, "claims_fixed": now[0]["claims"], "expected_covered": 0},
        {**now[1], "sources_cited": now[1]["sources_cited"] + 2},
    ]
    write_results(tmp_path / "old.jsonl", older)
    result = fathom(
        "eval", str(questions), "-o", "again", "--compare", "old.jsonl", env=cli_env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    compared = section(result.stdout, "## Compared with the earlier results")
    assert f"- Before: {now[0]['provenance']['date']}, question set" in compared
    assert "- Paired: 2 questions; measured in both: 2" in compared
    claims = now[0]["claims"]
    supported = 100 * (claims + now[1]["claims"]) / (claims + now[1]["claims"])
    before = 100 * now[1]["claims"] / (claims + now[1]["claims"])
    assert row(compared, "Claims supported") == [
        "Claims supported",
        f"{before:.1f} %",
        f"{supported:.1f} %",
        f"+{supported - before:.1f} pp",
        "–",
    ]
    assert row(compared, "Expected facts covered")[1:4] == ["0.0 %", "50.0 %", "+50.0 pp"]
    assert row(compared, "Questions")[1:4] == ["2", "2", "+0"]
    per_question = section(result.stdout, "### Per question")
    assert row(per_question, "heat-pumps")[1:6] == [
        "succeeded",
        "succeeded",
        f"0/{claims} → {claims}/{claims} (+100.0 pp)",
        "0 → 0 (+0)",
        "0/2 → 1/2 (+1)",
    ]
    cited = now[1]["sources_cited"]
    assert row(per_question, "zh-battery")[6] == f"{cited + 2} → {cited} (−2)"
    assert "#### English (en)" in per_question and "#### Chinese (zh)" in per_question
    assert "Interval of the change:" not in result.stdout
    assert "warning" not in result.stderr  # the same models, endpoints, provider, release


def test_compare_refuses_another_question_set_before_anything_runs(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """Results of another question set, or of a release that did not record one, are refused
    with one line (exit 2) before anything is researched or any folder made; the flag that
    overrides it compares the questions both hold and says the sets are not known to match."""
    first = question_file(tmp_path, THREE[0], THREE[1], name="first.jsonl")
    assert fathom("eval", str(first), "-o", "old", env=cli_env, cwd=tmp_path).returncode == 0
    old = results_of(tmp_path / "old")
    llm_server.fake.reset()
    second = question_file(tmp_path, THREE[1], THREE[2], name="second.jsonl")
    refused = fathom(
        "eval",
        str(second),
        "-o",
        "new",
        "--compare",
        "old/results.jsonl",
        env=cli_env,
        cwd=tmp_path,
    )
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "another question set" in line and old[0]["provenance"]["question_set"] in line
    assert "--allow-different-questions" in line
    assert llm_server.fake.requests == [] and not (tmp_path / "new").exists()

    unrecorded = [{k: v for k, v in r.items() if k != "provenance"} for r in old]
    write_results(tmp_path / "unrecorded.jsonl", unrecorded)
    refused = fathom(
        "eval", str(first), "-o", "new", "--compare", "unrecorded.jsonl", env=cli_env, cwd=tmp_path
    )
    assert refused.returncode == 2 and "do not say which question set" in refused.stderr
    assert not (tmp_path / "new").exists()

    allowed = fathom(
        "eval", str(second), "-o", "new", "--compare", "old/results.jsonl",
        "--allow-different-questions", env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert "warning: the question sets are not known to be the same: 1 questions" in allowed.stderr
    per_question = section(allowed.stdout, "### Per question")
    assert "| zh-battery |" in per_question and "| heat-pumps |" not in per_question
    assert "Only before: heat-pumps" in allowed.stdout and "Only now: graph" in allowed.stdout


def test_compare_warns_of_each_difference_that_changes_what_the_numbers_mean(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Another judge, another writer, another release: one warning line each (stderr) and in
    the table; the numbers are still compared."""
    questions = question_file(tmp_path, THREE[1])
    assert fathom("eval", str(questions), "-o", "a", env=cli_env, cwd=tmp_path).returncode == 0
    (before,) = results_of(tmp_path / "a")
    made = before["provenance"]
    older = {
        **made,
        "verifier_model": "judge-1",
        "writer_model": "writer-1",
        "fathom_version": "0.0.9",
    }
    write_results(tmp_path / "old.jsonl", [{**before, "provenance": older}])
    result = fathom(
        "eval", str(questions), "-o", "b", "--compare", "old.jsonl", env=cli_env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warned == [
        f"warning: the verifier model differs (judge-1 → {made['verifier_model']}): claims "
        "supported and expected facts were judged by another model",
        f"warning: the writer model differs (writer-1 → {made['writer_model']}): the reports "
        "were written by another model",
        f"warning: the Fathom release differs (0.0.9 → {made['fathom_version']}): the research "
        "and the claim check themselves may have changed",
    ]
    for line in warned:
        assert f"- Warning: {line.removeprefix('warning: ')}" in result.stdout


def _ten_results(now: list[dict[str, Any]], lowered: int) -> list[dict[str, Any]]:
    """``now`` with one claim fewer supported in its first ``lowered`` results, and each
    report slower by its own amount (a spread of changes whose interval moves with the
    resamples drawn)."""
    return [
        {
            **r,
            "claims_supported": r["claims_supported"] - (1 if i < lowered else 0),
            "seconds": r["seconds"] + 0.37 * i * i,
        }
        for i, r in enumerate(now)
    ]


def test_from_ten_questions_each_total_has_a_reproducible_bootstrap_interval(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Ten questions researched; an earlier evaluation where half of them had one claim fewer
    supported. Compared (the two results files, nothing researched again): each share and
    mean has a 95 % interval of its paired change, the same on every run (seeded), around the
    change, above zero for this shift; and the results table's totals have theirs."""
    ten = [{"id": f"q{i}", "question": f"battery chemistry {i}", "depth": 1} for i in range(10)]
    questions = question_file(tmp_path, *ten)
    made = fathom(
        "eval", str(questions), "-o", "now", "--concurrency", "4", env=cli_env, cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    totals = section(made.stdout, "## Totals")
    assert re.fullmatch(r"100\.0 % \[100\.0 % – 100\.0 %\]", row(totals, "Claims supported")[1])
    assert re.fullmatch(r"[\d.]+ \[[\d.]+ – [\d.]+\]", row(totals, "Seconds per report")[1])
    assert (
        "Intervals in brackets: 95 % percentile bootstrap over the questions (2,000" in made.stdout
    )
    now = results_of(tmp_path / "now")
    write_results(tmp_path / "before.jsonl", _ten_results(now, 5))

    shown = [
        fathom("eval", "now/results.jsonl", "--compare", "before.jsonl", env=cli_env, cwd=tmp_path)
        for _ in range(2)
    ]
    assert shown[0].returncode == 0, shown[0].stderr
    assert shown[0].stdout == shown[1].stdout  # seeded: the same intervals every time
    written = fathom(
        "eval",
        "now/results.jsonl",
        "--compare",
        "before.jsonl",
        "-o",
        "x",
        env=cli_env,
        cwd=tmp_path,
    )
    assert written.returncode == 2 and "drop -o" in written.stderr
    slower = row(shown[0].stdout, "Seconds per report")[4]
    assert re.fullmatch(r"−[\d.]+ – −[\d.]+", slower), slower
    assert list(tmp_path.glob("eval-*")) == []  # compared only: no folder, nothing researched
    claims = sum(r["claims"] for r in now)
    change = 100 * 5 / claims
    cells = row(shown[0].stdout, "Claims supported")
    assert cells[3] == f"+{change:.1f} pp"
    low, high = (
        float(x) for x in re.fullmatch(r"\+([\d.]+) pp – \+([\d.]+) pp", cells[4]).groups()
    )  # type: ignore[union-attr]
    assert 0 < low < change < high
    assert "Interval of the change: 95 % percentile bootstrap over the questions" in shown[0].stdout
    assert row(shown[0].stdout, "Questions")[4] == "–"  # a count has none

    write_results(tmp_path / "nine.jsonl", _ten_results(now, 5)[:9])
    nine = fathom(
        "eval", "now/results.jsonl", "--compare", "nine.jsonl", "--allow-different-questions",
        env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    assert nine.returncode == 0, nine.stderr
    assert row(nine.stdout, "Claims supported")[4] == "–"  # 9 pairs: no interval


# --- degraded runs ------------------------------------------------------------------------------


def test_a_verifier_outage_is_a_question_not_measured_never_a_quality_drop(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """A writer that miscites (so claims reach the verifier), two questions one at a time. With
    the verifier answering 503 for the first question's check, that question's check is
    partial: its line says so and how many claims were not checked, it is kept out of the
    quality totals, eval exits 1; compared with an evaluation without the outage, the claims
    supported and the claims fixed did not move (over both questions the outage's claims,
    never judged, would read as fewer fixed)."""
    llm_server.fake.citing = "miscited"
    questions = question_file(
        tmp_path, THREE[1], {"id": "en", "question": "grid storage", "depth": 1}
    )
    steady = fathom(
        "eval", str(questions), "-o", "steady", "--concurrency", "1", env=cli_env, cwd=tmp_path
    )
    assert steady.returncode == 0, steady.stderr
    fixed = [r["claims_fixed"] for r in results_of(tmp_path / "steady")]
    assert all(fixed), fixed  # the verifier's verdicts fix claims: an outage would fix none

    llm_server.fake.script("verifier", *[OVERLOADED] * ATTEMPTS)
    outage = fathom(
        "eval", str(questions), "-o", "outage", "--concurrency", "1",
        "--compare", "steady/results.jsonl", env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    assert outage.returncode == 1, outage.stderr
    partial, whole = results_of(tmp_path / "outage")
    assert partial["check_partial"] and partial["claims_not_checked"] > 0
    assert partial["status"] == "succeeded" and not whole["check_partial"]
    table = outage.stdout
    assert partial["check_reasons"] == ["verifier_failed"]
    assert row(table, "zh-battery")[1] == (
        f"succeeded (check partial: {partial['claims_not_checked']} not checked: the verifier "
        "model failed)"
    )
    totals = section(table, "## Totals")
    assert row(totals, "Measured")[1] == "1" and row(totals, "Check partial")[1] == "1"
    assert row(totals, "Claims checked")[1] == str(whole["claims"])
    share = 100 * whole["claims_supported"] / whole["claims"]
    assert row(totals, "Claims supported")[1] == f"{share:.1f} %"
    assert "kept out: zh-battery (check partial)" in table
    compared = section(table, "## Compared with the earlier results")
    assert row(compared, "Claims supported")[3] == "+0.0 pp"
    assert row(compared, "Claims fixed")[3] == "+0.0 pp"  # not "fewer fixes needed"
    assert row(compared, "Measured")[1:4] == ["2", "1", "−1"]
    assert row(section(table, "### Per question"), "zh-battery")[3] == "kept out"
    assert "1 of 2 questions were not measured whole" in outage.stderr


def test_a_report_whose_writer_fell_back_is_counted_as_such(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """The writer answers 500 ("The server had an error while processing your request",
    OpenAI's error codes guide) on both attempts: the report is the findings listed. The
    run succeeded, but its result says the writer fell back, it is kept out of the quality
    totals, and eval exits 1."""
    failure = Fail(500, None, {"retry-after-ms": "1"})
    llm_server.fake.script("writer", *[failure] * ATTEMPTS)
    questions = question_file(tmp_path, THREE[1])
    result = fathom("eval", str(questions), "-o", "out", env=cli_env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    (fell,) = results_of(tmp_path / "out")
    assert fell["status"] == "succeeded" and fell["writer_fallback"] is True
    assert row(result.stdout, "zh-battery")[1] == "succeeded (writer fell back)"
    totals = section(result.stdout, "## Totals")
    assert row(totals, "Writer fell back")[1] == "1" and row(totals, "Measured")[1] == "0"
    assert row(totals, "Claims supported")[1] == "–"
    assert "zh-battery (writer fell back)" in result.stderr


def test_a_question_that_fails_is_a_result_and_the_exit_code_says_so(
    cli_env: dict[str, str],
    tmp_path: Path,
    search_server: FakeSearchServer,
    llm_server: FakeLLMServer,
) -> None:
    """No search finds anything: the research fails, its line says why, and eval exits 1;
    it counts as failed, not as a report with no claims. A verifier answering garbage about
    the facts leaves them not checked."""
    search_server.fake.empty = True
    garbage = Reply("Both facts are in there, trust me.")
    llm_server.fake.script("facts", garbage, garbage)
    questions = question_file(tmp_path, THREE[0])
    result = fathom("eval", str(questions), "-o", "out", env=cli_env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    (failed,) = results_of(tmp_path / "out")
    assert failed["status"] == "failed" and "search" in (failed["error"] or "").lower()
    assert failed["expected_covered"] is None and failed["claims"] == 0
    assert failed["provenance"]["questions"] == 1
    assert "| heat-pumps | failed: " in result.stdout
    totals = section(result.stdout, "## Totals")
    assert row(totals, "Failed")[1] == "1" and row(totals, "Measured")[1] == "0"
    assert row(totals, "Sources cited per report")[1] == "–"


def test_a_writer_that_cites_less_does_not_score_better(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """The same question written twice: by the fake writer, which cites every line it copies,
    then by a writer that cites one sentence and states four figures without a citation
    (tests/test_claim_numbers.py's UNCITED, in the structure the writer is asked for). Both
    have every cited claim supported; the second's uncited claims are counted and, counted
    as not supported, its share falls."""
    questions = question_file(tmp_path, {"id": "hp", "question": CITED_TOPIC, "depth": 1})
    cited = fathom("eval", str(questions), "-o", "cited", env=cli_env, cwd=tmp_path)
    assert cited.returncode == 0, cited.stderr
    llm_server.fake.script("writer", Reply(UNCITED))
    less = fathom(
        "eval", str(questions), "-o", "less", "--compare", "cited/results.jsonl",
        env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    assert less.returncode == 0, less.stderr
    (before,), (now,) = results_of(tmp_path / "cited"), results_of(tmp_path / "less")
    assert before["uncited_claims"] == 0 and now["uncited_claims"] == 4
    assert before["claims_supported"] == before["claims"] and now["claims_supported"] == 1
    totals = section(less.stdout, "## Totals")
    assert row(totals, "Claims supported")[1] == "100.0 %"
    assert row(totals, "Uncited claims per report")[1] == "4.0"
    assert row(totals, "Supported of all claims, uncited too")[1] == "20.0 %"
    compared = section(less.stdout, "## Compared with the earlier results")
    assert row(compared, "Claims supported")[3] == "+0.0 pp"
    assert row(compared, "Supported of all claims, uncited too")[1:4] == [
        "100.0 %", "20.0 %", "−80.0 pp"
    ]  # fmt: skip
    assert row(section(less.stdout, "### Per question"), "hp")[4] == "0 → 4 (+4)"


def test_only_a_partial_check_for_the_verifier_s_sake_keeps_a_question_out() -> None:
    """Why claims were not checked (core.claims.verifier.Unchecked, as a run stores them): the
    verifier failed, answered unusably, or was not given (or a release that recorded no
    reason) keeps the question out of the quality totals; claims whose only sources speak to
    AI models are the report's own evidence: the question is measured, those claims count as
    not supported, and its row says why they were not checked."""
    base = {"id": "q", "question": "q", "language": "en", "status": "succeeded", "claims": 4,
            "claims_supported": 2, "claims_not_checked": 2, "check_partial": True}  # fmt: skip
    for reasons in ([], ["verifier_failed"], ["answer_unusable"], ["no_verifier"],
                    ["source_addresses_model", "verifier_failed"]):  # fmt: skip
        assert EvalResult(**base, check_reasons=reasons).kept_out == "check partial", reasons
    own = EvalResult(**base, check_reasons=["source_addresses_model"])
    assert own.kept_out is None
    table = results_table([own], None)
    assert row(table, "q")[1] == (
        "succeeded (2 not checked: their only sources hold text addressed to AI models)"
    )
    assert row(section(table, "## Totals"), "Claims supported")[1] == "50.0 %"
    out = EvalResult(**base, check_reasons=["verifier_failed"])
    assert row(results_table([out], None), "q")[1] == (
        "succeeded (check partial: 2 not checked: the verifier model failed)"
    )


# --- refused before it started ------------------------------------------------------------------


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
    assert list(tmp_path.glob("eval-*")) == []


def test_a_run_refused_before_it_started_leaves_no_folder_and_its_rerun_works(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """A settings problem found when the runtime opens (no key; a search provider without its
    key), an output folder under a file, an output that is a file: exit 2, one line, no folder
    (nested ones neither) and nothing researched; the same command with the problem fixed
    then runs into the same folder."""
    questions = question_file(tmp_path, THREE[1])
    no_key = {k: v for k, v in cli_env.items() if k != "OPENAI_API_KEY"}
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    cases = [
        (no_key, "deep/out", "OPENAI_API_KEY is not set"),
        ({**cli_env, "FATHOM_SEARCH": "tavily"}, "deep/out", "TAVILY_API_KEY is not set"),
        (cli_env, "afile/out", "cannot be written: afile is not a folder"),
        (cli_env, "afile", "--output afile is a file, not a folder"),
    ]
    for env, folder, said in cases:
        result = fathom("eval", str(questions), "-o", folder, env=env, cwd=tmp_path)
        assert result.returncode == 2, (folder, result.stderr)
        assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not (tmp_path / "deep").exists()
    assert llm_server.fake.requests == []
    assert (tmp_path / "afile").read_text(encoding="utf-8") == "x"
    again = fathom("eval", str(questions), "-o", "deep/out", env=cli_env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert [r["id"] for r in results_of(tmp_path / "deep" / "out")] == ["zh-battery"]


def test_eval_never_mixes_its_results_with_an_earlier_evaluation_s(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A folder whose results file holds results is refused; one whose results file is empty
    (an evaluation interrupted before its first result) is used."""
    questions = question_file(tmp_path, THREE[1])
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "results.jsonl").write_text("{}\n", encoding="utf-8")
    result = fathom("eval", str(questions), "-o", "done", env=cli_env, cwd=tmp_path)
    assert result.returncode == 2 and "done/results.jsonl already exists" in result.stderr
    assert (tmp_path / "done" / "results.jsonl").read_text(encoding="utf-8") == "{}\n"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "results.jsonl").touch()
    reused = fathom("eval", str(questions), "-o", "empty", env=cli_env, cwd=tmp_path)
    assert reused.returncode == 0, reused.stderr
    assert len(results_of(tmp_path / "empty")) == 1


# --- the offline command ------------------------------------------------------------------------


def _dev() -> ModuleType:
    """dev.py as a module (its ``evaluate``, without the install step of ``main``)."""
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dev_py_eval_runs_offline_with_no_key(cli_env: dict[str, str], tmp_path: Path) -> None:
    """``python3 dev.py eval QUESTIONS.jsonl`` with no OPENAI_API_KEY: dev.py starts the fake
    LLM and fake SearXNG (``python -m tests.fakes``) as ``dev.py research`` does, runs the
    evaluation in the caller's folder, and stops them; ``--judge-check`` runs the same way
    with the fake verifier reading each claim and its evidence. Run as a process of its own
    (dev.py's ``evaluate``; ``main`` would first install .venv)."""
    dev = _dev()
    if not Path(dev.PYTHON).exists():
        pytest.skip(f"dev.py's environment {dev.PYTHON} is not installed here")
    env = {k: v for k, v in cli_env.items() if not k.startswith(("OPENAI_", "FATHOM_", "SEARXNG_"))}
    env["PYTHONPATH"] = str(ROOT)
    questions = question_file(tmp_path, THREE[1])
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dev; "
        "sys.exit(dev.evaluate(sys.argv[2:]))"
    )

    def dev_eval(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", script, str(ROOT), *args]
        return subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )

    ran = dev_eval(str(questions.name), "-o", "offline")
    assert ran.returncode == 0, ran.stderr
    assert "OPENAI_API_KEY is not set: running against the local fake LLM" in ran.stderr
    (result,) = results_of(tmp_path / "offline")
    assert result["status"] == "succeeded" and result["claims"] > 0
    assert result["provenance"]["planner_endpoint"].startswith("http://127.0.0.1:")
    assert ran.stdout == (tmp_path / "offline" / "results.md").read_text(encoding="utf-8")

    judged = dev_eval("--judge-check", "--json", "--concurrency", "4")
    assert judged.returncode == 0, judged.stderr
    report = json.loads(judged.stdout)
    assert report["pairs"] == report["judged"] == len(shipped_lines())
    assert report["verifier_endpoint"].startswith("http://127.0.0.1:")
    assert report["falsely_supported"]["pairs"] == 0  # the reading fake is never fooled ...
    assert report["by_label"]["unsupported"]["agreement"] == 100.0
    assert report["by_label"]["supported"]["agreed"] > 0  # ... and sees what is copied


# --- the judge check ----------------------------------------------------------------------------


def pairs_in(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def verdict_reply(verdict: str) -> Reply:
    return Reply(json.dumps({"verdicts": [{"claim": 1, "verdict": verdict, "source": None}]}))


def test_the_shipped_pairs_are_labelled_in_both_languages_with_every_meaning_flip() -> None:
    """At least 50 pairs, English and Chinese, every label, and the meaning flips of issue 52
    (negation, million<->billion, March->May, swapped roles, comparatives, before/after,
    Chinese 未能 and 亿->万), each labelled contradicted; found as package data."""
    pairs = parse_pairs(shipped_lines())
    assert len(pairs) >= 50
    assert {p.language for p in pairs} == {"en", "zh"}
    assert set(Counter(p.label for p in pairs)) == set(Label)
    flips = {p.flip for p in pairs if p.flip}
    assert {"negation", "million-billion", "month", "roles", "comparative", "before-after",
            "zh-negation", "yi-wan"} <= flips  # fmt: skip
    assert all(p.label is Label.CONTRADICTED for p in pairs if p.flip)
    assert any("未能" in " ".join(p.evidence) for p in pairs if p.flip == "zh-negation")
    assert any(
        "亿" in p.claim and "万" in " ".join(p.evidence) for p in pairs if p.flip == "yi-wan"
    )
    assert any(
        "March" in p.claim and "May" in " ".join(p.evidence) for p in pairs if p.flip == "month"
    )
    assert any("billion" in p.claim and "million" in " ".join(p.evidence) for p in pairs)


def test_judge_check_prints_the_verifier_s_agreement_with_the_labels(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """The fake verifier reading each claim and its evidence (``judge = literal``: supported
    only when the evidence holds the claim's words in order) on the shipped set, one request
    per pair in the claim check's own shape: its agreement overall with its interval, per
    label, per language, the confusion table; never "supported" for a flipped claim."""
    llm_server.fake.judge = "literal"
    result = fathom("eval", "--judge-check", "--concurrency", "4", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    pairs = pairs_in(shipped_lines())
    asked = llm_server.fake.requests_for("verifier")
    assert len(asked) == len(pairs)
    for request in asked:
        user = request.body["messages"][-1]["content"]
        assert len(re.findall(r"^Claim \d+: ", user, re.MULTILINE)) == 1 and "Cited: [1]" in user
    out = result.stdout
    assert f"- Pairs: {len(pairs)} (" in out and "from the shipped set (judge_pairs.jsonl)" in out
    assert f"- Verifier: gpt-4o at {llm_server.base_url}" in out
    unsupported = sum(1 for p in pairs if p["label"] == "unsupported")
    assert row(out, "unsupported") == ["unsupported", str(unsupported), str(unsupported), "100.0 %"]
    contradicted = sum(1 for p in pairs if p["label"] == "contradicted")
    confusion = section(out, "## Confusion (rows: the label; columns: the verifier's verdict)")
    assert row(confusion, "contradicted") == ["contradicted", "0", "0", str(contradicted), "0", "0"]
    agreed = int(re.search(r"Agreement with the labels: (\d+) of", out)[1])  # type: ignore[index]
    assert agreed == sum(
        int(row(out, label)[2]) for label in ("supported", "partial", "unsupported", "contradicted")
    )
    assert re.search(
        rf"\| all \| {len(pairs)} \| {agreed} \| [\d.]+ % \[[\d.]+ % – [\d.]+ %\] \|", out
    )
    assert "| English (en) |" in out and "| Chinese (zh) |" in out
    others = len(pairs) - sum(1 for p in pairs if p["label"] == "supported")
    assert f'- Said "supported" of a claim labelled otherwise: 0 of {others} pairs' in out
    assert "model-free pass would call" in out


def test_a_judge_that_always_says_supported_scores_as_it_should(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """Every verdict "supported": agreement is the share of pairs labelled supported, 100 %
    on them and 0 % on every other label, and every other pair is said supported wrongly."""
    pairs = pairs_in(shipped_lines())
    llm_server.fake.script("verifier", *[verdict_reply("supported")] * len(pairs))
    result = fathom("eval", "--judge-check", "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    labels = Counter(p["label"] for p in pairs)
    assert report["agreed"] == labels["supported"]
    assert report["agreement"] == round(100 * labels["supported"] / len(pairs), 1)
    assert report["by_label"]["supported"] == {
        "pairs": labels["supported"],
        "agreed": labels["supported"],
        "agreement": 100.0,
    }
    for label in ("partial", "unsupported", "contradicted"):
        assert report["by_label"][label] == {"pairs": labels[label], "agreed": 0, "agreement": 0.0}
    others = len(pairs) - labels["supported"]
    assert report["falsely_supported"] == {"pairs": others, "of": others}
    assert report["confusion"]["contradicted"]["supported"] == labels["contradicted"]
    assert {r["verdict"] for r in report["results"]} == {"supported"}


def test_a_judge_that_says_each_label_agrees_fully(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """A judge answering each pair's label, one pair at a time: every label is a verdict the
    claim check reads (``contradicted`` too, issue 52's item 3), so all pairs agree, each on
    the confusion table's diagonal, and none is said supported wrongly."""
    pairs = pairs_in(shipped_lines())
    assert {p["label"] for p in pairs} <= {v.value for v in Verdict}
    llm_server.fake.script("verifier", *[verdict_reply(p["label"]) for p in pairs])
    result = fathom(
        "eval", "--judge-check", "--json", "--concurrency", "1", env=cli_env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["agreed"], report["agreement"]) == (len(pairs), 100.0)
    assert [r["verdict"] for r in report["results"]] == [p["label"] for p in pairs]
    labels = Counter(p["label"] for p in pairs)
    for label, row_ in report["confusion"].items():
        assert row_ == {**dict.fromkeys(row_, 0), label: labels[label]}
    assert report["falsely_supported"]["pairs"] == 0


def test_judge_check_reads_a_pairs_file_and_refuses_a_bad_one(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """A pairs file of one's own; a bad line is refused by its number (exit 2) before any
    request; a verifier that fails leaves its pairs without a verdict and exits 1."""
    two = pairs_in(shipped_lines())[:2]
    path = question_file(tmp_path, *two, name="pairs.jsonl")
    result = fathom("eval", "--judge-check", str(path), env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "- Pairs: 2 (" in result.stdout and f"from {path}" in result.stdout
    cases = [
        ((two[0], {**two[1], "label": "maybe"}), "line 2: label: Input should be"),
        ((two[0], two[0]), f"line 2: the id {two[0]['id']!r} is used twice"),
        (
            ({**two[0], "evidence": ["a", "b", "c"]},),
            "line 1: evidence: List should have at most 2",
        ),
        (("{",), "line 1: not JSON"),
    ]
    llm_server.fake.reset()
    for lines, said in cases:
        bad = question_file(tmp_path, *lines, name="bad.jsonl")
        refused = fathom("eval", "--judge-check", str(bad), env=cli_env, cwd=tmp_path)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    assert llm_server.fake.requests == []
    llm_server.fake.script("verifier", *[OVERLOADED] * ATTEMPTS * 2)
    down = fathom(
        "eval", "--judge-check", str(path), "--concurrency", "1", env=cli_env, cwd=tmp_path
    )
    assert down.returncode == 1 and "2 of 2 pairs got no verdict" in down.stderr
    assert "- No verdict: 2 pairs." in down.stdout


def test_the_shipped_question_set_is_valid() -> None:
    """bench/questions: 20 questions, English and Chinese, some with expected facts."""
    lines = BENCH_QUESTIONS.read_text(encoding="utf-8").splitlines()
    questions = parse_questions(lines, default_depth=3, max_depth=10, default_strategy="iterative")
    assert len(questions) == 20
    assert {q.language for q in questions} == {"en", "zh"}
    assert {q.strategy for q in questions} == {"iterative", "graph"}
    assert sum(1 for q in questions if q.expected) >= 10
