"""A long report as one document (a Slack canvas, a Feishu cloud document) with a summary in
the thread, for every platform that makes documents (issue 56).

:class:`~bots.chat.delivery.ChatDelivery` turns a report whose parts would be at least
``FATHOM_REPORT_DOCUMENT_PARTS`` (default 2: more than one message) into a
:class:`DocumentStep` followed by the poster's summary. The step creates the document
(``ThreadPoster.create_document``) and records it on the run before anything else is posted,
so a resumed delivery, on any replica, finds it and never creates a second one; a platform
that refuses documents (:class:`DocumentRefused`: a missing scope, a plan without them, a
tenant policy) is recorded too, and the report goes as the platform's usual parts, once.

What a document holds is :class:`DocumentContent`, the same on every platform: the report as
the thread would get it (its citations, its notes) without its generated sources list, which
each platform lists its own way from the sources and, under each source, up to two quotes of
its own text that supported the claims citing it (:func:`core.claims.quotes.source_quotes`).
Quotes are the sources' text: made inert here (no mention, no link, no address) before any
platform renders them.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from core.claims.quotes import source_quotes
from core.models import Source
from core.research.outcome import RunOutcome
from core.untrusted import as_data
from core.values import ReportDocument, ThreadKey
from core.words.wording import Language, sources_heading

#: The longest executive summary the thread's summary message shows (characters).
SUMMARY_CHARS = 1500
_TITLE = re.compile(r"^#[ \t]+(.+)$", re.MULTILINE)
_SECTION = re.compile(r"^##[ \t]+.*$", re.MULTILINE)
#: The generated sources list's heading, in either language of the report.
_SOURCES = re.compile(
    rf"^##[ \t]+(?:{'|'.join(re.escape(sources_heading(lang)) for lang in ('en', 'zh'))})[ \t]*$",
    re.MULTILINE,
)


class DocumentRefused(Exception):
    """The platform refuses documents for good (a missing scope, a plan without them, a
    tenant policy): the report goes as the usual parts. ``first``: False when the poster
    already knew (a refusal it remembers), so the delivery does not log it again."""

    def __init__(self, reason: str, *, first: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.first = first


@dataclass(frozen=True)
class DocumentContent:
    """What a report's document holds, platform-neutral Markdown (each platform renders it
    its own safe way), and what the thread's summary shows."""

    title: str
    #: The report: its title, citations ``[n]``, sections and notes, without its generated
    #: sources list (each platform lists :attr:`sources` with their :attr:`quotes`).
    markdown: str
    #: The report's first section (its executive summary), at most :data:`SUMMARY_CHARS`.
    summary: str
    #: How the report's cited claims held (the claim-check line); None: not checked.
    claims_line: str | None
    language: Language
    sources: list[Source] = field(default_factory=list)
    #: Source number -> the quotes shown under it (inert text, not Markdown).
    quotes: dict[int, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class DocumentStep:
    """The report part that creates the run's document (or records that the platform
    refused it); what follows it depends on what it recorded."""

    content: DocumentContent


def report_title(markdown: str, fallback: str) -> str:
    """The report's ``# Title`` (its text, inert), or ``fallback``."""
    match = _TITLE.search(markdown)
    title = as_data(match.group(1)) if match else ""
    return title or as_data(fallback) or "Fathom"


def executive_summary(markdown: str, limit: int = SUMMARY_CHARS) -> str:
    """The body of the report's first ``##`` section (the writer's executive summary), cut at
    a paragraph (or, for one long paragraph, a word) to ``limit`` characters."""
    sections = list(_SECTION.finditer(markdown))
    if not sections:
        body = _TITLE.sub("", markdown, count=1)
    else:
        end = sections[1].start() if len(sections) > 1 else len(markdown)
        body = markdown[sections[0].end() : end]
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", body) if p.strip()]
    kept: list[str] = []
    size = 0
    for paragraph in paragraphs:
        if size + len(paragraph) > limit:
            if not kept:
                cut = paragraph[: limit - 1]
                cut = cut.rsplit(" ", 1)[0] if " " in cut[limit // 2 :] else cut
                kept.append(cut.rstrip() + "…")
            break
        kept.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(kept)


def without_sources(markdown: str) -> str:
    """The report without its generated sources list (its last ``## Sources`` or ``## 来源``
    heading to the end)."""
    found = list(_SOURCES.finditer(markdown))
    return markdown[: found[-1].start()].rstrip() + "\n" if found else markdown


def document_content(outcome: RunOutcome, language: Language) -> DocumentContent:
    """What the document of ``outcome``'s report holds."""
    markdown = outcome.report_markdown or ""
    quotes = {
        n: [text for text in (as_data(q) for q in found) if text]
        for n, found in source_quotes(outcome.claims).items()
    }
    return DocumentContent(
        title=report_title(markdown, outcome.topic),
        markdown=without_sources(markdown),
        summary=executive_summary(markdown),
        claims_line=outcome.claims.note(language) if outcome.claims is not None else None,
        language=language,
        sources=list(outcome.sources),
        quotes=quotes,
    )


@dataclass(frozen=True)
class ReportDocuments:
    """How a delivery makes a long report a document: when its usual parts would be at least
    ``min_parts``; ``discard`` deletes a document that no run keeps (one created by a
    delivery that found another's recorded first)."""

    #: What the platform makes (``canvas``, ``docx``).
    kind: str
    min_parts: int
    discard: Callable[[ThreadKey, ReportDocument], Awaitable[None]] | None = None
    #: Transient failures of the document step before the report goes as its usual parts.
    tries: int = 3
