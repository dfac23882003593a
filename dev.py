#!/usr/bin/env python3
"""Bootstrap for a fresh clone: needs only Python 3.11+ (standard library only).

    python3 dev.py research "TOPIC" [--depth N] [fathom research options]
    python3 dev.py eval QUESTIONS.jsonl [fathom eval options]   (or --judge-check [PAIRS.jsonl])
    python3 dev.py test [pytest options]      (-n auto unless you pass -n, --pdb or --lf)
    python3 dev.py lint                       (ruff, mypy and the import contract)
    python3 dev.py mutants [--ci | --check-snippets | --list | --only NAME]
                                       (does the suite catch each guarantee broken on purpose?)
    python3 dev.py fathom [any fathom command]

Each command first makes ``.venv`` and installs the locked dependencies
(``requirements/dev.txt``, every file checked against its hash), then the project
itself (skipped when ``pyproject.toml`` and the lock have not changed since).

    python3 dev.py lock [--upgrade]   (after a change of pyproject.toml's dependencies:
                                      the locks again, with uv; ``pip install uv`` first)

``research`` and ``eval`` run the real program. With ``OPENAI_API_KEY`` set they
talk to your endpoint (``OPENAI_BASE_URL``) and search provider (``FATHOM_SEARCH``);
without it, they start the local fake LLM and fake SearXNG from ``tests/fakes``
and point the program at them, so the whole workflow can be seen offline.
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


REQUIREMENTS = ROOT / "requirements"
#: The locks (``python3 dev.py lock``): pip itself (``pip.txt``, installed first: a pip older
#: than 23.3 refuses the other locks), the dependencies of the project (``run.txt``, what the
#: image installs), of its development (``dev.txt``: run's and the dev extra's, the same
#: versions) and of building its wheel (``build.txt``: setuptools), each pinned with hashes.
LOCKS = {
    "pip.txt": ["requirements/pip.in"],
    "dev.txt": ["pyproject.toml", "--extra", "dev"],
    "run.txt": ["pyproject.toml", "-c", "requirements/dev.txt"],
    "build.txt": ["requirements/build.in", "-c", "requirements/dev.txt"],
}


def ensure_installed() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs on whatever python3 is
        sys.exit(f"Fathom needs Python 3.11 or newer; this is {sys.version.split()[0]}.")
    inputs = (ROOT / "pyproject.toml", REQUIREMENTS / "pip.txt", REQUIREMENTS / "dev.txt")
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in inputs)).hexdigest()
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == digest:
        return
    if not PYTHON.exists():
        print("creating .venv …", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing the locked dependencies and fathom-bot into .venv …", file=sys.stderr)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    # pip itself first, by hash: the pip a venv starts with may be older than the locks need.
    subprocess.run([*pip, "--require-hashes", "-r", str(REQUIREMENTS / "pip.txt")], check=True)
    # Exactly the locked files (a release or a file changed on the index since is refused),
    # then the project alone, built with the locked setuptools.
    subprocess.run([*pip, "--require-hashes", "-r", str(REQUIREMENTS / "dev.txt")], check=True)
    subprocess.run([*pip, "--no-deps", "--no-build-isolation", "-e", str(ROOT)], check=True)
    STAMP.write_text(digest)


def lock(args: list[str]) -> int:
    """The locks again from pyproject.toml, with uv: one resolution for every platform and
    Python >= 3.11, keeping the locked versions that still fit (``--upgrade``: the newest
    its ranges allow; ``--upgrade-package NAME``: that one)."""
    import shutil

    uv = shutil.which("uv") or shutil.which("uv", path=str(BIN))
    if uv is None:
        print(
            "uv is not installed: `pip install uv` (or .venv/bin/pip install uv)", file=sys.stderr
        )
        return 2
    common = ["--universal", "--python-version", "3.11", "--generate-hashes", "--no-header", "-q"]
    for name, inputs in LOCKS.items():
        out = ["-o", f"requirements/{name}"]
        code = run([uv, "pip", "compile", *inputs, *common, *args, *out])
        if code:
            return code
    return 0


def run(args: list[str], env: dict[str, str] | None = None) -> int:
    return subprocess.call(args, cwd=ROOT, env=env)


def parallel(args: list[str]) -> list[str]:
    """``-n auto`` (pytest-xdist: a worker per CPU) unless the arguments choose otherwise
    (their own ``-n``, ``-p no:xdist``, or ``--pdb``/``--lf``, which want one process)."""
    own = ("-n", "--numprocesses", "no:xdist", "--pdb", "--lf", "--last-failed")
    return [] if any(arg.startswith(own) for arg in args) else ["-n", "auto"]


def research(args: list[str]) -> int:
    return with_fakes([str(PYTHON), "-m", "bots.cli", "research", *args], cwd=ROOT)


def evaluate(args: list[str]) -> int:
    """``fathom eval`` in the caller's folder (its QUESTIONS, ``-o`` and ``--compare`` paths
    are the caller's), offline as ``research`` is; the fake verifier then reads each claim
    and its evidence (``--judge literal``), so ``--judge-check`` measures a judge that reads."""
    fathom = [str(PYTHON), "-m", "bots.cli", "eval", *args]
    return with_fakes(fathom, cwd=Path.cwd(), fakes=["--judge", "literal"])


def with_fakes(command: list[str], *, cwd: Path, fakes: list[str] | None = None) -> int:
    """``command`` against your endpoint when ``OPENAI_API_KEY`` is set, else against the
    local fake LLM and fake SearXNG (``python -m tests.fakes`` with ``fakes``), started for it
    and stopped after, with the demo database (``fathom-demo.db`` here) unless
    ``DATABASE_URL`` names another."""
    if os.environ.get("OPENAI_API_KEY"):
        return subprocess.call(command, cwd=cwd)
    print(
        "OPENAI_API_KEY is not set: running against the local fake LLM and fake search "
        "(set OPENAI_API_KEY / OPENAI_BASE_URL to use a real endpoint).",
        file=sys.stderr,
    )
    started = subprocess.Popen(
        [str(PYTHON), "-m", "tests.fakes", *(fakes or [])],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert started.stdout is not None
        urls = json.loads(started.stdout.readline())
        env = dict(os.environ)
        env.update(
            OPENAI_API_KEY=urls["openai_api_key"],
            OPENAI_BASE_URL=urls["openai_base_url"],
            FATHOM_SEARCH="searxng",
            SEARXNG_URL=urls["searxng_url"],
            FATHOM_ALLOW_PRIVATE_FETCH="1",  # the fake search's result pages are on 127.0.0.1
        )
        env.setdefault("DATABASE_URL", f"sqlite+aiosqlite:///{ROOT / 'fathom-demo.db'}")
        return subprocess.call(command, cwd=cwd, env=env)
    finally:
        started.terminate()
        started.wait(timeout=10)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "lock":
        return lock(rest)
    ensure_installed()
    if command == "research":
        return research(rest)
    if command == "eval":
        return evaluate(rest)
    if command == "test":
        return run([str(PYTHON), "-m", "pytest", *parallel(rest), *rest])
    if command == "lint":
        checks = [
            [str(PYTHON), "-m", "ruff", "check", "."],
            [str(PYTHON), "-m", "ruff", "format", "--check", "."],
            [str(PYTHON), "-m", "mypy"],
        ]
        codes = [run(c) for c in checks]
        # core's layers import downward only: pyproject.toml's [tool.importlinter] contracts,
        # checked on this tree (not on whatever copy an editable install points at)
        lint_imports = "from importlinter.cli import lint_imports_command; lint_imports_command()"
        imports = [str(PYTHON), "-c", lint_imports, "--no-cache", "--no-logo"]
        codes.append(run(imports, env=dict(os.environ, PYTHONPATH=str(ROOT))))
        return max(codes)
    if command == "mutants":
        return run([str(PYTHON), str(ROOT / "bench" / "mutations.py"), *rest])
    if command == "fathom":
        return run([str(PYTHON), "-m", "bots.cli", *rest])
    print(f"unknown command {command!r}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
