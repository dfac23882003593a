"""How runs look in Slack: progress texts and report messages within Slack's limits."""

from __future__ import annotations

import re

from bots.slack.render import (
    MARKDOWN_LIMIT,
    link_citations,
    progress_text,
    report_messages,
    split_report,
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


def test_citations_become_links_and_unknown_ones_stay() -> None:
    md = "Chips got faster [1][2]. Unknown [7]. Linked [[1]](https://a.example/1). `code [1]`"
    out = link_citations(md, SOURCES)
    assert "faster [[1]](https://a.example/1)[[2]](https://b.example/2)." in out
    assert "Unknown [7]." in out
    assert out.count("[[1]](https://a.example/1)") == 2  # the existing link is not doubled
    assert "`code [1]`" in out


def test_sources_list_numbers_are_not_relinked() -> None:
    md = "## Sources\n\n- [1] [One](https://a.example/1)\n"
    assert link_citations(md, SOURCES) == md


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


def test_one_huge_section_splits_at_paragraphs_then_hard_without_breaking_links() -> None:
    link = "[[1]](https://a.example/1)"
    para = ("x" * 50 + " ") * 100  # 5,100 chars, no paragraph break inside
    md = "# T\n\n## Only\n\n" + "\n\n".join([para] * 6) + "\n\n" + (f"word {link} " * 2_000)
    chunks = split_report(md)
    assert all(0 < len(c) <= MARKDOWN_LIMIT for c in chunks)
    assert _squash("".join(chunks)) == _squash(md)
    for c in chunks:  # every link is whole inside one chunk
        assert c.count("[[1]](") == c.count("[[1]](https://a.example/1)")


def test_a_split_inside_a_code_fence_closes_and_reopens_it() -> None:
    code = "\n\n".join(f"line {i} " + "y" * 100 for i in range(200))  # ~21,000 chars
    md = f"# T\n\nIntro.\n\n```python\n{code}\n```\n\nAfter."
    chunks = split_report(md)
    assert len(chunks) >= 2
    for c in chunks:
        assert len(c) <= MARKDOWN_LIMIT
        assert len(re.findall(r"^```", c, re.MULTILINE)) % 2 == 0
    assert chunks[1].startswith("```python\n")
    assert chunks[-1].rstrip().endswith("After.")


def test_no_empty_chunks() -> None:
    assert split_report("\n\n   \n") == []
    assert all(c.strip() for c in split_report("# T\n\n\n\n## A\n\n\n\n## B\n"))
