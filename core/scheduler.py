"""The digest scheduler: APScheduler 3 on one replica at a time.

Every replica runs a :class:`DigestScheduler`; each ``tick`` (every :data:`TICK` seconds) it
takes or renews the ``digest-scheduler`` lease (:class:`storage.LeaseStore`, :data:`LEASE`
seconds). The holder keeps one APScheduler job per enabled digest (``CronTrigger`` in the
digest's timezone), rebuilt from the table on every tick, so digests added or removed on any
replica are in step within a tick; the others keep no jobs. A replica that takes the lease
(at start, or when the holder died and its lease expired, well within a minute) first fires
every slot missed within the grace period (``FATHOM_DIGEST_GRACE``). Whoever fires a slot, and
however often, it starts one run (``core.digests``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from core import schedule
from core.delivery import delivery_refused
from core.digests import Clock, DigestService
from core.jobs import JobRunner
from storage import DigestRecord, LeaseStore
from storage.tables import utcnow

log = logging.getLogger(__name__)

LEASE_NAME = "digest-scheduler"
#: How long the lease lasts without renewal (seconds), and how often it is renewed.
LEASE = 45.0
TICK = 15.0


class DigestScheduler:
    def __init__(
        self,
        digests: DigestService,
        leases: LeaseStore,
        runner: JobRunner | None,
        *,
        owner: str,
        platforms: frozenset[str] | None = None,
        clock: Clock = utcnow,
        tick_every: float = TICK,
        lease: float = LEASE,
    ) -> None:
        self._digests = digests
        self._leases = leases
        self._runner = runner
        self.owner = owner
        self._platforms = platforms
        self._clock = clock
        self._tick_every = tick_every
        self._lease = lease
        self.holder = False
        self._jobs: dict[str, tuple[str, str]] = {}  # digest id -> (cron, timezone)
        self._apscheduler: AsyncIOScheduler | None = None
        self._task: asyncio.Task[None] | None = None

    # -- one step, with the clock given (what the loop runs, and what tests call) ----------------
    async def tick(self, now: datetime | None = None) -> list[str]:
        """Take or renew the lease; as holder, catch up after taking it and keep the jobs in
        step with the table. Returns the ids of the runs started by the catch-up."""
        now = now or self._clock()
        held = await self._leases.acquire(LEASE_NAME, self.owner, self._lease, now)
        started: list[str] = []
        if held and not self.holder:
            log.info("digest scheduler: this replica (%s) holds it now", self.owner)
            runs = await self._digests.fire_due(self._runner, now)
            started = [run.id for run in runs]
        elif self.holder and not held:
            log.warning("digest scheduler: lease lost to another replica")
        self.holder = held
        enabled = await self._digests.digests.enabled(self._platforms) if held else []
        enabled = [d for d in enabled if not await self._disable_if_refused(d)]
        await self._sync(enabled)
        return started

    async def _disable_if_refused(self, digest: DigestRecord) -> bool:
        """A digest whose latest firing the platform refused for good (its channel is gone,
        the bot was removed) is disabled, not fired forever."""
        runs = await self._digests.digests.runs(digest.id, limit=1)
        if not runs or not delivery_refused(runs[0].delivery_error):
            return False
        reason = f"its last firing could not be posted: {runs[0].delivery_error}"[:500]
        log.warning("digest %s (%s) disabled: %s", digest.id, digest.channel, reason)
        await self._digests.digests.disable(digest.id, reason)
        return True

    async def _sync(self, digests: list[DigestRecord]) -> None:
        """One APScheduler job per enabled digest (none unless this replica holds the lease)."""
        scheduler = self._apscheduler
        if scheduler is None:
            return
        wanted = {d.id: d for d in digests}
        for digest_id in list(self._jobs):
            digest = wanted.get(digest_id)
            if digest is None or self._jobs[digest_id] != (digest.cron, digest.timezone):
                with contextlib.suppress(Exception):
                    scheduler.remove_job(digest_id)
                del self._jobs[digest_id]
        for digest in digests:
            if digest.id in self._jobs:
                continue
            trigger = schedule.trigger(digest.cron, schedule.timezone(digest.timezone))
            scheduler.add_job(
                self._fire,
                trigger=trigger,
                args=[digest.id],
                id=digest.id,
                replace_existing=True,
                coalesce=True,
                misfire_grace_time=None,
            )
            self._jobs[digest.id] = (digest.cron, digest.timezone)

    async def _fire(self, digest_id: str) -> None:
        """An APScheduler job: fire the digest's due slot (re-read: it may be gone)."""
        try:
            digest = await self._digests.digests.get(digest_id)
            if digest is None or not digest.enabled or not self.holder:
                return
            slot = self._digests.due_slot(digest, self._clock())
            if slot is None:
                return
            run, created = await self._digests.fire(digest, slot)
            if run is not None and created and self._runner is not None:
                await self._runner.enqueue(run.id)
        except Exception:
            log.exception("digest %s: firing failed", digest_id)

    # -- the loop --------------------------------------------------------------------------------
    async def start(self) -> None:
        self._apscheduler = AsyncIOScheduler(timezone=schedule.UTC)
        self._apscheduler.start()
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("digest scheduler tick failed; trying again", exc_info=True)
            await asyncio.sleep(self._tick_every)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._apscheduler is not None:
            self._apscheduler.shutdown(wait=False)
        if self.holder:
            with contextlib.suppress(Exception):
                await self._leases.release(LEASE_NAME, self.owner)
            self.holder = False
