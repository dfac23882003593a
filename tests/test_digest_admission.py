"""A channel's schedules under a crowd: FATHOM_MAX_DIGESTS_PER_CHANNEL is decided in one
transaction under the channel's admission lock, so schedules added at once on several
replicas never pass it (issue 53, item 1: "every limit the README states holds under
simultaneous requests on any number of replicas").

"Two replicas" are two :class:`~storage.Database` handles on one database, as in
tests/test_admission.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from storage import Database, DigestLimit, Store

TRIALS = 25


@pytest.fixture
async def stores(database_url: str) -> AsyncIterator[list[Store]]:
    """Two replicas' stores on one database, a connection of each open before the race."""
    made: list[tuple[Database, Store]] = []
    try:
        for _ in range(2):
            database = Database(database_url)
            store = Store(database)
            await store.digests.in_channel("slack", "T1", "warm-up")
            made.append((database, store))
        yield [store for _, store in made]
    finally:
        for database, _ in made:
            await database.dispose()


async def test_schedules_added_at_once_on_two_replicas_stop_at_the_channel_limit(
    stores: list[Store],
) -> None:
    """A limit of 2 schedules a channel, four added at once over two replicas: exactly two
    are stored in every trial and the others refused with the limit."""
    for trial in range(TRIALS):
        channel = f"C{trial}"
        start = asyncio.Event()

        async def add(i: int, channel: str, start: asyncio.Event) -> bool:
            await start.wait()
            await stores[i % 2].digests.add(
                platform="slack",
                workspace="T1",
                channel=channel,
                topic=f"topic {i}",
                depth=1,
                strategy="linear",
                cron="0 9 * * 1",
                timezone="UTC",
                created_by="U1",
                platform_context=None,
                max_per_channel=2,
            )
            return True

        tasks = [asyncio.ensure_future(add(i, channel, start)) for i in range(4)]
        await asyncio.sleep(0)
        start.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        stored = await stores[0].digests.in_channel("slack", "T1", channel)
        assert len(stored) == 2, f"trial {trial}: {len(stored)} schedules with a limit of 2"
        refused = [r for r in results if r is not True]
        assert len(refused) == 2 and all(
            isinstance(r, DigestLimit) and r.limit == 2 for r in refused
        ), refused
