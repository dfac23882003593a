"""One replica at a time holds each long-lived platform connection, elected by a lease in the
database; another takes over when the holder stops or dies (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from core.operations.duty import OneHolder
from storage import Database, LeaseStore, StorageUnavailable
from tests.chat_app import ServedFathom, wait_for
from tests.conftest import ServeFathom
from tests.fakes.feishu import FakeFeishuServer
from tests.test_feishu import APP_ID, APP_SECRET, KEY, TOKEN
from tests.test_replicas import wait_until
from tests.test_serve import Served, serve, terminate, wait_until_up

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Duty:
    """Records what a replica's duty was told to do."""

    def __init__(self, name: str, log: list[str], fail_start: bool = False) -> None:
        self.name, self.log, self.fail_start = name, log, fail_start

    async def start(self) -> None:
        self.log.append(f"{self.name}:start")
        if self.fail_start:
            raise RuntimeError("cannot connect")

    async def stop(self) -> None:
        self.log.append(f"{self.name}:stop")


async def test_one_holder_at_a_time_and_takeover_when_the_holder_stops_renewing(
    database: Database,
) -> None:
    leases = LeaseStore(database)
    now = [T0]
    log: list[str] = []

    def replica(name: str, fail_start: bool = False) -> OneHolder:
        duty = Duty(name, log, fail_start)
        return OneHolder(
            "feishu-connection",
            leases,
            owner=name,
            start=duty.start,
            stop=duty.stop,
            lease=45,
            clock=lambda: now[0],
        )

    a, b = replica("a"), replica("b")
    await a.tick()
    await b.tick()
    assert (a.holder, b.holder, log) == (True, False, ["a:start"])
    now[0] += timedelta(seconds=30)
    await a.tick()  # renewed
    await b.tick()
    assert b.holder is False and log == ["a:start"]
    # a dies (no more ticks): its lease runs out, and b's next tick takes over.
    now[0] += timedelta(seconds=44)
    await b.tick()
    assert b.holder is False  # a renewed 44 s ago: still a's
    now[0] += timedelta(seconds=2)
    await b.tick()
    assert b.holder is True and log == ["a:start", "b:start"]
    # a was only cut off: its next tick sees the lease taken and stops its connection.
    await a.tick()
    assert a.holder is False and log[-1] == "a:stop"
    # A graceful stop releases the lease: the next tick of another replica takes it at once.
    await b.close()
    assert log[-1] == "b:stop"
    await a.tick()
    assert a.holder is True and log[-1] == "a:start"
    await a.close()
    # A replica whose duty cannot start gives the lease up for the others.
    c, d = replica("c", fail_start=True), replica("d")
    await c.tick()
    assert c.holder is False and log[-2:] == ["c:start", "c:stop"]
    await d.tick()
    assert d.holder is True and log[-1] == "d:start"
    await d.close()


async def test_a_holder_cut_off_from_the_database_stops_its_duty_once_its_lease_ran_out(
    database: Database,
) -> None:
    class CutOff(LeaseStore):
        cut_off = False

        async def acquire(self, name: str, owner: str, ttl: float, now: datetime) -> bool:
            if self.cut_off:
                raise StorageUnavailable("the database did not answer")
            return await super().acquire(name, owner, ttl, now)

    leases = CutOff(database)
    now = [T0]
    log: list[str] = []
    duty = Duty("a", log)
    a = OneHolder(
        "slack-connection",
        leases,
        owner="a",
        start=duty.start,
        stop=duty.stop,
        lease=45,
        clock=lambda: now[0],
    )
    await a.tick()
    assert a.holder and log == ["a:start"]
    leases.cut_off = True
    now[0] += timedelta(seconds=30)
    await a.tick()
    assert a.holder and log == ["a:start"]  # its lease runs for 15 s more: still connected
    now[0] += timedelta(seconds=15)
    await a.tick()
    assert not a.holder and log == ["a:start", "a:stop"]  # another replica may take it now
    leases.cut_off = False
    await a.tick()  # nobody took it meanwhile: a wins again
    assert a.holder and log[-1] == "a:start"
    await a.close()


FEISHU_WS = {
    "FEISHU_APP_ID": APP_ID,
    "FEISHU_APP_SECRET": APP_SECRET,
    "FEISHU_VERIFICATION_TOKEN": TOKEN,
    "FEISHU_ENCRYPT_KEY": KEY,
    "FEISHU_MODE": "ws",
    "FATHOM_LEASE": "1.5",  # renewed every 0.5 s; taken over 1.5 s after the last renewal
}


async def _role(served: ServedFathom) -> dict[str, Any]:
    ready = await served.readyz()
    feishu: dict[str, Any] = ready.get("platforms", {}).get("feishu", {})
    return feishu


async def test_two_replicas_hold_one_feishu_connection_and_the_other_takes_over(
    serve_fathom: ServeFathom, feishu_server: FakeFeishuServer, database_url: str
) -> None:
    fake = feishu_server.fake
    env = {**FEISHU_WS, "FEISHU_DOMAIN": feishu_server.url}
    first = await serve_fathom(database_url, **env)
    second = await serve_fathom(database_url, **env)
    await wait_for(lambda: _holds(first))
    assert (await _role(second))["role"] == "standby"
    assert "state" not in await _role(second)  # no connection of its own
    assert (fake.ws_open, fake.ws_connections) == (1, 1)

    await asyncio.to_thread(first.server.stop)  # a graceful stop releases the lease
    await wait_for(lambda: _holds(second))
    assert fake.ws_connections == 2
    await wait_for(lambda: fake.ws_open == 1)


async def _holds(served: ServedFathom) -> bool:
    role = await _role(served)
    return role.get("role") == "holder" and role.get("state") == "connected"


def logs(served: list[Served]) -> str:
    return "\n".join(s.stderr() for s in served)


def _ready(served: Served) -> dict[str, Any]:
    try:
        ready: dict[str, Any] = httpx.get(f"{served.url}/readyz", timeout=5).json()
    except httpx.HTTPError:
        return {}
    return ready


def _role_of(served: Served) -> dict[str, Any]:
    feishu: dict[str, Any] = _ready(served).get("platforms", {}).get("feishu", {})
    return feishu


def test_killing_the_holder_moves_the_connection_to_another_process(
    cli_env: dict[str, str], feishu_server: FakeFeishuServer, tmp_path: Path
) -> None:
    """Two `fathom serve` processes on one database; SIGKILL the one holding the Feishu long
    connection and the digest scheduler (it releases nothing): the other holds both once the
    leases have run out."""
    env = {**cli_env, **FEISHU_WS, "FEISHU_DOMAIN": feishu_server.url}
    fake = feishu_server.fake
    first = serve(env, tmp_path)
    procs = [first]
    try:
        wait_until_up(first)
        wait_until(lambda: _role_of(first).get("state") == "connected", lambda: logs(procs))
        second = serve(env, tmp_path)
        procs.append(second)
        wait_until_up(second)
        assert _role_of(second).get("role") == "standby"
        assert (_ready(first)["scheduler"], _ready(second)["scheduler"]) == ("holder", "standby")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        wait_until(lambda: _role_of(second).get("state") == "connected", lambda: logs(procs))
        assert _role_of(second).get("role") == "holder" and fake.ws_connections == 2
        wait_until(  # digests too
            lambda: _ready(second).get("scheduler") == "holder", lambda: logs(procs)
        )
    finally:
        for served in procs:
            if served.proc.poll() is None:
                terminate(served)
