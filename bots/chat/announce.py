"""A request whose research waits in line is acknowledged at once, on every platform: the
run's progress message is posted by the request's answer, saying its place in line, with a
Cancel button, and the run's delivery edits that same message once a runner takes it.

Exactly one progress message per run, whatever the order of the two sides, is settled on the
run's row (``RunStore``): the request reserves it while the run is still queued
(:meth:`QueueAnnouncer.reserve`, before the run is handed to the runner; a runner that took
it first posts its own and nothing is announced); the post then replaces the reservation with
the message's id. A runner that meets the reservation waits for that id
(``ChatDelivery._await_announcement``), at most ``ANNOUNCE_WAIT`` seconds, then posts its own;
an announcement that finds its place taken then says that the progress is in the other
message. A post that fails clears the reservation, and the runner posts as it always did.
"""

from __future__ import annotations

import logging
import secrets

from bots.chat.background import Background
from bots.chat.delivery import ANNOUNCING, ThreadPosters
from bots.chat.replies import ordinal
from core.chat.stores import ChatStores, RunRecord
from core.values import DeliveryState
from core.words import wording
from core.words.wording import Language, pick, request_language

log = logging.getLogger(__name__)


def queued_status(language: Language, place: int | None) -> str:
    """The progress message of a research waiting in line (``place``: 1 starts next; None:
    a runner has just taken it)."""
    if place is None:
        return pick(language, "Starting…", "正在开始…")
    return pick(
        language,
        f"Queued: {ordinal(place)} in line. It starts when a runner is free; "
        "Cancel takes it out of the line.",
        f"排队中：第 {place} 位。有空闲的执行者时开始；点“取消”可退出排队。",
    )


class QueueAnnouncer:
    """Posts the progress message of a research accepted while it is queued (see the
    module docstring), in the background of the request's answer."""

    def __init__(self, posters: ThreadPosters, store: ChatStores) -> None:
        self._posters = posters
        self._store = store
        self._background = Background()

    async def reserve(self, run: RunRecord) -> str | None:
        """Reserve the run's progress message for its request's answer (database only, before
        the run is handed to a runner); the marker, or None when a runner already took it."""
        marker = f"{ANNOUNCING}{secrets.token_hex(8)}"
        if await self._store.runs.reserve_progress_message(run.id, marker):
            return marker
        return None

    def announce(self, run: RunRecord, marker: str) -> None:
        """Post the reserved progress message, after the acknowledgement."""
        self._background.spawn(self._announce(run, marker))

    async def _announce(self, run: RunRecord, marker: str) -> None:
        runs = self._store.runs
        try:
            delivery = await self._posters.for_run(run)
        except Exception as exc:
            log.warning("run %s: not announced (%s: %.200s)", run.id, type(exc).__name__, exc)
            try:
                await runs.settle_progress_message(run.id, marker, None)
            except Exception:  # the runner stops waiting for it after ANNOUNCE_WAIT
                log.warning("run %s: its announcement's reservation not cleared", run.id)
            return
        try:
            place = await runs.queue_place(run.id)
            await delivery.announce(marker, queued_status(request_language(run.topic), place))
        except Exception as exc:
            log.warning("run %s: not announced (%s)", run.id, delivery.classify(exc).reason)
        finally:
            await delivery.aclose()

    def cancelled(self, run: RunRecord) -> None:
        """A run cancelled while it waited in line (it ended at once): its announced progress
        message says so now, without its button, rather than when a runner is free to
        deliver that outcome (which then writes the same final state again)."""
        self._background.spawn(self._show_cancelled(run.id))

    async def _show_cancelled(self, run_id: str) -> None:
        try:
            run = await self._store.runs.get_run(run_id)
            if run is None or run.progress_message_id is None:
                return  # nothing announced: its delivery posts the outcome
            if run.delivery != DeliveryState.PENDING:
                return  # delivered meanwhile
            delivery = await self._posters.for_run(run)
        except Exception as exc:
            log.warning("run %s: cancel not shown (%s: %.200s)", run_id, type(exc).__name__, exc)
            return
        try:
            language = request_language(run.topic)
            await delivery.post_status(wording.cancelled_text(language, run.rounds_done, run.depth))
        except Exception as exc:
            log.warning("run %s: cancel not shown (%s)", run_id, delivery.classify(exc).reason)
        finally:
            await delivery.aclose()

    async def aclose(self) -> None:
        """Wait (briefly) for the announcements still being posted."""
        await self._background.drain()
