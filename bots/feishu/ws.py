"""The Feishu/Lark long connection (``FEISHU_MODE=ws``) on the shared
:class:`~bots.chat.connection.WatchedConnection` (its own thread and loop, a watchdog).

The SDK's ``start()`` is unfit for a service: it runs the module-level loop the SDK created at
import (shared by every client) and swallows the stop of that loop. So the SDK's module global
is replaced once by a proxy that resolves to the calling thread's own loop, the client is built
on the session's thread, and :meth:`LongConnection.drive` (connect, the SDK's own reconnect
path, ping, wait for the stop signal) runs it there.

The SDK calls the event handler synchronously on its loop; the handler hands the event to the
app's loop and returns once the request is recorded (see ``bots.feishu.app``). A connected
client that hears nothing (not even a pong) for three ping intervals is replaced.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bots.chat.connection import CHECK_EVERY, DEAD_AFTER, Session, WatchedConnection


class _ThreadLoop:
    """Stands in for ``lark_oapi.ws.client.loop``: the event loop of the calling thread, so
    that each client schedules its work on its own thread's loop."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio.get_event_loop(), name)


def _install_thread_loop() -> None:
    from lark_oapi.ws import client as ws_module

    if not isinstance(ws_module.loop, _ThreadLoop):
        ws_module.loop = _ThreadLoop()


class LongConnection(WatchedConnection):
    """One watched long connection for the app (``app_id``/``app_secret``) at ``domain``."""

    name = "feishu long connection"

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
        super().__init__(dead_after=dead_after, check_every=check_every)
        self._app_id = app_id
        self._app_secret = app_secret
        self._domain = domain
        self._handler = handler
        _install_thread_loop()

    def status(self) -> dict[str, object]:
        return {"mode": "ws", **super().status()}

    def build(self, session: Session) -> Any:
        import lark_oapi as lark

        class WatchedClient(lark.ws.Client):  # type: ignore[misc,name-defined]
            """Notes every frame (events and pongs alike)."""

            async def _handle_message(self, msg: bytes) -> None:
                session.heard()
                await super()._handle_message(msg)

        # Built here: the client's cache starts a task on the loop that is current now.
        client = WatchedClient(
            self._app_id,
            self._app_secret,
            event_handler=self._handler,
            domain=self._domain,
            auto_reconnect=True,
            log_level=lark.LogLevel.WARNING,
        )
        client.on_reconnecting = lambda: self.set_state("reconnecting", session)
        client.on_reconnected = lambda: self.set_state("connected", session)
        return client

    async def drive(self, session: Session) -> None:
        from lark_oapi.ws.exception import ClientException

        client = session.client
        try:
            await client._connect()
        except ClientException:
            raise  # refused for good (credentials, connection limit): the watchdog retries
        except Exception:
            # The SDK's own retry path (its intervals come from the server's configuration).
            reconnect = asyncio.ensure_future(client._reconnect())
            stopping = asyncio.ensure_future(session.stop.wait())
            await asyncio.wait({reconnect, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if reconnect.done() and not session.stop.is_set():
                reconnect.result()  # a refusal for good ends this client (see above)
        if session.stop.is_set():
            return
        self.set_state("connected", session)
        pinging = asyncio.ensure_future(client._ping_loop())
        try:
            await session.stop.wait()
        finally:
            pinging.cancel()

    def is_connected(self, client: Any) -> bool:
        return getattr(client, "_conn", None) is not None

    def silence_limit(self, client: Any) -> float | None:
        return 3 * float(getattr(client, "_ping_interval", 120) or 120)

    async def close_client(self, client: Any) -> None:
        client._auto_reconnect = False  # closing must not start the SDK's reconnect
        await client._disconnect()
