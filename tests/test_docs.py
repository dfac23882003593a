"""The documentation says what the code is: docs/architecture.md's table of stores names
exactly the stores ``storage.Store`` holds, each in the module it names, and its table of
tables exactly the tables the migrations make (both ways: a store or table added without its
row fails, and so does a row whose store or table is gone or moved)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import inspect

from storage import Database, Store

ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
STORAGE_HEADING = "## Storage (`storage/`)"
#: A row of the table: | `RunStore` | `runs.py` | its job |
STORE_ROW = re.compile(r"^\| `(?P<store>\w+)` \| `(?P<module>[\w/]+)\.py` \|", re.MULTILINE)


def documented_stores() -> dict[str, str]:
    """The stores of the table in docs/architecture.md's storage section: class name ->
    module (``storage.runs``)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert text.count(STORAGE_HEADING) == 1, f"no single {STORAGE_HEADING!r} in {ARCHITECTURE}"
    section = text.split(STORAGE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = STORE_ROW.findall(section)
    table = {store: "storage." + module.replace("/", ".") for store, module in rows}
    assert len(table) == len(rows), f"a store is in the table twice: {rows}"
    return table


@pytest.fixture
async def composed(tmp_path: Path) -> AsyncIterator[Store]:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'docs.db'}")
    try:
        yield Store(database)
    finally:
        await database.dispose()


def test_the_store_table_names_every_store_of_store_and_no_other(composed: Store) -> None:
    held = {
        type(store).__name__: type(store).__module__
        for name, store in vars(composed).items()
        if not name.startswith("_")
    }
    documented = documented_stores()
    assert len(held) >= 10  # the attributes were found at all
    missing = sorted(set(held) - set(documented))
    assert not missing, f"stores of storage.Store without a row in {ARCHITECTURE.name}: {missing}"
    gone = sorted(set(documented) - set(held))
    assert not gone, f"rows of {ARCHITECTURE.name} naming no store of storage.Store: {gone}"
    moved = {
        name: (documented[name], held[name]) for name in held if held[name] != documented[name]
    }
    assert not moved, f"stores whose module is not the one the table names: {moved}"


TABLES_HEADING = "## Tables (Alembic, `migrations/versions/`)"
#: A row of the table: | `threads` | its purpose |, or several names: | `a`, `b` | ... |
TABLE_ROW = re.compile(r"^\| (`\w+`(?:, `\w+`)*) \|(.*)$", re.MULTILINE)
#: How a row says its tables exist on PostgreSQL alone (procrastinate's queue).
POSTGRESQL_ONLY = "PostgreSQL only"


def documented_tables(dialect: str) -> list[str]:
    """The tables of docs/architecture.md's table of tables that ``dialect`` has."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert text.count(TABLES_HEADING) == 1, f"no single {TABLES_HEADING!r} in {ARCHITECTURE}"
    section = text.split(TABLES_HEADING, 1)[1].split("\n## ", 1)[0]
    return [
        name
        for names, purpose in TABLE_ROW.findall(section)
        if dialect == "postgresql" or POSTGRESQL_ONLY not in purpose
        for name in re.findall(r"`(\w+)`", names)
    ]


async def test_the_table_list_names_every_table_of_the_migrated_schema(
    database: Database,
) -> None:
    """Both ways: every table the migrations make (the platforms' own and PostgreSQL's job
    queue included) has its row, and every row names a table they make."""
    async with database.engine.connect() as conn:
        made = set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
    made.discard("alembic_version")
    documented = documented_tables(database.dialect)
    assert len(documented) == len(set(documented)), f"a table is listed twice: {documented}"
    assert len(made) >= 10  # the migrated schema was read at all
    missing = sorted(made - set(documented))
    assert not missing, f"tables of the schema without a row in {ARCHITECTURE.name}: {missing}"
    gone = sorted(set(documented) - made)
    assert not gone, f"rows of {ARCHITECTURE.name} naming no table of the schema: {gone}"
