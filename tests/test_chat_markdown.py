"""Platform-neutral chat Markdown: citation links and splitting reports into parts."""

from __future__ import annotations

import re

from bots.chat.markdown import link_citations, split_report, utf8_size
from core.models import Source

LIMIT = 11_500
SOURCES = [
    Source(n=1, title="One", url="https://a.example/1"),
    Source(n=2, title="Two", url="https://b.example/2"),
]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


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


def test_one_huge_section_splits_at_paragraphs_then_hard_without_breaking_links() -> None:
    link = "[[1]](https://a.example/1)"
    para = ("x" * 50 + " ") * 100  # 5,100 chars, no paragraph break inside
    md = "# T\n\n## Only\n\n" + "\n\n".join([para] * 6) + "\n\n" + (f"word {link} " * 2_000)
    chunks = split_report(md, LIMIT)
    assert all(0 < len(c) <= LIMIT for c in chunks)
    assert _squash("".join(chunks)) == _squash(md)
    for c in chunks:  # every link is whole inside one chunk
        assert c.count("[[1]](") == c.count("[[1]](https://a.example/1)")


def test_a_split_inside_a_code_fence_closes_and_reopens_it() -> None:
    code = "\n\n".join(f"line {i} " + "y" * 100 for i in range(200))  # ~21,000 chars
    md = f"# T\n\nIntro.\n\n```python\n{code}\n```\n\nAfter."
    chunks = split_report(md, LIMIT)
    assert len(chunks) >= 2
    for c in chunks:
        assert len(c) <= LIMIT
        assert len(re.findall(r"^```", c, re.MULTILINE)) % 2 == 0
    assert chunks[1].startswith("```python\n")
    assert chunks[-1].rstrip().endswith("After.")


def test_no_empty_chunks() -> None:
    assert split_report("\n\n   \n", LIMIT) == []
    assert all(c.strip() for c in split_report("# T\n\n\n\n## A\n\n\n\n## B\n", LIMIT))


def test_a_byte_budget_counts_cjk_as_three_bytes() -> None:
    section = "## 第{i}节\n\n" + "人工智能在医疗领域的最新发展。" * 300
    md = "# 报告\n\n" + "\n\n".join(section.format(i=i) for i in range(6))
    chunks = split_report(md, 28_000, measure=utf8_size)
    assert len(chunks) >= 2
    assert all(utf8_size(c) <= 28_000 for c in chunks)
    assert all(c.startswith("## 第") for c in chunks[1:])
    assert _squash("".join(chunks)) == _squash(md)
    huge = "字" * 40_000  # no boundary at all: cut by bytes, never inside a character
    parts = split_report(huge, 10_000, measure=utf8_size)
    assert all(utf8_size(p) <= 10_000 for p in parts) and "".join(parts) == huge


def test_a_status_keeps_its_lines_within_its_limit_on_every_platform() -> None:
    from bots.chat.markdown import status_lines
    from bots.feishu.render import progress_card
    from bots.slack.render import progress_text

    status = "1/2th search executed.\n✓ heat  pumps cost\n\n✗ heat pumps noise (its search failed)"
    assert status_lines(status, 1000) == [
        "1/2th search executed.",
        "✓ heat pumps cost",
        "✗ heat pumps noise (its search failed)",
    ]
    assert status_lines(status, 30) == ["1/2th search executed.", "✓ heat…"]  # 22 + 1 + 7
    slack = progress_text("heat pumps", 2, status, requester=None, opener=False)
    assert slack.endswith(
        "1/2th search executed.\n✓ heat pumps cost\n✗ heat pumps noise (its search failed)"
    )
    card = progress_card("heat pumps", 2, status, language="en")
    assert "1/2th search executed.\\n✓ heat pumps cost\\n✗ heat pumps noise" in card
