"""The rules of a run's life that both :class:`~storage.runs.RunStore` and
:class:`~storage.claims.ClaimStore` apply: its statuses, its delivery states, which runs are
delivered at all, and the one clock its heartbeats are read on.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Interval, Table, bindparam, case, func, select

from core.values import DeliveryState
from storage.tables import ResearchRun, Thread, UTCDateTime, utcnow

#: The platform of console threads (``cli:local:local:<id>``; ``core.models.CONSOLE_PLATFORM``).
CONSOLE_PLATFORM = "cli"
#: The heartbeat of a run nobody holds that is due at once (handed back, cancelled while
#: queued): older than any ``stale_after``.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)


def outcome_is_delivered(platform: str) -> bool:
    """Whether a finished run of a thread on ``platform`` has its outcome delivered to that
    thread (its delivery becomes pending): a console run's caller shows the outcome itself.

    :data:`DELIVERY_WHEN_ENDED` is this rule in SQL; keep the two in step.
    """
    return platform != CONSOLE_PLATFORM


_on_console = select(_threads.c.platform).where(
    _threads.c.id == _runs.c.thread_id
).scalar_subquery() == bindparam("console_platform")
#: :func:`outcome_is_delivered` in SQL, for the statements that end a run without its holder
#: (given up, cancelled while queued): the run's new ``delivery``. The console's platform is
#: the statement's ``console_platform`` parameter.
DELIVERY_WHEN_ENDED = case((_on_console, None), else_=DeliveryState.PENDING)


class LeaseClock:
    """The one clock of run heartbeats and their expiry, in SQL.

    Lease timestamps come from one clock: on PostgreSQL the database server's (replicas on
    several machines agree whatever their own clocks say), on SQLite this machine's (every
    process using the file runs here). ``now`` and ``cutoff`` (now minus a call's
    ``stale_after``) go into statements built once; :meth:`params` gives each call's values.
    """

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.now: Any
        self.cutoff: Any
        if dialect == "postgresql":
            self.now = func.now()
            self.cutoff = func.now() - bindparam("stale_after", type_=Interval())
        else:
            self.now = bindparam("now", type_=UTCDateTime())
            self.cutoff = bindparam("cutoff", type_=UTCDateTime())

    def params(self, stale_after: float | None = None) -> dict[str, Any]:
        """The parameters of the lease clock for one call (see the class docstring)."""
        if self.dialect == "postgresql":
            return {} if stale_after is None else {"stale_after": timedelta(seconds=stale_after)}
        now = utcnow()
        params: dict[str, Any] = {"now": now}
        if stale_after is not None:
            params["cutoff"] = now - timedelta(seconds=stale_after)
        return params
