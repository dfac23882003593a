"""Calling the ``fathom`` command line from tests: in this process, or as a process.

Most CLI tests check what a command prints and its exit code for some settings and input;
a process adds nothing to those but a second of start-up per call. :func:`fathom` runs the
command's typer app in this process, with exactly the given environment and working folder
(restored afterwards, with the logging set-up the command changed). Signals, the ``os._exit``
at the end of :func:`bots.cli.main` and the installed entry point need a real process:
:func:`fathom_process` and :func:`start_fathom` give one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

#: The ``fathom`` script that installing the project made, beside this Python.
ENTRY_POINT = Path(sys.executable).with_name("fathom")
#: Loggers whose level ``core.logs.configure_logging`` sets.
_CONFIGURED_LOGGERS = ("", "httpx", "httpcore", "openai", "primp")


@contextmanager
def _as_a_process_would(env: dict[str, str], cwd: Path) -> Iterator[None]:
    """This process's environment is ``env`` and its folder ``cwd``; the logging set-up is
    put back as it was afterwards."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    loggers = [logging.getLogger(name) for name in _CONFIGURED_LOGGERS]
    saved_logging = [(logger.handlers[:], logger.level) for logger in loggers]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for logger, (handlers, level) in zip(loggers, saved_logging, strict=True):
            logger.handlers[:] = handlers
            logger.setLevel(level)


def _invoke(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    from typer.testing import CliRunner

    from bots.cli import app

    result = CliRunner().invoke(app, list(args), catch_exceptions=True)
    stderr, code = result.stderr, result.exit_code
    exception = result.exception
    if exception is not None and not isinstance(exception, SystemExit):
        # What the entry point does with a bug: the traceback on stderr, exit 1.
        assert result.exc_info is not None
        stderr += "".join(traceback.format_exception(*result.exc_info))
        code = 1
    return subprocess.CompletedProcess(["fathom", *args], code, result.stdout, stderr)


def fathom(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``fathom ARGS`` in this process, as if run with environment ``env`` in folder ``cwd``:
    its exit code, stdout and stderr. Called from a coroutine, the command runs in a thread
    of its own (it runs its own event loop) while the caller's loop waits."""
    with _as_a_process_would(env, cwd):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _invoke(args)
        with ThreadPoolExecutor(max_workers=1) as thread:
            return thread.submit(_invoke, args).result()


def fathom_process(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``fathom ARGS`` run by the installed entry point (``bots.cli:main``, its ``os._exit``),
    as a process of its own."""
    return subprocess.run(
        [str(ENTRY_POINT), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_fathom(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """``python -m bots.cli ARGS`` started, for tests that signal it or read it as it runs."""
    return subprocess.Popen(
        [sys.executable, "-m", "bots.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for_stderr(proc: subprocess.Popen[bytes], needle: str, timeout: float = 120) -> str:
    """Read the process's stderr until ``needle`` shows up; everything read so far."""
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while needle.encode() not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None:
            raise AssertionError(f"{needle!r} not seen on stderr; got:\n{seen.decode()}")
        ready, _, _ = select.select([proc.stderr], [], [], remaining)
        if ready:
            seen += os.read(proc.stderr.fileno(), 65536)  # unbuffered: no line is held back
    return seen.decode()


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)
