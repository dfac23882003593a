"""Where presses on this app's DingTalk cards come back.

- Stream mode: over the stream (topic ``/v1.0/card/instances/callback``); nothing to register.
- HTTP mode with ``DINGTALK_CARD_CALLBACK_URL``: to that address (``POST /dingtalk/card``),
  registered with DingTalk under the route key ``fathom`` ("register the card callback
  address", ``forceUpdate``: every replica registers the same) the first time a process
  shows buttons, retried at most once a minute while DingTalk refuses. The registered
  address carries a key derived from the app's secret (``?key=``); a callback without it is
  refused (403), so only DingTalk, which was given the address, can press.
- HTTP mode without it: cards carry no buttons (typed ``stop`` and ``cancel`` still work).

Until the route is registered, cards are shown without buttons: a button never appears
that nobody would hear.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from urllib.parse import urlencode

from bots.dingtalk.api import DingTalkApi

log = logging.getLogger(__name__)

#: The card callback route key Fathom registers (and names on its cards).
ROUTE_KEY = "fathom"
#: After a refused registration, try again no sooner than this (seconds).
RETRY_EVERY = 60.0


def callback_key(client_secret: str) -> str:
    """The key in the registered callback address (HMAC of the app's secret)."""
    digest = hmac.new(client_secret.encode(), b"fathom card callback", hashlib.sha256)
    return digest.hexdigest()[:40]


class CardCallbacks:
    """Whether this process's cards may carry buttons, and where their presses come back."""

    def __init__(
        self,
        api: DingTalkApi,
        *,
        stream: bool,
        url: str | None,
        client_secret: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._stream = stream
        self._url = url
        self.key = callback_key(client_secret)
        self._clock = clock
        self._registered = False
        self._refused_at: float | None = None

    @property
    def enabled(self) -> bool:
        """Presses can come back at all (the stream, or a configured callback address)."""
        return self._stream or self._url is not None

    @property
    def route(self) -> str | None:
        """The callback route key a card names (None: the stream's, or no route registered,
        so the card shows no buttons)."""
        return ROUTE_KEY if self._registered and not self._stream else None

    @property
    def address(self) -> str | None:
        """The address registered with DingTalk (with its key), in HTTP mode."""
        if self._url is None:
            return None
        return f"{self._url}?{urlencode({'key': self.key})}"

    def accepts(self, key: str | None) -> bool:
        """Whether a callback to ``/dingtalk/card`` carries this app's key."""
        return key is not None and hmac.compare_digest(key.encode(), self.key.encode())

    async def ready(self) -> bool:
        """Whether a card shown now may carry buttons (registering the HTTP route first)."""
        if self._stream:
            return True
        address = self.address
        if address is None:
            return False
        if self._registered:
            return True
        if self._refused_at is not None and self._clock() - self._refused_at < RETRY_EVERY:
            return False
        try:
            await self._api.register_card_callback(ROUTE_KEY, address, self.key)
        except Exception as exc:
            self._refused_at = self._clock()
            log.warning(
                "dingtalk did not register the card callback address (%s: %.160s); cards "
                "carry no buttons until it does (tried again in %.0f s)",
                type(exc).__name__,
                exc,
                RETRY_EVERY,
            )
            return False
        self._registered = True
        log.info("dingtalk: card callbacks registered at %s", self._url)
        return True
