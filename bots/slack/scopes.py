"""Whether a plain reply (no mention) in a channel thread reaches Fathom, as the bot token's
scopes tell.

Slack delivers a reply without a mention only through the ``message.channels`` and
``message.groups`` events, which need the ``channels:history`` and ``groups:history`` scopes
(the manifests ask for both). An app installed before they were added, or whose operator
removed them, only hears mentions: its progress messages then say to mention the bot to steer.

Every Web API answer names the token's scopes in its ``X-OAuth-Scopes`` header; the last seen
per workspace is kept by the process (one object, shared by its runs, like
:class:`bots.slack.refusals.SlackRefusals`). Until an answer has said, nothing is assumed
missing.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The header of every Web API answer that lists the token's scopes.
SCOPES_HEADER = "x-oauth-scopes"
PUBLIC_HISTORY, PRIVATE_HISTORY = "channels:history", "groups:history"


def _needed(channel: str) -> frozenset[str]:
    """The scopes a channel's plain replies need: a ``G`` channel is private; a ``C`` one
    may be either (private channels made since 2021 have ``C`` ids too); a DM (``D``) is
    addressed to the bot anyway."""
    if channel.startswith("G"):
        return frozenset({PRIVATE_HISTORY})
    if channel.startswith("C"):
        return frozenset({PUBLIC_HISTORY, PRIVATE_HISTORY})
    return frozenset()


class SlackScopes:
    """The bot token's scopes per workspace, as Slack's last answer there listed them."""

    def __init__(self) -> None:
        self._by_team: dict[str, frozenset[str]] = {}

    def note(self, team: str, headers: Mapping[str, str] | None) -> None:
        """Keep the scopes an answer's headers list (nothing when they do not say)."""
        if not headers:
            return
        listed = next((v for k, v in headers.items() if k.lower() == SCOPES_HEADER), None)
        if isinstance(listed, str):
            self._by_team[team] = frozenset(s.strip() for s in listed.split(",") if s.strip())

    def mention_needed(self, team: str, channel: str) -> bool:
        """Whether a reply in ``channel`` must mention the bot to reach it (known only once
        an answer from the workspace listed the token's scopes)."""
        scopes = self._by_team.get(team)
        return scopes is not None and not _needed(channel) <= scopes
