"""Which schema a database has, next to the one this release's code expects.

Revisions are numbered in order (``0001``, ``0002``, ...) and migrations only add: a table,
a column with a default, an index. So the code of a release runs on its own schema and on
any newer one (a rolling upgrade: release N-1 keeps serving while release N's migration has
run), never on an older one. :class:`Schema` says which case a database is in, in one line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

# Keep equal to the newest migration's revision id (a test checks it against Alembic).
HEAD_REVISION = "0022"


class SchemaState(enum.StrEnum):
    #: No Fathom schema yet (a new database).
    MISSING = "missing"
    #: An older release's: ``fathom db upgrade`` brings it to this release's.
    BEHIND = "behind"
    #: This release's.
    CURRENT = "current"
    #: A newer release's; its migrations only added, so this code runs on it.
    AHEAD = "ahead"
    #: A revision no release of Fathom numbers this way: nothing is assumed.
    UNKNOWN = "unknown"

    @property
    def usable(self) -> bool:
        """Whether this release's code may run on it."""
        return self in (SchemaState.CURRENT, SchemaState.AHEAD)


class SchemaError(RuntimeError):
    """The schema cannot be used or changed as asked (one line, for the operator)."""


@dataclass(frozen=True)
class Schema:
    """A database's schema revision (None: none) as this release sees it."""

    revision: str | None

    @property
    def state(self) -> SchemaState:
        if self.revision is None:
            return SchemaState.MISSING
        if not (self.revision.isascii() and self.revision.isdigit()):
            return SchemaState.UNKNOWN
        number, head = int(self.revision), int(HEAD_REVISION)
        if number == head:
            return SchemaState.CURRENT
        return SchemaState.AHEAD if number > head else SchemaState.BEHIND

    def describe(self) -> str:
        """One line: the database's revision, this release's, and what to do."""
        state, mine = self.state, HEAD_REVISION
        if state is SchemaState.MISSING:
            return (
                f"the database has no schema yet (this release needs {mine}); "
                "run `fathom db upgrade`"
            )
        if state is SchemaState.BEHIND:
            return (
                f"the database schema is at {self.revision}, older than this release's {mine}; "
                "run `fathom db upgrade`"
            )
        if state is SchemaState.AHEAD:
            return (
                f"the database schema is at {self.revision}, newer than this release's {mine} "
                "(a later release migrated it; this release runs on it)"
            )
        if state is SchemaState.UNKNOWN:
            return (
                f"the database schema is at revision {self.revision!r}, which no Fathom release "
                f"has (this release's is {mine})"
            )
        return f"the database schema is at {mine}, this release's"


def read_schema(conn: Connection) -> Schema:
    """The schema of the database ``conn`` is on (no Alembic import: a cheap query)."""
    if not inspect(conn).has_table("alembic_version"):
        return Schema(None)
    rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    if not rows:
        return Schema(None)
    if len(rows) > 1:  # branches: not how Fathom's migrations are made
        return Schema(",".join(sorted(str(r[0]) for r in rows)))
    return Schema(str(rows[0][0]))
