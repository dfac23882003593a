"""Throughput of ``fathom worker`` processes (``FATHOM_QUEUE=procrastinate``) on PostgreSQL.

    TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test python -m bench.queue

For 1, 2 and 4 workers (``--concurrency 10`` each), on a fresh throwaway database: the workers
are started and idle, then 200 Slack research runs (depth 3) are queued, each in the
transaction that creates it; the clock runs from the first run queued to the last run
delivered (its report posted to the fake Slack). The fake LLM answers in 400 ms and the fake
search in 300 ms (``python -m tests.fakes`` in its own process; result pages read from it).
Reported: runs per minute, the speed-up over one worker, and each worker's peak RSS over its
idle RSS divided by its concurrency (memory per concurrent run). Results go to
``bench/results/queue.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import cpu_model
from bench.slack_ack import child, clean_env, stop_process
from tests.test_slack_app import BOT_TOKEN, SECRET

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "queue.json"
FATHOM = Path(sys.executable).with_name("fathom")
RUNS, DEPTH, CONCURRENCY = 200, 3, 10
GOAL = 3.5  # 4 workers at least 3.5 times one


def rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def queue_runs(url: str, n: int) -> None:
    from core.operations.queue import queue_in_transaction
    from core.research.requests import ResearchRequest, submit_run
    from core.values import ThreadKey
    from storage import Database, Store

    database = Database(url)
    store = Store(database, on_new_run=queue_in_transaction)
    try:
        for i in range(n):
            # A workspace per run: Slack allows a workspace about 50 message edits a minute
            # (each process keeps to that), which would otherwise be what is measured.
            thread = ThreadKey(
                platform="slack",
                workspace=f"T{i:05d}",
                channel=f"C{i:05d}",
                thread=f"1700000000.{i:06d}",
            )
            request = ResearchRequest(
                topic=f"offshore wind {i}", depth=DEPTH, thread=thread, requested_by=f"U{i:05d}"
            )
            await submit_run(store, request)
    finally:
        await database.dispose()


def delivered(url: str) -> int:
    import psycopg

    from core.operations.queue import conninfo

    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM research_runs WHERE status = 'succeeded' AND delivery = 'posted'"
        ).fetchone()
    return int(row[0]) if row else 0


def one_pass(workers: int, env: dict[str, str], server_url: str, workdir: Path) -> dict[str, Any]:
    from storage import Database
    from tests.databases import throwaway_database

    with throwaway_database(server_url, prefix="fathom_bench_queue") as url:
        asyncio.run(Database(url).upgrade())
        penv = {**env, "DATABASE_URL": url}
        procs = []
        for i in range(workers):
            log = (workdir / f"worker-{workers}-{i}.log").open("wb")
            procs.append(
                subprocess.Popen(
                    [str(FATHOM), "worker", "--concurrency", str(CONCURRENCY)],
                    cwd=workdir,
                    env=penv,
                    stdout=log,
                    stderr=log,
                )
            )
        try:
            time.sleep(5)  # started and idle (imports, connections, the first sweep)
            idle = [rss_kb(p.pid, "VmRSS") for p in procs]
            started = time.monotonic()
            asyncio.run(queue_runs(url, RUNS))
            while (done := delivered(url)) < RUNS:
                if time.monotonic() - started > 900:
                    raise RuntimeError(f"only {done} of {RUNS} runs finished in 15 minutes")
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError("a worker exited during the benchmark")
                time.sleep(0.2)
            seconds = time.monotonic() - started
            peak = [rss_kb(p.pid, "VmHWM") for p in procs]
        finally:
            for proc in procs:
                stop_process(proc, timeout=30)
    per_run_mb = [(hwm - base) / 1024 / CONCURRENCY for hwm, base in zip(peak, idle, strict=True)]
    return {
        "workers": workers,
        "seconds": round(seconds, 2),
        "runs_per_minute": round(RUNS / seconds * 60, 1),
        "idle_rss_mb": [round(k / 1024, 1) for k in idle],
        "peak_rss_mb": [round(k / 1024, 1) for k in peak],
        "mb_per_concurrent_run": round(max(per_run_mb), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queue", description=__doc__)
    parser.add_argument("--workers", default="1,2,4")
    args = parser.parse_args(argv)
    server_url = os.environ.get("TEST_DATABASE_URL")
    if not server_url:
        print("TEST_DATABASE_URL must point at a PostgreSQL server", file=sys.stderr)
        return 2
    counts = [int(n) for n in args.workers.split(",")]
    results: dict[str, Any] = {
        "command": "python -m bench.queue",
        "cpu": cpu_model(),
        "nproc": os.cpu_count(),
        "runs": RUNS,
        "depth": DEPTH,
        "concurrency": CONCURRENCY,
        "passes": [],
    }
    fakes_cmd = ["tests.fakes", "--llm-latency", "0.4", "--search-latency", "0.3"]
    with (
        child(fakes_cmd, clean_env()) as (fakes, _),
        child(["bench.slack_ack", "--child-slack"], clean_env()) as (slack, _),
        tempfile.TemporaryDirectory(prefix="fathom-bench-queue-") as tmp,
    ):
        env = clean_env(
            OPENAI_BASE_URL=fakes["openai_base_url"],
            OPENAI_API_KEY=fakes["openai_api_key"],
            FATHOM_SEARCH="searxng",
            SEARXNG_URL=fakes["searxng_url"],
            FATHOM_SEARCH_CACHE_TTL="0",
            FATHOM_PAGE_CACHE_TTL="0",
            FATHOM_ALLOW_PRIVATE_FETCH="1",
            FATHOM_QUEUE="procrastinate",
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=slack["api_url"],
            FATHOM_SLACK_EDIT_INTERVAL="0.05",
            FATHOM_LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
        )
        for workers in counts:
            print(f"{workers} worker(s): {RUNS} runs …", file=sys.stderr, flush=True)
            outcome = one_pass(workers, env, server_url, Path(tmp))
            print(json.dumps(outcome), file=sys.stderr, flush=True)
            results["passes"].append(outcome)
    base = results["passes"][0]["runs_per_minute"]
    for outcome in results["passes"]:
        outcome["speedup"] = round(outcome["runs_per_minute"] / base, 2)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print("| workers | runs/min | speed-up | MB per concurrent run |")
    print("|---|---|---|---|")
    for o in results["passes"]:
        cells = (o["workers"], o["runs_per_minute"], o["speedup"], o["mb_per_concurrent_run"])
        print("| " + " | ".join(str(c) for c in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
