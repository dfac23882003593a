"""Elections: one replica at a time holds a named role (a platform's long-lived connection,
the digest scheduler), by a lease in the database.

An election is not a run's lease (``core/research/lease.py``: the heartbeat of the runner that
claimed a run). It has a name, every replica as a candidate, and one holder at a time, recorded in
``storage.LeaseStore`` (table ``leases``) under the election's name.

Every candidate votes every third of the lease (:meth:`Election.vote`): it takes the lease
when nobody holds it or it expired, and renews it while it holds it. A holder that dies stops
renewing; its lease expires and the next vote of another replica takes it over, within
``lease + lease / 3`` seconds (60 s by default). A holder that cannot reach the database keeps
its role until its lease has run out by its own clock, then drops it: another replica may
take it from then on, so two replicas never hold a role at once for longer than a clock skew.
Resigning (a graceful stop, or a role that could not start) releases the lease at once, so
another replica takes over at its next vote.

What a replica does on winning or losing is its own business
(:class:`core.operations.duty.OneHolder` starts and stops a connection,
:class:`core.operations.scheduler.DigestScheduler` catches up and keeps its jobs);
:meth:`Election.vote` says what changed.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from core import config
from storage import LeaseStore
from storage.tables import utcnow

log = logging.getLogger(__name__)

#: How long an election's lease lasts without renewal (seconds); candidates vote every third
#: of it (``FATHOM_LEASE``'s default, defined with the settings so they stay light to import).
LEASE = config.LEASE


class Change(enum.Enum):
    """What one vote changed, as this replica sees it."""

    TAKEN = "taken"  # this replica holds it now, and did not before
    KEPT = "kept"  # this replica held it and renewed it
    LOST = "lost"  # this replica held it; another replica does now
    STANDBY = "standby"  # another replica holds it, as before
    UNREACHABLE = "unreachable"  # the database did not answer; nothing changed yet
    EXPIRED = "expired"  # the database did not answer and this replica's lease ran out


class Election:
    """One replica's candidacy in the election ``name``."""

    def __init__(
        self,
        name: str,
        leases: LeaseStore,
        *,
        owner: str,
        label: str | None = None,
        lease: float = LEASE,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.name = name
        self.owner = owner
        self.label = label or name  # how log lines name it
        self.lease = lease
        self._leases = leases
        self._clock = clock
        self.holder = False  # by the last vote that reached the database
        self._expires = clock()

    @property
    def vote_every(self) -> float:
        """How often to vote: a holder renews three times per lease, so one failed renewal
        does not cost it the role."""
        return self.lease / 3

    @property
    def holds(self) -> bool:
        """Holder, and the lease not run out by this replica's clock (a stalled replica must
        not act on a lease another replica may have taken)."""
        return self.holder and self._clock() < self._expires

    async def vote(self, now: datetime | None = None) -> Change:
        """Take or renew the lease. Never raises for the database: an unreachable one keeps
        this replica's role until the lease it last renewed runs out."""
        now = now or self._clock()
        try:
            held = await self._leases.acquire(self.name, self.owner, self.lease, now)
        except Exception:
            log.warning("%s: the lease could not be renewed", self.label, exc_info=True)
            if self.holder and now >= self._expires:  # ours has run out: someone may take it
                log.warning("%s: lease expired while unreachable; standing by", self.label)
                self.holder = False
                return Change.EXPIRED
            return Change.UNREACHABLE
        if held:
            self._expires = now + timedelta(seconds=self.lease)
            change = Change.KEPT if self.holder else Change.TAKEN
        else:
            change = Change.LOST if self.holder else Change.STANDBY
        self.holder = held
        return change

    async def resign(self) -> None:
        """Give the role up and release the lease at once (another replica takes it at its
        next vote); a release that fails leaves the lease to expire."""
        self.holder = False
        try:
            await self._leases.release(self.name, self.owner)
        except Exception:
            log.warning("%s: the lease could not be released; it expires", self.label)

    async def who_holds(self) -> str | None:
        """The holder by the database now (None: nobody, or its lease expired)."""
        return await self._leases.holder(self.name, self._clock())
