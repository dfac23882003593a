"""Runs that no process can ever deliver are failed with their reason instead of staying
queued for ever (counted by ``/readyz`` and ``fathom_queue_depth``); runs that another
replica may deliver are left alone. Through the real served app, on SQLite and PostgreSQL."""

from __future__ import annotations

from bots.mcp.delivery import PLATFORM as MCP
from bots.platforms import titles
from storage import Database, RunRecord, Store
from tests.chat_app import wait_for
from tests.conftest import ServeFathom
from tests.runs import age_heartbeat, claim, new_run


async def seeded(store: Store, database: Database, key: str, *, aged: bool) -> RunRecord:
    run, _ = await new_run(store, thread_key=key, depth=1)
    if aged:
        await age_heartbeat(database, run.id)
    return run


async def test_runs_nobody_can_deliver_fail_and_stop_counting_as_queued(
    database: Database, database_url: str, serve_fathom: ServeFathom
) -> None:
    store = Store(database)
    # A console run whose fathom process died before it could claim it.
    left = await seeded(store, database, "cli:local:local:left", aged=True)
    # A firing of a digest for a channel that is no chat (stored before channels were checked).
    irc = await seeded(store, database, "irc:libera:fathom:1", aged=True)
    # Left alone: a console run its process holds, one it is about to claim, and a Slack
    # run waiting for a replica that serves Slack (this one does not).
    held = await seeded(store, database, "cli:local:local:held", aged=False)
    await claim(store, held.id, owner="laptop:4242:abcd")
    fresh = await seeded(store, database, "cli:local:local:fresh", aged=False)
    slack = await seeded(store, database, "slack:T0001:C0001:1700000000.000100", aged=True)

    served = await serve_fathom(database_url, FATHOM_STALE_RUN_AFTER="60")

    async def both_failed() -> list[RunRecord] | None:
        """Both failed and their delivery settled (failing a run and ending its delivery are
        two steps: waiting for the first alone raced the second under load)."""
        runs = [await served.store.runs.get_run(r.id) for r in (left, irc)]
        done = [r for r in runs if r and r.status == "failed" and r.delivery != "pending"]
        return done if len(done) == 2 else None

    failed_left, failed_irc = await wait_for(both_failed)
    assert failed_left.error == (
        "cannot deliver to cli: a console run is shown only in the terminal of the fathom "
        f"process that started it, and that process left it; finish it with `fathom resume "
        f"{left.id}`"
    )
    assert failed_left.delivery is None  # a console run has nothing to deliver
    assert failed_irc.error == (
        "cannot deliver to irc: 'irc' is not a chat platform (runs are posted to "
        f"{', '.join([*titles(), MCP])})"
    )
    assert failed_irc.delivery == "failed"
    statuses = {r.id: (await served.store.runs.get_run(r.id)) for r in (held, fresh, slack)}
    assert {i: r.status for i, r in statuses.items() if r} == {
        held.id: "running",
        fresh.id: "queued",
        slack.id: "queued",
    }

    ready = await served.http.get(f"{served.url}/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["queue"] == {"kind": "local", "queued": 2, "running": 1}
    metrics = await served.http.get(f"{served.url}/metrics")
    assert "fathom_queue_depth 2.0" in metrics.text.splitlines()
