"""Who calls the research tool, and which of Fathom's threads and runs are theirs.

A :class:`Caller` is a workspace and a user in it, and the channel their threads are in:

- a principal (``fathom mcp``'s ``local``, or a ``FATHOM_MCP_TOKEN`` token's name) is its own
  workspace and user: threads ``mcp:<principal>:mcp:<thread>``, requested by
  ``mcp:<principal>:<principal>``;
- a Slack user calling through the Slackbot MCP client (``slack_identity_auth``: the request
  signed with the Slack app's signing secret, the user in its ``_meta.slack``; see
  ``bots.mcp.http``) is workspace ``slack-<team id>``, each user their own channel: threads
  ``mcp:slack-<team>:<user>:<thread>``, requested by ``mcp:slack-<team>:<user>``. A token's
  principal is lower case, a Slack id upper case, so the two never meet.

The requester key is what the per-user quotas count and ``fathom forget --user`` takes; the
thread key's prefix is what ``FATHOM_MCP_CONFIG``'s ``channels`` scope internal sources by
(``mcp:<principal>``; ``mcp:slack-<team>`` for a whole Slack workspace, or
``mcp:slack-<team>:<user>`` for one person).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bots.mcp.delivery import PLATFORM
from core.chat.stores import RunRecord
from core.values import ThreadKey

#: A Slack team or user id as Slack writes them (``T0123ABCD``, ``U0123ABCD``, ``W…``).
SLACK_ID = re.compile(r"[A-Z0-9]{2,32}")


class UnknownCaller(ValueError):
    """A request that should name its caller and does not (one line)."""


@dataclass(frozen=True)
class Caller:
    """A caller of the research tool (see the module)."""

    workspace: str
    user: str
    channel: str = PLATFORM

    @classmethod
    def principal(cls, name: str) -> Caller:
        """The caller a principal is (``local``, or a token's name)."""
        return cls(workspace=name, user=name)

    @classmethod
    def slack(cls, team_id: str, user_id: str) -> Caller:
        """A Slack user, each their own channel in their team's workspace."""
        return cls(workspace=f"slack-{team_id}", user=user_id, channel=user_id)

    def thread(self, thread_id: str) -> ThreadKey:
        """The thread ``thread_id`` (a uuid hex Fathom made) of this caller."""
        return ThreadKey(
            platform=PLATFORM, workspace=self.workspace, channel=self.channel, thread=thread_id
        )

    @property
    def requested_by(self) -> str:
        """Who asked, as runs record it."""
        return f"{PLATFORM}:{self.workspace}:{self.user}"

    @property
    def scope(self) -> str:
        """The ``FATHOM_MCP_CONFIG`` ``channels`` entry that names this caller most narrowly."""
        if self.channel == PLATFORM:
            return f"{PLATFORM}:{self.workspace}"
        return f"{PLATFORM}:{self.workspace}:{self.channel}"

    def owns(self, run: RunRecord) -> bool:
        """Whether ``run`` is this caller's: asked by them, in one of their threads."""
        prefix = f"{PLATFORM}:{self.workspace}:{self.channel}:"
        return run.requested_by == self.requested_by and run.thread_key.startswith(prefix)


def slack_caller(params: Mapping[str, Any] | None) -> Caller:
    """The Slack user a Slackbot MCP client's request names (``params._meta.slack``:
    ``team_id`` and ``user_id``); :class:`UnknownCaller` when it names none."""
    meta = (params or {}).get("_meta")
    slack = meta.get("slack") if isinstance(meta, Mapping) else None
    team = slack.get("team_id") if isinstance(slack, Mapping) else None
    user = slack.get("user_id") if isinstance(slack, Mapping) else None
    if not (isinstance(team, str) and SLACK_ID.fullmatch(team)):
        raise UnknownCaller("this request from Slack names no caller (_meta.slack.team_id)")
    if not (isinstance(user, str) and SLACK_ID.fullmatch(user)):
        raise UnknownCaller("this request from Slack names no caller (_meta.slack.user_id)")
    return Caller.slack(team, user)
