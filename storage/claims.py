"""The run lifecycle of a runner: claim a run, hold it by heartbeat, checkpoint its steps,
finish it, deliver its outcome, hand it back; and the sweep that finds runs nobody holds.

The lifecycle is settled by single ``UPDATE ... RETURNING`` statements, the same on both
databases. A runner *claims* a run (queued, or running with an expired heartbeat) and gets
a :class:`~storage.records.Claim`; every later write of that runner (checkpoint, finish,
delivery bookkeeping, heartbeat, release) is *fenced* by the claim's owner and fence, so
a runner that lost the run to another one changes nothing (:class:`ClaimLost`). The
thread's variables are written with a compare-and-swap on their version.

The statements are ``claim_sql.py``'s, built once per database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.engine import Connection

from core.values import FINISHED_STATUSES, DeliveryState, RunStatus
from storage.claim_sql import (
    DELETE_SOURCES,
    FENCED_UPDATE,
    LOAD_VARIABLES,
    RELEASE,
    RUN_BEFORE_CLAIM,
    RUN_WITH_VARIABLES_BY_ID,
    UPDATE_VARIABLES,
    UPDATE_VARIABLES_KEEP_FILES,
    ClaimStatements,
)
from storage.db import Database
from storage.errors import ClaimLost, RunNotFound, VariablesConflict
from storage.lifecycle import CONSOLE_PLATFORM, LeaseClock
from storage.records import (
    Checkpointed,
    Claim,
    ClaimResult,
    Renewal,
    RunRecord,
    SourceRecord,
)
from storage.sql import (
    require_run,
    run_record,
    upsert_for,
    variables_dict,
)
from storage.tables import RunSource, utcnow

USAGE_KEYS = (
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "searches",
    "pages_read",
    "pages_skipped",
    "attachments_read",
    "internal_searches",
    "verifier_calls",
    "verifier_prompt_tokens",
    "verifier_completion_tokens",
)


_sources = cast(Table, RunSource.__table__)


class ClaimStore:
    """What a runner does with a run: claim it, then write to it only while the claim holds."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._clock = LeaseClock(database.dialect)
        self._sql = ClaimStatements(self._clock, upsert_for(database.dialect))

    async def claim_run(
        self,
        run_id: str,
        owner: str,
        *,
        stale_after: float,
        max_attempts: int,
        from_owner: str | None = None,
        console_platform: str = CONSOLE_PLATFORM,
    ) -> ClaimResult:
        """Take a run for ``owner`` with one atomic statement, or find out why not.

        Claimable: a ``queued`` run; a ``running`` run whose heartbeat is older than
        ``stale_after`` seconds (its runner died: taken over); a finished run whose delivery
        is pending and whose heartbeat expired (its runner died while posting; that counts as
        a failed delivery attempt). A claim bumps ``fence`` (the fencing token) and, for an
        unfinished run, ``attempt``. A run that already had ``max_attempts`` attempts is
        failed instead (``gave_up``); its holder still delivers that outcome, unless it is a
        ``console_platform`` run. Anything else (held by a live runner, finished and
        delivered, unknown) is not claimed. ``from_owner`` limits the claim to a run still
        held by that owner (a takeover from a holder known to be dead, with a zero
        ``stale_after``).
        """
        params = {
            "run_id": run_id,
            "claimant": owner,
            "from_owner": from_owner,
            "console_platform": console_platform,
            "max_attempts": max_attempts,
            "why": f"gave up after {max_attempts} attempts: the process running it stopped "
            "each time (FATHOM_MAX_ATTEMPTS)",
            **self._clock.params(stale_after),
        }
        sql = self._sql

        def work(conn: Connection) -> ClaimResult:
            gave_up = False
            before = conn.execute(RUN_BEFORE_CLAIM, {"run_id": run_id}).first()
            how = _how_claimed(before)
            claimed = conn.execute(sql.claim_unfinished, params).first() is not None
            if not claimed:
                how = "delivery"
                claimed = conn.execute(sql.claim_delivery, params).first() is not None
            if not claimed:
                how = "gave_up"
                claimed = gave_up = conn.execute(sql.give_up, params).first() is not None
            row = conn.execute(RUN_WITH_VARIABLES_BY_ID, {"run_id": run_id}).mappings().first()
            if row is None:
                return ClaimResult(None)
            record = run_record(row)
            if not claimed:
                return ClaimResult(record)
            has_variables = row["variables_thread_id"] is not None
            claim = Claim(
                run=record,
                owner=owner,
                fence=record.fence,
                variables=variables_dict(row) if has_variables else None,
                variables_version=int(row["variables_version"]) if has_variables else 0,
            )
            return ClaimResult(record, claim, gave_up, how)

        return await self._db.run(work)

    async def renew_claim(self, claim: Claim) -> Renewal:
        """Refresh the heartbeat: whether the run is still held by this claim, and whether
        a cancel of the running run was requested (the heartbeat carries it to a runner that
        has no step to check it at, such as a writer at work)."""
        params = {**_fence(claim), **self._clock.params()}

        def work(conn: Connection) -> Renewal:
            row = conn.execute(self._sql.renew, params).first()
            if row is None:
                return Renewal.LOST
            status, cancel_requested = row
            if status == RunStatus.RUNNING and cancel_requested:
                return Renewal.CANCEL_REQUESTED
            return Renewal.HELD

        return await self._db.run(work)

    async def release_run(self, claim: Claim) -> RunStatus | None:
        """Hand a held run back at once (graceful shutdown): any runner's next sweep takes it.

        An unfinished run goes back to ``queued`` (this attempt does not count); a finished
        one keeps its status and its pending delivery. Returns the run's status after that
        (``queued``: re-queued), None when the claim was lost.
        """
        params = _fence(claim)

        def work(conn: Connection) -> RunStatus | None:
            row = conn.execute(RELEASE, params).first()
            return None if row is None else RunStatus(row[0])

        return await self._db.run(work)

    async def runs_to_sweep(
        self,
        platforms: Sequence[str],
        *,
        stale_after: float,
        limit: int = 100,
        orphans_outside: Sequence[str] | None = None,
    ) -> list[str]:
        """Ids of runs of ``platforms`` nobody works on: queued or running, or finished with
        a pending delivery, whose heartbeat (creation, if none) is older than ``stale_after``
        seconds. Handed-back runs have an epoch heartbeat and are found at once. Oldest
        first. The caller still has to claim each (another runner may be faster).

        ``orphans_outside``: the platforms any process could deliver to; such runs of every
        other platform are found too (nobody will ever deliver them: the caller ends them)."""
        if not platforms and orphans_outside is None:
            return []
        params: dict[str, Any] = {
            "platforms": list(platforms),
            "limit": limit,
            **self._clock.params(stale_after),
        }
        statement = self._sql.sweep
        if orphans_outside is not None:
            params["servable"] = list(orphans_outside)
            statement = self._sql.sweep_with_orphans
        return await self._db.run(lambda conn: [row[0] for row in conn.execute(statement, params)])

    async def checkpoint(
        self,
        claim: Claim,
        *,
        variables: Mapping[str, Any],
        variables_version: int,
        rounds_done: int,
        usage: Mapping[str, Any],
        notes: Sequence[str],
        searching_ended: str | None = None,
    ) -> Checkpointed:
        """Persist one step: the thread's variables and the run's counters, atomically.

        ``variables`` uses the contract names (topics, nextSearchTopic, findings,
        shouldContinue, strategyState, files, guidance; without ``files``, the stored files
        are kept as they are); ``usage`` holds the run's running totals, not increments. The
        variables are written only if they are still at ``variables_version`` (0: no row
        yet); otherwise nothing is written and :class:`VariablesConflict` carries the stored
        ones. Raises :class:`ClaimLost` when the claim no longer holds the run. Returns the
        run's ``cancel_requested`` and ``stop_requested`` flags as stored now (noticing a
        cancel or stop request costs the engine no query of its own) and the variables' new
        version.

        ``searching_ended``: why the run's searching ended, recorded as its ``stop_reason`` in
        the same transaction (its last checkpoint before the report is written): a reply
        steering it is refused from then on (:meth:`storage.ThreadStore.add_guidance`).
        """
        run = {
            **_fence(claim),
            **self._clock.params(),
            "rounds_done": rounds_done,
            "notes": list(notes),
            **_usage_values(usage),
        }
        if searching_ended is not None:
            run["stop_reason"] = _text(searching_ended)
        now = utcnow()
        keep_files = "files" not in variables
        state = {
            "topics": list(variables.get("topics") or []),
            "next_search_topic": variables.get("nextSearchTopic"),
            "findings": list(variables.get("findings") or []),
            "should_continue": bool(variables.get("shouldContinue", True)),
            "strategy_state": dict(variables.get("strategyState") or {}),
            "files": list(variables.get("files") or []),
            "guidance": list(variables.get("guidance") or []),
            "updated_at": now,
        }
        sql = self._sql

        def work(conn: Connection) -> Checkpointed:
            row = conn.execute(sql.checkpoint_run, run).first()
            if row is None:
                raise ClaimLost(claim.run_id)
            thread_id, cancel_requested, stop_requested = row
            if variables_version == 0:
                new = {**state, "thread_id": thread_id, "version": 1}
                written = conn.execute(sql.insert_variables, new).first()
            else:
                values = {k: v for k, v in state.items() if not (keep_files and k == "files")}
                params = {f"new_{k}": v for k, v in values.items()}
                params |= {"tid": thread_id, "expected_version": variables_version}
                update = UPDATE_VARIABLES_KEEP_FILES if keep_files else UPDATE_VARIABLES
                written = conn.execute(update, params).first()
            if written is None:
                current = conn.execute(LOAD_VARIABLES, {"tid": thread_id}).mappings().first()
                if current is None:  # pragma: no cover - only a deleted thread gets here
                    raise RunNotFound(claim.run_id)
                raise VariablesConflict(variables_dict(current), int(current["version"]))
            return Checkpointed(
                bool(cancel_requested), int(written[0]), stop_requested=bool(stop_requested)
            )

        return await self._db.run(work)

    async def finish_run(
        self,
        claim: Claim,
        *,
        status: RunStatus,
        report_markdown: str | None,
        sources: Sequence[SourceRecord],
        error: str | None,
        usage: Mapping[str, Any],
        notes: Sequence[str],
        claim_check: Mapping[str, Any] | None = None,
        deliver: bool = True,
        stop_reason: str | None = None,
        notes_if_cancelled: Sequence[str] | None = None,
        stop_reason_if_cancelled: str | None = None,
    ) -> RunRecord:
        """Record the outcome, report and (replacing any earlier) sources of a held run.
        A ``succeeded`` run that was asked to cancel meanwhile is recorded ``cancelled``,
        without its report or sources, with ``notes_if_cancelled`` (default ``notes``)
        instead of the report's notes and ``stop_reason_if_cancelled`` (the returned record
        says which). ``claim_check``: how the report's claims held (kept with the report).

        With ``deliver`` its delivery becomes pending: posting the outcome in its chat
        thread is the next step (a console run's caller prints it instead: the caller asks
        :func:`~storage.lifecycle.outcome_is_delivered`). Raises
        :class:`ClaimLost` when the claim no longer holds the (running) run.
        """
        if status not in FINISHED_STATUSES:
            raise ValueError(
                f"finish_run status must be one of {FINISHED_STATUSES}, not {status!r}"
            )
        status = RunStatus(status)
        run = {
            **_fence(claim),
            **self._clock.params(),
            "status": status.value,
            "report_markdown": report_markdown,
            "error": error,
            "notes": list(notes),
            "finished_at": utcnow(),
            "delivery": DeliveryState.PENDING if deliver else None,
            "stop_reason": _text(stop_reason),
            "claim_check": dict(claim_check) if claim_check is not None else None,
            **_usage_values(usage),
        }
        rows = [
            {
                "run_id": claim.run_id,
                "n": s.n,
                "title": s.title,
                "url": s.url,
                "published": s.published,
                "kind": s.kind,
                "server": s.server,
            }
            for s in sources
        ]

        def work(conn: Connection) -> RunRecord:
            kept = rows
            if status != RunStatus.SUCCEEDED:
                finished = conn.execute(self._sql.finish_run, run).first()
            else:
                finished = conn.execute(self._sql.finish_run_uncancelled, run).first()
                if finished is None:  # cancelled while the report was written: none is kept
                    cancelled = {
                        **run,
                        "status": "cancelled",
                        "report_markdown": None,
                        "claim_check": None,
                        "stop_reason": _text(stop_reason_if_cancelled),
                        "notes": list(notes if notes_if_cancelled is None else notes_if_cancelled),
                    }
                    finished, kept = conn.execute(self._sql.finish_run, cancelled).first(), []
            if finished is None:
                raise ClaimLost(claim.run_id)
            conn.execute(DELETE_SOURCES, {"run_id": claim.run_id})
            if kept:
                conn.execute(insert(_sources), kept)
            return require_run(conn, claim.run_id)

        return await self._db.run(work)

    async def report_parts_posted(self, claim: Claim, parts: int) -> None:
        """Record that the first ``parts`` parts of the report are in the thread."""
        await self._fenced(claim, report_parts_posted=parts)

    async def count_delivery_failure(self, claim: Claim, error: str) -> int:
        """Count one failed attempt to deliver (and why); the number of failures so far."""
        params = {**_fence(claim), **self._clock.params(), "delivery_error": error[:1000]}

        def work(conn: Connection) -> int:
            row = conn.execute(self._sql.count_delivery_failure, params).first()
            if row is None:
                raise ClaimLost(claim.run_id)
            return int(row[0])

        return await self._db.run(work)

    async def finish_delivery(
        self, claim: Claim, *, posted: bool, error: str | None = None
    ) -> None:
        """End the delivery step: ``posted``, or given up (``failed``) with its reason."""
        params = {
            **_fence(claim),
            **self._clock.params(),
            "posted": posted,
            "delivery": DeliveryState.POSTED if posted else DeliveryState.FAILED,
        }
        if error is not None:
            params["delivery_error"] = error[:1000]

        def work(conn: Connection) -> None:
            if conn.execute(self._sql.finish_delivery, params).first() is None:
                raise ClaimLost(claim.run_id)

        await self._db.run(work)

    async def _fenced(self, claim: Claim, **values: Any) -> None:
        params = {**_fence(claim), **values}

        def work(conn: Connection) -> None:
            if conn.execute(FENCED_UPDATE, params).first() is None:
                raise ClaimLost(claim.run_id)

        await self._db.run(work)


def _how_claimed(before: Any) -> str:
    """How an unfinished run is taken, by what it was just before: ``taken_over`` (running:
    its runner's heartbeat expired, or its process died), ``resumed`` (queued again after an
    attempt that started it: handed back, or re-queued) or ``new``."""
    if before is None:
        return "new"
    status, started_at = before
    if status == RunStatus.RUNNING:
        return "taken_over"
    return "resumed" if started_at is not None else "new"


def _fence(claim: Claim) -> dict[str, Any]:
    return {"run_id": claim.run_id, "fence_owner": claim.owner, "fence_token": claim.fence}


def _usage_values(usage: Mapping[str, Any]) -> dict[str, Any]:
    maps = {"tokens_by_model", "seconds_by_step"}
    unknown = set(usage) - set(USAGE_KEYS) - maps
    if unknown:
        raise ValueError(f"unknown usage counters {sorted(unknown)}; known: {USAGE_KEYS}")
    values: dict[str, Any] = {name: int(value) for name, value in usage.items() if name not in maps}
    if "tokens_by_model" in usage:
        values["tokens_by_model"] = {
            str(model): [int(n) for n in tally]
            for model, tally in dict(usage["tokens_by_model"]).items()
        }
    if "seconds_by_step" in usage:
        values["seconds_by_step"] = {
            str(step): round(float(seconds), 3)
            for step, seconds in dict(usage["seconds_by_step"]).items()
        }
    return values


def _text(reason: str | None) -> str | None:
    """A stop reason (``core.engine.state.StopReason``, a string enum) as its column holds it."""
    return None if reason is None else str(reason)
