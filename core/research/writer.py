"""The report writer: a run's findings become its Markdown report.

The writer model gets the run's numbered sources (at most ``MAX_WRITER_SOURCES``: those its
strategy's context cites, then the most recent), its notes and what its strategy tells it
(``Strategy.writer_context``: for a graph run, the answered sub-questions). A
digest's firing is also told what the previous firing reported, and the report always gets its
"What's new" section (:mod:`core.research.whats_new`). Citations and links are checked before the
report leaves (:func:`core.research.report.finalize_report`). When the writer model fails, the
findings are listed instead; when no model call of the run answered at all, the run fails with
:class:`ModelUnavailable` rather than pretend to a report.

The writer's answer cites in whatever form the model chose; it is made to cite as ``[n]``
(:func:`core.engine.sources.cited_body`) before its claims are checked, so every form is
checked, and the check's claims are renumbered with the report's sources list after.

Under a token limit (``room``: what ``FATHOM_MAX_RUN_TOKENS``, or the run's share of its
requester's daily quota, leaves after the searching) the writer's request is fitted into it
(:mod:`core.research.fitting`: fewer passages, then fewer sources, with a note saying how many
were left out), and the claim check's requests too; when not even the instructions and one
source fit, the writer is not asked and the findings are listed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from core.claims.check import check_claims
from core.claims.deadline import Deadline
from core.claims.summary import CheckSummary
from core.claims.uncited import uncited_statements
from core.config import VERIFY_SECONDS
from core.engine.sources import (
    NumberedSource,
    cited_body,
    evidence_of,
    number_sources,
    writer_source_blocks,
    writer_window,
)
from core.engine.state import RunState
from core.engine.strategy import WriterContext
from core.llm import LLMError
from core.llm.protocols import JsonModel, TextModel
from core.llm.tokens import TokenRoom
from core.models import Source
from core.research import whats_new
from core.research.fitting import WriterRequest, fit_writer
from core.research.prompts import DigestContext, drop_instruction_echoes, writer_messages
from core.research.report import (
    fallback_body,
    finalize_report,
    report_language,
    unwrap_report,
)
from core.timer import MONOTONIC, Timer
from core.words import note_words, wording
from core.words.wording import Language
from storage import DigestStore, RunRecord

# The logger these lines were always written under (the writer began in the service), so that
# log queries keep finding them.
log = logging.getLogger("core.service")

#: At most this many sources (the most recent) are given to the writer.
MAX_WRITER_SOURCES = 60


def has_material(state: RunState) -> bool:
    """Whether the writer would have any source to write from (the thread's findings and
    files): a run stopped before its first search may still have a follow-up's."""
    return bool(number_sources(state.variables.findings, state.variables.files, state.topic))


class NoResults(Exception):
    """No search returned anything, so there is nothing to write a report from."""


class ModelUnavailable(Exception):
    """Every model call of the run failed (no analysis, no report): the message is one line
    saying what is wrong, with which model where."""


def _note_trimmed(state: RunState, room: TokenRoom, request: WriterRequest, total: int) -> None:
    """Note that the writer was shown fewer sources or passages than the run has, to stay
    within the room its token limit left."""
    state.note(
        note_words.writer_trimmed_words(
            state.language,
            room.limit,
            room.quota,
            shown=len(request.sources),
            total=total,
            passages=request.passages_left_out,
        )
    )


def _fallen_back(
    state: RunState, exc: LLMError, analysed: bool, numbered: Sequence[NumberedSource]
) -> str:
    """The findings listed as the report, with a note why, when the writer model failed;
    :class:`ModelUnavailable` when the model never analysed anything for the run (nothing
    it said: no report to pretend)."""
    log.warning("writer failed in run %s: %s", state.run_id, exc)
    if not analysed:
        raise model_unavailable(state.language, exc, state.model_failure) from exc
    state.note(note_words.writer_failed_words(state.language, exc))
    state.writer_fell_back = True
    intro = wording.writer_unavailable_intro(
        state.language, note_words.model_error_words(state.language, exc)
    )
    return fallback_body(state.topic, state.variables.findings, numbered, intro)


def model_unavailable(
    language: Language, writer: LLMError, planner: LLMError | None
) -> ModelUnavailable:
    """The failure of a run whose planner and writer both failed (``planner``: its last
    failed call, named too when it failed otherwise or elsewhere)."""
    reason = _model_reason(language, writer)
    if planner is not None and (planner.detail, planner.endpoint) != (
        writer.detail,
        writer.endpoint,
    ):
        reason += "; " + _model_reason(language, planner)
    return ModelUnavailable(" ".join(reason.split()))


def _model_reason(language: Language, error: LLMError) -> str:
    return wording.model_failure_text(language, error)


@dataclass(frozen=True)
class _DigestHistory:
    context: DigestContext
    earlier_urls: set[str]


class ReportWriter:
    """Writes the reports of runs with the writer model."""

    def __init__(
        self,
        model: TextModel,
        digests: DigestStore,
        *,
        verifier: JsonModel | None = None,
        verify_seconds: float = VERIFY_SECONDS,
        timer: Timer = MONOTONIC,
    ) -> None:
        """``digests``: where a digest's earlier firings are found; ``verifier``: checks every
        cited claim of a report against its sources before it is finished (None: no check),
        within ``verify_seconds`` measured on ``timer`` (FATHOM_VERIFY_SECONDS)."""
        self._model = model
        self._digests = digests
        self._verifier = verifier
        self._verify_seconds = verify_seconds
        self._timer = timer

    async def write(
        self,
        run: RunRecord,
        state: RunState,
        context: WriterContext | None = None,
        *,
        analysed_before: bool = False,
        checking: Callable[[], Awaitable[None]] | None = None,
        room: TokenRoom | None = None,
    ) -> tuple[str, list[Source]]:
        """The run's report and the sources it lists; ``context``: what the run's strategy
        tells the writer (``Strategy.writer_context``; None: nothing); ``analysed_before``:
        the checkpoint shows the model analysed something for the run before
        (``Strategy.analysed``);
        ``checking``: called when the claim check begins (the progress says so); ``room``:
        what the run's token limit leaves for the writer and the check (None: unlimited).

        Raises :class:`NoResults` when no search found anything and :class:`ModelUnavailable`
        when the writer failed and no model call of the run ever answered.
        """
        digest = await self._digest(run, state)
        analysed = state.model_answered or analysed_before
        return await self._write(state, digest, context, analysed, checking, room)

    async def _checked(
        self,
        body: str,
        numbered: Sequence[NumberedSource],
        state: RunState,
        checking: Callable[[], Awaitable[None]] | None,
        room: TokenRoom | None = None,
    ) -> str:
        """``body`` (citing as ``[n]`` only) with its failing claims fixed, and notes saying how
        its citations held and which sources speak to AI models (unchanged when there is no
        verifier or no cited claim); its uncited factual sentences are counted either way
        (``state.claims.uncited``). The check ends within its time budget, with what was
        settled by then."""
        uncited = len(uncited_statements(body))
        if self._verifier is None:
            state.claims = CheckSummary(uncited=uncited)
            return body
        if checking is not None:
            await checking()
        deadline = Deadline(self._verify_seconds, self._timer)
        with state.usage.timed("checking"):
            check = await check_claims(
                body,
                evidence_of(numbered),
                self._verifier,
                state.usage,
                state.language,
                deadline=deadline,
                room=room,
            )
        state.claims = check.summary().model_copy(update={"uncited": uncited})
        if check.claims:
            state.note(state.claims.note(state.language))
        if check.addressing:
            titles = {s.n: s.title for s in numbered}
            found = [(titles[n], phrase) for n, phrase in check.addressing.items()]
            state.note(note_words.addressing_sources_words(state.language, found))
        return check.markdown

    async def _digest(self, run: RunRecord, state: RunState) -> _DigestHistory | None:
        """What the previous firing of a digest's run reported (None: not a digest, or its
        first successful firing)."""
        if run.digest_id is None:
            return None
        previous, earlier_urls = await self._digests.history(run.digest_id, run.created_at)
        if previous is None:
            return None
        return _DigestHistory(whats_new.context(previous, state.language), earlier_urls)

    async def _write(
        self,
        state: RunState,
        digest: _DigestHistory | None,
        context: WriterContext | None,
        analysed: bool,
        checking: Callable[[], Awaitable[None]] | None,
        room: TokenRoom | None = None,
    ) -> tuple[str, list[Source]]:
        findings = state.variables.findings
        # The sources the strategy's material cites (the graph's answers) are shown first.
        material = "\n".join(context.material) if context is not None else ""
        cited = frozenset(int(n) for n in re.findall(r"\[(\d{1,4})\]", material))
        query = " ".join([state.topic, *state.variables.topics[-8:]])
        numbered = writer_window(
            number_sources(findings, state.variables.files, query), MAX_WRITER_SOURCES, cited
        )
        if not numbered:
            errors = [f.error for f in findings if f.error]
            last = errors[-1] if errors else None
            reason = wording.no_results_words(state.language, last)
            if state.model_failure is not None and not state.model_answered:
                # The planner never answered either (every call timed out): that is said too.
                reason += "; " + wording.model_failure_text(state.language, state.model_failure)
            raise NoResults(reason)
        new = (
            whats_new.new_numbers([(s.n, s.url or s.title) for s in numbered], digest.earlier_urls)
            if digest is not None
            else frozenset()
        )

        def build(shown: Sequence[NumberedSource], passage_tokens: int) -> list[dict[str, str]]:
            return writer_messages(
                topic=state.topic,
                language=report_language(state.topic),
                topics=state.variables.topics,
                sources=writer_source_blocks(shown, new, passage_tokens),
                notes=state.notes,
                today=state.today,
                digest=digest.context if digest is not None else None,
                context=context,
                guidance=state.variables.guidance_for(state.run_id),
            )

        request = fit_writer(numbered, build, room, checked=self._verifier is not None, cited=cited)
        if request is None:  # not even the instructions and one source fit what is left
            assert room is not None
            state.note(note_words.writer_skipped_words(state.language, room.limit, room.quota))
            state.writer_fell_back = True
            reason = note_words.writer_no_room_words(state.language, room.limit, room.quota)
            intro = wording.writer_unavailable_intro(state.language, reason)
            body = fallback_body(state.topic, findings, numbered, intro)
            return self._finished(state, digest, body, numbered, 0)
        if request.trimmed:
            assert room is not None
            _note_trimmed(state, room, request, len(numbered))
        shown = request.sources
        unlinked = 0
        try:
            with state.usage.timed("writing"):
                answer = await self._model.complete(
                    request.messages, usage=state.usage, max_tokens=request.max_tokens
                )
            if not answer.complete:
                state.note(note_words.cut_short_words(state.language, answer.finish_reason))
            body, echoes = drop_instruction_echoes(unwrap_report(answer.text))
            if echoes:
                state.note(note_words.instructions_echo_words(state.language))
            normal = cited_body(body, shown)  # every citation form is checked as [n]
            unlinked = normal.unlinked
            body = await self._checked(normal.markdown, shown, state, checking, room)
        except LLMError as exc:
            body = _fallen_back(state, exc, analysed, numbered)
            shown = numbered  # (the findings listed cite every source; no model reads them)
        return self._finished(state, digest, body, shown, unlinked)

    def _finished(
        self,
        state: RunState,
        digest: _DigestHistory | None,
        body: str,
        numbered: Sequence[NumberedSource],
        unlinked: int,
    ) -> tuple[str, list[Source]]:
        """The report from its ``body``: its citations and links checked, its sources listed,
        its notes added (and a digest's "What's new" section)."""
        checked = finalize_report(body, numbered, state.topic, state.notes, written=state.today)
        if state.claims is not None:  # its claims cite as the report's sources list numbers
            state.claims = state.claims.renumbered(checked.numbers)
        unlinked += checked.unlinked_urls
        if checked.removed_citations or unlinked:
            log.info(
                "run %s: removed %d citations to unknown sources, unlinked %d unknown URLs",
                state.run_id,
                checked.removed_citations,
                unlinked,
            )
        markdown = checked.markdown
        if digest is not None:
            markdown = whats_new.ensure_section(
                markdown, digest.context, checked.sources, digest.earlier_urls
            )
        return markdown, checked.sources
