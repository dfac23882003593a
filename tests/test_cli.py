"""The ``fathom`` command line against the loopback LLM and SearXNG fakes: in this process
(``tests.cli.fathom``), and as a process where signals and the entry point matter."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.models import SearchResult
from core.settings import Settings
from core.words.reasons import Reason
from tests.cli import fathom, fathom_process, start_fathom, stop, wait_for_stderr
from tests.fakes import FakeLLMServer, FakeSearchServer, Held
from tests.fakes.search import RESULT_DATE, page_date

JSON_KEYS = {
    "run_id",
    "thread",
    "status",
    "topics",
    "report_markdown",
    "sources",
    "usage",
    "seconds",
}
USAGE_KEYS = {
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "searches",
    "pages_read",
    "pages_skipped",
    "attachments_read",
    "internal_searches",
    "verifier_calls",
    "verifier_prompt_tokens",
    "verifier_completion_tokens",
    "tokens_by_model",
    "seconds_by_step",
    "cost",
}


def db_file(env: dict[str, str]) -> Path:
    return Path(env["DATABASE_URL"].removeprefix("sqlite+aiosqlite:///"))


def no_database_yet(env: dict[str, str], tmp_path: Path) -> Path:
    """Point ``env`` at a SQLite file that is not there yet (``cli_env``'s is migrated), for
    a test that shows a command writes nothing: the file must still not exist after it."""
    path = tmp_path / "untouched.db"
    env["DATABASE_URL"] = f"sqlite+aiosqlite:///{path}"
    return path


def thread_of(stderr: str) -> str:
    match = re.search(r"^thread: (\S+)\s+run: ([0-9a-f]+)$", stderr, re.MULTILINE)
    assert match, stderr
    return match.group(1)


def test_research_json(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    """Through the installed ``fathom`` script, in a process of its own, as a user runs it."""
    result = fathom_process(
        "research", "solar power storage", "--depth", "2", "--json", env=cli_env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1  # exactly one JSON object, nothing else on stdout
    data = json.loads(lines[0])
    assert JSON_KEYS <= set(data)
    assert data["status"] == "succeeded"
    assert re.fullmatch(r"[0-9a-f]{32}", data["run_id"])
    assert data["thread"].startswith("cli:local:local:")
    assert data["topics"] == search_server.fake.queries and len(data["topics"]) == 2
    assert data["report_markdown"].startswith("# ") and "## Sources" in data["report_markdown"]
    assert data["sources"] and all(
        set(s) == {"n", "title", "url", "published", "kind", "server"} for s in data["sources"]
    )
    # Each search's first result has SearXNG's publishedDate; the pages read declare theirs.
    # (Result 4's page is not read: only the top 3 are.)
    expected = {"1": RESULT_DATE[:10], "2": page_date(2), "3": page_date(3), "4": None}
    assert [s["published"] for s in data["sources"]] == [
        expected[s["url"].rsplit("/", 1)[1]] for s in data["sources"]
    ]
    assert {s["kind"] for s in data["sources"]} == {"web"} and data["attachments"] == []
    assert {s["server"] for s in data["sources"]} == {None}  # no internal source here
    assert data["usage"]["internal_searches"] == 0
    assert any(s["published"] == page_date(2) for s in data["sources"])
    first = data["sources"][0]
    assert f"[{first['title']}]({first['url']}) ({first['published']})" in data["report_markdown"]
    assert [s["n"] for s in data["sources"]] == list(range(1, len(data["sources"]) + 1))
    for source in data["sources"]:
        assert (
            f"[{source['n']}]" in data["report_markdown"]
            and source["url"] in data["report_markdown"]
        )
    assert set(data["usage"]) == USAGE_KEYS
    assert data["usage"]["llm_calls"] == 3 and data["usage"]["searches"] == 2
    assert data["usage"]["prompt_tokens"] > 0 and data["usage"]["completion_tokens"] > 0
    # The top 3 results of each search were read (the fake search serves its pages).
    assert (data["usage"]["pages_read"], data["usage"]["pages_skipped"]) == (6, 0)
    assert "6 pages read" in result.stderr
    assert isinstance(data["seconds"], float) and data["seconds"] >= 0
    # Progress goes to stderr only.
    assert "1/2th search executed." in result.stderr and "2/2th search executed." in result.stderr
    assert "search executed" not in result.stdout
    assert thread_of(result.stderr) == data["thread"]


def test_research_with_the_graph_strategy(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    result = fathom(
        "research",
        "solar power storage",
        "--strategy",
        "graph",
        "--depth",
        "2",
        "--json",
        env=cli_env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["strategy"] == "graph" and data["status"] == "succeeded"
    assert [(n["name"], n["status"]) for n in data["nodes"]] == [
        ("background", "answered"),
        ("state", "answered"),
        ("compare", "answered"),
        ("outlook", "answered"),
    ]
    assert sorted(data["topics"]) == sorted(search_server.fake.queries)
    assert "1/2th search executed.\n✓ solar power storage background" in result.stderr
    # FATHOM_STRATEGY sets the default; an unknown strategy is refused before anything runs.
    bad = fathom("research", "x", "--strategy", "magic", env=cli_env, cwd=tmp_path)
    assert bad.returncode == 2 and "Unknown strategy 'magic'" in bad.stderr
    graph_env = {**cli_env, "FATHOM_STRATEGY": "graph"}
    default = fathom(
        "research", "wind power", "--depth", "1", "--json", env=graph_env, cwd=tmp_path
    )
    assert json.loads(default.stdout)["strategy"] == "graph"


def test_output_file_follow_up_and_thread_commands(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    report = tmp_path / "out" / "report.md"
    report.parent.mkdir()
    first = fathom(
        "research", "heat pumps", "--depth", "2", "--output", str(report), env=cli_env, cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    text = report.read_text(encoding="utf-8")
    assert text.startswith("# ") and "## Sources" in text
    assert first.stdout == ""  # the report went to the file
    assert "report written to" in first.stderr
    key = thread_of(first.stderr)

    shown = fathom("thread", "show", key, env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    before = json.loads(shown.stdout)
    first_topics = before["variables"]["topics"]
    assert len(first_topics) == 2
    # Each run's sources, with their dates (as in the report's list and --json).
    (run,) = before["runs"]
    assert run["sources"] and run["sources"][0]["published"] == RESULT_DATE[:10]
    assert f"({run['sources'][0]['url']}) ({RESULT_DATE[:10]})" in text
    assert before["variables"]["findings"][0]["results"][0]["published"] == RESULT_DATE[:10]

    planner_calls = len(llm_server.fake.requests_for("planner"))
    second = fathom(
        "research",
        "heat pump costs",
        "--depth",
        "1",
        "--thread",
        key,
        "--json",
        env=cli_env,
        cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    data = json.loads(second.stdout)
    assert data["thread"] == key
    assert not set(data["topics"]) & set(first_topics)
    prompt = llm_server.fake.requests_for("planner")[planner_calls].body["messages"][-1]["content"]
    for topic in first_topics:
        assert f"- {topic}" in prompt

    shown = fathom("thread", "show", key, env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["thread"] == key
    variables = info["variables"]
    assert set(variables) == {
        "topics",
        "nextSearchTopic",
        "findings",
        "shouldContinue",
        "strategyState",
        "files",
        "guidance",
    }
    assert variables["strategyState"] == {}  # iterative research keeps no state of its own
    assert variables["guidance"] == []  # nobody steered these runs
    assert variables["topics"] == first_topics + data["topics"]
    assert len(variables["findings"]) == 3
    assert [r["status"] for r in info["runs"]] == ["succeeded", "succeeded"]
    assert info["runs"][1]["run_id"] == data["run_id"]
    assert info["runs"][1]["usage"]["searches"] == 1

    listed = fathom("thread", "list", "--json", env=cli_env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    threads = json.loads(listed.stdout)
    assert [t["thread"] for t in threads] == [key]
    assert threads[0]["runs"] == 2 and threads[0]["last_status"] == "succeeded"
    assert threads[0]["last_topic"] == "heat pump costs"

    missing = fathom("thread", "show", "cli:local:local:nope", env=cli_env, cwd=tmp_path)
    assert missing.returncode == 2 and "there is no thread" in missing.stderr
    assert "fathom thread list" in missing.stderr and missing.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["   "], "topic is empty"),
        (["batteries", "--depth", "0"], "depth must be from 1 to 10"),
        (["batteries", "--depth", "11"], "depth must be from 1 to 10"),
        (["x" * 2001], "at most 2,000"),
        (["batteries", "--strategy", "bogus"], "Unknown strategy 'bogus'"),
        (["batteries", "--thread", "not-a-key"], "not of the form"),
        (
            ["batteries", "--thread", "slack:T0001:C0001:1700000000.000100"],
            "the CLI never posts to a chat; it is a Slack thread: ask there (/research <topic>",
        ),
        (
            ["batteries", "--thread", "dingtalk:corp:cid:msg1"],
            "it is a DingTalk thread: ask there",
        ),
        (["batteries", "--thread", "irc:libera:fathom:1"], "'irc' is not a console thread"),
        (["batteries", "--sources", "intranet"], "Unknown sources 'intranet'; allowed: web, "),
        (
            ["batteries", "--sources", "internal"],
            "--sources internal: FATHOM_MCP_CONFIG is not set, so there is no internal source; "
            "use --sources web or --sources all",
        ),
    ],
)
def test_bad_input_exits_2_and_starts_nothing(
    args: list[str],
    message: str,
    cli_env: dict[str, str],
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    untouched = no_database_yet(cli_env, tmp_path)
    result = fathom("research", *args, "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stdout == ""
    assert not untouched.exists()
    assert llm_server.fake.requests == [] and search_server.fake.queries == []


@pytest.mark.parametrize(
    ("variable", "value"),
    [("FEISHU_MODE", "socket"), ("SLACK_API_URL", "slack"), ("FATHOM_USER_CONCURRENCY", "0")],
)
def test_a_bad_setting_of_any_part_stops_research_in_one_line(
    variable: str,
    value: str,
    cli_env: dict[str, str],
    tmp_path: Path,
    llm_server: FakeLLMServer,
) -> None:
    """Every part reads its own settings (a platform's, the chat layer's), and each is checked
    by every command, not only by the one that uses it."""
    result = fathom("research", "batteries", env={**cli_env, variable: value}, cwd=tmp_path)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and variable in lines[0], result.stderr
    assert llm_server.fake.requests == []


def test_missing_api_key_is_one_clear_line(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    untouched = no_database_yet(cli_env, tmp_path)
    del cli_env["OPENAI_API_KEY"]
    result = fathom("research", "batteries", env=cli_env, cwd=tmp_path)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "OPENAI_API_KEY" in lines[0]
    assert "Traceback" not in result.stderr
    assert not untouched.exists()
    assert llm_server.fake.requests == []


def test_run_failure_exits_1(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    search_server.fake.fail_next(100, status=400)  # not retried: fails fast
    result = fathom("research", "batteries", "--depth", "2", "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "failed" and data["report_markdown"] is None
    assert "no search returned any results" in data["error"]
    assert "run failed" in result.stderr
    # The failure is recorded, not left running.
    with sqlite3.connect(db_file(cli_env)) as db:
        rows = db.execute("SELECT status, error FROM research_runs").fetchall()
    assert [r[0] for r in rows] == ["failed"] and "no search returned" in rows[0][1]


def alembic_head() -> str | None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    return ScriptDirectory.from_config(config).get_current_head()


def test_db_upgrade_on_a_fresh_file(cli_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    cli_env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'sub' / 'fresh.db'}"
    result = fathom("db", "upgrade", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "this release's" in result.stderr and "run `fathom db upgrade`" not in result.stderr
    with sqlite3.connect(tmp_path / "sub" / "fresh.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [
            (alembic_head(),)
        ]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"threads", "research_runs"} <= tables
    again = fathom("db", "upgrade", env=cli_env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_research_json_prices_the_run_with_fathom_prices(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    cli_env["FATHOM_PLANNER_MODEL"] = "planner-model"
    cli_env["FATHOM_WRITER_MODEL"] = "writer-model"
    cli_env["FATHOM_PRICES"] = json.dumps(
        {"planner-model": [2.5, 10], "writer-model": [1.1, 4.4], "search": 0.005}
    )
    result = fathom("research", "tidal power", "--depth", "2", "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    usage = json.loads(result.stdout)["usage"]
    by_model = usage["tokens_by_model"]
    assert set(by_model) == {"planner-model", "writer-model"}
    assert sum(p for p, _ in by_model.values()) == usage["prompt_tokens"]
    assert sum(c for _, c in by_model.values()) == usage["completion_tokens"]
    (pp, pc), (wp, wc) = by_model["planner-model"], by_model["writer-model"]
    expected = (pp * 2.5 + pc * 10 + wp * 1.1 + wc * 4.4) / 1e6 + usage["searches"] * 0.005
    assert usage["cost"] == pytest.approx(expected, abs=1e-6) and usage["cost"] > 0
    steps = usage["seconds_by_step"]
    assert {"planning", "searching", "writing"} <= set(steps)
    assert all(0 <= seconds <= json.loads(result.stdout)["seconds"] for seconds in steps.values())
    unpriced = dict(cli_env, FATHOM_PRICES=json.dumps({"planner-model": [2.5, 10]}))
    again = fathom("research", "wave power", "--depth", "1", "--json", env=unpriced, cwd=tmp_path)
    assert json.loads(again.stdout)["usage"]["cost"] is None  # the writer's model is unpriced


@pytest.mark.parametrize("prices", ["{not json", '{"gpt-4o": [1]}', '{"gpt-4o": [-1, 2]}', "[]"])
def test_malformed_fathom_prices_is_one_line_and_exit_2(
    cli_env: dict[str, str], tmp_path: Path, prices: str
) -> None:
    cli_env["FATHOM_PRICES"] = prices
    result = fathom("research", "tidal power", env=cli_env, cwd=tmp_path)
    assert result.returncode == 2
    assert "FATHOM_PRICES" in result.stderr and 'expected JSON like {"gpt-4o"' in result.stderr
    assert "Traceback" not in result.stderr


def test_the_first_ctrl_c_stops_and_writes_the_report_from_the_searches_done(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    search_server.fake.latency = 0.5  # the second search is running when Ctrl-C arrives
    proc = start_fathom(
        "research", "tidal power", "--depth", "5", "--json", env=cli_env, cwd=tmp_path
    )
    try:
        wait_for_stderr(proc, "1/5th search executed.")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 0, stderr.decode()
    assert "stopping: no new search starts" in stderr.decode()
    data = json.loads(stdout)
    assert data["status"] == "succeeded" and data["stop_reason"] == "stopped"
    assert 1 <= len(data["topics"]) <= 2 and len(search_server.fake.queries) == len(data["topics"])
    assert "Stopped early on request" in data["report_markdown"]


def test_ctrl_c_before_any_search_says_the_run_stopped_with_nothing_to_report(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """The first Ctrl-C is "Stop and write now"; pressed while the first plan is made, no
    search has found anything: the last line says so (it was an empty "run cancelled:")."""
    planned = threading.Event()  # the first plan is held until Ctrl-C was pressed
    llm_server.fake.script("planner", Held(planned))
    proc = start_fathom("research", "tidal power", env=cli_env, cwd=tmp_path)
    try:
        wait_for_stderr(proc, "Researching “tidal power”, depth 3…")
        proc.send_signal(signal.SIGINT)
        planned.set()
        _, stderr = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 1, stderr.decode()
    last = stderr.decode().strip().splitlines()[-1]
    assert last == (
        "run stopped: Stopped before any search found anything (0 of 3 searches): "
        "nothing to report."
    )
    with sqlite3.connect(db_file(cli_env)) as db:
        rows = db.execute("SELECT status, stop_reason, error FROM research_runs").fetchall()
    assert rows == [("cancelled", "stopped", None)]


def test_a_second_ctrl_c_cancels_without_a_report(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    search_server.fake.latency = 3.0  # a search is in flight through both presses
    proc = start_fathom("research", "tidal power", "--depth", "5", env=cli_env, cwd=tmp_path)
    try:
        wait_for_stderr(proc, "1/5th search executed.")
        proc.send_signal(signal.SIGINT)
        wait_for_stderr(proc, "stopping: no new search starts")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 130, stderr.decode()
    with sqlite3.connect(db_file(cli_env)) as db:
        rows = db.execute("SELECT status, error, report_markdown FROM research_runs").fetchall()
    assert rows == [("cancelled", "interrupted", None)]


def test_sigterm_records_an_interruption_that_resume_finishes(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    search_server.fake.latency = 0.5  # the second search is running when SIGTERM arrives
    proc = start_fathom("research", "tidal power", "--depth", "3", env=cli_env, cwd=tmp_path)
    try:
        wait_for_stderr(proc, "1/3th search executed.")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == 130, stderr.decode()
    with sqlite3.connect(db_file(cli_env)) as db:
        rows = db.execute("SELECT id, status, error, rounds_done FROM research_runs").fetchall()
    assert [r[1:] for r in rows] == [("cancelled", "interrupted", 1)]
    # The last line names the run and the command that finishes it.
    assert stderr.decode().splitlines()[-1] == (
        f"interrupted; run {rows[0][0]} is recorded as cancelled. "
        f"Finish it with: fathom resume {rows[0][0]}"
    )
    first_query = search_server.fake.queries[0]

    search_server.fake.latency = 0.0
    resumed = fathom("resume", rows[0][0], "--json", env=cli_env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    data = json.loads(resumed.stdout)
    assert data["status"] == "succeeded" and len(data["topics"]) == 3
    assert search_server.fake.queries.count(first_query) == 1

    unknown = fathom("resume", "0" * 32, env=cli_env, cwd=tmp_path)
    assert unknown.returncode == 2 and "there is no run" in unknown.stderr


def _seed_runs(url: str, keys: list[str], *, held_by: str | None = None) -> list[str]:
    """Create one queued run per thread key (optionally claimed by ``held_by``); their ids."""
    import asyncio

    from core.values import ThreadKey
    from storage import Database, Store

    async def seed() -> list[str]:
        database = Database(url)
        try:
            await database.upgrade()
            store = Store(database)
            ids = []
            for key in keys:
                thread = ThreadKey.parse(key)
                run, _ = await store.runs.create_run(
                    thread=thread,
                    topic=f"topic of {thread.thread}\twith a tab",
                    depth=1,
                    strategy="iterative",
                )
                if held_by is not None:
                    await store.claims.claim_run(run.id, held_by, stale_after=60, max_attempts=3)
                ids.append(run.id)
            return ids
        finally:
            await database.dispose()

    return asyncio.run(seed())


def test_thread_list_in_a_pipe_prints_one_whole_key_per_line(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    keys = [
        "slack:T0123456789:C0123456789ABCDEF:1700000000.000100",
        "feishu:2ed263bf32cf1651:oc_5ce6d572455d361153b7cb51da133945:om_" + "a" * 40,
    ]
    _seed_runs(cli_env["DATABASE_URL"], keys)
    listed = fathom("thread", "list", env={**cli_env, "COLUMNS": "40"}, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [row[0] for row in rows] == list(reversed(keys))  # newest first, whole keys
    assert all(len(row) == 5 for row in rows)
    assert [row[1:3] for row in rows] == [["1", "queued"], ["1", "queued"]]
    assert rows[0][4] == f"topic of {keys[1].split(':', 3)[3]} with a tab"


def test_feedback_list_shows_each_vote_with_its_topic_and_thread(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    import asyncio

    from storage import Database, Store

    keys = ["slack:T1:C1:1700000000.000100", "feishu:t1:oc_1:om_1"]
    first, second = _seed_runs(cli_env["DATABASE_URL"], keys)

    async def vote() -> None:
        database = Database(cli_env["DATABASE_URL"])
        try:
            store = Store(database)
            await store.feedback.record_feedback(first, "slack:T1:U1", "up")
            await store.feedback.record_feedback(second, "feishu:t1:ou_2", "up")
            await store.feedback.record_feedback(
                second, "feishu:t1:ou_2", "down"
            )  # changed its mind
        finally:
            await database.dispose()

    asyncio.run(vote())
    listed = fathom("feedback", "list", env=cli_env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [(r[1], r[2], r[3], r[5]) for r in rows] == [
        ("👎", "feishu:t1:ou_2", second, keys[1]),  # newest first, one row per voter
        ("👍", "slack:T1:U1", first, keys[0]),
    ]
    assert rows[0][4] == "topic of om_1 with a tab"
    as_json = fathom(
        "feedback", "list", "--json", "--since", "2000-01-01", env=cli_env, cwd=tmp_path
    )
    assert [v["value"] for v in json.loads(as_json.stdout)] == ["down", "up"]
    later = fathom("feedback", "list", "--json", "--since", "2999-01-01", env=cli_env, cwd=tmp_path)
    assert json.loads(later.stdout) == []
    bad = fathom("feedback", "list", "--since", "last week", env=cli_env, cwd=tmp_path)
    assert bad.returncode == 2 and "is not a date" in bad.stderr


def test_resume_refuses_a_run_a_live_process_holds(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    [run_id] = _seed_runs(
        cli_env["DATABASE_URL"], ["slack:T1:C1:1700000000.000100"], held_by="other-host:42:abcd"
    )
    result = fathom("resume", run_id, env=cli_env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"run {run_id} is being worked on by other-host:42:abcd" in result.stderr
    assert "taken over automatically if that process stops" in result.stderr
    assert llm_server.fake.requests == []  # nothing was spent


def test_digest_add_list_run_and_remove(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {k: v for k, v in cli_env.items() if not k.startswith("OPENAI_")}  # no LLM needed
    env["SLACK_BOT_TOKEN"] = "xoxb-test"  # the channel's platform must be configured

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return fathom(*args, env=env, cwd=tmp_path)

    added = run(
        "digest",
        "add",
        "open-source LLM inference engines",
        "--cron",
        "0 9 * * MON",
        "--tz",
        "Asia/Shanghai",
        "--channel",
        "slack:T0001:C0001",
        "--depth",
        "2",
    )
    assert added.returncode == 0, added.stderr
    digest_id = added.stdout.strip()
    listed = run("digest", "list", "--json")
    (entry,) = json.loads(listed.stdout)
    assert entry["id"] == digest_id and entry["channel"] == "slack:T0001:C0001"
    assert entry["schedule"] == "At 09:00, only on Monday" and entry["timezone"] == "Asia/Shanghai"
    assert entry["next_run"].endswith("09:00:00+08:00")
    ran = run("digest", "run", digest_id)
    assert ran.returncode == 0 and len(ran.stdout.strip()) == 32  # a queued run's id
    bad = run("digest", "add", "x", "--cron", "*/5 * * * *", "--channel", "slack:T:C")
    assert bad.returncode == 2 and "digests may fire at most every 1 h" in bad.stderr
    assert run("digest", "remove", digest_id).returncode == 0
    assert json.loads(run("digest", "list", "--json").stdout) == []
    missing = run("digest", "run", digest_id)
    assert missing.returncode == 2 and "no schedule" in missing.stderr


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process may not write in (root writes anywhere except sysfs)."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    return folder


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("missing", "the folder {parent} does not exist"),
        ("directory", "is a directory; name a file"),
        ("forbidden", "cannot be written:"),
    ],
)
def test_an_output_file_that_cannot_be_written_is_refused_before_anything_is_spent(
    where: str,
    message: str,
    cli_env: dict[str, str],
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    untouched = no_database_yet(cli_env, tmp_path)
    output = {
        "missing": tmp_path / "no-such-folder" / "report.md",
        "directory": tmp_path,
        "forbidden": unwritable_folder(tmp_path) / "fathom-report.md",
    }[where]
    for command in (["research", "batteries"], ["resume", "0" * 32]):
        result = fathom(*command, "--output", str(output), env=cli_env, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and message.format(parent=output.parent) in lines[0], lines
        assert result.stdout == ""
    assert not untouched.exists()
    assert llm_server.fake.requests == [] and search_server.fake.queries == []
    assert where == "directory" or not output.exists()


def test_a_report_that_cannot_be_written_after_the_run_goes_to_stdout(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    output = folder / "report.md"
    search_server.fake.latency = 0.3  # the second search is running when the folder goes
    proc = start_fathom(
        "research", "wave power", "--depth", "2", "-o", str(output), env=cli_env, cwd=tmp_path
    )
    try:
        wait_for_stderr(proc, "1/2th search executed.")
        folder.rmdir()
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        stop(proc)
    err = stderr.decode()
    assert proc.returncode == 1, err
    assert f"the report could not be written to {output}" in err and "follows on stdout" in err
    assert stdout.decode().startswith("# ") and "## Sources" in stdout.decode()
    with sqlite3.connect(db_file(cli_env)) as db:
        [(run_id, status)] = db.execute("SELECT id, status FROM research_runs").fetchall()
    assert status == "succeeded" and f"run: {run_id}" in err
    assert not folder.exists()


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and lines[0].startswith("error: ")
    return lines[0]


def test_digest_add_refuses_what_could_never_be_posted_in_cli_words(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**cli_env, "SLACK_BOT_TOKEN": "xoxb-test", "FATHOM_MAX_DIGESTS_PER_CHANNEL": "1"}

    def add(channel: str, cron: str = "0 9 * * MON") -> subprocess.CompletedProcess[str]:
        return fathom(
            "digest", "add", "tides", "--cron", cron, "--channel", channel, env=env, cwd=tmp_path
        )

    cases = [
        ("cli:local:local", "0 9 * * MON", "'cli' is not a chat platform"),
        ("irc:libera:fathom", "0 9 * * MON", "'irc' is not a chat platform"),
        ("feishu:tenant:oc_1", "0 9 * * MON", "Feishu/Lark is not configured"),
        ("slack:T0001:C0001", "0 9 30 2 *", "--cron '0 9 30 2 *' never fires"),
        ("slack:T0001:C0001", "0 9 * *", "--cron '0 9 * *' is not a valid 5-field cron"),
        ("slack:T0001:C0001", "*/5 * * * *", "--cron '*/5 * * * *' fires every 5 min"),
    ]
    for channel, cron, message in cases:
        result = add(channel, cron)
        assert result.returncode == 2, (channel, cron, result.stderr)
        line = _one_line_error(result)
        assert message in line, line
        assert "/research" not in line and "cron=" not in line, line  # CLI words only
        if "cron" in message:
            assert '--cron "0 9 * * MON"' in line and "fathom digest add" in line
    bad_tz = fathom(
        "digest", "add", "tides", "--cron", "0 9 * * *", "--tz", "Mars/Base",
        "--channel", "slack:T0001:C0001", env=env, cwd=tmp_path,
    )  # fmt: skip
    assert "Unknown timezone 'Mars/Base'" in _one_line_error(bad_tz)
    assert "/research" not in bad_tz.stderr
    assert json.loads(fathom("digest", "list", "--json", env=env, cwd=tmp_path).stdout) == []
    assert add("slack:T0001:C0001").returncode == 0
    full = add("slack:T0001:C0001")
    assert "remove one with `fathom digest remove <id>` first" in _one_line_error(full)
    gone = fathom("digest", "remove", "ffffffff", env=env, cwd=tmp_path)
    assert gone.returncode == 2
    assert "There is no schedule `ffffffff`; see `fathom digest list`." in _one_line_error(gone)


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_urls(tmp_path: Path) -> list[tuple[str, str]]:
    """Unusable DATABASE_URLs (each with a password) and what their error line must say."""
    server = os.environ.get("TEST_DATABASE_URL")
    urls = [
        ("garbage://::", "is not a database URL"),
        ("not a url at all", "is not a database URL"),
        ("mysql://fathom:s3cret-pw@db.example/fathom", "mysql://fathom:***@db.example/fathom"),
        (
            f"postgresql://fathom:s3cret-pw@127.0.0.1:{closed_port()}/fathom",
            "Connection refused",
        ),
        (f"sqlite:///{tmp_path / 'no-such-folder' / 'x.db'}", "in a folder that does not exist"),
        (f"sqlite:///{tmp_path}", "cannot connect: unable to open database file"),  # a directory
    ]
    if server:
        from sqlalchemy.engine import make_url

        missing = make_url(server).set(database="fathom_no_such_db", password="s3cret-pw")
        urls.append(
            (
                missing.render_as_string(hide_password=False),
                'database "fathom_no_such_db" does not exist',
            )
        )
    return urls


@pytest.mark.parametrize(
    "command",
    [
        ["research", "batteries"],
        ["resume", "0" * 32],
        ["thread", "list"],
        ["thread", "show", "cli:local:local:x"],
        ["digest", "list"],
        ["digest", "add", "tides", "--cron", "0 9 * * MON", "--channel", "slack:T1:C1"],
        ["digest", "remove", "ffffffff"],
        ["digest", "run", "ffffffff"],
        ["db", "upgrade"],
        ["serve", "--port", "1"],
        ["serve", "--port", "1", "--no-upgrade"],
    ],
)
def test_an_unusable_database_url_is_one_line_and_exit_2_everywhere(
    command: list[str], cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    for url, expected in database_urls(tmp_path):
        env = {**cli_env, "DATABASE_URL": url, "SLACK_BOT_TOKEN": "xoxb-test"}
        env["SLACK_SIGNING_SECRET"] = "secret"
        result = fathom(*command, env=env, cwd=tmp_path)
        assert result.returncode == 2, (url, result.stderr)
        line = _one_line_error(result)
        assert "DATABASE_URL" in line and expected in line, (url, line)
        assert "s3cret-pw" not in result.stderr
    assert not (tmp_path / "no-such-folder").exists()  # refused, not created
    assert llm_server.fake.requests == []


def test_an_openai_base_url_that_is_not_a_url_is_a_settings_error(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    untouched = no_database_yet(cli_env, tmp_path)
    for value in ("localhost:8000/v1", "not a url", "ftp://models.example/v1"):
        env = {**cli_env, "OPENAI_BASE_URL": value}
        result = fathom("research", "batteries", env=env, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        line = _one_line_error(result)
        assert "OPENAI_BASE_URL is invalid" in line and "not an http(s) URL" in line, line
    assert not untouched.exists() and llm_server.fake.requests == []


def test_serve_help_names_every_platform(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Every registered platform (``bots.platforms``), by what people call it."""
    from bots.platforms import titles

    result = fathom("serve", "--help", env={**cli_env, "COLUMNS": "200"}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for platform in titles().values():
        assert platform.split("/")[0] in text, (platform, text)


def test_research_reads_the_files_given_with_file(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    notes = tmp_path / "rfp-notes.md"
    notes.write_text(
        "# Request for proposals\n\nThe buyer requires a seasonal coefficient of performance of"
        " at least 3.2 and delivery within 14 weeks.\n",
        encoding="utf-8",
    )
    result = fathom(
        "research", "heat pump tender", "--depth", "1", "--file", str(notes), "--json",
        env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["usage"]["attachments_read"] == 1
    (attached,) = data["attachments"]
    assert (attached["name"], attached["kind"], attached["size"]) == (
        "rfp-notes.md",
        "text",
        notes.stat().st_size,
    )
    first = data["sources"][0]
    assert first["kind"] == "attachment" and first["title"].startswith("rfp-notes.md (attached by ")
    prompt = llm_server.fake.requests_for("writer")[-1].body["messages"][-1]["content"]
    assert "coefficient of performance of at least 3.2" in prompt
    # Bad files are refused before anything is spent.
    calls = len(llm_server.fake.requests)
    for args, says in (
        (["--file", str(tmp_path / "missing.pdf")], "there is no such file"),
        (["--file", str(tmp_path / "cli.db")], "not a kind of file that is read"),
    ):
        refused = fathom("research", "x", *args, env=cli_env, cwd=tmp_path)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * 4096)
    refused = fathom(
        "research", "x", "--file", str(big), env={**cli_env, "FATHOM_ATTACHMENT_MAX_BYTES": "2048"},
        cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2 and "larger than 2048 bytes" in refused.stderr
    assert len(llm_server.fake.requests) == calls


# -- sources ----------------------------------------------------------------------------------


def test_research_with_sources_web_records_the_choice(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    result = fathom(
        "research", "tidal power", "--depth", "1", "--sources", "WEB", "--json",
        env=cli_env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["status"] == "succeeded" and len(search_server.fake.queries) == 1
    default = fathom("research", "wave power", "--depth", "1", env=cli_env, cwd=tmp_path)
    assert default.returncode == 0, default.stderr
    with sqlite3.connect(db_file(cli_env)) as db:
        stored = dict(db.execute("SELECT topic, sources FROM research_runs"))
    assert stored == {"tidal power": "web", "wave power": "all"}


def test_sources_lists_the_web_provider_when_no_mcp_server_is_configured(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    untouched = no_database_yet(cli_env, tmp_path)
    listed = fathom("sources", "--json", env=cli_env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (web,) = json.loads(listed.stdout)
    assert web == {
        "name": "searxng",
        "kind": "web",
        "transport": "http",
        "tool": None,
        "channels": None,
        "state": "configured",
        "problem": None,
        "connect_seconds": None,
        "config": {},
    }
    piped = fathom("sources", env=cli_env, cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "searxng\tweb\thttp\t-\tevery channel\tconfigured\n"
    unset = fathom("sources", "--json", env={**cli_env, "SEARXNG_URL": ""}, cwd=tmp_path)
    (down,) = json.loads(unset.stdout)
    assert down["state"] == "down" and "SEARXNG_URL" in down["problem"]
    assert not untouched.exists()  # nothing here touches the database


def test_sources_test_prints_what_the_web_returned(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    untouched = no_database_yet(cli_env, tmp_path)
    shown = fathom("sources", "test", "heat pumps", env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert re.fullmatch(r"searxng \(web\): \d+ results in \d+\.\d\d s", lines[0]), lines
    assert lines[1].startswith("  1. ") and lines[2].strip().startswith("http://127.0.0.1:")
    assert "no internal source searched: FATHOM_MCP_CONFIG is not set" in shown.stderr
    as_json = fathom("sources", "test", "heat pumps", "--json", env=cli_env, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["query"] == "heat pumps" and data["channel"] == "cli:local:local"
    (web,) = data["sources"]
    assert web["name"] == "searxng" and web["kind"] == "web" and web["error"] is None
    assert web["results"] and all(r["server"] is None for r in web["results"])
    assert set(web["results"][0]) == {"title", "url", "snippet", "published", "server"}
    assert search_server.fake.queries == ["heat pumps", "heat pumps"]  # no cache in between
    search_server.fake.fail_next(1, status=400)
    failed = fathom("sources", "test", "heat pumps", env=cli_env, cwd=tmp_path)
    assert failed.returncode == 1
    (line,) = failed.stdout.splitlines()  # a failure is one line
    assert line.startswith("searxng (web): failed: ")
    assert not untouched.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["   "], "topic is empty"),
        (["heat pumps", "--channel", "slack"], "--channel 'slack': name a channel as"),
        (["heat pumps", "--channel", "slack::C1"], "e.g. slack:T0001:C0001, or cli"),
    ],
)
def test_sources_test_refuses_bad_input(
    args: list[str], message: str, cli_env: dict[str, str], tmp_path: Path,
    search_server: FakeSearchServer,
) -> None:  # fmt: skip
    result = fathom("sources", "test", *args, env=cli_env, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert search_server.fake.queries == []


def test_digest_add_keeps_its_sources(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "SLACK_BOT_TOKEN": "xoxb-test"}

    def add(*args: str) -> subprocess.CompletedProcess[str]:
        return fathom(
            "digest", "add", "tides", "--cron", "0 9 * * MON", "--channel", "slack:T1:C1", *args,
            env=env, cwd=tmp_path,
        )  # fmt: skip

    refused = add("--sources", "internal")
    assert refused.returncode == 2
    assert "--sources internal: FATHOM_MCP_CONFIG is not set" in refused.stderr
    assert add("--sources", "everything").returncode == 2
    assert add("--sources", "web").returncode == 0
    assert add().returncode == 0
    entries = json.loads(fathom("digest", "list", "--json", env=env, cwd=tmp_path).stdout)
    assert [e["sources"] for e in entries] == ["web", "all"]
    piped = fathom("digest", "list", env=env, cwd=tmp_path).stdout.splitlines()
    assert "\tsources=web" in piped[0] and "sources=" not in piped[1]


# -- sources with MCP servers (core.knowledge) --------------------------------------------------

NOTES_SERVER = Path(__file__).parent / "fakes" / "notes_mcp.py"
#: Configured secrets: never printed, never logged, never in a server's environment but its own.
NOTES_TOKEN, TICKETS_TOKEN = "notes-s3cret-token", "tickets-h3ader-secret"


def _knowledge_is_built() -> bool:
    import core.knowledge

    return hasattr(core.knowledge, "Knowledge")


needs_knowledge = pytest.mark.skipif(
    not _knowledge_is_built(), reason="core.knowledge (issue 21) is not built in this tree yet"
)


def mcp_config(tmp_path: Path, **channels: list[str]) -> dict[str, str]:
    """A FATHOM_MCP_CONFIG file: ``notes`` (this test's stdio server, recording its calls in
    tmp_path/notes-calls.jsonl), ``tickets`` (Streamable HTTP on a port nothing listens on:
    down) and ``broken`` (neither command nor url: down); ``channels`` per server (default:
    notes for slack:T1:C1 and the console, tickets for slack:T1). The env to add."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    servers = {
        "notes": {
            "command": sys.executable,
            "args": [str(NOTES_SERVER)],
            "env": {"NOTES_TOKEN": NOTES_TOKEN, "NOTES_CALLS": str(tmp_path / "notes-calls.jsonl")},
            "fathom": {"channels": channels.get("notes", ["slack:T1:C1", "cli"])},
        },
        "tickets": {
            "url": f"http://127.0.0.1:{closed_port}/mcp",
            "headers": {"Authorization": f"Bearer {TICKETS_TOKEN}"},
            "fathom": {"channels": channels.get("tickets", ["slack:T1"]), "results": 3},
        },
        "broken": {"fathom": {"channels": ["slack"]}},
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return {"FATHOM_MCP_CONFIG": str(path), "FATHOM_MCP_TIMEOUT": "10"}


def notes_calls(tmp_path: Path) -> list[dict[str, object]]:
    calls = tmp_path / "notes-calls.jsonl"
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text(encoding="utf-8").splitlines()]


@needs_knowledge
def test_sources_lists_each_mcp_server_with_its_state_and_masks_secrets(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**cli_env, **mcp_config(tmp_path)}
    listed = fathom("sources", "--json", env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert list(rows) == ["searxng", "notes", "tickets", "broken"]
    notes, tickets, broken = rows["notes"], rows["tickets"], rows["broken"]
    assert (notes["kind"], notes["transport"], notes["tool"], notes["state"]) == (
        "internal",
        "stdio",
        "search",
        "up",
    )
    assert notes["channels"] == ["slack:T1:C1", "cli"] and notes["problem"] is None
    assert notes["connect_seconds"] is not None
    assert (tickets["transport"], tickets["state"]) == ("http", "down") and tickets["problem"]
    assert broken["state"] == "down" and broken["problem"]
    for output in (listed.stdout, listed.stderr):
        assert NOTES_TOKEN not in output and TICKETS_TOKEN not in output
    assert "****" in json.dumps(notes["config"]) and "****" in json.dumps(tickets["config"])
    piped = fathom("sources", env=env, cwd=tmp_path)
    lines = piped.stdout.splitlines()
    assert lines[1].startswith("notes\tinternal\tstdio\tsearch\tslack:T1:C1, cli\tup")
    assert lines[2].startswith("tickets\tinternal\thttp\t-\tslack:T1\tdown\t")
    assert notes_calls(tmp_path) == []  # listing connects; it never calls the tool


@needs_knowledge
def test_sources_test_asks_only_the_servers_the_channel_may_use(
    cli_env: dict[str, str], tmp_path: Path, search_server: FakeSearchServer
) -> None:
    env = {**cli_env, **mcp_config(tmp_path)}
    console = fathom("sources", "test", "pumps", "--json", env=env, cwd=tmp_path)
    assert console.returncode == 0, console.stderr
    answers = {a["name"]: a for a in json.loads(console.stdout)["sources"]}
    assert list(answers) == ["searxng", "notes"]  # tickets: slack:T1 only
    titles = [r["title"] for r in answers["notes"]["results"]]
    assert titles == ["Runbook: pumps", "Design notes"]
    assert {r["server"] for r in answers["notes"]["results"]} == {"notes"}
    (call,) = notes_calls(tmp_path)
    assert call["query"] == "pumps"
    assert "NOTES_TOKEN" in call["env"] and "OPENAI_API_KEY" not in call["env"]  # type: ignore[operator]
    elsewhere = fathom(
        "sources", "test", "pumps", "--channel", "slack:T9:C9", env=env, cwd=tmp_path
    )
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert elsewhere.stdout.startswith("searxng (web): ") and "notes" not in elsewhere.stdout
    assert "no internal source searched: no MCP server may be used in slack:T9:C9" in (
        elsewhere.stderr
    )
    assert len(notes_calls(tmp_path)) == 1  # never called for a channel that may not use it
    team = fathom("sources", "test", "pumps", "--channel", "slack:T1:C1", env=env, cwd=tmp_path)
    assert team.returncode == 1  # tickets is down: its one line, the others' results
    assert "notes (internal): 2 results in " in team.stdout
    (failed,) = [line for line in team.stdout.splitlines() if line.startswith("tickets")]
    assert failed.startswith("tickets (internal): failed: ")
    assert TICKETS_TOKEN not in team.stdout + team.stderr
    assert len(notes_calls(tmp_path)) == 2


@needs_knowledge
@pytest.mark.parametrize(
    "args",
    [
        ["sources"],
        ["sources", "test", "pumps"],
        ["research", "pumps"],
        [
            "digest",
            "add",
            "x",
            "--cron",
            "0 9 * * MON",
            "--channel",
            "slack:T1:C1",
            "--sources",
            "internal",
        ],
    ],
)
def test_a_malformed_mcp_config_is_one_line_and_exit_2(
    args: list[str], cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": [', encoding="utf-8")
    env = {**cli_env, "FATHOM_MCP_CONFIG": str(bad), "SLACK_BOT_TOKEN": "xoxb-test"}
    result = fathom(*args, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert llm_server.fake.requests == []


@needs_knowledge
def test_research_sources_internal_needs_a_server_the_console_may_use(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    env = {**cli_env, **mcp_config(tmp_path, notes=["slack:T1"])}
    refused = fathom("research", "pumps", "--sources", "internal", env=env, cwd=tmp_path)
    assert refused.returncode == 2
    # One error line (warnings about the configured servers may come before or after it).
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: --sources internal: no MCP server in FATHOM_MCP_CONFIG may be used in "
        "cli:local:local:"
    ), refused.stderr
    assert llm_server.fake.requests == [] and notes_calls(tmp_path) == []
    with sqlite3.connect(db_file(cli_env)) as db:
        assert db.execute("SELECT count(*) FROM research_runs").fetchone() == (0,)
    env = {**cli_env, "SLACK_BOT_TOKEN": "xoxb-test", **mcp_config(tmp_path)}
    digest = ["digest", "add", "pumps", "--cron", "0 9 * * MON", "--sources", "internal"]
    allowed = fathom(*digest, "--channel", "slack:T1:C1", env=env, cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    other = fathom(*digest, "--channel", "slack:T2:C1", env=env, cwd=tmp_path)
    assert other.returncode == 2 and "may be used in slack:T2:C1" in other.stderr


# -- what `fathom sources` does with the internal sources (through its protocol) ---------------


@dataclass(frozen=True)
class ServerState:
    """One server as ``Knowledge.status()`` describes it."""

    name: str
    transport: str
    tool: str | None
    channels: tuple[str, ...]
    state: str
    problem: str | None
    connect_seconds: float | None
    config: dict[str, object]


class Answering:
    """An internal source: answers ``results``, or raises ``error``; records its queries."""

    def __init__(
        self, name: str, results: list[SearchResult] | None = None, error: Exception | None = None
    ) -> None:
        self.name, self.results, self.error = name, results or [], error
        self.queries: list[str] = []

    async def search(self, query: str) -> list[SearchResult]:
        self.queries.append(query)
        if self.error is not None:
            raise self.error
        return self.results


class Team:
    """The internal sources as ``fathom sources`` uses them; records its life."""

    def __init__(self, servers: list[ServerState], sources: dict[str, list[Answering]]) -> None:
        self.servers, self.sources = servers, sources
        self.events: list[str] = []

    def start(self) -> None:
        self.events.append("start")

    async def wait_started(self) -> None:
        self.events.append("wait")

    def status(self) -> list[ServerState]:
        return self.servers

    def allowed(self, thread_key: str) -> list[Answering]:
        self.events.append(f"allowed {thread_key}")
        return self.sources.get(thread_key, [])

    async def aclose(self) -> None:
        self.events.append("close")


def core_settings(search_server: FakeSearchServer, **extra: str) -> Settings:
    values = {"FATHOM_SEARCH": "searxng", "SEARXNG_URL": search_server.url, **extra}
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


async def test_sources_rows_show_each_server_after_it_tried_to_connect(
    search_server: FakeSearchServer,
) -> None:
    from bots.console.sources import list_sources

    up = ServerState("wiki", "stdio", "search", ("slack:T1", "cli"), "up", None, 0.25, {})
    down = ServerState(
        "tickets", "http", None, (), "down", "tickets: cannot connect", None, {"headers": "****"}
    )
    team = Team([up, down], {})
    web, wiki, tickets = await list_sources(core_settings(search_server), team)
    assert team.events == ["start", "wait"]  # started, and waited for, before the states
    assert (web.name, web.kind, web.channels_text, web.state) == (
        "searxng",
        "web",
        "every channel",
        "configured",
    )
    assert (wiki.kind, wiki.tool, wiki.channels_text, wiki.detail) == (
        "internal",
        "search",
        "slack:T1, cli",
        "connected in 0.25 s",
    )
    assert (
        tickets.channels_text == "cli (console only)"
        and tickets.detail == "tickets: cannot connect"
    )
    assert (
        tickets.as_json()["config"] == {"headers": "****"} and tickets.as_json()["channels"] == []
    )
    assert web.as_json()["channels"] is None


async def test_sources_test_asks_the_web_and_each_allowed_source_at_once(
    search_server: FakeSearchServer,
) -> None:
    from bots.console.sources import answer_lines, channel_key, probe_sources
    from core.search.base import SearchTimeout

    doc = SearchResult(
        title="Runbook: pumps", url="", snippet="restart " * 40, server="wiki", passages=["x"]
    )
    wiki = Answering("wiki", [doc])
    slow = Answering("tickets", error=SearchTimeout(Reason.verbatim("tickets: no answer in 20 s")))
    odd = Answering("drive", error=RuntimeError("boom"))
    key = channel_key("slack:T1:C1")
    team = Team([], {key: [wiki, slow, odd]})
    answers = await probe_sources(core_settings(search_server), team, "pumps", key)
    assert [(a.name, a.kind) for a in answers] == [
        ("searxng", "web"),
        ("wiki", "internal"),
        ("tickets", "internal"),
        ("drive", "internal"),
    ]
    assert team.events == ["start", f"allowed {key}"]
    assert wiki.queries == ["pumps"] and search_server.fake.queries == ["pumps"]
    web, found, timed_out, broken = answers
    assert web.error is None and web.results
    assert answer_lines(timed_out) == ["tickets (internal): failed: tickets: no answer in 20 s"]
    assert answer_lines(broken) == ["drive (internal): failed: RuntimeError: boom"]
    heading, title, snippet = answer_lines(found)
    assert heading.startswith("wiki (internal): 1 result in ")
    assert title == "  1. Runbook: pumps"  # no link line: the document has none
    assert snippet.startswith("     restart restart") and snippet.endswith("…")
    assert len(snippet.strip()) == 160
    assert found.as_json()["results"][0]["server"] == "wiki"
    # The web provider misconfigured: its one line, the internal sources still asked.
    unset = await probe_sources(core_settings(search_server, SEARXNG_URL=""), team, "x", key)
    assert unset[0].name == "searxng" and "SEARXNG_URL" in (unset[0].error or "")
    assert wiki.queries == ["pumps", "x"]


@pytest.mark.parametrize(
    ("given", "key"),
    [
        (None, "cli:local:local"),
        ("cli", "cli:local:local"),
        ("slack:T1", "slack:T1"),
        ("feishu:tk:oc_1:om_1", "feishu:tk:oc_1:om_1"),
    ],
)
def test_the_channel_sources_test_asks_for(given: str | None, key: str) -> None:
    from bots.console.sources import channel_key

    assert channel_key(given) == key
