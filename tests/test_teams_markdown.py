"""A report as each Teams client renders a Markdown text message.

Microsoft's "Format your bot messages" (MicrosoftDocs/msteams-docs,
``msteams-platform/bots/how-to/format-your-bot-messages.md``, "Support by individual
platform > Text-only messages"): headers (levels 1-3) and horizontal rules are rendered on
none of desktop, iOS and Android; unordered and ordered lists on desktop only; bold, italic,
preformatted text, blockquotes and hyperlinks on all three. Each client is modelled here by
markdown-it's CommonMark with the rules of the blocks it does not render turned off (the
block is then read as plain paragraph text, as a client that does not know it shows it).
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from bots.teams.markdown import BULLETS, for_every_client
from bots.teams.render import report_parts
from core.models import Source

#: What no Teams client renders in a text message.
NOWHERE = ["heading", "lheading", "hr"]
DESKTOP = MarkdownIt("commonmark").disable(NOWHERE)
MOBILE = MarkdownIt("commonmark").disable([*NOWHERE, "list"])  # iOS and Android

SOURCES = [
    Source(n=1, title="Heat pump field trial", url="https://a.example/trial"),
    Source(n=2, title="Grid study", url="https://b.example/grid"),
]
#: A report as the writer and core.research.report shape it: a title, the date line,
#: sections, lists (one nested, one numbered), a table, code, and the generated sources list.
REPORT = """# Heat pumps in cold climates

*Written 2026-12-07.*

## Executive summary

Heat pumps keep working well below freezing [1].

## Main findings

- Seasonal efficiency stays above 2.5 [1].
  - Defrost cycles cost about 10 % [1].
- Grids need reinforcement in some areas [2].

Steps for installers:

1. Size the unit for the design temperature.
2. Check the defrost settings.

| Climate | SCOP |
|---|---|
| Oslo | 2.8 |

```text
- a line in code, not an item
# nor a heading
```

---

## Sources

- [1] [Heat pump field trial](https://a.example/trial)
- [2] [Grid study](https://b.example/grid)
"""


def _paragraphs(html: str) -> list[str]:
    """The text of each ``<p>`` (tags removed, spaces collapsed)."""
    found = re.findall(r"<p>(.*?)</p>", html, re.DOTALL)
    return [" ".join(re.sub(r"<[^>]+>", "", p).split()) for p in found]


def _report_text() -> str:
    """The report's parts as Fathom posts them (no votes), one after the other."""
    parts = report_parts(REPORT, SOURCES, (), "en")
    return "\n\n".join(str(p.activity["text"]) for p in parts)


def test_on_ios_and_android_headings_are_bold_and_every_item_is_a_line_of_its_own() -> None:
    html = MOBILE.render(_report_text())
    assert "#" not in re.sub(r"<pre>.*?</pre>", "", html, flags=re.DOTALL)
    shown = _paragraphs(html)
    for heading in ("Heat pumps in cold climates", "Executive summary", "Main findings"):
        assert f"<strong>{heading}</strong>" in html and heading in shown
    items = [p for p in shown if p.startswith((*BULLETS, "1.", "2."))]
    assert items == [
        "• Seasonal efficiency stays above 2.5 [1].",
        "◦ Defrost cycles cost about 10 % [1].",
        "• Grids need reinforcement in some areas [2].",
        "1. Size the unit for the design temperature.",
        "2. Check the defrost settings.",
        "• Climate: Oslo; SCOP: 2.8",
        "• [1] Heat pump field trial",
        "• [2] Grid study",
    ]
    assert "---" not in html and "<hr" not in html  # the rule is dropped, not shown as dashes
    # Code is preformatted on every client, its lines as written.
    assert "- a line in code, not an item\n# nor a heading" in html
    links = re.findall(r'href="([^"]*)"', html)
    assert set(links) == {"https://a.example/trial", "https://b.example/grid"}


def test_without_the_rewrite_a_phone_shows_raw_headings_and_runs_items_together() -> None:
    """What the rewrite is for: the same report as Teams renders it on iOS and Android when
    sent as written."""
    shown = _paragraphs(MOBILE.render(REPORT))
    assert "# Heat pumps in cold climates" in shown
    assert any("Seasonal efficiency" in p and "Grids need" in p for p in shown)


def test_on_desktop_numbered_items_are_still_a_list_and_nothing_is_a_raw_heading() -> None:
    html = DESKTOP.render(_report_text())
    ordered = re.findall(r"<ol>(.*?)</ol>", html, re.DOTALL)
    assert len(ordered) == 1 and ordered[0].count("<li>") == 2
    assert "<ul>" not in html  # bullets are paragraphs, the same on every client
    assert not re.search(r"<p>#", html)


def test_each_item_and_heading_is_a_paragraph_and_text_inside_blocks_is_unchanged() -> None:
    text = for_every_client(
        "Intro line one\nline two\n\n### A *deep* heading\n\nSetext\n===\n\n"
        "+ one\n  continued\n\n  second paragraph of one\n+ two\n\n[x]: https://a.example/x\n"
    )
    assert text.split("\n\n") == [
        "Intro line one\nline two",
        "**A *deep* heading**",
        "**Setext**",
        "• one\ncontinued",
        "second paragraph of one",
        "• two",
        "[x]: https://a.example/x",
    ]


def test_a_long_list_split_into_parts_stays_under_the_budget() -> None:
    """An item per paragraph makes a part longer than its Markdown: a part that outgrows the
    budget is cut again, at paragraphs."""
    from bots.teams.render import PART_BUDGET

    items = "".join(f"- item {n} with a few words [1]\n" for n in range(3_000))
    parts = report_parts("# Long\n\n" + items, SOURCES[:1], (), "en")
    sizes = [len(str(p.activity["text"]).encode()) for p in parts]
    assert len(parts) > 1 and max(sizes) < PART_BUDGET
    joined = "\n\n".join(p.activity["text"] for p in parts)
    assert joined.count("• item ") == 3_000
