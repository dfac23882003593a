"""Stop and write now, and the run budgets (tokens, seconds): the searching ends early, no
search starts after the signal, and the report is written from what was found and says why.
Through the real service, store (SQLite and PostgreSQL) and fakes at the HTTP boundary."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from core.engine.budget import RunBudget
from core.engine.graph.notes import STOPPED_BEFORE_SEARCH
from core.engine.graph.state import NodeStatus
from core.engine.graph.strategy import GraphSettings
from core.engine.progress import ProgressEvent, ProgressKind
from core.engine.state import StopReason
from core.operations.job import run_attended
from core.research.cost import Prices
from core.research.outcome import final_progress_text
from core.research.policy import Clocks, RunPolicy
from core.research.requests import DailyLimitReached, ResearchRequest, UserQuota
from core.values import RunStatus, ThreadKey
from core.words import wording
from storage import CancelRequest, StopRequest
from tests.fakes import Hang
from tests.test_engine import (
    NOW,
    TOPIC,
    Collect,
    Harness,
    after_search,
    fresh_store,
    harness,  # noqa: F401
    sqlite_only,
)
from tests.test_run_lifecycle import until

STOPPED_NOTE = "Stopped early on request (Stop and write now)"


async def test_stop_from_this_process_writes_the_report_from_the_searches_done(
    harness: Harness,  # noqa: F811
) -> None:
    run_id = await harness.submit(depth=5)
    answers: list[StopRequest] = []

    async def press() -> None:
        answers.append(await harness.service.requests.stop(run_id))

    outcome = await run_attended(harness.service, run_id, after_search(1, press))
    assert answers == [StopRequest.STOPPING]
    assert outcome.status is RunStatus.SUCCEEDED and outcome.stop_reason is StopReason.STOPPED
    assert len(harness.search.fake.queries) == 1 and len(outcome.topics) == 1
    assert len(harness.planner_requests()) == 1  # seen at once: no further plan either
    assert len(harness.writer_requests()) == 1
    assert STOPPED_NOTE in (outcome.report_markdown or "")
    assert "1 search done by then" in (outcome.report_markdown or "")
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and run.stop_requested and run.status == "succeeded"
    # A press after the run ended changes nothing and says so.
    assert await harness.service.requests.stop(run_id) is StopRequest.ENDED


@pytest.mark.parametrize(
    ("topic", "final"),
    [
        ("heat pumps", "Stopped before any search found anything (0 of 3 searches): nothing"),
        ("热泵", "在任何搜索找到内容之前已停止（已完成 0/3 次搜索）：没有可报告的内容。"),
    ],
)
async def test_stop_before_the_first_search_ends_with_nothing_to_report_not_a_failure(
    harness: Harness,  # noqa: F811
    topic: str,
    final: str,
) -> None:
    """ "Stop and write now" pressed as the run starts, before its first search: no search,
    no writer call, and the run ends stopped with nothing to report (in the request's
    language), never failed with "no search returned any results", and counted as stopped,
    not cancelled."""
    from core.metrics import Metrics

    metrics = Metrics()
    service = harness.build_service(metrics=metrics)
    run_id = await harness.submit(topic=topic)
    answers: list[StopRequest] = []

    async def on_event(event: ProgressEvent) -> None:
        if event.kind is ProgressKind.STARTED:
            answers.append(await service.requests.stop(run_id))

    progress = Collect(on_event)
    outcome = await run_attended(service, run_id, progress)
    assert answers == [StopRequest.STOPPING]
    assert outcome.status is RunStatus.CANCELLED and outcome.stop_reason is StopReason.STOPPED
    assert outcome.error is None and outcome.report_markdown is None
    assert harness.search.fake.queries == [] and harness.writer_requests() == []
    assert progress.final.startswith(final), progress.final
    # The replica that delivers it, and `fathom thread show`, read the same ending back.
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and run.stop_reason == "stopped"
    stored = await harness.service.executor.stored_outcome(run)
    assert final_progress_text(stored).startswith(final)

    def finished(status: str) -> float | None:
        labels = {"status": status, "platform": "cli", "strategy": "iterative"}
        return metrics.registry.get_sample_value("fathom_runs_finished_total", labels)

    assert (finished("stopped"), finished("cancelled")) == (1, None)


async def test_stop_then_cancel_while_the_report_is_written_ends_cancelled_without_its_notes(
    harness: Harness,  # noqa: F811
) -> None:
    """Stop and write now, then Cancel while the report is being written: the run ends
    cancelled (not "stopped before any search", though it was stopped), and the notes
    meant for the report that was not written ("Stopped early ...") are not kept."""
    run_id = await harness.submit(depth=5)

    async def press() -> None:
        assert await harness.service.requests.stop(run_id) is StopRequest.STOPPING

    async def on_event(event: ProgressEvent) -> None:
        if event.kind is ProgressKind.SEARCHED and event.rounds_done == 1:
            await press()
        if event.kind is ProgressKind.WRITING:
            assert await harness.service.requests.cancel(run_id) is CancelRequest.CANCELLING

    progress = Collect(on_event)
    outcome = await run_attended(harness.service, run_id, progress)
    assert outcome.status is RunStatus.CANCELLED and outcome.stop_reason is StopReason.CANCELLED
    assert outcome.report_markdown is None
    assert progress.final.startswith("Research cancelled after 1 of 5 searches."), progress.final
    assert not any(STOPPED_NOTE in note for note in outcome.notes), outcome.notes
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert not any(STOPPED_NOTE in note for note in run.notes), run.notes
    stored = await harness.service.executor.stored_outcome(run)
    assert final_progress_text(stored).startswith("Research cancelled after 1 of 5 searches.")


async def test_a_report_refused_by_a_cancel_from_another_replica_keeps_no_report_notes(
    harness: Harness,  # noqa: F811
) -> None:
    """The other path to the same end: the report is written (no heartbeat saw the cancel
    yet) and refused in the statement that would have recorded it. The run is recorded
    cancelled with the notes it had before the report's own."""
    run_id = await harness.submit(depth=5)
    database, other = await fresh_store(harness.url)

    async def on_event(event: ProgressEvent) -> None:
        if event.kind is ProgressKind.SEARCHED and event.rounds_done == 1:
            assert await other.runs.request_stop(run_id) is StopRequest.STOPPING
        if event.kind is ProgressKind.WRITING:
            assert await other.runs.request_cancel(run_id) is CancelRequest.CANCELLING

    try:
        progress = Collect(on_event)
        outcome = await run_attended(harness.service, run_id, progress)
    finally:
        await database.dispose()
    assert len(harness.writer_requests()) == 1  # it wrote the report, which was refused
    assert outcome.status is RunStatus.CANCELLED and outcome.stop_reason is StopReason.CANCELLED
    assert progress.final.startswith("Research cancelled after 1 of 5 searches."), progress.final
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and (run.status, run.report_markdown) == ("cancelled", None)
    assert run.stop_reason == "cancelled"
    assert not any(STOPPED_NOTE in note for note in run.notes + outcome.notes), run.notes


async def test_a_run_interrupted_while_its_report_is_written_keeps_no_report_notes(
    harness: Harness,  # noqa: F811
) -> None:
    """Ctrl-C (the task cancelled) while the report of a stopped run is written: the run is
    recorded interrupted without the notes meant for that report, so a resumed run that
    then searches to its depth does not say it was stopped early."""
    harness.llm.fake.script("writer", Hang(60))
    run_id = await harness.submit(depth=5)
    writing = asyncio.Event()

    async def on_event(event: ProgressEvent) -> None:
        if event.kind is ProgressKind.SEARCHED and event.rounds_done == 1:
            assert await harness.service.requests.stop(run_id) is StopRequest.STOPPING
        if event.kind is ProgressKind.WRITING:
            writing.set()

    task = asyncio.create_task(run_attended(harness.service, run_id, Collect(on_event)))
    await writing.wait()
    await until(lambda: harness.writer_requests())  # the writer call is out
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and (run.status, run.error) == ("cancelled", "interrupted")
    assert not any(STOPPED_NOTE in note for note in run.notes), run.notes


async def test_stop_while_the_first_search_runs_writes_the_report_from_it(
    harness: Harness,  # noqa: F811
) -> None:
    """Pressed while the first search is under way: that search finishes, no other starts,
    and the report is written from it."""
    run_id = await harness.submit()

    async def on_event(event: ProgressEvent) -> None:
        if event.kind is ProgressKind.SEARCHING and event.rounds_done == 0:
            assert await harness.service.requests.stop(run_id) is StopRequest.STOPPING

    outcome = await run_attended(harness.service, run_id, Collect(on_event))
    assert outcome.status is RunStatus.SUCCEEDED and outcome.stop_reason is StopReason.STOPPED
    assert len(harness.search.fake.queries) == 1 and outcome.report_markdown
    assert STOPPED_NOTE in outcome.report_markdown


async def test_stop_from_another_replica_is_seen_before_the_next_search(
    harness: Harness,  # noqa: F811
) -> None:
    run_id = await harness.submit(depth=5)
    database, other = await fresh_store(harness.url)  # e.g. the replica the button reached
    answers: list[StopRequest] = []

    async def press_twice() -> None:
        answers.append(await other.runs.request_stop(run_id))
        answers.append(await other.runs.request_stop(run_id))  # a press delivered twice

    try:
        outcome = await run_attended(harness.service, run_id, after_search(1, press_twice))
    finally:
        await database.dispose()
    assert answers == [StopRequest.STOPPING, StopRequest.ENDED]
    assert outcome.status is RunStatus.SUCCEEDED and outcome.stop_reason is StopReason.STOPPED
    # The flag arrives with the checkpoint after the next plan, before that plan's search.
    assert len(harness.search.fake.queries) == 1 and len(harness.planner_requests()) == 2
    assert STOPPED_NOTE in (outcome.report_markdown or "")


@sqlite_only
async def test_stop_of_a_queued_run_cancels_it_and_cancel_then_stop_changes_nothing(
    harness: Harness,  # noqa: F811
) -> None:
    queued = await harness.submit(thread="t1")
    assert await harness.service.requests.stop(queued) is StopRequest.CANCELLED
    outcome = await run_attended(harness.service, queued)
    assert outcome.status is RunStatus.CANCELLED
    assert harness.planner_requests() == [] and harness.search.fake.queries == []

    running = await harness.submit(thread="t2", depth=5)
    answers: list[StopRequest] = []

    async def cancel_then_stop() -> None:
        assert await harness.service.requests.cancel(running) is CancelRequest.CANCELLING
        answers.append(await harness.service.requests.stop(running))

    cancelled = await run_attended(harness.service, running, after_search(1, cancel_then_stop))
    assert answers == [StopRequest.ENDED]
    assert cancelled.status is RunStatus.CANCELLED and cancelled.report_markdown is None


class StopAfterFirstSearch:
    """The real provider, pressing "Stop and write now" once its first search has answered
    (from the search's own task: the other sub-questions of the turn are waiting for it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.press: Callable[[], Awaitable[StopRequest]] | None = None
        self.answers: list[StopRequest] = []

    async def search(self, query: str) -> Any:
        results = await self.inner.search(query)
        if self.press is not None and not self.answers:
            self.answers.append(await self.press())
        return results


async def test_a_graph_run_stopped_mid_turn_answers_what_it_searched(
    harness: Harness,  # noqa: F811
) -> None:
    search = StopAfterFirstSearch(harness.search_provider)
    service = harness.build_service(
        search=search,
        strategy_settings={"graph": GraphSettings(_env_file=None, FATHOM_MAX_PARALLEL_SEARCHES=1)},
    )
    request = ResearchRequest(topic=TOPIC, depth=2, thread=harness.thread("g1"), strategy="graph")
    run, _ = await service.requests.submit(request)
    search.press = lambda: service.requests.stop(run.id)
    outcome = await run_attended(service, run.id)
    assert search.answers == [StopRequest.STOPPING]
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    assert outcome.stop_reason is StopReason.STOPPED
    nodes = outcome.as_json()["nodes"]
    assert isinstance(nodes, list)
    answered = [n for n in nodes if n["status"] == NodeStatus.ANSWERED]
    skipped = [n for n in nodes if n["error"] == STOPPED_BEFORE_SEARCH]
    assert len(answered) == 1 and skipped  # the searched one is answered and used
    assert len(harness.search.fake.queries) == 1
    assert len(harness.llm.fake.requests_for("graph_planner")) == 1  # no second turn
    assert STOPPED_NOTE in (outcome.report_markdown or "")


# -- budgets ----------------------------------------------------------------------------------


def test_the_token_budget_keeps_the_writers_reserve() -> None:
    """A small budget keeps half for the writer (a large one 20 %, at least 4,000 tokens:
    tests/test_token_limits.py), and a step expected to pass the searching's share is not
    begun."""
    from core.models import Usage

    budget = RunBudget(tokens=1000, seconds=60)
    assert budget.searching_tokens() == 500
    assert budget.spent(Usage(prompt_tokens=400, completion_tokens=99), 10) is None
    assert budget.spent(Usage(prompt_tokens=400, completion_tokens=100), 10) is (
        StopReason.TOKEN_BUDGET
    )
    assert budget.spent(Usage(prompt_tokens=300), 10, next_step=200) is None
    assert budget.spent(Usage(prompt_tokens=300), 10, next_step=201) is StopReason.TOKEN_BUDGET
    assert budget.spent(Usage(), 60) is StopReason.TIME_BUDGET
    assert RunBudget().spent(Usage(prompt_tokens=10**9), 10**9) is None  # unlimited


@sqlite_only
async def test_the_token_budget_stops_the_searching_and_the_report_says_so(
    harness: Harness,  # noqa: F811
) -> None:
    # How many tokens the first plan of this topic costs (a probe run in its own thread):
    probe = await harness.submit(depth=1, thread="probe")
    first_plan: list[int] = []

    async def measure() -> None:
        run = await harness.store.runs.get_run(probe)
        assert run is not None
        first_plan.append(run.prompt_tokens + run.completion_tokens)

    await run_attended(harness.service, probe, after_search(1, measure))
    (spent_by_one_plan,) = first_plan
    # A budget whose searching share (half of a small budget) takes one plan, one search and a
    # second plan; a third, expected to be as large as the second, would pass it.
    tokens = 4 * spent_by_one_plan + 2
    service = harness.build_service(policy=RunPolicy(budget=RunBudget(tokens=tokens)))
    before = len(harness.search.fake.queries)
    run_id = await harness.submit(depth=5, thread="budget")
    outcome = await run_attended(service, run_id)
    assert outcome.status is RunStatus.SUCCEEDED and outcome.stop_reason is (
        StopReason.TOKEN_BUDGET
    )
    assert len(harness.search.fake.queries) == before + 1 and len(outcome.topics) == 1
    report = outcome.report_markdown or ""
    assert f"Stopped at the run's token budget ({tokens:,} tokens" in report
    assert "FATHOM_MAX_RUN_TOKENS" in report
    ended, spent = final_progress_text(outcome).split("\n")
    assert ended == (
        "Research done, stopped early after 1 of 5 searches (the run's token budget was "
        f"reached); {len(outcome.sources)} sources."
    )
    tokens_used = outcome.usage.prompt_tokens + outcome.usage.completion_tokens
    assert spent.startswith("1 search · ") and f" {wording._tokens(tokens_used)} tokens" in spent
    assert tokens_used <= tokens  # the writer's request included
    # A replica that delivers the outcome later reads the same ending back.
    run = await harness.store.runs.get_run(run_id)
    assert run is not None
    assert final_progress_text(await service.executor.stored_outcome(run)).split("\n")[0] == ended


@sqlite_only
async def test_the_time_budget_stops_the_searching_and_the_report_says_so(
    harness: Harness,  # noqa: F811
) -> None:
    now = [100.0]
    service = harness.build_service(
        policy=RunPolicy(budget=RunBudget(seconds=1200)),
        clocks=Clocks(now=lambda: NOW, monotonic=lambda: now[0]),
    )
    run_id = await harness.submit(depth=5)

    def two_minutes_past_the_budget() -> None:
        now[0] += 1320.0

    outcome = await run_attended(service, run_id, after_search(2, two_minutes_past_the_budget))
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.stop_reason is StopReason.TIME_BUDGET
    assert len(harness.search.fake.queries) == 2
    assert "Stopped at the run's time budget (1200 s" in (outcome.report_markdown or "")


@pytest.mark.parametrize("depth", [60, 500])
def test_any_positive_depth_may_be_allowed(depth: int) -> None:
    from core.settings import load_settings

    settings = load_settings(_env_file=None, FATHOM_MAX_DEPTH=str(depth))
    assert settings.max_depth == depth
    assert settings.max_run_tokens == 300_000 and settings.max_run_seconds == 1200


# -- daily quotas -----------------------------------------------------------------------------


def chat_request(thread: str, *, user: str = "U1", digest_id: str | None = None) -> Any:
    key = ThreadKey(platform="slack", workspace="T1", channel="C1", thread=thread)
    return ResearchRequest(topic=TOPIC, depth=1, thread=key, requested_by=user, digest_id=digest_id)


async def test_the_daily_run_quota_is_counted_across_replicas(
    harness: Harness,  # noqa: F811
) -> None:
    database, other = await fresh_store(harness.url)  # another replica's pool
    try:
        here = harness.build_service(policy=RunPolicy(quota=UserQuota(runs=2)))
        there = harness.build_service(store=other, policy=RunPolicy(quota=UserQuota(runs=2)))
        await here.requests.submit(chat_request("1"))
        delivered = chat_request("2").model_copy(update={"dedupe_key": "ev-2"})
        await there.requests.submit(delivered)
        with pytest.raises(DailyLimitReached) as reached:
            await there.requests.submit(chat_request("3"))
        assert (reached.value.kind, reached.value.limit) == ("runs", 2)
        assert reached.value.resets_at == datetime(2026, 12, 3, tzinfo=ZoneInfo("UTC"))
        # A redelivery of a request that made its run, another user, a digest's firing and
        # the console are not refused.
        assert (await here.requests.submit(delivered))[1] is False
        await there.requests.submit(chat_request("4", user="U2"))
        await there.requests.submit(chat_request("5", digest_id="D1"))
        await there.requests.submit(
            ResearchRequest(topic=TOPIC, depth=1, thread=harness.thread("c"))
        )
    finally:
        await database.dispose()


@sqlite_only
async def test_the_daily_token_quota_refuses_once_too_little_is_left(
    harness: Harness,  # noqa: F811
) -> None:
    """A quota of 2,000 tokens: the first research runs within it, and the next request is
    refused, as less than 2,000 tokens of the day are left."""
    service = harness.build_service(
        search=harness.search_provider,
        policy=RunPolicy(quota=UserQuota(tokens=2_000), timezone="Asia/Shanghai"),
    )
    run, _ = await service.requests.submit(chat_request("1"))
    outcome = await run_attended(service, run.id)
    assert outcome.status is RunStatus.SUCCEEDED and outcome.usage.prompt_tokens > 0
    assert outcome.usage.prompt_tokens + outcome.usage.completion_tokens <= 2_000
    with pytest.raises(DailyLimitReached) as reached:
        await service.requests.submit(chat_request("2"))
    assert reached.value.kind == "tokens"
    # Midnight in FATHOM_TIMEZONE: NOW is 18:00 in Shanghai, so the quota resets at 00:00 there.
    resets = reached.value.resets_at
    assert (resets.hour, resets.minute, resets.tzname()) == (0, 0, "CST")
    assert resets.astimezone(ZoneInfo("UTC")) == datetime(2026, 12, 2, 16, tzinfo=ZoneInfo("UTC"))


def test_the_refusal_says_when_the_quota_resets() -> None:
    from bots.chat.memory import MemoryMarkup
    from bots.chat.replies import Replies

    at = datetime(2026, 12, 3, tzinfo=ZoneInfo("UTC"))
    assert (
        Replies(MemoryMarkup(), "en")
        .daily_limit("runs", 5, at)
        .endswith("You have started today's 5 researches; the quota resets at 00:00 UTC.")
    )
    assert "00:00 UTC 重置" in Replies(MemoryMarkup(), "zh").daily_limit("tokens", 9, at)


# -- /research usage --------------------------------------------------------------------------


@sqlite_only
async def test_usage_sums_the_requesters_runs_and_the_channels(
    harness: Harness,  # noqa: F811
) -> None:
    prices = Prices.parse(
        '{"planner-model": [2.5, 10], "writer-model": [1.1, 4.4], "search": 0.01}'
    )
    service = harness.build_service(policy=RunPolicy(prices=prices))

    def in_channel(channel: str, thread: str, user: str) -> ResearchRequest:
        key = ThreadKey(platform="slack", workspace="T1", channel=channel, thread=thread)
        return ResearchRequest(topic=TOPIC, depth=1, thread=key, requested_by=user)

    outcomes = []
    for request in (
        in_channel("C1", "1", "U1"),
        in_channel("C1", "2", "U1"),
        in_channel("C1", "3", "U2"),
        in_channel("C2", "4", "U1"),
    ):
        run, _ = await service.requests.submit(request)
        outcomes.append(await run_attended(service, run.id))
    costs = [o.cost for o in outcomes]
    assert all(c is not None and c > 0 for c in costs)
    tokens = [o.usage.prompt_tokens + o.usage.completion_tokens for o in outcomes]
    report = await service.requests.usage_report("U1", in_channel("C1", "1", "U1").thread)
    assert (report.today.runs, report.month.runs, report.channel_month.runs) == (3, 3, 3)
    assert report.today.tokens == tokens[0] + tokens[1] + tokens[3]
    assert report.channel_month.tokens == sum(tokens[:3])
    assert report.month.cost == pytest.approx(costs[0] + costs[1] + costs[3])  # type: ignore[operator]
    assert report.priced
    # Without prices: counts and tokens, no cost.
    plain = await harness.service.requests.usage_report("U1", in_channel("C1", "1", "U1").thread)
    assert plain.month.tokens == report.month.tokens and plain.month.cost is None


@sqlite_only
async def test_the_cost_metric_counts_each_priced_model_and_the_searches(
    harness: Harness,  # noqa: F811
) -> None:
    from core.metrics import Metrics

    prices = Prices.parse('{"planner-model": [2.5, 10], "search": 0.01}')  # writer: unpriced
    metrics = Metrics()
    service = harness.build_service(metrics=metrics, policy=RunPolicy(prices=prices))
    key = ThreadKey(platform="slack", workspace="T1", channel="C1", thread="1")
    run, _ = await service.requests.submit(ResearchRequest(topic=TOPIC, depth=2, thread=key))
    outcome = await run_attended(service, run.id)
    assert outcome.cost is None  # a model without a price: no cost for the run

    def counted(model: str) -> float | None:
        return metrics.registry.get_sample_value("fathom_cost_dollars_total", {"model": model})

    prompt, completion = outcome.usage.tokens_by_model["planner-model"]
    assert counted("planner-model") == pytest.approx((prompt * 2.5 + completion * 10) / 1e6)
    assert counted("search") == pytest.approx(0.01 * outcome.usage.searches)
    assert counted("writer-model") is None  # unpriced: not counted
    stored = await harness.store.runs.get_run(run.id)  # the seconds by step are kept with the run
    assert stored is not None and stored.seconds_by_step == outcome.usage.seconds_by_step
    assert {"planning", "searching", "writing"} <= set(stored.seconds_by_step)


def test_the_usage_answer_has_a_line_for_each_total() -> None:
    from bots.chat.memory import MemoryMarkup
    from bots.chat.replies import Replies
    from core.research.requests import UsageReport, UsageTotal

    report = UsageReport(
        today=UsageTotal(1, 950, 0.0123),
        month=UsageTotal(4, 12_400, 0.04),
        channel_month=UsageTotal(9, 31_000, 0.11),
        priced=True,
    )
    assert Replies(MemoryMarkup(), "en").usage(report).splitlines() == [
        "You, today: 1 research · 950 tokens · ≈ $0.01",
        "You, this month: 4 researches · 12.4k tokens · ≈ $0.04",
        "This channel, this month: 9 researches · 31.0k tokens · ≈ $0.11",
    ]
    unpriced = UsageReport(
        UsageTotal(0, 0, None), UsageTotal(0, 0, None), UsageTotal(0, 0, None), False
    )
    assert (
        Replies(MemoryMarkup(), "zh")
        .usage(unpriced)
        .endswith("（未设置 FATHOM_PRICES，不显示费用。）")
    )


def test_the_usage_line_says_what_a_run_spent_in_both_languages() -> None:
    from core.words.wording import usage_line

    line = usage_line("en", searches=3, pages=9, tokens=12_400, cost=0.0412, seconds=41.4)
    assert line == "3 searches · 9 pages · 12.4k tokens · ≈ $0.04 · 41 s"
    cheap = usage_line("en", searches=1, pages=1, tokens=950, cost=0.0004, seconds=125)
    assert cheap == "1 search · 1 page · 950 tokens · < $0.01 · 2 min 5 s"
    unpriced = usage_line("en", searches=2, pages=0, tokens=2_000_000, cost=None, seconds=0.2)
    assert unpriced == "2 searches · 2M tokens · 0 s"  # no pages read, no prices: not shown
    zh = usage_line("zh", searches=3, pages=9, tokens=12_400, cost=0.04, seconds=61)
    assert zh == "3 次搜索 · 9 个网页 · 12.4k tokens · ≈ $0.04 · 1 分 1 秒"


class _RunMadeBetweenReads:
    """The real store, with one more run of the same requester made right after its first
    usage read (as a request on another replica would): what a report read in several
    queries could see."""

    def __init__(self, store: Any, make: Callable[[], Awaitable[object]]) -> None:
        self._store, self._make, self.reads = store, make, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def usage_since(self, *args: Any, **kwargs: Any) -> Any:
        used = await self._store.runs.usage_since(*args, **kwargs)
        self.reads += 1
        if self.reads == 1:
            await self._make()
        return used


async def test_usage_never_shows_today_above_this_month(
    harness: Harness,  # noqa: F811
) -> None:
    """Today's runs are counted from the same read as this month's, so a run made between
    the reads cannot put today above the month."""
    first = await harness.submit(thread="t1")
    await run_attended(harness.service, first)
    store = _RunMadeBetweenReads(harness.store, lambda: harness.submit(thread="t2"))
    service = harness.build_service(
        store=store, clocks=Clocks(now=lambda: datetime.now(ZoneInfo("UTC")))
    )
    report = await service.requests.usage_report("tester", harness.thread("t1"))
    assert report.today.runs <= report.month.runs and report.today.tokens <= report.month.tokens
    assert (report.today.runs, report.month.runs) == (1, 1)
