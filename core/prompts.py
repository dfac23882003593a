"""Every prompt Fathom sends, as named templates.

Templates are plain ``str.format`` strings; the functions below fill them so
callers never assemble prompt text themselves. Keep the marker words the fakes
and tests rely on: the planner prompt contains ``nextSearchTopic`` and a
``Topic:`` line; the writer prompt lists sources as ``[n] title — url``.
"""

from __future__ import annotations

from collections.abc import Sequence

PLANNER_SYSTEM = """\
You are the research planner of a deep-research assistant. You decide, one step at a time, \
which web search would add the most to what is already known about the user's topic.
Rules:
- Propose exactly one search query that is short (at most 12 words), specific, and different \
from every topic already searched (not a rephrasing of one).
- Write the query in the language that will find the best sources for the topic.
- Stop (shouldContinue false) when the findings already answer the topic well or further \
searching is unlikely to add anything.
- Answer with one JSON object and nothing else:
  {"nextSearchTopic": "<query or null>", "shouldContinue": <true|false>}"""

PLANNER_USER = """\
Topic: {topic}

Search round {round} of at most {depth}.

Topics already searched:
{topics}

Findings so far (titles and snippets):
{findings}

Answer with the JSON object {{"nextSearchTopic": ..., "shouldContinue": ...}} only."""

PLANNER_DUPLICATE = """\
"{proposed}" was already searched (or is nearly the same as "{existing}"). Propose a \
clearly different search topic, or stop. Answer with the JSON object only."""

WRITER_SYSTEM = """\
You are a meticulous research analyst. You write a research report in Markdown using ONLY \
the numbered sources given to you. Every factual claim cites its source(s) with the number \
in square brackets, like [1] or [2][3]. Never invent sources, URLs, numbers or quotes; if \
the sources do not cover something, say so under the open questions."""

WRITER_USER = """\
Write a research report on this topic:
Topic: {topic}

Write the whole report in {language}.

Structure (Markdown):
# <a concise title>
## Executive summary
(3-5 sentences)
## Main findings
(grouped by theme, one ### heading per theme, claims cited like [n])
## Conclusions and recommendations
## Open questions and uncertainties
Do NOT write a sources or references section: it is added automatically from the numbers \
you cite.
{notes}
Searched topics:
{topics}

Sources (cite by number):
{sources}"""

WRITER_NOTES = """\
Known limitations of this research (mention them under open questions):
{notes}
"""

FALLBACK_REPORT_INTRO = (
    "> The report writer was unavailable ({reason}), so this report lists the collected "
    "findings without analysis."
)

EMPTY_FINDINGS = "(none yet)"


def _bullets(items: Sequence[str], empty: str = EMPTY_FINDINGS) -> str:
    return "\n".join(f"- {item}" for item in items) if items else empty


def planner_messages(
    *,
    topic: str,
    round_number: int,
    depth: int,
    topics: Sequence[str],
    findings_digest: Sequence[str],
) -> list[dict[str, str]]:
    """The planner's question for one round."""
    user = PLANNER_USER.format(
        topic=topic,
        round=round_number,
        depth=depth,
        topics=_bullets(topics),
        findings=_bullets(findings_digest),
    )
    return [{"role": "system", "content": PLANNER_SYSTEM}, {"role": "user", "content": user}]


def planner_duplicate_message(proposed: str, existing: str) -> dict[str, str]:
    return {
        "role": "user",
        "content": PLANNER_DUPLICATE.format(proposed=proposed, existing=existing),
    }


def writer_messages(
    *,
    topic: str,
    language: str,
    topics: Sequence[str],
    sources: Sequence[str],
    notes: Sequence[str],
) -> list[dict[str, str]]:
    """The writer's request; ``sources`` are preformatted ``[n] title — url`` blocks."""
    user = WRITER_USER.format(
        topic=topic,
        language=language,
        topics=_bullets(topics),
        sources="\n\n".join(sources) if sources else EMPTY_FINDINGS,
        notes=WRITER_NOTES.format(notes=_bullets(notes)) if notes else "",
    )
    return [{"role": "system", "content": WRITER_SYSTEM}, {"role": "user", "content": user}]
