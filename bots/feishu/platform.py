"""Feishu/Lark on the platform contract: the webhook route, or the SDK's long connection.

``lark-oapi`` is imported only when the platform is opened (``bots.feishu.app``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.chat.platform import ChatPlatform, Ingress, PlatformRoute
from bots.feishu.settings import FeishuSettings

if TYPE_CHECKING:
    from bots.feishu.api import FeishuApi
    from core.operations.job import DeliveryFactory
    from core.operations.runners import JobRunner


class FeishuPlatform(ChatPlatform[FeishuSettings]):
    name = "feishu"
    title = "Feishu/Lark"
    settings_class = FeishuSettings

    routes = (PlatformRoute("/feishu/events", ("POST",)),)

    @classmethod
    def secret_patterns(cls) -> tuple[str, ...]:
        """Tenant, user and app access tokens (``t-``, ``u-``, ``a-`` and 24 or more
        characters; a ``t-shirt`` is no token)."""
        return (r"\b[tua]-[A-Za-z0-9_]{24,}",)

    _api: FeishuApi | None = None

    async def open_delivery(self) -> DeliveryFactory:
        from bots.feishu.api import FeishuApi
        from bots.feishu.delivery import FeishuDeliveryFactory

        settings = self.settings
        self._api = api = FeishuApi(
            settings.app_id or "", settings.app_secret or "", settings.domain
        )
        return FeishuDeliveryFactory(api, self.services.store, edit_interval=settings.edit_interval)

    async def open_ingress(self, runner: JobRunner) -> Ingress:
        from bots.feishu.app import FeishuAdapter, feishu_markup

        if self._api is None:
            raise RuntimeError("open_delivery first: the ingress answers with its client")
        chat = self.services.commands(runner, feishu_markup())
        adapter = FeishuAdapter(self.settings, chat, self._api, self.services.limits)
        await adapter.start()
        return adapter

    @property
    def mode(self) -> str:
        return self.settings.mode

    @property
    def long_lived(self) -> bool:
        return self.settings.mode == "ws"

    async def aclose(self) -> None:
        """The download client, once the job runner has stopped (its running jobs read their
        files through it during their grace period)."""
        api, self._api = self._api, None
        if api is not None:
            await api.aclose()
