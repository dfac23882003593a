"""The Feishu/Lark long connection (``FEISHU_MODE=ws``): the SDK's WebSocket client in a
thread of its own, watched and restarted when it is dead.

``lark_oapi.ws.Client.start()`` blocks and runs the module-level event loop the SDK created at
import (``lark_oapi.ws.client.loop``), so it cannot run on the app's loop: each connection gets
a thread and a fresh loop, installed as that module global before ``start()``. The SDK calls
the event handler synchronously on its loop; the handler hands the event to the app's loop and
returns once the request is recorded (see ``bots.feishu.app``).

The SDK's reconnect path has no timeout (its endpoint request can hang, and a half-open socket
is only noticed when a ping fails), so a watchdog checks the connection every few seconds:
when the thread died, when the client has not been connected for :attr:`dead_after` seconds,
or when nothing (not even a pong) arrived for three ping intervals, the client is stopped and
a new one started. :meth:`LongConnection.status` is what ``GET /readyz`` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

#: A client not connected for this long is restarted (seconds).
DEAD_AFTER = 60.0
#: How often the watchdog looks (seconds).
CHECK_EVERY = 5.0
#: The longest wait before restarting a connection that keeps failing (seconds).
MAX_BACKOFF = 60.0


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
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._last_frame = time.monotonic()
        self._watchdog: asyncio.Task[None] | None = None
        self._lock = threading.Lock()

    # -- state ----------------------------------------------------------------------------
    def _set(self, state: str) -> None:
        with self._lock:
            if state != self.state:
                self.state, self.since = state, time.monotonic()
                log.info("feishu long connection: %s", state)

    @property
    def connected(self) -> bool:
        client = self._client
        return client is not None and getattr(client, "_conn", None) is not None

    def status(self) -> dict[str, object]:
        return {
            "mode": "ws",
            "state": "connected" if self.connected else self.state,
            "for_seconds": round(time.monotonic() - self.since, 1),
            "restarts": self.restarts,
            **({"last_error": self.last_error} if self.last_error else {}),
        }

    # -- running ----------------------------------------------------------------------------
    async def start(self) -> None:
        self._start_thread()
        self._watchdog = asyncio.create_task(self._watch())

    def _start_thread(self) -> None:
        import lark_oapi as lark
        from lark_oapi.ws import client as ws_module

        connection = self

        class WatchedClient(lark.ws.Client):  # type: ignore[misc,name-defined]
            """Notes the time of every frame (events and pongs alike)."""

            async def _handle_message(self, msg: bytes) -> None:
                connection._last_frame = time.monotonic()
                await super()._handle_message(msg)

        loop = asyncio.new_event_loop()
        client = WatchedClient(
            self._app_id,
            self._app_secret,
            event_handler=self._handler,
            domain=self._domain,
            auto_reconnect=True,
            log_level=lark.LogLevel.WARNING,
        )
        client.on_reconnecting = lambda: self._set("reconnecting")
        client.on_reconnected = lambda: self._set("connected")
        self._client, self._loop = client, loop
        self._last_frame = time.monotonic()
        self._set("connecting")

        def run() -> None:
            asyncio.set_event_loop(loop)
            ws_module.loop = loop  # the SDK's coroutines schedule onto this module global
            try:
                client.start()
            except RuntimeError as exc:  # the loop was stopped: a restart or shutdown
                if "stopped" not in str(exc):
                    self._failed(exc)
            except Exception as exc:  # e.g. wrong app credentials
                self._failed(exc)

        self._thread = threading.Thread(target=run, name="feishu-ws", daemon=True)
        self._thread.start()

    def _failed(self, exc: Exception) -> None:
        self.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
        log.warning("feishu long connection stopped (%s)", self.last_error)
        self._set("down")

    def _stop_thread(self) -> None:
        """Close the socket (briefly), stop the client's loop and wait for its thread."""
        client, loop, thread = self._client, self._loop, self._thread
        if loop is not None and not loop.is_closed():
            if client is not None and loop.is_running():
                future = asyncio.run_coroutine_threadsafe(_quietly(client._disconnect()), loop)
                with contextlib.suppress(Exception):
                    future.result(timeout=2.0)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5.0)
        if loop is not None and not loop.is_running() and not loop.is_closed():
            _close_loop(loop)
        self._client = self._loop = self._thread = None

    def _is_dead(self) -> str | None:
        """Why the connection should be restarted, or None."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return "its thread stopped"
        now = time.monotonic()
        if self.connected:
            self._set("connected")
            ping = float(getattr(self._client, "_ping_interval", 120) or 120)
            if now - self._last_frame > max(3 * ping, self.dead_after):
                return f"nothing received for {now - self._last_frame:.0f}s"
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
            why = self._is_dead()
            if why is None:
                if self.connected:
                    failed_in_a_row = 0
                continue
            log.warning("feishu long connection is dead (%s); restarting it", why)
            await asyncio.to_thread(self._stop_thread)
            await asyncio.sleep(restart_delay(failed_in_a_row))
            failed_in_a_row += 1
            self.restarts += 1
            self._start_thread()

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        await asyncio.to_thread(self._stop_thread)
        self._set("stopped")


def restart_delay(failed_in_a_row: int) -> float:
    """Seconds to wait before a restart, after that many restarts that never connected:
    0, 1, 3, 7, ... up to a minute."""
    return min(2.0**failed_in_a_row - 1.0, MAX_BACKOFF)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what the stopped client left on its loop (ping, receive, reconnect) and close it,
    so that nothing of it runs or logs later."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
    with contextlib.suppress(Exception):
        loop.close()


async def _quietly(awaitable: Any) -> None:
    with contextlib.suppress(Exception):
        await awaitable
