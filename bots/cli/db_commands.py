"""``fathom db upgrade|current|downgrade``: the database schema."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from bots.cli.apps import db_app
from bots.cli.common import core_settings, on_database, stderr

if TYPE_CHECKING:
    from storage import Database


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the migrations up to this release's schema (a newer release's schema is left
    as it is: this release runs on it)."""

    async def upgrade(database: Database) -> str:
        await database.upgrade()
        return (await database.schema()).describe()

    stderr().print(on_database(core_settings(), upgrade), highlight=False, soft_wrap=True)


@db_app.command("current")
def db_current() -> None:
    """Print the database's schema revision and this release's, and whether it runs on it."""

    async def current(database: Database) -> tuple[str | None, str, str]:
        schema = await database.schema()
        return schema.revision, schema.state.value, schema.describe()

    from storage import HEAD_REVISION

    revision, state, line = on_database(core_settings(), current)
    sys.stdout.write(f"{revision or 'none'} ({state}; this release: {HEAD_REVISION})\n")
    stderr().print(line, highlight=False, soft_wrap=True)


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[
        str, typer.Argument(help="The revision to go back to (e.g. 0014), or `base`.")
    ],
) -> None:
    """Undo migrations down to REVISION: the rollback of a release, run with the code of the
    release that migrated the schema (docs/operations.md)."""

    async def downgrade(database: Database) -> str:
        await database.downgrade(revision)
        return (await database.schema()).describe()

    stderr().print(on_database(core_settings(), downgrade), highlight=False, soft_wrap=True)
