"""The documents Fathom made for reports (issue 56, item 4): ``fathom forget``, ``fathom
prune`` and housekeeping's retention delete them on their platform once their runs are
deleted, and name each one they could not (with its address, for an admin).

The stores run on real SQLite and PostgreSQL (``storage.run_documents``, ``storage.forget``,
``storage.retention``); the platforms' side is a tiny posters class implementing
``ThreadPosters.delete_document`` (Slack's and Feishu's own are tested with their fakes), the
toy platform opened by the composition root, and the command line in process.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from bots.chat.delivery import ThreadPosters
from bots.composition import open_outbound
from bots.document_deletion import delete_documents
from bots.housekeeping import housekeep_once
from bots.platforms import PLATFORMS, PlatformEntry
from bots.slack.messenger import make_web_client
from core.runtime import open_storage
from core.settings import Settings
from core.values import ReportDocument, ThreadKey
from storage import Database, Person, RunDocument, RunRecord, Store
from storage.retention import pick_runs, prune_picked
from storage.tables import ResearchRun, utcnow
from tests.chat_app import fathom_settings
from tests.cli import fathom
from tests.databases import MigratedTemplates
from tests.fakes import FakeLLMServer, FakeSearchServer, FakeSlackServer
from tests.runs import claim, new_run
from tests.toy_platform import TOY

PERSON = "slack:T0001:UDOC1"
OTHER = "slack:T0001:UOTHER"
CANVAS = ReportDocument(
    kind="canvas", id="F0CANVAS1", url="https://acme.slack.com/docs/T0001/F0CANVAS1"
)
DOCX = ReportDocument(kind="docx", id="doxcnDOC1", url="https://acme.feishu.cn/docx/doxcnDOC1")
REFUSED = ReportDocument(kind=ReportDocument.PARTS, reason="missing_scope: canvases:write")


class DocumentPosters(ThreadPosters):
    """A platform's outbound side that only deletes documents: those deleted are recorded,
    and those in ``refuse`` fail as a platform's refusal would."""

    def __init__(self, store: Any, refuse: tuple[str, ...] = ()) -> None:
        super().__init__(store)
        self.deleted: list[tuple[str, str]] = []
        self.refuse = set(refuse)

    async def poster_for(self, run: RunRecord) -> Any:
        raise AssertionError("no run is delivered here")

    async def delete_document(self, thread: ThreadKey, document: ReportDocument) -> None:
        if document.id in self.refuse:
            raise RuntimeError("The request to the Slack API failed. (error: access_denied)")
        self.deleted.append((str(thread), document.id))


async def posted(
    store: Store,
    thread: str,
    by: str,
    document: ReportDocument | None,
    *,
    days_ago: float = 0,
) -> RunRecord:
    """A run of ``by`` in ``thread``, finished and posted ``days_ago``, whose report became
    ``document`` (None: a short report, posted as parts)."""
    run, _ = await new_run(store, thread_key=thread, requested_by=by)
    held = await claim(store, run.id)
    if document is not None:
        assert await store.runs.record_report_document(run.id, document) == document
    await store.claims.finish_run(
        held, status="succeeded", report_markdown="# r", sources=[], error=None, usage={}, notes=[]
    )
    await store.claims.finish_delivery(held, posted=True)
    if days_ago:
        then = utcnow() - timedelta(days=days_ago)
        async with store._db.sessionmaker.begin() as session:
            await session.execute(
                update(ResearchRun).where(ResearchRun.id == run.id).values(finished_at=then)
            )
    found = await store.runs.get_run(run.id)
    assert found is not None
    return found


async def test_forget_returns_the_documents_of_the_runs_it_deletes(store: Store) -> None:
    theirs = await posted(store, "slack:T0001:C1:1.1", PERSON, CANVAS)
    await posted(store, "slack:T0001:C1:2.1", PERSON, REFUSED)  # went as parts: none
    await posted(store, "slack:T0001:C1:3.1", PERSON, None)  # a short report: none
    others = await posted(store, "feishu:tk:oc_1:om_1", OTHER, DOCX)
    person = Person.parse(PERSON)
    expected = (RunDocument(ThreadKey.parse("slack:T0001:C1:1.1"), CANVAS),)

    dry = await store.forgetting.forget(person, dry_run=True)
    assert dry.documents == expected and await store.runs.get_run(theirs.id) is not None
    done = await store.forgetting.forget(person)
    assert done.runs == 3 and done.documents == expected
    assert await store.runs.get_run(theirs.id) is None
    kept = await store.runs.get_run(others.id)
    assert kept is not None and kept.report_document == DOCX  # someone else's stays
    assert (await store.forgetting.forget(person)).documents == ()


async def test_prune_returns_the_documents_of_the_runs_it_prunes(store: Store) -> None:
    old = await posted(store, "feishu:tk:oc_1:om_2", OTHER, DOCX, days_ago=120)
    await posted(store, "slack:T0001:C2:1.1", OTHER, None, days_ago=120)
    recent = await posted(store, "slack:T0001:C2:2.1", OTHER, CANVAS, days_ago=10)
    before = utcnow() - timedelta(days=90)
    expected = (RunDocument(ThreadKey.parse("feishu:tk:oc_1:om_2"), DOCX),)

    dry = await store.retention.prune(before, dry_run=True)
    assert dry.runs == 2 and dry.documents == expected
    assert await store.runs.get_run(old.id) is not None
    pruned = await store.retention.prune(before)
    assert pruned.runs == 2 and pruned.documents == expected
    assert pruned.describe().startswith("2 runs (0 sources, 0 votes, 1 documents)")
    assert await store.runs.get_run(old.id) is None
    assert await store.runs.get_run(recent.id) is not None
    assert (await store.retention.prune(before)).documents == ()


async def test_a_run_changed_since_its_pick_keeps_its_document(
    store: Store, database: Database
) -> None:
    """Pruning picks, then deletes: a run requeued in between stays, and its document is not
    among those to delete on the platform."""
    stays = await posted(store, "slack:T0001:C2:3.1", OTHER, CANVAS, days_ago=120)
    goes = await posted(store, "feishu:tk:oc_2:om_1", OTHER, DOCX, days_ago=120)
    before = utcnow() - timedelta(days=90)
    picked = await database.run(lambda conn: pick_runs(conn, before, 10))
    assert set(picked) == {stays.id, goes.id}
    async with database.sessionmaker.begin() as session:  # requeued meanwhile
        await session.execute(
            update(ResearchRun).where(ResearchRun.id == stays.id).values(status="queued")
        )
    pruned = await database.run(lambda conn: prune_picked(conn, picked, before))
    assert pruned.runs == 1
    assert pruned.documents == (RunDocument(ThreadKey.parse("feishu:tk:oc_2:om_1"), DOCX),)
    kept = await store.runs.get_run(stays.id)
    assert kept is not None and kept.report_document == CANVAS


async def test_each_document_is_deleted_on_its_platform_or_named_with_its_address(
    store: Store,
) -> None:
    slack = DocumentPosters(store, refuse=("F0REFUSED",))
    refused = ReportDocument(
        kind="canvas", id="F0REFUSED", url="https://acme.slack.com/docs/F0REFUSED"
    )
    documents = [
        RunDocument(ThreadKey.parse("slack:T0001:C1:1.1"), CANVAS),
        RunDocument(ThreadKey.parse("slack:T0001:C1:2.1"), refused),
        RunDocument(ThreadKey.parse("feishu:tk:oc_1:om_1"), DOCX),  # not configured here
        RunDocument(ThreadKey.parse("dingtalk:corp:cid:m1"), DOCX),  # makes none
    ]
    plain = DocumentPosters(store)
    plain_delete = ThreadPosters.delete_document.__get__(plain)  # the contract's default
    plain.delete_document = plain_delete  # type: ignore[method-assign]
    left = await delete_documents(documents, {"slack": slack, "dingtalk": plain})
    assert slack.deleted == [("slack:T0001:C1:1.1", "F0CANVAS1")]
    lines = [undeleted.line() for undeleted in left]
    assert lines == [
        "canvas F0REFUSED of slack:T0001:C1:2.1 was not deleted (slack answered RuntimeError: "
        "The request to the Slack API failed. (error: access_denied)); delete it by hand: "
        "https://acme.slack.com/docs/F0REFUSED",
        "docx doxcnDOC1 of feishu:tk:oc_1:om_1 was not deleted (feishu is not configured in "
        "this process); delete it by hand: https://acme.feishu.cn/docx/doxcnDOC1",
        "docx doxcnDOC1 of dingtalk:corp:cid:m1 was not deleted (dingtalk cannot delete "
        "documents in this release); delete it by hand: https://acme.feishu.cn/docx/doxcnDOC1",
    ]


async def test_housekeeping_deletes_the_pruned_runs_documents_and_logs_those_left(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A document that cannot be deleted is logged with its address; the pruning is done
    all the same."""
    monkeypatch.setenv("FATHOM_RUN_RETENTION_DAYS", "90")
    refused = ReportDocument(
        kind="canvas", id="F0REFUSED", url="https://acme.slack.com/docs/F0REFUSED"
    )
    one = await posted(store, "slack:T0001:C3:1.1", OTHER, CANVAS, days_ago=120)
    two = await posted(store, "slack:T0001:C3:2.1", OTHER, refused, days_ago=120)
    slack = DocumentPosters(store, refuse=("F0REFUSED",))
    with caplog.at_level(logging.INFO, logger="bots.housekeeping"):
        assert await housekeep_once(store, Settings(), owner="replica-a", posters={"slack": slack})
    assert slack.deleted == [("slack:T0001:C3:1.1", "F0CANVAS1")]
    assert await store.runs.get_run(one.id) is None and await store.runs.get_run(two.id) is None
    assert "retention: canvas F0REFUSED of slack:T0001:C3:2.1 was not deleted" in caplog.text
    assert "delete it by hand: https://acme.slack.com/docs/F0REFUSED" in caplog.text
    assert "pruned 2 runs (0 sources, 0 votes, 2 documents)" in caplog.text


async def test_the_composition_root_opens_the_named_platforms_outbound_side_only(
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    templates: MigratedTemplates,
) -> None:
    """``open_outbound`` opens each enabled platform named (its posters, no ingress); the toy
    platform makes no documents, so its one is named as left."""
    url = templates.sqlite(tmp_path / "outbound.db")
    registry = (*PLATFORMS, PlatformEntry(TOY, "Toy", "tests.toy_platform:ToyPlatform"))
    settings = fathom_settings(url, llm_server, search_server, registry=registry, TOY_TOKEN="t")
    document = RunDocument(ThreadKey.parse("toy:w:c:t"), CANVAS)
    async with open_storage(settings.core, upgrade=False) as storage:
        async with open_outbound(settings, storage, {"slack"}) as none:
            assert none == {}  # slack is not configured; toy is not named
        async with open_outbound(settings, storage, {TOY, "slack"}) as opened:
            assert list(opened) == [TOY]
            (left,) = await delete_documents([document], opened)
    assert left.reason == "toy cannot delete documents in this release"


async def test_fathom_forget_and_prune_name_the_documents_left_on_their_platform(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Slack is not configured for the command: the runs are deleted, each canvas is named
    with its address (stderr), and ``--dry-run`` lists what would be deleted (stdout)."""
    database = Database(cli_env["DATABASE_URL"])
    store = Store(database)
    try:
        await posted(store, "slack:T0001:C4:1.1", PERSON, CANVAS)
        await posted(store, "feishu:tk:oc_4:om_1", OTHER, DOCX, days_ago=120)
    finally:
        await database.dispose()
    dry = fathom("forget", "--user", PERSON, "--dry-run", env=cli_env, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert f"  would delete canvas F0CANVAS1 of slack:T0001:C4:1.1: {CANVAS.url}\n" in dry.stdout
    done = fathom("forget", "--user", PERSON, env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "  deleted 0 of 1 documents on their platforms\n" in done.stdout
    said = " ".join(done.stderr.split())
    assert (
        "canvas F0CANVAS1 of slack:T0001:C4:1.1 was not deleted (slack is not configured in "
        f"this process); delete it by hand: {CANVAS.url}"
    ) in said
    dry_prune = fathom("prune", "--older-than", "90d", "--dry-run", env=cli_env, cwd=tmp_path)
    assert f"would delete docx doxcnDOC1 of feishu:tk:oc_4:om_1: {DOCX.url}" in dry_prune.stdout
    pruned = fathom("prune", "--older-than", "90d", env=cli_env, cwd=tmp_path)
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith("pruned 1 runs (0 sources, 0 votes, 1 documents)")
    assert f"delete it by hand: {DOCX.url}" in " ".join(pruned.stderr.split())


async def test_fathom_forget_deletes_the_persons_canvas_on_slack(
    cli_env: dict[str, str], tmp_path: Path, slack_server: FakeSlackServer
) -> None:
    """Slack configured (the fake Slack answers ``canvases.delete`` as its method page
    describes it, ``canvas_not_found`` for one not there): the person's canvas is deleted in
    Slack, and one already gone counts as deleted."""
    client = make_web_client("xoxb-test", slack_server.api_url)
    made = await client.canvases_create(
        title="Heat pumps", document_content={"type": "markdown", "markdown": "# Heat pumps"}
    )
    canvas = ReportDocument(kind="canvas", id=str(made["canvas_id"]), url=CANVAS.url)
    gone = ReportDocument(kind="canvas", id="F0GONE", url="https://acme.slack.com/docs/F0GONE")
    database = Database(cli_env["DATABASE_URL"])
    store = Store(database)
    try:
        await posted(store, "slack:T0001:C5:1.1", PERSON, canvas)
        await posted(store, "slack:T0001:C5:2.1", PERSON, gone)
    finally:
        await database.dispose()
    env = {
        **cli_env,
        "SLACK_BOT_TOKEN": "xoxb-test",
        "SLACK_SIGNING_SECRET": "s",
        "SLACK_API_URL": slack_server.api_url,
    }
    done = fathom("forget", "--user", PERSON, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "  deleted 2 of 2 documents on their platforms\n" in done.stdout
    assert "was not deleted" not in done.stderr
    deletes = [c.params.get("canvas_id") for c in slack_server.fake.calls_to("canvases.delete")]
    assert sorted(deletes) == sorted([canvas.id, "F0GONE"])
    assert canvas.id not in slack_server.fake.canvases.live()
