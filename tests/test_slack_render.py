"""How runs look in Slack: progress texts and report messages within Slack's limits."""

from __future__ import annotations

import re

from bots.chat.markdown import link_citations
from bots.slack.render import MARKDOWN_LIMIT, progress_text, report_messages
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
