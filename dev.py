#!/usr/bin/env python3
"""Bootstrap for a fresh clone: needs only Python 3.11+ (standard library only).

    python3 dev.py research "TOPIC" [--depth N] [fathom research options]
    python3 dev.py test [pytest options]      (-n auto unless you pass -n, --pdb or --lf)
    python3 dev.py lint
    python3 dev.py mutants [--list | --only NAME]  (does the suite catch ten broken guarantees?)
    python3 dev.py fathom [any fathom command]

Each command first makes ``.venv`` and installs the project with its dev extra
(skipped when ``pyproject.toml`` has not changed since the last install).

``research`` runs the real program. With ``OPENAI_API_KEY`` set it talks to
your endpoint (``OPENAI_BASE_URL``) and search provider (``FATHOM_SEARCH``);
without it, it starts the local fake LLM and fake SearXNG from ``tests/fakes``
and points the program at them, so the whole workflow can be seen offline.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".fathom-install-stamp"


def ensure_installed() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs on whatever python3 is
        sys.exit(f"Fathom needs Python 3.11 or newer; this is {sys.version.split()[0]}.")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == digest:
        return
    if not PYTHON.exists():
        print("creating .venv …", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing fathom-bot with its dev extra into .venv …", file=sys.stderr)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(digest)


def run(args: list[str], env: dict[str, str] | None = None) -> int:
    return subprocess.call(args, cwd=ROOT, env=env)


def parallel(args: list[str]) -> list[str]:
    """``-n auto`` (pytest-xdist: a worker per CPU) unless the arguments choose otherwise
    (their own ``-n``, ``-p no:xdist``, or ``--pdb``/``--lf``, which want one process)."""
    own = ("-n", "--numprocesses", "no:xdist", "--pdb", "--lf", "--last-failed")
    return [] if any(arg.startswith(own) for arg in args) else ["-n", "auto"]


def research(args: list[str]) -> int:
    fathom = [str(PYTHON), "-m", "bots.cli", "research", *args]
    if os.environ.get("OPENAI_API_KEY"):
        return run(fathom)
    print(
        "OPENAI_API_KEY is not set: running against the local fake LLM and fake search "
        "(set OPENAI_API_KEY / OPENAI_BASE_URL to use a real endpoint).",
        file=sys.stderr,
    )
    fakes = subprocess.Popen(
        [str(PYTHON), "-m", "tests.fakes"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert fakes.stdout is not None
        urls = json.loads(fakes.stdout.readline())
        env = dict(os.environ)
        env.update(
            OPENAI_API_KEY=urls["openai_api_key"],
            OPENAI_BASE_URL=urls["openai_base_url"],
            FATHOM_SEARCH="searxng",
            SEARXNG_URL=urls["searxng_url"],
            FATHOM_ALLOW_PRIVATE_FETCH="1",  # the fake search's result pages are on 127.0.0.1
        )
        env.setdefault("DATABASE_URL", "sqlite+aiosqlite:///fathom-demo.db")
        return run(fathom, env)
    finally:
        fakes.terminate()
        fakes.wait(timeout=10)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    ensure_installed()
    if command == "research":
        return research(rest)
    if command == "test":
        return run([str(PYTHON), "-m", "pytest", *parallel(rest), *rest])
    if command == "lint":
        checks = [
            [str(PYTHON), "-m", "ruff", "check", "."],
            [str(PYTHON), "-m", "ruff", "format", "--check", "."],
            [str(PYTHON), "-m", "mypy"],
        ]
        return max(run(c) for c in checks)
    if command == "mutants":
        return run([str(PYTHON), str(ROOT / "bench" / "mutations.py"), *rest])
    if command == "fathom":
        return run([str(PYTHON), "-m", "bots.cli", *rest])
    print(f"unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
