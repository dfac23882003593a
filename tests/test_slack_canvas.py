"""A long report as a Slack canvas: its Markdown, and the calls that create, share and delete
it, with the real slack_sdk AsyncWebClient against the fake Slack.

Slack's shapes, from its method pages (docs.slack.dev): ``canvases.create`` (``title``,
``document_content {"type": "markdown", "markdown"}``, ``channel_id`` "required for free
teams", which tabs the canvas "with write permissions"; ``{"ok": true, "canvas_id"}``; bad
content: ``canvas_creation_failed`` with a ``detail`` such as "Unsupported block type (List)
within block quote"; errors ``canvas_disabled_user_team``,
``free_teams_cannot_create_non_tabbed_canvases``, scope ``canvases:write``);
``canvases.access.set`` (``access_level`` read|write|owner, ``channel_ids`` or ``user_ids``,
not both, at most 20; "Channel IDs associated with direct messages (DMs) ... will not be
accepted ... use individual user IDs instead"); ``canvases.delete`` (``canvas_not_found``
when gone); the canvas surface page (headings h1-h3, quote blocks, links, and mentions
written ``![](@U123ABCDEFG)`` / ``![](#C123ABC456)``; 1 MiB of Markdown). slack_sdk 3.48's
``AsyncWebClient.canvases_create`` (JSON body), ``canvases_access_set`` (the id lists joined
with commas), ``canvases_delete``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.chat.controls import feedback_buttons
from bots.chat.delivery import ChatDelivery
from bots.slack.canvas import (
    Audience,
    CanvasRefused,
    canvas_markdown,
    create_canvas,
    delete_canvas,
    inert_text,
)
from bots.slack.delivery import SlackPosters
from bots.slack.messenger import StaticSlackClients, make_web_client
from bots.slack.render import report_messages, summary_message
from core.claims.quotes import source_quotes
from core.claims.summary import CheckSummary, ClaimSummary
from core.models import Source, Usage
from core.research.outcome import RunOutcome
from core.untrusted import as_data
from core.values import ReportDocument, RunStatus, ThreadKey
from storage import RunRecord, Store
from tests.chat_app import wait_for
from tests.fakes import FakeSlackServer, Reply
from tests.fakes.slack import FakeSlack
from tests.test_slack_app import BotFactory, _clean_env, start_bot  # noqa: F401  (the fixtures)

TOKEN = "xoxb-test"
SOURCES = [
    Source(n=1, title="One", url="https://a.example/1"),
    Source(n=2, title="Two", url="https://b.example/2", published="2026-11-02"),
]
REPORT = (
    "# AI chips\n\nSupply is tight [1]. Prices rose [2].\n\n## Findings\n\n#### Deep detail\n\n"
    "Text.\n\n## Sources\n\n- [1] [One](https://a.example/1)\n- [2] [Two](https://b.example/2)\n"
)


@pytest.fixture
def server(slack_server: FakeSlackServer) -> FakeSlackServer:
    return slack_server


def client(server: FakeSlackServer) -> AsyncWebClient:
    return make_web_client(TOKEN, server.api_url)


# --- the canvas's Markdown -------------------------------------------------------------------


def test_the_canvas_holds_the_report_with_linked_citations_and_its_sources_with_quotes() -> None:
    quotes = {1: ["Supply of AI chips is tight.", "Lead times grew."], 2: ["Prices rose 20%."]}
    markdown = canvas_markdown(REPORT, SOURCES, quotes, "en")
    assert markdown.startswith("# AI chips\n\nSupply is tight [[1]](https://a.example/1).")
    assert "### Deep detail" in markdown and "####" not in markdown  # h1-h3 only
    assert markdown.count("## Sources") == 1  # rebuilt, not repeated
    listing = markdown[markdown.index("## Sources") :]
    assert listing == (
        "## Sources\n\n"
        "[1] [One](https://a.example/1)\n\n"
        "> “Supply of AI chips is tight.”\n\n"
        "> “Lead times grew.”\n\n"
        "[2] [Two](https://b.example/2) (2026-11-02)\n\n"
        "> “Prices rose 20%.”\n"
    )


def test_a_source_without_quotes_shows_none() -> None:
    listing = canvas_markdown(REPORT, SOURCES, {2: ["Prices rose."]}, "en").split("## Sources")[1]
    one = listing.split("[2]")[0]
    assert "[1] [One](https://a.example/1)" in one and ">" not in one


def test_hostile_text_is_inert_in_the_canvas() -> None:
    """Mentions (Slack's ``<@U…>``/``<!here>``, the canvas's own ``![](@U…)`` and
    ``![](#C…)``, a bare ``@channel``), links no source returned (inline, reference, bare,
    ``<…>``) and markup inside quotes and titles: none survives as markup."""
    report = (
        "# T\n\nHi <!here> and <@U999> ![](@U123ABCDEFG) in ![](#C123ABC456) @channel [1].\n\n"
        "See [the deal](https://evil.example/x) or https://evil.example/y or "
        "<https://evil.example/z>.\n\n[ref]: https://evil.example/ref\n\n## Sources\n\n- [1] x\n"
    )
    sources = [
        Source(n=1, title="**Bold** <@U42> [x](https://evil.example/t)", url="https://a.example/1")
    ]
    quotes = {1: ["- a *list* > `code` [l](https://evil.example/q) <!channel> @here ![](@U1)"]}
    markdown = canvas_markdown(report, sources, quotes, "en")
    assert "evil.example" not in markdown
    assert "![" not in markdown and "](@" not in markdown and "](#" not in markdown
    assert "<!" not in markdown and "<@" not in markdown
    assert "@channel" not in markdown and "@here" not in markdown  # a word joiner after the @
    quote = next(line for line in markdown.splitlines() if line.startswith("> "))
    assert quote.startswith("> “") and not any(c in quote[2:] for c in "*`[]<>")
    title = next(line for line in markdown.splitlines() if line.startswith("[1] "))
    assert title.startswith("[1] [∗∗Bold∗∗") and title.endswith("](https://a.example/1)")


def test_a_chinese_report_gets_chinese_headings_and_notes() -> None:
    report = "# 固态电池\n\n供应紧张 [1]。\n\n## 来源\n\n- [1] [一](https://a.example/1)\n"
    markdown = canvas_markdown(report, SOURCES[:1], {1: ["供应紧张。"]}, "zh")
    assert markdown.count("## 来源") == 1 and "Sources" not in markdown
    long = report.replace("## 来源", "很长的段落。" * 80 + "\n\n## 来源")
    cut = canvas_markdown(long, SOURCES[:1], {}, "zh", limit=400)
    assert "报告在此截断" in cut and len(cut) <= 400
    assert cut.rstrip().endswith("[1] [One](https://a.example/1)")


def test_a_report_over_the_limit_is_cut_at_a_paragraph_with_a_note() -> None:
    body = "\n\n".join(f"Paragraph {i} " + "x" * 80 for i in range(200))
    markdown = canvas_markdown(
        f"# T\n\n{body}\n\n## Sources\n\n- [1] x\n", SOURCES, {}, "en", 5_000
    )
    assert len(markdown) <= 5_000
    before = markdown.split("\n\n*The report was cut here")[0]
    assert before.endswith("x" * 80)  # a whole paragraph last
    assert "## Sources" in markdown and "[2] [Two](https://b.example/2)" in markdown


async def test_a_list_in_a_report_s_quote_block_is_kept_as_text(server: FakeSlackServer) -> None:
    """A canvas refuses a list inside a quote block (its method page's own example of bad
    content): the markers are written as text, and Slack takes the canvas."""
    report = "# T\n\n> - first\n> 2. second\n> > + third\n\n- a list outside\n"
    markdown = canvas_markdown(report, SOURCES, {}, "en")
    assert "> • first\n> 2․ second\n> > • third\n\n- a list outside" in markdown
    await create_canvas(client(server), "T", markdown, Audience.of("C0001", "U1"))
    assert len(server.fake.canvases.live()) == 1


def test_inert_text_keeps_the_words() -> None:
    assert inert_text("A *b* [c]\n d") == "A ∗b∗ ［c］ d"


# --- the thread's summary ------------------------------------------------------------------


async def test_the_summary_is_one_message_slack_takes(server: FakeSlackServer) -> None:
    """Executive summary with linked citations, the claim-check line, the canvas's link, the
    👍/👎 buttons: one ``chat.postMessage`` within Slack's block limits (the fake checks
    them), even for a summary longer than a markdown block holds."""
    url = "https://fathom-fake.slack.com/docs/T0001/F00000001"
    feedback = feedback_buttons("run-1", "en")
    for summary in ("Supply is tight [1] <!here>.", "word " * 5_000):
        message = summary_message(
            "AI chips", summary, "3 of 4 claims checked and supported.", url, SOURCES, feedback
        )
        await client(server).chat_postMessage(channel="C0001", thread_ts="1.2", **message)
    first = server.fake.calls_to("chat.postMessage")[0].params
    markdown = first["blocks"][0]["text"]
    assert markdown.startswith("Supply is tight [[1]](https://a.example/1) @\u2060here.")
    assert "_3 of 4 claims checked and supported._" in markdown
    assert markdown.endswith(f"**[Read the full report]({url})**")
    assert [e["action_id"] for e in first["blocks"][1]["elements"]] == ["fathom_up", "fathom_down"]
    assert first["text"] == f"AI chips (full report: {url})"


def test_a_chinese_summary_has_chinese_words() -> None:
    message = summary_message(
        "固态电池", "供应紧张 [1]。", None, "https://x.slack.com/docs/T/F1", SOURCES, (), "zh"
    )
    assert "阅读完整报告" in message["blocks"][0]["text"] and "Read" not in str(message)
    assert message["text"] == "固态电池（完整报告：https://x.slack.com/docs/T/F1）"


# --- the calls against the fake --------------------------------------------------------------


async def test_a_canvas_is_created_standalone_and_shared_read_only_with_the_channel(
    server: FakeSlackServer,
) -> None:
    canvas = await create_canvas(
        client(server), "AI chips", "# AI chips\n\nx", Audience.of("C0001", "U1")
    )
    made = server.fake.canvases.made[canvas.id]
    assert made["channel_id"] is None  # not tabbed: a tab gives every member write access
    assert made["access"] == {"C0001": "read"}
    assert made["title"] == "AI chips" and made["markdown"] == "# AI chips\n\nx"
    assert canvas.url == f"https://fathom-fake.slack.com/docs/T0001/{canvas.id}"
    assert [c.method for c in server.fake.calls] == [
        "canvases.create",
        "canvases.access.set",
        "files.info",
    ]


async def test_a_dm_canvas_is_shared_with_the_requester_only(server: FakeSlackServer) -> None:
    canvas = await create_canvas(client(server), "T", "x", Audience.of("D0001", "U1"))
    assert server.fake.canvases.made[canvas.id]["access"] == {"U1": "read"}


async def test_a_dm_without_a_requester_makes_no_canvas(server: FakeSlackServer) -> None:
    with pytest.raises(CanvasRefused) as refused:
        await create_canvas(client(server), "T", "x", Audience.of("D0001", None))
    assert not refused.value.workspace and server.fake.calls == []


def without_scope(fake: FakeSlack) -> None:
    fake.scopes = tuple(s for s in fake.scopes if s != "canvases:write")


def free_plan(fake: FakeSlack) -> None:
    fake.canvases.plan = "free"


def canvases_off(fake: FakeSlack) -> None:
    fake.canvases.refusal = "canvas_disabled_user_team"


def user_token_only(fake: FakeSlack) -> None:
    fake.fail_next("canvases.create", error="not_allowed_token_type")


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        (without_scope, "missing_scope"),
        (free_plan, "free_teams_cannot_create_non_tabbed_canvases"),
        (canvases_off, "canvas_disabled_user_team"),
        (user_token_only, "not_allowed_token_type"),
    ],
)
async def test_refusals_for_the_workspace(
    server: FakeSlackServer, setup: Callable[[FakeSlack], None], code: str
) -> None:
    setup(server.fake)
    with pytest.raises(CanvasRefused) as refused:
        await create_canvas(client(server), "T", "x", Audience.of("C0001", "U1"))
    assert refused.value.code == code and refused.value.workspace
    assert server.fake.canvases.live() == {}


async def test_content_slack_refuses_is_refused_for_this_report_only(
    server: FakeSlackServer,
) -> None:
    with pytest.raises(CanvasRefused) as refused:
        await create_canvas(
            client(server), "T", "> - a list in a quote", Audience.of("C0001", "U1")
        )
    assert refused.value.code == "canvas_creation_failed" and not refused.value.workspace


async def test_a_canvas_that_cannot_be_shared_is_deleted(server: FakeSlackServer) -> None:
    server.fake.fail_next("canvases.access.set", error="channel_not_found")
    with pytest.raises(CanvasRefused) as refused:
        await create_canvas(client(server), "T", "x", Audience.of("C0001", "U1"))
    assert refused.value.code == "channel_not_found" and not refused.value.workspace
    assert server.fake.canvases.made and server.fake.canvases.live() == {}


@pytest.mark.parametrize("status", [429, 500])
async def test_a_passing_failure_propagates_and_leaves_no_canvas(
    server: FakeSlackServer, status: int
) -> None:
    server.fake.fail_next("canvases.access.set", status=status)
    with pytest.raises(SlackApiError):
        await create_canvas(client(server), "T", "x", Audience.of("C0001", "U1"))
    assert server.fake.canvases.made and server.fake.canvases.live() == {}
    server.fake.fail_next("canvases.create", status=status)
    with pytest.raises(SlackApiError):
        await create_canvas(client(server), "T", "x", Audience.of("C0001", "U1"))


async def test_a_delivery_cancelled_while_sharing_deletes_its_canvas(
    server: FakeSlackServer,
) -> None:
    """The run's delivery is cancelled (a shutdown, a lost claim) while Slack has not yet
    answered the sharing: the canvas it made is deleted, not left readable by no one."""
    server.fake.held.add("canvases.access.set")
    making = asyncio.ensure_future(
        create_canvas(client(server), "T", "x", Audience.of("C0001", "U1"))
    )
    await wait_for(lambda: server.fake.calls_to("canvases.access.set"))
    making.cancel()
    server.fake.held.clear()
    with pytest.raises(asyncio.CancelledError):
        await making
    assert len(server.fake.canvases.made) == 1 and server.fake.canvases.live() == {}


async def test_delete_counts_a_canvas_already_gone_as_deleted(server: FakeSlackServer) -> None:
    canvas = await create_canvas(client(server), "T", "x", Audience.of("C0001", "U1"))
    await delete_canvas(client(server), canvas.id)
    assert server.fake.canvases.live() == {}
    await delete_canvas(client(server), canvas.id)  # canvas_not_found: nothing to do
    assert [c.method for c in server.fake.calls_to("canvases.delete")] == ["canvases.delete"] * 2
    server.fake.fail_next("canvases.delete", status=500)
    with pytest.raises(SlackApiError):
        await delete_canvas(client(server), canvas.id)


# --- through the shared delivery (bots.chat.delivery's document step) ------------------------

THREAD = "slack:T0001:C0001:1690000000.000100"
LONG = (
    "# AI chips\n\n## Summary\n\nSupply is tight [1]. Prices rose [2].\n\n"
    + "\n\n".join(f"## Part {i}\n\n" + ("Finding [1]. " + "x" * 60 + "\n\n") * 40 for i in range(6))
    + "\n\n## Sources\n\n- [1] [One](https://a.example/1)\n- [2] [Two](https://b.example/2)\n"
)
SHORT = "# AI chips\n\n## Summary\n\nSupply is tight [1].\n\n## Sources\n\n- [1] [One](https://a.example/1)\n"


def posters(server: FakeSlackServer, store: Store, **kwargs: Any) -> SlackPosters:
    clients = StaticSlackClients(make_web_client(TOKEN, server.api_url))
    return SlackPosters(clients, store, edit_interval=0.01, **kwargs)


async def slack_run(store: Store, key: str = THREAD, topic: str = "AI chips") -> RunRecord:
    run, _ = await store.runs.create_run(
        thread=ThreadKey.parse(key),
        topic=topic,
        depth=2,
        strategy="iterative",
        requested_by="slack:T0001:U123",
    )
    return run


def checked(*claims: tuple[str, int, str | None, str | None]) -> CheckSummary:
    """Claims (text, cited source, verdict, quote): supported ones keep their quote."""
    return CheckSummary(
        claims=[
            ClaimSummary(
                text=text,
                cited=[n],
                verdict=verdict,
                fixed="unverified" if verdict == "unsupported" else None,
                quote=quote,
                quote_source=n if quote else None,
            )
            for text, n, verdict, quote in claims
        ]
    )


def outcome_of(run: RunRecord, markdown: str, claims: CheckSummary | None = None) -> RunOutcome:
    return RunOutcome(
        run_id=run.id,
        thread=run.thread_key,
        status=RunStatus.SUCCEEDED,
        topic=run.topic,
        depth=run.depth,
        topics=["a", "b"],
        report_markdown=markdown,
        sources=SOURCES,
        usage=Usage(),
        seconds=1.0,
        claims=claims,
    )


async def deliver(delivery: ChatDelivery, outcome: RunOutcome, posted: int = 0) -> int:
    """Post the report's parts as ``core.operations.job`` does when nothing fails: the parts
    asked again after each one; returns how many were posted in all."""
    while posted < len(parts := delivery.report_parts(outcome)):
        await delivery.post_report_part(parts[posted])
        posted += 1
    return posted


def thread_messages(server: FakeSlackServer) -> list[dict[str, Any]]:
    return [m for m in server.fake.history if m.get("thread_ts")]


async def test_a_long_report_is_one_canvas_and_one_summary_message(
    server: FakeSlackServer, store: Store
) -> None:
    run = await slack_run(store)
    claims = checked(
        ("Supply is tight [1].", 1, "supported", "Supply of chips stays tight through 2027."),
        ("Prices rose [2].", 2, "unsupported", "A passage that did not support it."),
    )
    delivery = await posters(server, store).for_run(run)
    assert await deliver(delivery, outcome_of(run, LONG, claims)) == 2  # the step, the summary
    calls = [c.method for c in server.fake.calls if c.method != "chat.postMessage"]
    assert calls == ["canvases.create", "canvases.access.set", "files.info"]
    [(canvas_id, canvas)] = server.fake.canvases.live().items()
    assert canvas["access"] == {"C0001": "read"} and canvas["title"] == "AI chips"
    assert "> “Supply of chips stays tight through 2027.”" in canvas["markdown"]
    assert "did not support" not in canvas["markdown"]  # an unverified claim shows no quote
    assert "## Part 5" in canvas["markdown"]  # the whole report
    [summary] = thread_messages(server)  # no report parts, no report.md
    assert server.fake.files == {}
    url = f"https://fathom-fake.slack.com/docs/T0001/{canvas_id}"
    markdown = summary["blocks"][0]["text"]
    assert markdown.startswith("Supply is tight [[1]](https://a.example/1).")
    assert f"[Read the full report]({url})" in markdown
    assert "1 of 2" in markdown  # the claim-check line
    assert summary["blocks"][1]["elements"][0]["action_id"] == "fathom_up"
    stored = await store.runs.get_run(run.id)
    assert stored is not None and stored.report_document == ReportDocument(
        kind="canvas", id=canvas_id, url=url
    )


async def test_a_short_report_stays_one_message(server: FakeSlackServer, store: Store) -> None:
    run = await slack_run(store)
    delivery = await posters(server, store).for_run(run)
    assert await deliver(delivery, outcome_of(run, SHORT)) == 1
    assert server.fake.canvases.made == {}
    assert [c.method for c in server.fake.calls] == ["chat.postMessage"]


async def test_a_dm_s_canvas_is_read_by_its_requester_only(
    server: FakeSlackServer, store: Store
) -> None:
    run = await slack_run(store, "slack:T0001:D0001:1690000000.000100")
    await deliver(await posters(server, store).for_run(run), outcome_of(run, LONG))
    [canvas] = server.fake.canvases.live().values()
    assert canvas["access"] == {"U123": "read"}


async def test_the_operator_may_let_the_conversation_edit_the_canvas(
    server: FakeSlackServer, store: Store
) -> None:
    run = await slack_run(store)
    delivery = await posters(server, store, canvas_access="write").for_run(run)
    await deliver(delivery, outcome_of(run, LONG))
    [canvas] = server.fake.canvases.live().values()
    assert canvas["access"] == {"C0001": "write"}


async def test_a_workspace_without_the_scope_gets_parts_once_and_is_not_asked_again(
    server: FakeSlackServer, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    server.fake.scopes = tuple(s for s in server.fake.scopes if s != "canvases:write")
    factory = posters(server, store)
    parts = len(report_messages(LONG, SOURCES))
    assert parts >= 2
    with caplog.at_level(logging.WARNING):
        first = await slack_run(store)
        posted = await deliver(await factory.for_run(first), outcome_of(first, LONG))
        assert posted == 1 + parts  # the step (refused), then the parts
        second = await slack_run(store, "slack:T0001:C0002:1690000000.000200")
        await deliver(await factory.for_run(second), outcome_of(second, LONG))
    assert len(server.fake.calls_to("canvases.create")) == 1  # the second run asked nothing
    reports = [m for m in thread_messages(server) if m["channel"] == "C0001"]
    assert len(reports) == parts and server.fake.canvases.made == {}
    refusals = [r for r in caplog.records if "no canvas for the report" in r.getMessage()]
    assert len(refusals) == 1 and "missing_scope" in refusals[0].getMessage()
    stored = await store.runs.get_run(first.id)
    assert stored is not None and stored.report_document is not None
    assert stored.report_document.refused


async def test_a_resumed_delivery_posts_the_summary_of_the_recorded_canvas(
    server: FakeSlackServer, store: Store
) -> None:
    """The process died after the canvas was made and recorded, before the summary: the
    delivery that takes over posts the summary of that canvas and makes no second one."""
    run = await slack_run(store)
    first = await posters(server, store).for_run(run)
    outcome = outcome_of(run, LONG)
    step = first.report_parts(outcome)[0]
    await first.post_report_part(step)  # then the process died
    resumed = await store.runs.get_run(run.id)
    assert resumed is not None and resumed.report_document is not None
    again = await posters(server, store).for_run(resumed)
    assert await deliver(again, outcome, posted=1) == 2
    assert len(server.fake.calls_to("canvases.create")) == 1
    [summary] = thread_messages(server)
    assert resumed.report_document.url in summary["blocks"][0]["text"]


async def test_a_chinese_run_makes_a_chinese_canvas(server: FakeSlackServer, store: Store) -> None:
    run = await slack_run(store, topic="固态电池")
    report = LONG.replace("# AI chips", "# 固态电池").replace("## Sources", "## 来源")
    await deliver(await posters(server, store).for_run(run), outcome_of(run, report))
    [canvas] = server.fake.canvases.live().values()
    assert canvas["title"] == "固态电池" and "## 来源" in canvas["markdown"]
    assert "Sources" not in canvas["markdown"]
    [summary] = thread_messages(server)
    assert "阅读完整报告" in summary["blocks"][0]["text"]
    assert summary["blocks"][1]["elements"][0]["text"]["text"] == "👍 有用"


async def test_hostile_titles_and_quotes_are_inert_in_the_canvas(
    server: FakeSlackServer, store: Store
) -> None:
    run = await slack_run(store)
    claims = checked(
        ("Supply is tight [1].", 1, "supported", "<!channel> ![](@U1) [x](https://evil.example)")
    )
    outcome = outcome_of(run, LONG, claims)
    outcome.sources = [
        Source(n=1, title="<@U42> **bold** ![](#C1)", url="https://a.example/1"),
        SOURCES[1],
    ]
    await deliver(await posters(server, store).for_run(run), outcome)
    [canvas] = server.fake.canvases.live().values()
    markdown = canvas["markdown"]
    assert "evil.example" not in markdown and "<!" not in markdown and "<@" not in markdown
    assert "![" not in markdown and "**bold**" not in markdown


async def test_a_rate_limited_canvas_is_made_on_the_next_try(
    server: FakeSlackServer, store: Store
) -> None:
    run = await slack_run(store)
    delivery = await posters(server, store).for_run(run)
    outcome = outcome_of(run, LONG)
    server.fake.fail_next("canvases.create", status=429, retry_after=3)
    step = delivery.report_parts(outcome)[0]
    with pytest.raises(SlackApiError) as limited:
        await delivery.post_report_part(step)
    failure = delivery.classify(limited.value)
    assert failure.retryable and failure.retry_after == 3  # the job waits as Slack asked
    assert await deliver(delivery, outcome) == 2  # its next try
    assert len(server.fake.canvases.live()) == 1
    assert len(thread_messages(server)) == 1


async def test_deleting_a_report_s_canvas(server: FakeSlackServer, store: Store) -> None:
    run = await slack_run(store)
    factory = posters(server, store)
    await deliver(await factory.for_run(run), outcome_of(run, LONG))
    stored = await store.runs.get_run(run.id)
    assert stored is not None and stored.report_document is not None
    await factory.delete_document(stored.thread, stored.report_document)
    assert server.fake.canvases.live() == {}
    await factory.delete_document(stored.thread, stored.report_document)  # already gone
    parts = ReportDocument(kind=ReportDocument.PARTS, reason="missing_scope")
    await factory.delete_document(stored.thread, parts)  # nothing was made
    assert len(server.fake.calls_to("canvases.delete")) == 2


# --- end to end: the served app, its job runner, the fakes ------------------------------------

FILLER = "The market keeps shifting in ways that nobody quite expected before.\n\n" * 30
WRITTEN = (
    "# Solid-state batteries\n\n## Executive summary\n\nThey are getting closer [1].\n\n"
    + "".join(f"## Theme {i}\n\n{FILLER}" for i in range(8))
    + "## Conclusions\n\nCosts still matter [2].\n"
)


async def test_served_a_long_report_becomes_one_canvas_and_one_summary(
    start_bot: BotFactory,  # noqa: F811
) -> None:
    """A slash command's research whose report is longer than one message, through the real
    job runner: one canvas, one summary message in the thread, the canvas recorded."""
    bot = await start_bot(FATHOM_DELIVERY_BACKOFF="0.05")
    bot.llm.fake.script("writer", Reply(WRITTEN))
    await bot.command("solid-state batteries depth=1", trigger_id="t-canvas")
    [run] = await bot.finished()
    assert (run.status, run.delivery) == ("succeeded", "posted")
    assert len(report_messages(run.report_markdown or "", [])) >= 2  # a long report
    [canvas] = bot.slack.canvases.live().values()
    assert canvas["access"] == {"C0001": "read"} and "## Theme 7" in canvas["markdown"]
    [summary] = bot.reports()  # the only message with a markdown block
    assert summary["thread_ts"] == run.progress_message_id
    assert "They are getting closer" in summary["blocks"][0]["text"]
    assert run.report_document is not None and run.report_document.kind == "canvas"
    assert run.report_document.url in summary["blocks"][0]["text"]


async def test_served_a_rate_limited_canvas_is_retried_by_the_job(
    start_bot: BotFactory,  # noqa: F811
) -> None:
    bot = await start_bot(FATHOM_DELIVERY_BACKOFF="0.05")
    bot.llm.fake.script("writer", Reply(WRITTEN))
    bot.slack.fail_next("canvases.create", status=429, retry_after=0)
    await bot.command("solid-state batteries depth=1", trigger_id="t-canvas-429")
    [run] = await bot.finished()
    assert (run.status, run.delivery) == ("succeeded", "posted")
    assert len(bot.slack.calls_to("canvases.create")) == 2  # limited, then made
    assert len(bot.slack.canvases.live()) == 1 and len(bot.reports()) == 1


async def test_served_the_canvas_shows_the_quotes_the_claim_check_kept(
    start_bot: BotFactory,  # noqa: F811
) -> None:
    """The fake writer copies each cited line from its source, so the claim check keeps the
    sentence that supported it; with ``FATHOM_REPORT_DOCUMENT_PARTS=1`` even its one-message
    report is a canvas, and each source's quotes are under it, from its own text."""
    bot = await start_bot(FATHOM_REPORT_DOCUMENT_PARTS="1")
    await bot.command("tidal power depth=1", trigger_id="t-canvas-quotes")
    [run] = await bot.finished()
    assert run.claim_check is not None
    quotes = source_quotes(CheckSummary.model_validate(run.claim_check))
    assert quotes, run.claim_check  # the check kept quotes (at most two a source are shown)
    [canvas] = bot.slack.canvases.live().values()
    listing = canvas["markdown"].split("## Sources\n\n")[1]
    shown = {
        int(entry.split("]", 1)[0]): [
            line[3:-1] for line in entry.splitlines() if line.startswith("> “")
        ]
        for entry in ("\n" + listing).split("\n[")[1:]
    }
    assert {n: q for n, q in shown.items() if q} == {
        n: [inert_text(as_data(q)) for q in found] for n, found in quotes.items()
    }


async def test_served_the_operator_s_canvas_access_reaches_the_canvas(
    start_bot: BotFactory,  # noqa: F811
) -> None:
    """``FATHOM_SLACK_CANVAS_ACCESS=write``: the conversation may edit the canvas; still no
    one else is granted anything."""
    bot = await start_bot(FATHOM_REPORT_DOCUMENT_PARTS="1", FATHOM_SLACK_CANVAS_ACCESS="write")
    await bot.command("wave power depth=1", trigger_id="t-canvas-write")
    [run] = await bot.finished()
    assert run.report_document is not None and run.report_document.kind == "canvas"
    [canvas] = bot.slack.canvases.live().values()
    assert canvas["access"] == {"C0001": "write"}
    [grant] = bot.slack.calls_to("canvases.access.set")
    # slack_sdk sends the list joined with commas (``canvases_access_set``)
    assert (grant.params["access_level"], grant.params["channel_ids"]) == ("write", "C0001")


async def test_a_digest_s_long_report_is_a_canvas_with_its_summary_in_the_digest_s_thread(
    server: FakeSlackServer, store: Store
) -> None:
    """A digest's firing takes the same path: its thread starts with its progress message
    (a ``pending-…`` key), the canvas is shared with the channel, and the summary replies in
    the thread that message opened."""
    run = await slack_run(store, key="slack:T0001:C0001:pending-digest-1", topic="AI chips")
    delivery = await posters(server, store).for_run(run)
    assert await deliver(delivery, outcome_of(run, LONG)) == 2
    [(_, canvas)] = server.fake.canvases.live().items()
    assert canvas["access"] == {"C0001": "read"}
    stored = await store.runs.get_run(run.id)
    assert stored is not None and stored.progress_message_id is not None
    assert stored.thread.thread == stored.progress_message_id  # re-keyed to its opener
    [summary] = thread_messages(server)
    assert summary["thread_ts"] == stored.progress_message_id
    assert "Read the full report" in summary["blocks"][0]["text"]
