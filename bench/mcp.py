"""Fathom as an MCP tool (issue 57): how soon a caller sees progress, and what a research
costs through MCP against the same research from the CLI.

    python -m bench.mcp [--runs 5] [--llm-latency 0.4] [--search-latency 0.3]

The LLM and search fakes run in this process (the LLM at ``--llm-latency`` seconds a call, the
search at ``--search-latency``, as rows (b) and (e) of bench/engine.py); Fathom runs as its
installed entry point in subprocesses, on one SQLite file migrated before timing, with no page
reading (``FATHOM_READ_PAGES=0``) and no search cache. Every run is a depth-3 research on a
topic of its own (a new thread).

- first progress: from the official client sending ``tools/call`` (``mcp.client.client.Client``
  over stdio, its ``progress_callback``) to the first ``notifications/progress`` reaching it,
  in a ``fathom mcp`` that already served one warm-up call. Goal: under 1 s.
- MCP, warm: ``tools/call`` to its result, in that same server (what an assistant that keeps
  Fathom running waits).
- MCP, cold: from spawning ``fathom mcp`` to its exit: start, ``initialize``, the call, its
  result, the session closed (what an assistant that starts Fathom for one research waits).
- CLI: ``fathom research "<topic>" --depth 3 --json`` from spawning to exit.
- Start-up, cold MCP and CLI: from spawning to the process's first model request (the fake
  LLM's record of it), where the two differ only by what each does before its research; and
  for ``fathom mcp``, from spawning to the ``initialize`` answer.

The four alternate, one run at a time. Goal (issue 57): MCP (cold) at most 1.05x the CLI.
Results go to ``bench/results/mcp.json``; the Markdown table is printed for the README.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import cpu_model
from tests.env import clean_environ

if TYPE_CHECKING:
    from tests.fakes import FakeLLMServer

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "mcp.json"
FATHOM = Path(sys.executable).with_name("fathom")


def topic() -> str:
    return f"cold-climate heat pumps {uuid.uuid4().hex[:8]}"


def environment(llm_url: str, search_url: str, database_url: str) -> dict[str, str]:
    env = clean_environ()
    env.pop("TEST_DATABASE_URL", None)
    env.update(
        OPENAI_BASE_URL=llm_url,
        OPENAI_API_KEY="fake-key",
        FATHOM_SEARCH="searxng",
        SEARXNG_URL=search_url,
        DATABASE_URL=database_url,
        FATHOM_SEARCH_CACHE_TTL="0",
        FATHOM_READ_PAGES="0",
        FATHOM_LLM_MAX_RETRIES="1",
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
    )
    return env


class FirstProgress:
    """When the call's first progress notification arrived."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.count = 0

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.count += 1
        if self.at is None:
            self.at = time.perf_counter()


async def mcp_calls(env: dict[str, str], cwd: Path, runs: int) -> list[dict[str, float]]:
    """One ``fathom mcp``: a warm-up call, then ``runs`` timed calls."""
    from mcp import StdioServerParameters
    from mcp.client.client import Client

    params = StdioServerParameters(command=str(FATHOM), args=["mcp"], env=env, cwd=str(cwd))
    timed: list[dict[str, float]] = []
    async with Client(params) as client:
        await client.call_tool("research", {"topic": topic(), "depth": 1})
        for _ in range(runs):
            progress = FirstProgress()
            started = time.perf_counter()
            result = await client.call_tool(
                "research", {"topic": topic(), "depth": 3}, None, progress
            )
            ended = time.perf_counter()
            if result.is_error or progress.at is None:
                raise RuntimeError(f"the call failed or showed no progress: {result}")
            timed.append(
                {
                    "first_progress": progress.at - started,
                    "warm": ended - started,
                    "notifications": progress.count,
                }
            )
    return timed


def first_request(llm: FakeLLMServer, since: float) -> float:
    """Seconds from ``since`` (``time.time()``) to the first model request made after it."""
    return min(r.time for r in llm.fake.requests if r.time >= since) - since


async def mcp_cold(env: dict[str, str], cwd: Path, llm: FakeLLMServer) -> dict[str, float]:
    """Spawn ``fathom mcp``, initialize, one research, its result, exit."""
    from mcp import StdioServerParameters
    from mcp.client.client import Client

    params = StdioServerParameters(command=str(FATHOM), args=["mcp"], env=env, cwd=str(cwd))
    spawned = time.time()
    started = time.perf_counter()
    async with Client(params) as client:
        initialized = time.perf_counter() - started
        result = await client.call_tool("research", {"topic": topic(), "depth": 3})
        if result.is_error:
            raise RuntimeError(f"the call failed: {result}")
    return {
        "cold": time.perf_counter() - started,
        "initialize": initialized,
        "start": first_request(llm, spawned),
    }


def cli_run(env: dict[str, str], cwd: Path, llm: FakeLLMServer) -> dict[str, float]:
    spawned = time.time()
    started = time.perf_counter()
    done = subprocess.run(
        [str(FATHOM), "research", topic(), "--depth", "3", "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"fathom research failed: {done.stderr[-2000:]}")
    return {"cli": elapsed, "start": first_request(llm, spawned)}


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


async def main(argv: list[str] | None = None) -> int:
    from tests.fakes import FakeLLMServer, FakeSearchServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--llm-latency", type=float, default=0.4)
    parser.add_argument("--search-latency", type=float, default=0.3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeLLMServer() as llm,
        FakeSearchServer() as search,
    ):
        cwd = Path(tmp)
        env = environment(llm.base_url, search.url, f"sqlite:///{cwd / 'fathom.db'}")
        await asyncio.to_thread(
            subprocess.run, [str(FATHOM), "db", "upgrade"], env=env, cwd=cwd, check=True
        )
        cli_run(env, cwd, llm)  # warm-up (byte-compiled modules, the OS's caches)
        llm.fake.latency, search.fake.latency = args.llm_latency, args.search_latency
        calls: list[dict[str, float]] = []
        colds: list[dict[str, float]] = []
        clis: list[dict[str, float]] = []
        for _ in range(args.runs):
            calls += await mcp_calls(env, cwd, 1)
            colds.append(await mcp_cold(env, cwd, llm))
            clis.append(await asyncio.to_thread(cli_run, env, cwd, llm))
    first = [c["first_progress"] for c in calls]
    warm = [c["warm"] for c in calls]
    cold = [c["cold"] for c in colds]
    cli = [c["cli"] for c in clis]
    initialize = [c["initialize"] for c in colds]
    cold_start = [c["start"] for c in colds]
    cli_start = [c["start"] for c in clis]
    report: dict[str, Any] = {
        "runs": args.runs,
        "llm_latency": args.llm_latency,
        "search_latency": args.search_latency,
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "first_progress_s": [round(v, 3) for v in first],
        "mcp_warm_s": [round(v, 3) for v in warm],
        "mcp_cold_s": [round(v, 3) for v in cold],
        "cli_s": [round(v, 3) for v in cli],
        "mcp_cold_initialize_s": [round(v, 3) for v in initialize],
        "mcp_cold_start_s": [round(v, 3) for v in cold_start],
        "cli_start_s": [round(v, 3) for v in cli_start],
        "notifications": [c["notifications"] for c in calls],
        "median": {
            "first_progress_s": median(first),
            "mcp_warm_s": median(warm),
            "mcp_cold_s": median(cold),
            "cli_s": median(cli),
            "mcp_cold_initialize_s": median(initialize),
            "mcp_cold_start_s": median(cold_start),
            "cli_start_s": median(cli_start),
        },
    }
    report["ratio_cold_to_cli"] = round(median(cold) / median(cli), 3)
    report["ratio_warm_to_cli"] = round(median(warm) / median(cli), 3)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    m = report["median"]
    print("| measure | median | goal |\n|---|---|---|")
    print(f"| first progress after tools/call | {m['first_progress_s']:.3f} s | < 1 s |")
    print(f"| MCP, warm: tools/call -> result | {m['mcp_warm_s']:.3f} s | |")
    print(f"| MCP, cold: spawn -> exit | {m['mcp_cold_s']:.3f} s | |")
    print(f"| CLI: spawn -> exit | {m['cli_s']:.3f} s | |")
    print(f"| MCP, cold: spawn -> initialize answered | {m['mcp_cold_initialize_s']:.3f} s | |")
    print(f"| MCP, cold: spawn -> first model request | {m['mcp_cold_start_s']:.3f} s | |")
    print(f"| CLI: spawn -> first model request | {m['cli_start_s']:.3f} s | |")
    print(f"| MCP cold / CLI | {report['ratio_cold_to_cli']:.3f}x | <= 1.05x |")
    print(f"| MCP warm / CLI | {report['ratio_warm_to_cli']:.3f}x | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
