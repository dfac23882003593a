"""The digest scheduler: APScheduler 3 on one replica at a time.

Every replica runs a :class:`DigestScheduler` (for every platform's digests: a firing is a run,
posted by whichever replica serves its platform); each ``tick`` (every third of the lease) it votes
in the ``digest-scheduler`` election (:class:`core.operations.election.Election`, ``FATHOM_LEASE``
seconds). The holder keeps one APScheduler job per enabled digest (``CronTrigger`` in the digest's
timezone), rebuilt from the table on every tick, so digests added or removed on any replica are in
step within a tick; the others keep no jobs. A replica that wins the election (at start, or when the
holder died and its lease expired, well within a minute) first fires every slot missed within the
grace period (``FATHOM_DIGEST_GRACE``); a catch-up that fails gives the election up, so the next
tick (here or on another replica) catches up again. Whoever fires a slot, and however often, it
starts one run (``core.operations.digests``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from core.chat import schedule
from core.operations.digests import Clock, DigestService
from core.operations.election import LEASE, Change, Election
from core.operations.job import delivery_refused
from core.operations.runners import JobRunner
from storage import DigestRecord, LeaseStore, StorageUnavailable
from storage.tables import utcnow

log = logging.getLogger(__name__)

#: The election's name (the row in ``leases``, the ``fathom_lease_holder`` label).
LEASE_NAME = "digest-scheduler"
#: How far back a job (or a job just added) looks for its slot (seconds); the catch-up on
#: taking the lease looks back FATHOM_DIGEST_GRACE instead.
JOB_WINDOW = 120.0


class DigestScheduler:
    def __init__(
        self,
        digests: DigestService,
        leases: LeaseStore,
        runner: JobRunner | None,
        *,
        owner: str,
        clock: Clock = utcnow,
        tick_every: float | None = None,
        lease: float = LEASE,
    ) -> None:
        self._digests = digests
        self._runner = runner
        self.owner = owner
        self._clock = clock
        self.election = Election(
            LEASE_NAME, leases, owner=owner, label="digest scheduler", lease=lease, clock=clock
        )
        self._tick_every = tick_every or self.election.vote_every
        self._jobs: dict[str, tuple[str, str]] = {}  # digest id -> (cron, timezone)
        self._apscheduler: AsyncIOScheduler | None = None
        self._task: asyncio.Task[None] | None = None

    # -- one step, with the clock given (what the loop runs, and what tests call) ----------------
    async def tick(self, now: datetime | None = None) -> list[str]:
        """Vote; as holder, catch up after winning and keep the jobs in step with the table.
        Returns the ids of the runs started by the catch-up."""
        now = now or self._clock()
        change = await self.election.vote(now)
        if change is Change.UNREACHABLE:  # the jobs keep firing while the lease lasts (holds)
            return []
        if change is Change.LOST:
            log.warning("digest scheduler: lease lost to another replica")
        started: list[str] = []
        if change is Change.TAKEN:
            log.info("digest scheduler: this replica (%s) holds it now", self.owner)
            try:
                runs = await self._digests.fire_due(self._runner, now)
            except Exception:  # the database failed: caught up by the next tick that wins
                log.exception("digest scheduler: the catch-up failed; giving the lease up")
                await self.election.resign()
                return []
            started = [run.id for run in runs]
        enabled = await self._digests.digests.enabled() if self.holder else []
        kept = []
        for digest in enabled:
            try:
                if not await self._disable_if_refused(digest):
                    kept.append(digest)
            except StorageUnavailable:
                raise
            except Exception:
                log.exception("digest %s: could not check its last firing", digest.id)
                kept.append(digest)
        await self._sync(kept, now)
        return started

    @property
    def holder(self) -> bool:
        """This replica won the election (by its last vote that reached the database)."""
        return self.election.holder

    @property
    def holds(self) -> bool:
        """Holder, and the lease not expired by this replica's clock (a stalled tick must not
        leave jobs firing on a lease another replica may have taken)."""
        return self.election.holds

    async def _disable_if_refused(self, digest: DigestRecord) -> bool:
        """A digest whose latest firing the platform refused for good (its channel is gone,
        the bot was removed), or that could never be delivered (a channel that is no chat),
        is disabled, not fired forever."""
        runs = await self._digests.digests.runs(digest.id, limit=1)
        if not runs:
            return False
        why = next(
            (e for e in (runs[0].delivery_error, runs[0].error) if delivery_refused(e)), None
        )
        if why is None:
            return False
        reason = f"its last firing could not be posted: {why}"[:500]
        log.warning("digest %s (%s) disabled: %s", digest.id, digest.channel, reason)
        await self._digests.digests.disable(digest.id, reason)
        return True

    async def _sync(self, digests: list[DigestRecord], now: datetime) -> None:
        """One APScheduler job per enabled digest (none unless this replica won the election).
        Every tick also fires each digest's slot of the last ``JOB_WINDOW`` seconds that was
        not fired yet (once: the dedupe key): a job added just after its slot would only fire
        the next one, and a job whose firing was missed (a stalled loop, a job added by a
        tick a moment before its slot while the clock moved on) would skip it."""
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
            try:
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
            except Exception:  # e.g. a timezone this machine's tzdata no longer knows
                log.exception("digest %s: could not be scheduled", digest.id)
        for digest in digests:
            if digest.id not in self._jobs:
                continue
            try:
                await self._digests.fire_if_due(digest, self._runner, now, window=JOB_WINDOW)
            except StorageUnavailable:
                raise
            except Exception:
                log.exception("digest %s: firing failed", digest.id)

    async def _fire(self, digest_id: str) -> None:
        """An APScheduler job: fire the digest's due slot (re-read: it may be gone)."""
        try:
            digest = await self._digests.digests.get(digest_id)
            if digest is None or not digest.enabled or not self.holds:
                return
            await self._digests.fire_if_due(digest, self._runner, self._clock(), window=JOB_WINDOW)
        except Exception:
            log.exception("digest %s: firing failed", digest_id)

    # -- the loop --------------------------------------------------------------------------------
    async def start(self) -> None:
        self._apscheduler = AsyncIOScheduler(timezone=UTC)
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
        if self._apscheduler is not None and self._apscheduler.running:
            self._apscheduler.shutdown(wait=False)
        if self.holder:
            await self.election.resign()
