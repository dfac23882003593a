"""The steps both strategies take: searching a topic and reading its best result pages.

A run never fails because of either: a failed search gives a finding that says why, and pages
that cannot be read leave the snippets (both noted for the report).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from core.engine.progress import search_executed_text
from core.engine.state import RunState
from core.models import Finding, PageExcerpt, SearchResult
from core.pages.reader import PageReader, RoundReading
from core.search import SearchError, SearchProvider
from core.search.base import NothingFound, SearchTimeout
from core.words import note_words
from core.words.reasons import Reason
from core.words.wording import searching_words

# The logger these lines were always written under (they began in the iterative strategy), so
# that log queries keep finding them.
log = logging.getLogger("core.engine.iterative")


def searching_text(state: RunState, topic: str) -> str:
    """Keeps the last ``i/depth th search executed.`` visible while the next search runs.

    Platforms coalesce edits of the progress message, so every status after the i-th
    search repeats its line; whichever edit lands, the count is shown.
    """
    done = state.rounds_done
    prefix = f"{search_executed_text(done, state.depth)} " if done else ""
    return f"{prefix}{searching_words(state.language, topic)}"


class PageReading:
    """The page reading of findings, running in the background until :meth:`attach`."""

    def __init__(self, reader: PageReader, topic: str, findings: list[Finding]) -> None:
        self._findings = findings
        # Only web results' pages: an internal document's text is what its server returned
        # (page reading never fetches an internal address).
        addresses = [[r.url for r in f.results if not r.internal] for f in findings]
        #: How many pages it reads at most (the reader's best pages of each finding).
        self.pages = sum(min(reader.pages, len(set(urls))) for urls in addresses)
        self._tasks = [
            asyncio.create_task(reader.read(urls, f"{topic} {finding.topic}"))
            for finding, urls in zip(findings, addresses, strict=True)
        ]

    async def attach(self, state: RunState) -> None:
        """Wait for the pages and keep their passages in the findings (and count them)."""
        for finding, task in zip(self._findings, self._tasks, strict=True):
            try:
                reading = await task
            except Exception as exc:  # reading is a bonus: a run never fails because of it
                log.warning("reading the pages of %r failed", finding.topic, exc_info=True)
                reading = RoundReading()
                state.note(
                    note_words.pages_unread_words(state.language, finding.topic, type(exc).__name__)
                )
            finding.pages = [
                PageExcerpt(
                    url=p.url, passages=p.passages, published=p.published, coverage=p.coverage
                )
                for p in reading.pages
            ]
            language = state.language
            for page in reading.pages:
                if page.coverage:
                    name = _document_name(page.url) or note_words.a_page(language)
                    state.note(note_words.page_coverage_words(language, name, page.coverage))
            state.usage.pages_read += reading.read
            state.usage.pages_skipped += len(reading.skipped)
            if reading.skipped:
                skipped = [
                    (_host(s.url) or note_words.a_page(language), s.reason) for s in reading.skipped
                ]
                state.note(note_words.pages_left_out_words(language, finding.topic, skipped))

    async def cancel(self) -> None:
        """Stop the reading and wait until it has stopped."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


_HOST = re.compile(r"[a-z0-9.-]{1,100}")
_FILE_NAME = re.compile(r"[\w.-]{1,80}\.pdf", re.IGNORECASE)


def _document_name(url: str) -> str | None:
    """A PDF's file name for a note (``gnuplot.pdf``) when its address ends in one that looks
    like one, else its host."""
    try:
        name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    except ValueError:
        return None
    return name if _FILE_NAME.fullmatch(name) else _host(url)


def _host(url: str) -> str | None:
    """The page's host for a note (notes reach the writer outside the fence): only when it
    looks like one (None: the note says "a page")."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return None
    return host if _HOST.fullmatch(host) else None


#: An internal source that failed this many times in a row in a run is left out for the rest
#: of it (a timeout costs each round ``FATHOM_MCP_TIMEOUT``; a server that fails every call
#: would add a note a round).
INTERNAL_FAILURES_TO_GIVE_UP = 2
#: Why a source that timed out without saying more gave nothing.
NO_ANSWER = Reason("it did not answer in time", "没有按时响应")


async def search_topic(
    search: SearchProvider, state: RunState, topic: str, reader: PageReader | None = None
) -> Finding:
    """Search ``topic`` (query only) on the web and on every internal source of the run
    (``state.sources``), all at once: the round waits for the slowest, not for the sum. The
    finding holds the web's results, then each internal source's, in their configured order;
    a source that fails is noted for the report and the others' results are kept (the finding
    says why there are none only when every source failed). A run never fails because of a
    search. ``reader``, which will read the web results' pages, gets ready meanwhile
    (``PageReader.warm``: its page extractor is imported during the search; a no-op once
    done)."""
    if reader is not None:
        reader.warm()
    sources = state.sources
    internal = [s for s in sources.internal if s.name not in sources.given_up]
    asked: list[SearchProvider] = ([search] if sources.web else []) + internal
    if not asked:
        state.note(note_words.not_searched_words(state.language, topic))
        return Finding(topic=topic, error="no source to search")
    if sources.web:
        state.usage.searches += 1
    state.usage.internal_searches += len(internal)
    with state.usage.timed("searching"):
        answers = await asyncio.gather(*(_ask(source, topic) for source in asked))
    results: list[SearchResult] = []
    errors: list[str] = []
    for i, (source, answer) in enumerate(zip(asked, answers, strict=True)):
        is_web = sources.web and i == 0
        if isinstance(answer, _Nothing):  # found nothing, and said why that may be
            state.note(
                note_words.nothing_found_words(
                    state.language, _source_label(source.name, is_web), topic, answer.reason
                )
            )
            answer = []
        if isinstance(answer, list):
            results += answer
            if not is_web:
                sources.failures.pop(source.name, None)  # (only failures in a row count)
                sources.failure_notes.pop(source.name, None)
            continue
        errors.append(str(answer.reason))
        if is_web:
            state.note(note_words.web_search_failed_words(state.language, topic, answer.reason))
            continue
        _internal_failed(state, source.name, topic, answer)
    if results or not errors:
        return Finding(topic=topic, results=results)
    return Finding(topic=topic, error="; ".join(errors))


def _internal_failed(state: RunState, source: str, topic: str, failed: _Failed) -> None:
    """Note an internal source's failure; at the second in a row, leave it out for the rest
    of the run, the first failure's note becoming the one note that says so."""
    sources = state.sources
    name = _server_name(source)
    count = sources.failures.get(source, 0) + 1
    sources.failures[source] = count
    if count < INTERNAL_FAILURES_TO_GIVE_UP:
        state.note(note_words.internal_failed_words(state.language, name, topic, failed.reason))
        sources.failure_notes[source] = len(state.notes) - 1
        return
    sources.given_up.add(source)
    note = note_words.internal_given_up_words(
        state.language, name, topic, failed.reason, count=count, timed_out=failed.timed_out
    )
    first = sources.failure_notes.pop(source, None)
    if first is not None and first < len(state.notes):
        state.notes[first] = note
    else:
        state.note(note)


@dataclass(frozen=True)
class _Failed:
    reason: Reason
    timed_out: bool = False


@dataclass(frozen=True)
class _Nothing:
    """A source found nothing and said why that may be (``reason``: its words)."""

    reason: Reason


async def _ask(source: SearchProvider, topic: str) -> list[SearchResult] | _Failed | _Nothing:
    """One source's results for ``topic``, or why there are none."""
    try:
        return await source.search(topic)
    except NothingFound as exc:
        return _Nothing(exc.reason)
    except SearchTimeout as exc:
        return _Failed(exc.reason if str(exc.reason) else NO_ANSWER, timed_out=True)
    except SearchError as exc:
        return _Failed(exc.reason)
    except Exception as exc:  # a broken provider must not kill the run
        log.exception("search provider %s crashed on %r", source.name, topic)
        return _Failed(Reason.verbatim(type(exc).__name__))


_SERVER_NAME = re.compile(r"[\w.-]{1,64}")


def _source_label(name: str, is_web: bool) -> str:
    """A source for a note: the web provider by its name, an internal one quoted."""
    return name if is_web and _SERVER_NAME.fullmatch(name) else _server_name(name)


def _server_name(name: str) -> str:
    """An internal source's configured name for a note (notes reach the writer outside the
    fence; the operator chose the name, but it is shown only when it looks like one)."""
    return f'"{name}"' if _SERVER_NAME.fullmatch(name) else "(unnamed)"
