"""The DingTalk stream (``DINGTALK_MODE=stream``) on the shared
:class:`~bots.chat.connection.WatchedConnection` (its own thread and loop, a watchdog).

``dingtalk-stream`` 0.24 opens its connection with a blocking request without a timeout,
reads its endpoint once at import, and swallows the first cancellation of ``start()``. So the
client runs on the session's thread; ``open_connection`` is redone here against
``DINGTALK_API_URL`` with a timeout; stopping cancels ``start()`` until it has stopped.

The SDK acknowledges a message only after its handler returns. The handler hands the message
to the app's loop and returns as soon as the request is recorded (a run row committed); the
research itself never runs inside it (newer SDKs cancel handlers when the connection drops).
A message not recorded within :data:`ACK_WITHIN` seconds is answered with an error, and
DingTalk delivers it again (the database dedupe keeps that safe).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from bots.chat.connection import CHECK_EVERY, DEAD_AFTER, Session, WatchedConnection
from bots.dingtalk.events import CARD_CALLBACK_TOPIC

log = logging.getLogger(__name__)

#: How long the handler waits for the request to be recorded before answering with an error.
ACK_WITHIN = 2.5
#: The gateway request's time limit (the SDK's has none).
CONNECT_TIMEOUT = 10.0

#: ``await on_message(data, stream_message_id)`` on the app's loop.
OnMessage = Callable[[dict[str, Any], str], Coroutine[Any, Any, None]]
#: ``await on_card(data)`` on the app's loop: a card callback (a press on a button).
OnCard = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]


class DingTalkStream(WatchedConnection):
    """One watched stream connection for the app (``client_id``/``client_secret``)."""

    name = "dingtalk stream"

    def __init__(
        self,
        client_id: str,
        client_secret: str,
        api_url: str,
        on_message: OnMessage,
        app_loop: asyncio.AbstractEventLoop,
        *,
        on_card: OnCard | None = None,
        dead_after: float = DEAD_AFTER,
        check_every: float = CHECK_EVERY,
    ) -> None:
        super().__init__(dead_after=dead_after, check_every=check_every)
        self._client_id = client_id
        self._client_secret = client_secret
        self._gateway = api_url.rstrip("/") + "/v1.0/gateway/connections/open"
        self._on_message = on_message
        self._on_card = on_card
        self._app_loop = app_loop

    def status(self) -> dict[str, object]:
        return {"mode": "stream", **super().status()}

    def build(self, session: Session) -> Any:
        import dingtalk_stream
        import requests
        from dingtalk_stream.frames import AckMessage

        stream = self

        async def handled(work: Coroutine[Any, Any, None]) -> tuple[int, Any]:
            future: concurrent.futures.Future[None] = asyncio.run_coroutine_threadsafe(
                work, stream._app_loop
            )
            # Waited for, never cancelled: a timeout here (or this loop closing) must not
            # cut the app's work on the message in half.
            done, _ = await asyncio.wait({asyncio.wrap_future(future)}, timeout=ACK_WITHIN)
            failed = next(iter(done)).exception() if done else TimeoutError()
            if failed is not None:  # not recorded: DingTalk delivers it again
                log.warning("dingtalk message not recorded (%s)", type(failed).__name__)
                return AckMessage.STATUS_SYSTEM_EXCEPTION, "not recorded; try again"
            return AckMessage.STATUS_OK, "OK"

        class Handler(dingtalk_stream.CallbackHandler):  # type: ignore[misc]
            async def process(self, callback: Any) -> tuple[int, Any]:
                session.heard()
                data = callback.data if isinstance(callback.data, dict) else {}
                message_id = str(callback.headers.message_id or "")
                return await handled(stream._on_message(data, message_id))

        class CardHandler(dingtalk_stream.CallbackHandler):  # type: ignore[misc]
            """A press on a card's button: decided (database only) before the ack; the
            answer to the presser goes out afterwards."""

            async def process(self, callback: Any) -> tuple[int, Any]:
                session.heard()
                data = callback.data if isinstance(callback.data, dict) else {}
                assert stream._on_card is not None
                status, _ = await handled(stream._on_card(data))
                return status, {}  # nothing on the card changes from the answer itself

        class Client(dingtalk_stream.DingTalkStreamClient):  # type: ignore[misc]
            def open_connection(self) -> dict[str, Any] | None:
                """The SDK's gateway request, at DINGTALK_API_URL and with a time limit."""
                body = {
                    "clientId": self.credential.client_id,
                    "clientSecret": self.credential.client_secret,
                    "subscriptions": [
                        {"type": "CALLBACK", "topic": topic} for topic in self.callback_handler_map
                    ],
                    "ua": "fathom",
                    "localIp": "",
                }
                try:
                    response = requests.post(stream._gateway, json=body, timeout=CONNECT_TIMEOUT)
                    response.raise_for_status()
                    data = response.json()
                except Exception as exc:
                    stream.last_error = f"gateway: {type(exc).__name__}: {str(exc)[:160]}"
                    log.warning("dingtalk stream: %s", stream.last_error)
                    return None
                return data if isinstance(data, dict) else None

        credential = dingtalk_stream.Credential(self._client_id, self._client_secret)
        sdk_log = logging.getLogger("bots.dingtalk.sdk")
        sdk_log.setLevel(logging.WARNING)  # its INFO lines show the connection's ticket
        client = Client(credential, logger=sdk_log)
        client.register_callback_handler(dingtalk_stream.ChatbotMessage.TOPIC, Handler())
        if self._on_card is not None:
            client.register_callback_handler(CARD_CALLBACK_TOPIC, CardHandler())
        return client

    async def drive(self, session: Session) -> None:
        running = asyncio.ensure_future(session.client.start())
        stopping = asyncio.ensure_future(session.stop.wait())
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        # 0.24's start() swallows a cancellation (it sleeps and reconnects): cancel until done.
        while not running.done():
            running.cancel()
            await asyncio.wait({running}, timeout=1.0)
        stopping.cancel()

    def is_connected(self, client: Any) -> bool:
        from websockets.protocol import State

        websocket = getattr(client, "websocket", None)
        return websocket is not None and getattr(websocket, "state", None) is State.OPEN

    async def close_client(self, client: Any) -> None:
        websocket = getattr(client, "websocket", None)
        if websocket is not None:
            await websocket.close()
