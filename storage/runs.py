"""Runs as everyone but their runner sees them: created (once per platform delivery, one
active per thread), found, listed, counted, cancelled and requeued.

What a runner holding a run writes is :mod:`storage.claims`. Races between processes
(retried platform deliveries, concurrent requests in one thread) are settled by unique
constraints through ``INSERT ... ON CONFLICT``, which keeps the transaction usable on
PostgreSQL (no aborted transaction to recover from) and works the same on SQLite. What no
constraint can say (a requester's unfinished runs, their runs and tokens today) is counted
under the requester's admission lock (:func:`lock_admission`), so requests racing on any
number of replicas are admitted one after another.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast
from uuid import uuid4

from sqlalchemy import (
    Select,
    Table,
    and_,
    bindparam,
    case,
    exists,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from core.values import (
    UNFINISHED_STATUSES,
    DeliveryState,
    ReportDocument,
    RunStatus,
    SourceChoice,
    ThreadKey,
)
from storage.db import Database
from storage.errors import QuotaReached, ThreadBusy, UserBusy
from storage.lifecycle import CONSOLE_PLATFORM, DELIVERY_WHEN_ENDED, EPOCH, LeaseClock
from storage.records import (
    Admission,
    CancelRequest,
    DailyQuota,
    RunPosition,
    RunRecord,
    RunUsage,
    SourceRecord,
    StopRequest,
)
from storage.sql import (
    RUN_BY_ID,
    SELECT_RUNS,
    fit_key,
    newest_first,
    one_run,
    require_run,
    run_record,
    upsert_for,
)
from storage.tables import ResearchRun, RunSource, Thread, utcnow

#: How often create_run retries when the thread's active run finished while it looked.
_CREATE_ATTEMPTS = 3

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_sources = cast(Table, RunSource.__table__)

_LATEST_RUN_IN_THREAD = (
    SELECT_RUNS.where(_threads.c.key == bindparam("thread_key"))
    .order_by(_runs.c.created_at.desc(), _runs.c.id.desc())
    .limit(1)
)
_ACTIVE_RUN_IN_THREAD = SELECT_RUNS.where(
    _runs.c.thread_id == bindparam("tid"), _runs.c.status.in_(UNFINISHED_STATUSES)
)
_ACTIVE_RUN_IN_THREAD_BY_KEY = SELECT_RUNS.where(
    _threads.c.key == bindparam("thread_key"), _runs.c.status.in_(UNFINISHED_STATUSES)
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
_SPENT = _runs.c.prompt_tokens + _runs.c.completion_tokens
#: What a run counts against its requester's daily tokens: a queued or running run its
#: allowance (reserved when it was admitted) or what it spent, whichever is more; a finished
#: one what it spent (its reservation settled).
_CHARGED = case(
    (
        and_(_runs.c.status.in_(UNFINISHED_STATUSES), _runs.c.token_allowance > _SPENT),
        _runs.c.token_allowance,
    ),
    else_=_SPENT,
)
_TODAYS = (
    _runs.c.requested_by == bindparam("requested_by"),
    _runs.c.created_at >= bindparam("since"),
    _runs.c.digest_id.is_(None),
)
#: A requester's runs today, the tokens they spent, and the tokens they count (reservations
#: included).
_USED_TODAY = select(
    func.count(),
    func.coalesce(func.sum(_SPENT), 0),
    func.coalesce(func.sum(_CHARGED), 0),
).where(*_TODAYS)
#: The tokens a requester's other runs today count.
_CHARGED_TODAY_BUT = select(func.coalesce(func.sum(_CHARGED), 0)).where(
    *_TODAYS, _runs.c.id != bindparam("run_id")
)
#: How many tokens the last succeeded runs spent, and their depths (a new run's estimate).
_RECENT_RUNS = (
    select(_SPENT.label("spent"), _runs.c.depth)
    .where(_runs.c.status == RunStatus.SUCCEEDED, _runs.c.depth > 0)
    .order_by(_runs.c.finished_at.desc())
    .limit(20)
    .subquery()
)
_RECENT_SPENDING = select(
    func.coalesce(func.sum(_RECENT_RUNS.c.spent), 0),
    func.coalesce(func.sum(_RECENT_RUNS.c.depth), 0),
)
_ALLOWANCE = select(_runs.c.token_allowance, _SPENT, _runs.c.status).where(
    _runs.c.id == bindparam("run_id")
)
_DEDUPE_USED = select(exists().where(_runs.c.dedupe_key == bindparam("dedupe_key")))
#: Lock a run's row for a cancel or a stop and read what decides it (an update that
#: changes nothing: a row lock on PostgreSQL, the write lock on SQLite). Every later
#: statement of the transaction sees the run as it is until the commit: a runner handing it
#: back (running -> queued) or claiming it (queued -> running), or another request, waits.
_LOCK_FOR_REQUEST = (
    update(_runs)
    .where(_runs.c.id == bindparam("run_id"))
    .values(cancel_requested=_runs.c.cancel_requested)
    .returning(
        _runs.c.status,
        _runs.c.cancel_requested,
        _runs.c.stop_requested,
        _runs.c.delivery,
        _runs.c.started_at,
    )
)
#: The first key of the per-user admission locks (``pg_advisory_xact_lock(key, hashtext(user))``;
#: two users whose names hash alike only wait for each other).
_PG_ADMISSION_LOCK = 0x46A75301
_LOCK_USER = text("SELECT pg_advisory_xact_lock(:lock, hashtext(:requested_by))")
_FLAG_CANCEL = update(_runs).where(_runs.c.id == bindparam("run_id")).values(cancel_requested=True)
_FLAG_STOP = update(_runs).where(_runs.c.id == bindparam("run_id")).values(stop_requested=True)


class RunStore:
    """Runs created, found, cancelled and requeued by anyone (not fenced by a claim)."""

    def __init__(
        self, database: Database, *, on_new_run: Callable[[Connection, str], None] | None = None
    ) -> None:
        """``on_new_run(conn, run_id)`` runs in the transaction that creates a run (the job
        queue of ``FATHOM_QUEUE=procrastinate`` queues it there: committed means queued)."""
        self._db = database
        self._on_new_run = on_new_run
        self._clock = clock = LeaseClock(database.dialect)
        upsert = upsert_for(database.dialect)
        thread = upsert(_threads)
        self._upsert_thread = thread.on_conflict_do_update(
            index_elements=[_threads.c.key], set_={"updated_at": thread.excluded.updated_at}
        ).returning(_threads.c.id)
        # No conflict target: a used dedupe key and a busy thread (the partial unique index
        # on active runs) both insert nothing, and the transaction stays usable on PostgreSQL.
        # RETURNING the new row saves create_run a SELECT (a round trip on PostgreSQL).
        # The heartbeat starts at creation, on the lease clock: a queued run nobody takes is
        # swept once it is as old as a dead runner's heartbeat.
        self._insert_run = (
            upsert(_runs)
            .values(heartbeat_at=clock.now)
            .on_conflict_do_nothing()
            .returning(*_runs.c)
        )
        self._cancel_queued = (
            update(_runs)
            .where(_runs.c.id == bindparam("run_id"), _runs.c.status == RunStatus.QUEUED)
            .values(
                status="cancelled",
                cancel_requested=True,
                finished_at=clock.now,
                owner=None,
                heartbeat_at=EPOCH,  # its delivery is due at once
                delivery=DELIVERY_WHEN_ENDED,
            )
            .returning(_runs.c.id)
        )

    @property
    def queues_new_runs(self) -> bool:
        """Whether a new run is queued by the transaction that creates it (``on_new_run``)."""
        return self._on_new_run is not None

    async def create_run(
        self,
        *,
        thread: ThreadKey,
        topic: str,
        depth: int,
        strategy: str,
        requested_by: str | None = None,
        dedupe_key: str | None = None,
        platform_context: dict[str, Any] | None = None,
        digest_id: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
        sources: SourceChoice = SourceChoice.ALL,
        admission: Admission | None = None,
    ) -> tuple[RunRecord, bool]:
        """Queue a run in ``thread`` (created on demand).

        Returns ``(run, True)``, or ``(existing_run, False)`` when ``dedupe_key`` was
        already used: the same platform delivery seen twice yields one run. Raises
        :class:`ThreadBusy` when the thread already has a queued or running run; the
        database settles races (a partial unique index), so two requests racing in one
        thread never both get a run. With ``admission.user_limit``, raises :class:`UserBusy`
        when ``requested_by`` already has that many unfinished runs; a redelivery (a run with
        ``dedupe_key`` exists) is never refused. With ``admission.quota``, raises
        :class:`QuotaReached` when ``requested_by`` has used today's runs or tokens (spent, or
        reserved by their unfinished runs); with a token quota, the new run reserves its share
        of what is left (``token_allowance``, see :class:`DailyQuota`). All are counted in the
        transaction that inserts the run, under the requester's admission lock
        (:func:`lock_admission`): requests of one user racing on any number of replicas are
        decided one after another, each seeing the runs the earlier ones made.
        """
        now = utcnow()
        if dedupe_key is not None:
            dedupe_key = fit_key(dedupe_key)
        thread_key = str(thread)
        platform = thread.platform
        user_limit = admission.user_limit if admission is not None else None
        quota = admission.quota if admission is not None else None
        thread_row = {
            "key": thread_key,
            "platform": platform,
            "workspace": thread.workspace,
            "channel": thread.channel,
            "thread_ref": thread.thread,
            "created_at": now,
            "updated_at": now,
        }
        run = {
            "id": uuid4().hex,
            "topic": topic,
            "depth": depth,
            "strategy": strategy,
            "status": RunStatus.QUEUED.value,
            "requested_by": requested_by,
            "dedupe_key": dedupe_key,
            "platform_context": platform_context,
            "digest_id": digest_id,
            "attachments": attachments or None,
            "sources": SourceChoice(sources).value,
            "notes": [],
            "created_at": now,
            **self._clock.params(),
        }

        limited = quota is not None or user_limit is not None
        dialect = self._db.dialect

        def work(conn: Connection) -> tuple[RunRecord, bool]:
            allowance = None
            if limited and requested_by is not None:
                lock_admission(conn, dialect, requested_by)
            if quota is not None and requested_by is not None:
                allowance = _check_quota(conn, quota, requested_by, dedupe_key, depth)
            if user_limit is not None and requested_by is not None:
                counted = {"requested_by": requested_by, "dedupe_key": dedupe_key}
                unfinished, seen = conn.execute(_ACTIVE_RUN_COUNT, counted).one()
                if not seen and unfinished >= user_limit:
                    raise UserBusy(int(unfinished), user_limit)
            thread_id = conn.execute(self._upsert_thread, thread_row).scalar_one()
            values = {**run, "thread_id": thread_id, "token_allowance": allowance}
            for _ in range(_CREATE_ATTEMPTS):
                row = conn.execute(self._insert_run, values)
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

    async def request_cancel(
        self, run_id: str, *, console_platform: str = CONSOLE_PLATFORM
    ) -> CancelRequest:
        """Cancel an unfinished run (see :class:`CancelRequest`).

        A queued run ends ``cancelled`` at once (nobody has started it; its thread is free
        again, and any runner's next sweep delivers the outcome); a running one is flagged
        (``cancelling``) and stops at its next step, its writer stopped if it is writing. A
        run already asked to cancel is ``already`` (of two requests racing, the second). A
        run that finished with its report while being posted is ``posting``: the report goes
        out. Decided under the run's row lock, so a runner handing the run back or claiming
        it meanwhile never makes a cancel get lost.
        """
        params = {
            "run_id": run_id,
            "console_platform": console_platform,
            **self._clock.params(),
        }

        def work(conn: Connection) -> CancelRequest:
            row = conn.execute(_LOCK_FOR_REQUEST, params).first()
            if row is None:
                return CancelRequest.ENDED
            status, flagged, _, delivery, _ = row
            if status == RunStatus.QUEUED:  # flagged: a cancelled run handed back; end it now
                conn.execute(self._cancel_queued, params)
                return CancelRequest.ALREADY if flagged else CancelRequest.CANCELLED
            if flagged and status == RunStatus.RUNNING:
                return CancelRequest.ALREADY
            if flagged and status == RunStatus.CANCELLED and delivery == DeliveryState.PENDING:
                return CancelRequest.ALREADY  # being wound up: its outcome is not out yet
            if status == RunStatus.RUNNING:
                conn.execute(_FLAG_CANCEL, params)
                return CancelRequest.CANCELLING
            if status == RunStatus.SUCCEEDED and delivery == DeliveryState.PENDING:
                return CancelRequest.POSTING
            return CancelRequest.ENDED

        return await self._db.run(work)

    async def request_stop(
        self, run_id: str, *, console_platform: str = CONSOLE_PLATFORM
    ) -> StopRequest:
        """Stop and write now: a running run is flagged and, at its next step, stops
        searching and writes its report from what it found (``stopping``), and so is a run
        handed back to the queue after it started (a worker shutting down: the next runner
        stops it); a run queued before it ever started has found nothing to write from, so
        it is cancelled (``cancelled``); ``ended`` when it has finished, is unknown, or was
        already asked to stop or cancel (a repeated press). Decided under the run's row
        lock, like :meth:`request_cancel`."""
        params = {
            "run_id": run_id,
            "console_platform": console_platform,
            **self._clock.params(),
        }

        def work(conn: Connection) -> StopRequest:
            row = conn.execute(_LOCK_FOR_REQUEST, params).first()
            if row is None:
                return StopRequest.ENDED
            status, cancelling, stopping, _, started_at = row
            if status not in ("queued", "running") or cancelling or stopping:
                return StopRequest.ENDED
            if status == RunStatus.QUEUED and started_at is None:
                conn.execute(self._cancel_queued, params)
                return StopRequest.CANCELLED
            conn.execute(_FLAG_STOP, params)
            return StopRequest.STOPPING

        return await self._db.run(work)

    async def extend_allowance(
        self, run_id: str, requested_by: str, quota: DailyQuota, more: int
    ) -> int | None:
        """Grow a running run's token allowance by up to ``more`` tokens, as far as its
        requester's daily ``quota`` (the day its run was made) has room left by their other
        runs, and at most ``quota.run_tokens``; decided under the requester's admission lock,
        so two runs of one user growing at once (or a request admitted meanwhile) never pass
        the quota together. Returns the allowance now (None: the run has none)."""
        dialect = self._db.dialect

        def work(conn: Connection) -> int | None:
            lock_admission(conn, dialect, requested_by)
            row = conn.execute(_ALLOWANCE, {"run_id": run_id}).first()
            if row is None or row[0] is None or quota.tokens is None:
                return None if row is None else row[0]
            allowance, spent, status = int(row[0]), int(row[1]), row[2]
            if status not in UNFINISHED_STATUSES:
                return allowance
            others = conn.execute(
                _CHARGED_TODAY_BUT,
                {"requested_by": requested_by, "since": quota.since, "run_id": run_id},
            ).scalar_one()
            grown = min(max(allowance, spent) + more, quota.tokens - int(others))
            if quota.run_tokens is not None:
                grown = min(grown, quota.run_tokens)
            if grown <= allowance:
                return allowance
            conn.execute(update(_runs).where(_runs.c.id == run_id).values(token_allowance=grown))
            return grown

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
                stop_requested=False,
                stop_reason=None,
                started_at=None,  # an explicit resume starts the run's time budget again
                owner=None,
                fence=_runs.c.fence + 1,
                attempt=0,
                # The lease clock's now: a sweep leaves a requeued run to the caller that is
                # about to claim it.
                heartbeat_at=self._clock.now,
                delivery=None,
                report_parts_posted=0,
                delivery_attempts=0,
                delivery_error=None,
            )
        )

        params = self._clock.params()

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

    async def set_progress_message(self, run_id: str, message_id: str) -> None:
        stmt = update(_runs).where(_runs.c.id == run_id).values(progress_message_id=message_id)
        await self._db.run(lambda conn: conn.execute(stmt))

    async def record_report_document(
        self, run_id: str, document: ReportDocument
    ) -> ReportDocument | None:
        """Record what the run's long report became (a document, or refused), unless one is
        recorded already: the first record wins, and the one recorded is returned (None: no
        such run). A delivery that finds another's document recorded deletes its own."""
        value = document.model_dump(mode="json")
        stmt = (
            update(_runs)
            .where(_runs.c.id == run_id, _runs.c.report_document.is_(None))
            .values(report_document=value)
        )
        read = select(_runs.c.report_document).where(_runs.c.id == run_id)

        def record(conn: Connection) -> Any:
            conn.execute(stmt)
            return conn.execute(read).scalar_one_or_none()

        stored = await self._db.run(record)
        return ReportDocument.model_validate(stored) if stored else None

    async def reserve_progress_message(self, run_id: str, marker: str) -> bool:
        """Mark a queued run without a progress message as having one on the way (its
        request's answer posts it: ``bots.chat.announce``), in one statement: False when the
        run is no longer queued (a runner took it, and posts its own) or has a message."""
        stmt = (
            update(_runs)
            .where(
                _runs.c.id == run_id,
                _runs.c.status == RunStatus.QUEUED,
                _runs.c.progress_message_id.is_(None),
            )
            .values(progress_message_id=marker)
            .returning(_runs.c.id)
        )
        return await self._db.run(lambda conn: conn.execute(stmt).first() is not None)

    async def settle_progress_message(
        self, run_id: str, marker: str, message_id: str | None
    ) -> bool:
        """Replace ``marker`` (:meth:`reserve_progress_message`) with the message posted
        (None: none was), in one statement: False when the run's runner stopped waiting for
        it and posted a message of its own meanwhile."""
        stmt = (
            update(_runs)
            .where(_runs.c.id == run_id, _runs.c.progress_message_id == marker)
            .values(progress_message_id=message_id)
            .returning(_runs.c.id)
        )
        return await self._db.run(lambda conn: conn.execute(stmt).first() is not None)

    async def queue_place(self, run_id: str) -> int | None:
        """The run's place among the queued runs, oldest first (1: next to start); None
        when it is not queued."""
        earlier = select(func.count()).where(
            _runs.c.status == RunStatus.QUEUED,
            (_runs.c.created_at < bindparam("created"))
            | ((_runs.c.created_at == bindparam("created")) & (_runs.c.id < run_id)),
        )
        mine = select(_runs.c.status, _runs.c.created_at).where(_runs.c.id == run_id)

        def work(conn: Connection) -> int | None:
            row = conn.execute(mine).first()
            if row is None or row.status != RunStatus.QUEUED:
                return None
            return int(conn.execute(earlier, {"created": row.created_at}).scalar_one()) + 1

        return await self._db.run(work)

    # -- queries ----------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._db.run(lambda conn: one_run(conn, RUN_BY_ID, run_id=run_id))

    async def active_runs_for_user(self, requested_by: str) -> list[RunRecord]:
        stmt = SELECT_RUNS.where(
            _runs.c.requested_by == requested_by,
            _runs.c.status.in_(UNFINISHED_STATUSES),
        )
        return await self._records(stmt.order_by(_runs.c.created_at, _runs.c.id))

    async def recent_runs_for_user(
        self, requested_by: str, limit: int = 10, before: RunPosition | None = None
    ) -> list[RunRecord]:
        stmt = SELECT_RUNS.where(_runs.c.requested_by == requested_by)
        if before is not None:  # older than ``before`` in the newest-first order
            created, run_id = before
            stmt = stmt.where(
                or_(
                    _runs.c.created_at < created,
                    and_(_runs.c.created_at == created, _runs.c.id < run_id),
                )
            )
        return await self._records(newest_first(stmt).limit(limit))

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
        return await self._records(newest_first(stmt).limit(limit))

    async def active_runs_in_channel(
        self, platform: str, workspace: str, channel: str
    ) -> list[RunRecord]:
        """The queued and running runs of every thread in one channel, oldest first (the bot
        removed from it: none of them can post there any more)."""
        stmt = SELECT_RUNS.where(
            _threads.c.platform == platform,
            _threads.c.workspace == workspace,
            _threads.c.channel == channel,
            _runs.c.status.in_(UNFINISHED_STATUSES),
        )
        return await self._records(stmt.order_by(_runs.c.created_at, _runs.c.id))

    async def usage_since(
        self,
        since: datetime,
        *,
        requested_by: str | None = None,
        channel: tuple[str, str, str] | None = None,
    ) -> list[RunUsage]:
        """The counters of the runs created since ``since``: one requester's, or one
        channel's (``(platform, workspace, channel)``), without their reports."""
        stmt = (
            select(
                _runs.c.prompt_tokens,
                _runs.c.completion_tokens,
                _runs.c.searches,
                _runs.c.tokens_by_model,
                _runs.c.created_at,
            )
            .select_from(_runs.join(_threads, _threads.c.id == _runs.c.thread_id))
            .where(_runs.c.created_at >= since)
        )
        if requested_by is not None:
            stmt = stmt.where(_runs.c.requested_by == requested_by)
        if channel is not None:
            platform, workspace, name = channel
            stmt = stmt.where(
                _threads.c.platform == platform,
                _threads.c.workspace == workspace,
                _threads.c.channel == name,
            )

        def work(conn: Connection) -> list[RunUsage]:
            return [
                RunUsage(int(p), int(c), int(s), dict(models or {}), created)
                for p, c, s, models, created in conn.execute(stmt)
            ]

        return await self._db.run(work)

    async def latest_run_in_thread(self, thread_key: str) -> RunRecord | None:
        """The newest run of the thread with this key; None if it has none (or no thread)."""
        return await self._db.run(
            lambda conn: one_run(conn, _LATEST_RUN_IN_THREAD, thread_key=thread_key)
        )

    async def active_run_in_thread(self, thread_key: str) -> RunRecord | None:
        """The thread's queued or running run (at most one); None if it has none. Not
        always its newest: a resumed run is older than the runs made after it ended."""
        return await self._db.run(
            lambda conn: one_run(conn, _ACTIVE_RUN_IN_THREAD_BY_KEY, thread_key=thread_key)
        )

    async def thread_runs(self, thread_id: int) -> list[RunRecord]:
        stmt = SELECT_RUNS.where(_runs.c.thread_id == thread_id)
        return await self._records(stmt.order_by(_runs.c.created_at, _runs.c.id))

    async def run_sources(self, run_id: str) -> list[SourceRecord]:
        stmt = (
            select(
                _sources.c.n,
                _sources.c.title,
                _sources.c.url,
                _sources.c.published,
                _sources.c.kind,
                _sources.c.server,
            )
            .where(_sources.c.run_id == run_id)
            .order_by(_sources.c.n)
        )

        def work(conn: Connection) -> list[SourceRecord]:
            return [SourceRecord(*row) for row in conn.execute(stmt)]

        return await self._db.run(work)

    async def count_runs(
        self, statuses: Sequence[RunStatus] | None = None
    ) -> list[tuple[str, str, int]]:
        """How many runs there are by (status, platform); only ``statuses`` when given (an
        index look-up, not a pass over every run ever made)."""
        stmt = (
            select(_runs.c.status, _threads.c.platform, func.count())
            .join(_threads, _threads.c.id == _runs.c.thread_id)
            .group_by(_runs.c.status, _threads.c.platform)
        )
        if statuses is not None:
            stmt = stmt.where(_runs.c.status.in_([RunStatus(s).value for s in statuses]))

        def work(conn: Connection) -> list[tuple[str, str, int]]:
            return [(str(s), str(p), int(n)) for s, p, n in conn.execute(stmt)]

        return await self._db.run(work)

    async def _records(self, stmt: Select[Any]) -> list[RunRecord]:
        def work(conn: Connection) -> list[RunRecord]:
            return [run_record(row) for row in conn.execute(stmt).mappings()]

        return await self._db.run(work)


def lock_admission(conn: Connection, dialect: str, requested_by: str) -> None:
    """Hold ``requested_by``'s admission lock until the transaction ends; the first statement
    of a transaction that counts what the requester has before it adds to it.

    PostgreSQL: a transaction-level advisory lock on the user (another transaction of the same
    user, on any replica, waits at this statement; each statement after it sees what the
    earlier ones committed, READ COMMITTED). SQLite: ``BEGIN IMMEDIATE`` takes the database's
    write lock before anything is read, so another process's writer waits for the commit (a
    deferred transaction would count first and take the lock only at its insert, after the
    other had counted too).
    """
    if dialect == "postgresql":
        conn.execute(_LOCK_USER, {"lock": _PG_ADMISSION_LOCK, "requested_by": requested_by})
    elif dialect == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _check_quota(
    conn: Connection, quota: DailyQuota, requested_by: str, dedupe_key: str | None, depth: int
) -> int | None:
    """QuotaReached when ``requested_by`` has used today's runs or tokens (a redelivery of a
    request that already made its run is never refused); else the token allowance the new
    run reserves (None: no token quota, or a redelivery)."""
    if quota.runs is None and quota.tokens is None:
        return None
    if dedupe_key is not None and conn.execute(_DEDUPE_USED, {"dedupe_key": dedupe_key}).scalar():
        return None
    runs, spent, charged = conn.execute(
        _USED_TODAY, {"requested_by": requested_by, "since": quota.since}
    ).one()
    if quota.runs is not None and runs >= quota.runs:
        raise QuotaReached("runs", int(runs), quota.runs)
    if quota.tokens is None:
        return None
    left = quota.tokens - int(charged)
    least = min(quota.least, quota.tokens)
    if left < least:
        raise QuotaReached("tokens", int(charged), quota.tokens, int(charged) - int(spent))
    return max(min(_estimate(conn, quota, depth), left), least)


def _estimate(conn: Connection, quota: DailyQuota, depth: int) -> int:
    """The tokens a run of ``depth`` is expected to spend: the tokens per search round of the
    last 20 succeeded runs (their total over their depths), else ``quota.fallback_per_round``,
    times ``depth``; at most the run's own budget."""
    spent, depths = conn.execute(_RECENT_SPENDING).one()
    per_round = int(spent) / int(depths) if depths else quota.fallback_per_round
    estimate = max(1, math.ceil(per_round * max(1, depth)))
    return estimate if quota.run_tokens is None else min(estimate, quota.run_tokens)
