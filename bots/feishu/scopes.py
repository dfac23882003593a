"""Whether a reply that does not @-mention the bot reaches Fathom in a Feishu group.

Feishu delivers a group message that does not mention the bot (``im.message.receive_v1``)
only when the app holds the ``im:message.group_msg`` scope ("获取群组中所有消息", read all
messages in group chats; a sensitive scope an admin approves). With it, a plain reply in a
research's thread steers the research, and ``stop``, ``cancel`` and ``status`` typed there
work; without it only a reply that mentions the bot does, and the progress card says so.

``FATHOM_FEISHU_GROUP_MESSAGES`` says it (``true`` or ``false``); unset, Fathom asks Feishu's
scope-status API ("查询租户授权状态", ``GET /open-apis/application/v6/scopes``) at start and
again at most every :data:`CHECK_EVERY` seconds while runs are delivered (a grant or a
withdrawal is seen within that time). Until an answer has said, the scope is not assumed
held: a reply that mentions the bot works either way, so the card's hint is never false.
One object per process, shared by the adapter and the deliveries (like
:class:`bots.slack.scopes.SlackScopes`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bots.chat.errors import PlatformError
from core.timer import MONOTONIC, Timer, within

log = logging.getLogger(__name__)

#: The scope that makes Feishu deliver every group message to the app.
GROUP_MESSAGES_SCOPE = "im:message.group_msg"
#: Its name in the developer console (Chinese and English).
GROUP_MESSAGES_TITLE = "获取群组中所有消息 / Read all messages in group chats"
#: How often the scope-status API is asked again (seconds), and how long one call may take.
CHECK_EVERY = 600.0
CHECK_TIMEOUT = 5.0


class GroupMessages:
    """Whether plain group replies reach the app: told by the setting, else as Feishu's
    scope-status API last said."""

    def __init__(
        self,
        granted_scopes: Callable[[], Awaitable[frozenset[str]]],
        setting: bool | None = None,
        *,
        timer: Timer = MONOTONIC,
    ) -> None:
        self._granted_scopes = granted_scopes
        self._setting = setting
        self._timer = timer
        self._known: bool | None = setting
        self._checked_at: float | None = None
        #: Why the last check failed ("" when it did not).
        self.failure = ""

    @property
    def heard(self) -> bool:
        """Whether a reply without the mention reaches the app (False until known)."""
        return self._known is True

    @property
    def known(self) -> bool | None:
        """True or False once the setting or Feishu has said; None before."""
        return self._known

    @property
    def from_setting(self) -> bool:
        return self._setting is not None

    async def refresh(self) -> None:
        """Ask Feishu again when the setting does not say and the last answer is older than
        :data:`CHECK_EVERY` (or there is none); a failed call keeps what was known."""
        if self._setting is not None:
            return
        now = self._timer.now()
        if self._checked_at is not None and now - self._checked_at < CHECK_EVERY:
            return
        self._checked_at = now
        try:
            scopes = await within(self._timer, CHECK_TIMEOUT, self._granted_scopes())
        except Exception as exc:  # the card keeps saying to mention the bot
            self.failure = _reason(exc)
            log.warning(
                "feishu: could not ask whether the app holds %s (%s); asked again in %d min",
                GROUP_MESSAGES_SCOPE,
                self.failure,
                CHECK_EVERY // 60,
            )
            return
        self.failure = ""
        self._known = GROUP_MESSAGES_SCOPE in scopes

    def start_up_line(self) -> str:
        """The line ``fathom serve`` logs at start: whether plain replies are heard, and
        which scope (or setting) turns them on."""
        said = " (FATHOM_FEISHU_GROUP_MESSAGES)" if self.from_setting else ""
        if self._known is True:
            return (
                f"feishu: plain replies in research threads are heard{said}: the app holds "
                f"{GROUP_MESSAGES_SCOPE}"
            )
        if self._known is False:
            return (
                f"feishu: replies in research threads must @-mention the bot{said}: grant the "
                f"app {GROUP_MESSAGES_SCOPE} ({GROUP_MESSAGES_TITLE}) and publish a version to "
                "hear plain replies"
            )
        return (
            f"feishu: replies in research threads must @-mention the bot until Fathom learns "
            f"whether the app holds {GROUP_MESSAGES_SCOPE} ({self.failure or 'not asked yet'}); "
            "set FATHOM_FEISHU_GROUP_MESSAGES=true if it does"
        )


def _reason(error: Exception) -> str:
    if isinstance(error, TimeoutError):
        return f"no answer within {CHECK_TIMEOUT:g} s"
    if isinstance(error, PlatformError):  # Feishu's code and message, no secret
        return str(error)
    return error.__class__.__name__
