"""DingTalk on the platform contract: the HTTP callback routes (messages, and presses on
cards' buttons), or the SDK's stream.

``dingtalk-stream`` is imported only when the platform is opened (``bots.dingtalk.app``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.chat.platform import ChatPlatform, OpenPlatform, PlatformRoute
from bots.dingtalk.settings import DingTalkSettings

if TYPE_CHECKING:
    import httpx

    from core.operations.runners import JobRunner


class DingTalkPlatform(ChatPlatform[DingTalkSettings]):
    settings_class = DingTalkSettings
    routes = (
        PlatformRoute("/dingtalk/events", ("POST",)),
        PlatformRoute("/dingtalk/card", ("POST",)),
    )

    @classmethod
    def secret_patterns(cls) -> tuple[str, ...]:
        """The access token in its API header, and the Stream connection's ticket in the
        WebSocket URL."""
        return (
            r"x-acs-dingtalk-access-token['\"]?\s*[:=]\s*['\"]?[A-Za-z0-9_-]+",
            r"\bticket=[A-Za-z0-9_-]+",
        )

    _http: httpx.AsyncClient | None = None

    async def open(self, runner: JobRunner | None) -> OpenPlatform:
        import httpx

        from bots.dingtalk.api import DingTalkApi
        from bots.dingtalk.callbacks import CardCallbacks
        from bots.dingtalk.delivery import DingTalkPosters

        settings = self.settings
        self._http = http = httpx.AsyncClient(
            timeout=10.0, headers={"User-Agent": "fathom-bot/0.1"}
        )
        api = DingTalkApi(
            http,
            client_id=settings.client_id or "",
            client_secret=settings.client_secret or "",
            api_url=settings.api_url,
            robot_code=settings.robot_code,
        )
        callbacks = CardCallbacks(
            api,
            stream=settings.mode == "stream",
            url=settings.card_callback_url,
            client_secret=settings.client_secret or "",
        )
        posters = DingTalkPosters(
            api,
            self.services.store,
            template_id=settings.card_template_id,
            edit_interval=settings.edit_interval,
            callbacks=callbacks,
        )
        if runner is None:
            return OpenPlatform(posters)
        from bots.dingtalk.app import DingTalkAdapter, dingtalk_markup

        chat = self.services.commands(runner, dingtalk_markup(), posters)
        adapter = DingTalkAdapter(
            settings, chat, api, self.services.store, self.services.limits, callbacks=callbacks
        )
        return OpenPlatform(posters, adapter)

    @property
    def mode(self) -> str:
        return self.settings.mode

    @property
    def long_lived(self) -> bool:
        return self.settings.mode == "stream"

    async def aclose(self) -> None:
        """The HTTP client, once the job runner has stopped (its running jobs post through it
        during their grace period)."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()
