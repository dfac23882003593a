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
    release that migrated the schema (docs/operations.md). Prints ``downgraded A -> B`` on
    stdout and the release to deploy next on stderr."""

    async def downgrade(database: Database) -> tuple[str | None, str | None]:
        before = (await database.schema()).revision
        await database.downgrade(revision)
        return before, (await database.schema()).revision

    before, after = on_database(core_settings(), downgrade)
    sys.stdout.write(f"downgraded {before or 'none'} -> {after or 'none'}\n")
    stderr().print(next_deploy(after), highlight=False, soft_wrap=True)


def next_deploy(revision: str | None) -> str:
    """What to deploy on a schema this release has just downgraded to ``revision``."""
    from core.build import release_with_schema, version
    from storage import HEAD_REVISION

    if revision is None:
        return (
            "the database has no Fathom schema now; whichever release you deploy next "
            "creates its own with `fathom db upgrade`"
        )
    if revision == HEAD_REVISION:
        return f"the database schema is at {revision}, this release's ({version()})"
    release = release_with_schema(revision)
    which = (
        f"Fathom {release.version}, whose schema is {revision}"
        if release is not None
        else f"the release whose schema is {revision} (CHANGELOG.md lists each release's)"
    )
    return (
        f"the database schema is at {revision}: now deploy {which}. This release "
        f"({version()}, schema {HEAD_REVISION}) would migrate it forward again "
        "(`fathom serve` on start, `fathom db upgrade`)."
    )
