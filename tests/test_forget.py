"""``fathom forget --user`` (``storage.forget``): a privacy request leaves no row naming the
person, on real SQLite and PostgreSQL databases, and keeps everyone else's research."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, insert, make_url, select, update

from bots.slack.platform import SlackPlatform
from bots.slack.tables import slack_installations
from storage import Database, GuidanceTaken, Person, SourceRecord, Store
from storage.tables import Base, ResearchRun, Thread, ThreadVariables
from tests.cli import fathom
from tests.runs import claim, new_run

GONE = "slack:T0001:UFORGET7"
KEPT = "slack:T0001:UKEEP8"
GUIDANCE_AT = datetime(2026, 12, 1, 14, 2, tzinfo=UTC)


async def research(
    store: Store,
    thread: str,
    by: str,
    *,
    notes: list[str] | None = None,
    report: str = "# r [1]",
    sources: list[SourceRecord] | None = None,
    end: bool = True,
    **overrides: Any,
) -> str:
    """A run requested by ``by`` in ``thread``: finished and posted unless ``end`` is
    False (then it is running)."""
    run, _ = await new_run(store, thread_key=thread, requested_by=by, **overrides)
    held = await claim(store, run.id)
    if not end:
        return run.id
    await store.claims.finish_run(
        held,
        status="succeeded",
        report_markdown=report,
        sources=sources or [SourceRecord(1, "a", "https://a.example/")],
        error=None,
        usage={},
        notes=notes or [],
    )
    await store.claims.finish_delivery(held, posted=True)
    return run.id


async def rows_naming(database: Database, needle: str) -> list[tuple[str, str]]:
    """Every (table, column) of every shared table whose value holds ``needle``, in any case
    (Slack's installations are Slack's own: forget reports them and keeps them)."""
    found = []
    async with database.sessionmaker() as session:
        for table in Base.metadata.sorted_tables:
            for row in (await session.execute(select(table))).mappings():
                for column, value in row.items():
                    shown = value if isinstance(value, str) else json.dumps(value, default=str)
                    if needle.casefold() in shown.casefold():
                        found.append((table.name, str(column)))
    return found


async def world(store: Store, database: Database) -> dict[str, str]:
    """Everything a person leaves in Fathom, beside another person's research."""
    ids: dict[str, str] = {}
    # Their own research, voted on by someone else; and a follow-up of theirs in a thread
    # someone else started.
    ids["own"] = await research(store, "slack:T0001:C1:1.1", GONE)
    await store.feedback.record_feedback(ids["own"], KEPT, "up")
    ids["started_by_other"] = await research(store, "slack:T0001:C1:1.2", KEPT)
    ids["followup"] = await research(store, "slack:T0001:C1:1.2", GONE)
    # Their guidance of someone else's run, quoted in its notes and report; a file they
    # attached, read and cited there; their vote on that report.
    line = f"focus on grid storage ({GONE.split(':')[-1]}, 14:02 UTC)"
    kept_line = f"and on costs ({KEPT.split(':')[-1]}, 14:05 UTC)"
    steered, _ = await new_run(
        store,
        thread_key="slack:T0001:C1:1.3",
        requested_by=KEPT,
        attachments=[{"id": "F1", "name": "paper.pdf", "attached_by": "UFORGET7"}],
    )
    ids["steered"] = steered.id
    held = await claim(store, steered.id)
    for by, text, minute in ((GONE, "focus on grid storage", 2), (KEPT, "and on costs", 5)):
        entry = {
            "run_id": steered.id,
            "by": by,
            "at": GUIDANCE_AT.replace(minute=minute).isoformat(),
            "text": text,
            "key": f"slack:event:{minute}",
        }
        assert await store.threads.add_guidance(steered.id, entry) is GuidanceTaken.KEPT
    async with database.sessionmaker.begin() as session:
        await session.execute(
            update(ThreadVariables).values(
                files=[
                    {
                        "id": "F1",
                        "name": "paper.pdf",
                        "kind": "pdf",
                        "size": 3,
                        "attached_by": "UFORGET7",
                        "text": "its text",
                    }
                ]
            )
        )
    notes = [f"Guidance followed: {line}", f"Guidance followed: {kept_line}"]
    cited = "paper.pdf (attached by UFORGET7)"
    report = f"# r [1][2]\n\n## Sources\n\n1. {cited}\n\n## Notes\n\n" + "\n".join(
        f"- {n}" for n in notes
    )
    await store.claims.finish_run(
        held,
        status="succeeded",
        report_markdown=report,
        sources=[
            SourceRecord(1, cited, "", kind="attachment"),
            SourceRecord(2, "b", "https://b.example/"),
        ],
        error=None,
        usage={},
        notes=notes,
    )
    await store.claims.finish_delivery(held, posted=True)
    await store.feedback.record_feedback(steered.id, GONE, "down")
    await store.feedback.record_feedback(steered.id, KEPT, "up")
    # A digest they scheduled and its firing; a file they sent that waits for a request.
    digest = await store.digests.add(
        platform="slack",
        workspace="T0001",
        channel="C2",
        topic="heat pumps",
        depth=2,
        strategy="iterative",
        cron="0 9 * * 1",
        timezone="UTC",
        created_by=GONE,
        platform_context=None,
        max_per_channel=5,
    )
    ids["firing"] = await research(store, "slack:T0001:C2:2.1", GONE, digest_id=digest.id)
    await store.files.remember_files(
        "slack:T0001:C3:UFORGET7", [{"id": "F2", "name": "n.txt", "attached_by": "UFORGET7"}]
    )
    return ids


async def test_forget_leaves_no_row_naming_the_person_and_keeps_everyone_elses(
    store: Store, database: Database
) -> None:
    ids = await world(store, database)
    assert len(await rows_naming(database, "UFORGET7")) >= 10  # the scan finds them

    done = await store.forgetting.forget(Person.parse(GONE))

    assert await rows_naming(database, "UFORGET7") == []
    assert (done.runs, done.threads, done.votes, done.guidance, done.digests) == (3, 2, 1, 1, 1)
    assert done.files == 2 and done.busy == ()
    for gone in ("own", "followup", "firing"):
        assert await store.runs.get_run(ids[gone]) is None
    # Someone else's research stays, without the person: their run, their vote, their
    # guidance and its note, the file's text gone but the citation kept.
    steered = await store.runs.get_run(ids["steered"])
    assert steered is not None
    assert steered.notes == ["Guidance followed: and on costs (UKEEP8, 14:05 UTC)"]
    assert steered.report_markdown is not None
    assert "paper.pdf (attached by (forgotten))" in steered.report_markdown
    assert "and on costs (UKEEP8" in steered.report_markdown
    assert [s.title for s in await store.runs.run_sources(steered.id)] == [
        "paper.pdf (attached by (forgotten))",
        "b",
    ]
    assert await store.runs.get_run(ids["started_by_other"]) is not None
    assert await store.threads.get_thread("slack:T0001:C1:1.2") is not None  # its other run's
    assert await store.threads.get_thread("slack:T0001:C1:1.1") is None
    votes = await store.feedback.feedback_since()
    assert [(v.voter, v.run_id) for v in votes] == [(KEPT, ids["steered"])]
    assert len(await rows_naming(database, "UKEEP8")) >= 4


async def test_guidance_quoted_by_the_name_the_platform_gave_is_forgotten_too(
    store: Store,
) -> None:
    """Teams names a steerer by ``from.name`` in the report's notes: forgetting them removes
    those notes as it removes the ones that quote an id."""
    person = "teams:tenant1:00000000-0000-0000-0000-0000000000a1"
    run, _ = await new_run(store, thread_key="teams:tenant1:chan:1", requested_by=KEPT)
    held = await claim(store, run.id)
    entry = {
        "run_id": run.id,
        "by": person,
        "at": GUIDANCE_AT.isoformat(),
        "text": "focus on grid storage",
        "name": "Ada Lovelace",
    }
    assert await store.threads.add_guidance(run.id, entry) is GuidanceTaken.KEPT
    quoted = "Guidance followed: focus on grid storage (Ada Lovelace, 14:02 UTC)"
    await store.claims.finish_run(
        held,
        status="succeeded",
        report_markdown=f"# r\n\n## Notes\n\n- {quoted}",
        sources=[],
        error=None,
        usage={},
        notes=[quoted],
    )
    await store.claims.finish_delivery(held, posted=True)
    done = await store.forgetting.forget(Person.parse(person))
    assert done.guidance == 1
    steered = await store.runs.get_run(run.id)
    assert steered is not None and steered.notes == []
    assert steered.report_markdown is not None and "Ada Lovelace" not in steered.report_markdown


async def test_a_run_still_going_on_is_left_and_reported_until_it_has_ended(
    store: Store, database: Database
) -> None:
    running = await research(store, "slack:T0001:C1:4.1", GONE, end=False)
    async with database.sessionmaker.begin() as session:
        await session.execute(
            insert(slack_installations).values(
                client_id="111.222",
                app_id="A1",
                team_id="T0001",
                user_id="UFORGET7",
                is_enterprise_install=False,
                installed_at=datetime(2026, 1, 1),
            )
        )
    person = Person.parse(GONE)
    assert await store.forgetting.unfinished_runs(person) == [running]
    first = await store.forgetting.forget(person)
    assert first.busy == (running,) and first.runs == 0
    kept = await SlackPlatform.kept_of(database.engine, "UFORGET7")
    assert kept is not None and "(1 installations, kept" in kept
    assert await SlackPlatform.kept_of(database.engine, "UKEEP8") is None
    assert await store.runs.get_run(running) is not None
    async with database.sessionmaker.begin() as session:  # it ended and was posted
        await session.execute(
            update(ResearchRun)
            .where(ResearchRun.id == running)
            .values(status="cancelled", finished_at=datetime.now(UTC), delivery="posted")
        )
    second = await store.forgetting.forget(person)
    assert second.busy == () and second.runs == 1
    assert await rows_naming(database, "UFORGET7") == []


async def test_fathom_forget_and_prune_on_the_command_line(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The commands on a database a process of Fathom filled: forget cancels the person's
    run still going on and says to come back (exit 1), then forgets everything (exit 0);
    prune counts dry, then prunes. A key that is not one, a duration that is not one, and
    prune with retention off are each one line, exit 2."""
    url = f"sqlite:///{tmp_path / 'fathom.db'}"
    cli_env["DATABASE_URL"] = url

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        result = fathom(*args, env=cli_env, cwd=tmp_path)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    assert cli("db", "upgrade").returncode == 0
    database = Database(url)
    store = Store(database)
    try:
        ids = await world(store, database)
        running = await research(store, "slack:T0001:C1:4.1", GONE, end=False)
        bad = cli("forget", "--user", "UFORGET7")
        assert bad.returncode == 2
        assert "is not a requester key <platform>:<workspace>:<user id>" in bad.stderr

        async with database.sessionmaker.begin() as session:  # they installed the Slack app
            await session.execute(
                insert(slack_installations).values(
                    client_id="111.222",
                    app_id="A1",
                    team_id="T0001",
                    user_id="UFORGET7",
                    is_enterprise_install=False,
                    installed_at=datetime(2026, 1, 1),
                )
            )
        nobody = cli("forget", "--user", "slack:T0001:UFORGOT7")  # mistyped
        assert nobody.returncode == 1 and nobody.stdout == ""
        assert "nothing names slack:T0001:UFORGOT7" in nobody.stderr
        dry = cli("forget", "--user", GONE, "--dry-run")
        assert dry.returncode == 1  # a run of theirs is going on
        assert dry.stdout.startswith(f"would forget {GONE}: 3 runs, 2 threads, 1 votes")
        assert (
            "  research_runs: " in dry.stdout and "rows would be deleted or rewritten" in dry.stdout
        )
        assert "run `fathom forget` without --dry-run to cancel" in dry.stderr
        untouched = await store.runs.get_run(running)
        assert untouched is not None and not untouched.cancel_requested
        assert len(await rows_naming(database, "UFORGET7")) >= 10
        first = cli("forget", "--user", GONE)
        assert first.returncode == 1
        assert f"1 runs are still going on or posting ({running})" in first.stderr
        assert "UFORGET7 installed the Slack app (1 installations, kept" in first.stderr
        assert first.stdout.startswith(f"forgot {GONE}: 3 runs, 2 threads, 1 votes")
        flagged = await store.runs.get_run(running)
        assert flagged is not None and flagged.cancel_requested
        async with database.sessionmaker.begin() as session:  # its runner ended it
            await session.execute(
                update(ResearchRun)
                .where(ResearchRun.id == running)
                .values(status="cancelled", finished_at=datetime.now(UTC), delivery="posted")
            )
        second = cli("forget", "--user", GONE)
        assert second.returncode == 0, second.stderr
        assert second.stdout == (
            f"forgot {GONE}: 1 runs, 1 threads, 0 votes, 0 guidance replies, 0 digests, 0 files, "
            "0 topics in shared threads, 0 citations, 0 cached searches and pages\n"
            "  research_runs: 1 rows deleted or rewritten\n"
            "  threads: 1 rows deleted or rewritten\n"
        )
        assert await rows_naming(database, "UFORGET7") == []

        async with database.sessionmaker.begin() as session:
            await session.execute(
                update(ResearchRun)
                .where(ResearchRun.id == ids["steered"])
                .values(finished_at=datetime(2026, 1, 1, tzinfo=UTC))
            )
        dry = cli("prune", "--older-than", "90d", "--dry-run")
        assert dry.returncode == 0
        assert dry.stdout.startswith("would prune 1 runs (2 sources, 1 votes) and 0 threads")
        assert await store.runs.get_run(ids["steered"]) is not None
        pruned = cli("prune", "--older-than", "90d")
        assert pruned.stdout.startswith("pruned 1 runs (2 sources, 1 votes)")
        assert await store.runs.get_run(ids["steered"]) is None
    finally:
        await database.dispose()
    wrong = cli("prune", "--older-than", "soon")
    assert wrong.returncode == 2 and "is not a duration" in wrong.stderr
    cli_env["FATHOM_RUN_RETENTION_DAYS"] = "0"
    kept = cli("prune")
    assert kept.returncode == 2 and "FATHOM_RUN_RETENTION_DAYS is 0" in kept.stderr


#: What the forgotten person leaves in a thread someone else started: each must be gone.
PERMALINK = "https://acme.slack.com/files/UFORGET7/F0BEA/bea-plan.pdf"
MARKERS = (
    "UFORGET7",
    "Bea Marker",
    "/F0BEA/",
    "BEAFILETEXT",
    "beatopic widgets",
    "beasubtopic",
    "https://bea-result.example/",
)


async def set_variables(database: Database, thread: str, **values: Any) -> None:
    """The thread's variables as a run's checkpoint leaves them."""
    async with database.sessionmaker.begin() as session:
        thread_id = (
            await session.execute(select(Thread.id).where(Thread.key == thread))
        ).scalar_one()
        row = await session.get(ThreadVariables, thread_id)
        if row is None:
            session.add(ThreadVariables(thread_id=thread_id, **values))
        else:
            for name, value in values.items():
                setattr(row, name, value)


def _finding(topic: str, url: str, at: datetime) -> dict[str, Any]:
    return {
        "topic": topic,
        "results": [{"title": topic, "url": url, "snippet": "s"}],
        "error": None,
        "searched_at": at.isoformat(),
        "pages": [{"url": url, "title": topic, "passages": ["p"]}],
    }


async def shared_thread(store: Store, database: Database, *, display_name: bool) -> str:
    """Person A starts a research in a thread; person B (UFORGET7) follows up there attaching
    a file, which their run reads and searches for; A's next follow-up reads B's file again
    (a thread's files serve every later run) and cites it by its permalink. Returns A's
    follow-up's id.

    The shapes are Slack's: a message event's ``files[].permalink`` is
    ``https://<workspace>.slack.com/files/<user id>/<file id>/<name>`` and its
    ``user_profile.display_name`` names the sender when the event carries it
    (https://api.slack.com/types/file, https://api.slack.com/events/message/file_share)."""
    thread = "slack:T0001:C9:9.1"
    by = "Bea Marker" if display_name else "UFORGET7"
    attachment = {
        "id": "F0BEA",
        "name": "bea-plan.pdf",
        "url": PERMALINK,
        "attached_by": by,
        "attacher_id": "UFORGET7",
    }
    earlier = datetime(2026, 1, 1, tzinfo=UTC)
    first = await research(store, thread, KEPT, topic="heat pumps in flats")
    await set_variables(
        database,
        thread,
        topics=["heat pumps in flats"],
        findings=[_finding("heat pumps in flats", "https://kept.example/", earlier)],
    )
    theirs, _ = await new_run(
        store,
        thread_key=thread,
        requested_by=GONE,
        topic="BEATOPIC widgets?",
        attachments=[attachment],
    )
    held = await claim(store, theirs.id)
    during = datetime.now(UTC)
    file = {**attachment, "kind": "pdf", "size": 9, "text": "BEAFILETEXT", "run_id": theirs.id}
    await set_variables(
        database,
        thread,
        topics=["heat pumps in flats", "BEATOPIC widgets?", "BEASUBTOPIC costs"],
        next_search_topic="BEASUBTOPIC next",
        findings=[
            _finding("heat pumps in flats", "https://kept.example/", earlier),
            _finding("BEATOPIC widgets?", "https://bea-result.example/", during),
            _finding("BEASUBTOPIC costs", "https://bea-result.example/2", during),
        ],
        files=[file],
    )
    title = f"bea-plan.pdf (attached by {by})"
    await store.claims.finish_run(
        held,
        status="succeeded",
        report_markdown=f"# r [1]\n\n## Sources\n\n- [1] [{title}]({PERMALINK})",
        sources=[SourceRecord(1, title, PERMALINK, kind="attachment")],
        error=None,
        usage={},
        notes=[],
    )
    await store.claims.finish_delivery(held, posted=True)
    followup = await research(
        store,
        thread,
        KEPT,
        topic="and in houses",
        report=f"# r [1][2]\n\n## Sources\n\n- [1] [{title}]({PERMALINK})\n"
        "- [2] [k](https://kept.example/)",
        sources=[
            SourceRecord(1, title, PERMALINK, kind="attachment"),
            SourceRecord(2, "k", "https://kept.example/"),
        ],
    )
    for query in ("beatopic widgets", "BEASUBTOPIC costs", "heat pumps in flats"):
        await store.caches.cache_put("searxng", query, [{"url": "https://x.example/"}])
    await store.caches.page_put("https://bea-result.example/", "https://bea-result.example/", "t")
    await store.caches.page_put("https://kept.example/", "https://kept.example/", "kept")
    assert first
    return followup


async def test_forget_in_a_thread_someone_else_started_leaves_no_trace_of_them(
    store: Store, database: Database
) -> None:
    """Issue 54: B's follow-up with a file in A's thread, with and without a display name in
    the event. Every column of every table is scanned for B's id, name, file, its text, the
    topics B searched and their results; A's research stays, citing the file without B."""
    for display_name in (True, False):
        followup = await shared_thread(store, database, display_name=display_name)
        present = [m for m in MARKERS if display_name or m != "Bea Marker"]
        for marker in present:
            assert await rows_naming(database, marker), marker  # the scan finds them first

        dry = await store.forgetting.forget(Person.parse(GONE), dry_run=True)
        assert dry.runs == 1 and dry.files >= 1 and dry.topics == 2 and dry.citations == 1
        assert dry.rows["research_runs"] >= 2 and dry.rows["search_cache"] == 2
        assert await rows_naming(database, "BEAFILETEXT")  # a dry run changes nothing

        done = await store.forgetting.forget(Person.parse(GONE))
        assert (done.runs, done.threads, done.topics, done.citations) == (1, 0, 2, 1)
        assert done.files >= 1 and done.busy == ()
        assert done.rows == dry.rows
        for marker in MARKERS:
            assert await rows_naming(database, marker) == [], marker
        # A's research keeps the file it read by its name, without who attached it or its
        # link; nothing else holds the file's name.
        assert sorted(await rows_naming(database, "bea-plan.pdf")) == [
            ("research_runs", "report_markdown"),
            ("run_sources", "title"),
        ]
        kept = await store.runs.get_run(followup)
        assert kept is not None and kept.report_markdown is not None
        assert "- [1] bea-plan.pdf (attached by (forgotten))\n" in kept.report_markdown
        assert "- [2] [k](https://kept.example/)" in kept.report_markdown
        sources = await store.runs.run_sources(followup)
        assert [(s.title, s.url) for s in sources] == [
            ("bea-plan.pdf (attached by (forgotten))", ""),
            ("k", "https://kept.example/"),
        ]
        async with database.sessionmaker() as session:
            variables = (await session.execute(select(ThreadVariables))).scalars().one()
        assert variables.topics == ["heat pumps in flats"]
        assert [f["topic"] for f in variables.findings] == ["heat pumps in flats"]
        assert variables.next_search_topic is None and variables.files is None
        assert await store.caches.cache_get("searxng", "heat pumps in flats", timedelta(1))
        assert await store.caches.page_get("https://kept.example/", timedelta(1))
        again = await store.forgetting.forget(Person.parse(GONE))
        assert again.nothing
        async with database.sessionmaker.begin() as session:  # the next round starts clean
            for table in reversed(Base.metadata.sorted_tables):
                await session.execute(table.delete())


async def test_on_sqlite_the_forgotten_text_leaves_the_database_file_and_its_wal(
    store: Store, database: Database
) -> None:
    """SQLite keeps a deleted row's bytes in free pages, and a WAL keeps the pages it wrote,
    until overwritten (https://www.sqlite.org/pragma.html#pragma_secure_delete,
    https://www.sqlite.org/wal.html): forget runs with secure_delete and truncates the WAL,
    so the file's bytes no longer hold what was forgotten."""
    if database.dialect != "sqlite":
        pytest.skip("PostgreSQL keeps dead row versions until VACUUM (docs/operations.md)")
    path = Path(str(make_url(database.url).database))

    def insecure(dbapi_connection: Any, *_: Any) -> None:
        # As a build of SQLite without SQLITE_SECURE_DELETE (Debian compiles it in) leaves it.
        dbapi_connection.execute("PRAGMA secure_delete=OFF")

    event.listen(database.pool, "checkout", insecure)
    secret = "BEASECRETBYTES " * 40
    await research(store, "slack:T0001:C1:7.1", GONE, report=f"# r\n\n{secret}")
    kept = await research(store, "slack:T0001:C1:7.2", KEPT, report="# kept")

    def on_disk() -> bytes:
        wal = path.with_name(path.name + "-wal")
        return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")

    assert b"BEASECRETBYTES" in on_disk()
    done = await store.forgetting.forget(Person.parse(GONE))
    assert done.runs == 1 and done.wal_truncated is True
    assert b"BEASECRETBYTES" not in on_disk()
    assert b"UFORGET7" not in on_disk()
    assert await store.runs.get_run(kept) is not None


async def test_forget_the_person_who_started_a_thread_someone_else_followed_up_in(
    store: Store, database: Database
) -> None:
    """Issue 54, the other way round: B (forgotten) starts a research attaching a file; A's
    follow-up in B's thread reads the file again and searches a topic of A's. Forgetting B
    keeps A's run, its topic and finding, and leaves no trace of B in any column (Slack's
    permalink shape: https://api.slack.com/types/file)."""
    thread = "slack:T0001:C9:9.2"
    attachment = {
        "id": "F0BEA",
        "name": "bea-plan.pdf",
        "url": PERMALINK,
        "attached_by": "Bea Marker",
        "attacher_id": "UFORGET7",
    }
    theirs, _ = await new_run(
        store,
        thread_key=thread,
        requested_by=GONE,
        topic="BEATOPIC widgets?",
        attachments=[attachment],
    )
    held = await claim(store, theirs.id)
    file = {**attachment, "kind": "pdf", "size": 9, "text": "BEAFILETEXT", "run_id": theirs.id}
    theirs_found = _finding("BEATOPIC widgets?", "https://bea-result.example/", datetime.now(UTC))
    await set_variables(
        database, thread, topics=["BEATOPIC widgets?"], findings=[theirs_found], files=[file]
    )
    title = "bea-plan.pdf (attached by Bea Marker)"
    await store.claims.finish_run(
        held,
        status="succeeded",
        report_markdown=f"# r [1]\n\n## Sources\n\n- [1] [{title}]({PERMALINK})",
        sources=[SourceRecord(1, title, PERMALINK, kind="attachment")],
        error=None,
        usage={},
        notes=[],
    )
    await store.claims.finish_delivery(held, posted=True)
    followup, _ = await new_run(store, thread_key=thread, requested_by=KEPT, topic="and in houses")
    held = await claim(store, followup.id)
    mine = _finding("and in houses", "https://kept.example/", datetime.now(UTC))
    await set_variables(
        database,
        thread,
        topics=["BEATOPIC widgets?", "and in houses"],
        findings=[theirs_found, mine],
        files=[file],
    )
    await store.claims.finish_run(
        held,
        status="succeeded",
        report_markdown=f"# r [1][2]\n\n## Sources\n\n- [1] [{title}]({PERMALINK})\n"
        "- [2] [k](https://kept.example/)",
        sources=[
            SourceRecord(1, title, PERMALINK, kind="attachment"),
            SourceRecord(2, "k", "https://kept.example/"),
        ],
        error=None,
        usage={},
        notes=[],
    )
    await store.claims.finish_delivery(held, posted=True)
    for marker in ("UFORGET7", "Bea Marker", "/F0BEA/", "BEAFILETEXT", "beatopic widgets"):
        assert await rows_naming(database, marker), marker

    done = await store.forgetting.forget(Person.parse(GONE))

    assert (done.runs, done.threads, done.topics, done.citations, done.busy) == (1, 0, 1, 1, ())
    for marker in MARKERS:
        assert await rows_naming(database, marker) == [], marker
    async with database.sessionmaker() as session:
        variables = (await session.execute(select(ThreadVariables))).scalars().one()
    assert variables.topics == ["and in houses"] and variables.files is None
    assert [f["topic"] for f in variables.findings] == ["and in houses"]
    assert [(s.title, s.url) for s in await store.runs.run_sources(followup.id)] == [
        ("bea-plan.pdf (attached by (forgotten))", ""),
        ("k", "https://kept.example/"),
    ]


async def test_forgetting_an_mcp_principal_deletes_its_runs_progress_rows(
    store: Store, database: Database
) -> None:
    """An MCP caller's requester key is ``mcp:<principal>:<principal>``: its runs go, and
    their ``mcp_progress`` rows with them (their text can name what the person asked)."""
    mine = await research(store, "mcp:alice:mcp:0a", "mcp:alice:alice", topic="UFORGET7 plans")
    theirs = await research(store, "mcp:bob:mcp:0b", "mcp:bob:bob")
    await store.progress.append(mine, "Searching UFORGET7 plans…")
    await store.progress.append(theirs, "1/3th search executed.")

    done = await store.forgetting.forget(Person.parse("mcp:alice:alice"))

    assert done.runs == 1
    assert await rows_naming(database, "UFORGET7") == []
    assert await store.progress.since(mine) == []
    assert [r.text for r in await store.progress.since(theirs)] == ["1/3th search executed."]
