"""Rolling a release out: processes started before the migration, a release's code on the
next release's schema, and the `fathom db` commands an operator upgrades and rolls back
with. Real processes (`fathom serve`, `fathom worker`, `fathom db`) on real databases."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx

from storage import HEAD_REVISION
from tests.cli import fathom
from tests.fakes.slack import FakeSlackServer, is_report, sign, slash_command_body
from tests.test_queue import _sql
from tests.test_replicas import postgres_url, wait_until  # noqa: F401 (fixture)
from tests.test_serve import (  # noqa: F401 (fixtures)
    Served,
    serve,
    slack_env,
    terminate,
    wait_until_up,
)
from tests.test_slack_app import FORM, SECRET

#: What release N adds (a column with a default, like every Fathom migration), and its id.
NEXT_REVISION = f"{int(HEAD_REVISION) + 1:04d}"
NEXT_MIGRATION = (
    "ALTER TABLE research_runs ADD COLUMN next_release_note TEXT NOT NULL DEFAULT ''",
    f"UPDATE alembic_version SET version_num = '{NEXT_REVISION}'",
)


def _worker(env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bots.cli", "worker", "--concurrency", "2", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(cwd / "worker.log").open("wb"),
    )


def _execute(url: str, *statements: str) -> None:
    import psycopg

    from core.operations.queue import conninfo

    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


def _research(served: Served, trigger: str) -> httpx.Response:
    body = slash_command_body("tidal power depth=1", trigger_id=trigger)
    return httpx.post(
        f"{served.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
    )


def _delivered(url: str) -> bool:
    rows = _sql(url, "SELECT status, delivery FROM research_runs")
    return bool(rows) and all(row == ("succeeded", "posted") for row in rows)


def test_serve_and_a_worker_started_before_the_migration_start_once_it_has_run(
    slack_env: dict[str, str],  # noqa: F811
    slack_server: FakeSlackServer,
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The first `kubectl apply -k`: the pods start with `--no-upgrade` on an empty database
    while the migration has not run. Serve is alive, not ready, and its routes answer 503;
    the worker waits. Once `fathom db upgrade` has run, both start their parts with no
    restart: /readyz turns 200 exactly when the routes answer, and a research is executed
    by the worker and delivered."""
    env = {**slack_env, "DATABASE_URL": postgres_url, "FATHOM_QUEUE": "procrastinate"}
    served = serve(env, tmp_path, "--no-upgrade")
    worker = _worker(env, tmp_path, "--no-upgrade")
    try:
        wait_until_up(served)
        ready = httpx.get(f"{served.url}/readyz")
        assert ready.status_code == 503 and "no schema yet" in ready.json()["reason"]
        assert _research(served, "before").status_code == 503
        assert worker.poll() is None  # waiting, not failed
        upgraded = fathom("db", "upgrade", env=env, cwd=tmp_path)
        assert upgraded.returncode == 0, upgraded.stderr
        wait_until(lambda: httpx.get(f"{served.url}/readyz").status_code == 200, served.stderr, 30)
        answer = _research(served, "after")
        assert answer.status_code == 200 and "On it" in answer.json()["text"]
        wait_until(lambda: _delivered(postgres_url), served.stderr, 60)
    finally:
        assert _stop(worker) == 0
        assert terminate(served) == 0
    (owner,) = _sql(postgres_url, "SELECT owner FROM research_runs")[0]
    assert owner is None or f":{worker.pid}:" in str(owner)  # the worker executed it
    assert any(is_report(c.params) for c in slack_server.fake.calls_to("chat.postMessage"))
    log = (tmp_path / "worker.log").read_text()
    assert "waiting for the database schema" in log and "Traceback" not in log


def test_a_release_runs_on_the_next_release_s_schema(
    slack_env: dict[str, str],  # noqa: F811
    slack_server: FakeSlackServer,
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A rolling upgrade: release N's migration has run (it added a column), and release
    N-1's serve and worker (this code) keep working on it: ready, a research delivered, and
    `fathom db upgrade` of the older code leaves the newer schema alone in one line."""
    env = {**slack_env, "DATABASE_URL": postgres_url, "FATHOM_QUEUE": "procrastinate"}
    assert fathom("db", "upgrade", env=env, cwd=tmp_path).returncode == 0
    _execute(postgres_url, *NEXT_MIGRATION)
    served = serve(env, tmp_path, "--no-upgrade")
    worker = _worker(env, tmp_path)  # it would migrate: it must leave the newer schema be
    try:
        wait_until_up(served)
        wait_until(lambda: httpx.get(f"{served.url}/readyz").status_code == 200, served.stderr, 30)
        assert _research(served, "n-1").status_code == 200
        wait_until(lambda: _delivered(postgres_url), served.stderr, 60)
    finally:
        assert _stop(worker) == 0
        assert terminate(served) == 0
    log = (tmp_path / "worker.log").read_text()
    assert "HTTP Request:" not in log  # a line per model call: not at INFO or DEBUG
    upgrade = fathom("db", "upgrade", env=env, cwd=tmp_path)
    assert upgrade.returncode == 0 and "Traceback" not in upgrade.stderr
    assert f"newer than this release's {HEAD_REVISION}" in upgrade.stderr
    current = fathom("db", "current", env=env, cwd=tmp_path)
    assert current.stdout == f"{NEXT_REVISION} (ahead; this release: {HEAD_REVISION})\n"
    assert _sql(postgres_url, "SELECT version_num FROM alembic_version") == [(NEXT_REVISION,)]


def test_db_current_downgrade_and_upgrade_roll_a_release_back_and_forth(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The rollback procedure on SQLite: `db current` names the revision, `db downgrade`
    goes back one release's migration, `db upgrade` forward again. A schema from a newer
    release cannot be downgraded by older code, and a revision no release has is one line,
    exit 2, never an Alembic traceback."""
    path = tmp_path / "fathom.db"
    cli_env["DATABASE_URL"] = f"sqlite:///{path}"
    previous = f"{int(HEAD_REVISION) - 1:04d}"

    def db(*args: str) -> subprocess.CompletedProcess[str]:
        result = fathom("db", *args, env=cli_env, cwd=tmp_path)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    assert db("upgrade").returncode == 0
    assert db("current").stdout == f"{HEAD_REVISION} (current; this release: {HEAD_REVISION})\n"
    down = db("downgrade", previous)
    assert down.returncode == 0 and down.stdout == f"downgraded {HEAD_REVISION} -> {previous}\n"
    assert f"now deploy the release whose schema is {previous}" in down.stderr
    assert db("current").stdout == f"{previous} (behind; this release: {HEAD_REVISION})\n"
    with sqlite3.connect(path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(research_runs)")]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "mcp_progress" not in tables  # 0022's is gone
    assert "report_document" in columns and "token_allowance" in columns  # 0021's, 0020's stay
    assert db("upgrade").returncode == 0
    assert db("current").stdout.startswith(f"{HEAD_REVISION} (current;")

    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE alembic_version SET version_num = '{NEXT_REVISION}'")
    refused = db("downgrade", previous)
    assert refused.returncode == 2
    assert "downgrade with the release that migrated it" in refused.stderr
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'abc123'")
    for args in (("upgrade",), ("downgrade", previous)):
        unknown = db(*args)
        assert unknown.returncode == 2 and "no Fathom release has" in unknown.stderr
        assert len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr
    started = fathom("research", "tidal power", env=cli_env, cwd=tmp_path)
    assert started.returncode == 2 and "no Fathom release has" in started.stderr


def test_db_downgrade_to_the_previous_release_says_what_it_did_and_what_to_deploy(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 54: `db downgrade` printed nothing on stdout and advised `db upgrade`. Going
    back to 0.1.0 (schema 0014, CHANGELOG.md) it says `downgraded A -> B` and names 0.1.0."""
    cli_env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'fathom.db'}"
    assert fathom("db", "upgrade", env=cli_env, cwd=tmp_path).returncode == 0
    down = fathom("db", "downgrade", "0014", env=cli_env, cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    assert down.stdout == f"downgraded {HEAD_REVISION} -> 0014\n"
    assert "now deploy Fathom 0.1.0, whose schema is 0014" in down.stderr
    assert "run `fathom db upgrade`" not in down.stderr
    again = fathom("db", "downgrade", "0014", env=cli_env, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == "downgraded 0014 -> 0014\n"
    gone = fathom("db", "downgrade", "base", env=cli_env, cwd=tmp_path)
    assert gone.stdout == "downgraded 0014 -> none\n" and "no Fathom schema now" in gone.stderr
