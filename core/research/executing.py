"""The runs executing in this process, and how a request reaches one at once.

A cancel or a "Stop and write now" is stored on the run's row, where the runner holding the
run meets it at its next checkpoint or heartbeat, whichever replica it runs on. When the run
executes in the very process that took the request, :class:`LocalRuns` lets the request
reach it now: the executor registers each run's :class:`RunFlags` while it runs it, and the
request service raises them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class RunFlags:
    """Whether a cancel (``requested``) or a "Stop and write now" (``stop``) was requested for
    an executing run, as last seen; ``cancelled`` is set with a cancel, for a step that
    waits on it (the writer)."""

    def __init__(self, requested: bool, stop: bool = False) -> None:
        self.stop = stop
        self.cancelled = asyncio.Event()
        if requested:
            self.cancelled.set()

    @property
    def requested(self) -> bool:
        return self.cancelled.is_set()

    def cancel(self) -> None:
        self.cancelled.set()


class LocalRuns:
    """The flags of the runs executing in this process, by run id."""

    def __init__(self) -> None:
        self._flags: dict[str, RunFlags] = {}

    def started(self, run_id: str, flags: RunFlags) -> None:
        self._flags[run_id] = flags

    def ended(self, run_id: str, flags: RunFlags) -> None:
        """Forget the run's flags (unless another execution of it registered since)."""
        if self._flags.get(run_id) is flags:
            del self._flags[run_id]

    def cancel(self, run_id: str) -> None:
        """Cancel the run now if it executes here."""
        flags = self._flags.get(run_id)
        if flags is not None:
            flags.cancel()

    def stop(self, run_id: str) -> None:
        """Stop the run's searching before its next search if it executes here."""
        flags = self._flags.get(run_id)
        if flags is not None:
            flags.stop = True


class WritingCancelled(Exception):
    """A cancel came while the report was being written: the writer was stopped."""


async def unless_cancelled(work: Awaitable[T], cancelled: asyncio.Event) -> T:
    """``work``'s result; :class:`WritingCancelled` (``work`` stopped) when ``cancelled`` is
    set first. A cancellation of the caller stops ``work`` too."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(cancelled.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        raise WritingCancelled
    return task.result()
