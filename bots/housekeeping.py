"""Housekeeping of ``fathom serve``: the tables that would otherwise grow for ever, pruned
every hour by the one replica holding the ``housekeeping`` lease.

- processed platform events older than :data:`EVENT_MEMORY`;
- files sent on their own that no request took (:data:`FILE_MEMORY`);
- conversation contexts (:data:`CONTEXT_MEMORY`);
- cached search results and page texts past their time to live;
- finished research past ``FATHOM_RUN_RETENTION_DAYS`` (``storage.retention``), in batches,
  then the documents its reports became (a Slack canvas, a Feishu cloud document), deleted on
  their platform through the opened platforms' posters (``bots.document_deletion``): one
  that cannot be is logged with its address, and never holds the pruning back;
- each enabled platform's own state (``ChatPlatform.housekeeping``: Slack's expired OAuth
  states).

The lease lasts one and a half rounds: the replica that holds it keeps it by taking it again
each round, and when it stops another replica takes over within two and a half rounds. Every
replica could prune safely (each delete is bounded by its own conditions); one doing it keeps
the batches of several from contending for the same rows every hour.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta

from bots.chat.delivery import ThreadPosters
from bots.chat.platform import Chore
from bots.document_deletion import delete_documents
from core.settings import Settings
from storage import Pruned, Store
from storage.tables import utcnow

log = logging.getLogger(__name__)

#: Platform deliveries are remembered this long (Slack retries within minutes).
EVENT_MEMORY = timedelta(days=7)

#: Files sent on their own wait this long at most for their request (every platform's window
#: is shorter).
FILE_MEMORY = timedelta(days=1)

#: The context a conversation was opened from (Slack's assistant pane) is kept this long
#: after it last changed.
CONTEXT_MEMORY = timedelta(days=90)

#: How often housekeeping runs (it also runs at start).
HOUSEKEEPING_EVERY = 3600.0

#: The lease of the replica that does it.
LEASE = "housekeeping"


def retention_cutoff(settings: Settings) -> timedelta | None:
    """How old finished research is when it is pruned (None: ``FATHOM_RUN_RETENTION_DAYS=0``,
    kept for ever)."""
    days = settings.run_retention_days
    return timedelta(days=days) if days else None


async def prune_research(
    store: Store, before: datetime, posters: Mapping[str, ThreadPosters]
) -> Pruned:
    """Retention's round: the research finished before ``before`` pruned, then the documents
    of its reports deleted on their platform (``posters``: the opened platforms', by name);
    each one left there is logged with why and its address."""
    pruned = await store.retention.prune(before)
    for left in await delete_documents(pruned.documents, posters):
        log.warning("retention: %s", left.line())
    return pruned


async def housekeep_once(
    store: Store,
    settings: Settings,
    *,
    owner: str,
    chores: Sequence[Chore] = (),
    posters: Mapping[str, ThreadPosters] | None = None,
) -> bool:
    """One round, when ``owner`` holds (or takes) the lease; False when another replica
    holds it. ``chores``: the platforms' own (``ChatPlatform.housekeeping``), after core's;
    ``posters``: the opened platforms' outbound sides, by name, which delete the documents of
    pruned runs. A job that fails is logged and the others go on."""
    if not await store.leases.acquire(LEASE, owner, HOUSEKEEPING_EVERY * 1.5, utcnow()):
        return False
    jobs: list[tuple[str, Callable[[], Awaitable[int | Pruned]]]] = [
        (
            f"platform events older than {EVENT_MEMORY}",
            lambda: store.events.prune_events(EVENT_MEMORY),
        ),
        (
            f"files kept for a request, older than {FILE_MEMORY}",
            lambda: store.files.prune_files(FILE_MEMORY),
        ),
        (
            f"conversation contexts older than {CONTEXT_MEMORY}",
            lambda: store.contexts.prune_contexts(CONTEXT_MEMORY),
        ),
        (
            "expired cached searches and pages",
            lambda: store.caches.prune_caches(
                search_older_than=settings.search_cache_ttl,
                pages_older_than=settings.page_cache_ttl,
            ),
        ),
    ]
    jobs.extend((chore.what, chore.run) for chore in chores)
    keep = retention_cutoff(settings)
    if keep is not None:
        jobs.append(
            (
                f"of the research finished more than {settings.run_retention_days} days ago",
                lambda: prune_research(store, utcnow() - keep, posters or {}),
            )
        )
    for what, prune in jobs:
        try:
            pruned = await prune()
        except Exception:
            log.warning("pruning %s failed", what, exc_info=True)
            continue
        if pruned:
            shown = pruned.describe() if isinstance(pruned, Pruned) else str(pruned)
            log.info("pruned %s %s", shown, what)
    return True


async def housekeeping(
    store: Store,
    settings: Settings,
    *,
    owner: str,
    chores: Sequence[Chore] = (),
    posters: Mapping[str, ThreadPosters] | None = None,
) -> None:
    """Housekeeping every :data:`HOUSEKEEPING_EVERY` seconds, from now on."""
    while True:
        try:
            await housekeep_once(store, settings, owner=owner, chores=chores, posters=posters)
        except Exception:  # the lease could not be read: next round
            log.warning("housekeeping failed", exc_info=True)
        await asyncio.sleep(HOUSEKEEPING_EVERY)


class Housekeeping:
    """``fathom serve``'s :func:`housekeeping`, as a background task (built by the composition
    root, started once the schema is usable, stopped at shutdown)."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        owner: str,
        chores: Sequence[Chore] = (),
        posters: Mapping[str, ThreadPosters] | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._owner = owner
        self._chores = tuple(chores)
        self._posters = dict(posters or {})
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            rounds = housekeeping(
                self._store,
                self._settings,
                owner=self._owner,
                chores=self._chores,
                posters=self._posters,
            )
            self._task = asyncio.create_task(rounds)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
