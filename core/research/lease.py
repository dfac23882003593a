"""Holding a run: the lease timing, and the heartbeat that keeps a claim alive.

A runner claims a run (``Store.claim_run``) and, while it works on it, renews the run's
heartbeat. Every runner sweeps for runs whose heartbeat is older than
``FATHOM_STALE_RUN_AFTER`` and takes them over. So the holder must stop before a takeover can
happen: it treats its claim as lost when the store says another runner holds the run, or
when it could not renew for two thirds of that time (a database outage, a stalled process),
and cancels the task working on the run. Whatever it still tries to write is refused by the
store's fencing (``storage.ClaimLost``).

All intervals follow from the one setting (:class:`LeaseTiming`), so small values work: with
``FATHOM_STALE_RUN_AFTER=5`` a takeover happens within about seven seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from core.values import RunStatus
from storage import Claim, ClaimLost, Renewal

if TYPE_CHECKING:
    from core.metrics import Metrics

log = logging.getLogger(__name__)

#: The cancellation message of a task whose claim was lost.
LOST_CLAIM = "fathom-claim-lost"


def _process_scope() -> str:
    """What, besides the host name, tells this host's processes apart from those of another
    boot or another PID namespace (containers may share a host name): a short digest of the
    boot id and the PID namespace, empty where /proc does not have them."""
    parts = []
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:6] if parts else ""


def runner_identity() -> str:
    """A name for this process's claims, ``host:pid:scope-random`` (unique per process)."""
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{_process_scope()}-{secrets.token_hex(4)}"


def holder_is_gone(owner: str | None, me: str) -> bool:
    """True when ``owner`` (a :func:`runner_identity`) is provably dead: a process of this
    host, boot and PID namespace whose pid no longer exists, or an earlier process that had
    this process's pid.

    Lets ``fathom resume`` continue a run whose process was killed a moment ago without
    waiting for its heartbeat to expire. Anything unsure (another host or namespace, a live
    pid, a name of another form) is False.
    """
    if not owner or owner == me:
        return False
    theirs, mine = owner.rsplit(":", 2), me.rsplit(":", 2)
    if len(theirs) != 3 or len(mine) != 3 or not theirs[1].isdigit():
        return False
    same_scope = theirs[2].partition("-")[0] == mine[2].partition("-")[0]
    if theirs[0] != mine[0] or not same_scope:
        return False
    pid = int(theirs[1])
    if pid == os.getpid():
        return True  # same pid, another identity: a previous process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (e.g. no permission to signal it)
        return False
    return False


@dataclass(frozen=True)
class LeaseTiming:
    """The lease intervals, all derived from ``FATHOM_STALE_RUN_AFTER`` (seconds)."""

    stale_after: float = 180.0

    def __post_init__(self) -> None:
        if self.stale_after <= 0:
            raise ValueError("stale_after must be positive")

    @property
    def heartbeat_every(self) -> float:
        """Renew three times per lease."""
        return self.stale_after / 3

    @property
    def retry_every(self) -> float:
        """After a failed renewal, try again this soon: one failure never loses the claim."""
        return self.stale_after / 9

    @property
    def lost_after(self) -> float:
        """Without a successful renewal for this long, the holder gives the run up; a third of
        the lease is left before any other runner may take it over."""
        return self.stale_after * 2 / 3

    @property
    def sweep_every(self) -> float:
        """How often a runner looks for abandoned runs; a takeover happens at most
        ``stale_after + sweep_every`` after the holder's last heartbeat."""
        return self.stale_after / 2


class ClaimHolder(Protocol):
    """What a lease needs of the store: renew and release a claim (``storage.ClaimStore``)."""

    async def renew_claim(self, claim: Claim) -> Renewal: ...

    async def release_run(self, claim: Claim) -> RunStatus | None: ...


class Lease:
    """``async with Lease(store, claim, timing):`` keep ``claim`` alive while the body runs.

    A background task renews the heartbeat every ``timing.heartbeat_every`` seconds (every
    ``timing.retry_every`` after a failure). When the claim is lost (see the module
    docstring), the body's task is cancelled, again and again until the body has ended (a
    library may swallow one cancellation), and the ``async with`` raises
    :class:`storage.ClaimLost` instead of ``CancelledError``; any other cancellation passes
    through unchanged. ``lost`` tells the body, e.g. before it posts anything.
    ``on_cancel_requested`` is called at each renewal that finds a cancel of the run
    requested (by any process).
    """

    def __init__(
        self,
        store: ClaimHolder,
        claim: Claim,
        timing: LeaseTiming,
        on_cancel_requested: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._claim = claim
        self._timing = timing
        self._on_cancel_requested = on_cancel_requested
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._cancels = 0  # the cancellations this lease sent to the body's task
        self._beat: asyncio.Task[None] | None = None
        self._renewed_at = 0.0
        self.lost = False

    @property
    def claim(self) -> Claim:
        return self._claim

    async def __aenter__(self) -> Lease:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - always inside a task under asyncio.run
            raise RuntimeError("Lease must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._renewed_at = time.monotonic()  # the claim has just been made
        self._beat = asyncio.create_task(self._keep(), name=f"heartbeat-{self._claim.run_id}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if self._beat is not None:
            self._beat.cancel()  # not awaited: its own cancellation must not meet ours
            self._beat = None
        if not self.lost or self._task is None:
            return False
        remaining = self._task.cancelling()
        for _ in range(self._cancels):
            remaining = self._task.uncancel()
        if exc_type is asyncio.CancelledError and remaining <= self._cancelling:
            raise ClaimLost(self._claim.run_id) from exc
        return False

    async def _keep(self) -> None:
        timing = self._timing
        wait = timing.heartbeat_every
        while True:
            deadline = self._renewed_at + timing.lost_after
            await asyncio.sleep(max(0.0, min(wait, deadline - time.monotonic())))
            started = time.monotonic()
            renewal: Renewal | None = None
            try:
                async with asyncio.timeout(max(0.0, deadline - started)):
                    renewal = await self._store.renew_claim(self._claim)
            except TimeoutError:
                pass
            except Exception as exc:
                log.warning("heartbeat of run %s failed (%s)", self._claim.run_id, exc)
            if renewal is Renewal.CANCEL_REQUESTED and self._on_cancel_requested is not None:
                self._on_cancel_requested()
            if renewal in (Renewal.HELD, Renewal.CANCEL_REQUESTED):
                self._renewed_at, wait = started, timing.heartbeat_every
                continue
            if renewal is Renewal.LOST:
                await self._lose("another runner took it over")
                return
            if time.monotonic() >= self._renewed_at + timing.lost_after:
                await self._lose(f"its heartbeat could not be renewed for {timing.lost_after:g}s")
                return
            wait = timing.retry_every

    async def _lose(self, why: str) -> None:
        """Stop the body: cancel its task, and repeat that until it has ended."""
        log.warning("run %s: claim lost (%s); stopping work on it", self._claim.run_id, why)
        self.lost = True
        while self._task is not None and not self._task.done():
            self._task.cancel(LOST_CLAIM)
            self._cancels += 1
            await asyncio.sleep(self._timing.retry_every)


async def release_quietly(store: ClaimHolder, claim: Claim, metrics: Metrics | None = None) -> None:
    """Hand a held run back for another runner (shielded: the caller is being cancelled); a
    run that goes back to the queue is counted in ``metrics`` (``fathom_runs_requeued_total``)."""
    with contextlib.suppress(Exception):
        released = await asyncio.shield(store.release_run(claim))
        if released:
            log.info("run %s handed back for another runner", claim.run_id)
        if released is RunStatus.QUEUED and metrics is not None:
            metrics.runs_requeued.inc()
