"""The steps of a run that write it down or decide its scope, used by the executor
(:mod:`core.research.executor`): its checkpoint (the thread's variables compare-and-swapped, so no
other writer's update is lost), its end, and which sources it may search, decided from its
own thread where it executes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from core.engine.budget import RunBudget
from core.engine.state import RunSources, RunState, StopReason
from core.models import Source, ThreadVariables, Usage
from core.research.cost import Prices
from core.research.outcome import stopped_with_nothing, stored_claims
from core.search import SearchProvider
from core.values import RunStatus, SourceChoice
from core.words import note_words, wording
from storage import (
    Checkpointed,
    Claim,
    ClaimStore,
    RunRecord,
    SourceRecord,
    VariablesConflict,
    outcome_is_delivered,
)

if TYPE_CHECKING:
    from core.metrics import Metrics  # (prometheus-client is imported by `fathom serve` only)

log = logging.getLogger("core.service")  # (where these lines were always logged)

#: How often a checkpoint is retried after the thread's variables changed under it.
CHECKPOINT_ATTEMPTS = 5


def delivers(run: RunRecord) -> bool:
    """Whether the run's outcome has to be delivered to a chat thread once it finishes."""
    return outcome_is_delivered(run.thread.platform)


class InternalSources(Protocol):
    """The internal sources of the process (:class:`core.knowledge.Knowledge`)."""

    def allowed(self, thread_key: str) -> Sequence[SearchProvider]:
        """The internal sources a thread's channel may use (by configuration, whatever their
        state), each a provider whose results carry its ``server`` name."""
        ...


class NoInternalSource(Exception):
    """A ``sources=internal`` run in a channel that may use no internal source."""


def forget_other_servers(variables: ThreadVariables, permitted: set[str]) -> int:
    """Drop the thread's stored results of internal sources that are not in ``permitted``
    (the channel may no longer use them: the configuration changed); how many were dropped.
    A channel's stored findings never outlive its permission to see them."""
    dropped = 0
    for i, finding in enumerate(variables.findings):
        kept = [r for r in finding.results if r.server is None or r.server in permitted]
        if len(kept) != len(finding.results):
            dropped += len(finding.results) - len(kept)
            variables.findings[i] = finding.model_copy(update={"results": kept})
    return dropped


def run_sources(knowledge: InternalSources | None, run: RunRecord, state: RunState) -> RunSources:
    """What the run searches, decided here, where it executes, from its own thread key
    (a follow-up, a resumed run and a digest's firing alike): the web unless
    ``sources=internal``, and the internal sources its channel may use unless
    ``sources=web``. Stored results of internal sources the channel may no longer use are
    dropped from the thread first. :class:`NoInternalSource` for ``sources=internal``
    where none may be used."""
    allowed = list(knowledge.allowed(run.thread_key)) if knowledge else []
    dropped = forget_other_servers(state.variables, {s.name for s in allowed})
    if dropped:
        state.note(note_words.forgotten_internal_words(state.language, dropped))
    choice = run.sources
    if choice is SourceChoice.INTERNAL and not allowed:
        raise NoInternalSource(wording.no_internal_source_words(state.language))
    return RunSources(
        web=choice is not SourceChoice.INTERNAL,
        internal=() if choice is SourceChoice.WEB else tuple(allowed),
    )


async def save_checkpoint(
    claims: ClaimStore,
    claim: Claim,
    state: RunState,
    *,
    searching_ended: StopReason | None = None,
) -> Checkpointed:
    """Persist the state; the run's cancel and stop flags as stored.

    The variables are compare-and-swapped on their version. If another writer changed
    them meanwhile, its topics and findings (and the guidance given meanwhile) are taken in
    and the checkpoint is retried, so no update is lost. ``searching_ended``: the run's last
    checkpoint before its report, recording why its searching ended; once it is stored, no
    more guidance is kept for the run, and all that was is in ``state``.
    """
    for _ in range(CHECKPOINT_ATTEMPTS):
        variables = state.variables.public_dict()
        files = [f.id for f in state.variables.files]
        if files == state.files_saved:
            del variables["files"]  # unchanged: their text is not written again
        try:
            result = await claims.checkpoint(
                claim,
                variables=variables,
                variables_version=state.variables_version,
                rounds_done=state.rounds_done,
                usage=state.usage.model_dump(),
                notes=state.notes,
                searching_ended=searching_ended,
            )
        except VariablesConflict as conflict:
            log.warning(
                "run %s: thread variables changed under it (now version %d); merging",
                state.run_id,
                conflict.version,
            )
            state.variables.absorb(ThreadVariables.model_validate(conflict.variables))
            state.variables_version = conflict.version
            state.files_saved = [f["id"] for f in conflict.variables.get("files") or []]
            continue
        state.variables_version = result.variables_version
        state.files_saved = files
        return result
    raise RuntimeError("the thread's variables kept changing under the run")


async def finish(
    claims: ClaimStore,
    claim: Claim,
    state: RunState,
    status: RunStatus,
    markdown: str | None,
    sources: list[Source],
    error: str | None,
    reason: StopReason | None = None,
    *,
    notes_if_cancelled: list[str] | None = None,
) -> RunRecord:
    return await claims.finish_run(
        claim,
        status=status,
        report_markdown=markdown,
        sources=[SourceRecord(s.n, s.title, s.url, s.published, s.kind, s.server) for s in sources],
        error=error,
        usage=state.usage.model_dump(),
        notes=state.notes,
        claim_check=(
            state.claims.model_dump(mode="json")
            if state.claims is not None and markdown is not None
            else None
        ),
        deliver=delivers(claim.run),
        stop_reason=reason,
        notes_if_cancelled=notes_if_cancelled,
        stop_reason_if_cancelled=StopReason.CANCELLED,
    )


def stopped_words(
    budget: RunBudget,
    state: RunState,
    reason: StopReason,
    searches: int,
    daily_tokens: int | None = None,
) -> str:
    """The note saying why the searching ended early (the report then says it);
    ``daily_tokens``: FATHOM_USER_DAILY_TOKENS."""
    if reason is StopReason.TOKEN_BUDGET:
        return note_words.token_budget_words(state.language, searches, budget.tokens or 0)
    if reason is StopReason.TOKEN_QUOTA:
        return note_words.token_quota_words(state.language, searches, daily_tokens or 0)
    if reason is StopReason.TIME_BUDGET:
        return note_words.time_budget_words(state.language, searches, budget.seconds or 0.0)
    return note_words.stopped_early_words(state.language, searches)


def spent_before_search(budget: RunBudget, state: RunState) -> str | None:
    """Why a run whose time budget ran out before any search fails (None: it did search, or
    has something to write from): the time went to the language model (its last failed call
    named: a planner that never answered in time) or to something else."""
    if state.usage.searches or state.usage.internal_searches:
        return None
    failure = state.model_failure
    return wording.time_spent_before_search_words(
        state.language,
        budget.seconds or 0.0,
        on_model=state.usage.llm_calls > 0,
        failure=wording.model_failure_text(state.language, failure) if failure else None,
    )


def count_finished(
    metrics: Metrics,
    prices: Prices | None,
    run: RunRecord,
    state: RunState,
    reason: StopReason | None,
    *,
    rounds_before: int,
    usage_before: Usage,
) -> None:
    """Count a finished attempt of a run in the process's metrics (a run stopped before
    anything was found as ``stopped``)."""
    usage = state.usage
    status = run.status
    metrics.run_finished(
        status="stopped" if stopped_with_nothing(status, reason) else status.value,
        platform=run.thread.platform,
        strategy=run.strategy,
        seconds=run.seconds,
        rounds_done=max(0, state.rounds_done - rounds_before),
        pages_read=max(0, usage.pages_read - usage_before.pages_read),
        pages_skipped=max(0, usage.pages_skipped - usage_before.pages_skipped),
    )
    if prices is not None:
        metrics.run_cost(prices.cost_by_model(usage, usage_before))
    check = stored_claims(run)
    if check is not None:
        metrics.claims_checked([c.verdict for c in check.claims])
