"""The repository facade the core talks to.

Every public method is one transaction and returns plain records. Races between
processes (retried platform deliveries, concurrent workers) are settled by unique
constraints through ``INSERT ... ON CONFLICT``, which keeps the transaction usable on
PostgreSQL (no aborted transaction to recover from) and works the same on SQLite.

The run lifecycle is settled by single ``UPDATE ... RETURNING`` statements, the same on both
databases. A runner *claims* a run (queued, or running with an expired heartbeat) and gets
a :class:`~storage.records.Claim`; every later write of that runner (checkpoint, finish,
delivery bookkeeping, heartbeat, release) is *fenced* by the claim's owner and fence, so
a runner that lost the run to another one changes nothing (:class:`ClaimLost`). The
thread's variables are written with a compare-and-swap on their version.

Transactions are plain functions of a Core ``Connection`` run by :meth:`Database.run`
(no ORM session: less CPU per call). The statements of the per-round hot path (checkpoint,
run start and finish) are built once with bind parameters, so each call skips building
and cache-keying them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast
from uuid import uuid4

from sqlalchemy import (
    Select,
    String,
    Table,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from storage.caches import CacheStore
from storage.db import Database
from storage.errors import ClaimLost, RunNotFound, ThreadBusy, UserBusy, VariablesConflict
from storage.events import EventStore
from storage.lifecycle import (
    CONSOLE_PLATFORM,
    DELIVERY_FAILED,
    DELIVERY_PENDING,
    DELIVERY_POSTED,
    DELIVERY_WHEN_ENDED,
    EPOCH,
    FINISHED_STATUSES,
    UNFINISHED_STATUSES,
    LeaseClock,
)
from storage.records import (
    Checkpointed,
    Claim,
    ClaimResult,
    RunRecord,
    SourceRecord,
)
from storage.slack_oauth import SlackOAuthStates
from storage.sql import (
    RUN_BY_ID,
    SELECT_RUNS,
    VARIABLE_COLUMNS,
    fit_key,
    newest_first,
    one_run,
    require_run,
    run_record,
    upsert_for,
    variables_dict,
)
from storage.tables import (
    ResearchRun,
    RunSource,
    Thread,
    ThreadVariables,
    utcnow,
)
from storage.threads import ThreadStore

__all__ = [
    "DELIVERY_FAILED",
    "DELIVERY_PENDING",
    "DELIVERY_POSTED",
    "FINISHED_STATUSES",
    "UNFINISHED_STATUSES",
    "ClaimLost",
    "RunNotFound",
    "Store",
    "ThreadBusy",
    "UserBusy",
    "VariablesConflict",
]

USAGE_KEYS = (
    "llm_calls",
    "prompt_tokens",
    "completion_tokens",
    "searches",
    "pages_read",
    "pages_skipped",
)
#: How often create_run retries when the thread's active run finished while it looked.
_CREATE_ATTEMPTS = 3

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_variables = cast(Table, ThreadVariables.__table__)
_sources = cast(Table, RunSource.__table__)

_RUN_WITH_VARIABLES_BY_ID = (
    SELECT_RUNS.add_columns(*VARIABLE_COLUMNS, _variables.c.version.label("variables_version"))
    .outerjoin(_variables, _variables.c.thread_id == _runs.c.thread_id)
    .where(_runs.c.id == bindparam("run_id"))
)
_LATEST_RUN_IN_THREAD = (
    SELECT_RUNS.where(_threads.c.key == bindparam("thread_key"))
    .order_by(_runs.c.created_at.desc(), _runs.c.id.desc())
    .limit(1)
)
_ACTIVE_RUN_IN_THREAD = SELECT_RUNS.where(
    _runs.c.thread_id == bindparam("tid"), _runs.c.status.in_(UNFINISHED_STATUSES)
)
_RUN_BY_DEDUPE_KEY = SELECT_RUNS.where(_runs.c.dedupe_key == bindparam("dedupe_key"))
#: How many unfinished runs a user has, and whether any run (finished or not) already
#: carries the request's dedupe key: a delivery seen again is never refused.
_ACTIVE_RUN_COUNT = select(
    select(func.count())
    .where(
        _runs.c.requested_by == bindparam("requested_by"),
        _runs.c.status.in_(UNFINISHED_STATUSES),
    )
    .scalar_subquery(),
    exists().where(_runs.c.dedupe_key == bindparam("dedupe_key")),
)
#: The writes of a claim's holder only apply while it still holds the run.
_FENCE = (
    _runs.c.id == bindparam("run_id"),
    _runs.c.owner == bindparam("fence_owner"),
    _runs.c.fence == bindparam("fence_token"),
)
_LAST_SEEN = func.coalesce(_runs.c.heartbeat_at, _runs.c.created_at)
_DELETE_SOURCES = delete(_sources).where(_sources.c.run_id == bindparam("run_id"))
_VARIABLE_VALUES = (
    "topics",
    "next_search_topic",
    "findings",
    "should_continue",
    "graph",
    "updated_at",
)


class _Statements:
    """The dialect's statements of the hot path and of the run lifecycle, built once.

    Their heartbeats and expiry are read on the :class:`~storage.lifecycle.LeaseClock`.
    """

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.upsert = upsert = upsert_for(dialect)
        self.clock = clock = LeaseClock(dialect)
        now, cutoff = clock.now, clock.cutoff
        thread = upsert(_threads)
        self.upsert_thread = thread.on_conflict_do_update(
            index_elements=[_threads.c.key], set_={"updated_at": thread.excluded.updated_at}
        ).returning(_threads.c.id)
        # No conflict target: a used dedupe key and a busy thread (the partial unique index
        # on active runs) both insert nothing, and the transaction stays usable on PostgreSQL.
        # RETURNING the new row saves create_run a SELECT (a round trip on PostgreSQL).
        # The heartbeat starts at creation, on the lease clock: a queued run nobody takes is
        # swept once it is as old as a dead runner's heartbeat.
        self.insert_run = (
            upsert(_runs).values(heartbeat_at=now).on_conflict_do_nothing().returning(*_runs.c)
        )

        stale = _LAST_SEEN < cutoff
        claimable = or_(_runs.c.status == "queued", and_(_runs.c.status == "running", stale))
        # A forced claim (``from_owner``) takes the run only from the holder judged dead.
        from_owner = bindparam("from_owner", type_=String())
        held_by_expected = or_(from_owner.is_(None), _runs.c.owner == from_owner)
        claim_values = {
            "owner": bindparam("claimant"),
            "fence": _runs.c.fence + 1,
            "heartbeat_at": now,
        }
        self.claim_unfinished = (
            update(_runs)
            .where(
                _runs.c.id == bindparam("run_id"),
                claimable,
                held_by_expected,
                _runs.c.attempt < bindparam("max_attempts"),
            )
            .values(
                claim_values
                | {
                    "status": "running",
                    "attempt": _runs.c.attempt + 1,
                    "started_at": func.coalesce(_runs.c.started_at, now),
                }
            )
            .returning(_runs.c.id)
        )
        self.give_up = (
            update(_runs)
            .where(
                _runs.c.id == bindparam("run_id"),
                claimable,
                held_by_expected,
                _runs.c.attempt >= bindparam("max_attempts"),
            )
            .values(
                claim_values
                | {
                    "status": "failed",
                    "error": bindparam("why"),
                    "finished_at": now,
                    # A console run's caller shows the outcome itself; a chat run's is delivered.
                    "delivery": DELIVERY_WHEN_ENDED,
                }
            )
            .returning(_runs.c.id)
        )
        self.cancel_queued = (
            update(_runs)
            .where(_runs.c.id == bindparam("run_id"), _runs.c.status == "queued")
            .values(
                status="cancelled",
                cancel_requested=True,
                finished_at=now,
                owner=None,
                heartbeat_at=EPOCH,  # its delivery is due at once
                delivery=DELIVERY_WHEN_ENDED,
            )
            .returning(_runs.c.id)
        )
        self.cancel_running = (
            update(_runs)
            .where(_runs.c.id == bindparam("run_id"), _runs.c.status == "running")
            .values(cancel_requested=True)
            .returning(_runs.c.id)
        )
        self.claim_delivery = (
            update(_runs)
            .where(
                _runs.c.id == bindparam("run_id"),
                _runs.c.status.in_(FINISHED_STATUSES),
                _runs.c.delivery == DELIVERY_PENDING,
                stale,
                held_by_expected,
            )
            .values(
                claim_values
                | {
                    # The runner that was delivering it stopped: that counts as a failed
                    # attempt, so a delivery that keeps killing its runners ends
                    # (FATHOM_DELIVERY_ATTEMPTS).
                    "delivery_attempts": _runs.c.delivery_attempts + 1,
                    "delivery_error": func.coalesce(
                        _runs.c.delivery_error, "the process delivering it stopped"
                    ),
                }
            )
            .returning(_runs.c.id)
        )
        self.renew = update(_runs).where(*_FENCE).values(heartbeat_at=now).returning(_runs.c.id)
        running = _runs.c.status == "running"
        self.release = (
            update(_runs)
            .where(*_FENCE)
            .values(
                owner=None,
                heartbeat_at=EPOCH,
                # A handed-back attempt does not count against FATHOM_MAX_ATTEMPTS (the fence
                # stays: it never goes back).
                status=case((running, "queued"), else_=_runs.c.status),
                attempt=case((running, _runs.c.attempt - 1), else_=_runs.c.attempt),
            )
            .returning(_runs.c.id)
        )
        # SET also takes the usage counters present in each call's parameters.
        self.checkpoint_run = (
            update(_runs)
            .where(*_FENCE, running)
            .values(heartbeat_at=now)
            .returning(_runs.c.thread_id, _runs.c.cancel_requested)
        )
        self.finish_run = (
            update(_runs).where(*_FENCE, running).values(heartbeat_at=now).returning(_runs.c.id)
        )
        self.fenced_update = update(_runs).where(*_FENCE).returning(_runs.c.id)
        self.count_delivery_failure = (
            update(_runs)
            .where(*_FENCE)
            .values(delivery_attempts=_runs.c.delivery_attempts + 1, heartbeat_at=now)
            .returning(_runs.c.delivery_attempts)
        )
        self.finish_delivery = (
            update(_runs)
            .where(*_FENCE, _runs.c.delivery == DELIVERY_PENDING)
            .values(report_posted_at=case((bindparam("posted"), now), else_=None))
            .returning(_runs.c.id)
        )
        has_work = or_(
            _runs.c.status.in_(UNFINISHED_STATUSES), _runs.c.delivery == DELIVERY_PENDING
        )
        served_here = _threads.c.platform.in_(bindparam("platforms", expanding=True))
        served_nowhere = _threads.c.platform.not_in(bindparam("servable", expanding=True))
        self.sweep = (
            select(_runs.c.id)
            .join(_threads, _threads.c.id == _runs.c.thread_id)
            .where(served_here, has_work, stale)
            .order_by(_runs.c.created_at, _runs.c.id)
            .limit(bindparam("limit"))
        )
        self.sweep_with_orphans = (
            select(_runs.c.id)
            .join(_threads, _threads.c.id == _runs.c.thread_id)
            .where(or_(served_here, served_nowhere), has_work, stale)
            .order_by(_runs.c.created_at, _runs.c.id)
            .limit(bindparam("limit"))
        )
        #: What ``requeue_run`` sets the heartbeat to: the lease clock's now, so that a sweep
        #: leaves a requeued run to the caller that is about to claim it.
        self.now = now
        variables = upsert(_variables)
        self.insert_variables = variables.on_conflict_do_nothing(
            index_elements=[_variables.c.thread_id]
        ).returning(_variables.c.version)
        self.update_variables = (
            update(_variables)
            .where(
                _variables.c.thread_id == bindparam("tid"),
                _variables.c.version == bindparam("expected_version"),
            )
            .values(
                {name: bindparam(f"new_{name}") for name in _VARIABLE_VALUES}
                | {"version": _variables.c.version + 1}
            )
            .returning(_variables.c.version)
        )
        self.load_variables = select(*VARIABLE_COLUMNS, _variables.c.version).where(
            _variables.c.thread_id == bindparam("tid")
        )


def _fence(claim: Claim) -> dict[str, Any]:
    return {"run_id": claim.run_id, "fence_owner": claim.owner, "fence_token": claim.fence}


class Store:
    def __init__(
        self, database: Database, *, on_new_run: Callable[[Connection, str], None] | None = None
    ) -> None:
        """``on_new_run(conn, run_id)`` runs in the transaction that creates a run (the job
        queue of ``FATHOM_QUEUE=procrastinate`` queues it there: committed means queued)."""
        self._db = database
        self._sql = _Statements(database.dialect)
        self._on_new_run = on_new_run
        self.threads = ThreadStore(database)
        self.events = EventStore(database)
        self.caches = CacheStore(database)
        self.slack_oauth_states = SlackOAuthStates(database)
        # The names callers used before the split: the per-job stores' own bound methods.
        self.rekey_thread = self.threads.rekey_thread
        self.get_thread = self.threads.get_thread
        self.list_threads = self.threads.list_threads
        self.load_variables = self.threads.load_variables
        self.claim_event = self.events.claim_event
        self.events_seen = self.events.events_seen
        self.prune_events = self.events.prune_events
        self.cache_get = self.caches.cache_get
        self.cache_put = self.caches.cache_put
        self.page_get = self.caches.page_get
        self.page_put = self.caches.page_put
        self.prune_caches = self.caches.prune_caches
        self.prune_oauth_states = self.slack_oauth_states.prune_expired

    @property
    def queues_new_runs(self) -> bool:
        """Whether a new run is queued by the transaction that creates it (``on_new_run``)."""
        return self._on_new_run is not None

    # -- runs ---------------------------------------------------------------------------

    async def create_run(
        self,
        *,
        thread_key: str,
        platform: str,
        workspace: str,
        channel: str,
        thread_ref: str,
        topic: str,
        depth: int,
        strategy: str,
        requested_by: str | None = None,
        dedupe_key: str | None = None,
        platform_context: dict[str, Any] | None = None,
        digest_id: str | None = None,
        user_limit: int | None = None,
    ) -> tuple[RunRecord, bool]:
        """Queue a run in the (created on demand) thread.

        Returns ``(run, True)``, or ``(existing_run, False)`` when ``dedupe_key`` was
        already used: the same platform delivery seen twice yields one run. Raises
        :class:`ThreadBusy` when the thread already has a queued or running run; the
        database settles races (a partial unique index), so two requests racing in one
        thread never both get a run. With ``user_limit``, raises :class:`UserBusy` when
        ``requested_by`` already has that many unfinished runs; a redelivery (a run with
        ``dedupe_key`` exists) is never refused. The count is made in the same transaction,
        so an acknowledgement costs one, but no constraint enforces it: two requests of one
        user racing in different threads may both pass.
        """
        now = utcnow()
        if dedupe_key is not None:
            dedupe_key = fit_key(dedupe_key)
        thread = {
            "key": thread_key,
            "platform": platform,
            "workspace": workspace,
            "channel": channel,
            "thread_ref": thread_ref,
            "created_at": now,
            "updated_at": now,
        }
        run = {
            "id": uuid4().hex,
            "topic": topic,
            "depth": depth,
            "strategy": strategy,
            "status": "queued",
            "requested_by": requested_by,
            "dedupe_key": dedupe_key,
            "platform_context": platform_context,
            "digest_id": digest_id,
            "notes": [],
            "created_at": now,
            **self._sql.clock.params(),
        }

        def work(conn: Connection) -> tuple[RunRecord, bool]:
            if user_limit is not None and requested_by is not None:
                counted = {"requested_by": requested_by, "dedupe_key": dedupe_key}
                unfinished, seen = conn.execute(_ACTIVE_RUN_COUNT, counted).one()
                if not seen and unfinished >= user_limit:
                    raise UserBusy(int(unfinished), user_limit)
            thread_id = conn.execute(self._sql.upsert_thread, thread).scalar_one()
            for _ in range(_CREATE_ATTEMPTS):
                row = conn.execute(self._sql.insert_run, {**run, "thread_id": thread_id})
                inserted = row.mappings().first()
                if inserted is not None:
                    # A console run is executed by the fathom process that makes it,
                    # never by a queue worker: it is not queued.
                    if self._on_new_run is not None and platform != CONSOLE_PLATFORM:
                        self._on_new_run(conn, str(inserted["id"]))
                    return run_record({**inserted, "thread_key": thread_key}), True
                if dedupe_key is not None:
                    record = one_run(conn, _RUN_BY_DEDUPE_KEY, dedupe_key=dedupe_key)
                    if record is not None:  # the same delivery again: its run
                        return record, False
                active = one_run(conn, _ACTIVE_RUN_IN_THREAD, tid=thread_id)
                if active is not None:
                    raise ThreadBusy(active)
                # The active run finished between the insert and the look-up: try again.
            raise ThreadBusy(None)

        return await self._db.run(work)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._db.run(lambda conn: one_run(conn, RUN_BY_ID, run_id=run_id))

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
            **self._sql.clock.params(stale_after),
        }
        sql = self._sql

        def work(conn: Connection) -> ClaimResult:
            gave_up = False
            claimed = conn.execute(sql.claim_unfinished, params).first() is not None
            if not claimed:
                claimed = conn.execute(sql.claim_delivery, params).first() is not None
            if not claimed:
                claimed = gave_up = conn.execute(sql.give_up, params).first() is not None
            row = conn.execute(_RUN_WITH_VARIABLES_BY_ID, {"run_id": run_id}).mappings().first()
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
            return ClaimResult(record, claim, gave_up)

        return await self._db.run(work)

    async def renew_claim(self, claim: Claim) -> bool:
        """Refresh the heartbeat; False when the run is no longer held by this claim."""
        params = {**_fence(claim), **self._sql.clock.params()}
        return await self._db.run(
            lambda conn: conn.execute(self._sql.renew, params).first() is not None
        )

    async def release_run(self, claim: Claim) -> bool:
        """Hand a held run back at once (graceful shutdown): any runner's next sweep takes it.

        An unfinished run goes back to ``queued`` (this attempt does not count); a finished
        one keeps its status and its pending delivery. False when the claim was lost.
        """
        params = _fence(claim)
        return await self._db.run(
            lambda conn: conn.execute(self._sql.release, params).first() is not None
        )

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
            **self._sql.clock.params(stale_after),
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
        usage: Mapping[str, int],
        notes: Sequence[str],
    ) -> Checkpointed:
        """Persist one step: the thread's variables and the run's counters, atomically.

        ``variables`` uses the contract names (topics, nextSearchTopic, findings,
        shouldContinue); ``usage`` holds the run's running totals, not increments. The
        variables are written only if they are still at ``variables_version`` (0: no row
        yet); otherwise nothing is written and :class:`VariablesConflict` carries the stored
        ones. Raises :class:`ClaimLost` when the claim no longer holds the run. Returns the
        run's ``cancel_requested`` flag as stored now (noticing a cancel request costs the
        engine no query of its own) and the variables' new version.
        """
        run = {
            **_fence(claim),
            **self._sql.clock.params(),
            "rounds_done": rounds_done,
            "notes": list(notes),
            **_usage_values(usage),
        }
        now = utcnow()
        state = {
            "topics": list(variables.get("topics") or []),
            "next_search_topic": variables.get("nextSearchTopic"),
            "findings": list(variables.get("findings") or []),
            "should_continue": bool(variables.get("shouldContinue", True)),
            "graph": list(variables.get("graph") or []),
            "updated_at": now,
        }
        sql = self._sql

        def work(conn: Connection) -> Checkpointed:
            row = conn.execute(sql.checkpoint_run, run).first()
            if row is None:
                raise ClaimLost(claim.run_id)
            thread_id, cancel_requested = row
            if variables_version == 0:
                new = {**state, "thread_id": thread_id, "version": 1}
                written = conn.execute(sql.insert_variables, new).first()
            else:
                params = {f"new_{k}": v for k, v in state.items()}
                params |= {"tid": thread_id, "expected_version": variables_version}
                written = conn.execute(sql.update_variables, params).first()
            if written is None:
                current = conn.execute(sql.load_variables, {"tid": thread_id}).mappings().first()
                if current is None:  # pragma: no cover - only a deleted thread gets here
                    raise RunNotFound(claim.run_id)
                raise VariablesConflict(variables_dict(current), int(current["version"]))
            return Checkpointed(bool(cancel_requested), int(written[0]))

        return await self._db.run(work)

    async def finish_run(
        self,
        claim: Claim,
        *,
        status: str,
        report_markdown: str | None,
        sources: Sequence[tuple[int, str, str]],
        error: str | None,
        usage: Mapping[str, int],
        notes: Sequence[str],
        deliver: bool = True,
    ) -> RunRecord:
        """Record the outcome, report and (replacing any earlier) sources of a held run.

        With ``deliver`` its delivery becomes pending: posting the outcome in its chat
        thread is the next step (a console run's caller prints it instead). Raises
        :class:`ClaimLost` when the claim no longer holds the (running) run.
        """
        if status not in FINISHED_STATUSES:
            raise ValueError(
                f"finish_run status must be one of {FINISHED_STATUSES}, not {status!r}"
            )
        run = {
            **_fence(claim),
            **self._sql.clock.params(),
            "status": status,
            "report_markdown": report_markdown,
            "error": error,
            "notes": list(notes),
            "finished_at": utcnow(),
            "delivery": DELIVERY_PENDING if deliver else None,
            **_usage_values(usage),
        }
        rows = [{"run_id": claim.run_id, "n": n, "title": t, "url": u} for n, t, u in sources]

        def work(conn: Connection) -> RunRecord:
            if conn.execute(self._sql.finish_run, run).first() is None:
                raise ClaimLost(claim.run_id)
            conn.execute(_DELETE_SOURCES, {"run_id": claim.run_id})
            if rows:
                conn.execute(insert(_sources), rows)
            return require_run(conn, claim.run_id)

        return await self._db.run(work)

    async def report_parts_posted(self, claim: Claim, parts: int) -> None:
        """Record that the first ``parts`` parts of the report are in the thread."""
        await self._fenced(claim, report_parts_posted=parts)

    async def count_delivery_failure(self, claim: Claim, error: str) -> int:
        """Count one failed attempt to deliver (and why); the number of failures so far."""
        params = {**_fence(claim), **self._sql.clock.params(), "delivery_error": error[:1000]}

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
            **self._sql.clock.params(),
            "posted": posted,
            "delivery": DELIVERY_POSTED if posted else DELIVERY_FAILED,
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
            if conn.execute(self._sql.fenced_update, params).first() is None:
                raise ClaimLost(claim.run_id)

        await self._db.run(work)

    async def request_cancel(
        self, run_id: str, *, console_platform: str = CONSOLE_PLATFORM
    ) -> bool:
        """Cancel an unfinished run; False when it has finished or is unknown.

        A queued run ends ``cancelled`` at once (nobody has started it; its thread is free
        again, and any runner's next sweep delivers the outcome); a running one is flagged and
        stops at its next step.
        """
        params = {
            "run_id": run_id,
            "console_platform": console_platform,
            **self._sql.clock.params(),
        }

        def work(conn: Connection) -> bool:
            if conn.execute(self._sql.cancel_queued, params).first() is not None:
                return True
            return conn.execute(self._sql.cancel_running, params).first() is not None

        return await self._db.run(work)

    async def set_progress_message(self, run_id: str, message_id: str) -> None:
        stmt = update(_runs).where(_runs.c.id == run_id).values(progress_message_id=message_id)
        await self._db.run(lambda conn: conn.execute(stmt))

    async def active_runs_for_user(self, requested_by: str) -> list[RunRecord]:
        stmt = SELECT_RUNS.where(
            _runs.c.requested_by == requested_by,
            _runs.c.status.in_(UNFINISHED_STATUSES),
        )
        return await self._runs(stmt.order_by(_runs.c.created_at, _runs.c.id))

    async def recent_runs_for_user(self, requested_by: str, limit: int = 10) -> list[RunRecord]:
        stmt = SELECT_RUNS.where(_runs.c.requested_by == requested_by)
        return await self._runs(newest_first(stmt).limit(limit))

    async def recent_runs_in_channel(
        self, platform: str, workspace: str, channel: str, limit: int = 10
    ) -> list[RunRecord]:
        """The newest runs of every thread in one channel (a DingTalk conversation), newest
        first."""
        stmt = SELECT_RUNS.where(
            _threads.c.platform == platform,
            _threads.c.workspace == workspace,
            _threads.c.channel == channel,
        )
        return await self._runs(newest_first(stmt).limit(limit))

    async def latest_run_in_thread(self, thread_key: str) -> RunRecord | None:
        """The newest run of the thread with this key; None if it has none (or no thread)."""
        return await self._db.run(
            lambda conn: one_run(conn, _LATEST_RUN_IN_THREAD, thread_key=thread_key)
        )

    async def thread_runs(self, thread_id: int) -> list[RunRecord]:
        stmt = SELECT_RUNS.where(_runs.c.thread_id == thread_id)
        return await self._runs(stmt.order_by(_runs.c.created_at, _runs.c.id))

    async def run_sources(self, run_id: str) -> list[SourceRecord]:
        stmt = (
            select(_sources.c.n, _sources.c.title, _sources.c.url)
            .where(_sources.c.run_id == run_id)
            .order_by(_sources.c.n)
        )

        def work(conn: Connection) -> list[SourceRecord]:
            return [SourceRecord(n=n, title=title, url=url) for n, title, url in conn.execute(stmt)]

        return await self._db.run(work)

    async def digest_history(
        self, digest_id: str, before: datetime
    ) -> tuple[RunRecord | None, set[str]]:
        """For a digest's firing created at ``before``: the latest earlier firing that
        succeeded, and the URLs of every source its earlier firings found."""
        earlier = _runs.c.digest_id == digest_id
        previous = (
            SELECT_RUNS.where(earlier, _runs.c.status == "succeeded", _runs.c.created_at < before)
            .order_by(_runs.c.created_at.desc(), _runs.c.id.desc())
            .limit(1)
        )
        urls = (
            select(_sources.c.url)
            .join(_runs, _runs.c.id == _sources.c.run_id)
            .where(earlier, _runs.c.created_at < before)
            .distinct()
        )

        def work(conn: Connection) -> tuple[RunRecord | None, set[str]]:
            row = conn.execute(previous).mappings().first()
            return (
                None if row is None else run_record(row),
                {str(url) for (url,) in conn.execute(urls)},
            )

        return await self._db.run(work)

    async def requeue_run(self, run_id: str) -> RunRecord:
        """Make a failed or cancelled run resumable from its checkpoint, with fresh attempts
        (the fence moves on: whoever held it before holds nothing).

        A succeeded or unfinished run is left as it is. Raises :class:`ThreadBusy` when its
        thread has another active run by now.
        """
        stmt = (
            update(_runs)
            .where(_runs.c.id == run_id, _runs.c.status.in_(("failed", "cancelled")))
            .values(
                status="queued",
                finished_at=None,
                error=None,
                cancel_requested=False,
                owner=None,
                fence=_runs.c.fence + 1,
                attempt=0,
                heartbeat_at=self._sql.now,
                delivery=None,
                report_parts_posted=0,
                delivery_attempts=0,
                delivery_error=None,
            )
        )

        params = self._sql.clock.params()

        def work(conn: Connection) -> RunRecord:
            conn.execute(stmt, params)
            return require_run(conn, run_id)

        try:
            return await self._db.run(work)
        except IntegrityError:  # the partial unique index: the thread is busy
            run = await self.get_run(run_id)
            active = None
            if run is not None:
                active = await self._db.run(
                    lambda conn: one_run(conn, _ACTIVE_RUN_IN_THREAD, tid=run.thread_id)
                )
            raise ThreadBusy(active) from None

    async def count_runs(self, statuses: Sequence[str] | None = None) -> list[tuple[str, str, int]]:
        """How many runs there are by (status, platform); only ``statuses`` when given (an
        index look-up, not a pass over every run ever made)."""
        stmt = (
            select(_runs.c.status, _threads.c.platform, func.count())
            .join(_threads, _threads.c.id == _runs.c.thread_id)
            .group_by(_runs.c.status, _threads.c.platform)
        )
        if statuses is not None:
            stmt = stmt.where(_runs.c.status.in_(list(statuses)))

        def work(conn: Connection) -> list[tuple[str, str, int]]:
            return [(str(s), str(p), int(n)) for s, p, n in conn.execute(stmt)]

        return await self._db.run(work)

    # -- helpers ------------------------------------------------------------------------

    async def _runs(self, stmt: Select[Any]) -> list[RunRecord]:
        def work(conn: Connection) -> list[RunRecord]:
            return [run_record(row) for row in conn.execute(stmt).mappings()]

        return await self._db.run(work)


def _usage_values(usage: Mapping[str, int]) -> dict[str, int]:
    unknown = set(usage) - set(USAGE_KEYS)
    if unknown:
        raise ValueError(f"unknown usage counters {sorted(unknown)}; known: {USAGE_KEYS}")
    return {name: int(value) for name, value in usage.items()}
