"""Slack output side against the fake Slack Web API: edits, throttling, threads and reports."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.chat.delivery import ChatDelivery
from bots.chat.throttle import EditThrottle, WorkspaceLimiter
from bots.slack.delivery import SlackPosters
from bots.slack.errors import classify_error
from bots.slack.messenger import SlackMessenger, StaticSlackClients, make_web_client
from bots.slack.render import REPORT_FILE_THRESHOLD, progress_text, report_messages
from core.engine.progress import ProgressEvent, ProgressKind, search_executed_text
from core.models import Source, Usage
from core.research.outcome import RunOutcome
from core.values import RunStatus, ThreadKey
from storage import RunRecord, Store
from tests.chat_app import wait_for
from tests.fakes import FakeSlackServer
from tests.timers import ManualTimer

TOKEN = "xoxb-test"
PENDING = "slack:T0001:C0001:pending-13345.2242"
THREAD_TS = "1690000000.000100"
SOURCES = [Source(n=1, title="One", url="https://a.example/1")]


@pytest.fixture
def server(slack_server: FakeSlackServer) -> FakeSlackServer:
    return slack_server


def plain_client(server: FakeSlackServer) -> AsyncWebClient:
    """The production client configuration (no SDK retry handlers: 429s reach our code)."""
    return make_web_client(TOKEN, server.api_url)


async def post_report(delivery: ChatDelivery, result: RunOutcome) -> None:
    """Post every part, as core.operations.job's delivery step does when nothing fails."""
    for part in delivery.report_parts(result):
        await delivery.post_report_part(part)


async def posted(server: FakeSlackServer, text: str = "start") -> tuple[ThreadKey, str]:
    thread = ThreadKey.parse(f"slack:T0001:C0001:{THREAD_TS}")
    ts = await SlackMessenger(plain_client(server)).post_message(thread, text)
    return thread, ts


def current_text(server: FakeSlackServer, ts: str, channel: str = "C0001") -> str:
    return str(server.fake.messages[(channel, ts)]["text"])


async def wait_for_text(server: FakeSlackServer, ts: str, text: str) -> None:
    async with asyncio.timeout(3):
        while True:  # the fake runs in another thread; poll it
            if current_text(server, ts) == text:
                return
            await asyncio.sleep(0.02)


# --- throttle ----------------------------------------------------------------------------


def timed_edits(
    server: FakeSlackServer, thread: ThreadKey, ts: str, timer: ManualTimer
) -> tuple[Callable[[str], Awaitable[None]], list[tuple[float, str]]]:
    """An edit of the message through the real Slack client, and when (on ``timer``) each
    edit was sent with what text."""
    messenger = SlackMessenger(plain_client(server))
    sent: list[tuple[float, str]] = []

    async def edit(text: str) -> None:
        sent.append((timer.now(), text))
        await messenger.edit_message(thread, ts, text)

    return edit, sent


async def test_rapid_submits_are_coalesced_and_the_last_text_is_written(
    server: FakeSlackServer,
) -> None:
    thread, ts = await posted(server)
    timer = ManualTimer()
    edit, sent = timed_edits(server, thread, ts, timer)
    throttle = EditThrottle(edit, classify=classify_error, interval=0.2, timer=timer)
    for i in range(10):
        await throttle.submit(f"step {i}")
    await wait_for_text(server, ts, "step 9")
    await throttle.submit("later")  # within the interval: it waits for it, then is written
    assert await timer.sleeping() == pytest.approx(0.2)
    timer.advance(0.2)
    await wait_for_text(server, ts, "later")
    assert sent == [(0.0, "step 9"), (0.2, "later")]  # the burst was coalesced into one edit
    assert [c.params["text"] for c in server.fake.calls_to("chat.update")] == ["step 9", "later"]


async def test_intermediate_edits_are_spaced_by_the_interval(server: FakeSlackServer) -> None:
    thread, ts = await posted(server)
    timer = ManualTimer()
    edit, sent = timed_edits(server, thread, ts, timer)
    throttle = EditThrottle(edit, classify=classify_error, interval=0.15, timer=timer)
    for i in range(25):
        await throttle.submit(f"step {i}")
        await asyncio.sleep(0.005)  # let the edit in flight finish (real I/O to the fake)
        timer.advance(0.03)
    assert await timer.run(throttle.flush_final("done"))
    times = [at for at, _ in sent]
    assert len(times) >= 3 and sent[-1][1] == "done"
    assert min(b - a for a, b in itertools.pairwise(times)) >= 0.15 - 1e-9
    assert current_text(server, ts) == "done"


async def test_final_text_survives_a_429(server: FakeSlackServer) -> None:
    thread, ts = await posted(server)
    timer = ManualTimer()
    edit, sent = timed_edits(server, thread, ts, timer)
    throttle = EditThrottle(edit, classify=classify_error, interval=0.05, timer=timer)
    await throttle.submit("step 1")
    await wait_for_text(server, ts, "step 1")
    server.fake.fail_next("chat.update", status=429, retry_after=7)
    timer.advance(1)
    final = asyncio.ensure_future(throttle.flush_final("Research done."))
    assert await timer.sleeping() == pytest.approx(1 + 7)  # Slack's Retry-After, as asked
    assert not final.done() and current_text(server, ts) == "step 1"
    timer.advance(7)
    assert await final
    assert current_text(server, ts) == "Research done."
    assert sent == [(0.0, "step 1"), (1.0, "Research done."), (8.0, "Research done.")]


async def test_final_edit_that_slack_refuses_reports_failure(server: FakeSlackServer) -> None:
    thread, _ = await posted(server)
    messenger = SlackMessenger(plain_client(server))
    throttle = EditThrottle(
        lambda t: messenger.edit_message(thread, "1.2", t),
        classify=classify_error,
        interval=0.05,
        timer=ManualTimer(),
    )
    assert not await throttle.flush_final("done")  # message_not_found is not retried
    assert len(server.fake.calls_to("chat.update")) == 1


def test_workspace_limiter_is_a_token_bucket() -> None:
    timer = ManualTimer()
    limiter = WorkspaceLimiter(per_minute=60, burst=2, timer=timer)
    assert limiter.try_acquire() and limiter.try_acquire()
    assert not limiter.try_acquire()
    assert limiter.delay() == pytest.approx(1.0)
    timer.advance(1.1)
    assert limiter.try_acquire()
    assert not limiter.try_acquire()


async def test_limiter_skips_intermediate_edits_and_delays_the_final(
    server: FakeSlackServer,
) -> None:
    thread, ts = await posted(server)
    timer = ManualTimer()
    edit, sent = timed_edits(server, thread, ts, timer)
    limiter = WorkspaceLimiter(per_minute=120, burst=1, timer=timer)  # one edit per 0.5 s
    assert limiter.try_acquire()  # another message of the workspace took the token
    throttle = EditThrottle(
        edit, classify=classify_error, interval=0.01, limiter=limiter, timer=timer
    )
    for i in range(5):
        await throttle.submit(f"step {i}")
        timer.advance(0.02)
    assert await timer.run(throttle.flush_final("done"))
    # No token for the intermediate ones: coalesced into the final, sent when the bucket
    # had a token again (0.5 s after it was emptied).
    assert sent == [(pytest.approx(0.5), "done")]
    assert [c.params["text"] for c in server.fake.calls_to("chat.update")] == ["done"]


# --- delivery ----------------------------------------------------------------------------


async def create_run(store: Store, key: str, *, depth: int = 3) -> RunRecord:
    thread = ThreadKey.parse(key)
    run, _ = await store.runs.create_run(
        thread=thread,
        topic="AI chips",
        depth=depth,
        strategy="iterative",
        requested_by="slack:T0001:U123",
    )
    return run


def factory(server: FakeSlackServer, store: Store) -> SlackPosters:
    clients = StaticSlackClients(make_web_client(TOKEN, server.api_url))
    return SlackPosters(clients, store, edit_interval=0.05)


def event(run: RunRecord, kind: ProgressKind, text: str, done: int = 0) -> ProgressEvent:
    return ProgressEvent(run.id, kind, text, done, run.depth)


def outcome(run: RunRecord, markdown: str) -> RunOutcome:
    return RunOutcome(
        run_id=run.id,
        thread=run.thread_key,
        status=RunStatus.SUCCEEDED,
        topic=run.topic,
        depth=run.depth,
        topics=["a", "b", "c"],
        report_markdown=markdown,
        sources=SOURCES,
        usage=Usage(),
        seconds=1.0,
    )


def edits_shown(server: FakeSlackServer) -> list[str]:
    """The last line of every chat.update the fake received, in order."""
    return [c.params["text"].splitlines()[-1] for c in server.fake.calls_to("chat.update")]


async def run_progress(
    server: FakeSlackServer, delivery: ChatDelivery, run: RunRecord, final: str
) -> None:
    """Publish a run's steps, each only after the previous one reached Slack.

    Waiting for the edit (instead of sleeping longer than the edit interval) keeps every step
    visible however slow the machine is, so the test can assert that none is lost."""
    await delivery.progress.publish(event(run, ProgressKind.STARTED, "Researching “AI chips”…"))
    for done in range(1, run.depth + 1):
        text = search_executed_text(done, run.depth)
        await delivery.progress.publish(event(run, ProgressKind.SEARCHED, text, done))
        await wait_for(lambda text=text: text in edits_shown(server))
    await delivery.progress.publish(event(run, ProgressKind.WRITING, "Writing the report…"))
    await wait_for(lambda: "Writing the report…" in edits_shown(server))
    await delivery.progress.publish(event(run, ProgressKind.FINISHED, final, run.depth))


REPORT = "# AI chips\n\nChips got faster [1].\n\n## Sources\n\n- [1] [One](https://a.example/1)\n"


async def test_slash_command_run_posts_opener_rekeys_thread_and_reports_in_it(
    server: FakeSlackServer, store: Store
) -> None:
    run = await create_run(store, PENDING)
    delivery = await factory(server, store).for_run(run)
    await run_progress(server, delivery, run, "Research done: 3/3 searches, 1 sources.")
    await post_report(delivery, outcome(run, REPORT))

    posts = server.fake.calls_to("chat.postMessage")
    opener = posts[0].params
    assert "thread_ts" not in opener and opener["channel"] == "C0001"
    assert opener["text"].startswith("<@U123> asked me to research *AI chips* (depth 3).")
    ts = next(m["ts"] for m in server.fake.history if m["text"] == opener["text"])
    new_key = f"slack:T0001:C0001:{ts}"
    thread = await store.threads.get_thread(new_key)
    assert thread is not None and thread.id == run.thread_id and thread.thread_ref == ts
    assert await store.threads.get_thread(PENDING) is None
    stored = await store.runs.get_run(run.id)
    assert stored is not None and stored.progress_message_id == ts

    updates = server.fake.calls_to("chat.update")
    assert {c.params["ts"] for c in updates} == {ts}
    shown = [c.params["text"].splitlines()[-1] for c in updates]
    steps = [s for s in shown if s.endswith("search executed.")]
    assert steps == ["1/3th search executed.", "2/3th search executed.", "3/3th search executed."]
    final = "Research done: 3/3 searches, 1 sources."
    assert current_text(server, ts) == progress_text(
        "AI chips", 3, final, requester="U123", opener=True
    )

    report = posts[1:]
    assert len(report) == 1 and report[0].params["thread_ts"] == ts
    assert report[0].params["unfurl_links"] is False
    block = report[0].params["blocks"][0]
    assert block["type"] == "markdown" and "[[1]](https://a.example/1)" in block["text"]


async def test_run_in_an_existing_thread_replies_there(
    server: FakeSlackServer, store: Store
) -> None:
    run = await create_run(store, f"slack:T0001:C0001:{THREAD_TS}", depth=1)
    delivery = await factory(server, store).for_run(run)
    await run_progress(server, delivery, run, "Research done.")
    posts = server.fake.calls_to("chat.postMessage")
    assert len(posts) == 1 and posts[0].params["thread_ts"] == THREAD_TS
    assert posts[0].params["text"].startswith("Researching *AI chips* (depth 1).")
    stored = await store.runs.get_run(run.id)
    assert stored is not None and stored.progress_message_id is not None
    assert current_text(server, stored.progress_message_id).endswith("\nResearch done.")
    assert await store.threads.get_thread(f"slack:T0001:C0001:{THREAD_TS}") is not None


async def test_resumed_run_edits_its_progress_message(
    server: FakeSlackServer, store: Store
) -> None:
    run = await create_run(store, f"slack:T0001:C0001:{THREAD_TS}", depth=2)
    _, ts = await posted(server, "old progress")
    await store.runs.set_progress_message(run.id, ts)
    resumed = await store.runs.get_run(run.id)
    assert resumed is not None
    delivery = await factory(server, store).for_run(resumed)
    await run_progress(server, delivery, resumed, "Research done.")
    assert len(server.fake.calls_to("chat.postMessage")) == 1  # only ours, above
    assert {c.params["ts"] for c in server.fake.calls_to("chat.update")} == {ts}
    assert current_text(server, ts).endswith("\nResearch done.")
    assert "2/2th search executed." in [
        c.params["text"].splitlines()[-1] for c in server.fake.calls_to("chat.update")
    ]


async def test_resumed_slash_command_run_adopts_its_opener_as_thread(
    server: FakeSlackServer, store: Store
) -> None:
    run = await create_run(store, PENDING, depth=1)
    ts = str((await plain_client(server).chat_postMessage(channel="C0001", text="opener"))["ts"])
    await store.runs.set_progress_message(run.id, ts)  # then the process died before the re-key
    resumed = await store.runs.get_run(run.id)
    assert resumed is not None
    delivery = await factory(server, store).for_run(resumed)
    await run_progress(server, delivery, resumed, "Research done.")
    await post_report(delivery, outcome(resumed, REPORT))
    assert await store.threads.get_thread(f"slack:T0001:C0001:{ts}") is not None
    assert current_text(server, ts).startswith("<@U123> asked me to research")
    report = server.fake.calls_to("chat.postMessage")[1:]
    assert [c.params["thread_ts"] for c in report] == [ts]


async def test_long_report_is_split_and_uploaded_as_a_file(
    server: FakeSlackServer, store: Store
) -> None:
    run = await create_run(store, f"slack:T0001:C0001:{THREAD_TS}")
    sections = [f"## Part {i}\n\n" + ("Finding [1]. " + "x" * 60 + "\n\n") * 120 for i in range(6)]
    markdown = "# Big\n\n" + "\n".join(sections)
    parts = len(report_messages(markdown, SOURCES))
    assert parts > REPORT_FILE_THRESHOLD
    posters = factory(server, store)
    posters.document_parts = 0  # FATHOM_REPORT_DOCUMENT_PARTS=0: no canvas, the parts
    delivery = await posters.for_run(run)
    await post_report(delivery, outcome(run, markdown))
    posts = server.fake.calls_to("chat.postMessage")
    assert len(posts) == parts
    assert all(p.params["thread_ts"] == THREAD_TS for p in posts)
    assert [p.params["text"] for p in posts][-1] == f"Big (report part {parts}/{parts})"
    (file,) = server.fake.files.values()
    assert file["content"].decode() == markdown
    assert (file["filename"], file["title"]) == ("report.md", "Big")
    assert (file["channel"], file["thread_ts"]) == ("C0001", THREAD_TS)


async def test_refused_markdown_block_falls_back_to_text(
    server: FakeSlackServer, store: Store
) -> None:
    run = await create_run(store, f"slack:T0001:C0001:{THREAD_TS}")
    delivery = await factory(server, store).for_run(run)
    server.fake.fail_next("chat.postMessage", error="invalid_blocks")
    await post_report(delivery, outcome(run, REPORT))
    (message,) = server.fake.history
    assert "blocks" not in message and message["thread_ts"] == THREAD_TS
    assert "Chips got faster [[1]](https://a.example/1)." in message["text"]


async def test_report_failure_raises_but_progress_failure_does_not(
    server: FakeSlackServer, store: Store
) -> None:
    run = await create_run(store, PENDING, depth=1)
    delivery = await factory(server, store).for_run(run)
    server.fake.fail_next("chat.postMessage", error="not_in_channel")
    await delivery.progress.publish(event(run, ProgressKind.STARTED, "Researching…"))
    assert server.fake.history == []  # refused, logged, swallowed
    await delivery.progress.publish(event(run, ProgressKind.FINISHED, "Research done.", 1))
    assert len(server.fake.history) == 1  # the next event posts the opener
    server.fake.fail_next("chat.postMessage", error="channel_not_found")
    with pytest.raises(SlackApiError):
        await post_report(delivery, outcome(run, REPORT))
