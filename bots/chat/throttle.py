"""Edits of a progress message, coalesced and kept within a platform's rate limits.

The engine may report progress faster than a platform lets a bot edit (Slack's ``chat.update``
is Tier 3, about 50 calls a minute per workspace; Feishu allows 5 updates a second per card).
Intermediate texts are only the latest state, so they are coalesced and may be skipped; the
final text is always written: rate limits are waited out as the platform asks (its
``Retry-After``) for up to five minutes, other retryable failures get a few attempts. The
platform says which failures are worth a retry through its ``classify`` function
(``core.failures.PostFailure``). An edit refused for good (the message deleted, the bot
removed) ends the edits of that message: :attr:`EditThrottle.refused` says why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from core.failures import PostFailure
from core.timer import MONOTONIC, Timer

log = logging.getLogger(__name__)

Edit = Callable[[str], Awaitable[None]]
Classify = Callable[[Exception], PostFailure]

#: The longest wait between two tries of an edit (seconds).
MAX_BACKOFF = 30.0
#: Tries of the final edit that fail other than by a rate limit, before it is given up.
FINAL_ATTEMPTS = 5
#: Rate limits are waited out (as the platform asks) for up to this many seconds in all.
FINAL_RATE_LIMIT_WAIT = 300.0


def retry_delay(failure: PostFailure, attempt: int) -> float | None:
    """Seconds to wait before retrying, or None when retrying cannot help."""
    if not failure.retryable:
        return None
    if failure.retry_after > 0:
        return min(failure.retry_after, MAX_BACKOFF)
    return min(float(2**attempt), MAX_BACKOFF)


class WorkspaceLimiter:
    """Token bucket shared by every message of one workspace (a platform's per-app edit limit)."""

    def __init__(self, per_minute: float = 50.0, burst: int = 10, timer: Timer = MONOTONIC) -> None:
        self._rate = per_minute / 60.0
        self._burst = float(burst)
        self._tokens = float(burst)
        self._timer = timer
        self._at = timer.now()

    def _refill(self) -> None:
        now = self._timer.now()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now

    def try_acquire(self) -> bool:
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def delay(self) -> float:
        """Seconds until the next token."""
        self._refill()
        return max(0.0, (1.0 - self._tokens) / self._rate)

    async def acquire(self) -> None:
        """Wait for a token (final edits must be written, just not too fast)."""
        while True:
            if self.try_acquire():
                return
            await self._timer.sleep(max(self.delay(), 0.01))


class WorkspaceLimiters:
    """One limiter per workspace; owned by whoever owns the platform clients (the factory)."""

    def __init__(self, per_minute: float = 50.0, burst: int = 10, timer: Timer = MONOTONIC) -> None:
        self._per_minute = per_minute
        self._burst = burst
        self._timer = timer
        self._by_team: dict[str, WorkspaceLimiter] = {}

    def for_team(self, team_id: str) -> WorkspaceLimiter:
        limiter = self._by_team.get(team_id)
        if limiter is None:
            limiter = WorkspaceLimiter(self._per_minute, self._burst, self._timer)
            self._by_team[team_id] = limiter
        return limiter


class EditThrottle:
    """Coalesces edits of ONE message: at most one ``edit`` per ``interval`` seconds (on
    ``timer``, which also measures the waits for rate limits)."""

    def __init__(
        self,
        edit: Edit,
        *,
        classify: Classify,
        interval: float = 1.0,
        limiter: WorkspaceLimiter | None = None,
        final_attempts: int = FINAL_ATTEMPTS,
        timer: Timer = MONOTONIC,
    ) -> None:
        self._edit = edit
        self._classify = classify
        self._interval = interval
        self._limiter = limiter
        self._attempts = final_attempts
        self._timer = timer
        self._pending: str | None = None
        self._written: str | None = None
        self._next_at = timer.now()  # no edit is sent before this time (on the timer)
        self._task: asyncio.Task[None] | None = None
        self._editing = False
        self._closed = False
        #: Why the platform refused an edit of the message for good (None: it did not).
        self.refused: str | None = None

    @property
    def written(self) -> str | None:
        """The last text Slack accepted."""
        return self._written

    def _refuse(self, failure: PostFailure) -> None:
        """The message can never be edited: nothing more is sent."""
        self.refused = failure.reason
        self._closed = True
        self._pending = None

    async def submit(self, text: str) -> None:
        """Record ``text`` as the newest state; a background task sends it when allowed."""
        if self._closed:
            return
        self._pending = text
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        timer = self._timer
        while self._pending is not None and not self._closed:
            wait = self._next_at - timer.now()
            if wait > 0:
                await timer.sleep(wait)
                continue
            if self._limiter is not None and not self._limiter.try_acquire():
                await timer.sleep(max(self._limiter.delay(), 0.01))
                continue
            text, self._pending = self._pending, None
            if text == self._written:
                continue
            backoff = 0.0
            self._editing = True
            try:
                await self._edit(text)
                self._written = text
            except Exception as exc:
                failure = self._classify(exc)
                delay = retry_delay(failure, 1)
                if delay is None:
                    self._refuse(failure)
                    log.warning("progress edit refused, not asked again (%s)", failure.reason)
                    return
                if self._pending is None:
                    self._pending, backoff = text, delay  # retry unless something newer came
                log.warning("progress edit failed (%s)", failure.reason)
            finally:
                self._editing = False
            self._next_at = timer.now() + max(self._interval, backoff)

    async def aclose(self) -> None:
        """Stop for good: nothing pending is sent any more (the run is over or taken over)."""
        self._closed = True
        self._pending = None
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})

    async def flush_final(self, text: str) -> bool:
        """Wait for an in-flight edit, then write ``text``; True once Slack accepted it (False
        at once when an edit was refused for good)."""
        self._closed = True
        self._pending = None
        task = self._task
        if task is not None and not task.done():
            if not self._editing:
                task.cancel()
            await asyncio.wait({task})
        if self.refused is not None:
            return False
        timer = self._timer
        failures = 0  # failures other than rate limits
        waited = 0.0  # seconds spent waiting out rate limits
        while True:
            wait = self._next_at - timer.now()
            if wait > 0:
                await timer.sleep(wait)
            if self._limiter is not None:
                await self._limiter.acquire()
            try:
                await self._edit(text)
            except Exception as exc:
                failure = self._classify(exc)
                limited = failure.retryable and failure.retry_after > 0
                failures += 0 if limited else 1
                delay = retry_delay(failure, max(failures, 1))
                if delay is None:
                    self._refuse(failure)
                    log.error("final progress edit failed (%s)", failure.reason)
                    return False
                if failures >= self._attempts or (limited and waited >= FINAL_RATE_LIMIT_WAIT):
                    log.error("final progress edit gave up (%s)", failure.reason)
                    return False
                waited += delay if limited else 0.0
                log.info("final progress edit: %s, retrying in %.1fs", failure.reason, delay)
                self._next_at = timer.now() + delay
                continue
            self._written = text
            self._next_at = timer.now() + self._interval
            return True
