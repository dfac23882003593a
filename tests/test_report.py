"""Citation repair, renumbering and the generated sources list of the final report."""

from __future__ import annotations

import re

import pytest

from core.engine.sources import NumberedSource, number_sources
from core.models import Finding, SearchResult, Source
from core.research.prompts import DigestContext
from core.research.report import fallback_body, finalize_report, report_language, unwrap_report
from core.research.whats_new import ensure_section, heading

URLS = [f"https://example.org/doc/{i}" for i in range(1, 6)]


def sources(count: int = 5) -> list[NumberedSource]:
    return [
        NumberedSource(n=i, title=f"Doc {i}", url=URLS[i - 1], snippet=f"s{i}", topic="t")
        for i in range(1, count + 1)
    ]


def body_without_sources(markdown: str) -> str:
    return markdown.split("\n## Sources\n", 1)[0]


def listed(markdown: str) -> list[tuple[int, str]]:
    """``(n, url)`` of every line of the generated ``## Sources`` section."""
    section = markdown.split("\n## Sources\n", 1)[1]
    return [
        (int(n), url) for n, url in re.findall(r"^- \[(\d+)\] \[[^\]]*\]\((\S+)\)$", section, re.M)
    ]


def cited(markdown: str) -> list[int]:
    return [int(n) for n in re.findall(r"\[(\d+)\](?!\()", body_without_sources(markdown))]


def test_citations_are_renumbered_in_order_of_first_use() -> None:
    report = finalize_report("# T\n\nA [4]. B [2]. C [4][5].", sources(), "T")
    assert body_without_sources(report.markdown).strip() == "# T\n\nA [1]. B [2]. C [1][3]."
    assert listed(report.markdown) == [(1, URLS[3]), (2, URLS[1]), (3, URLS[4])]
    assert [s.n for s in report.sources] == [1, 2, 3]
    assert [s.url for s in report.sources] == [URLS[3], URLS[1], URLS[4]]


def test_ranges_and_lists_are_expanded() -> None:
    report = finalize_report("# T\n\nA [1-3]. B [2, 4]. C [5;1].", sources(), "T")
    body = body_without_sources(report.markdown)
    assert "A [1][2][3]. B [2][4]. C [5][1]." in body
    assert len(report.sources) == 5


def test_unknown_numbers_are_dropped() -> None:
    report = finalize_report("# T\n\nA [9]. B [2][7]. C [1, 8].", sources(3), "T")
    body = body_without_sources(report.markdown)
    assert "[9]" not in body and "[7]" not in body and "[8]" not in body
    assert "A. B [1]. C [2]." in body
    assert report.removed_citations == 3
    assert listed(report.markdown) == [(1, URLS[1]), (2, URLS[0])]


def test_link_to_found_url_becomes_a_citation() -> None:
    text = "# T\n\nSee [the study](https://example.org/doc/3/) and [1]."
    report = finalize_report(text, sources(), "T")
    body = body_without_sources(report.markdown)
    assert "the study [1] and [2]." in body
    assert "](" not in body
    # The link was the first use of source 3, so it is [1]; the old [1] became [2].
    assert listed(report.markdown) == [(1, URLS[2]), (2, URLS[0])]


def test_links_to_found_urls_keep_their_own_source_when_renumbered() -> None:
    """A citation made from a link must not be renumbered a second time."""
    text = "# T\n\nA [x](https://example.org/doc/3). B [y](https://example.org/doc/1). C [3]."
    report = finalize_report(text, sources(), "T")
    by_n = {s.n: s.url for s in report.sources}
    body = body_without_sources(report.markdown)
    x, y, c = (int(n) for n in re.findall(r"\[(\d+)\]", body))
    assert by_n[x] == URLS[2] and by_n[y] == URLS[0] and by_n[c] == URLS[2]
    assert sorted(by_n) == list(range(1, len(by_n) + 1))


def test_numeric_link_text_is_just_a_citation() -> None:
    text = "# T\n\nClaim [3](https://example.org/doc/3). Other [9](https://evil.example/x)."
    report = finalize_report(text, sources(), "T")
    body = body_without_sources(report.markdown)
    assert "Claim [1]. Other." in body
    assert "evil" not in report.markdown
    assert [s.url for s in report.sources] == [URLS[2]]


def test_link_to_unknown_url_is_unlinked() -> None:
    text = "# T\n\nRead [this blog](https://evil.example/x?a=1) now [1]."
    report = finalize_report(text, sources(), "T")
    assert "evil.example" not in report.markdown
    assert "Read this blog now [1]." in report.markdown
    assert report.unlinked_urls == 1


@pytest.mark.parametrize(
    "text",
    [
        "Also see https://evil.example/x for more [1].",
        "Also see (https://evil.example/x) for more [1].",
        "Also see <https://evil.example/x> for more [1].",
        "Also see ![chart](https://evil.example/x.png) for more [1].",
    ],
)
def test_unknown_urls_never_survive(text: str) -> None:
    report = finalize_report(f"# T\n\n{text}", sources(), "T")
    assert "evil.example" not in report.markdown
    assert "for more [1]." in report.markdown
    assert "()" not in report.markdown and "<>" not in report.markdown


def test_bare_known_url_becomes_a_citation() -> None:
    report = finalize_report("# T\n\nAs https://example.org/doc/2 says.", sources(), "T")
    assert "As [1] says." in report.markdown
    assert [s.url for s in report.sources] == [URLS[1]]


@pytest.mark.parametrize(
    "heading", ["## References", "## Sources", "### 参考资料", "# Bibliography", "## 5. Sources:"]
)
def test_model_written_references_are_stripped(heading: str) -> None:
    text = (
        "# T\n\n## Findings\n\nA [1].\n\n"
        f"{heading}\n\n1. [Doc 1](https://example.org/doc/1)\n2. https://evil.example/x\n"
    )
    if not heading.startswith("# "):
        text += "\n## Open questions\n\nStill open.\n"
    report = finalize_report(text, sources(), "T")
    if heading != "## Sources":
        assert heading not in report.markdown
    assert report.markdown.count("## Sources") == 1
    assert "evil" not in report.markdown
    assert listed(report.markdown) == [(1, URLS[0])]
    if not heading.startswith("# "):
        assert "## Open questions\n\nStill open." in report.markdown


def test_theme_headings_starting_with_source_words_are_kept() -> None:
    text = "# T\n\n### Sources of uncertainty\n\nMeasurement error [2].\n\n## Open questions\n"
    report = finalize_report(text, sources(), "T")
    assert "### Sources of uncertainty\n\nMeasurement error [1]." in report.markdown


def test_title_added_when_missing() -> None:
    report = finalize_report("## Summary\n\nA [1].", sources(), "Quantum sensors")
    assert report.markdown.startswith("# Quantum sensors\n\n## Summary")
    kept = finalize_report("# My title\n\nA [1].", sources(), "Quantum sensors")
    assert kept.markdown.startswith("# My title\n")
    assert "# Quantum sensors" not in kept.markdown


def test_no_citations_lists_every_source() -> None:
    report = finalize_report("# T\n\nNothing cited here.", sources(), "T")
    assert listed(report.markdown) == [(i, URLS[i - 1]) for i in range(1, 6)]


def test_no_citations_numbers_a_truncated_source_list_from_one() -> None:
    """The writer may see only the most recent sources (numbered 4, 5): list them as 1, 2."""
    report = finalize_report("# T\n\nNothing cited.", sources()[3:], "T")
    assert listed(report.markdown) == [(1, URLS[3]), (2, URLS[4])]


def test_notes_section_is_placed_before_sources() -> None:
    report = finalize_report("# T\n\nA [1].", sources(), "T", ["The search for x failed."])
    notes_at = report.markdown.index("## Notes on this run")
    assert notes_at < report.markdown.index("## Sources")
    assert "- The search for x failed." in report.markdown
    assert "## Notes on this run" not in finalize_report("# T\n\nA [1].", sources(), "T").markdown


def test_no_sources_means_no_sources_section() -> None:
    report = finalize_report("# T\n\nA [1].", [], "T")
    assert "## Sources" not in report.markdown
    assert "[1]" not in report.markdown
    assert report.sources == []


def test_indentation_and_code_survive_cleanup() -> None:
    text = "# T\n\n- item [1]\n  - nested [2]\n\n    code  block()\n\nCall `f()` and ()."
    report = finalize_report(text, sources(), "T")
    assert "\n  - nested [2]" in report.markdown
    assert "\n    code block()" in report.markdown
    assert "Call `f()` and." in report.markdown


def test_number_sources_dedupes_urls_across_findings() -> None:
    findings = [
        Finding(
            topic="a",
            results=[
                SearchResult(title="One", url="https://x.org/1"),
                SearchResult(title="Two", url="https://x.org/2"),
            ],
        ),
        Finding(topic="b", error="HTTP 500"),
        Finding(
            topic="c",
            results=[
                SearchResult(title="One again", url="HTTPS://X.org/1/#frag"),
                SearchResult(title="Three", url="https://x.org/3"),
            ],
        ),
    ]
    numbered = number_sources(findings)
    assert [(s.n, s.url, s.topic) for s in numbered] == [
        (1, "https://x.org/1", "a"),
        (2, "https://x.org/2", "a"),
        (3, "https://x.org/3", "c"),
    ]
    body = fallback_body("T", findings, numbered, "> intro")
    assert "### a" in body and "### c" in body and "### b" not in body
    assert body.count("[1]") == 2  # the repeated URL cites the same source


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("量子计算的最新进展", "Chinese"),
        ("人工智能芯片 market 2024", "Chinese"),
        ("日本の半導体産業の将来", "Japanese"),
        ("生成AIの規制動向", "Japanese"),
        ("한국 반도체 산업", "Korean"),
        ("Quantum computing in 2024", "the same language as the topic"),
        ("2024", "the same language as the topic"),
    ],
)
def test_report_language(topic: str, expected: str) -> None:
    assert report_language(topic).startswith(expected)


# --- the fixed headings follow the report's language -------------------------------------------

ZH_TOPIC = "量子计算的最新进展"


def test_a_chinese_report_has_chinese_headings() -> None:
    body = "## 主要结论\n\n进展很快 [1]。\n\n## 来源\n\n- [1] 模型自己写的列表"
    report = finalize_report(body, sources(2), ZH_TOPIC, ["对 x 的搜索失败。"])
    markdown = report.markdown
    assert markdown.startswith(f"# {ZH_TOPIC}\n")
    assert markdown.count("\n## 来源\n") == 1 and "模型自己写的列表" not in markdown
    assert markdown.index("\n## 本次运行说明\n") < markdown.index("\n## 来源\n")
    assert listed(markdown.replace("\n## 来源\n", "\n## Sources\n")) == [(1, URLS[0])]
    assert "Sources" not in markdown and "Notes on this run" not in markdown


def test_an_english_report_keeps_english_headings() -> None:
    markdown = finalize_report("# T\n\nA [1].", sources(1), "solar power", ["A note."]).markdown
    assert "\n## Notes on this run\n" in markdown and "\n## Sources\n" in markdown
    assert "来源" not in markdown


def test_the_findings_only_report_of_a_chinese_topic_is_headed_in_chinese() -> None:
    findings = [Finding(topic="成本", results=[SearchResult(title="One", url=URLS[0])])]
    body = fallback_body(ZH_TOPIC, findings, number_sources(findings), "> 说明")
    assert "\n## 主要发现\n" in body and "Main findings" not in body


def test_the_whats_new_section_goes_before_the_chinese_sources() -> None:
    digest = DigestContext("2024-05-01", heading("zh", "2024-05-01"), previous_report="")
    report = finalize_report("# 标题\n\n内容 [1]。", sources(1), ZH_TOPIC).markdown
    with_section = ensure_section(report, digest, [Source(n=1, title="Doc 1", url=URLS[0])], ())
    assert with_section.index("## 自 2024-05-01 以来的新内容") < with_section.index("\n## 来源\n")
    assert with_section.rstrip().endswith(f"- [1] [Doc 1]({URLS[0]})")


def test_a_fenced_report_cut_short_loses_its_opening_fence() -> None:
    """A report in a ```` ```markdown ```` fence that stopped at the output limit has no
    closing fence; the opening one still goes."""
    assert unwrap_report("```markdown\n# Batteries\n\nThey impro") == "# Batteries\n\nThey impro"


def test_what_is_not_a_wrapper_is_kept() -> None:
    """Text before the title that is more than one line, and a fence that is not Markdown,
    belong to the report."""
    two_lines = "First line of an intro\nand its second line.\n\n# Title\n\nBody."
    assert unwrap_report(two_lines) == two_lines
    code = "```python\nprint(1)\n```"
    assert unwrap_report(code) == code
    plain = "# Title\n\n```md\ninner\n```\n\nMore."
    assert unwrap_report(plain) == plain
