"""Admission under a crowd (issue 53, benchmark): simultaneous ``/research`` requests on two
``fathom serve`` replicas of one PostgreSQL database admit exactly what the per-user limits
allow, and are acknowledged fast.

    TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test python -m bench.admission
    ... python -m bench.admission --trials 20 --users 10 --per-user 10 --phases runs,concurrency

Processes: ``python -m tests.fakes`` (LLM + SearXNG), a fake Slack Web API, two ``fathom serve``
replicas (running the code of ``--code``, this checkout by default) on a throwaway PostgreSQL
database with ``FATHOM_QUEUE=procrastinate`` and no worker (they acknowledge and queue; a
queued run counts as unfinished, so nothing frees a limit during a trial and no research
competes for the CPUs), and this process, the load generator.

Each phase sets the limits (``--phases``):

- ``runs``: ``FATHOM_USER_DAILY_RUNS=2`` (``FATHOM_USER_CONCURRENCY=5``): 2 per user;
- ``concurrency``: ``FATHOM_USER_CONCURRENCY=2``: 2 per user;
- ``tokens``: ``FATHOM_USER_DAILY_TOKENS=25000`` (concurrency 5, depth 1): no run has
  succeeded, so each reserves the estimate of 10,000 tokens, the third what is left (5,000):
  3 per user.

A trial: ``--users`` new users (never seen before, so earlier trials spend none of their
quota) send ``--per-user`` signed slash commands each, every one on its own warmed-up
keep-alive connection, alternating between the replicas, all released at once by one event.
Counted per trial: the requests acknowledged with "On it", and the run rows the database holds
for the trial's dedupe keys; both must be exactly ``users x allowed``, and no request may be
answered otherwise than "On it" or a limit's refusal. The acknowledgement latency (request
sent to answer read) of every request of the phase gives p50, p99 and max.

Results go to ``bench/results/admission.json``; the Markdown table is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.slack_ack import (
    ACCEPTED,
    BOT_TOKEN,
    SECRET,
    child,
    clean_env,
    cpu_seconds,
    dedupe_key,
    distribution_ms,
    fathom_serve,
    log_summary,
    machine,
    postgres_cpu_seconds,
    postgres_url,
    runs_by_dedupe_key,
    say,
    self_cpu_seconds,
    slash_command,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "admission.json"
GOALS = {"p99_ms": 150.0, "wrong_trials": 0}
TOPIC = "heat pump adoption in cold climates depth=1"


@dataclass(frozen=True)
class Phase:
    name: str
    settings: dict[str, str]
    allowed: int  # per user
    #: What a refusal of this phase's limit starts with (Slack mrkdwn, bots/chat/replies.py).
    refusal: str


PHASES = {
    "runs": Phase(
        "runs",
        {"FATHOM_USER_DAILY_RUNS": "2", "FATHOM_USER_CONCURRENCY": "5"},
        2,
        ":warning: You have started today's 2 researches",
    ),
    "concurrency": Phase(
        "concurrency",
        {"FATHOM_USER_CONCURRENCY": "2"},
        2,
        ":hourglass: You already have 2 researches running",
    ),
    "tokens": Phase(
        "tokens",
        {"FATHOM_USER_DAILY_TOKENS": "25000", "FATHOM_USER_CONCURRENCY": "5"},
        3,
        ":warning: Today's 25,000 tokens of research are used or held",
    ),
}


@dataclass
class Answer:
    trigger_id: str
    latency: float
    status: int
    text: str


async def trial(endpoints: list[str], users: list[str], per_user: int, tag: str) -> list[Answer]:
    """Every user's ``per_user`` requests, each on its own warmed-up connection, released
    together by one event."""
    start = asyncio.Event()
    ready: list[asyncio.Event] = []

    async def one(i: int, user: str, n: int) -> Answer:
        endpoint = endpoints[i % len(endpoints)]
        trigger = f"adm-{tag}-{user}-{n}"
        body, headers = slash_command(trigger, user, TOPIC)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        # (verify=False: plain http; an SSL context with the CA bundle costs ~30 ms a client.)
        async with httpx.AsyncClient(
            trust_env=False, timeout=30, limits=limits, verify=False
        ) as client:
            await client.get(endpoint.replace("/slack/events", "/healthz"))  # connected
            ready[i].set()
            await start.wait()
            began = time.perf_counter()
            try:
                response = await client.post(endpoint, content=body, headers=headers)
            except httpx.HTTPError as exc:
                return Answer(trigger, time.perf_counter() - began, 0, type(exc).__name__)
            latency = time.perf_counter() - began
            text = ""
            if response.status_code == 200:
                try:
                    text = str(response.json().get("text") or "")
                except ValueError:
                    text = response.text[:200]
            return Answer(trigger, latency, response.status_code, text[:200])

    asked = [(user, n) for n in range(per_user) for user in users]
    ready.extend(asyncio.Event() for _ in asked)
    tasks = [asyncio.ensure_future(one(i, u, n)) for i, (u, n) in enumerate(asked)]
    await asyncio.gather(*(event.wait() for event in ready))
    start.set()
    return list(await asyncio.gather(*tasks))


def run_phase(
    phase: Phase,
    db_url: str,
    workdir: Path,
    fakes: dict[str, Any],
    slack: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, Any]:
    env = clean_env(
        DATABASE_URL=db_url,
        OPENAI_BASE_URL=fakes["openai_base_url"],
        OPENAI_API_KEY=fakes["openai_api_key"],
        FATHOM_SEARCH="searxng",
        SEARXNG_URL=fakes["searxng_url"],
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=slack["api_url"],
        FATHOM_QUEUE="procrastinate",
        FATHOM_LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
        PYTHONPATH=str(args.code),  # the servers run this checkout's code, not the install's
        **phase.settings,
    )
    wrong: list[dict[str, Any]] = []
    latencies: list[float] = []
    answers_seen: Counter[str] = Counter()
    admitted_per_trial: list[int] = []
    with ExitStack() as stack:
        first = stack.enter_context(fathom_serve(env, workdir))
        second = stack.enter_context(fathom_serve(env, workdir))
        endpoints = [f"{first.url}/slack/events", f"{second.url}/slack/events"]
        cpu = Counter[str]()
        wall = 0.0
        for number in range(args.trials):
            users = [f"U{phase.name[:3].upper()}{number:02d}{u:03d}" for u in range(args.users)]
            before = _cpu(first.proc.pid, second.proc.pid)
            began = time.perf_counter()
            answers = asyncio.run(trial(endpoints, users, args.per_user, f"{phase.name}{number}"))
            wall += time.perf_counter() - began
            cpu.update({k: v - before[k] for k, v in _cpu(first.proc.pid, second.proc.pid).items()})
            latencies += [a.latency for a in answers]
            acked = [a for a in answers if a.status == 200 and a.text.startswith(ACCEPTED)]
            others = [a for a in answers if a not in acked]
            for answer in answers:
                kind = "accepted" if answer in acked else answer.text[:60] or str(answer.status)
                answers_seen[kind] += 1
            found = runs_by_dedupe_key(db_url, [dedupe_key(a.trigger_id) for a in answers])
            expected = args.users * phase.allowed
            strange = [a for a in others if not a.text.startswith(phase.refusal)]
            admitted_per_trial.append(len(acked))
            if len(acked) != expected or len(found) != expected or strange:
                wrong.append(
                    {
                        "trial": number,
                        "acknowledged": len(acked),
                        "run_rows": len(found),
                        "expected": expected,
                        "other_answers": sorted({a.text or str(a.status) for a in strange})[:5],
                    }
                )
            say(
                f"[{phase.name}] trial {number + 1}/{args.trials}: {len(acked)} admitted of "
                f"{len(answers)} ({expected} allowed), {len(found)} run rows"
            )
        logs = [log_summary(first.log), log_summary(second.log)]
    return {
        "settings": phase.settings,
        "allowed_per_user": phase.allowed,
        "trials": args.trials,
        "requests_per_trial": args.users * args.per_user,
        "admitted_per_trial": admitted_per_trial,
        "wrong_trials": len(wrong),
        "wrong": wrong,
        "answers": dict(answers_seen.most_common()),
        "ack_latency_ms": distribution_ms(latencies),
        # CPU per request of the trials (connecting included), and the trials' wall time.
        "cpu_ms_per_request": {
            k: round(v / len(latencies) * 1000, 2) for k, v in sorted(cpu.items())
        },
        "trials_wall_seconds": round(wall, 1),
        "server_logs": logs,
    }


def _cpu(first: int, second: int) -> dict[str, float]:
    """CPU seconds so far of the two servers, PostgreSQL and this process (the load)."""
    return {
        "servers": cpu_seconds(first) + cpu_seconds(second),
        "postgres": postgres_cpu_seconds(),
        "load_generator": self_cpu_seconds(),
    }


def code_state(code: Path) -> dict[str, Any]:
    """Which commit the servers ran (a checkout, or an exported tree without git)."""
    import subprocess

    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=code, capture_output=True, text=True
    )
    return {"path": str(code), "commit": done.stdout.strip() if done.returncode == 0 else None}


def markdown_table(results: dict[str, Any]) -> str:
    lines = [
        "| phase (limit) | trials with exactly the allowed count | ack p50 "
        "| ack p99 (goal < 150 ms) | ack max |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in results["phases"].items():
        lat = r["ack_latency_ms"]
        exact = r["trials"] - r["wrong_trials"]
        p99 = f"{lat['p99']:.0f} ms" + ("" if lat["p99"] < GOALS["p99_ms"] else " (**not met**)")
        limit = ", ".join(f"{k}={v}" for k, v in r["settings"].items())
        lines.append(
            f"| {name} ({limit}; {r['allowed_per_user']} per user) | {exact} of {r['trials']} "
            f"| {lat['p50']:.0f} ms | {p99} | {lat['max']:.0f} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission", description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--per-user", type=int, default=10)
    parser.add_argument("--phases", default="runs,concurrency,tokens")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--code",
        type=Path,
        default=ROOT,
        help="the checkout whose code the servers run (e.g. an older commit's, for a before)",
    )
    args = parser.parse_args(argv)
    pg_server = os.environ.get("TEST_DATABASE_URL")
    if not pg_server:
        parser.error("TEST_DATABASE_URL must name a PostgreSQL server (two replicas share it)")
    wanted = [p.strip() for p in args.phases.split(",") if p.strip()]
    if unknown := set(wanted) - set(PHASES):
        parser.error(f"unknown phase(s): {', '.join(sorted(unknown))}")
    command = "TEST_DATABASE_URL=<set> python -m bench.admission " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    results: dict[str, Any] = {
        "machine": machine(),
        "command": command.strip(),
        "goals": GOALS,
        "code": code_state(args.code),
        "settings": {
            "replicas": 2,
            "users": args.users,
            "requests_per_user": args.per_user,
            "FATHOM_QUEUE": "procrastinate (no worker: runs stay queued)",
        },
        "phases": {},
    }
    with ExitStack() as stack:
        fakes, _ = stack.enter_context(child(["tests.fakes"], clean_env()))
        slack, _ = stack.enter_context(child(["bench.slack_ack", "--child-slack"], clean_env()))
        for name in wanted:
            with (
                tempfile.TemporaryDirectory(prefix="fathom-admission-") as tmp,
                postgres_url(pg_server) as db_url,
            ):
                result = run_phase(PHASES[name], db_url, Path(tmp), fakes, slack, args)
            results["phases"][name] = result
            say(json.dumps({k: v for k, v in result.items() if k != "server_logs"}, indent=1))
    results["table"] = markdown_table(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(results["table"])
    met = all(
        r["wrong_trials"] == 0 and r["ack_latency_ms"]["p99"] < GOALS["p99_ms"]
        for r in results["phases"].values()
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
