"""The dedicated fuzz run: ``python -m bench.fuzz [--examples N]`` (default 10,000 per route).

Runs tests/test_fuzz_routes.py with ``FUZZ_EXAMPLES`` cases per route of ``fathom serve``,
writes the per-route status counts to bench/results/fuzz.json and prints them as a table.
The exit code is pytest's: 0 only when no case got a 5xx or stored anything unsigned.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "fuzz.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__)
    parser.add_argument("--examples", type=int, default=10_000, help="cases per route")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    counts = args.output.with_suffix(".counts.json")
    env = {**os.environ, "FUZZ_EXAMPLES": str(args.examples), "FUZZ_REPORT": str(counts)}
    started = time.monotonic()
    code = subprocess.call(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "tests/test_fuzz_routes.py",
        ],
        cwd=ROOT,
        env=env,
    )
    seconds = time.monotonic() - started
    routes = json.loads(counts.read_text()) if counts.exists() else {}
    counts.unlink(missing_ok=True)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "examples_per_route": args.examples,
        "pytest_exit_code": code,
        "seconds": round(seconds, 1),
        "routes": routes,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print("\n| route | cases | 5xx | statuses |\n|---|---|---|---|")
    for route, statuses in routes.items():
        total = sum(statuses.values())
        errors = sum(n for status, n in statuses.items() if status.startswith("5"))
        shown = ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))
        print(f"| `{route}` | {total:,} | {errors} | {shown} |")
    print(f"\n{seconds:.0f} s, pytest exit code {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
