"""How runs look in Slack: progress texts and report messages within Slack's limits."""

from __future__ import annotations

import json
import re

from bots.chat.controls import feedback_buttons, run_buttons
from bots.chat.markdown import link_citations
from bots.slack.render import (
    MARKDOWN_LIMIT,
    SECTION_CHARS,
    progress_message,
    progress_text,
    report_messages,
)
from core.models import Source

SOURCES = [
    Source(n=1, title="One", url="https://a.example/1"),
    Source(n=2, title="Two", url="https://b.example/2"),
]


def _chunks(messages: list[dict[str, object]]) -> list[str]:
    texts = []
    for message in messages:
        blocks = message["blocks"]
        assert isinstance(blocks, list) and len(blocks) == 1
        assert blocks[0]["type"] == "markdown"
        texts.append(blocks[0]["text"])
    return texts


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_progress_texts_carry_the_exact_status_line() -> None:
    opener = progress_text("AI chips", 3, "2/3th search executed.", requester="U123", opener=True)
    reply = progress_text("AI chips", 3, "2/3th search executed.", requester="U123", opener=False)
    assert opener == "<@U123> asked me to research *AI chips* (depth 3).\n2/3th search executed."
    assert reply == "Researching *AI chips* (depth 3).\n2/3th search executed."


def test_progress_text_escapes_mrkdwn_in_the_topic() -> None:
    text = progress_text("R&D <b> > 2", 1, "1/1th search executed.", requester=None, opener=False)
    assert "*R&amp;D &lt;b&gt; &gt; 2*" in text
    assert "<b>" not in text


def test_short_report_is_one_message_with_fallback_text() -> None:
    messages = report_messages(
        "# AI chips\n\nSummary [1].\n\n## Sources\n\n- [1] [One](https://a.example/1)", SOURCES
    )
    assert len(messages) == 1
    assert messages[0]["text"] == "AI chips"
    assert "Summary [[1]](https://a.example/1)." in _chunks(messages)[0]


def _long_report() -> str:
    sections = ["# Long report\n\nExecutive summary [1]."]
    for i in range(8):
        paragraphs = [f"Paragraph {i}.{j} " + "word " * 200 + "[2]." for j in range(5)]
        sections.append(f"## Section {i}\n\n" + "\n\n".join(paragraphs))
    return "\n\n".join(sections) + "\n"


def test_long_report_splits_at_section_boundaries_within_the_limit() -> None:
    md = _long_report()
    assert len(md) > 40_000
    messages = report_messages(md, SOURCES)
    chunks = _chunks(messages)
    assert len(chunks) >= 4
    assert all(0 < len(c) <= MARKDOWN_LIMIT for c in chunks)
    assert all(c.startswith("## Section") for c in chunks[1:])  # split at ## boundaries
    assert _squash("".join(chunks)) == _squash(link_citations(md, SOURCES))
    n = len(chunks)
    assert [m["text"] for m in messages] == [
        f"Long report (report part {i}/{n})" for i in range(1, n + 1)
    ]
    assert all(len(str(m["text"])) <= 3_000 for m in messages)


def test_progress_with_buttons_shows_its_text_in_a_section_and_without_has_no_blocks() -> None:
    text = progress_text("AI chips", 3, "1/3th search executed.", requester=None, opener=False)
    working = json.loads(progress_message(text, run_buttons("r1", "en")))
    assert working["text"] == text == working["blocks"][0]["text"]["text"]
    [stop, cancel] = working["blocks"][1]["elements"]
    assert (stop["action_id"], stop["value"], stop["style"]) == ("fathom_stop", "r1", "primary")
    assert (cancel["action_id"], cancel["style"]) == ("fathom_cancel", "danger")
    assert json.loads(progress_message(text, ())) == {"text": text, "blocks": []}


def test_a_long_progress_section_is_cut_outside_an_entity() -> None:
    text = "a" * (SECTION_CHARS - 3) + "&amp;&amp;"
    section = json.loads(progress_message(text, run_buttons("r1", "en")))["blocks"][0]
    shown = section["text"]["text"]
    assert len(shown) <= SECTION_CHARS and shown.endswith("a…")


def test_the_last_report_message_alone_carries_the_feedback_buttons() -> None:
    markdown = "# T\n\n" + "\n\n".join(f"## S{i}\n\n" + "x" * 6000 for i in range(3))
    messages = report_messages(markdown, SOURCES, feedback_buttons("r1", "zh"))
    assert len(messages) > 1
    assert all(len(m["blocks"]) == 1 for m in messages[:-1])
    actions = messages[-1]["blocks"][-1]
    assert [e["action_id"] for e in actions["elements"]] == ["fathom_up", "fathom_down"]
    assert actions["elements"][0]["text"]["text"] == "👍 有用"


def test_the_scopes_a_plain_reply_needs_depend_on_the_channel() -> None:
    """Slack's header lists scopes comma-separated (``X-OAuth-Scopes: chat:write,
    channels:history``); a ``G`` channel is private, a ``C`` one may be public or private
    (private channels made since 2021 have ``C`` ids), a DM is addressed to the bot anyway.
    Nothing is assumed before an answer has listed the scopes."""
    from bots.slack.scopes import SlackScopes

    scopes = SlackScopes()
    assert not scopes.mention_needed("T1", "C1")  # not known yet
    scopes.note("T1", {"X-OAuth-Scopes": "chat:write, groups:history"})
    assert scopes.mention_needed("T1", "C1")
    assert not scopes.mention_needed("T1", "G1") and not scopes.mention_needed("T1", "D1")
    scopes.note("T1", {"Content-Type": "application/json"})  # says nothing: kept
    assert scopes.mention_needed("T1", "C1")
    scopes.note("T1", {"x-oauth-scopes": "channels:history,groups:history"})
    assert not scopes.mention_needed("T1", "C1") and not scopes.mention_needed("T2", "C1")
