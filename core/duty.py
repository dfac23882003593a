"""A duty that one replica at a time performs (a platform's long-lived connection), elected
by a named lease in the database.

Every replica runs a :class:`OneHolder` per duty. Each tick (a third of the lease) it takes or
renews the lease (:class:`storage.LeaseStore`); the replica that holds it starts the duty, the
others stand by. A holder that dies stops renewing, its lease expires, and the next tick of
another replica takes it over: within ``lease + tick`` seconds (60 s by default). A holder that
cannot renew (the database is unreachable) stops the duty once its lease has run out, so two
replicas never hold a connection at once for longer than a clock skew. A graceful stop stops
the duty and releases the lease at once, so another replica takes over at its next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from storage import LeaseStore
from storage.tables import utcnow

log = logging.getLogger(__name__)

#: How long a duty's lease lasts without renewal (seconds); it is renewed every third of it.
LEASE = 45.0


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
        self._leases = leases
        self._start = start
        self._stop = stop
        self._lease = lease
        self._clock = clock
        self.holder = False
        self._expires = clock()
        self._task: asyncio.Task[None] | None = None

    @property
    def tick_every(self) -> float:
        return self._lease / 3

    def status(self) -> dict[str, object]:
        return {"lease": self.name, "role": "holder" if self.holder else "standby"}

    async def tick(self) -> None:
        """Take or renew the lease; start the duty on taking it, stop it on losing it."""
        now = self._clock()
        try:
            held = await self._leases.acquire(self.name, self.owner, self._lease, now)
        except Exception:
            log.warning("%s: the lease could not be renewed", self.name, exc_info=True)
            if self.holder and now >= self._expires:  # ours has run out: someone may take it
                log.warning("%s: lease expired while unreachable; standing by", self.name)
                await self._stop_duty()
            return
        if held:
            self._expires = now + timedelta(seconds=self._lease)
        if held and not self.holder:
            log.info("%s: this replica (%s) holds it now", self.name, self.owner)
            try:
                await self._start()
            except Exception:
                log.exception("%s: could not start; giving the lease up", self.name)
                with contextlib.suppress(Exception):
                    await self._stop()
                await self._release()
                return
            self.holder = True
        elif not held and self.holder:
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
        """Stop ticking, stop the duty and release the lease (another replica takes over at
        its next tick)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.holder:
            await self._stop_duty()
            await self._release()

    async def _stop_duty(self) -> None:
        self.holder = False
        try:
            await self._stop()
        except Exception:
            log.exception("%s: stopping failed", self.name)

    async def _release(self) -> None:
        try:
            await self._leases.release(self.name, self.owner)
        except Exception:
            log.warning("%s: the lease could not be released; it expires", self.name)
