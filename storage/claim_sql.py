"""The SQL of the run lifecycle (``claims.py``), built once: the fenced writes, the claim
and sweep statements, and the compare-and-swap on a thread's variables.

The statements of the per-round hot path (checkpoint, run start and finish) are built with
bind parameters, so each call skips building and cache-keying them; those that read the
lease clock or the dialect's upsert are built per database by :class:`ClaimStatements`.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import (
    String,
    Table,
    and_,
    bindparam,
    case,
    delete,
    false,
    func,
    or_,
    select,
    update,
)

from core.values import FINISHED_STATUSES, UNFINISHED_STATUSES, DeliveryState
from storage.lifecycle import DELIVERY_WHEN_ENDED, EPOCH, LeaseClock
from storage.sql import SELECT_RUNS, VARIABLE_COLUMNS
from storage.tables import ResearchRun, RunSource, Thread, ThreadVariables

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_variables = cast(Table, ThreadVariables.__table__)
_sources = cast(Table, RunSource.__table__)

RUN_WITH_VARIABLES_BY_ID = (
    SELECT_RUNS.add_columns(*VARIABLE_COLUMNS, _variables.c.version.label("variables_version"))
    .outerjoin(_variables, _variables.c.thread_id == _runs.c.thread_id)
    .where(_runs.c.id == bindparam("run_id"))
)
#: The writes of a claim's holder only apply while it still holds the run.
_FENCE = (
    _runs.c.id == bindparam("run_id"),
    _runs.c.owner == bindparam("fence_owner"),
    _runs.c.fence == bindparam("fence_token"),
)
_LAST_SEEN = func.coalesce(_runs.c.heartbeat_at, _runs.c.created_at)
_RUNNING = _runs.c.status == "running"
#: What a run was before a claim (how it was taken: ``ClaimResult.how``).
RUN_BEFORE_CLAIM = select(_runs.c.status, _runs.c.started_at).where(
    _runs.c.id == bindparam("run_id")
)
RELEASE = (
    update(_runs)
    .where(*_FENCE)
    .values(
        owner=None,
        heartbeat_at=EPOCH,
        # A handed-back attempt does not count against FATHOM_MAX_ATTEMPTS (the fence
        # stays: it never goes back).
        status=case((_RUNNING, "queued"), else_=_runs.c.status),
        attempt=case((_RUNNING, _runs.c.attempt - 1), else_=_runs.c.attempt),
    )
    .returning(_runs.c.status)
)
FENCED_UPDATE = update(_runs).where(*_FENCE).returning(_runs.c.id)
DELETE_SOURCES = delete(_sources).where(_sources.c.run_id == bindparam("run_id"))
_VARIABLE_VALUES = (
    "topics",
    "next_search_topic",
    "findings",
    "should_continue",
    "strategy_state",
    "files",
    "guidance",
    "updated_at",
)
UPDATE_VARIABLES = (
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
#: The same, leaving the stored ``files`` as they are (the run read no file since its last
#: checkpoint: their text, up to megabytes, is not written again at every step).
UPDATE_VARIABLES_KEEP_FILES = (
    update(_variables)
    .where(
        _variables.c.thread_id == bindparam("tid"),
        _variables.c.version == bindparam("expected_version"),
    )
    .values(
        {name: bindparam(f"new_{name}") for name in _VARIABLE_VALUES if name != "files"}
        | {"version": _variables.c.version + 1}
    )
    .returning(_variables.c.version)
)
LOAD_VARIABLES = select(*VARIABLE_COLUMNS, _variables.c.version).where(
    _variables.c.thread_id == bindparam("tid")
)


class ClaimStatements:
    """The claim statements that read the :class:`~storage.lifecycle.LeaseClock` or the
    dialect's upsert, built once for the dialect."""

    def __init__(self, clock: LeaseClock, upsert: Any) -> None:
        now, cutoff = clock.now, clock.cutoff
        stale = _LAST_SEEN < cutoff
        claimable = or_(_runs.c.status == "queued", and_(_runs.c.status == "running", stale))
        # A forced claim (``from_owner``) takes the run only from the holder judged dead.
        from_owner = bindparam("from_owner", type_=String())
        held_by_expected = or_(from_owner.is_(None), _runs.c.owner == from_owner)
        held = _runs.c.owner.is_not(None)
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
        self.claim_delivery = (
            update(_runs)
            .where(
                _runs.c.id == bindparam("run_id"),
                _runs.c.status.in_(FINISHED_STATUSES),
                _runs.c.delivery == DeliveryState.PENDING,
                stale,
                held_by_expected,
            )
            .values(
                claim_values
                | {
                    # The runner that was delivering it stopped: that counts as a failed
                    # attempt, so a delivery that keeps killing its runners ends
                    # (FATHOM_DELIVERY_ATTEMPTS). A delivery nobody held (a run cancelled
                    # while queued, one handed back at a graceful shutdown) is only due.
                    "delivery_attempts": _runs.c.delivery_attempts + case((held, 1), else_=0),
                    "delivery_error": case(
                        (
                            held,
                            func.coalesce(
                                _runs.c.delivery_error, "the process delivering it stopped"
                            ),
                        ),
                        else_=_runs.c.delivery_error,
                    ),
                }
            )
            .returning(_runs.c.id)
        )
        self.renew = (
            update(_runs)
            .where(*_FENCE)
            .values(heartbeat_at=now)
            .returning(_runs.c.status, _runs.c.cancel_requested)
        )
        # SET also takes the usage counters present in each call's parameters.
        self.checkpoint_run = (
            update(_runs)
            .where(*_FENCE, _RUNNING)
            .values(heartbeat_at=now)
            .returning(_runs.c.thread_id, _runs.c.cancel_requested, _runs.c.stop_requested)
        )
        self.finish_run = (
            update(_runs).where(*_FENCE, _RUNNING).values(heartbeat_at=now).returning(_runs.c.id)
        )
        # A report is recorded only while no cancel was asked for (in the same statement, so
        # a cancel racing it either lands first, and the run ends cancelled, or finds it
        # finished and is told the report is being posted).
        self.finish_run_uncancelled = (
            update(_runs)
            .where(*_FENCE, _RUNNING, _runs.c.cancel_requested == false())
            .values(heartbeat_at=now)
            .returning(_runs.c.id)
        )
        self.count_delivery_failure = (
            update(_runs)
            .where(*_FENCE)
            .values(delivery_attempts=_runs.c.delivery_attempts + 1, heartbeat_at=now)
            .returning(_runs.c.delivery_attempts)
        )
        self.finish_delivery = (
            update(_runs)
            .where(*_FENCE, _runs.c.delivery == DeliveryState.PENDING)
            .values(report_posted_at=case((bindparam("posted"), now), else_=None))
            .returning(_runs.c.id)
        )
        has_work = or_(
            _runs.c.status.in_(UNFINISHED_STATUSES), _runs.c.delivery == DeliveryState.PENDING
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
        variables = upsert(_variables)
        self.insert_variables = variables.on_conflict_do_nothing(
            index_elements=[_variables.c.thread_id]
        ).returning(_variables.c.version)
