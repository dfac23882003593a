"""The Alembic migrations themselves, on real SQLite and PostgreSQL databases.

Every other database test works on a copy of a database migrated once per session
(``tests.databases``); these start from an empty one and run the migrations for real:
each one up, each one down, and the data migrations on data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, inspect, text

from core.engine.graph.state import NodeStatus, graph_of
from core.models import ThreadVariables
from storage import HEAD_REVISION, Database, Store, ThreadBusy
from storage.db import _migrations_dir
from storage.tables import Base
from tests.runs import new_run
from tests.test_storage import assert_aware_utc

REPO = Path(__file__).resolve().parents[1]


def _revisions() -> list[str]:
    """Every revision id, oldest first."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", _migrations_dir())
    return [
        script.revision
        for script in reversed(list(ScriptDirectory.from_config(config).walk_revisions()))
    ]


async def _tables(database: Database) -> set[str]:
    async with database.engine.connect() as conn:
        return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))


async def test_migrations_bring_a_fresh_database_to_head(empty_database_url: str) -> None:
    db = Database(empty_database_url)
    try:
        assert not await db.schema_is_usable()
        await db.ensure_schema()
        assert await db.schema_is_usable()
        assert await db.ping()
        await db.ensure_schema()  # idempotent on a current database
        async with db.engine.connect() as conn:
            versions = (await conn.execute(text("SELECT version_num FROM alembic_version"))).all()
        assert [v[0] for v in versions] == [HEAD_REVISION]
    finally:
        await db.dispose()


async def _schema_diff(database: Database) -> list[Any]:
    """What Alembic's autogenerate finds between the database and the ORM models."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from bots.platforms import classes
    from storage.tables import ours

    models = MetaData()  # the shared tables and every platform's own
    for metadata in (Base.metadata, *(cls.metadata for cls in classes() if cls.metadata)):
        for table in metadata.tables.values():
            table.to_metadata(models)

    def diff(sync_conn: Any) -> list[Any]:
        context = MigrationContext.configure(
            sync_conn, opts={"compare_type": True, "include_object": ours}
        )
        return list(compare_metadata(context, models))

    async with database.engine.connect() as conn:
        return await conn.run_sync(diff)


async def test_migrated_schema_matches_the_orm_models(database: Database) -> None:
    """The template every test copies is the migrations' schema, which is the models'."""

    assert await _schema_diff(database) == []


def test_head_revision_constant_matches_alembic_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", _migrations_dir())
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD_REVISION


def test_ensure_schema_on_a_current_database_does_not_import_alembic(tmp_path: Path) -> None:
    (tmp_path / "nested").mkdir()  # a missing folder is refused, not created (test_cli.py)
    url = f"sqlite:///{tmp_path / 'nested' / 'fathom.db'}"
    script = (
        "import asyncio, sys\n"
        "from storage import Database\n"
        "async def main(upgrade):\n"
        f"    db = Database({url!r})\n"
        "    await (db.upgrade() if upgrade else db.ensure_schema())\n"
        "    await db.dispose()\n"
        "asyncio.run(main(sys.argv[1] == 'upgrade'))\n"
        "print('alembic' in sys.modules)\n"
    )
    outputs = [
        subprocess.run(
            [sys.executable, "-c", script, mode],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for mode in ("upgrade", "ensure")
    ]
    assert outputs == ["True", "False"]


# -- migration 0004: run lifecycle ------------------------------------------------------


async def _migrate(database: Database, direction: str, revision: str) -> None:
    """Alembic ``upgrade``/``downgrade`` to ``revision`` on ``database``."""
    from alembic import command
    from alembic.config import Config

    def migrate(conn: Any) -> None:
        config = Config()
        config.set_main_option("script_location", _migrations_dir())
        config.attributes["connection"] = conn
        config.attributes["url"] = database.url
        getattr(command, direction)(config, revision)

    async with database.engine.connect() as conn:
        if database.dialect == "sqlite":  # as Database.upgrade: batch moves recreate tables
            await conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        await conn.run_sync(migrate)
        await conn.commit()
        if database.dialect == "sqlite":
            await conn.invalidate()


async def _upgrade_to(database: Database, revision: str) -> None:
    await _migrate(database, "upgrade", revision)


async def test_migration_0004_keeps_one_active_run_per_thread_and_old_reports_posted(
    empty_database_url: str,
) -> None:
    """Before 0004 nothing stopped two active runs in a thread: the newest stays active, the
    older is failed with a note. Reports posted before 0004 are not delivered again."""
    db = Database(empty_database_url)
    try:
        await _upgrade_to(db, "0003")
        rows = [  # id, status, created (minutes ago), report_posted
            ("a" * 32, "running", 30, False),
            ("b" * 32, "queued", 20, False),
            ("c" * 32, "queued", 10, False),  # the newest active run of the thread
            ("d" * 32, "succeeded", 40, True),
            ("e" * 32, "succeeded", 50, False),
        ]
        now = datetime.now(UTC)
        sqlite = db.dialect == "sqlite"

        def stamp(minutes: int) -> Any:
            value = now - timedelta(minutes=minutes)
            return value.replace(tzinfo=None) if sqlite else value

        async with db.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO threads (key, platform, workspace, channel, thread_ref, "
                    "created_at, updated_at) VALUES ('slack:T:C:1', 'slack', 'T', 'C', '1', "
                    ":t, :t)"
                ),
                {"t": stamp(60)},
            )
            for run_id, status, minutes, posted in rows:
                await conn.execute(
                    text(
                        "INSERT INTO research_runs (id, thread_id, topic, depth, strategy, "
                        "status, notes, created_at, report_posted_at) VALUES (:id, 1, 't', 1, "
                        "'iterative', :status, '[]', :created, :posted)"
                    ),
                    {
                        "id": run_id,
                        "status": status,
                        "created": stamp(minutes),
                        "posted": stamp(minutes - 1) if posted else None,
                    },
                )
        await db.upgrade()
        store = Store(db)
        after = {r.id: r for r in await store.runs.thread_runs(1)}
        assert {i: (r.status, r.delivery) for i, r in after.items()} == {
            "a" * 32: ("failed", None),
            "b" * 32: ("failed", None),
            "c" * 32: ("queued", None),
            "d" * 32: ("succeeded", "posted"),
            "e" * 32: ("succeeded", None),  # its posting state is unknown: not retried
        }
        assert "superseded by a newer run" in (after["a" * 32].error or "")
        assert_aware_utc(after["b" * 32].finished_at)
        assert all(r.attempt == 0 and r.owner is None for r in after.values())
        with pytest.raises(ThreadBusy):  # and the index holds from now on
            await new_run(store, thread_key="slack:T:C:1")
        assert await store.claims.runs_to_sweep(["slack"], stale_after=0) == ["c" * 32]
    finally:
        await db.dispose()


async def test_migration_0017_moves_the_graph_into_the_strategy_state_and_back(
    empty_database_url: str,
) -> None:
    """The graph's nodes of a thread that held a graph run move from the ``graph`` column
    (0008) into ``strategy_state`` under the strategy's name; the engine reads them from
    there as the graph strategy's state, an iterative thread keeps none, and a downgrade
    copies them back for the release before."""
    db = Database(empty_database_url)
    nodes = [
        {"name": "cost", "question": "heat pump cost", "after": [], "turn": 1, "run_id": "r1",
         "status": "answered", "answer": "About 10k [1].", "error": None},
        {"name": "noise", "question": "heat pump noise", "after": ["cost"], "turn": 1,
         "run_id": "r1", "status": "pending", "answer": None, "error": None},
    ]  # fmt: skip
    try:
        await _upgrade_to(db, "0016")
        async with db.engine.begin() as conn:
            for n, key in ((1, "slack:T:C:graph"), (2, "slack:T:C:iterative")):
                await conn.execute(
                    text(
                        "INSERT INTO threads (id, key, platform, workspace, channel, thread_ref, "
                        "created_at, updated_at) VALUES (:id, :key, 'slack', 'T', 'C', :id, "
                        "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"id": n, "key": key},
                )
                await conn.execute(
                    text(
                        "INSERT INTO thread_variables (thread_id, topics, findings, "
                        "should_continue, graph, version, updated_at) VALUES (:id, :topics, "
                        "'[]', false, :graph, 1, CURRENT_TIMESTAMP)"
                    ),
                    {
                        "id": n,
                        "topics": json.dumps(["heat pump cost"]),
                        "graph": json.dumps(nodes) if n == 1 else None,
                    },
                )
        await _upgrade_to(db, "0017")
        store = Store(db)
        graph, iterative = [await store.threads.load_variables(n) for n in (1, 2)]
        assert graph is not None and graph["strategyState"] == {"graph": {"nodes": nodes}}
        assert iterative is not None and iterative["strategyState"] == {}
        state = graph_of(ThreadVariables.model_validate(graph))
        assert [(n.name, n.status) for n in state.nodes] == [
            ("cost", NodeStatus.ANSWERED),
            ("noise", NodeStatus.PENDING),
        ]
        assert state.nodes[1].after == ["cost"] and state.of_run("r1") == state.nodes

        await _migrate(db, "downgrade", "0016")
        async with db.engine.connect() as conn:
            rows = (await conn.execute(text("SELECT thread_id, graph FROM thread_variables"))).all()
            columns = await conn.run_sync(
                lambda c: {col["name"] for col in inspect(c).get_columns("thread_variables")}
            )
        back = {thread_id: value for thread_id, value in rows}
        restored = json.loads(back[1]) if isinstance(back[1], str) else back[1]
        assert restored == nodes
        assert back[2] is None and "strategy_state" not in columns
    finally:
        await db.dispose()


async def test_every_migration_goes_up_and_down_and_up_again(empty_database_url: str) -> None:
    """One revision at a time to head, one at a time back to nothing (each downgrade leaves
    the schema its revision found), then to head again: the schema is the models'."""
    revisions = _revisions()
    assert revisions[-1] == HEAD_REVISION and len(revisions) == len(set(revisions))
    db = Database(empty_database_url)
    try:
        seen: dict[str, set[str]] = {"base": await _tables(db)}
        for revision in revisions:
            await _migrate(db, "upgrade", revision)
            seen[revision] = await _tables(db)
        assert await _schema_diff(db) == []
        for below, revision in reversed(
            list(zip(["base", *revisions[:-1]], revisions, strict=True))
        ):
            await _migrate(db, "downgrade", below)
            assert await _tables(db) - {"alembic_version"} == seen[below] - {"alembic_version"}, (
                f"downgrading {revision} to {below}"
            )
        await _migrate(db, "upgrade", "head")
        assert await db.schema_is_usable()
        assert await _schema_diff(db) == []
    finally:
        await db.dispose()
