"""The Feishu/Lark long connection (``FEISHU_MODE=ws``): the SDK's WebSocket client on a
thread and event loop of its own, watched and replaced when it is dead.

The SDK's client cannot run on the app's loop, and its ``start()`` is unfit for a service:
it runs the module-level loop the SDK created at import (every client shares it), and it
swallows the stop of that loop and carries on. So each connection gets a thread with a fresh
loop, the SDK's module global is replaced once by a proxy that resolves to the calling
thread's own loop, the client is built on that thread, and a small driver (connect, reconnect
through the SDK's own path, ping, wait for the stop signal) runs it there. Stopping sets the
signal; the thread then closes the socket, cancels what is left and closes its loop itself.

The SDK calls the event handler synchronously on its loop; the handler hands the event to the
app's loop and returns once the request is recorded (see ``bots.feishu.app``).

The SDK's reconnect has no timeout (its endpoint request can hang, and a half-open socket is
only noticed when a write fails), so a watchdog on the app's loop checks the connection every
few seconds: when the thread ended, when the client has not been connected for
:attr:`LongConnection.dead_after` seconds, or when nothing (not even a pong) arrived for three
ping intervals, it abandons that client and starts a new one, backing off while new ones keep
failing. A client that is stuck in a blocking call exits as soon as the call returns; nothing it
does after it was abandoned touches the connection's state. :meth:`LongConnection.status` is
what ``GET /readyz`` shows.
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


class _ThreadLoop:
    """Stands in for ``lark_oapi.ws.client.loop``: the event loop of the calling thread, so
    that each client schedules its work on its own thread's loop."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio.get_event_loop(), name)


def _install_thread_loop() -> None:
    from lark_oapi.ws import client as ws_module

    if not isinstance(ws_module.loop, _ThreadLoop):
        ws_module.loop = _ThreadLoop()


@dataclass(eq=False)
class _Session:
    """One client on its thread; ``current`` is False once the connection abandoned it."""

    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event
    client: Any = None
    thread: threading.Thread | None = None
    current: bool = True
    last_frame: float = field(default_factory=time.monotonic)

    def request_stop(self) -> None:
        self.current = False
        with contextlib.suppress(RuntimeError):  # its loop is already closed
            self.loop.call_soon_threadsafe(self.stop.set)


class LongConnection:
    """One watched long connection for the app (``app_id``/``app_secret``) at ``domain``."""

    def __init__(
        self,
        app_id: str,
        app_secret: str,
        domain: str,
        handler: Any,  # lark_oapi.EventDispatcherHandler
        *,
        dead_after: float = DEAD_AFTER,
        check_every: float = CHECK_EVERY,
    ) -> None:
        self._app_id = app_id
        self._app_secret = app_secret
        self._domain = domain
        self._handler = handler
        self.dead_after = dead_after
        self._check_every = check_every
        self.state = "starting"
        self.since = time.monotonic()
        self.restarts = 0
        self.last_error: str | None = None
        self._session: _Session | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._lock = threading.Lock()

    # -- state ----------------------------------------------------------------------------
    def _set(self, state: str, session: _Session | None = None) -> None:
        """Record a state; a report from an abandoned client is ignored."""
        if session is not None and not session.current:
            return
        with self._lock:
            if state != self.state:
                self.state, self.since = state, time.monotonic()
                log.info("feishu long connection: %s", state)
            if state == "connected":
                self.last_error = None

    @property
    def connected(self) -> bool:
        session = self._session
        client = session.client if session is not None else None
        return client is not None and getattr(client, "_conn", None) is not None

    def status(self) -> dict[str, object]:
        connected = self.connected
        return {
            "mode": "ws",
            "state": "connected" if connected else self.state,
            "for_seconds": round(time.monotonic() - self.since, 1),
            "restarts": self.restarts,
            **({"last_error": self.last_error} if self.last_error and not connected else {}),
        }

    # -- one client -----------------------------------------------------------------------------
    def _start_session(self) -> None:
        _install_thread_loop()
        loop = asyncio.new_event_loop()
        session = _Session(loop, asyncio.Event())
        self._session = session
        self._set("connecting")
        session.thread = threading.Thread(
            target=self._run, args=(session,), name="feishu-ws", daemon=True
        )
        session.thread.start()

    def _new_client(self, session: _Session) -> Any:
        import lark_oapi as lark

        class WatchedClient(lark.ws.Client):  # type: ignore[misc,name-defined]
            """Notes the time of every frame (events and pongs alike)."""

            async def _handle_message(self, msg: bytes) -> None:
                session.last_frame = time.monotonic()
                await super()._handle_message(msg)

        client = WatchedClient(
            self._app_id,
            self._app_secret,
            event_handler=self._handler,
            domain=self._domain,
            auto_reconnect=True,
            log_level=lark.LogLevel.WARNING,
        )
        client.on_reconnecting = lambda: self._set("reconnecting", session)
        client.on_reconnected = lambda: self._set("connected", session)
        return client

    def _run(self, session: _Session) -> None:
        """The session's thread: build the client on this thread's loop, drive it until the
        stop signal, then close the socket and the loop."""
        loop = session.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._drive(session))
        except Exception as exc:  # e.g. wrong app credentials
            if session.current:
                self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                log.warning("feishu long connection stopped (%s)", self.last_error)
                self._set("down", session)
        finally:
            _close_loop(loop, session.client)

    async def _drive(self, session: _Session) -> None:
        from lark_oapi.ws.exception import ClientException

        # Built here: the client's cache starts a task on the loop that is current now.
        client = session.client = self._new_client(session)
        try:
            await client._connect()
        except ClientException:
            raise  # refused for good (credentials, connection limit): the watchdog retries
        except Exception as exc:
            log.warning("feishu long connection: connect failed (%s)", type(exc).__name__)
            # The SDK's own retry path (its intervals come from the server's configuration).
            reconnect = asyncio.ensure_future(client._reconnect())
            stopping = asyncio.ensure_future(session.stop.wait())
            await asyncio.wait({reconnect, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if reconnect.done() and not session.stop.is_set():
                reconnect.result()  # a refusal for good ends this client (see above)
        if session.stop.is_set():
            return
        self._set("connected", session)
        pinging = asyncio.ensure_future(client._ping_loop())
        try:
            await session.stop.wait()
        finally:
            pinging.cancel()

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
            self._set("connected")
            ping = float(getattr(session.client, "_ping_interval", 120) or 120)
            if now - session.last_frame > max(3 * ping, self.dead_after):
                return f"nothing received for {now - session.last_frame:.0f}s"
            return None
        if self.state == "connected":  # it just dropped: the SDK's reconnect takes over
            self._set("disconnected")
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
                log.warning("feishu long connection is dead (%s); starting a new one", why)
                self._abandon()
                self._set("restarting")
                await asyncio.sleep(restart_delay(failed_in_a_row))
                failed_in_a_row += 1
                self.restarts += 1
                self._start_session()
            except asyncio.CancelledError:
                raise
            except Exception:  # the watchdog must outlive any one failure
                log.exception("feishu long connection watchdog failed; it keeps watching")

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
        self._set("stopped")


def _close_loop(loop: asyncio.AbstractEventLoop, client: Any) -> None:
    """On the session's own thread, after its driver returned: close the socket without the
    SDK reconnecting, cancel what is left (ping, receive, reconnect) and close the loop."""
    if client is not None:
        client._auto_reconnect = False
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.wait_for(client._disconnect(), 2.0))
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
    with contextlib.suppress(Exception):
        loop.close()
