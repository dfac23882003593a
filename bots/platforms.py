"""The registry: every chat platform this code has, in the order ``/readyz`` shows them.

Adding a platform is writing its package (``bots/<name>/``: a settings class, a
:class:`~bots.chat.platform.ChatPlatform` subclass, its translation both ways) and listing
its class here; ``fathom serve``, ``fathom worker``, readiness, shutdown, the digest checks
and the delivery sweep pick it up from this tuple. Each class is light to import (its SDK is
imported when it is opened).
"""

from __future__ import annotations

from typing import Any

from bots.chat.platform import ChatPlatform
from bots.dingtalk.platform import DingTalkPlatform
from bots.feishu.platform import FeishuPlatform
from bots.slack.platform import SlackPlatform
from bots.teams.platform import TeamsPlatform

PlatformClass = type[ChatPlatform[Any]]

#: Every chat platform, by registration order.
PLATFORMS: tuple[PlatformClass, ...] = (
    SlackPlatform,
    FeishuPlatform,
    DingTalkPlatform,
    TeamsPlatform,
)


def secret_patterns(registry: tuple[PlatformClass, ...] = PLATFORMS) -> tuple[str, ...]:
    """Every platform's credential patterns, for the log redaction."""
    return tuple(pattern for cls in registry for pattern in cls.secret_patterns())


def titles(registry: tuple[PlatformClass, ...] = PLATFORMS) -> dict[str, str]:
    """Each platform's name and what people call it (``{"slack": "Slack", ...}``)."""
    return {cls.name: cls.title for cls in registry}
