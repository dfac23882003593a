"""Slack on the platform contract: HTTP events and OAuth routes, or Socket Mode.

Bolt and the Slack SDK are imported only when the platform is opened (``bots.slack.app``),
so listing the platforms costs nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bots.chat.platform import ChatPlatform, PlatformRoute
from bots.slack.settings import SlackSettings

if TYPE_CHECKING:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.async_app import AsyncApp
    from starlette.requests import Request
    from starlette.responses import Response

    from bots.slack.app import SlackAuth
    from bots.slack.http import SlackEndpoint
    from core.delivery import DeliveryFactory
    from core.jobs import JobRunner

log = logging.getLogger("bots.slack.app")  # the log lines it always had


class SlackPlatform(ChatPlatform[SlackSettings]):
    name = "slack"
    title = "Slack"
    settings_class = SlackSettings
    routes = (
        PlatformRoute("/slack/events", ("POST",)),
        PlatformRoute("/slack/install", ("GET",)),
        PlatformRoute("/slack/oauth_redirect", ("GET",)),
    )

    _auth: SlackAuth | None = None
    _app: AsyncApp | None = None
    _endpoint: SlackEndpoint | None = None
    _socket: AsyncSocketModeHandler | None = None

    async def open_delivery(self) -> DeliveryFactory:
        from bots.slack.app import slack_auth
        from bots.slack.delivery import SlackDeliveryFactory

        self._auth = auth = await slack_auth(self.settings, self.services.database.engine)
        return SlackDeliveryFactory(
            auth.clients, self.services.store, edit_interval=self.settings.edit_interval
        )

    async def open_ingress(self, runner: JobRunner) -> None:
        from bots.slack.app import slack_endpoint
        from bots.slack.text import SlackMarkup

        if self._auth is None:
            raise RuntimeError("open_delivery first: ingress answers with its clients")
        chat = self.services.commands(runner, SlackMarkup())
        self._app, self._endpoint = slack_endpoint(
            self.settings, self._auth, chat, self.services.limits
        )

    async def handle(self, request: Request) -> Response:
        if self._endpoint is None:
            raise RuntimeError("the Slack platform is not open")
        return await self._endpoint(request)

    @property
    def long_lived(self) -> bool:
        return self.settings.socket_mode

    @property
    def mode(self) -> str:
        return "socket" if self.long_lived else "http"

    async def connect(self) -> None:
        from bots.slack.app import socket_mode_handler

        if self._app is None:
            raise RuntimeError("open_ingress first: Socket Mode delivers to the Bolt app")
        self._socket = socket = socket_mode_handler(self.settings, self._app)
        await socket.connect_async()  # type: ignore[no-untyped-call]
        log.info("slack: connected in Socket Mode")

    async def disconnect(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close_async()  # type: ignore[no-untyped-call]
