"""The shared chat layer (bots/chat) driven through the in-memory platform, on SQLite and
PostgreSQL, with the real service, job and runner against the LLM and search fakes; where no
run needs to execute (the layer's answer to a request is what is checked), on the in-memory
stores (``storage.memory``, held to the SQL stores' answers by ``tests/test_store_contract.py``)
with no database at all.

What is proven here holds for every adapter: its own tests cover only translation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import delete

from bots.chat.announce import QueueAnnouncer
from bots.chat.controls import Control
from bots.chat.inbound import ChatCommands, Parsed
from bots.chat.memory import PLATFORM, MemoryChat, MemoryMarkup, Outage, RateLimited, Refusal
from bots.chat.message import ChatMessage, Reply
from bots.chat.settings import ChatPolicy
from core.chat.stores import ChatStores
from core.documents import DocumentExtractor
from core.llm import ChatModel
from core.metrics import Metrics
from core.models import Attachment
from core.operations.job import DeliveryPolicy, ResearchJob
from core.operations.runners import InProcessJobRunner
from core.pages.fetch import PageFetcher
from core.pages.reader import PageReader
from core.research.policy import Reading, RunPolicy
from core.research.requests import RunRequests, UserQuota
from core.research.service import Research
from core.search import SearxngProvider
from core.values import ThreadKey
from storage import Database, RunRecord, Store
from storage.memory import MemoryStores
from storage.tables import ProcessedEvent
from tests.chat_app import wait_for
from tests.conftest import FAKE_API_KEY
from tests.fakes import FakeLLMServer, FakeSearchServer, Hang, Held

FAST = DeliveryPolicy(attempts=4, first_delay=0.01, max_delay=0.05)
NOTED = (
    "Noted: this research takes it into account from its next step (the next search it "
    "plans, or its report)."
)
TOO_LATE = (
    "Too late for this research: its searching has ended, so this reply is not used. Once it "
    "has finished, ask again to follow up on it."
)


@dataclass
class Chat:
    """A chat layer on its stores, seen through the in-memory platform."""

    chat: MemoryChat
    commands: ChatCommands
    store: ChatStores

    def thread(self, name: str = "t1") -> ThreadKey:
        return ThreadKey(platform=PLATFORM, workspace="W1", channel="C1", thread=name)

    async def progress_shows(self, text: str, name: str = "t1") -> None:
        """Wait until the thread's progress message shows ``text``."""
        async with asyncio.timeout(30):
            while not any(
                text in m.text for m in self.chat.messages(self.thread(name), "progress")
            ):
                await self.chat.changed.wait()
                self.chat.changed.clear()

    async def runs(self, name: str = "t1") -> list[RunRecord]:
        thread = await self.store.threads.get_thread(str(self.thread(name)))
        return [] if thread is None else await self.store.runs.thread_runs(thread.id)


@dataclass
class World(Chat):
    """The chat layer on a database, with the real service, job and runner."""

    store: Store
    runner: InProcessJobRunner
    #: What a ChatCommands is made of (settings, service, store, runner).
    parts: tuple[ChatPolicy, Research, Store, InProcessJobRunner]

    async def delivered(self, name: str = "t1", count: int = 1) -> list[RunRecord]:
        """Wait until ``count`` runs of the thread are delivered (posted or failed)."""
        async with asyncio.timeout(30):
            while True:
                runs = await self.runs(name)
                if len(runs) >= count and all(r.delivery in ("posted", "failed") for r in runs):
                    return runs
                await asyncio.sleep(0.02)


@pytest.fixture
async def world(
    store: Store, llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> AsyncIterator[Callable[..., World]]:
    stack = contextlib.AsyncExitStack()
    http = await stack.enter_async_context(httpx.AsyncClient(trust_env=False))
    model = ChatModel(model="m", api_key=FAKE_API_KEY, base_url=llm_server.base_url, max_retries=1)
    stack.push_async_callback(model.aclose)
    search = SearxngProvider(http, base_url=search_server.url, base_delay=0.01)
    runners: list[InProcessJobRunner] = []

    def make(
        quota: UserQuota | None = None,
        read_pages: bool = False,
        slots: int = 200,
        **settings: object,
    ) -> World:
        """A chat world on the fixture's store and fakes; ``quota``: the service's daily
        quota per user (FATHOM_USER_DAILY_RUNS and _TOKENS); ``read_pages``: its runs read
        the fake search's result pages; ``slots``: runs its runner executes at once
        (FATHOM_MAX_CONCURRENT_RUNS)."""
        reader = None
        if read_pages:
            fetcher = PageFetcher(http, timeout=30.0, allow_loopback=True)
            reader = PageReader(fetcher, pages=3, documents=DocumentExtractor(timeout=30.0))
            stack.push_async_callback(reader.aclose)
        service = Research(
            store=store,
            planner=model,
            writer=model,
            search=search,
            reading=Reading(pages=reader),
            policy=RunPolicy(quota=quota or UserQuota()),
        )
        chat = MemoryChat(report_limit=int(str(settings.pop("report_limit", 2_000))))
        config = ChatPolicy.load(_env_file=None, **settings)
        posters = chat.factory(store)
        job = ResearchJob(
            service.executor, store.runs, store.claims, {PLATFORM: posters}, policy=FAST
        )
        runner = InProcessJobRunner(
            job, claims=store.claims, timing=service.executor.timing, max_concurrent=slots
        )
        runners.append(runner)
        announcer = QueueAnnouncer(posters, store)
        stack.push_async_callback(announcer.aclose)
        commands = ChatCommands(
            config, service.requests, store, runner, MemoryMarkup(), announcer=announcer
        )
        return World(chat, commands, store, runner, (config, service, store, runner))

    try:
        yield make
    finally:
        llm_server.fake.latency = 0.0
        for runner in runners:
            await runner.stop(grace=0.1)
        await stack.aclose()


@dataclass
class Talk(Chat):
    """The chat layer on the in-memory stores, no database: a runner that holds what it is
    given (no run executes), as when every runner is busy."""

    store: MemoryStores
    runner: HeldRunner
    policy: ChatPolicy
    requests: RunRequests


@pytest.fixture
async def talk() -> AsyncIterator[Callable[..., Talk]]:
    stack = contextlib.AsyncExitStack()

    def make(**settings: object) -> Talk:
        """A chat layer on fresh in-memory stores, with these settings (FATHOM_...)."""
        stores = MemoryStores()
        chat = MemoryChat()
        policy = ChatPolicy.load(_env_file=None, **settings)
        requests = RunRequests(runs=stores.runs, threads=stores.threads, feedback=stores.feedback)
        runner = HeldRunner()
        announcer = QueueAnnouncer(chat.factory(stores), stores)
        stack.push_async_callback(announcer.aclose)
        commands = ChatCommands(
            policy, requests, stores, runner, MemoryMarkup(), announcer=announcer
        )
        return Talk(chat, commands, stores, runner, policy, requests)

    try:
        yield make
    finally:
        await stack.aclose()


async def test_a_request_becomes_one_run_shown_in_one_progress_message_then_the_report(
    world: Callable[..., World],
) -> None:
    w = world()
    await w.runner.start()
    reply = await w.chat.say(w.commands, "/research heat pumps depth=2")
    assert reply is not None and reply.started
    (run,) = await w.delivered()
    assert run.status == "succeeded" and run.delivery == "posted"
    assert w.chat.messages(w.thread(), "answer") == []  # the progress message is the answer
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert run.progress_message_id == progress.id
    shown = "\n".join(progress.versions)
    assert "1/2th search executed." in shown and "2/2th search executed." in shown
    assert progress.text.endswith("Research done: 2/2 searches, " + progress.text.split(", ")[-1])
    reports = w.chat.messages(w.thread(), "report")
    assert reports and reports[0].text.startswith("# ")
    assert run.report_parts_posted == len(reports)


async def test_a_request_waiting_in_line_shows_its_place_and_a_cancel_button_at_once(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """One run at a time (FATHOM_MAX_CONCURRENT_RUNS=1) and one research running: the next
    requests are acknowledged at once by their progress message, saying their place in line,
    with a Cancel button (no Stop: nothing is found yet). Cancel takes a request out of the
    line and its message says so at once; the other one starts in its same message once the
    runner is free."""
    w = world(slots=1)
    await w.runner.start()
    llm_server.fake.script("writer", Hang(60))
    await w.chat.say(w.commands, "heat pumps depth=1")
    await w.progress_shows("Writing the report")
    await w.chat.say(w.commands, "tidal power depth=1", thread="t2", user="U2")
    await w.chat.say(w.commands, "wave power depth=1", thread="t3", user="U3")
    second = (
        "Queued: 1st in line. It starts when a runner is free; Cancel takes it out of the line."
    )
    await w.progress_shows(second, "t2")
    await w.progress_shows("Queued: 2nd in line.", "t3")
    (waiting,) = w.chat.messages(w.thread("t3"), "progress")
    assert waiting.buttons == (Control.CANCEL,)
    (third,) = await w.runs("t3")
    assert third.status == "queued"
    answer = await w.chat.press(w.commands, third.id, Control.CANCEL, user="U3")
    assert answer.startswith("🛑 Cancelling “wave power”"), answer
    await w.progress_shows("Research cancelled after 0 of 1 searches.", "t3")
    assert waiting.buttons == ()
    (first,) = await w.runs()
    await w.chat.press(w.commands, first.id, Control.CANCEL)  # the runner is free again
    (done,) = await w.delivered("t2")
    assert done.status == "succeeded"
    (progress,) = w.chat.messages(w.thread("t2"), "progress")  # the same message, edited
    assert progress.versions[0].endswith(second)
    assert progress.button_versions[0] == (Control.CANCEL,)
    assert any("Researching “tidal power”" in v for v in progress.versions[1:])
    assert "Research done" in progress.text and progress.buttons == ()
    assert w.chat.messages(w.thread("t2"), "report")
    (ended,) = await w.delivered("t3")
    assert ended.status == "cancelled" and len(w.chat.messages(w.thread("t3"))) == 1


async def test_a_chinese_request_is_answered_in_chinese_around_the_fixed_progress_line(
    world: Callable[..., World],
) -> None:
    w = world()
    await w.runner.start()
    help_reply = await w.chat.say(w.commands, "/research 帮助", thread="t0")
    assert help_reply is not None and "研究" in help_reply.text and "depth" in help_reply.text
    await w.chat.say(w.commands, "/research 人工智能在医疗领域的最新发展 depth=2")
    await w.delivered()
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert progress.versions[0].endswith(
        "排队中：第 1 位。有空闲的执行者时开始；点“取消”可退出排队。"
    )
    assert progress.versions[1].endswith("正在研究“人工智能在医疗领域的最新发展”，深度 2…")
    assert any("1/2th search executed. 正在搜索：" in v for v in progress.versions)
    assert "研究完成：2/2 次搜索" in progress.text
    bad = await w.chat.say(w.commands, "/research 人工智能 depth=0", thread="t2")
    assert bad is not None and "depth 必须在 1 到" in bad.text and "不允许 0" in bad.text
    english = await w.chat.say(w.commands, "/research heat pumps depth=0", thread="t3")
    assert english is not None and "depth must be from 1 to" in english.text


async def test_files_not_read_are_named_and_unreadable_messages_follow_the_language(
    world: Callable[..., World],
) -> None:
    w = world()
    await w.runner.start()
    program = Attachment(id="F1", name="setup.exe", mime="application/x-msdownload")
    reply = await w.chat.say(w.commands, "/research 热泵 depth=1", attachments=[program])
    assert reply is not None and reply.started and reply.left_out == (("setup.exe", "type"),)
    await w.delivered()
    (note,) = w.chat.messages(w.thread(), "answer")
    assert "未读取：setup.exe（不是我能读取的文件类型" in note.text and "继续" in note.text
    assert w.chat.downloads == []  # a file of a kind not read is never downloaded
    # An image from the same user: their last research was in Chinese.
    await w.chat.say(w.commands, "", thread="t2", readable=False, key="img-1")
    (answer,) = w.chat.messages(w.thread("t2"), "answer")
    assert answer.text.startswith("我只能读文字消息")
    # A file whose name is English words, from another user: English.
    await w.chat.say(w.commands, "quarterly report", user="U2", thread="t3", readable=False)
    (english,) = w.chat.messages(w.thread("t3"), "answer")
    assert english.text.startswith("I can only read text")


@pytest.mark.parametrize("text", ["/research depth=0 heat pumps", "/research   ", "depth=99 x"])
async def test_bad_input_is_answered_with_what_is_allowed_and_stores_nothing(
    talk: Callable[..., Talk], text: str
) -> None:
    w = talk()
    reply = await w.chat.say(w.commands, text)
    assert reply is not None and not reply.started
    (answer,) = w.chat.messages(w.thread(), "answer")
    assert answer.text.startswith("⚠️ ") and "/research help" in answer.text
    assert await w.runs() == []


@pytest.mark.parametrize(
    ("text", "chinese"),
    [
        ("hi", False),
        ("Hello!", False),
        ("hey there 👋", False),
        ("/research hi", False),
        ("Good morning.", False),
        ("你好", True),
        ("您好！", True),
    ],
)
async def test_a_greeting_alone_gets_the_help_not_a_research(
    talk: Callable[..., Talk], text: str, chinese: bool
) -> None:
    """Microsoft's Teams Store validation guidelines ("Bots > Bot commands"): a bot's
    commands "must work correctly, including generic commands such as Hi, Hello, and Help".
    A greeting said alone, on any platform, is answered with the help in its language; no
    run starts. A topic that only starts with such a word is researched."""
    w = talk()
    reply = await w.chat.say(w.commands, text)
    assert reply is not None and not reply.started
    (answer,) = w.chat.messages(w.thread(), "answer")
    assert "/research" in answer.text and "depth=" in answer.text  # the help
    assert ("研究" in answer.text) == chinese  # in the greeting's language
    assert await w.runs() == []
    started = await w.chat.say(w.commands, "hello kitty licensing history", thread="t2")
    assert started is not None and started.started


async def test_a_message_not_addressed_to_the_bot_is_ignored(talk: Callable[..., Talk]) -> None:
    w = talk()
    assert await w.chat.say(w.commands, "/research heat pumps", addressed=False) is None
    assert w.chat.calls == [] and await w.runs() == []


async def test_a_plain_reply_whose_research_ended_meanwhile_is_dropped_not_a_new_research(
    world: Callable[..., World],
) -> None:
    """A reply without a mention is let in while the thread's research runs; if that
    research ends before the reply is handled, the reply is no guidance any more, and it
    must not become a new research (or an error) either: it is dropped, unanswered."""
    w = world()
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=1")
    await w.delivered()
    calls = list(w.chat.calls)
    for text in ("wind power", "depth=99 a=b", "/research wind power"):
        late = ChatMessage(
            platform=PLATFORM,
            workspace="W1",
            channel="C1",
            thread="t1",
            user="U1",
            text=text,
            dedupe_key=f"memory:late:{text}",
            addressed=False,
            in_thread=True,
        )
        reply = await w.commands.handle(late)  # as if let in just before the run ended
        assert reply.dropped and not reply.started, (text, reply)
        assert await w.chat.say(w.commands, text, addressed=False, in_thread=True) is None
    assert w.chat.calls == calls and len(await w.runs()) == 1


async def test_a_plain_control_word_in_a_research_thread_is_answered_even_after_it_ended(
    world: Callable[..., World],
) -> None:
    """``stop``, ``cancel`` and ``status`` typed without a mention where a research ran are
    heard once it has ended too (nothing runs there; the status), where the platform
    delivers such replies; the same words in a thread where no research ran, or outside a
    thread, are not read (nothing recorded)."""
    w = world()
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=1")
    await w.delivered()
    stop = await w.chat.say(w.commands, "stop", addressed=False, in_thread=True)
    assert stop is not None and stop.text == "Nothing is running in this thread."
    cancel = await w.chat.say(w.commands, "cancel", addressed=False, in_thread=True)
    assert cancel is not None and cancel.text == "Nothing is running in this thread."
    status = await w.chat.say(w.commands, "status", addressed=False, in_thread=True)
    assert status is not None and "heat pumps" in status.text
    calls = list(w.chat.calls)
    for text, thread, in_thread in (("stop", "t9", True), ("cancel", "t1", False)):
        key = f"memory:elsewhere:{text}"
        said = await w.chat.say(
            w.commands, text, thread=thread, key=key, addressed=False, in_thread=in_thread
        )
        assert said is None and not await w.store.events.events_seen([key])
    assert w.chat.calls == calls


async def test_a_plain_reply_steers_the_threads_active_run_not_its_newest(
    world: Callable[..., World],
) -> None:
    """A thread's active run is not always its newest: a cancelled run resumed after a
    follow-up ended is older than that follow-up. A reply there steers the active run."""
    w = world()
    service = w.parts[1]
    await w.chat.say(w.commands, "heat pumps depth=1")
    (first,) = await w.runs()
    await service.requests.cancel(first.id)  # still queued: cancelled at once
    await w.runner.start()
    await w.delivered()
    await w.chat.say(w.commands, "wind power depth=1", in_thread=True)  # a follow-up
    await w.delivered(count=2)
    await w.store.runs.requeue_run(first.id)  # resumed: active, older than the follow-up
    reply = await w.chat.say(w.commands, "focus on Europe", addressed=False, in_thread=True)
    assert reply is not None and reply.text == NOTED
    variables = await w.store.threads.load_variables(first.thread_id)
    assert variables is not None
    assert [(g["run_id"], g["text"]) for g in variables["guidance"]] == [
        (first.id, "focus on Europe")
    ]


async def test_a_cancel_in_a_thread_finds_the_run_posting_its_report_not_the_newest(
    world: Callable[..., World],
) -> None:
    """The thread's resumed older run is posting its report while a newer follow-up has
    ended: a cancel typed there is told it is too late for the report being posted, not
    that the thread has nothing to cancel."""
    w = world()
    service = w.parts[1]
    await w.chat.say(w.commands, "heat pumps depth=1")
    (first,) = await w.runs()
    await service.requests.cancel(first.id)
    await w.runner.start()
    await w.delivered()
    await w.chat.say(w.commands, "wind power depth=1", in_thread=True)  # a follow-up
    await w.delivered(count=2)
    await w.store.runs.requeue_run(first.id)  # resumed
    w.chat.report_gate = asyncio.Event()
    w.chat.posting.clear()  # set by the follow-up's report
    await w.runner.enqueue(first.id)
    await asyncio.wait_for(w.chat.posting.wait(), 30)
    reply = await w.chat.say(w.commands, "cancel", in_thread=True)
    w.chat.report_gate.set()
    assert reply is not None
    assert reply.text == "Too late to cancel: that research is already posting its report."


async def test_a_redelivered_request_makes_one_run_one_report_and_one_answer(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    w = world()
    await w.runner.start()
    # Concurrent deliveries (two replicas) and a later one of the same request.
    first, second = await asyncio.gather(
        w.chat.say(w.commands, "heat pumps depth=1", key="k1"),
        w.chat.say(w.commands, "heat pumps depth=1", key="k1"),
    )
    await w.delivered()
    assert await w.chat.say(w.commands, "heat pumps depth=1", key="k1") is None
    (run,) = await w.runs()
    assert len(w.chat.messages(w.thread(), "progress")) == 1
    assert len(w.chat.messages(w.thread(), "report")) == run.report_parts_posted >= 1
    # A help request delivered three times is answered once.
    for _ in range(3):
        await w.chat.say(w.commands, "help", key="k2", thread="t2")
    assert len(w.chat.messages(w.thread("t2"), "answer")) == 1
    assert [r for r in (first, second) if r is not None]


async def test_a_request_redelivered_after_a_crash_that_lost_its_record_makes_no_second_run(
    world: Callable[..., World], database: Database
) -> None:
    """The run is created before the delivery is recorded; a process that dies between the
    two leaves the platform to redeliver. Even once that run has ended, the redelivery finds
    the run by its dedupe key: no second run, no second report."""
    w = world()
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=1", key="k-crash")
    (run,) = await w.delivered()
    async with database.sessionmaker.begin() as session:  # the record the crash never wrote
        await session.execute(delete(ProcessedEvent).where(ProcessedEvent.key == "k-crash"))
    await w.chat.say(w.commands, "heat pumps depth=1", key="k-crash")
    assert [r.id for r in await w.runs()] == [run.id]
    assert len(w.chat.messages(w.thread(), "report")) == run.report_parts_posted


async def test_a_rate_limited_final_edit_still_ends_in_the_final_state(
    world: Callable[..., World],
) -> None:
    w = world()
    await w.runner.start()
    # Every edit after the first is refused twice with a rate limit; none is lost for good.
    w.chat.fail("edit", *(RateLimited(0.01) for _ in range(6)))
    await w.chat.say(w.commands, "heat pumps depth=2")
    (_run,) = await w.delivered()
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert "Research done: 2/2 searches" in progress.text
    assert sum(1 for op, _ in w.chat.calls if op == "edit") > len(progress.versions) - 1


async def test_report_parts_fit_the_budget_and_survive_an_outage_exactly_once(
    world: Callable[..., World],
) -> None:
    # (The sources list, dated, is about 400 characters: it fits in one part.)
    w = world(report_limit=500)
    await w.runner.start()
    w.chat.fail("report", Outage("503"), Outage("503"))
    await w.chat.say(w.commands, "heat pumps depth=2")
    (run,) = await w.delivered()
    reports = w.chat.messages(w.thread(), "report")
    assert len(reports) >= 2 and all(len(r.text) <= 500 for r in reports)
    assert run.report_parts_posted == len(reports)
    assert len({r.text for r in reports}) == len(reports)  # no part twice
    assert reports[0].text.startswith("# ") and "## Sources" in reports[-1].text


async def test_cancel_in_the_thread_stops_its_run_and_the_message_ends_cancelled(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    w = world()
    await w.runner.start()
    llm_server.fake.latency = 0.3
    await w.chat.say(w.commands, "heat pumps depth=3")
    async with asyncio.timeout(30):
        while not w.chat.messages(w.thread(), "progress"):
            await w.chat.changed.wait()
            w.chat.changed.clear()
    other = await w.chat.say(w.commands, "cancel", user="U2", in_thread=True)
    assert other is not None and "Only the person who started" in other.text
    reply = await w.chat.say(w.commands, "cancel", in_thread=True)
    assert reply is not None and reply.text.startswith("🛑 Cancelling “heat pumps”")
    (run,) = await w.delivered()
    assert run.status == "cancelled"
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert progress.text.endswith("Research cancelled after " + progress.text.split("after ")[-1])
    assert w.chat.messages(w.thread(), "report") == []


async def test_stop_typed_in_the_thread_ends_the_searching_and_the_report_follows(
    world: Callable[..., World], llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    w = world()
    await w.runner.start()
    llm_server.fake.latency = 0.3
    await w.chat.say(w.commands, "heat pumps depth=5")
    await w.progress_shows("1/5th search executed.")
    other = await w.chat.say(w.commands, "stop", user="U2", in_thread=True)
    assert other is not None and "Only the person who started this research" in other.text
    assert "can stop it" in other.text
    reply = await w.chat.say(w.commands, "Write now!", in_thread=True)
    assert reply is not None and reply.text.startswith("🛑 Stopping “heat pumps”")
    again = await w.chat.say(w.commands, "停止", in_thread=True)
    assert again is not None and (
        again.text in ("那个研究已经在停止了。", "那个研究已经结束了。")
    )  # (a repeated press; or it ended already)
    (run,) = await w.delivered()
    assert run.status == "succeeded" and run.stop_requested
    assert run.searches < 5
    reports = w.chat.messages(w.thread(), "report")
    assert reports and "Stopped early on request" in "".join(r.text for r in reports)
    assert len(search_server.fake.queries) == run.searches


async def test_the_stop_button_is_the_requesters_and_the_final_message_has_no_buttons(
    world: Callable[..., World], llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    w = world(FATHOM_ADMINS="UADMIN")
    await w.runner.start()
    llm_server.fake.latency = 0.3
    await w.chat.say(w.commands, "heat pumps depth=5")
    await w.progress_shows("1/5th search executed.")
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert progress.buttons == (Control.STOP, Control.CANCEL)
    (run,) = await w.runs()
    other = await w.chat.press(w.commands, run.id, Control.STOP, user="U2")
    assert other.startswith("Only the person who started this research (or an admin)")
    elsewhere = await w.chat.press(w.commands, run.id, Control.STOP, channel="C2")
    assert elsewhere.startswith("This button does not belong to a research here")
    assert await w.chat.press(w.commands, "f" * 32, Control.STOP) == elsewhere
    assert not (await w.store.runs.get_run(run.id)).stop_requested  # type: ignore[union-attr]
    pressed = await w.chat.press(w.commands, run.id, Control.STOP, user="UADMIN")
    assert pressed.startswith("🛑 Stopping “heat pumps”")
    again = await w.chat.press(w.commands, run.id, Control.STOP)
    assert again in ("That research is already stopping.", "That research has already finished.")
    (run,) = await w.delivered()
    assert run.status == "succeeded" and run.stop_requested and run.searches < 5
    assert len(search_server.fake.queries) == run.searches
    assert progress.buttons == ()  # the final state: no buttons
    assert all(buttons for buttons in progress.button_versions[:-1])
    reports = w.chat.messages(w.thread(), "report")
    assert "Stopped early on request" in "".join(r.text for r in reports)
    assert reports[-1].buttons == (Control.UP, Control.DOWN)
    assert all(r.buttons == () for r in reports[:-1])
    late = await w.chat.press(w.commands, run.id, Control.CANCEL)
    assert late == "That research has already finished."
    assert (await w.store.runs.get_run(run.id)).status == "succeeded"  # type: ignore[union-attr]


async def test_a_press_on_no_research_here_is_answered_in_the_cards_language(
    world: Callable[..., World],
) -> None:
    """A press on a Chinese card that belongs to no research here (another channel's, a
    stale or forged run id) is answered in Chinese: in the language the press tells, else
    (a DingTalk callback tells none) in that of the presser's last research."""
    w = world()
    await w.runner.start()
    await w.chat.say(w.commands, "热泵 depth=1")
    (run,) = await w.delivered()
    unknown = "这个按钮不属于这里的研究；没有任何改动。"
    press = w.chat.press
    assert await press(w.commands, run.id, Control.CANCEL, channel="C2", language="zh") == unknown
    assert await press(w.commands, "f" * 32, Control.STOP, language="zh") == unknown
    assert await press(w.commands, "f" * 32, Control.STOP) == unknown  # from their last research
    stranger = await press(w.commands, "f" * 32, Control.STOP, user="U9")  # no research: English
    assert stranger == "This button does not belong to a research here; nothing changed."
    # An id the layer refuses (over 100 characters; one with a NUL never gets this far:
    # bots.chat.ids refuses it at the door) is nothing looked up: the card's words.
    bad = await press(w.commands, "f" * 32, Control.STOP, user="U" * 101, language="zh")
    assert bad == unknown


async def test_the_cancel_button_ends_the_run_without_a_report(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    w = world()
    await w.runner.start()
    llm_server.fake.latency = 0.3
    await w.chat.say(w.commands, "heat pumps depth=5")
    await w.progress_shows("1/5th search executed.")
    (run,) = await w.runs()
    other = await w.chat.press(w.commands, run.id, Control.CANCEL, user="U2")
    assert other.startswith("Only the person who started this research (or an admin)")
    assert (await w.chat.press(w.commands, run.id, Control.CANCEL)).startswith("🛑 Cancelling")
    (run,) = await w.delivered()
    assert run.status == "cancelled"
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert "Research cancelled" in progress.text and progress.buttons == ()
    assert w.chat.messages(w.thread(), "report") == []
    rate = await w.chat.press(w.commands, run.id, Control.UP)
    assert rate == "That research has no report to rate."


async def test_stop_pressed_before_the_first_search_says_and_does_the_same(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """Pressed while the first plan is made: the answer says a report comes only from what
    is found by then, and the run ends stopped with nothing to report, no report posted."""
    w = world()
    await w.runner.start()
    planned = threading.Event()
    llm_server.fake.script("planner", Held(planned))  # the first plan is held while Stop lands
    await w.chat.say(w.commands, "heat pumps depth=3")
    await w.progress_shows("Researching")
    await wait_for(lambda: llm_server.fake.requests_for("planner"))
    (run,) = await w.runs()
    try:
        answer = await w.chat.press(w.commands, run.id, Control.STOP)
    finally:
        planned.set()
    assert "if nothing has, there is no report" in answer, answer
    (ended,) = await w.delivered()
    assert ended.status == "cancelled" and ended.error is None
    assert w.chat.messages(w.thread(), "report") == []
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert "Stopped before any search found anything" in progress.text, progress.text


@pytest.mark.parametrize(
    "stage", ["queued", "planning", "searching", "reading", "writing", "posting"]
)
async def test_cancel_keeps_its_word_at_every_stage_of_a_run(
    world: Callable[..., World],
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    stage: str,
) -> None:
    """Cancel pressed while the run is queued, planning, searching, reading its pages,
    writing or posting its report (each stage held by its fake, so the press lands there):
    until the report is recorded the answer is "Cancelling" and no report is posted; once it
    is being posted the answer says it is too late, and the report is posted whole."""
    w = world(read_pages=True)
    llm, search = llm_server.fake, search_server.fake
    planned = threading.Event()
    if stage == "planning":
        llm.script("planner", Held(planned))
    elif stage == "searching":
        search.latency = 1.0
    elif stage == "reading":
        search.hold_pages()
    elif stage == "writing":
        llm.script("writer", Hang(60))
    elif stage == "posting":
        w.chat.report_gate = asyncio.Event()
    if stage != "queued":
        await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=1")
    if stage == "planning":
        await wait_for(lambda: llm.requests_for("planner"))
    elif stage == "searching":
        await wait_for(lambda: search.queries)
    elif stage == "reading":
        await wait_for(lambda: search.page_requests)
    elif stage == "writing":
        await wait_for(lambda: llm.requests_for("writer"))
    elif stage == "posting":
        await asyncio.wait_for(w.chat.posting.wait(), 30)
    (run,) = await w.runs()
    try:
        answer = await w.chat.press(w.commands, run.id, Control.CANCEL)
    finally:
        planned.set()
        search.release_pages()
        if w.chat.report_gate is not None:
            w.chat.report_gate.set()
    if stage == "queued":
        await w.runner.start()
    (ended,) = await w.delivered()
    if stage == "posting":
        assert answer == "Too late to cancel: that research is already posting its report."
        assert ended.status == "succeeded" and w.chat.messages(w.thread(), "report")
    else:
        assert answer.startswith("🛑 Cancelling"), answer
        assert (ended.status, ended.report_markdown) == ("cancelled", None)
        assert w.chat.messages(w.thread(), "report") == []
        (progress,) = w.chat.messages(w.thread(), "progress")
        assert "Research cancelled" in progress.text, progress.text


async def test_a_second_cancel_is_told_the_research_is_already_being_cancelled(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """Pressed twice, typed twice (in Chinese), and pressed on two replicas at once: one
    answer says it is cancelling, every other that it already is (decided by the database,
    never two "Cancelling")."""
    w, other = world(), world()  # two replicas' chat layers on one database
    await w.runner.start()
    llm_server.fake.latency = 0.3
    await w.chat.say(w.commands, "热泵 depth=5")
    await w.progress_shows("1/5th search executed.")
    (run,) = await w.runs()
    first, second = await asyncio.gather(
        w.chat.press(w.commands, run.id, Control.CANCEL),
        other.chat.press(other.commands, run.id, Control.CANCEL),
    )
    assert sorted([first[:2], second[:2]]) == sorted(["🛑 ", "那个"]), (first, second)
    assert "那个研究已经在取消了。" in (first + second)
    typed = await w.chat.say(w.commands, "取消", in_thread=True)
    assert typed is not None and typed.text == "那个研究已经在取消了。"
    (ended,) = await w.delivered()
    assert ended.status == "cancelled"
    late = await w.chat.press(w.commands, run.id, Control.CANCEL)
    assert late == "那个研究已经结束了。"


async def test_a_cancel_while_the_report_is_written_stops_the_writer_and_posts_no_report(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """The writer's answer is held (the fake hangs for a minute): Cancel is answered
    "Cancelling", the writer call is stopped, the run ends cancelled at once and no report
    is posted."""
    w = world()
    await w.runner.start()
    llm_server.fake.script("writer", Hang(60))
    await w.chat.say(w.commands, "heat pumps depth=1")
    await w.progress_shows("Writing the report")
    await wait_for(lambda: llm_server.fake.requests_for("writer"))
    (run,) = await w.runs()
    answer = await w.chat.press(w.commands, run.id, Control.CANCEL)
    assert answer.startswith("🛑 Cancelling"), answer
    (ended,) = await w.delivered()
    assert (ended.status, ended.report_markdown) == ("cancelled", None)
    assert w.chat.messages(w.thread(), "report") == []
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert "Research cancelled" in progress.text


async def test_a_cancel_while_the_report_is_posted_says_it_is_too_late(
    world: Callable[..., World],
) -> None:
    """Once the report is written and recorded, Cancel cannot keep it from the thread: the
    answer says so instead of "Cancelling", and the report is posted whole."""
    w = world()
    w.chat.report_gate = gate = asyncio.Event()
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=1")
    await asyncio.wait_for(w.chat.posting.wait(), 30)
    (run,) = await w.runs()
    answer = await w.chat.press(w.commands, run.id, Control.CANCEL)
    typed = await w.chat.say(w.commands, "cancel", in_thread=True)
    gate.set()
    assert answer == "Too late to cancel: that research is already posting its report."
    assert typed is not None and typed.text == answer
    (ended,) = await w.delivered()
    assert ended.status == "succeeded" and ended.delivery == "posted"
    assert w.chat.messages(w.thread(), "report")


async def test_a_vote_is_stored_once_per_person_and_a_second_press_changes_it(
    world: Callable[..., World],
) -> None:
    w = world(FATHOM_ALLOWED_USERS="U1,U2")
    w.parts[1].requests.metrics = metrics = Metrics()  # (the fixture's service has none)
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=1")
    (run,) = await w.delivered()
    (last,) = w.chat.messages(w.thread(), "report")[-1:]
    assert last.buttons == (Control.UP, Control.DOWN)
    press = w.chat.press
    assert await press(w.commands, run.id, Control.UP) == "Thanks: your 👍 is recorded."
    assert await press(w.commands, run.id, Control.UP) == "Your 👍 was already recorded."
    assert await press(w.commands, run.id, Control.DOWN) == "Changed your rating to 👎."
    assert await press(w.commands, run.id, Control.UP, user="U2") == "Thanks: your 👍 is recorded."
    stranger = await press(w.commands, run.id, Control.UP, user="U3")
    assert "you can't start research here" in stranger
    votes = {(v.voter, v.value) for v in await w.store.feedback.feedback_since()}
    assert votes == {("memory:W1:U1", "down"), ("memory:W1:U2", "up")}
    (vote,) = [v for v in await w.store.feedback.feedback_since() if v.voter == "memory:W1:U1"]
    assert vote.topic == "heat pumps" and vote.thread_key == str(w.thread())
    assert vote.updated_at >= vote.created_at
    counted = metrics.registry.get_sample_value  # a repeated vote is not counted again
    assert counted("fathom_feedback_total", {"value": "up"}) == 2
    assert counted("fathom_feedback_total", {"value": "down"}) == 1


async def test_the_allowed_channels_refuse_every_other_channel_but_not_an_admin(
    talk: Callable[..., Talk],
) -> None:
    """FATHOM_ALLOWED_CHANNELS: a request in a channel not on the list is refused with the
    access answer and makes no run; an admin may ask there; a listed channel admits anyone."""
    elsewhere = talk(FATHOM_ALLOWED_CHANNELS="C2,C3", FATHOM_ADMINS="UADMIN")
    refused = await elsewhere.chat.say(elsewhere.commands, "heat pumps depth=1")
    assert refused is not None and "you can't start research here" in refused.text
    assert await elsewhere.runs() == []
    admin = await elsewhere.chat.say(elsewhere.commands, "heat pumps depth=1", user="UADMIN")
    assert admin is not None and "can't start research" not in admin.text
    assert [r.requested_by for r in await elsewhere.runs()] == ["memory:W1:UADMIN"]
    listed = talk(FATHOM_ALLOWED_CHANNELS="C1")
    anyone = await listed.chat.say(listed.commands, "tidal power depth=1", user="U7", thread="t2")
    assert anyone is not None and "can't start research" not in anyone.text
    assert [r.requested_by for r in await listed.runs("t2")] == ["memory:W1:U7"]


async def test_a_reply_during_the_run_steers_its_next_plans_and_the_report(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    w = world()
    await w.runner.start()
    llm_server.fake.latency = 0.2
    await w.chat.say(w.commands, "heat pumps depth=5")
    await w.progress_shows("1/5th search executed.")
    reply = await w.chat.say(w.commands, "focus on <@U0BAD> Europe", in_thread=True)
    assert reply is not None and reply.text == NOTED
    (run,) = await w.delivered()
    assert run.status == "succeeded"
    planners = [json.dumps(r.body) for r in llm_server.fake.requests_for("planner")]
    assert "focus on" in planners[-1] and "Europe" in planners[-1]
    assert "<@U0BAD>" not in planners[-1]  # the user's words, with mentions made inert
    writer = json.dumps(llm_server.fake.requests_for("writer")[-1].body)
    assert "Guidance the people asking gave" in writer and "Europe" in writer
    report = "".join(r.text for r in w.chat.messages(w.thread(), "report"))
    assert "Guidance followed: focus on" in report and "Europe" in report
    variables = await w.store.threads.load_variables(run.thread_id)
    assert variables is not None
    [entry] = variables["guidance"]
    assert entry["run_id"] == run.id and entry["by"] == run.requested_by


async def test_a_reply_while_the_report_is_written_is_told_it_is_too_late_and_not_kept(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """Once the searching has ended (the writer's answer is held), a reply in the thread
    is no longer "noted": nothing of the research would read it. It is answered that it is
    too late, stored nowhere, and the report does not claim to have followed it; a file on
    such a reply is named as not read."""
    w = world()
    await w.runner.start()
    written = threading.Event()  # the report is held while the replies come
    llm_server.fake.script("writer", Held(written))
    await w.chat.say(w.commands, "heat pumps depth=1")
    await w.progress_shows("Writing the report")
    await wait_for(lambda: llm_server.fake.requests_for("writer"))
    reply = await w.chat.say(w.commands, "focus on Europe", in_thread=True)
    assert reply is not None and reply.text == TOO_LATE
    paper = Attachment(id="F1", name="paper.pdf", size=10, mime="application/pdf")
    with_file = await w.chat.say(w.commands, "and Asia", in_thread=True, attachments=[paper])
    assert with_file is not None and with_file.text.startswith(TOO_LATE + "\n📎 Not read: ")
    assert "paper.pdf (a research reads only the files sent with its request" in with_file.text
    written.set()
    (run,) = await w.delivered()
    assert run.status == "succeeded"
    writer = json.dumps(llm_server.fake.requests_for("writer")[-1].body)
    assert "Europe" not in writer
    report = "".join(r.text for r in w.chat.messages(w.thread(), "report"))
    assert "Guidance followed" not in report and "Europe" not in report
    variables = await w.store.threads.load_variables(run.thread_id)
    assert variables is not None and variables["guidance"] == []
    assert w.chat.downloads == []


async def test_a_file_on_a_steering_reply_is_named_as_not_read_and_its_words_steer(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """A reply in a running research's thread with a file: its words are guidance, and the
    answer names the file as not read (a research reads the files of its own request);
    a file alone is answered the same way, in the research's language."""
    w = world()
    await w.runner.start()
    llm_server.fake.latency = 0.2
    await w.chat.say(w.commands, "热泵的发展 depth=5")
    await w.progress_shows("1/5th search executed.")
    paper = Attachment(id="F1", name="paper.pdf", size=10, mime="application/pdf")
    reply = await w.chat.say(w.commands, "focus on Europe", in_thread=True, attachments=[paper])
    assert reply is not None
    noted, files = reply.text.split("\n")
    assert noted == NOTED
    assert files.startswith("📎 Not read: paper.pdf (a research reads only the files sent")
    alone = await w.chat.say(
        w.commands, "", in_thread=True, attachments=[paper], key="file-alone", addressed=False
    )
    assert alone is not None and alone.text.startswith(
        "📎 未读取：paper.pdf（研究只读取随请求发送的文件"
    )
    (run,) = await w.delivered()
    variables = await w.store.threads.load_variables(run.thread_id)
    assert variables is not None and [g["text"] for g in variables["guidance"]] == [
        "focus on Europe"
    ]
    assert w.chat.downloads == []


@pytest.mark.parametrize(
    ("limits", "refusal"),
    [
        ({"FATHOM_USER_CONCURRENCY": "1"}, "You already have 1 research running"),
        ({"quota": UserQuota(runs=1)}, "You have started today's 1 researches"),
    ],
)
async def test_the_requesters_own_limits_never_keep_them_from_steering(
    world: Callable[..., World],
    llm_server: FakeLLMServer,
    limits: dict[str, object],
    refusal: str,
) -> None:
    """A reply in the thread of a running research is guidance, decided before the per-user
    concurrency and the daily quota: with FATHOM_USER_CONCURRENCY=1, or a daily quota of one
    run, both used by the running research, its requester still steers it (guidance is no
    run); a new research of theirs elsewhere is still refused."""
    w = world(**limits)
    await w.runner.start()
    llm_server.fake.latency = 0.2
    await w.chat.say(w.commands, "heat pumps depth=5")
    await w.progress_shows("1/5th search executed.")
    elsewhere = await w.chat.say(w.commands, "wind power", thread="t2")
    assert elsewhere is not None and refusal in elsewhere.text, elsewhere
    reply = await w.chat.say(w.commands, "focus on Europe", in_thread=True)
    assert reply is not None and reply.text == NOTED
    (run,) = await w.delivered()
    assert run.status == "succeeded" and len(await w.runs()) == 1
    variables = await w.store.threads.load_variables(run.thread_id)
    assert variables is not None and [g["text"] for g in variables["guidance"]] == [
        "focus on Europe"
    ]


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        ("<font color=red>Europe</font>", "<font color=red>Europe</font>"),
        ("a=b", "a=b"),
        ("https://example.org/data?depth=9&x=1", "https://example.org/data?depth=9&x=1"),
        ("focus on [official data]() and ![chart]()", "focus on official data and"),
        (
            "use [the census](https://example.org/census) ![map](https://x.example/m.png)",
            "use the census",
        ),
        ("depth=", "depth="),
        ("数据 " * 3000, ("数据 " * 3000)[:500].strip()),
    ],
)
async def test_a_steering_reply_is_taken_as_its_raw_text(
    world: Callable[..., World], llm_server: FakeLLMServer, said: str, kept: str
) -> None:
    """Steering is text, not a command: markup, an option-like word, a URL with a query and
    10 KB of text are all guidance (made inert, cut at 500 characters), never "Unknown option"
    or "The topic is ... characters long"; Markdown links keep their words only, images go."""
    w = world()
    await w.runner.start()
    llm_server.fake.latency = 0.2
    await w.chat.say(w.commands, "heat pumps depth=5")
    await w.progress_shows("1/5th search executed.")
    reply = await w.chat.say(w.commands, said, in_thread=True)
    noted = "已记下：这个研究会从下一步起考虑这一点" if "数据" in said else "Noted: this research"
    assert reply is not None and reply.text.startswith(noted), reply
    (run,) = await w.delivered()
    variables = await w.store.threads.load_variables(run.thread_id)
    assert variables is not None and [g["text"] for g in variables["guidance"]] == [kept]


async def test_in_a_running_thread_only_a_research_request_naming_the_command_is_one(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """``/research <topic>`` in the thread of a running research is a request (answered that
    a research already runs there), a control word is a control; the report's note names the
    steerer by their platform id, not Fathom's internal key."""
    w = world()
    await w.runner.start()
    llm_server.fake.latency = 0.2
    await w.chat.say(w.commands, "heat pumps depth=5")
    await w.progress_shows("1/5th search executed.")
    busy = await w.chat.say(w.commands, "/research wind power", in_thread=True)
    assert busy is not None and busy.text.startswith("⚠️ A research is already running"), busy
    status = await w.chat.say(w.commands, "status", in_thread=True)
    assert status is not None and "heat pumps" in status.text
    noted = await w.chat.say(w.commands, "focus on Europe", in_thread=True)
    assert noted is not None and noted.text.startswith("Noted")
    (run,) = await w.delivered()
    report = "".join(r.text for r in w.chat.messages(w.thread(), "report"))
    assert "Guidance followed: focus on Europe (U1, " in report, report
    assert run.requested_by not in report


async def test_usage_answers_the_requesters_runs_and_the_channels(
    world: Callable[..., World],
) -> None:
    w = world()
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=1")
    (run,) = await w.delivered()
    reply = await w.chat.say(w.commands, "usage", thread="t2")
    assert reply is not None
    tokens = run.prompt_tokens + run.completion_tokens
    shown = f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)
    assert reply.text.splitlines() == [
        f"You, today: 1 research · {shown} tokens",
        f"You, this month: 1 research · {shown} tokens",
        f"This channel, this month: 1 research · {shown} tokens",
        "(No cost: FATHOM_PRICES is not set.)",
    ]


async def test_a_platform_outage_on_the_progress_message_does_not_stop_the_research(
    world: Callable[..., World],
) -> None:
    w = world()
    await w.runner.start()
    w.chat.fail("post", Outage("502"))  # the first progress post fails; the next event posts
    await w.chat.say(w.commands, "heat pumps depth=2")
    (run,) = await w.delivered()
    assert run.status == "succeeded"
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert "Research done" in progress.text


async def test_a_progress_message_refused_for_good_is_not_asked_for_at_every_step(
    world: Callable[..., World],
) -> None:
    """A final refusal of the progress message (the bot removed from the channel: Teams'
    403, Slack's channel_not_found) is not tried again at each later step of the run; the
    final state is tried once (here the platform takes it)."""
    w = world()
    await w.runner.start()
    refused = Refusal("the bot is not in the conversation")
    w.chat.fail("post", refused, refused)  # its announcement, then the run's own first post
    await w.chat.say(w.commands, "heat pumps depth=3")
    (run,) = await w.delivered()
    assert run.status == "succeeded"
    posts = [call for call in w.chat.calls if call[0] == "post"]
    assert len(posts) == 3  # the refused announcement and first one, and the final state
    (progress,) = w.chat.messages(w.thread(), "progress")
    assert "Research done" in progress.text and len(progress.versions) == 1


async def test_a_progress_message_whose_edit_is_refused_for_good_is_not_edited_again(
    world: Callable[..., World],
) -> None:
    """An edit refused for good (the message deleted: Teams answers 403 ServiceError
    "Unknown" for a deleted message and 404 ActivityNotFoundInConversation for one the thread
    does not have, microsoft/BotFramework-Services#269; Slack's message_not_found) is not
    asked again at each later step; the final state is posted once as a new message."""
    w = world()
    await w.runner.start()
    w.chat.fail("edit", Refusal("the message was deleted"))
    await w.chat.say(w.commands, "heat pumps depth=3")
    (run,) = await w.delivered()
    assert (run.status, run.delivery) == ("succeeded", "posted")
    edits = [call for call in w.chat.calls if call[0] == "edit"]
    assert len(edits) == 1  # the refused one
    first, final = w.chat.messages(w.thread(), "progress")
    assert "Research done" not in first.text
    assert "Research done" in final.text and len(final.versions) == 1 and not final.buttons


async def test_a_cancelled_runs_status_on_a_deleted_progress_message_is_a_new_message(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """The final status of a run that did not succeed is an edit made by the delivery step;
    refused for good (the message deleted), it is posted once as a new message and the
    outcome counts as delivered, not retried."""
    w = world()
    await w.runner.start()
    llm_server.fake.latency = 0.3
    w.chat.fail("edit", Refusal("the message was deleted"), when="cancelled")
    await w.chat.say(w.commands, "heat pumps depth=3")
    async with asyncio.timeout(30):
        while not w.chat.messages(w.thread(), "progress"):
            await w.chat.changed.wait()
            w.chat.changed.clear()
    await w.chat.say(w.commands, "cancel", in_thread=True)
    (run,) = await w.delivered()
    assert (run.status, run.delivery, run.delivery_attempts) == ("cancelled", "posted", 0)
    first, final = w.chat.messages(w.thread(), "progress")
    assert "cancelled" not in first.text
    assert "Research cancelled" in final.text and len(final.versions) == 1


async def test_status_lists_running_and_recent_research(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    w = world()
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=1")
    await w.delivered()
    llm_server.fake.latency = 0.5
    await w.chat.say(w.commands, "wind power depth=2", thread="t2")
    status = await w.chat.say(w.commands, "status", thread="t3")
    assert status is not None
    assert status.text.startswith("**Running**") and "wind power" in status.text
    assert "**Recent**" in status.text and "heat pumps" in status.text
    zh = await w.chat.say(w.commands, "状态", thread="t4")
    assert zh is not None and zh.text.startswith("**进行中**")
    llm_server.fake.latency = 0.0
    await w.delivered("t2")


async def test_the_per_user_limit_and_a_busy_thread_are_refused_clearly(
    world: Callable[..., World], llm_server: FakeLLMServer, search_server: FakeSearchServer
) -> None:
    w = world(FATHOM_USER_CONCURRENCY=1)
    llm_server.fake.latency = 0.3
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=2")
    busy = await w.chat.say(w.commands, "more on heat pumps", user="U2", key="b1")
    assert busy is not None and "already running in this thread" in busy.text
    limit = await w.chat.say(w.commands, "wind power", thread="t2")
    assert limit is not None and limit.text.startswith("⏳ You already have 1 research running")
    assert len(await w.runs("t2")) == 0
    llm_server.fake.latency = 0.0
    await w.delivered()


class CrashAfterHandling(ChatCommands):
    """A process that dies right after a request took effect, before anything else."""

    async def handle(self, message: ChatMessage, parsed: Parsed | None = None) -> Reply:
        await super().handle(message, parsed)
        raise RuntimeError("the process died here")


async def test_a_cancel_redelivered_after_a_crash_does_not_cancel_another_run(
    world: Callable[..., World], llm_server: FakeLLMServer
) -> None:
    """Without a run id, cancel stops the newest active run in the channel. It is recorded
    before it acts, so a redelivery after a crash cannot stop the next one too."""
    w = world()
    llm_server.fake.latency = 0.3
    await w.runner.start()
    await w.chat.say(w.commands, "heat pumps depth=3", thread="t1")
    await w.chat.say(w.commands, "wind power depth=3", thread="t2")
    crashing = CrashAfterHandling(w.parts[0], w.parts[1].requests, *w.parts[2:], MemoryMarkup())
    with pytest.raises(RuntimeError):
        await w.chat.say(crashing, "cancel", thread="t3", key="c1")
    (stopped,) = await w.delivered("t2")  # the newest run was cancelled, and has ended
    assert stopped.status == "cancelled"
    assert await w.chat.say(w.commands, "cancel", thread="t3", key="c1") is None  # redelivery
    (other,) = await w.runs("t1")
    assert not other.cancel_requested
    llm_server.fake.latency = 0.0
    (other,) = await w.delivered("t1")
    assert other.status == "succeeded"


# -- sources= ---------------------------------------------------------------------------------


class TeamSource:
    """An internal source as a search provider (its name; it finds nothing)."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def search(self, query: str) -> list[object]:
        return []


class TeamSources:
    """The process's internal sources as the chat layer asks about them
    (``core.knowledge.Knowledge.allowed``): each server with the thread-key prefixes that may
    use it, compared part by part. Records the thread keys it was asked about."""

    def __init__(self, **channels: Sequence[str]) -> None:
        self.channels = channels
        self.asked: list[str] = []

    def allowed(self, thread_key: str) -> list[TeamSource]:
        self.asked.append(thread_key)
        parts = thread_key.split(":")
        return [
            TeamSource(name)
            for name, prefixes in self.channels.items()
            if any(p.split(":") == parts[: len(p.split(":"))] for p in prefixes)
        ]


class HeldRunner:
    """A job runner that keeps what it is given and runs nothing (what is checked here is
    the request, not its run)."""

    def __init__(self) -> None:
        self.enqueued: list[str] = []

    async def enqueue(self, run_id: str) -> None:
        self.enqueued.append(run_id)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


def with_sources(w: Talk, knowledge: TeamSources | None) -> tuple[ChatCommands, HeldRunner]:
    runner = HeldRunner()
    return ChatCommands(
        w.policy, w.requests, w.store, runner, MemoryMarkup(), knowledge=knowledge
    ), runner


async def test_sources_internal_is_refused_where_no_internal_source_may_be_used(
    talk: Callable[..., Talk],
) -> None:
    w = talk()
    for knowledge in (None, TeamSources(wiki=["memory:W1:C9"], drive=["slack"])):
        commands, runner = with_sources(w, knowledge)
        reply = await w.chat.say(
            commands, "/research heat pumps sources=internal", key=f"{knowledge}"
        )
        assert reply is not None and not reply.started
        assert reply.text == (
            "⚠️ No internal source is available in this channel, so `sources=internal` cannot "
            "run here; use `sources=web` or `sources=all`."
        )
        zh = await w.chat.say(
            commands, "/research 热泵 sources=internal", thread="t2", key=f"z{knowledge}"
        )
        assert zh is not None and zh.text.startswith("⚠️ 这个频道没有可用的内部来源")
        assert runner.enqueued == []
        if knowledge is not None:  # asked with the request's own thread key
            assert knowledge.asked == ["memory:W1:C1:t1", "memory:W1:C1:t2"]
    assert await w.runs() == [] and await w.runs("t2") == []
    assert await w.store.threads.get_thread(str(w.thread())) is None  # nothing was created


async def test_sources_are_carried_into_the_run_where_the_channel_may_use_them(
    talk: Callable[..., Talk],
) -> None:
    w = talk(FATHOM_USER_CONCURRENCY=5)  # the runs are held, never finished
    knowledge = TeamSources(wiki=["memory:W1"])
    commands, runner = with_sources(w, knowledge)
    cases = [("sources=internal", "internal"), ("sources=web", "web"), ("", "all")]
    for i, (option, stored) in enumerate(cases):
        reply = await w.chat.say(commands, f"/research heat pumps {option}", thread=f"s{i}")
        assert reply is not None and reply.started, reply
        (run,) = await w.runs(f"s{i}")
        assert run.sources == stored and run.topic == "heat pumps"
    assert len(runner.enqueued) == 3
    # The web (and both) never need an internal source: no internal source anywhere.
    bare, _ = with_sources(w, None)
    reply = await w.chat.say(bare, "/research wind sources=web", thread="w1")
    assert reply is not None and reply.started
    (run,) = await w.runs("w1")
    assert run.sources == "web"


async def test_a_bad_sources_value_is_answered_with_what_is_allowed(
    talk: Callable[..., Talk],
) -> None:
    w = talk()
    reply = await w.chat.say(w.commands, "/research heat pumps sources=intranet")
    assert reply is not None and "Unknown sources 'intranet'" in reply.text
    zh = await w.chat.say(w.commands, "/research 热泵 sources=内网", thread="t2")
    assert zh is not None and "未知的 sources" in zh.text
    assert await w.runs() == [] and await w.runs("t2") == []
