"""Feishu/Lark on the platform contract: the webhook route, or the SDK's long connection.

``lark-oapi`` is imported only when the platform is opened (``bots.feishu.app``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.chat.platform import ChatPlatform, OpenPlatform, PlatformRoute
from bots.feishu.settings import FeishuSettings

if TYPE_CHECKING:
    from bots.feishu.api import FeishuApi
    from core.operations.runners import JobRunner


class FeishuPlatform(ChatPlatform[FeishuSettings]):
    settings_class = FeishuSettings

    routes = (PlatformRoute("/feishu/events", ("POST",)),)

    @classmethod
    def secret_patterns(cls) -> tuple[str, ...]:
        """Tenant, user and app access tokens (``t-``, ``u-``, ``a-`` and 24 or more
        characters; a ``t-shirt`` is no token)."""
        return (r"\b[tua]-[A-Za-z0-9_]{24,}",)

    _api: FeishuApi | None = None

    async def open(self, runner: JobRunner | None) -> OpenPlatform:
        from bots.feishu.api import FeishuApi
        from bots.feishu.delivery import FeishuPosters
        from bots.feishu.docs import FeishuDocs
        from bots.feishu.scopes import GroupMessages

        settings = self.settings
        self._api = api = FeishuApi(
            settings.app_id or "", settings.app_secret or "", settings.domain
        )
        # One per process: the adapter's start-up line and every run's card read it.
        group_messages = GroupMessages(api.granted_scopes, settings.group_messages)
        posters = FeishuPosters(
            api,
            self.services.store,
            edit_interval=settings.edit_interval,
            group_messages=group_messages,
            docs=FeishuDocs(api, folder=settings.doc_folder, sharing=settings.doc_sharing),
        )
        if runner is None:
            return OpenPlatform(posters)
        from bots.feishu.app import FeishuAdapter, feishu_markup

        chat = self.services.commands(runner, feishu_markup(), posters)
        adapter = FeishuAdapter(
            settings, chat, api, self.services.limits, group_messages=group_messages
        )
        await adapter.start()
        return OpenPlatform(posters, adapter)

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
