"""The sources a run numbers and cites, as a strategy hands them to its models.

Every strategy numbers the thread's sources the same way (:func:`number_sources`: each
attached file and every distinct result once, in the order they came, a source keeping its
number as the thread grows), shows them to its models as ``[n] title — url`` blocks with
the passages read (:func:`writer_source_blocks`) and reads its models' citations back in one
form, ``[n]`` (:func:`cited_body`). The report (:mod:`core.research.report`) renumbers what
the writer cited; a graph's sub-answers cite these numbers too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from core.claims.citations import NormalisedCitations, normalise_citations
from core.claims.evidence import EvidenceKind
from core.claims.lexical import Evidence
from core.documents.attachments import file_title
from core.documents.extract import estimate_tokens, select, split_passages
from core.models import AttachedFile, Finding, SearchResult, SourceKind

SNIPPET_CHARS_FOR_WRITER = 500
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
#: The page passages the writer sees in all, newest sources first (about 8 rounds' worth).
WRITER_PASSAGE_TOKENS = 12_000
#: What the models see of one attached file, at most, and of all of them: the writer's
#: passages are shared by the files (first) and the pages (the rest), so a request's five files
#: each get their share and the web still gets half.
FILE_PASSAGE_TOKENS = 2_500
FILES_TOKENS = WRITER_PASSAGE_TOKENS // 2
FILE_MIN_TOKENS = 300


@dataclass(frozen=True)
class NumberedSource:
    n: int
    title: str
    url: str
    snippet: str
    topic: str
    #: Passages read from the page itself (empty when it was not read).
    passages: tuple[str, ...] = ()
    #: Its publication date (``YYYY-MM-DD``): the search provider's, else the page's own.
    published: str | None = None
    #: ``web``; ``attachment``: a file attached in the chat (``url``: the platform's link to
    #: it, empty when the platform gives none); ``internal``: a document an MCP server
    #: returned (``url``: its link or URI as the server gave it, any scheme, or empty).
    kind: str = SourceKind.WEB.value
    #: The MCP server of an internal source.
    server: str | None = None
    #: Its identity among the thread's sources (:func:`source_key`).
    key: str = ""
    #: Of a long PDF read in part, which pages (``read pages 1-50 of 311``).
    coverage: str | None = None


def evidence_of(sources: Iterable[NumberedSource]) -> dict[int, Evidence]:
    """What the writer (or a sub-question's answerer) saw of each source, by number: its
    snippet and the passages read, which its claims are checked against, and what they are
    (a web result whose page was not read is its search snippet only)."""
    return {
        s.n: Evidence(
            s.n,
            s.title,
            s.url,
            ((s.snippet,) if s.snippet else ()) + s.passages,
            _evidence_kind(s),
        )
        for s in sources
    }


def _evidence_kind(source: NumberedSource) -> EvidenceKind:
    if source.kind == ATTACHMENT:
        return EvidenceKind.FILE
    if source.kind == INTERNAL:
        return EvidenceKind.INTERNAL
    return EvidenceKind.PAGE if source.passages else EvidenceKind.SNIPPET


def url_identity(url: str) -> str:
    """Comparable form of a URL: lowercase scheme/host, no fragment, no trailing slash."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


ATTACHMENT = SourceKind.ATTACHMENT.value
INTERNAL = SourceKind.INTERNAL.value


def source_key(result: SearchResult) -> str:
    """A result's identity among the thread's sources: its address (compared as
    :func:`url_identity`), or, for an internal document without one, its server and title."""
    if result.url:
        return url_identity(result.url)
    return f"internal:{result.server}:{result.title}"


def internal_title(result: SearchResult) -> str:
    """An internal source's title as the report shows it: ``<title> (<server>)``; a server's
    plain text, titled after the server itself, is just ``<server>``."""
    title = result.title or result.url or "document"
    return title if title == result.server else f"{title} ({result.server})"


def is_link(url: str) -> bool:
    """Whether a source's address is shown as a link (an internal URI of another scheme, such
    as ``jira://PROJ-1``, is not: a chat cannot open it)."""
    return url.lower().startswith(("http://", "https://"))


def number_sources(
    findings: Sequence[Finding], files: Sequence[AttachedFile] = (), query: str = ""
) -> list[NumberedSource]:
    """Number the thread's sources in the order they came: each file attached in the thread
    (with its passages that matter for ``query``) when it was read, and every distinct result
    URL once, when its search found it, with the passages last read from its page and its
    publication date (the first a search gave, else the one its page declares). An internal
    document is a source like a web result, titled ``<title> (<server>)``, with the passages
    its server returned. A source keeps its number as the thread grows (a graph's answers cite
    these numbers)."""
    seen: set[str] = set()
    numbered: list[NumberedSource] = []
    passages = {
        url_identity(page.url): tuple(page.passages)
        for finding in findings
        for page in finding.pages or ()
        if page.passages
    }
    coverages = {
        url_identity(page.url): page.coverage
        for finding in findings
        for page in finding.pages or ()
        if page.passages and page.coverage
    }
    dates: dict[str, str] = {}
    for finding in findings:
        for page in finding.pages or ():
            if page.published and _ISO_DAY.fullmatch(page.published):
                dates[url_identity(page.url)] = page.published
    for finding in reversed(findings):  # a search's date wins over a page's; the first search's
        for result in reversed(finding.results):
            if result.published and _ISO_DAY.fullmatch(result.published):
                dates[url_identity(result.url)] = result.published
    # Each file goes where it was read among the findings (in their order, which is the
    # order they were stored in: a graph's node is stored once its pages are read).
    waiting = sorted(files, key=lambda f: f.findings_before)  # (stable)
    arrivals: list[AttachedFile | Finding] = []
    for i, finding in enumerate(findings):
        while waiting and waiting[0].findings_before <= i:
            arrivals.append(waiting.pop(0))
        arrivals.append(finding)
    arrivals += waiting
    file_budget = max(FILE_MIN_TOKENS, min(FILE_PASSAGE_TOKENS, FILES_TOKENS // max(1, len(files))))
    for item in arrivals:
        if isinstance(item, AttachedFile):
            key = url_identity(item.url) if item.url else f"file:{item.id}"
            if key in seen:
                continue
            seen.add(key)
            numbered.append(
                NumberedSource(
                    n=len(numbered) + 1,
                    title=file_title(item),
                    url=item.url or "",
                    snippet="",
                    topic="",
                    passages=file_passages(item, query, file_budget),
                    kind=ATTACHMENT,
                    key=key,
                    published=item.published
                    if item.published and _ISO_DAY.fullmatch(item.published)
                    else None,
                    coverage=item.coverage,
                )
            )
            continue
        for result in item.results:
            key = source_key(result)
            if key in seen:
                continue
            seen.add(key)
            if result.internal:
                published = result.published
                numbered.append(
                    NumberedSource(
                        n=len(numbered) + 1,
                        title=internal_title(result),
                        url=result.url,
                        snippet=result.snippet,
                        topic=item.topic,
                        passages=tuple(result.passages),
                        published=published
                        if published and _ISO_DAY.fullmatch(published)
                        else None,
                        kind=INTERNAL,
                        server=result.server,
                        key=key,
                    )
                )
                continue
            numbered.append(
                NumberedSource(
                    n=len(numbered) + 1,
                    title=result.title or result.url,
                    url=result.url,
                    snippet=result.snippet,
                    topic=item.topic,
                    passages=passages.get(key, ()),
                    published=dates.get(key),
                    key=key,
                    coverage=coverages.get(key),
                )
            )
    return numbered


def file_passages(
    file: AttachedFile, query: str, budget_tokens: int = FILE_PASSAGE_TOKENS
) -> tuple[str, ...]:
    """What the models see of an attached file: its opening passage (what it is), then the
    passages that matter most for ``query`` (BM25), within ``budget_tokens``, in its order."""
    pieces = split_passages(file.text)
    if not pieces:
        return ()
    opening = select(pieces[:1], pieces[0], budget_tokens)
    spent = sum(estimate_tokens(p.text) for p in opening)
    rest = select(pieces[1:], query or file.name, budget_tokens - spent)
    return tuple(p.text for p in opening) + tuple(p.text for p in rest)


#: What the planners see of each attached file.
FILE_DIGEST_CHARS = 400


def files_digest(files: Sequence[AttachedFile], query: str) -> list[str]:
    """One line per attached file for the planners: its name, kind and size, and the start
    of its passages that matter for ``query`` (neutralised like every passage)."""
    lines = []
    for file in files:
        pages = f", {file.pages_read} pages read" if file.pages_read else ""
        text = " ".join(" ".join(file_passages(file, query, 600)).split())
        if len(text) > FILE_DIGEST_CHARS:
            text = text[: FILE_DIGEST_CHARS - 1] + "…"
        lines.append(f"{file_title(file)} ({file.kind}{pages}): {text}".rstrip(": "))
    return lines


def writer_window(
    sources: Sequence[NumberedSource], size: int, cited: frozenset[int] = frozenset()
) -> list[NumberedSource]:
    """At most ``size`` sources for the writer: the attached files and those in ``cited``
    (the graph's answers cite them, so the writer must see them), then the newest; in their
    numbered order."""
    keep = {s.n for s in sources if s.n in cited or s.kind == ATTACHMENT}
    for s in reversed(sources):
        if len(keep) >= size:
            break
        keep.add(s.n)
    return [s for s in sources if s.n in keep][-size:]


def passages_kept(
    sources: Sequence[NumberedSource], passage_tokens: int = WRITER_PASSAGE_TOKENS
) -> dict[int, tuple[str, ...]]:
    """The passages the writer is shown, by source number, within ``passage_tokens``: the
    attached files' first, then the newest sources' (see :func:`writer_source_blocks`)."""
    kept: dict[int, tuple[str, ...]] = {}
    spent = 0
    files = [s for s in reversed(sources) if s.kind == ATTACHMENT]  # the newest file first
    for s in files + [s for s in reversed(sources) if s.kind != ATTACHMENT]:
        cost = sum(estimate_tokens(p) for p in s.passages)
        if s.passages and spent + cost <= passage_tokens:
            kept[s.n] = s.passages
            spent += cost
    return kept


def writer_source_blocks(
    sources: Sequence[NumberedSource],
    new: frozenset[int] = frozenset(),
    passage_tokens: int = WRITER_PASSAGE_TOKENS,
) -> list[str]:
    """``[n] title — url`` (with `` (published 2026-11-30)`` when its date is known, and
    `` (read pages 1-50 of 311)`` of a long PDF read in part), the snippet and the passages
    read from the page of each source (of an attached file, its passages); sources in
    ``new`` (a digest's sources that no earlier firing found) are marked ``NEW``.

    The passages of all sources stay within ``passage_tokens``: the attached files' first
    (the people asking gave them), then, when a thread has read more, the newest sources keep
    theirs (a follow-up's own reading comes first)."""
    kept = passages_kept(sources, passage_tokens)
    blocks = []
    for s in sources:
        mark = " NEW" if s.n in new else ""
        dated = f" (published {s.published})" if s.published else ""
        dated += f" ({s.coverage})" if s.coverage else ""
        if s.kind == ATTACHMENT:
            link = s.url or "a file attached in the chat"
            block = f"[{s.n}]{mark} {s.title} — {link}{dated}"
            block += "\n    (attached in the chat by the people asking)"
            label = "From the file:"
        elif s.kind == INTERNAL:
            link = s.url or "an internal document"
            snippet = s.snippet[:SNIPPET_CHARS_FOR_WRITER] if not s.passages else ""
            block = f"[{s.n}]{mark} {s.title} — {link}{dated}"
            block += f"\n    (internal source {s.server}, search: {s.topic}) {snippet}"
            label = "From the document:"
        else:
            snippet = s.snippet[:SNIPPET_CHARS_FOR_WRITER]
            block = f"[{s.n}]{mark} {s.title} — {s.url}{dated}\n    (search: {s.topic}) {snippet}"
            label = "From the page:"
        block = block.rstrip()
        if s.n in kept:
            quoted = (p.replace("\n", "\n    > ") for p in kept[s.n])  # (a code block's lines)
            block += f"\n    {label}" + "".join(f"\n    > {p}" for p in quoted)
        blocks.append(block)
    return blocks


# --- citations --------------------------------------------------------------


def cited_body(body: str, sources: Sequence[NumberedSource]) -> NormalisedCitations:
    """The writer's ``body`` citing in one form, ``[n]`` (``n``: the source's number), whatever
    form it cited in (:func:`core.claims.citations.normalise_citations`): what the claim check
    reads and :func:`core.research.report.finalize_report` renumbers."""
    by_url = {url_identity(s.url): s.n for s in sources if s.url}
    return normalise_citations(body, lambda url: by_url.get(url_identity(url)))
