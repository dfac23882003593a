"""Citation checking and the rendering-neutral Markdown report.

The writer model sees sources as ``[n] title — url`` (numbered by
:mod:`core.engine.sources`). Whatever it answers, the
report that leaves this module cites only sources that searches returned:
unknown ``[n]`` are dropped, links to URLs no search returned are unlinked,
citations are renumbered in order of first use, and ``## Sources`` is generated
from data. The fixed headings (``## Sources``, ``## Notes on this run``, ...) are in the
language of the topic, as the report is (``## 来源`` in a Chinese one). The answer is
untrusted like the sources: passages that repeat Fathom's own instructions are dropped
(by the writer: :func:`core.research.prompts.drop_instruction_echoes`), platform mentions and
link syntax are made inert, and no web address survives anywhere in the report (notes and
titles included) unless a search returned it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

from core.engine.sources import (
    ATTACHMENT,
    NumberedSource,
    cited_body,
    is_link,
    source_key,
    url_identity,
)
from core.models import Finding, Source
from core.untrusted import as_data, neutralise, remove_urls
from core.words.wording import (
    Language,
    attached_files_heading,
    main_findings_heading,
    notes_heading,
    request_language,
    sources_heading,
    untitled_report,
    written_line,
)

# --- language -------------------------------------------------------------------

_KANA = r"[\u3040-\u30ff]"
_HAN = r"[\u4e00-\u9fff]"
_SCRIPTS: tuple[tuple[str, str], ...] = (
    (r"[\uac00-\ud7af]", "Korean"),
    (_HAN, "Chinese (the same variant, simplified or traditional, as the topic)"),
    (r"[\u0400-\u04ff]", "Russian (or the Cyrillic-script language of the topic)"),
    (r"[\u0600-\u06ff]", "Arabic (or the Arabic-script language of the topic)"),
)


def report_language(topic: str) -> str:
    """A plain instruction naming the language the report must be written in."""
    letters = [ch for ch in topic if ch.isalpha()]
    if letters:

        def share(pattern: str) -> float:
            return len(re.findall(pattern, topic)) / len(letters)

        # Japanese is mostly kanji (Han) with some kana; Chinese never has kana.
        kana = share(_KANA)
        if kana and kana + share(_HAN) >= 0.3:
            return "Japanese"
        for pattern, name in _SCRIPTS:
            if share(pattern) >= 0.3:
                return name
    return "the same language as the topic (English if unclear)"


# --- citation repair --------------------------------------------------------------

#: A citation as :func:`normalise_citations` leaves them (not a link's text).
_CITATION = re.compile(r"\[(\d{1,4})\](?!\()")


@dataclass(frozen=True)
class CheckedReport:
    markdown: str
    sources: list[Source]
    removed_citations: int
    unlinked_urls: int
    #: Each source's number in the writer's answer -> its number in the report (``sources``):
    #: the sources it lists, in order of first citation.
    numbers: dict[int, int] = field(default_factory=dict)


def finalize_report(
    body: str,
    sources: Sequence[NumberedSource],
    topic: str,
    notes: Sequence[str] = (),
    written: date | None = None,
) -> CheckedReport:
    """Repair citations in the writer's Markdown and append the generated sources list, each
    with its publication date when known (its notes and headings in the language of
    ``topic``); ``written``: the date stated under the title (``*Written 2 December 2026.*``).

    Every citation form becomes ``[n]`` (:func:`cited_body`), then citations of no source are
    dropped and the rest renumbered in order of first use."""
    language = request_language(topic)
    by_n = {s.n: s for s in sources}
    order: dict[int, int] = {}  # original n -> new n, in order of first citation
    removed = 0

    def renumber(match: re.Match[str]) -> str:
        nonlocal removed
        original = int(match.group(1))
        if original not in by_n:
            removed += 1
            return ""
        return f"[{order.setdefault(original, len(order) + 1)}]"

    normal = cited_body(body, sources)
    text = _CITATION.sub(renumber, normal.markdown)
    text = re.sub(r"[ \t]+([.,;:!?。，；：])", r"\1", text)  # space left before punctuation
    text = re.sub(r"(?<=\S)[ \t]{2,}", " ", text)  # not indentation
    if not re.search(r"^# ", text, re.MULTILINE):
        text = f"# {_escape_title(as_data(topic)) or untitled_report(language)}\n\n{text}"
    if written is not None:
        text = _date_under_title(text, written_line(language, written))

    if not order:  # nothing cited: every source is listed
        order = {s.n: i for i, s in enumerate(sources, 1)}
    chosen = [(new, by_n[old]) for old, new in sorted(order.items(), key=lambda item: item[1])]
    final = [
        Source(
            n=n,
            title=_escape_title(as_data(s.title)) or s.url,
            url=s.url,
            published=s.published,
            kind=s.kind,
            server=s.server,
        )
        for n, s in chosen
    ]
    listing = "\n".join(
        (f"- [{s.n}] [{s.title}]({s.url})" if is_link(s.url) else f"- [{s.n}] {s.title}")
        + (f" ({s.published})" if s.published else "")
        for s in final
    )
    text = text.rstrip() + notes_section(notes, language)
    heading = f"\n\n## {sources_heading(language)}\n\n"
    markdown = text.rstrip() + (heading + listing + "\n" if final else "\n")
    # Last line of defence, over everything (notes, titles): only the sources' addresses.
    known = [url_identity(s.url) for s in sources if s.url]
    markdown = remove_urls(
        neutralise(markdown), allowed=lambda url: _is_known(url_identity(url), known)
    )
    return CheckedReport(markdown, final, removed, normal.unlinked, order)


def _date_under_title(text: str, line: str) -> str:
    """``text`` with ``line`` as the paragraph right under its first ``# `` heading."""
    match = re.search(r"^# .*$", text, re.MULTILINE)
    if match is None:
        return text
    head, rest = text[: match.end()], text[match.end() :].lstrip("\n")
    return f"{head}\n\n{line}\n\n{rest}" if rest else f"{head}\n\n{line}"


def _is_known(identity: str, known: Sequence[str]) -> bool:
    """A source's address, or the start of one (an address with ``)`` in it is cut there)."""
    return any(k == identity or (identity and k.startswith(identity)) for k in known)


# [a lead-in line] ```markdown  REPORT  [``` [a sign-off line]] (no closing fence: cut short)
_REPORT_FENCE = re.compile(
    r"\A(?:[^\n`#]{1,200}\n\s*)?```(?:markdown|md)[ \t]*\n(.*?)"
    r"(?:\n```[ \t]*(?:\n[^\n`#]{0,200})?)?\s*\Z",
    re.DOTALL | re.IGNORECASE,
)
_PREAMBLE = re.compile(r"\A[^\n#]{1,200}\n\s*(?=# )")
# <tag>...</tag> before the title: a model's reflection or plan in tags no parser knows
# (Reflection-70B's <reflection>); only a pair that ends right before a "# " title.
_TAGGED_PREAMBLE = re.compile(r"\A<([A-Za-z][\w:.-]{0,40})>.*?</\1>\s*(?=# )", re.DOTALL)


def unwrap_report(markdown: str) -> str:
    """The writer's report without its wrappers: a whole report in a ```` ```markdown ````
    (or ``md``) fence is taken out of it (with a one-line lead-in or sign-off around the
    fence, or no closing fence when the answer was cut short), and a preamble before the
    title is dropped: one line ("Sure! Here is the report:"), or a pair of tags around
    anything (the model's own reflection) that ends right before the title. A report that
    merely talks about tags keeps them."""
    text = _TAGGED_PREAMBLE.sub("", markdown.strip(), count=1)
    fenced = _REPORT_FENCE.match(text)
    if fenced is not None:
        text = fenced.group(1).strip()
    return _PREAMBLE.sub("", text, count=1)


def _escape_title(title: str) -> str:
    return title.replace("[", "(").replace("]", ")").replace("\n", " ").strip()


def fallback_body(
    topic: str, findings: Sequence[Finding], sources: Sequence[NumberedSource], intro: str
) -> str:
    """A report without the writer model: the findings, grouped by search, with citations."""
    by_key = {s.key: s.n for s in sources}
    heading = main_findings_heading(request_language(topic))
    lines = [f"# {topic}", "", intro, "", f"## {heading}", ""]
    files = [s for s in sources if s.kind == ATTACHMENT]
    if files:
        lines += [f"### {attached_files_heading(request_language(topic))}", ""]
        lines += [f"- {s.title}: {s.passages[0] if s.passages else ''} [{s.n}]" for s in files]
        lines.append("")
    for finding in findings:
        if not finding.results:
            continue
        lines.append(f"### {finding.topic}")
        lines.append("")
        for result in finding.results:
            n = by_key.get(source_key(result))
            snippet = result.snippet or result.title
            lines.append(f"- {snippet} [{n}]" if n else f"- {snippet}")
        lines.append("")
    return "\n".join(lines)


def notes_section(notes: Sequence[str], language: Language = "en") -> str:
    if not notes:
        return ""
    items = "\n".join(f"- {note}" for note in notes)
    return f"\n\n## {notes_heading(language)}\n\n{items}\n"
