"""Slack on the platform contract: HTTP events and OAuth routes, or Socket Mode.

Bolt and the Slack SDK are imported only when the platform is opened (``bots.slack.app``),
so listing the platforms costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.chat.platform import ChatPlatform, Chore, OpenPlatform, PlatformRoute
from bots.slack import tables
from bots.slack.settings import SlackSettings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from bots.slack.delivery import SlackPosters
    from core.operations.runners import JobRunner


class SlackPlatform(ChatPlatform[SlackSettings]):
    settings_class = SlackSettings

    routes = (
        PlatformRoute("/slack/events", ("POST",)),
        PlatformRoute("/slack/install", ("GET",)),
        PlatformRoute("/slack/oauth_redirect", ("GET",)),
    )

    metadata = tables.metadata

    @property
    def _engine(self) -> AsyncEngine:
        engine = self.services.engine
        assert engine is not None, "a platform with tables is given the engine"
        return engine

    @classmethod
    async def kept_of(cls, engine: AsyncEngine, user_id: str) -> str | None:
        """The installations of the app the person made: kept, since the workspace's bot
        would stop working without them (uninstalling the app removes them)."""
        from bots.slack.oauth_states import installations_by

        count = await installations_by(engine, user_id)
        if not count:
            return None
        return (
            f"{user_id} installed the Slack app ({count} installations, kept: uninstalling "
            "the app removes them)"
        )

    @classmethod
    def secret_patterns(cls) -> tuple[str, ...]:
        """Bot, user and app-level tokens (``xoxb-``, ``xoxp-``, ``xapp-``...)."""
        return (r"xox[abposr]-[A-Za-z0-9-]+", r"xapp-[A-Za-z0-9-]+")

    def housekeeping(self) -> tuple[Chore, ...]:
        """The SDK's OAuth states past their expiry (each install page view stores one)."""
        from bots.slack.oauth_states import SlackOAuthStates

        states = SlackOAuthStates(self._engine)
        return (Chore("expired Slack OAuth states", states.prune_expired),)

    _posters: SlackPosters | None = None

    async def open(self, runner: JobRunner | None) -> OpenPlatform:
        from bots.slack.app import slack_auth
        from bots.slack.delivery import SlackPosters

        auth = await slack_auth(self.settings, self._engine)
        self._posters = posters = SlackPosters(
            auth.clients,
            self.services.store,
            edit_interval=self.settings.edit_interval,
            api_url=self.settings.api_url,
            canvas_access=self.settings.canvas_access,
        )
        if runner is None:
            return OpenPlatform(posters)
        from bots.slack.app import SlackIngress
        from bots.slack.markup import SlackMarkup

        chat = self.services.commands(runner, SlackMarkup(), posters)
        return OpenPlatform(posters, SlackIngress(self.settings, auth, chat, self.services.limits))

    @property
    def mode(self) -> str:
        return "socket" if self.long_lived else "http"

    @property
    def long_lived(self) -> bool:
        return self.settings.socket_mode

    async def aclose(self) -> None:
        """The download client, once the job runner has stopped (its running jobs download
        through it during their grace period)."""
        posters, self._posters = self._posters, None
        if posters is not None:
            await posters.aclose()
