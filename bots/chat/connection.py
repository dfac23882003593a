"""A platform's long-lived connection (Feishu's long connection, DingTalk's stream), run on a
thread and event loop of its own and watched from the app's loop.

Platform SDKs for these connections make blocking HTTP calls without timeouts, keep state in
module globals, or swallow cancellation, so none of them runs on the app's loop. A subclass of
:class:`WatchedConnection` says how to build its SDK client (on the session's thread), how to
drive it until the session's stop signal, whether it is connected, and how long it may stay
silent. The base class owns the rest, the same for every platform:

- each client gets a :class:`Session`: a thread, a fresh loop, a stop signal. Stopping sets the
  signal; the thread then lets the subclass close its client, cancels what is left and closes
  its loop itself. A client stuck in a blocking call exits as soon as the call returns, and
  nothing it reports after it was abandoned changes the connection's state;
- a watchdog checks every few seconds: when the thread ended, when the client has not been
  connected for ``dead_after`` seconds, or when nothing arrived for longer than the client's
  silence limit, it abandons that client and starts a new one, backing off while new ones keep
  failing (:func:`restart_delay`);
- :meth:`WatchedConnection.status` is what ``GET /readyz`` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: A client not connected for this long is replaced (seconds).
DEAD_AFTER = 60.0
#: How often the watchdog looks (seconds).
CHECK_EVERY = 5.0
#: The longest wait before starting another client while they keep failing (seconds).
MAX_BACKOFF = 60.0


def restart_delay(failed_in_a_row: int) -> float:
    """Seconds to wait before a restart, after that many restarts that never connected:
    0, 1, 3, 7, ... up to a minute."""
    return min(2.0**failed_in_a_row - 1.0, MAX_BACKOFF)


@dataclass(eq=False)
class Session:
    """One client on its thread; ``current`` is False once the connection abandoned it."""

    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event
    client: Any = None
    thread: threading.Thread | None = None
    current: bool = True
    last_frame: float = field(default_factory=time.monotonic)

    def heard(self) -> None:
        """Something arrived on the connection (a message, a pong)."""
        self.last_frame = time.monotonic()

    def request_stop(self) -> None:
        self.current = False
        with contextlib.suppress(RuntimeError):  # its loop is already closed
            self.loop.call_soon_threadsafe(self.stop.set)


class WatchedConnection:
    """One platform connection, replaced whenever it is found dead."""

    #: The platform's name, for logs, thread names and ``/readyz``.
    name = "connection"

    def __init__(self, *, dead_after: float = DEAD_AFTER, check_every: float = CHECK_EVERY):
        self.dead_after = dead_after
        self._check_every = check_every
        self.state = "starting"
        self.since = time.monotonic()
        self.restarts = 0
        self.last_error: str | None = None
        self._session: Session | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._lock = threading.Lock()

    # -- what a platform fills in -------------------------------------------------------------
    def build(self, session: Session) -> Any:
        """The SDK client, built on the session's thread (its loop is the current one)."""
        raise NotImplementedError

    async def drive(self, session: Session) -> None:
        """Connect ``session.client`` and keep it going until ``session.stop`` is set; call
        :meth:`set_state` with ``session`` as it connects, and ``session.heard()`` for what
        arrives. Raising ends the session (the watchdog starts another)."""
        raise NotImplementedError

    def is_connected(self, client: Any) -> bool:
        raise NotImplementedError

    def silence_limit(self, client: Any) -> float | None:
        """Seconds without anything arriving after which a connected client is dead (None:
        the client's own keepalive detects that)."""
        return None

    async def close_client(self, client: Any) -> None:
        """Close the client's socket (on its own loop, after :meth:`drive` returned)."""
        return None

    # -- state ------------------------------------------------------------------------------
    def set_state(self, state: str, session: Session | None = None) -> None:
        """Record a state; a report from an abandoned client is ignored."""
        if session is not None and not session.current:
            return
        with self._lock:
            if state != self.state:
                self.state, self.since = state, time.monotonic()
                log.info("%s: %s", self.name, state)
            if state == "connected":
                self.last_error = None

    @property
    def connected(self) -> bool:
        session = self._session
        client = session.client if session is not None else None
        return client is not None and self.is_connected(client)

    def status(self) -> dict[str, object]:
        connected = self.connected
        return {
            "state": "connected" if connected else self.state,
            "for_seconds": round(time.monotonic() - self.since, 1),
            "restarts": self.restarts,
            **({"last_error": self.last_error} if self.last_error and not connected else {}),
        }

    # -- sessions ---------------------------------------------------------------------------
    def _start_session(self) -> None:
        session = Session(asyncio.new_event_loop(), asyncio.Event())
        self._session = session
        self.set_state("connecting")
        session.thread = threading.Thread(
            target=self._run, args=(session,), name=self.name, daemon=True
        )
        session.thread.start()

    def _run(self, session: Session) -> None:
        loop = session.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._build_and_drive(session))
        except Exception as exc:  # e.g. wrong app credentials
            if session.current:
                self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                log.warning("%s stopped (%s)", self.name, self.last_error)
                self.set_state("down", session)
        finally:
            self._close_loop(session)

    async def _build_and_drive(self, session: Session) -> None:
        session.client = self.build(session)
        await self.drive(session)

    def _close_loop(self, session: Session) -> None:
        """On the session's own thread: close the client, cancel what is left, close the loop."""
        loop = session.loop
        if session.client is not None:
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.wait_for(self.close_client(session.client), 2.0))
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
        with contextlib.suppress(Exception):
            loop.close()

    # -- the watchdog -------------------------------------------------------------------------
    async def start(self) -> None:
        self._start_session()
        self._watchdog = asyncio.create_task(self._watch())

    def _why_dead(self) -> str | None:
        """Why the current client should be replaced, or None."""
        session = self._session
        if session is None or session.thread is None or not session.thread.is_alive():
            return "its thread stopped"
        now = time.monotonic()
        if self.connected:
            self.set_state("connected")
            limit = self.silence_limit(session.client)
            if limit is not None and now - session.last_frame > max(limit, self.dead_after):
                return f"nothing received for {now - session.last_frame:.0f}s"
            return None
        if self.state == "connected":  # it just dropped: the client's own reconnect goes first
            self.set_state("disconnected")
            return None
        if now - self.since > self.dead_after:
            return f"not connected for {now - self.since:.0f}s"
        return None

    async def _watch(self) -> None:
        failed_in_a_row = 0  # restarts that never got connected (wrong credentials, outage)
        while True:
            await asyncio.sleep(self._check_every)
            try:
                why = self._why_dead()
                if why is None:
                    if self.connected:
                        failed_in_a_row = 0
                    continue
                log.warning("%s is dead (%s); starting a new one", self.name, why)
                self._abandon()
                self.set_state("restarting")
                await asyncio.sleep(restart_delay(failed_in_a_row))
                failed_in_a_row += 1
                self.restarts += 1
                self._start_session()
            except asyncio.CancelledError:
                raise
            except Exception:  # the watchdog must outlive any one failure
                log.exception("%s watchdog failed; it keeps watching", self.name)

    def _abandon(self) -> None:
        """Signal the current client to stop; its thread finishes on its own."""
        session, self._session = self._session, None
        if session is not None:
            session.request_stop()

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        session = self._session
        self._abandon()
        if session is not None and session.thread is not None:
            await asyncio.to_thread(session.thread.join, 5.0)
        self.set_state("stopped")


class ConnectionSlot:
    """The one long-lived connection of a platform in this process: opened on the replica
    holding the platform's election, closed when it loses it or shuts down; its status is
    the connection's, or the platform's ``mode`` while there is none."""

    def __init__(self, mode: str) -> None:
        self._mode = mode
        self.connection: WatchedConnection | None = None

    async def open(self, connection: WatchedConnection) -> None:
        self.connection = connection  # before starting: a failed start is still closed
        await connection.start()

    async def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            await connection.close()

    def status(self) -> dict[str, object]:
        if self.connection is not None:
            return self.connection.status()
        return {"mode": self._mode}
