"""The "What's new since <date>" section of a digest's report.

The writer of a digest's firing is told what the previous firing reported (as data) and which
of its sources no earlier firing found (marked NEW), and asked for a section on what changed.
Whatever the writer does, the finished report has the section: when it is missing, one is
added that lists the new sources.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from core.models import Source
from core.research.prompts import DigestContext
from core.untrusted import as_data
from core.words.wording import Language, pick, sources_heading
from storage import RunRecord

#: How much of the previous report the writer sees (characters).
PREVIOUS_REPORT_CHARS = 4_000


def heading(language: Language, previous_date: str) -> str:
    return pick(language, f"What's new since {previous_date}", f"自 {previous_date} 以来的新内容")


def context(previous: RunRecord, language: Language) -> DigestContext:
    """What the writer is told about the previous firing (its slot's local date)."""
    stored = (previous.platform_context or {}).get("digest_date")
    date = str(stored) if stored else previous.created_at.strftime("%Y-%m-%d")
    report = " ".join((previous.report_markdown or "").split())
    return DigestContext(
        previous_date=date,
        heading=heading(language, date),
        previous_report=as_data(report)[:PREVIOUS_REPORT_CHARS],
    )


def new_numbers(
    sources: Sequence[tuple[int, str]], earlier_urls: Collection[str]
) -> frozenset[int]:
    """The numbers of the sources (``(n, identity)``: its URL, or its title when it has none)
    that no earlier firing found."""
    return frozenset(n for n, identity in sources if identity not in earlier_urls)


def ensure_section(
    markdown: str, digest: DigestContext, sources: Sequence[Source], earlier_urls: Collection[str]
) -> str:
    """The report with its "What's new" section: the writer's, or one listing new sources."""
    if re.search(rf"^#+\s*{re.escape(digest.heading)}", markdown, re.MULTILINE):
        return markdown
    new = [s for s in sources if (s.url or s.title) not in earlier_urls]
    language: Language = "zh" if digest.heading.startswith("自") else "en"
    if new:
        lead = pick(
            language,
            "Sources that earlier digests did not find:",
            "以往摘要没有找到的来源：",
        )
        lines = [lead, ""] + [f"- [{s.n}] {as_data(s.title)}" for s in new]
    else:
        lines = [
            pick(
                language,
                f"No sources that the digest of {digest.previous_date} did not already have.",
                f"没有 {digest.previous_date} 的摘要中未出现过的新来源。",
            )
        ]
    section = f"## {digest.heading}\n\n" + "\n".join(lines) + "\n\n"
    at = markdown.rfind(f"\n## {sources_heading(language)}\n")  # the generated list
    if at < 0:
        return markdown.rstrip() + "\n\n" + section
    return markdown[: at + 1] + section + markdown[at + 1 :]
