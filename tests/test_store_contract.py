"""The store contract: every store of ``core.chat.stores.ChatStores`` gives the same answers
on SQL (SQLite, and PostgreSQL when TEST_DATABASE_URL is set) and in memory
(``storage.memory.MemoryStores``), so the chat layer's tests may run on either.

What a runner writes is not part of the view: each backend's :class:`Runner` stands in for one
(the SQL stores' ``ClaimStore``; the twin's ``MemoryRuns.write``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from core.chat.stores import ChatStores
from core.values import DeliveryState, ReportDocument, RunStatus, SourceChoice, ThreadKey, Vote
from storage import (
    Admission,
    CancelRequest,
    Claim,
    DailyQuota,
    Database,
    GuidanceTaken,
    QuotaReached,
    RunRecord,
    StopRequest,
    Store,
    ThreadBusy,
    UserBusy,
)
from storage.memory import MemoryStores
from tests.conftest import require_pg_server
from tests.databases import MigratedTemplates

THREAD = ThreadKey(platform="slack", workspace="T1", channel="C1", thread="1700000000.000100")
CONSOLE = ThreadKey(platform="cli", workspace="local", channel="local", thread="c1")


def thread(name: str, channel: str = "C1") -> ThreadKey:
    return THREAD.model_copy(update={"thread": name, "channel": channel})


@dataclass
class Runner:
    """A runner's writes on one backend: start a run, end its searching, finish it."""

    backend: str
    stores: ChatStores
    claims: dict[str, Claim] = field(default_factory=dict)

    async def start(self, run: RunRecord) -> None:
        if isinstance(self.stores, MemoryStores):
            self.stores.runs.write(run.id, status=RunStatus.RUNNING, started_at=_now(), owner="r")
            return
        assert isinstance(self.stores, Store)
        result = await self.stores.claims.claim_run(run.id, "r", stale_after=60, max_attempts=3)
        assert result.claim is not None
        self.claims[run.id] = result.claim

    async def end_searching(self, run: RunRecord) -> None:
        """The run's last checkpoint before its report: its searching ended."""
        if isinstance(self.stores, MemoryStores):
            self.stores.runs.write(run.id, stop_reason="depth_reached")
            return
        assert isinstance(self.stores, Store)
        held = self.claims[run.id]
        variables = {"topics": [], "findings": [], "shouldContinue": False}
        await self.stores.claims.checkpoint(
            held,
            variables=variables,
            variables_version=held.variables_version,
            rounds_done=1,
            usage={},
            notes=[],
            searching_ended="depth_reached",
        )

    async def finish(
        self, run: RunRecord, status: RunStatus = RunStatus.SUCCEEDED, *, tokens: int = 0
    ) -> None:
        """End the started ``run`` with ``status`` (its delivery pending, except a console
        run's), having spent ``tokens``."""
        report = "# r" if status is RunStatus.SUCCEEDED else None
        deliver = run.thread.platform != "cli"
        if isinstance(self.stores, MemoryStores):
            self.stores.runs.write(
                run.id,
                status=status,
                report_markdown=report,
                prompt_tokens=tokens,
                delivery=DeliveryState.PENDING if deliver else None,
            )
            return
        assert isinstance(self.stores, Store)
        await self.stores.claims.finish_run(
            self.claims[run.id],
            status=status,
            report_markdown=report,
            sources=[],
            error=None,
            usage={"prompt_tokens": tokens},
            notes=[],
            deliver=deliver,
        )


@pytest.fixture(name="b", params=["sqlite", "postgresql", "memory"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, templates: MigratedTemplates
) -> AsyncIterator[Runner]:
    """The stores of one backend, with a runner's writes beside them."""
    if request.param == "memory":
        yield Runner("memory", MemoryStores())
        return
    if request.param == "sqlite":
        database = Database(templates.sqlite(tmp_path / "fathom.db"))
        try:
            yield Runner("sqlite", Store(database))
        finally:
            await database.dispose()
        return
    require_pg_server()
    with templates.postgresql() as url:
        database = Database(url)
        try:
            yield Runner("postgresql", Store(database))
        finally:
            await database.dispose()


def _now() -> datetime:
    return datetime.now(UTC)


async def new(b: Runner, where: ThreadKey = THREAD, **args: Any) -> tuple[RunRecord, bool]:
    values: dict[str, Any] = {"topic": "heat pumps", "depth": 2, "strategy": "iterative"}
    values["requested_by"] = "U1"
    values.update(args)
    return await b.stores.runs.create_run(thread=where, **values)


# -- runs: created once, one active per thread, within the requester's limits -------------


async def test_a_run_is_created_queued_in_its_thread_with_what_it_was_given(b: Runner) -> None:
    files = [{"id": "F1", "name": "a.pdf"}]
    run, created = await new(
        b,
        dedupe_key="d1",
        platform_context={"conversation": "x"},
        attachments=files,
        sources=SourceChoice.WEB,
    )
    assert created
    assert (run.status, run.thread, run.thread_key) == (RunStatus.QUEUED, THREAD, str(THREAD))
    assert (run.topic, run.depth, run.strategy, run.requested_by) == (
        "heat pumps",
        2,
        "iterative",
        "U1",
    )
    assert (run.sources, run.attachments, run.platform_context) == (
        SourceChoice.WEB,
        files,
        {"conversation": "x"},
    )
    assert (run.delivery, run.progress_message_id, run.token_allowance) == (None, None, None)
    assert not run.cancel_requested and not run.stop_requested and run.notes == []
    assert run.started_at is None and run.finished_at is None
    assert await b.stores.runs.get_run(run.id) == run
    held = await b.stores.threads.get_thread(str(THREAD))
    assert held is not None and held.id == run.thread_id
    assert (held.platform, held.workspace, held.channel, held.thread_ref) == (
        "slack",
        "T1",
        "C1",
        THREAD.thread,
    )
    assert await b.stores.runs.thread_runs(held.id) == [run]
    assert await b.stores.runs.get_run("nope") is None
    assert await b.stores.threads.get_thread("slack:T1:C1:nope") is None


async def test_a_delivery_seen_again_finds_its_run(b: Runner) -> None:
    first, created = await new(b, dedupe_key="delivery-1")
    again, created_again = await new(b, dedupe_key="delivery-1", topic="other")
    assert created and not created_again and again == first
    long_key = "k" * 400  # fitted to its column, still one run
    one, _ = await new(b, thread("t2"), dedupe_key=long_key)
    two, made = await new(b, thread("t2"), dedupe_key=long_key)
    assert not made and two.id == one.id


async def test_a_thread_has_one_active_run(b: Runner) -> None:
    first, _ = await new(b)
    with pytest.raises(ThreadBusy) as busy:
        await new(b, dedupe_key="another delivery")
    assert busy.value.active is not None and busy.value.active.id == first.id
    await b.start(first)
    with pytest.raises(ThreadBusy):
        await new(b)
    await b.finish(first)
    second, created = await new(b)
    assert created and second.thread_id == first.thread_id
    assert [r.id for r in await b.stores.runs.thread_runs(first.thread_id)] == [
        first.id,
        second.id,
    ]


async def test_the_per_user_limit_refuses_a_new_run_never_a_redelivery(b: Runner) -> None:
    limit = Admission(user_limit=2)
    await new(b, thread("t1"), dedupe_key="a", admission=limit)
    await new(b, thread("t2"), dedupe_key="b", admission=limit)
    with pytest.raises(UserBusy) as busy:
        await new(b, thread("t3"), dedupe_key="c", admission=limit)
    assert (busy.value.active, busy.value.limit) == (2, 2)
    again, created = await new(b, thread("t2"), dedupe_key="b", admission=limit)
    assert not created and again.thread == thread("t2")
    other, created = await new(b, thread("t4"), requested_by="U2", admission=limit)
    assert created and other.requested_by == "U2"
    assert await b.stores.threads.get_thread(str(thread("t3"))) is None  # refused: nothing


async def test_concurrent_requests_of_one_user_are_admitted_up_to_the_limit(b: Runner) -> None:
    limit = Admission(user_limit=3)
    tries = [new(b, thread(f"t{i}"), dedupe_key=f"d{i}", admission=limit) for i in range(8)]
    results = await asyncio.gather(*tries, return_exceptions=True)
    admitted = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if isinstance(r, UserBusy)]
    assert (len(admitted), len(refused)) == (3, 5), results
    assert len(await b.stores.runs.active_runs_for_user("U1")) == 3


async def test_the_daily_quota_counts_runs_and_reserves_tokens(b: Runner) -> None:
    today = _now() - timedelta(hours=1)
    runs = Admission(quota=DailyQuota(since=today, runs=1))
    await new(b, thread("t1"), admission=runs)
    with pytest.raises(QuotaReached) as reached:
        await new(b, thread("t2"), admission=runs)
    assert (reached.value.kind, reached.value.used, reached.value.limit) == ("runs", 1, 1)
    tokens = DailyQuota(since=today, tokens=50_000, fallback_per_round=10_000, least=2_000)
    theirs = Admission(quota=tokens)
    run, _ = await new(
        b, thread("t3"), requested_by="U2", depth=3, admission=Admission(quota=tokens)
    )
    assert run.token_allowance == 30_000  # 3 rounds at the fallback estimate
    second, _ = await new(
        b, thread("t4"), requested_by="U2", depth=3, admission=Admission(quota=tokens)
    )
    assert second.token_allowance == 20_000  # what is left of the day
    with pytest.raises(QuotaReached) as spent:
        await new(b, thread("t5"), requested_by="U2", admission=theirs)
    assert (spent.value.kind, spent.value.used, spent.value.reserved) == ("tokens", 50_000, 50_000)
    await b.start(run)
    await b.finish(run, tokens=6_000)  # a finished run counts what it spent, not its allowance
    third, _ = await new(
        b, thread("t6"), requested_by="U2", depth=1, admission=Admission(quota=tokens)
    )
    assert third.token_allowance == 2_000  # 6_000 tokens over 3 rounds, for one round


# -- stop and cancel, decided on the run as it is -------------------------------------------


async def test_cancel_ends_a_queued_run_at_once_and_flags_a_running_one(b: Runner) -> None:
    runs = b.stores.runs
    queued, _ = await new(b, thread("t1"))
    assert await runs.request_cancel(queued.id) is CancelRequest.CANCELLED
    ended = await runs.get_run(queued.id)
    assert ended is not None and ended.status is RunStatus.CANCELLED and ended.cancel_requested
    assert ended.delivery is DeliveryState.PENDING and ended.finished_at is not None
    assert await runs.request_cancel(queued.id) is CancelRequest.ALREADY  # outcome not out yet
    running, _ = await new(b, thread("t2"))
    await b.start(running)
    assert await runs.request_cancel(running.id) is CancelRequest.CANCELLING
    assert await runs.request_cancel(running.id) is CancelRequest.ALREADY
    flagged = await runs.get_run(running.id)
    assert flagged is not None and flagged.status is RunStatus.RUNNING and flagged.cancel_requested
    posting, _ = await new(b, thread("t3"))
    await b.start(posting)
    await b.finish(posting)
    assert await runs.request_cancel(posting.id) is CancelRequest.POSTING
    assert await runs.request_cancel("nope") is CancelRequest.ENDED
    console, _ = await new(b, CONSOLE)
    assert await runs.request_cancel(console.id) is CancelRequest.CANCELLED
    quiet = await runs.get_run(console.id)
    assert quiet is not None and quiet.delivery is None  # its caller shows the outcome


async def test_stop_cancels_a_run_that_never_started_and_flags_a_running_one(b: Runner) -> None:
    runs = b.stores.runs
    queued, _ = await new(b, thread("t1"))
    assert await runs.request_stop(queued.id) is StopRequest.CANCELLED
    cancelled = await runs.get_run(queued.id)
    assert cancelled is not None and cancelled.status is RunStatus.CANCELLED
    assert await runs.request_stop(queued.id) is StopRequest.ENDED
    running, _ = await new(b, thread("t2"))
    await b.start(running)
    assert await runs.request_stop(running.id) is StopRequest.STOPPING
    stopping = await runs.get_run(running.id)
    assert stopping is not None and stopping.stop_requested and not stopping.cancel_requested
    assert await runs.request_stop(running.id) is StopRequest.ENDED  # a repeated press
    assert await runs.request_cancel(running.id) is CancelRequest.CANCELLING
    assert await runs.request_stop("nope") is StopRequest.ENDED


async def test_concurrent_cancels_give_one_cancelling_and_the_rest_already(b: Runner) -> None:
    run, _ = await new(b)
    await b.start(run)
    answers = await asyncio.gather(*(b.stores.runs.request_cancel(run.id) for _ in range(5)))
    assert sorted(answers) == sorted([CancelRequest.CANCELLING] + [CancelRequest.ALREADY] * 4)


# -- the progress message and the queue ----------------------------------------------------


async def test_a_queued_runs_progress_message_is_reserved_once_and_settled(b: Runner) -> None:
    runs = b.stores.runs
    run, _ = await new(b)
    assert await runs.reserve_progress_message(run.id, "marker")
    assert not await runs.reserve_progress_message(run.id, "marker-2")
    assert not await runs.settle_progress_message(run.id, "marker-2", "m0")
    assert await runs.settle_progress_message(run.id, "marker", "m1")
    shown = await runs.get_run(run.id)
    assert shown is not None and shown.progress_message_id == "m1"
    other, _ = await new(b, thread("t2"))
    await b.start(other)
    assert not await runs.reserve_progress_message(other.id, "marker")  # its runner posts
    await runs.set_progress_message(other.id, "m2")
    moved = await runs.get_run(other.id)
    assert moved is not None and moved.progress_message_id == "m2"


async def test_a_reports_document_is_recorded_once_the_first_record_wins(b: Runner) -> None:
    runs = b.stores.runs
    run, _ = await new(b)
    assert run.report_document is None
    canvas = ReportDocument(kind="canvas", id="F1", url="https://x.slack.com/docs/T1/F1")
    other = ReportDocument(kind="canvas", id="F2")
    racing = await asyncio.gather(
        runs.record_report_document(run.id, canvas), runs.record_report_document(run.id, other)
    )
    assert racing[0] == racing[1] in (canvas, other)  # both see the one that was kept
    kept = await runs.get_run(run.id)
    assert kept is not None and kept.report_document == racing[0]
    refused = ReportDocument(kind=ReportDocument.PARTS, reason="missing_scope")
    assert await runs.record_report_document(run.id, refused) == racing[0]
    assert await runs.record_report_document("nope", canvas) is None
    second, _ = await new(b, thread("t2"))
    assert await runs.record_report_document(second.id, refused) == refused
    read = await runs.get_run(second.id)
    assert read is not None and read.report_document == refused and read.report_document.refused


async def test_a_queued_run_knows_its_place_in_line(b: Runner) -> None:
    first, _ = await new(b, thread("t1"))
    second, _ = await new(b, thread("t2"))
    third, _ = await new(b, thread("t3"))
    places = [await b.stores.runs.queue_place(r.id) for r in (first, second, third)]
    assert places == [1, 2, 3]
    await b.start(first)
    assert await b.stores.runs.queue_place(first.id) is None
    assert await b.stores.runs.queue_place(third.id) == 2
    assert await b.stores.runs.queue_place("nope") is None


# -- listings ------------------------------------------------------------------------------


async def test_a_users_and_a_channels_runs_are_listed_in_order(b: Runner) -> None:
    runs = b.stores.runs
    made = [(await new(b, thread(f"t{i}", channel="C9" if i == 2 else "C1")))[0] for i in range(4)]
    await b.start(made[0])
    await b.finish(made[0])
    assert [r.id for r in await runs.active_runs_for_user("U1")] == [r.id for r in made[1:]]
    recent = await runs.recent_runs_for_user("U1", 2)
    assert [r.id for r in recent] == [made[3].id, made[2].id]
    in_c1 = await runs.recent_runs_in_channel("slack", "T1", "C1")
    assert [r.id for r in in_c1] == [made[3].id, made[1].id, made[0].id]
    active_c1 = await runs.active_runs_in_channel("slack", "T1", "C1")
    assert [r.id for r in active_c1] == [made[1].id, made[3].id]
    assert await runs.recent_runs_in_channel("slack", "T1", "C404") == []
    assert await runs.recent_runs_for_user("U404") == []


async def test_a_users_runs_page_by_their_place_not_an_offset(b: Runner) -> None:
    """``before`` (a run's creation time and id) lists the runs after that place in the
    newest-first order: a run created meanwhile moves nothing, and a place whose run is gone
    still works; at the same time, the id orders (and breaks the tie)."""
    runs = b.stores.runs
    made = [(await new(b, thread(f"t{i}")))[0] for i in range(4)]
    first = await runs.recent_runs_for_user("U1", 2)
    assert [r.id for r in first] == [made[3].id, made[2].id]
    await new(b, thread("t-new"))  # created between two pages
    after = (first[-1].created_at, first[-1].id)
    second = await runs.recent_runs_for_user("U1", 2, after)
    assert [r.id for r in second] == [made[1].id, made[0].id]
    assert await runs.recent_runs_for_user("U1", 2, (made[0].created_at, made[0].id)) == []
    tie = made[2].created_at
    same_time = await runs.recent_runs_for_user("U1", 1, (tie, "f" * 32))  # id after made[2]'s
    assert [r.id for r in same_time] == [made[2].id]
    assert [r.id for r in await runs.recent_runs_for_user("U1", 1, (tie, ""))] == [made[1].id]


async def test_a_threads_latest_and_active_runs(b: Runner) -> None:
    runs = b.stores.runs
    first, _ = await new(b)
    assert await runs.latest_run_in_thread(str(THREAD)) == first
    assert await runs.active_run_in_thread(str(THREAD)) == first
    await b.start(first)
    await b.finish(first, RunStatus.FAILED)
    assert await runs.active_run_in_thread(str(THREAD)) is None
    second, _ = await new(b)
    latest = await runs.latest_run_in_thread(str(THREAD))
    assert latest is not None and latest.id == second.id
    assert await runs.latest_run_in_thread("slack:T1:C1:nope") is None
    assert await runs.run_sources(second.id) == []


async def test_runs_are_counted_by_status_and_platform(b: Runner) -> None:
    runs = b.stores.runs
    done, _ = await new(b, thread("t1"))
    await new(b, thread("t2"))
    await new(b, CONSOLE)
    await b.start(done)
    await b.finish(done)
    assert sorted(await runs.count_runs()) == [
        ("queued", "cli", 1),
        ("queued", "slack", 1),
        ("succeeded", "slack", 1),
    ]
    assert sorted(await runs.count_runs([RunStatus.QUEUED, RunStatus.RUNNING])) == [
        ("queued", "cli", 1),
        ("queued", "slack", 1),
    ]


async def test_usage_is_a_users_or_a_channels_since_a_moment(b: Runner) -> None:
    mine, _ = await new(b, thread("t1"))
    await new(b, thread("t2", channel="C2"), requested_by="U2")
    await b.start(mine)
    await b.finish(mine, tokens=700)
    since = _now() - timedelta(minutes=5)
    by_user = await b.stores.runs.usage_since(since, requested_by="U1")
    assert [(u.prompt_tokens, u.completion_tokens) for u in by_user] == [(700, 0)]
    in_channel = await b.stores.runs.usage_since(since, channel=("slack", "T1", "C2"))
    assert [u.prompt_tokens for u in in_channel] == [0]
    assert len(await b.stores.runs.usage_since(since)) == 2
    assert await b.stores.runs.usage_since(_now() + timedelta(minutes=5)) == []


# -- threads: re-keyed, listed, steered ------------------------------------------------------


async def test_a_pending_thread_is_rekeyed_with_its_runs(b: Runner) -> None:
    pending = thread("pending-abc")
    run, _ = await new(b, pending)
    final = thread("1700000000.000200")
    moved = await b.stores.threads.rekey_thread(run.thread_id, final)
    assert (moved.id, moved.key, moved.thread_ref) == (run.thread_id, str(final), final.thread)
    assert await b.stores.threads.get_thread(str(pending)) is None
    now = await b.stores.runs.get_run(run.id)
    assert now is not None and (now.thread_key, now.thread) == (str(final), final)
    assert await b.stores.runs.active_run_in_thread(str(final)) == now


async def test_threads_are_listed_most_recently_active_first(b: Runner) -> None:
    first, _ = await new(b, thread("t1"), topic="first")
    await new(b, thread("t2"), topic="second")
    await b.start(first)
    await b.finish(first)
    await new(b, thread("t1"), topic="again")
    listed = await b.stores.threads.list_threads()
    assert [(s.key, s.runs, s.last_topic, s.last_status) for s in listed] == [
        (str(thread("t1")), 2, "again", "queued"),
        (str(thread("t2")), 1, "second", "queued"),
    ]
    assert len(await b.stores.threads.list_threads(limit=1)) == 1


async def test_guidance_is_kept_while_the_run_searches_and_once_per_delivery(b: Runner) -> None:
    threads = b.stores.threads
    run, _ = await new(b)
    assert await threads.load_variables(run.thread_id) is None
    entry = {"by": "U2", "text": "look at prices", "key": "reply-1"}
    assert await threads.add_guidance(run.id, entry) is GuidanceTaken.KEPT
    assert await threads.add_guidance(run.id, entry) is GuidanceTaken.KEPT  # redelivered
    variables = await threads.load_variables(run.thread_id)
    assert variables is not None and variables["guidance"] == [entry]
    assert (variables["topics"], variables["findings"]) == ([], [])
    assert variables["shouldContinue"] is True
    second = {"by": "U2", "text": "and costs", "key": "reply-2"}
    assert await threads.add_guidance(run.id, second) is GuidanceTaken.KEPT
    kept = await threads.load_variables(run.thread_id)
    assert kept is not None and kept["guidance"] == [entry, second]
    assert await threads.add_guidance("nope", entry) is GuidanceTaken.ENDED


async def test_guidance_is_too_late_once_the_searching_ended_and_refused_after(b: Runner) -> None:
    run, _ = await new(b)
    await b.start(run)
    await b.end_searching(run)
    late = {"by": "U2", "text": "too late", "key": "late"}
    assert await b.stores.threads.add_guidance(run.id, late) is GuidanceTaken.TOO_LATE
    await b.finish(run)
    assert await b.stores.threads.add_guidance(run.id, late) is GuidanceTaken.ENDED


# -- events, files, contexts, votes ----------------------------------------------------------


async def test_a_delivery_is_recorded_once(b: Runner) -> None:
    events = b.stores.events
    assert await events.claim_event("slack:E1")
    assert not await events.claim_event("slack:E1")
    assert await events.events_seen(["slack:E0", "slack:E1"])
    assert not await events.events_seen(["slack:E0"])
    long_key = "e" * 300
    assert await events.claim_event(long_key) and not await events.claim_event(long_key)
    assert await events.events_seen([long_key])
    answers = await asyncio.gather(*(events.claim_event("slack:E2") for _ in range(5)))
    assert sorted(answers) == [False, False, False, False, True]
    assert await events.prune_events(timedelta(hours=1)) == 0
    await asyncio.sleep(0.01)
    assert await events.prune_events(timedelta(0)) == 3
    assert not await events.events_seen(["slack:E1"])


async def test_files_are_taken_once_by_the_next_request_in_their_scope(b: Runner) -> None:
    files = b.stores.files
    since = _now() - timedelta(minutes=1)
    await files.remember_files("scope-a", [{"id": "F1"}, {"id": "F2"}])
    await files.remember_files("scope-b", [{"id": "F3"}])
    await files.remember_files("scope-a", [])
    assert await files.take_files("scope-a", _now() + timedelta(minutes=1)) == []  # too old
    taken = await asyncio.gather(
        files.take_files("scope-a", since), files.take_files("scope-a", since)
    )
    assert sorted(taken, key=len) == [[], [{"id": "F1"}, {"id": "F2"}]]
    assert await files.take_files("scope-a", since) == []
    assert await files.prune_files(timedelta(hours=1)) == 0
    await asyncio.sleep(0.01)
    assert await files.prune_files(timedelta(0)) == 1
    assert await files.take_files("scope-b", since) == []


async def test_a_conversations_last_context_is_kept(b: Runner) -> None:
    contexts = b.stores.contexts
    assert await contexts.conversation_context(str(THREAD)) is None
    await contexts.set_conversation_context(str(THREAD), {"channel_id": "C1"})
    await contexts.set_conversation_context(str(THREAD), {"channel_id": "C2"})
    assert await contexts.conversation_context(str(THREAD)) == {"channel_id": "C2"}
    assert await contexts.prune_contexts(timedelta(hours=1)) == 0
    await asyncio.sleep(0.01)
    assert await contexts.prune_contexts(timedelta(0)) == 1
    assert await contexts.conversation_context(str(THREAD)) is None


async def test_a_vote_is_one_per_person_and_a_second_changes_it(b: Runner) -> None:
    run, _ = await new(b)
    feedback = b.stores.feedback
    assert await feedback.record_feedback(run.id, "U1", Vote.UP) is None
    assert await feedback.record_feedback(run.id, "U1", Vote.DOWN) is Vote.UP
    assert await feedback.record_feedback(run.id, "U2", Vote.DOWN) is None
    assert await feedback.record_feedback(run.id, "U1", Vote.DOWN) is Vote.DOWN


# -- progress of runs asked for over MCP -----------------------------------------------------


async def test_an_mcp_runs_progress_rows_are_numbered_in_order_and_read_after_a_number(
    b: Runner,
) -> None:
    run, _ = await new(b)
    other, _ = await new(b, thread("2"))
    progress = b.stores.progress
    assert await progress.since(run.id) == []
    assert await progress.append(run.id, "Searching…") == 1
    assert await progress.append(other.id, "elsewhere") == 1
    assert await progress.append(run.id, "1/2th search executed.") == 2
    assert await progress.append(run.id, "Writing the report…") == 3
    rows = await progress.since(run.id)
    assert [(r.run_id, r.seq, r.text) for r in rows] == [
        (run.id, 1, "Searching…"),
        (run.id, 2, "1/2th search executed."),
        (run.id, 3, "Writing the report…"),
    ]
    assert [r.text for r in await progress.since(run.id, 2)] == ["Writing the report…"]
    assert await progress.since(run.id, 3) == []
    with pytest.raises(KeyError):
        await progress.append("no-such-run", "lost")


async def test_concurrent_progress_rows_of_one_run_get_distinct_numbers(b: Runner) -> None:
    run, _ = await new(b)
    numbers = await asyncio.gather(*(b.stores.progress.append(run.id, f"{i}") for i in range(6)))
    assert sorted(numbers) == [1, 2, 3, 4, 5, 6]
    assert [r.seq for r in await b.stores.progress.since(run.id)] == [1, 2, 3, 4, 5, 6]
