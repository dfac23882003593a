"""A duty that one replica at a time performs (a platform's long-lived connection), held by
winning an election (:mod:`core.operations.election`).

Every replica runs a :class:`OneHolder` per duty. Each tick (a third of the lease) it votes in
the duty's election; the replica that holds it starts the duty, the others stand by. A holder
that dies stops renewing, its lease expires, and the next tick of another replica takes it
over: within ``lease + tick`` seconds (60 s by default). A holder that cannot renew (the
database is unreachable) stops the duty once its lease has run out, so two replicas never hold
a connection at once for longer than a clock skew. A duty that cannot start gives the election
up for the others. A graceful stop stops the duty and resigns at once, so another replica
takes over at its next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from core.operations.election import LEASE, Change, Election
from storage import LeaseStore
from storage.tables import utcnow

log = logging.getLogger(__name__)


class OneHolder:
    def __init__(
        self,
        name: str,
        leases: LeaseStore,
        *,
        owner: str,
        start: Callable[[], Awaitable[None]],
        stop: Callable[[], Awaitable[None]],
        lease: float = LEASE,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.name = name
        self.owner = owner
        self._election = Election(name, leases, owner=owner, lease=lease, clock=clock)
        self._start = start
        self._stop = stop
        # The duty runs here: the election is won and ``start`` returned (the election's own
        # holder flag turns at the vote, before the duty has started).
        self.holder = False
        self._task: asyncio.Task[None] | None = None

    @property
    def tick_every(self) -> float:
        return self._election.vote_every

    def status(self) -> dict[str, object]:
        return {"lease": self.name, "role": "holder" if self.holder else "standby"}

    async def tick(self) -> None:
        """Vote; start the duty on winning the election, stop it on losing it."""
        change = await self._election.vote()
        if change in (Change.TAKEN, Change.KEPT) and not self.holder:
            log.info("%s: this replica (%s) holds it now", self.name, self.owner)
            try:
                await self._start()
            except Exception:
                log.exception("%s: could not start; giving the lease up", self.name)
                with contextlib.suppress(Exception):
                    await self._stop()
                await self._election.resign()
                return
            self.holder = True
        elif change in (Change.LOST, Change.EXPIRED) and self.holder:
            if change is Change.LOST:  # an expired one was logged by the election
                log.warning("%s: lease lost to another replica; standing by", self.name)
            await self._stop_duty()

    async def start(self) -> None:
        """Tick once now (so a single replica holds its duty before it serves), then keep
        ticking in the background."""
        await self.tick()
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=f"lease-{self.name}")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick_every)
            try:
                await self.tick()
            except Exception:  # a duty's failure must not end the loop
                log.exception("%s: tick failed", self.name)

    async def close(self) -> None:
        """Stop ticking, stop the duty and resign (another replica takes over at its next
        tick)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.holder:
            await self._stop_duty()
            await self._election.resign()

    async def _stop_duty(self) -> None:
        self.holder = False
        try:
            await self._stop()
        except Exception:
            log.exception("%s: stopping failed", self.name)
