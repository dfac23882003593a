"""The ``fathom`` command line (typer + rich).

Start-up time matters (``fathom research`` should reach its first LLM request
within a second), so heavy modules are imported inside the commands that need
them, never at module level.

Exit codes: 0 success, 1 the run failed or was cancelled, 2 bad input or settings.

The package, by command group: ``apps.py`` (the Typer app and its groups),
``common.py`` (what every command shares), ``research_commands.py`` (research, resume),
``eval_commands.py`` (eval),
``thread_commands.py``, ``digest_commands.py``, ``source_commands.py``, ``data_commands.py``
(feedback, prune, forget), ``db_commands.py``, ``server_commands.py`` (serve, worker),
``mcp_commands.py`` (mcp). Each command module registers its commands on the app when it is
imported (here).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback

from bots.cli.apps import app

# Each module registers its commands on ``app`` when imported, in the order ``--help`` lists
# them (the groups' order is ``apps.py``'s).
# isort: off
from bots.cli import research_commands, eval_commands, thread_commands, digest_commands
from bots.cli import source_commands, data_commands, db_commands, server_commands
from bots.cli import mcp_commands
# isort: on

__all__ = ["app", "main"]

COMMANDS = (
    research_commands,
    eval_commands,
    thread_commands,
    digest_commands,
    source_commands,
    data_commands,
    db_commands,
    server_commands,
    mcp_commands,
)


def main() -> None:
    """The ``fathom`` entry point: run the command, then end the process at once.

    When a command returns, its output is written and every connection and file is closed.
    Python's own shutdown would then spend 0.2-0.3 s freeing the imported modules (the openai
    SDK alone about 0.15 s, SQLAlchemy about 0.07 s) while the user waits for the prompt;
    ``os._exit`` after flushing skips that (bench/README.md, "(d) tail").
    """
    code = 0
    try:
        app()  # typer's standalone mode always ends in SystemExit
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # a bug, or Ctrl-C outside a run: report it as Python would
        traceback.print_exc()
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")  # what the interpreter does with a non-integer code
    return 1
