"""Slack on the platform contract: HTTP events and OAuth routes, or Socket Mode.

Bolt and the Slack SDK are imported only when the platform is opened (``bots.slack.app``),
so listing the platforms costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.chat.platform import ChatPlatform, Chore, Ingress, PlatformRoute
from bots.slack.settings import SlackSettings

if TYPE_CHECKING:
    from bots.slack.app import SlackAuth
    from bots.slack.delivery import SlackDeliveryFactory
    from core.operations.job import DeliveryFactory
    from core.operations.runners import JobRunner


class SlackPlatform(ChatPlatform[SlackSettings]):
    name = "slack"
    title = "Slack"
    settings_class = SlackSettings

    routes = (
        PlatformRoute("/slack/events", ("POST",)),
        PlatformRoute("/slack/install", ("GET",)),
        PlatformRoute("/slack/oauth_redirect", ("GET",)),
    )

    @classmethod
    def secret_patterns(cls) -> tuple[str, ...]:
        """Bot, user and app-level tokens (``xoxb-``, ``xoxp-``, ``xapp-``...)."""
        return (r"xox[abposr]-[A-Za-z0-9-]+", r"xapp-[A-Za-z0-9-]+")

    def housekeeping(self) -> tuple[Chore, ...]:
        """The SDK's OAuth states past their expiry (each install page view stores one)."""
        from bots.slack.oauth_states import SlackOAuthStates

        states = SlackOAuthStates(self.services.database)
        return (Chore("expired Slack OAuth states", states.prune_expired),)

    _auth: SlackAuth | None = None
    _delivery: SlackDeliveryFactory | None = None

    async def open_delivery(self) -> DeliveryFactory:
        from bots.slack.app import slack_auth
        from bots.slack.delivery import SlackDeliveryFactory

        self._auth = auth = await slack_auth(self.settings, self.services.database.engine)
        self._delivery = factory = SlackDeliveryFactory(
            auth.clients,
            self.services.store,
            edit_interval=self.settings.edit_interval,
            api_url=self.settings.api_url,
        )
        return factory

    async def open_ingress(self, runner: JobRunner) -> Ingress:
        from bots.slack.app import SlackIngress
        from bots.slack.text import SlackMarkup

        if self._auth is None:
            raise RuntimeError("open_delivery first: the ingress answers with its clients")
        chat = self.services.commands(runner, SlackMarkup())
        return SlackIngress(self.settings, self._auth, chat, self.services.limits)

    @property
    def mode(self) -> str:
        return "socket" if self.long_lived else "http"

    @property
    def long_lived(self) -> bool:
        return self.settings.socket_mode

    async def aclose(self) -> None:
        """The download client, once the job runner has stopped (its running jobs download
        through it during their grace period)."""
        delivery, self._delivery = self._delivery, None
        if delivery is not None:
            await delivery.aclose()
