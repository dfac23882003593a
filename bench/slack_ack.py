"""Acknowledgement latency of Slack ``/research`` under load, against a real ``fathom serve``.

    python -m bench.slack_ack [--seconds 20] [--clients 50] [--background-runs 100]
    TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test python -m bench.slack_ack
    python -m bench.slack_ack --databases sqlite --py-spy $(which py-spy)   # + server profile

Four processes, so that nothing measured shares a GIL with what measures it:
``python -m tests.fakes`` (LLM + SearXNG), a fake Slack Web API (``--child-slack``), the
server under test (``fathom serve`` on loopback, SQLite in a temp dir; a second pass on a
throwaway PostgreSQL database when ``TEST_DATABASE_URL`` is set) and this process, the load
generator. The ``pg-workers`` pass (also with ``TEST_DATABASE_URL``) runs the server with
``FATHOM_QUEUE=procrastinate``: it only acknowledges and queues, and ``--workers`` ``fathom
worker`` processes (``--worker-concurrency`` runs each) execute the runs.

1. ``--background-runs`` signed slash commands start runs; we wait until the database shows
   them all ``running``. The fake LLM is slow (``--llm-latency``, default 4 s, depth 5: a run
   takes ~25 s), so they stay in progress for the whole measured window (checked at the end).
2. ``--clients`` closed-loop clients (one keep-alive connection each) post signed slash
   commands, each with a unique ``trigger_id`` and a distinct user id, for ``--warmup`` s (not
   counted) and then ``--seconds`` s. Every request's latency and answer is recorded.
3. The server is stopped (SIGTERM) right away: the thousands of accepted runs are not waited
   for. Then the database is read directly: every acknowledged request (HTTP 200 with the
   "On it" reply) must have its run row, found by dedupe key ``slack:cmd:<team>:<trigger_id>``.

Results go to ``bench/results/slack_ack.json``; the Markdown table is printed for the README.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import resource
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import cpu_model
from tests.env import clean_environ

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "slack_ack.json"
FATHOM = Path(sys.executable).with_name("fathom")
SECRET = "bench-signing-secret"
BOT_TOKEN = "xoxb-bench"
TEAM = "T0001"  # the fake Slack's team
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
ACCEPTED = ":mag: On it:"  # bots/slack/markup.py accepted_reply
SLACK_ACK_DEADLINE = 3.0  # Slack shows the user an error when the ack takes longer
GOALS = {"p99_ms": 300.0, "lost": 0}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- environment and machine -------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """This environment minus Fathom settings (and the test database URL)."""
    env = clean_environ(**extra)
    env.pop("TEST_DATABASE_URL", None)
    return env


def machine() -> dict[str, Any]:
    import slack_bolt.version
    import sqlalchemy
    import uvicorn

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "slack_bolt": slack_bolt.version.__version__,
        "uvicorn": uvicorn.__version__,
        "sqlalchemy": sqlalchemy.__version__,
        "httpx": httpx.__version__,
        # Other processes share the CPUs; a 1-minute load near nproc makes every number worse.
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        **git_state(),
    }


def git_state() -> dict[str, Any]:
    """Which code was measured: the commit and the tracked files changed on top of it."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--untracked-files=no").splitlines()
    return {"git_commit": git("rev-parse", "--short", "HEAD"), "git_modified": changed}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc), to tell who used the CPUs in the window."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def postgres_cpu_seconds() -> float:
    """CPU of the local PostgreSQL server: the postmaster with its reaped children (ended
    backends) and the live backends. NaN when it is not a local process we can read."""
    ticks = os.sysconf("SC_CLK_TCK")
    total, found = 0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        name, fields = raw[raw.index("(") + 1 : raw.rindex(")")], raw.rsplit(")", 1)[1].split()
        if name != "postgres" and not name.startswith("postgres:"):
            continue
        found = True
        total += int(fields[11]) + int(fields[12])
        try:
            parent = Path(f"/proc/{fields[1]}/comm").read_text().strip()
        except OSError:
            parent = ""
        if parent != "postgres":  # the postmaster: + its ended children (backends, workers)
            total += int(fields[13]) + int(fields[14])
    return total / ticks if found else float("nan")


def database_activity(url: str) -> dict[str, int]:
    """pg_stat_database counters of this database: sessions opened, transactions committed."""
    from sqlalchemy import create_engine, text

    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT sessions, xact_commit FROM pg_stat_database "
                    "WHERE datname = current_database()"
                )
            ).one()
            return {"sessions": int(row[0]), "commits": int(row[1])}
    finally:
        engine.dispose()


def self_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- child processes ---------------------------------------------------------------------


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> int | None:
    """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@contextmanager
def child(args: list[str], env: dict[str, str]) -> Iterator[tuple[dict[str, Any], int]]:
    """A child that prints one JSON line of endpoints on stdout and runs until SIGTERM."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{' '.join(args)} exited before printing its endpoints")
        yield json.loads(line), proc.pid
    finally:
        stop_process(proc, timeout=10)


def serve_fake_slack() -> int:
    """``--child-slack``: a FakeSlackServer in its own process until SIGTERM."""
    from tests.fakes.slack import FakeSlackServer

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.append(signum))
    with FakeSlackServer() as server:
        print(json.dumps({"api_url": server.api_url, "url": server.url}), flush=True)
        while not stopping:
            time.sleep(0.05)
            # Every call is kept in memory by the fake; forget them so a long run stays flat.
            if len(server.fake.calls) > 20_000:
                server.fake.reset()
    return 0


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    command: list[str]

    def stderr_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


@contextmanager
def fathom_serve(env: dict[str, str], workdir: Path) -> Iterator[Served]:
    port = free_port()
    log = workdir / f"serve-{port}.log"
    command = [str(FATHOM), "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, cwd=workdir, env=env, stdout=sink, stderr=sink)
    served = Served(proc, f"http://127.0.0.1:{port}", log, command)
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(trust_env=False, timeout=2) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"fathom serve exited early:\n{served.stderr_tail()}")
                try:
                    if client.get(f"{served.url}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"fathom serve did not become ready:\n{served.stderr_tail()}"
                    )
                time.sleep(0.1)
        yield served
    finally:
        stop_process(proc, timeout=30)


@contextmanager
def fathom_workers(
    env: dict[str, str], workdir: Path, count: int, concurrency: int
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` ``fathom worker`` processes (the schema is already current: serve migrated)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(count):
            command = [str(FATHOM), "worker", "--concurrency", str(concurrency)]
            with (workdir / f"worker-{i}.log").open("wb") as sink:
                procs.append(
                    subprocess.Popen(command, cwd=workdir, env=env, stdout=sink, stderr=sink)
                )
        yield procs
    finally:
        for proc in procs:
            stop_process(proc, timeout=60)


# --- databases ---------------------------------------------------------------------------


@contextmanager
def sqlite_url(workdir: Path) -> Iterator[str]:
    yield f"sqlite+aiosqlite:///{workdir / 'bench.db'}"


def postgres_url(server_url: str) -> AbstractContextManager[str]:
    """A throwaway database on the server of ``server_url``."""
    from tests.databases import throwaway_database

    return throwaway_database(server_url, prefix="fathom_bench")


def sync_url(url: str) -> str:
    """The same database through a synchronous driver (the bench reads it directly)."""
    return url.replace("sqlite+aiosqlite://", "sqlite://", 1)


def runs_by_dedupe_key(url: str, keys: list[str]) -> dict[str, str]:
    """``dedupe_key -> status`` for the keys that have a run row."""
    from sqlalchemy import bindparam, create_engine, text

    engine = create_engine(sync_url(url))
    query = text(
        "SELECT dedupe_key, status FROM research_runs WHERE dedupe_key IN :keys"
    ).bindparams(bindparam("keys", expanding=True))
    found: dict[str, str] = {}
    try:
        with engine.connect() as conn:
            for i in range(0, len(keys), 500):
                for key, status in conn.execute(query, {"keys": keys[i : i + 500]}):
                    found[str(key)] = str(status)
    finally:
        engine.dispose()
    return found


def count_runs(url: str) -> dict[str, int]:
    from sqlalchemy import create_engine, text

    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT status, count(*) FROM research_runs GROUP BY status"))
            return {str(status): int(n) for status, n in rows}
    finally:
        engine.dispose()


# --- load --------------------------------------------------------------------------------


def dedupe_key(trigger_id: str) -> str:
    return f"slack:cmd:{TEAM}:{trigger_id}"


@dataclass
class Sample:
    trigger_id: str
    started: float  # seconds since the load began
    latency: float  # seconds, request sent -> response body read
    status: int  # HTTP status; 0 = transport error / timeout
    accepted: bool  # 200 with the "On it" reply: the user was told the run started
    text: str = ""


@dataclass
class Load:
    samples: list[Sample] = field(default_factory=list)
    loop_lag: list[float] = field(default_factory=list)
    window: tuple[float, float] = (0.0, 0.0)  # measured window, seconds since the load began


def slash_command(trigger_id: str, user_id: str, text: str) -> tuple[bytes, dict[str, str]]:
    from tests.fakes.slack import sign, slash_command_body

    body = slash_command_body(text, trigger_id=trigger_id, user_id=user_id, team_id=TEAM)
    return body, {**sign(body, SECRET), **FORM}


async def post_command(
    client: httpx.AsyncClient, url: str, trigger_id: str, user_id: str, text: str, t0: float
) -> Sample:
    body, headers = slash_command(trigger_id, user_id, text)
    start = time.perf_counter()
    try:
        response = await client.post(url, content=body, headers=headers)
        latency = time.perf_counter() - start
        answer = ""
        if response.status_code == 200:
            try:
                answer = str(response.json().get("text") or "")
            except ValueError:
                answer = response.text[:200]
        return Sample(
            trigger_id,
            start - t0,
            latency,
            response.status_code,
            response.status_code == 200 and answer.startswith(ACCEPTED),
            answer[:200],
        )
    except httpx.HTTPError as exc:
        latency = time.perf_counter() - start
        return Sample(trigger_id, start - t0, latency, 0, False, type(exc).__name__)


async def start_background(url: str, n: int, topic: str) -> list[Sample]:
    """``n`` slash commands, 10 at a time; returns their answers."""
    t0 = time.perf_counter()
    gate = asyncio.Semaphore(10)
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:

        async def one(i: int) -> Sample:
            async with gate:
                trigger = f"bg-{i}-{uuid.uuid4().hex[:8]}"
                return await post_command(client, url, trigger, f"UBG{i:05d}", topic, t0)

        return list(await asyncio.gather(*(one(i) for i in range(n))))


async def closed_loop(
    url: str, clients: int, warmup: float, seconds: float, topic: str, request_timeout: float
) -> Load:
    """``clients`` workers, each posting its next command as soon as the last is answered."""
    load = Load()
    t0 = time.perf_counter()
    end = warmup + seconds
    load.window = (warmup, end)
    run_tag = uuid.uuid4().hex[:6]

    async def worker(c: int) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(
            trust_env=False, timeout=request_timeout, limits=limits
        ) as client:
            seq = 0
            while time.perf_counter() - t0 < end:
                trigger = f"load-{run_tag}-{c}-{seq}"
                user = f"UL{c:03d}X{seq:06d}"  # distinct per request: no per-user limit applies
                load.samples.append(await post_command(client, url, trigger, user, topic, t0))
                seq += 1

    async def lag_monitor() -> None:
        """How late this process's own event loop wakes up (inflates measured latency)."""
        while time.perf_counter() - t0 < end:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            load.loop_lag.append(time.perf_counter() - before - 0.01)

    await asyncio.gather(lag_monitor(), *(worker(c) for c in range(clients)))
    return load


# --- statistics --------------------------------------------------------------------------


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def distribution_ms(seconds: list[float]) -> dict[str, float]:
    values = sorted(seconds)
    if not values:
        return {}
    return {
        "p50": round(percentile(values, 50) * 1000, 1),
        "p90": round(percentile(values, 90) * 1000, 1),
        "p99": round(percentile(values, 99) * 1000, 1),
        "max": round(values[-1] * 1000, 1),
        "mean": round(sum(values) / len(values) * 1000, 1),
    }


def by_second(samples: list[Sample]) -> list[list[float]]:
    """Per second of the load, by request start: [second, requests, p50 ms, max ms]. Shows
    whether the tail is spread out or comes in stalls (and when)."""
    buckets: dict[int, list[float]] = {}
    for sample in samples:
        buckets.setdefault(int(sample.started), []).append(sample.latency)
    rows = []
    for second, latencies in sorted(buckets.items()):
        latencies.sort()
        rows.append(
            [
                second,
                len(latencies),
                round(percentile(latencies, 50) * 1000),
                round(latencies[-1] * 1000),
            ]
        )
    return rows


def summarize(load: Load, found: dict[str, str], background: dict[str, Any]) -> dict[str, Any]:
    lo, hi = load.window
    measured = [s for s in load.samples if lo <= s.started < hi]
    statuses = Counter(str(s.status) for s in measured)
    not_accepted = [s for s in measured if s.status == 200 and not s.accepted]
    accepted_all = [s for s in load.samples if s.accepted]
    lost = [s.trigger_id for s in accepted_all if dedupe_key(s.trigger_id) not in found]
    unanswered_with_run = [
        s.trigger_id for s in load.samples if not s.accepted and dedupe_key(s.trigger_id) in found
    ]
    return {
        "requests": len(measured),
        "requests_per_s": round(len(measured) / (hi - lo), 1),
        "latency_ms": distribution_ms([s.latency for s in measured]),
        "status_counts": dict(statuses),
        "non_200": sum(n for status, n in statuses.items() if status != "200"),
        "over_3s": sum(1 for s in measured if s.latency > SLACK_ACK_DEADLINE),
        "accepted": sum(1 for s in measured if s.accepted),
        "answered_200_not_accepted": len(not_accepted),
        "not_accepted_examples": sorted({s.text for s in not_accepted})[:5],
        # Over every request of the load (warm-up included): an ack must never lack its run.
        "accepted_total": len(accepted_all),
        "lost": len(lost),
        "lost_examples": lost[:5],
        "runs_without_ack": len(unanswered_with_run),
        "warmup_requests": sum(1 for s in load.samples if s.started < lo),
        "loadgen_loop_lag_ms": distribution_ms(load.loop_lag),
        "by_second": by_second(measured),
        "background": background,
    }


# --- one pass ----------------------------------------------------------------------------


@dataclass
class Options:
    seconds: float
    warmup: float
    clients: int
    background_runs: int
    depth: int
    max_concurrent_runs: int
    timeout: float
    workers: int = 2  # fathom worker processes of the pg-workers pass
    worker_concurrency: int = 50  # runs each worker executes at once
    py_spy: str | None = None  # path of a py-spy binary: profile the server during the window
    profile_dir: Path = ROOT / "bench" / "results"


def server_env(
    db_url: str, fakes: dict[str, Any], slack: dict[str, Any], opts: Options
) -> dict[str, str]:
    return clean_env(
        DATABASE_URL=db_url,
        OPENAI_BASE_URL=fakes["openai_base_url"],
        OPENAI_API_KEY=fakes["openai_api_key"],
        FATHOM_SEARCH="searxng",
        SEARXNG_URL=fakes["searxng_url"],
        FATHOM_SEARCH_CACHE_TTL="0",
        FATHOM_ALLOW_PRIVATE_FETCH="1",  # runs read the fake's result pages, as by default
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=slack["api_url"],
        FATHOM_USER_CONCURRENCY="100",  # the maximum; every simulated user is distinct anyway
        FATHOM_MAX_CONCURRENT_RUNS=str(opts.max_concurrent_runs),
        FATHOM_MAX_DEPTH=str(max(10, opts.depth)),
        FATHOM_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
    )


def wait_running(db_url: str, keys: list[str], timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    running = 0
    while time.monotonic() < deadline:
        found = runs_by_dedupe_key(db_url, keys)
        running = sum(1 for status in found.values() if status == "running")
        if running == len(keys):
            break
        time.sleep(0.25)
    return running


def one_pass(
    kind: str,
    db_url: str,
    workdir: Path,
    fakes: dict[str, Any],
    slack: dict[str, Any],
    pids: dict[str, int],
    opts: Options,
) -> dict[str, Any]:
    topic = f"heat pump adoption in cold climates depth={opts.depth}"
    env = server_env(db_url, fakes, slack, opts)
    on_workers = kind == "pg-workers"
    if on_workers:  # serve only acknowledges and queues; the workers execute
        env["FATHOM_QUEUE"] = "procrastinate"
    with ExitStack() as stack:
        served = stack.enter_context(fathom_serve(env, workdir))
        workers = (
            stack.enter_context(fathom_workers(env, workdir, opts.workers, opts.worker_concurrency))
            if on_workers
            else []
        )
        endpoint = f"{served.url}/slack/events"
        say(f"[{kind}] {opts.background_runs} background runs …")
        bg = asyncio.run(start_background(endpoint, opts.background_runs, topic))
        bg_keys = [dedupe_key(s.trigger_id) for s in bg if s.accepted]
        running = wait_running(db_url, bg_keys) if bg_keys else 0
        say(f"[{kind}] {len(bg_keys)} accepted, {running} running; load for {opts.seconds} s …")
        if len(bg_keys) != opts.background_runs or running != len(bg_keys):
            raise RuntimeError(
                f"background runs not all in progress ({len(bg_keys)} accepted, {running} "
                f"running):\n{served.stderr_tail()}"
            )

        procs = {"server": served.proc.pid, **pids}
        procs.update({f"worker{i}": w.pid for i, w in enumerate(workers)})
        cpu_before = {name: cpu_seconds(pid) for name, pid in procs.items()}
        on_postgres = kind != "sqlite"
        pg_before = postgres_cpu_seconds() if on_postgres else 0.0
        activity_before = database_activity(db_url) if on_postgres else {}
        self_before = self_cpu_seconds()
        profiler = start_profiler(opts, kind, served.proc.pid)
        wall = time.perf_counter()
        load = asyncio.run(
            closed_loop(
                endpoint,
                opts.clients,
                opts.warmup,
                opts.seconds,
                topic,
                request_timeout=opts.timeout,
            )
        )
        wall = time.perf_counter() - wall
        profile = finish_profiler(profiler)
        cpu = {
            name: round((cpu_seconds(pid) - cpu_before[name]) / wall, 2)
            for name, pid in procs.items()
        }
        cpu["loadgen"] = round((self_cpu_seconds() - self_before) / wall, 2)
        database: dict[str, float] = {}
        if on_postgres:  # what the database did in the window, per second
            cpu["postgres"] = round((postgres_cpu_seconds() - pg_before) / wall, 2)
            activity = database_activity(db_url)
            database = {
                f"{name}_per_s": round((activity[name] - activity_before[name]) / wall, 1)
                for name in activity
            }
        bg_status = Counter(runs_by_dedupe_key(db_url, bg_keys).values())
        statuses_at_end = count_runs(db_url)
        stop_started = time.perf_counter()
        code = stop_process(served.proc, timeout=60)
        stopped_in = time.perf_counter() - stop_started
        worker_codes = [stop_process(w, timeout=60) for w in workers]

    keys = [dedupe_key(s.trigger_id) for s in load.samples]
    found = runs_by_dedupe_key(db_url, keys)
    background = {
        "started": len(bg_keys),
        "running_when_load_began": running,
        "status_when_load_ended": dict(bg_status),
        "ack_latency_ms": distribution_ms([s.latency for s in bg]),
    }
    result = summarize(load, found, background)
    result["run_statuses_when_load_ended"] = statuses_at_end
    result["cpu_cores_used_during_load"] = cpu
    if database:
        result["database_during_load"] = database
    result["server_exit_code"] = code
    result["server_stop_seconds"] = round(stopped_in, 1)
    result["server_command"] = " ".join(served.command)
    result["server_log"] = log_summary(served.log)
    if on_workers:
        result["workers"] = {
            "count": opts.workers,
            "concurrency": opts.worker_concurrency,
            "exit_codes": worker_codes,
            "logs": [log_summary(workdir / f"worker-{i}.log") for i in range(opts.workers)],
        }
    if profile is not None:
        result["server_profile"] = profile
    return result


def log_summary(log: Path) -> dict[str, Any]:
    """Warnings and errors the server logged (its log lives in the deleted temp dir), and for
    each traceback the log message that carried it and the innermost Fathom frame."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    messages: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    context, frame = "", ""
    for line in lines:
        if " WARNING " in line or " ERROR " in line:
            context = line.split(" ", 3)[-1][:100]  # "<level> <logger>: <message>"
            messages[context] += 1
            frame = ""
        elif line.startswith('  File "') and str(ROOT) in line and "/.venv/" not in line:
            path, _, rest = line.partition('", line ')
            frame = f"{Path(path[8:]).relative_to(ROOT)} {rest.split(', in ')[-1]}"
        elif line and not line.startswith((" ", "Traceback", "The above", "During handling")):
            if ":" in line and line.split(":", 1)[0].endswith(("Error", "Exception", "Cancelled")):
                failures[f"{line[:90]} @ {frame or '?'} ({context[:60]})"] += 1
    return {
        "lines": len(lines),
        "database_is_locked": sum(1 for line in lines if "database is locked" in line),
        "messages": messages.most_common(8),
        "exceptions": failures.most_common(10),
    }


def start_profiler(
    opts: Options, kind: str, pid: int
) -> tuple[subprocess.Popen[bytes], Path] | None:
    """``py-spy record`` of the server over warm-up + window (collapsed stacks, no GIL
    filter: time waiting in the event loop's ``select`` shows up as idle)."""
    if not opts.py_spy:
        return None
    out = opts.profile_dir / f"slack_ack_{kind}.pyspy.txt"
    duration = str(int(opts.warmup + opts.seconds))
    command = [opts.py_spy, "record", "--pid", str(pid), "--duration", duration, "--rate", "250"]
    command += ["--format", "raw", "--nonblocking", "--idle", "--output", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, out


def finish_profiler(profiler: tuple[subprocess.Popen[bytes], Path] | None) -> str | None:
    if profiler is None:
        return None
    proc, out = profiler
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        stop_process(proc)
    return str(out) if out.exists() else None


# --- report ------------------------------------------------------------------------------


def markdown_table(results: dict[str, Any]) -> str:
    lines = ["| metric | goal | result | met? |", "|---|---|---|---|"]
    for kind, r in results["passes"].items():
        lat = r["latency_ms"]
        p99_ok = lat["p99"] < GOALS["p99_ms"]
        lost_ok = r["lost"] == 0
        rows = [
            ("p50 ack latency", "—", f"{lat['p50']:.0f} ms", "—"),
            ("p90 ack latency", "—", f"{lat['p90']:.0f} ms", "—"),
            ("p99 ack latency", "< 300 ms", f"{lat['p99']:.0f} ms", "yes" if p99_ok else "**no**"),
            ("max ack latency", "—", f"{lat['max']:.0f} ms", "—"),
            ("requests/s", "—", f"{r['requests_per_s']:.0f} ({r['requests']} in window)", "—"),
            ("non-200 answers", "0", str(r["non_200"]), "yes" if r["non_200"] == 0 else "**no**"),
            (
                "200 but not accepted",
                "0",
                str(r["answered_200_not_accepted"]),
                "yes" if r["answered_200_not_accepted"] == 0 else "**no**",
            ),
            (
                "lost (acked, no run row)",
                "0",
                f"{r['lost']} of {r['accepted_total']} acked",
                "yes" if lost_ok else "**no**",
            ),
        ]
        for metric, goal, value, met in rows:
            lines.append(f"| {kind}: {metric} | {goal} | {value} | {met} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slack_ack", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=2.0, help="load before the window")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--background-runs", type=int, default=100)
    parser.add_argument("--llm-latency", type=float, default=4.0)
    parser.add_argument("--search-latency", type=float, default=0.3)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument(
        "--max-concurrent-runs", type=int, default=100, help="FATHOM_MAX_CONCURRENT_RUNS"
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="per-request client timeout")
    parser.add_argument(
        "--databases",
        default="sqlite,postgresql,pg-workers",
        help="passes to run; postgresql and pg-workers need TEST_DATABASE_URL (skipped without)",
    )
    parser.add_argument("--workers", type=int, default=2, help="fathom workers (pg-workers)")
    parser.add_argument(
        "--worker-concurrency", type=int, default=50, help="runs per worker (pg-workers)"
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--py-spy", help="py-spy binary: profile the server in the window")
    parser.add_argument("--child-slack", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_slack:
        return serve_fake_slack()

    opts = Options(
        seconds=args.seconds,
        warmup=args.warmup,
        clients=args.clients,
        background_runs=args.background_runs,
        depth=args.depth,
        max_concurrent_runs=args.max_concurrent_runs,
        timeout=args.timeout,
        workers=args.workers,
        worker_concurrency=args.worker_concurrency,
        py_spy=args.py_spy,
        profile_dir=args.output.parent,
    )
    pg_server = os.environ.get("TEST_DATABASE_URL")
    wanted = [kind.strip() for kind in args.databases.split(",") if kind.strip()]
    if unknown := set(wanted) - {"sqlite", "postgresql", "pg-workers"}:
        parser.error(f"unknown database kind(s): {', '.join(sorted(unknown))}")
    kinds = [kind for kind in wanted if kind == "sqlite" or pg_server]
    command = "python -m bench.slack_ack " + shlex.join(argv if argv is not None else sys.argv[1:])
    if pg_server and set(kinds) - {"sqlite"}:
        command = "TEST_DATABASE_URL=<set> " + command
    results: dict[str, Any] = {
        "machine": machine(),
        "command": command.strip(),
        "goals": GOALS,
        "settings": {
            "seconds": opts.seconds,
            "warmup_seconds": opts.warmup,
            "clients": opts.clients,
            "background_runs": opts.background_runs,
            "depth": opts.depth,
            "llm_latency_s": args.llm_latency,
            "search_latency_s": args.search_latency,
            "FATHOM_MAX_CONCURRENT_RUNS": opts.max_concurrent_runs,
            "FATHOM_USER_CONCURRENCY": 100,
            "FATHOM_SEARCH_CACHE_TTL": 0,
            "FATHOM_ALLOW_PRIVATE_FETCH": 1,
            "client_timeout_s": opts.timeout,
            "pg_workers": {"workers": opts.workers, "concurrency": opts.worker_concurrency},
        },
        "passes": {},
    }
    fakes_args = [
        "tests.fakes",
        "--llm-latency",
        str(args.llm_latency),
        "--search-latency",
        str(args.search_latency),
    ]
    with ExitStack() as stack:
        fakes, fakes_pid = stack.enter_context(child(fakes_args, clean_env()))
        slack, slack_pid = stack.enter_context(
            child(["bench.slack_ack", "--child-slack"], clean_env())
        )
        pids = {"fakes": fakes_pid, "fake_slack": slack_pid}
        for kind in kinds:
            with tempfile.TemporaryDirectory(prefix="fathom-slack-ack-") as tmp:
                workdir = Path(tmp)
                db = sqlite_url(workdir) if kind == "sqlite" else postgres_url(str(pg_server))
                with db as db_url:
                    result = one_pass(kind, db_url, workdir, fakes, slack, pids, opts)
            results["passes"][kind] = result
            say(json.dumps(result, indent=1))
    results["table"] = markdown_table(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(results["table"])
    met = all(
        r["latency_ms"]["p99"] < GOALS["p99_ms"] and r["lost"] == 0
        for r in results["passes"].values()
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
