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

from collections.abc import Callable

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.chat.controls import feedback_buttons
from bots.slack.canvas import (
    Audience,
    CanvasRefused,
    canvas_markdown,
    create_canvas,
    delete_canvas,
    inert_text,
)
from bots.slack.messenger import make_web_client
from bots.slack.render import summary_message
from core.models import Source
from tests.fakes import FakeSlackServer
from tests.fakes.slack import FakeSlack

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


async def test_delete_counts_a_canvas_already_gone_as_deleted(server: FakeSlackServer) -> None:
    canvas = await create_canvas(client(server), "T", "x", Audience.of("C0001", "U1"))
    await delete_canvas(client(server), canvas.id)
    assert server.fake.canvases.live() == {}
    await delete_canvas(client(server), canvas.id)  # canvas_not_found: nothing to do
    assert [c.method for c in server.fake.calls_to("canvases.delete")] == ["canvases.delete"] * 2
    server.fake.fail_next("canvases.delete", status=500)
    with pytest.raises(SlackApiError):
        await delete_canvas(client(server), canvas.id)
