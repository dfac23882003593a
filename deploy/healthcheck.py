"""The image's HEALTHCHECK: it checks what the container's command serves, so the one image
runs `fathom serve`, `fathom worker` and `fathom db upgrade` without marking any of them
unhealthy for a port it never opened.

- `fathom serve`: GET /healthz on its public port (``--port``, 8000 by default).
- `fathom worker --metrics-port N`: GET /metrics on N (the metrics server is a thread of
  the worker, so this says the process runs, not that it takes runs).
- anything else (a worker without a metrics port, `db upgrade`, ...): healthy while it runs;
  there is nothing to ask.

The command is read from /proc (the first process whose program or script is `fathom`).
Exit 0 healthy, 1 unhealthy (Docker's meaning). Standard library only: it runs in the
runtime image with the venv's interpreter.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

TIMEOUT = 4.0
ANY_ADDRESS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def fathom_command(proc: Path = Path("/proc")) -> list[str] | None:
    """The arguments after `fathom` of the lowest-numbered `fathom` process, or None."""
    pids = sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit())
    for pid in pids:
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        for index, arg in enumerate(argv[:2]):  # the program, or the script python runs
            if Path(arg).name == "fathom":
                return argv[index + 1 :]
    return None


def option(args: list[str], name: str) -> str | None:
    """The value of ``--name value`` or ``--name=value`` (the last one given), or None."""
    found = None
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


def probe_url(args: list[str]) -> str | None:
    """What to GET for this command, or None when there is nothing to ask."""
    if not args:
        return None
    port: str | None
    if args[0] == "serve":
        given, port, path = option(args, "--host"), option(args, "--port") or "8000", "/healthz"
    elif args[0] == "worker":
        given, port = option(args, "--metrics-host"), option(args, "--metrics-port")
        path = "/metrics"
    else:
        return None
    if port is None:
        return None
    host = ANY_ADDRESS.get(given or "", given or "")
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def check(args: list[str] | None) -> int:
    """0 when the command's endpoint answers 200 (or it has none), else 1."""
    url = probe_url(args or [])
    if url is None:
        return 0
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return 0 if response.status == 200 else 1
    except OSError as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(check(fathom_command()))
