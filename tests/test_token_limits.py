"""Token limits that bound spending (issue 53, item 2): ``FATHOM_MAX_RUN_TOKENS`` bounds the whole
run, the writer's request and the claim check included, and ``FATHOM_USER_DAILY_TOKENS`` is
charged as tokens are spent (reserved when a request is admitted, settled as the run's calls
return), so a running research that crosses it stops searching and writes from what it has,
and simultaneous requests cannot pass it together.

The real Research, ChatModel, SearxngProvider, PageReader and Store against the fake LLM (which
counts a request's tokens as its characters over four and honours a cap on the answer, as
OpenAI's API does) and the fake search and its pages; what a run spent is what the endpoint
reported, summed in the run's usage.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from bots.chat.memory import MemoryMarkup
from bots.chat.replies import Replies
from core.claims.check import check_claims
from core.claims.lexical import Evidence
from core.documents import DocumentExtractor
from core.engine.budget import MIN_WRITER_RESERVE, RunBudget
from core.engine.state import StopReason
from core.llm import ChatModel
from core.llm.tokens import TokenRoom
from core.models import Usage
from core.operations.job import run_attended
from core.pages.fetch import PageFetcher
from core.pages.reader import PageReader
from core.research.outcome import RunOutcome
from core.research.policy import Clocks, Reading, RunPolicy
from core.research.requests import LEAST_RUN_TOKENS, DailyLimitReached, ResearchRequest, UserQuota
from core.research.service import Research
from core.search import SearxngProvider
from core.values import RunStatus, ThreadKey
from storage import Database, Store
from tests.fakes import Fail, FakeLLMServer, FakeSearchServer
from tests.test_engine import KEY, after_search, sqlite_only

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
TOPIC = "heat pumps in cold climates"


@dataclass
class Limits:
    """Services on one database and one set of clients (``make``), and the fakes."""

    llm: FakeLLMServer
    search: FakeSearchServer
    database: Database
    store: Store
    url: str
    make: Callable[..., Research]

    async def ask(
        self, service: Research, user: str | None, name: str, depth: int = 3
    ) -> tuple[str, bool]:
        """A request of ``user`` in a Slack thread of its own (None: a console request)."""
        if user is None:
            thread = ThreadKey(platform="cli", workspace="local", channel="local", thread=name)
        else:
            thread = ThreadKey(platform="slack", workspace="T1", channel="C1", thread=name)
        request = ResearchRequest(
            topic=TOPIC, depth=depth, thread=thread, requested_by=user, dedupe_key=name
        )
        run, created = await service.requests.submit(request)
        return run.id, created

    async def research(
        self, service: Research, user: str | None, name: str, depth: int = 3
    ) -> RunOutcome:
        run_id, created = await self.ask(service, user, name, depth)
        assert created
        return await run_attended(service, run_id)


@pytest.fixture
async def limits(
    database: Database,
    database_url: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> AsyncIterator[Limits]:
    """Every search finds ten results and their best three pages are read (the writer's
    request grows as a real one does); ``make(budget=, quota=, verifier=, store=)`` builds a
    service (``verifier``: the claim check on, the planner's model judging)."""
    search_server.fake.results_per_query = 10
    async with (
        httpx.AsyncClient(trust_env=False) as http,
        httpx.AsyncClient(trust_env=False, follow_redirects=False) as pages_http,
    ):
        planner = ChatModel(model="planner", api_key=KEY, base_url=llm_server.base_url)
        writer = ChatModel(model="writer", api_key=KEY, base_url=llm_server.base_url)
        search = SearxngProvider(http, base_url=search_server.url, base_delay=0.01)
        store = Store(database)
        reader = PageReader(
            PageFetcher(pages_http, timeout=5.0, allow_loopback=True),
            pages=3,
            cache=store.caches,
            documents=DocumentExtractor(timeout=30.0),
        )

        def make(
            budget: RunBudget | None = None,
            quota: UserQuota | None = None,
            verifier: bool = False,
            store: Store = store,
        ) -> Research:
            return Research(
                store=store,
                planner=planner,
                writer=writer,
                search=search,
                verifier=planner if verifier else None,
                reading=Reading(pages=reader),
                policy=RunPolicy(budget=budget or RunBudget(), quota=quota or UserQuota()),
                clocks=Clocks(now=lambda: NOW),
            )

        try:
            yield Limits(llm_server, search_server, database, store, database_url, make)
        finally:
            await reader.aclose()
            await planner.aclose()
            await writer.aclose()


def spent(outcome: RunOutcome) -> int:
    """What the run's model calls cost, as the endpoint reported them."""
    return outcome.usage.prompt_tokens + outcome.usage.completion_tokens


async def stored_spending(store: Store, run_ids: list[str]) -> int:
    total = 0
    for run_id in run_ids:
        run = await store.runs.get_run(run_id)
        assert run is not None and run.status.finished
        total += run.prompt_tokens + run.completion_tokens
    return total


# -- FATHOM_MAX_RUN_TOKENS bounds the whole run ------------------------------------------------


def test_the_writers_reserve_is_a_share_of_the_budget_but_enough_to_write() -> None:
    budget = RunBudget(tokens=300_000)
    assert budget.searching_tokens() == 240_000  # 20 % kept
    assert RunBudget(tokens=6_000).searching_tokens() == 6_000 - 3_000  # half, below the floor
    assert RunBudget(tokens=12_000).searching_tokens() == 12_000 - MIN_WRITER_RESERVE
    assert budget.searching_tokens(allowance=2_500) == 1_250  # the day's share is the limit
    assert budget.spent(Usage(prompt_tokens=1_250), 0, allowance=2_500) is StopReason.TOKEN_QUOTA
    assert budget.spent(Usage(prompt_tokens=1_249), 0, allowance=2_500) is None
    assert budget.spent(Usage(prompt_tokens=240_000), 0) is StopReason.TOKEN_BUDGET
    assert RunBudget().spent(Usage(prompt_tokens=10**9), 10**9) is None  # unlimited


@sqlite_only
async def test_the_run_token_budget_bounds_the_whole_run_the_writer_and_the_check_included(
    limits: Limits,
) -> None:
    """FATHOM_MAX_RUN_TOKENS=6000 with a research that needs far more (the issue: a
    19,919-token run, the writer's prompt alone about 13,500 tokens against a 1,200-token
    reserve): the run, its writer's request and its claim check included, spends at most 6,000
    tokens as the endpoint counts them; the writer is shown fewer sources and passages, and the
    report's notes (``--json``'s ``notes``) say how many were left out."""
    limits.llm.fake.citing = "mixed"  # the verifier is asked about some claims
    free = await limits.research(limits.make(verifier=True), None, "free", depth=6)
    assert free.status is RunStatus.SUCCEEDED and spent(free) > 10_000  # what it would take
    limits.llm.fake.reset()
    limits.llm.fake.citing = "mixed"

    service = limits.make(budget=RunBudget(tokens=6_000), verifier=True)
    outcome = await limits.research(service, None, "bounded", depth=6)
    assert outcome.status is RunStatus.SUCCEEDED
    assert spent(outcome) <= 6_000, outcome.usage
    assert outcome.stop_reason is StopReason.TOKEN_BUDGET
    writer = limits.llm.fake.requests_for("writer")
    assert len(writer) == 1 and 0 < writer[0].body["max_tokens"] <= 4_096
    notes = outcome.as_json()["notes"]
    assert isinstance(notes, list)
    trimmed = [n for n in notes if n.startswith("To stay within the run's token budget")]
    assert trimmed and "(6,000 tokens, FATHOM_MAX_RUN_TOKENS)" in trimmed[0]
    assert "sources left out" in trimmed[0] or "passages were left out" in trimmed[0]
    # The run's stored counters say the same (what `fathom thread show` and usage read).
    assert await stored_spending(limits.store, [outcome.run_id]) == spent(outcome)


@sqlite_only
async def test_a_budget_with_no_room_left_for_the_writer_lists_the_findings(
    limits: Limits,
) -> None:
    """A budget the searching spends whole (two plans of this topic): the writer is not asked
    rather than pass it; the findings are listed and the notes say why."""
    service = limits.make()
    probe, _ = await limits.ask(service, None, "probe", depth=1)
    first_plan: list[int] = []

    async def measure() -> None:
        run = await limits.store.runs.get_run(probe)
        assert run is not None
        first_plan.append(run.prompt_tokens + run.completion_tokens)

    await run_attended(service, probe, after_search(1, measure))
    limits.llm.fake.reset()
    # Half of it is the writer's reserve (a small budget's): the searching plans, searches
    # once and plans again, and then expects a third plan to pass its share.
    budget = RunBudget(tokens=4 * first_plan[0] + 2)
    outcome = await limits.research(limits.make(budget=budget), None, "tight", depth=5)
    assert outcome.status is RunStatus.SUCCEEDED and outcome.writer_fallback
    assert limits.llm.fake.requests_for("writer") == []
    report = outcome.report_markdown or ""
    assert "The writer model was not asked: the run's token budget" in report
    assert spent(outcome) <= budget.tokens  # type: ignore[operator]


async def test_the_claim_check_makes_no_request_that_the_room_left_does_not_fit(
    llm_server: FakeLLMServer,
) -> None:
    """A claim the lexical pass cannot settle, and a room too small for the verifier's request:
    no request is made, the claim is "not checked" and the reason is the token limit."""
    verifier = ChatModel(model="verifier", api_key=KEY, base_url=llm_server.base_url)
    evidence = {1: Evidence(1, "Heat pumps", "https://example.org/1", ("Sales rose in 2024.",))}
    try:
        usage = Usage(prompt_tokens=5_950)
        check = await check_claims(
            "# R\n\nHeat pumps halved emissions in Norway [1].\n",
            evidence,
            verifier,
            usage,
            "en",
            room=TokenRoom(6_000, usage),
        )
    finally:
        await verifier.aclose()
    assert llm_server.fake.requests_for("verifier") == []
    assert check.partial and check.reasons == ["token_budget"]


async def test_a_cap_refused_by_its_name_is_sent_as_max_completion_tokens(
    llm_server: FakeLLMServer,
) -> None:
    """OpenAI's reasoning and GPT-5 models refuse ``max_tokens`` with a 400 naming it
    (griptape-ai/ComfyUI-Griptape#312: ``{"message": "Unsupported parameter: 'max_tokens' is
    not supported with this model. Use 'max_completion_tokens' instead.", "type":
    "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}``): the
    call is made again with ``max_completion_tokens``, and later calls use that name."""
    refusal = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }
    llm_server.fake.script("writer", Fail(400, refusal))
    model = ChatModel(model="o3", api_key=KEY, base_url=llm_server.base_url, max_retries=0)
    messages = [{"role": "user", "content": "Write the report."}]
    try:
        first = await model.complete(messages, usage=Usage(), max_tokens=300)
        second = await model.complete(messages, usage=Usage(), max_tokens=200)
    finally:
        await model.aclose()
    assert first.text and second.text
    bodies = [r.body for r in llm_server.fake.requests_for("writer")]
    assert [("max_tokens" in b, b.get("max_completion_tokens")) for b in bodies] == [
        (True, None),
        (False, 300),
        (False, 200),
    ]


# -- FATHOM_USER_DAILY_TOKENS is charged as tokens are spent -----------------------------------


@sqlite_only
async def test_a_research_that_crosses_the_daily_token_quota_stops_and_writes(
    limits: Limits,
) -> None:
    """FATHOM_USER_DAILY_TOKENS=2500 (the issue: one research spent 7,551): the research stops
    searching when the day has no more for it and writes from what it has, within the quota;
    its notes and ``stop_reason`` say so, and the next request is refused until midnight."""
    service = limits.make(quota=UserQuota(tokens=2_500))
    outcome = await limits.research(service, "U1", "1")
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.stop_reason is StopReason.TOKEN_QUOTA
    assert outcome.as_json()["stop_reason"] == "token_quota"
    assert spent(outcome) <= 2_500, outcome.usage
    assert "Stopped at the requester's daily token quota (2,500 tokens a day, " in (
        outcome.report_markdown or ""
    )
    with pytest.raises(DailyLimitReached) as reached:
        await limits.ask(service, "U1", "2")
    assert reached.value.kind == "tokens" and reached.value.reserved == 0
    assert reached.value.resets_at == datetime(2026, 12, 3, tzinfo=UTC)


async def test_simultaneous_requests_on_two_replicas_spend_at_most_the_daily_tokens(
    limits: Limits,
) -> None:
    """FATHOM_USER_DAILY_TOKENS=2500, three requests of one user released together over two
    replicas (the issue: 32,519 tokens spent, 13 times the quota): the runs admitted reserve
    their share in the transaction that admits them, the others are refused saying that the
    tokens are held by a running research, and all the admitted runs together spend at most
    the quota. Five users, five trials."""
    other, other_store = Database(limits.url), None
    try:
        other_store = Store(other)
        quota = UserQuota(tokens=2_500)
        services = [limits.make(quota=quota), limits.make(quota=quota, store=other_store)]
        for trial in range(5):
            user = f"U{trial}"
            start = asyncio.Event()

            async def one(
                i: int, user: str = user, start: asyncio.Event = start
            ) -> tuple[str, bool]:
                await start.wait()
                return await limits.ask(services[i % 2], user, f"{user}-{i}")

            tasks = [asyncio.ensure_future(one(i)) for i in range(3)]
            await asyncio.sleep(0)
            start.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            admitted = [r[0] for r in results if isinstance(r, tuple) and r[1]]
            refused = [r for r in results if isinstance(r, BaseException)]
            assert admitted and len(admitted) + len(refused) == 3
            for error in refused:
                assert isinstance(error, DailyLimitReached) and error.kind == "tokens", error
                assert error.reserved > 0
            allowances = [await allowance(limits.store, run_id) for run_id in admitted]
            assert sum(allowances) <= 2_500
            for run_id in admitted:
                await run_attended(services[0], run_id)
            assert await stored_spending(limits.store, admitted) <= 2_500
    finally:
        await other.dispose()


async def allowance(store: Store, run_id: str) -> int:
    run = await store.runs.get_run(run_id)
    assert run is not None and run.token_allowance is not None
    return run.token_allowance


@sqlite_only
async def test_a_run_grows_its_share_while_the_day_has_room(limits: Limits) -> None:
    """A run whose reservation was too small for it (made when the estimate was low) grows it
    as it spends, while its requester's day has room: it researches to its depth, and its
    share ends at least what it spent. The console and digests have no share."""
    service = limits.make(quota=UserQuota(tokens=200_000))
    run_id, _ = await limits.ask(service, "U1", "grow", depth=3)
    await set_allowance(limits.database, run_id, LEAST_RUN_TOKENS)
    outcome = await run_attended(service, run_id)
    assert outcome.status is RunStatus.SUCCEEDED
    assert outcome.stop_reason is not StopReason.TOKEN_QUOTA
    assert await allowance(limits.store, run_id) >= spent(outcome) > LEAST_RUN_TOKENS
    console, _ = await limits.ask(service, None, "console")
    run = await limits.store.runs.get_run(console)
    assert run is not None and run.token_allowance is None


async def set_allowance(database: Database, run_id: str, tokens: int) -> None:
    """Give a run a smaller reservation than the estimate gave it."""
    statement = text("UPDATE research_runs SET token_allowance = :t WHERE id = :id")

    def work(conn: Any) -> None:
        conn.execute(statement, {"t": tokens, "id": run_id})

    await database.run(work)


async def test_two_runs_growing_at_once_never_pass_the_day_together(limits: Limits) -> None:
    """Two running runs of one user ask for more at the same moment, on two replicas: the
    admission lock decides them one after the other, and their shares stay within the quota."""
    other = Database(limits.url)
    try:
        stores = [limits.store, Store(other)]
        quota = UserQuota(tokens=14_000)
        service = limits.make(quota=quota)
        first, _ = await limits.ask(service, "U1", "a", depth=1)
        second, _ = await limits.ask(service, "U1", "b", depth=1)
        for run_id in (first, second):
            await set_allowance(limits.database, run_id, 2_000)
        day = quota.day(datetime(2026, 12, 2, tzinfo=UTC), 300_000)
        grown = await asyncio.gather(
            stores[0].runs.extend_allowance(first, "U1", day, 8_000),
            stores[1].runs.extend_allowance(second, "U1", day, 8_000),
        )
        shares = [await allowance(limits.store, first), await allowance(limits.store, second)]
        assert list(grown) == shares and sorted(shares) == [4_000, 10_000]
    finally:
        await other.dispose()


def test_a_refusal_says_the_tokens_are_held_and_when_they_free() -> None:
    at = datetime(2026, 12, 3, tzinfo=UTC)
    english = Replies(MemoryMarkup(), "en").daily_limit("tokens", 2_500, at, reserved=1_800)
    assert english.endswith(
        "Today's 2,500 tokens of research are used or held by your researches still running "
        "(1,800 held); what they do not spend is freed when they end, and the quota resets at "
        "00:00 UTC."
    )
    assert "占用 1,800 个" in Replies(MemoryMarkup(), "zh").daily_limit(
        "tokens", 2_500, at, reserved=1_800
    )
