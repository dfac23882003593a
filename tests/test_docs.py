"""The documentation says what the code is: docs/architecture.md's table of stores names
exactly the stores ``storage.Store`` holds, each in the module it names, and its table of
tables exactly the tables the migrations make (both ways: a store or table added without its
row fails, and so does a row whose store or table is gone or moved)."""

from __future__ import annotations

import importlib
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


#: The documents whose names of code are checked.
DOCUMENTS = ("README.md", "docs/*.md", "tests/README.md")
#: A repository path in backticks: `core/research/executor.py`, `deploy/kubernetes/`.
REPO_PATH = re.compile(
    r"`((?:core|bots|storage|tests|bench|docs|migrations|deploy|requirements|\.ci)/[\w./-]*)`"
)
#: Files a recipe or a step asks the reader to create (they are not in the repository).
TO_BE_WRITTEN = ("bots/acme/", "tests/fakes/acme.py", "deploy/fathom.env")
#: A dotted name of Fathom's code in backticks: `core.logs.Redactor`, `storage.Store`.
DOTTED = re.compile(r"`((?:core|bots|storage)\.[A-Za-z_][\w.]*)")


def documents() -> list[Path]:
    root = ARCHITECTURE.parent.parent
    return sorted(path for pattern in DOCUMENTS for path in root.glob(pattern))


def test_every_path_the_docs_name_exists() -> None:
    """A module moved (or renamed) takes its mentions in README.md and docs/ with it."""
    root = ARCHITECTURE.parent.parent
    missing = sorted(
        {
            f"{document.relative_to(root)}: {path}"
            for document in documents()
            for path in REPO_PATH.findall(document.read_text(encoding="utf-8"))
            if not path.startswith(TO_BE_WRITTEN) and not (root / path).exists()
        }
    )
    assert not missing, "paths named in the docs that are not in the repository:\n" + "\n".join(
        missing
    )


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` (``core.logs.Redactor``) is a module, or a module's attribute."""
    parts = dotted.rstrip(".").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_dotted_name_the_docs_use_is_in_the_code() -> None:
    root = ARCHITECTURE.parent.parent
    named = {
        (str(document.relative_to(root)), dotted)
        for document in documents()
        for dotted in DOTTED.findall(document.read_text(encoding="utf-8"))
    }
    assert len(named) >= 20  # the names were found at all
    unknown = sorted(f"{where}: {dotted}" for where, dotted in named if not resolves(dotted))
    assert not unknown, "names in the docs that the code does not have:\n" + "\n".join(unknown)
