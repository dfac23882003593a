"""Microsoft Teams on the platform contract: the Bot Framework's messaging endpoint
(``POST /teams/messages``) in, the Bot Connector out, and its own table of conversation
references."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bots.chat.platform import ChatPlatform, OpenPlatform, PlatformRoute
from bots.teams import references
from bots.teams.settings import TeamsSettings

if TYPE_CHECKING:
    import httpx

    from bots.teams.credentials import CredentialsCheck
    from core.operations.runners import JobRunner


class TeamsPlatform(ChatPlatform[TeamsSettings]):
    settings_class = TeamsSettings
    routes = (PlatformRoute("/teams/messages", ("POST",)),)
    metadata = references.metadata

    @classmethod
    def secret_patterns(cls) -> tuple[str, ...]:
        """The bot's and the Bot Framework's tokens (JWTs), an Azure client secret (``Q~``
        after three characters and a digit), and a file link's ``tempauth``."""
        return (
            r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+",
            r"\b[A-Za-z0-9_.-]{3}\dQ~[A-Za-z0-9_.~-]{20,}",
            r"\btempauth=[^&\s\"']+",
        )

    _http: httpx.AsyncClient | None = None
    _credentials: CredentialsCheck | None = None
    _first_check: asyncio.Task[str | None] | None = None

    async def open(self, runner: JobRunner | None) -> OpenPlatform:
        import httpx

        from bots.teams.api import TeamsApi
        from bots.teams.credentials import CredentialsCheck
        from bots.teams.delivery import TeamsPosters
        from bots.teams.references import ConversationReferences

        settings = self.settings
        self._http = http = httpx.AsyncClient(
            timeout=10.0, headers={"User-Agent": "fathom-bot/0.1"}
        )
        api = TeamsApi(
            http,
            app_id=settings.app_id or "",
            app_password=settings.app_password or "",
            token_url=settings.token_endpoint,
        )
        # The bot's token, asked for now: a refused app password is known (and logged)
        # before any research runs, and /readyz waits for this answer.
        self._credentials = credentials = CredentialsCheck(api)
        self._first_check = asyncio.create_task(credentials.problem())
        engine = self.services.engine
        stored = ConversationReferences(engine) if engine is not None else None
        cancel = self.services.requests.cancel
        posters = TeamsPosters(
            api, self.services.store, stored, edit_interval=settings.edit_interval, cancel=cancel
        )
        if runner is None:
            return OpenPlatform(posters)
        from bots.teams.app import TeamsAdapter, teams_markup
        from bots.teams.auth import ActivityAuth

        auth = ActivityAuth(
            http, metadata_url=settings.openid_metadata_url, app_id=settings.app_id or ""
        )
        chat = self.services.commands(runner, teams_markup(), posters)
        adapter = TeamsAdapter(
            settings,
            chat,
            api,
            auth,
            stored,
            self.services.limits,
            cancel=cancel,
            credentials=credentials,
        )
        return OpenPlatform(posters, adapter)

    async def readiness(self) -> str | None:
        """Not ready while the identity platform refuses the bot's token (a wrong or expired
        ``TEAMS_APP_PASSWORD``): ``bots.teams.credentials``."""
        if self._credentials is None:
            return None
        return await self._credentials.problem()

    async def aclose(self) -> None:
        """The HTTP client, once the job runner has stopped (its running jobs post through it
        during their grace period)."""
        check, self._first_check = self._first_check, None
        if check is not None and not check.done():
            check.cancel()
            await asyncio.gather(check, return_exceptions=True)
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()
