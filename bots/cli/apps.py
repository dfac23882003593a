"""The ``fathom`` Typer application and its command groups. The commands are registered on
them by their modules, which ``bots/cli/__init__.py`` imports."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from bots.cli.common import EXIT_OK

app = typer.Typer(
    name="fathom",
    help="Fathom: deep research with cited reports, in team chat and in the terminal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

thread_app = typer.Typer(help="Inspect research threads and their variables.", no_args_is_help=True)

db_app = typer.Typer(help="Database schema management.", no_args_is_help=True)

digest_app = typer.Typer(help="Scheduled digests (recurring research).", no_args_is_help=True)

sources_app = typer.Typer(
    help="The sources research searches: the web provider and the team's MCP servers "
    "(FATHOM_MCP_CONFIG). Without a subcommand: list them with their state."
)


def _show_version(shown: bool) -> None:
    if not shown:
        return
    from core.build import commit, python_version, version
    from storage import HEAD_REVISION

    sys.stdout.write(
        f"fathom {version()} (commit {commit()}, database schema {HEAD_REVISION}, "
        f"Python {python_version()})\n"
    )
    raise typer.Exit(EXIT_OK)


@app.callback()
def _fathom(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_show_version,
            help="Print the version, the commit it was built from and the schema revision it "
            "needs, and exit.",
        ),
    ] = False,
) -> None:
    """Fathom: deep research with cited reports, in team chat and in the terminal."""


app.add_typer(thread_app, name="thread")

app.add_typer(db_app, name="db")

app.add_typer(digest_app, name="digest")

feedback_app = typer.Typer(help="Votes on reports (👍/👎).", no_args_is_help=True)

app.add_typer(sources_app, name="sources")

app.add_typer(feedback_app, name="feedback")
